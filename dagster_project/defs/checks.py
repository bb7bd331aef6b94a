"""Great Expectations suites as blocking asset checks on every staged, mart and export table.

A failing blocking check stops everything downstream, and the snapshot is downstream of every
table: so one failing table means nothing of the run is published. Every other check still
runs, so the run reports all failures at once.
"""

import dagster as dg

from dagster_project.defs.marts import TABLE_KEYS
from dagster_project.expectations import SUITES
from dagster_project.resources import FlywheelResource
from dagster_project.sources import builtin_sources
from dagster_project.validation import record_validations, validate_table
from transforms.retrieval import EVENTLOG_STAGING


def _check_metadata(report) -> dict:
    return {
        "rows_validated": report.rows,
        "expectations": len(report.results),
        "failed": dg.MetadataValue.md("\n".join(
            f"- **{r.check.name}** (action {r.check.action}): "
            f"{r.unexpected_count:,} unexpected, observed {r.observed}, e.g. `{r.samples[:2]}`"
            for r in report.results if not r.success) or "none"),
    }


def table_check(table: str) -> dg.AssetChecksDefinition:
    key = dg.AssetKey(table.split("."))

    @dg.asset_check(asset=key, name="great_expectations", blocking=True,
                    description=f"Great Expectations suite for {table}; blocks the snapshot when it fails.")
    def _check(context: dg.AssetCheckExecutionContext, flywheel: FlywheelResource) -> dg.AssetCheckResult:
        with flywheel.state() as con:
            report = validate_table(con, table, run_id=context.op_execution_context.run_id)
            record_validations(con, report)
        return dg.AssetCheckResult(
            passed=report.success, severity=dg.AssetCheckSeverity.ERROR,
            description=None if report.success else f"{table}: nothing of this run is published.\n{report.describe()}",
            metadata=_check_metadata(report))

    return _check


BUILT = {f"staging.{name}" for name in [*builtin_sources(), "weighted_examples", *EVENTLOG_STAGING]} | {
    ".".join(key.path) for key in TABLE_KEYS}

# Only for tables some asset builds: a suite for a table that no longer exists must not turn
# into a check on an asset Dagster does not know.
defs = dg.Definitions(asset_checks=[table_check(table) for table in SUITES if table in BUILT])
