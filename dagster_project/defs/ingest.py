"""Ingestion and staging assets: two per source, generated from the source registry.

Each source differs only in its declaration (``dagster_project/sources/``); how it is read,
accounted for and deduplicated is the same engine, so the assets are made by one factory
instead of nine copies. Each asset reports its table's checks from its own step (ingest: the
accounting identity; staging: the Great Expectations suite, ``tables.gx_checks``).
"""


import dataclasses
from datetime import datetime, timezone

import dagster as dg

from dagster_project import versions
from dagster_project.engine import Ingestor, check_accounting
from dagster_project.engine.discovery import no_files_warning
from dagster_project.executor import SOURCE_TAG
from dagster_project.expectations import FUTURE_SLACK
from dagster_project.metadata import column_schema, count, markdown_table
from dagster_project.progress import reporter
from dagster_project.resources import FlywheelResource
from dagster_project.sources import builtin_sources, load_sources
from dagster_project.state import WRITER_TAGS, record_run
from dagster_project.tables import baseline_covers, gx_check_results, gx_checks, reused_metadata
from dagster_project.validation import apply_drops
from transforms.classify import q
from transforms.spec import SourceSpec
from transforms.sqlfiles import materialize
from transforms.staging import added_rows_in_scope, note_still_current, refresh_staging


class IngestConfig(dg.Config):
    full_refresh: bool = False
    """Drop this source's raw/staging/accounting, replay its bronze record, then read what is new."""


def ingest_asset(spec: SourceSpec) -> dg.AssetsDefinition:
    @dg.asset(
        key=["ingest", spec.name],
        group_name="ingest",
        description=f"Read new lines/rows of {spec.description} into raw.{spec.name}; "
        "quarantine what cannot be loaded; per-file accounting in ingest.files.",
        kinds={"duckdb"},
        check_specs=[dg.AssetCheckSpec(
            "accounting_balances", asset=["ingest", spec.name],
            description="Every line is loaded, quarantined or blank, and every quarantined "
                        "line is stored: lines_read = rows_loaded + rows_quarantined + blank_lines.")],
        op_tags={**WRITER_TAGS, SOURCE_TAG: spec.name},
    )
    def _ingest(context: dg.AssetExecutionContext, config: IngestConfig,
                flywheel: FlywheelResource) -> dg.MaterializeResult:
        settings = flywheel.checked_settings()
        # an ingest applying retention or an erasure pseudonymises with the key: generated here
        # when missing, by the first step, so that its warning is shown (privacy creates it silently)
        flywheel.pseudonym_key(context.log)
        live_spec = flywheel.sources().get(spec.name)
        with flywheel.state() as con:
            if live_spec is None:
                # Its files are not read; what the lake holds is kept, published, and still under
                # retention and erasure (a disabled source skipped both: an erased session came
                # back with it; and a lake that never had its raw table failed every staging run)
                context.log.warning(f"source {spec.name}: disabled in {settings.sources_file}: its files are not "
                                    "read; its rows are kept")
                declared = load_sources(settings.sources_file, disabled=True)[spec.name]  # its time zone
                Ingestor(con, declared, settings, context.run_id, progress=reporter(context)).run(
                    full_refresh=config.full_refresh, read_files=False)
                return dg.MaterializeResult(metadata={"disabled": True},
                                            check_results=[accounting_result(con, spec.name)])
            report = Ingestor(con, live_spec, settings, context.run_id,
                              progress=reporter(context)).run(full_refresh=config.full_refresh)
            counts = {
                "files_seen": len(report.files), "files_changed": len(report.changed_files),
                "lines": report.total("lines"), "loaded": report.total("loaded"),
                "quarantined": report.total("quarantined"), "blank": report.total("blank"),
                "deferred_bytes": report.total("deferred_bytes"),
            }
            warnings = [] if report.files else [
                no_files_warning(spec.name, live_spec.globs, settings.raw_dir, report.unlisted)]
            for warning in warnings:
                context.log.warning(warning)
            record_run(con, context.run_id, mode="full_refresh" if config.full_refresh else "incremental",
                       source=spec.name, counts=counts, warnings=warnings)
            by_reason = markdown_table(
                con, "select reason, count(*) as rows from ingest.quarantine "
                     "where source = $s and run_id = $r group by all order by rows desc",
                {"s": spec.name, "r": context.run_id})
            events = markdown_table(
                con, "select path, event, detail from ingest.file_events "
                     "where source = $s and run_id = $r order by path",
                {"s": spec.name, "r": context.run_id})
            accounting = accounting_result(con, spec.name, checked=True)  # Ingestor.run checked it
        mb = report.total("bytes_read") / 1e6
        return dg.MaterializeResult(check_results=[accounting], metadata={
            "files": len(report.files),
            "files_changed": len(report.changed_files),
            "lines_read": counts["lines"],
            "rows_loaded": counts["loaded"],
            "rows_quarantined": counts["quarantined"],
            "blank_lines": counts["blank"],
            "deferred_bytes": counts["deferred_bytes"],
            "megabytes_read": round(mb, 3),
            "seconds": round(report.seconds, 3),
            "bronze_entries_replayed": report.replayed_entries,
            # on the step's line only when retention removed some (the sample run without its date)
            **({"records_expired": report.expired} if report.expired else {}),
            "quarantined_by_reason": dg.MetadataValue.md(by_reason),
            "file_events": dg.MetadataValue.md(events),
        })

    return _ingest


def accounting_result(con, source: str, checked: bool = False) -> dg.AssetCheckResult:
    """The ``accounting_balances`` check of an ingest asset, evaluated in its own step.
    ``checked``: ``Ingestor.run`` has just checked it (it raises when the counts do not balance),
    and only ``ingest.runs`` was written since: its verdict stands."""
    totals = con.execute(
        "select count(*), coalesce(sum(lines_read), 0)::bigint, coalesce(sum(rows_loaded), 0)::bigint, "
        "coalesce(sum(rows_quarantined), 0)::bigint, coalesce(sum(blank_lines), 0)::bigint "
        "from ingest.files where source = ?", [source]).fetchall()[0]
    passed, problem = True, None
    if not checked:
        try:
            check_accounting(con, source)
        except RuntimeError as exc:
            passed, problem = False, str(exc)
    files, lines, loaded, quarantined, blank = totals
    return dg.AssetCheckResult(check_name="accounting_balances", passed=passed, metadata={
        "files": files, "lines_read": lines, "rows_loaded": loaded,
        "rows_quarantined": quarantined, "blank_lines": blank,
        **({"problem": problem} if problem else {}),
    })


def staging_asset(spec: SourceSpec) -> dg.AssetsDefinition:
    @dg.asset(
        key=["staging", spec.name],
        deps=[dg.AssetKey(["ingest", spec.name])],
        group_name="staging",
        description=f"One row per identity ({', '.join(spec.identity)}) of {spec.name}: the latest "
        f"version by ({', '.join([*spec.order, 'path', 'byte_offset'])}) that passes the drop expectations.",
        kinds={"duckdb"},
        check_specs=gx_checks([f"staging.{spec.name}"]),
        op_tags=WRITER_TAGS,
    )
    def _staging(context: dg.AssetExecutionContext, flywheel: FlywheelResource) -> dg.MaterializeResult:
        table = f"staging.{spec.name}"
        with flywheel.state() as con:
            now = datetime.now(timezone.utc)
            beyond = versions_beyond(con, spec, now)
            key = staging_key(con, spec, beyond)
            if versions.reusable(con, [table], key):
                if beyond:  # with none beyond, every version passes whatever the instant (a write spared)
                    note_still_current(con, spec, now)  # the labels' cutoff for sidecar events reads it
                return dg.MaterializeResult(metadata={
                    **reused_metadata(con, [table], context.run_id)[table],
                    "dagster/column_schema": column_schema(con, table)},
                    check_results=gx_check_results(con, [table], context.run_id))
            previous = versions.get(con, table)
            versions.invalidate(con, table)  # a build that fails half-way must not look current
            # incremental when sound; drop expectations (a time beyond the future slack) apply
            # before marts read it
            staged = refresh_staging(con, spec, run_id=context.run_id, drop=apply_drops, now=now)
            rows, drops = staged.rows, staged.drops
            versions.record_build(con, table, key, context.run_id)
            # which days' files the snapshot must hash again (all of them after a rebuild)
            versions.record_changes(con, table, key, previous, staged.changed_days)
            versions_loaded = count(con, f"select count(*) from raw.{q(spec.name)}")
            schema = column_schema(con, table)
            # only the re-decided identities can hold rows the last clean validation did not see
            scoped = baseline_covers(con, table, previous) and added_rows_in_scope(con, spec, staged)
            checks = gx_check_results(con, [table], context.run_id,
                                      row_scopes={table: staged.scope} if scoped else None)
        return dg.MaterializeResult(check_results=checks, metadata={
            "dagster/row_count": rows,
            "reused": False,
            "versions_loaded": versions_loaded,
            "superseded_versions": versions_loaded - rows - drops.total,
            "excluded_rows": drops.total,
            "staging_mode": staged.mode,
            "identities_redecided": staged.redecided,
            "excluded": dg.MetadataValue.json(drops.metadata()),
            "dagster/column_schema": schema,
        })

    return _staging


def versions_beyond(con, spec: SourceSpec, now: datetime) -> int | None:
    """How many raw versions the drop expectation "the last-wins time is not beyond now + slack"
    excludes (None: the source's order is no time)."""
    order = spec.order[0] if spec.order else None
    if not (order and any(f.name == order and f.time for f in spec.fields)):
        return None
    return count(con, f"select count(*) from raw.{q(spec.name)} where {q(order)} > $cutoff",
                 {"cutoff": now + FUTURE_SLACK}) if versions.exists(con, f"raw.{spec.name}") else 0


def staging_key(con, spec: SourceSpec, beyond: int | None) -> str:
    """Staging is a function of raw, the source's declaration and the code, and of the clock only
    through its drop expectation (``versions_beyond``). Of the clock, what matters is how many raw
    versions are still beyond it: that set only shrinks as time passes, so an equal count is an
    equal set and an equal table (a new day alone rebuilds nothing)."""
    return versions.input_key(con, [f"raw.{spec.name}"], {
        "spec": repr(dataclasses.asdict(spec)), "versions_beyond_now": beyond})


SOURCES = builtin_sources()


@dg.asset(
    key=["staging", "weighted_examples"],
    deps=[dg.AssetKey(["staging", "weighted_queue"]), dg.AssetKey(["staging", "weighted_ratings"])],
    group_name="staging",
    description="Queue rows and TUI ratings as one set of weighted examples, one row per content hash.",
    kinds={"duckdb"},
    check_specs=gx_checks(["staging.weighted_examples"]),
    op_tags=WRITER_TAGS,
)
def weighted_examples(context: dg.AssetExecutionContext, flywheel: FlywheelResource) -> dg.MaterializeResult:
    table = "staging.weighted_examples"
    with flywheel.state() as con:
        key = versions.input_key(con, ["staging.weighted_queue", "staging.weighted_ratings"], {})
        if versions.reusable(con, [table], key):
            metadata = reused_metadata(con, [table], context.run_id)[table]
        else:
            versions.invalidate(con, table)
            metadata = {"dagster/row_count": materialize(con, "staging/weighted_examples"), "reused": False}
            versions.record_build(con, table, key, context.run_id)
        by_origin = markdown_table(con, "select origin, label, count(*) as rows, sum(weight) as weight "
                                        "from staging.weighted_examples group by all order by all")
        checks = gx_check_results(con, [table], context.run_id)
    return dg.MaterializeResult(metadata={**metadata, "by_origin": dg.MetadataValue.md(by_origin)},
                                check_results=checks)


defs = dg.Definitions(
    assets=[ingest_asset(s) for s in SOURCES.values()] + [staging_asset(s) for s in SOURCES.values()]
    + [weighted_examples],
)
