"""Validation and publishing: GX suites as asset checks, atomic Parquet versions per dataset.

Staged tables get a blocking Great Expectations check (a failure stops everything downstream,
so nothing built from bad staging is published; the staging asset has already applied the
``drop`` expectations). Each export first drops the rows its ``drop`` expectations exclude
(recorded in ``ingest.excluded``), then validates and publishes only when no ``fail``
expectation failed and no drop was systemic; otherwise the run fails, the message names the
failed expectations with sample rows, and the previous version stays current.
"""

import dagster as dg

from dagster_project.defs.marts import TABLE_KEYS
from dagster_project.expectations import SUITES
from dagster_project.publish import publish_dataset
from dagster_project.resources import FlywheelResource
from dagster_project.tables import WAREHOUSE_TAG
from dagster_project.sources import builtin_sources
from dagster_project.validation import apply_drops, record_validations, validate_table
from transforms.retrieval import EVENTLOG_STAGING

TRAINING = ["sft", "kto", "dpo", "weighted"]
ANALYTICS = [key.path[1] for key in TABLE_KEYS if key.path[0] == "marts"]


def _check_metadata(report) -> dict:
    return {
        "rows_validated": report.rows,
        "expectations": len(report.results),
        "failed": dg.MetadataValue.md("\n".join(
            f"- **{r.check.name}** (action {r.check.action}): "
            f"{r.unexpected_count:,} unexpected, observed {r.observed}, e.g. `{r.samples[:2]}`"
            for r in report.results if not r.success) or "none"),
    }


def _drop_metadata(drops) -> dict:
    return {"excluded_rows": drops.total, "excluded": dg.MetadataValue.json(drops.metadata())}


def staging_check(table: str) -> dg.AssetChecksDefinition:
    key = dg.AssetKey(table.split("."))

    @dg.asset_check(asset=key, name="great_expectations", blocking=True,
                    description=f"Great Expectations suite for {table} (keys, enums, ranges, times).")
    def _check(context: dg.AssetCheckExecutionContext, flywheel: FlywheelResource) -> dg.AssetCheckResult:
        with flywheel.state() as con:
            report = validate_table(con, table, run_id=context.op_execution_context.run_id)
            record_validations(con, report)
        return dg.AssetCheckResult(
            passed=report.success, severity=dg.AssetCheckSeverity.ERROR,
            description=None if report.success else report.describe(), metadata=_check_metadata(report))

    return _check


def watermarks(con) -> dict:
    rows = con.execute("select source, count(*), sum(offset_bytes)::bigint, max(high_water_mark), "
                       "max(last_run_id) from ingest.files group by source order by source").fetchall()
    return {s: {"files": f, "bytes_consumed": b, "high_water_mark": h, "last_run_id": r} for s, f, b, h, r in rows}


def published_dataset(kind: str, name: str, table: str) -> dg.AssetsDefinition:
    key = dg.AssetKey([kind, name])

    @dg.asset(
        key=key, group_name="publish", deps=[dg.AssetKey(table.split("."))], kinds={"parquet"},
        description=f"{kind}/{name}: {table} as a versioned Parquet dataset in FLYWHEEL_EXPORT_DIR, "
        "published only if its blocking expectations pass.",
        check_specs=[dg.AssetCheckSpec("great_expectations", asset=key)],
        op_tags=WAREHOUSE_TAG,
    )
    def _publish(context: dg.AssetExecutionContext, flywheel: FlywheelResource) -> dg.MaterializeResult:
        settings = flywheel.settings()
        dest = settings.export_dir / kind / name
        with flywheel.state() as con:
            # drop expectations first: offending rows leave the table (ledger: ingest.excluded)
            drops = apply_drops(con, table, run_id=context.run_id)
            report = validate_table(con, table, run_id=context.run_id)
            record_validations(con, report)
            if not report.success:
                raise dg.Failure(
                    description=f"not published; {dest} keeps its previous version.\n{report.describe()}",
                    metadata={**_check_metadata(report), **_drop_metadata(drops)})
            manifest = publish_dataset(con, table, dest, run_id=context.run_id, watermarks=watermarks(con),
                                       validation=report.summary())
        return dg.MaterializeResult(
            metadata={"dagster/row_count": manifest["rows"], "content_hash": manifest["content_hash"],
                      "version": dg.MetadataValue.path(str(dest.resolve())),
                      "validation": dg.MetadataValue.json(report.summary()), **_drop_metadata(drops)},
            check_results=[dg.AssetCheckResult(passed=True, metadata=_check_metadata(report))],
        )

    return _publish


STAGED = {f"staging.{name}" for name in [*builtin_sources(), "weighted_examples", *EVENTLOG_STAGING]}

PUBLISHED = [published_dataset("training", name, f"exports.{name}") for name in TRAINING] + [
    published_dataset("analytics", name, f"marts.{name}") for name in ANALYTICS]
PUBLISHED_KEYS = [key for asset in PUBLISHED for key in asset.keys]

defs = dg.Definitions(
    assets=PUBLISHED,
    # Only for staging tables some asset builds: a suite for a table that no longer exists must
    # not turn into a check on an asset Dagster does not know.
    asset_checks=[staging_check(table) for table in SUITES if table in STAGED],
)
