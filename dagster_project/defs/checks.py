"""Great Expectations suites as blocking asset checks on every staged, mart and export table.

A failing blocking check stops everything downstream, and the snapshot is downstream of every
table: so one failing table means nothing of the run is published. Every other check still
runs, so the run reports all failures at once.

A table whose version is the one its last validation ran on (same suite code; a result with unexpected rows only the same day) keeps
that result without reading the table or importing Great Expectations (``versions``).
"""

from datetime import datetime, timezone

import dagster as dg

from dagster_project import versions
from dagster_project.defs.marts import TABLE_KEYS
from dagster_project.expectations import SUITES
from dagster_project.resources import FlywheelResource
from dagster_project.sources import builtin_sources
from dagster_project.validation import record_validations, validate_table
from transforms.retrieval import EVENTLOG_STAGING


def _check_result(report) -> dict:
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


def table_check(table: str) -> dg.AssetChecksDefinition:
    key = dg.AssetKey(table.split("."))

    @dg.asset_check(asset=key, name="great_expectations", blocking=True,
                    description=f"Great Expectations suite for {table}; blocks the snapshot when it fails.")
    def _check(context: dg.AssetCheckExecutionContext, flywheel: FlywheelResource) -> dg.AssetCheckResult:
        run_id = context.op_execution_context.run_id
        with flywheel.state() as con:
            today = datetime.now(timezone.utc).date()
            key = versions.validation_key(con, table)
            reused = versions.reuse_validation(con, table, key, run_id, today)
            if reused is not None:
                passed, result, validated_by = reused
            else:
                report = validate_table(con, table, run_id=run_id)
                record_validations(con, report)
                passed, result, validated_by = report.success, {**_check_result(report), "validated_on": str(today)}, None
                versions.record_validation(con, table, key, run_id, passed, result)
        description = result.get("description")
        return dg.AssetCheckResult(
            passed=passed, severity=dg.AssetCheckSeverity.ERROR,
            description=None if passed else f"{table}: nothing of this run is published.\n{description}",
            metadata={"rows_validated": result.get("rows_validated", 0), "expectations": result.get("expectations", 0),
                      "failed": dg.MetadataValue.md(result.get("failed", "none")),
                      "reused_from_run": validated_by or ""})

    return _check


BUILT = {f"staging.{name}" for name in [*builtin_sources(), "weighted_examples", *EVENTLOG_STAGING]} | {
    ".".join(key.path) for key in TABLE_KEYS}

# Only for tables some asset builds: a suite for a table that no longer exists must not turn
# into a check on an asset Dagster does not know.
defs = dg.Definitions(asset_checks=[table_check(table) for table in SUITES if table in BUILT])
