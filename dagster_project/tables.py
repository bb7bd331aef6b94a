"""One factory for assets that (re)build DuckDB tables in the state database.

Marts and export tables differ only in which tables they read and which builder makes them, so
each is declared as data (``TableGroup``) and turned into a Dagster multi-asset here.

A group whose inputs (code, the settings it ``reads``, its deps' versions) are those its tables
were built from is not built again: the run reuses them (``versions``).

Each table's Great Expectations suite is a blocking asset check declared on the asset that builds
the table and evaluated in the same step (``gx_checks``, ``gx_check_results``): a step of its own
per check cost ~40 ms of Dagster overhead each, even when the result is reused. A failing check
fails the step after every check of it has reported, so nothing downstream (the snapshot is
downstream of every table) runs and nothing of the run is published.

A builder that changed a table incrementally says which rows it wrote (``transforms.delta.Built``):
when the table it started from was validated clean, the drop checks and the validation look at
those rows only (as staging does), with the same results as on every row. A table the build left
as it was (nothing written, or a small table rebuilt whole to the same content) keeps its version:
its validation and its snapshot files are reused.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

import dagster as dg
import duckdb

from dagster_project import versions
from dagster_project.metadata import column_schema
from dagster_project.expectations import SUITES
from dagster_project.resources import FlywheelResource
from dagster_project.state import WRITER_TAGS
from dagster_project.validation import BASELINES, apply_drops, carry_exclusions, record_validations, validate_table
from transforms.delta import Built, days_of, rows_in
from transforms.sqlfiles import quote_table

# Returns its tables' row counts, or a ``Built`` naming the rows it wrote to each table it changed
# incrementally (then validation and the drop checks look at those).
Builder = Callable[[duckdb.DuckDBPyConnection, FlywheelResource, dg.AssetExecutionContext], Built | dict[str, int]]


@dataclass(frozen=True)
class TableGroup:
    name: str  # the op name
    group: str  # Dagster group
    tables: Sequence[str]  # "schema.table" built, in order
    deps: Sequence[str]  # asset keys read, like "staging/interactions"
    build: Builder
    description: str
    headline: Callable[[duckdb.DuckDBPyConnection], dict] | None = None  # extra metadata
    # Settings the builder reads (names of Settings attributes; "pseudonym_key": its hash):
    # changing one rebuilds the group, so a setting read but not named here is a bug.
    reads: Sequence[str] = ()
    # Per table: a predicate over an earlier ledger row (alias ``p``) true when an incremental
    # build recomputed its key (the build's temp tables say which). Such an exclusion is not
    # carried forward: the drop step saw that key again, and its row now passes or is no longer
    # produced (a relabelled interaction). Without one, every exclusion not back is carried.
    recomputed_exclusions: Mapping[str, str] = field(default_factory=dict)

    def key(self, table: str) -> dg.AssetKey:
        return dg.AssetKey(table.split("."))

    def input_key(self, con: duckdb.DuckDBPyConnection, flywheel: FlywheelResource, log=None) -> str:
        return versions.input_key(con, [d.replace("/", ".") for d in self.deps],
                                  read_settings(flywheel, self.reads, log))


def read_settings(flywheel: FlywheelResource, names: Sequence[str], log=None) -> dict:
    settings = flywheel.settings()
    return {name: versions.secret_hash(flywheel.pseudonym_key(log)) if name == "pseudonym_key"
            else getattr(settings, name) for name in names}


def reused_metadata(con: duckdb.DuckDBPyConnection, tables: Sequence[str], run_id: str) -> dict[str, dict]:
    """Metadata of each table this run did not rebuild: its rows and the exclusions of the run
    that built it. A few statements whatever the number of tables (a no-op reuses ~40)."""
    built = versions.get_many(con, tables)
    excluded: dict[str, dict[str, int]] = {}
    for table, expectation, n in versions.exclusions(con, run_id):
        excluded.setdefault(table, {})[expectation] = n
    counts = con.execute("select " + ", ".join(f"(select count(*) from {quote_table(t)})" for t in tables)
                         ).fetchone() if tables else ()
    return {table: {
        "dagster/row_count": int(rows),
        "reused": True,
        "built_by_run": built[table].run_id if built[table] else "",
        "excluded_rows": sum(excluded.get(table, {}).values()),
        "excluded": dg.MetadataValue.json({"excluded_by_expectation": excluded.get(table, {})}),
    } for table, rows in zip(tables, counts)}


GX_CHECK = "great_expectations"


def gx_checks(tables: Iterable[str]) -> list[dg.AssetCheckSpec]:
    """The blocking check of each table that has a suite (others have none to run)."""
    return [dg.AssetCheckSpec(GX_CHECK, asset=dg.AssetKey(table.split(".")), blocking=True,
                              description=f"Great Expectations suite for {table}; blocks the snapshot when it fails.")
            for table in tables if table in SUITES]


def gx_check_results(con: duckdb.DuckDBPyConnection, tables: Iterable[str], run_id: str,
                     row_scopes: dict[str, str] | None = None) -> list[dg.AssetCheckResult]:
    """Validate each table with a suite, or reuse the result of its last validation when the table
    is the version that validation ran on (same suite code; a failure only the same day).
    ``row_scopes``: table -> a predicate true of every row added since its last clean validation
    (``validate_table``'s ``row_scope``; see ``baseline_covers``)."""
    results = []
    today = datetime.now(timezone.utc).date()
    tables = [table for table in tables if table in SUITES]
    keys = {table: versions.validation_key_of(version) for table, version in versions.get_many(con, tables).items()}
    reused_results = versions.reuse_validations(con, keys, run_id, today)
    for table in tables:
        key = keys[table]
        reused = reused_results.get(table)
        if reused is not None:
            passed, result, validated_by = reused
        else:
            report = validate_table(con, table, run_id=run_id, row_scope=(row_scopes or {}).get(table))
            record_validations(con, report)
            passed, result, validated_by = report.success, {**_check_summary(report), "validated_on": str(today)}, None
            versions.record_validation(con, table, key, run_id, passed, result)
        # a warn expectation that failed: the table is published, and the UI shows a warning (a
        # failed WARN check blocks nothing), not a pass
        warned = passed and result.get("failed", "none") != "none"
        results.append(dg.AssetCheckResult(
            asset_key=dg.AssetKey(table.split(".")), check_name=GX_CHECK,
            passed=passed and not warned,
            severity=dg.AssetCheckSeverity.WARN if passed else dg.AssetCheckSeverity.ERROR,
            description=(f"{table}: nothing of this run is published.\n{result.get('description')}" if not passed
                         else f"{table}: published, with warnings:\n{result['failed']}" if warned else None),
            metadata={"rows_validated": result.get("rows_validated", 0), "expectations": result.get("expectations", 0),
                      "failed": dg.MetadataValue.md(result.get("failed", "none")),
                      "reused_from_run": validated_by or ""}))
    return results


def baseline_covers(con: duckdb.DuckDBPyConnection, table: str, version: versions.Version | None) -> bool:
    """The table's row baseline (``lineage.validated_rows``) holds every row of ``version``: the
    last validation ran on that version, passed, and stored the baseline (a clean validation of
    it; one that found nothing new keeps the older baseline's run, so this is conservative).
    Then rows added since are the only ones a ``row_scope`` must cover."""
    validation_key = versions.validation_key_of(version)
    if validation_key is None:
        return False
    try:
        found = con.execute(
            f"select count(*) from {versions.VALIDATED} v join {BASELINES} b "
            "on b.table_name = v.table_name and b.run_id = v.run_id "
            "where v.table_name = ? and v.validation_key = ? and v.passed",
            [table, validation_key]).fetchone()[0]
    except duckdb.CatalogException:  # never validated here
        return False
    return bool(found)


def _check_summary(report) -> dict:
    """What the check reports, JSON-able so a later run can report it again unchanged."""
    return {
        "rows_validated": report.rows,
        "expectations": len(report.results),
        "failed": "\n".join(
            f"- **{r.check.name}** (action {r.check.action}): "
            f"{r.unexpected_count:,} unexpected, observed {r.observed}, e.g. `{r.samples[:2]}`"
            for r in report.results if not r.success) or "none",
        "description": None if report.success else report.describe(),
    }


def changed_days(con: duckdb.DuckDBPyConnection, built: Built, table: str) -> set[str] | None:
    """The event days of every row ``built`` deleted from or appended to ``table``, None when that
    cannot be told (a whole rebuild, no event time). The caller checked that the appended rows
    are all still in their range."""
    if table not in built.appended or built.deleted_days.get(table) is None:
        return None
    appended = days_of(con, table, built.scope(table))
    return None if appended is None else built.deleted_days[table] | appended


def _untouched(built: Built, table: str, intact: set[str], dropped: int, before: versions.Version | None) -> bool:
    """The build changed no row of ``table``: it appended none (and its range says so), deleted
    none (no event day of a deleted row) and the drop checks removed none, starting from a
    version a completed build made (``invalidate`` leaves a random one behind a failed build)."""
    return (table in intact and built.appended[table][1] == 0 and built.deleted_days.get(table) == set()
            and not dropped and before is not None and before.input_key is not None)


def table_assets(spec: TableGroup) -> dg.AssetsDefinition:
    @dg.multi_asset(
        name=spec.name,
        specs=[
            dg.AssetSpec(
                key=spec.key(table), group_name=spec.group, kinds={"duckdb"},
                deps=[dg.AssetKey.from_user_string(d) for d in spec.deps],
                description=f"{table}: {spec.description}",
            )
            for table in spec.tables
        ],
        check_specs=gx_checks(spec.tables),
        op_tags=WRITER_TAGS,
        # One table of a group (`dg launch --assets marts/retrieval_summary`, the UI's Materialize on
        # one asset) failed in Dagster's "does not support subsetting" traceback: the group is built
        # and validated whole, as its tables come from one build, and the selection is reported.
        can_subset=True,
    )
    def _build(context: dg.AssetExecutionContext, flywheel: FlywheelResource):
        assets, checks = context.selected_asset_keys, context.selected_asset_check_keys
        for result in _build_group(context, flywheel):
            if (result.asset_key in assets if isinstance(result, dg.MaterializeResult)
                    else dg.AssetCheckKey(result.asset_key, result.check_name) in checks):
                yield result

    def _build_group(context: dg.AssetExecutionContext, flywheel: FlywheelResource):
        with flywheel.state() as con:
            key = spec.input_key(con, flywheel, context.log)
            if versions.reusable(con, spec.tables, key):
                extra = spec.headline(con) if spec.headline else {}
                reused = reused_metadata(con, spec.tables, context.run_id)
                for table in spec.tables:
                    yield dg.MaterializeResult(asset_key=spec.key(table), metadata={
                        **reused[table],
                        "dagster/column_schema": column_schema(con, quote_table(table)), **extra.get(table, {})})
                yield from gx_check_results(con, spec.tables, context.run_id)
                return
            built_by = {table: versions.get(con, table) for table in spec.tables}
            for table in spec.tables:  # a build that fails half-way must not look current
                versions.invalidate(con, table)
            built = spec.build(con, flywheel, context)
            built = built if isinstance(built, Built) else Built(dict(built))
            counts = built.rows
            # the tables whose appended rows all still lie in their rowid range
            intact = {table for table, (_, added) in built.appended.items()
                      if rows_in(con, table, built.scope(table)) == added}
            # a scope stands for "every row outside it was validated clean": only when the last
            # validation of the version the build started from passed with a row baseline
            scopes = {table: built.scope(table) for table in intact
                      if baseline_covers(con, table, built_by.get(table))}
            changed = {table: changed_days(con, built, table) if table in intact else None
                       for table in spec.tables}
            # drop expectations: rows that cannot be used leave the table before its check and
            # the snapshot read it; each is named in ingest.excluded (never silently lost)
            drops = {table: apply_drops(con, table, run_id=context.run_id, scope=scopes.get(table))
                     for table in spec.tables}
            # rows the drop checks delete are among the appended ones only when they looked at those
            changed = {table: days if table in scopes or not drops[table].total else None
                       for table, days in changed.items()}
            # a checkpoint after the deletes may renumber rows, only downwards: a range that lost
            # some of its rows is not used
            scopes = {table: scope for table, scope in scopes.items()
                      if rows_in(con, table, scope) == built.appended[table][1] - drops[table].total}
            # an incremental build leaves earlier exclusions out of the table: those of keys it did
            # not recompute still count (a table built whole was checked whole: nothing to carry)
            carried = {table: carry_exclusions(con, table, run_id=context.run_id,
                                               previous_run=before.run_id if before else None,
                                               recomputed=spec.recomputed_exclusions.get(table))
                       if table in built.appended else 0
                       for table, before in built_by.items()}
            for table in spec.tables:
                # a table rebuilt whole is compared by content with the version it replaces
                content = None if table in built.appended else versions.content_fingerprint(con, table)
                if (_untouched(built, table, intact, drops[table].total, built_by[table])
                        or versions.same_content(con, table, built_by[table], content)):
                    versions.record_unchanged(con, table, key, context.run_id, built_by[table])
                    continue
                versions.record_build(con, table, key, context.run_id, fingerprint=content)
                # the days whose snapshot files must be hashed again (all of them if None)
                versions.record_changes(con, table, key, built_by[table], changed[table])
            extra = spec.headline(con) if spec.headline else {}
            for table in spec.tables:
                yield dg.MaterializeResult(
                    asset_key=spec.key(table),
                    metadata={
                        "dagster/row_count": int(counts.get(table, 0)) - drops[table].total,
                        "reused": False,
                        "excluded_rows": drops[table].total + carried[table],
                        "excluded": dg.MetadataValue.json({**drops[table].metadata(),
                                                           "carried_from_earlier_runs": carried[table]}),
                        "dagster/column_schema": column_schema(con, quote_table(table)),
                        **extra.get(table, {}),
                    },
                )
            yield from gx_check_results(con, spec.tables, context.run_id, row_scopes=scopes)

    return _build
