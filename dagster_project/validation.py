"""Run a table's Great Expectations suite (GX 1.x, ephemeral context, suites in code).

The frame GX sees is built by one DuckDB query that selects exactly the columns the suite needs
(computing derived ones), so a million-row table costs a narrow pandas frame, not a copy of the
table. Results go to ``ingest.validations``; a failing blocking expectation raises
``ValidationFailed`` naming the expectation and showing sample offending rows.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from typing import Any

import duckdb

from dagster_project.expectations import SUITES, Check

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@dataclass
class CheckResult:
    check: Check
    success: bool
    observed: Any = None
    unexpected_count: int = 0
    samples: list[dict] = field(default_factory=list)


@dataclass
class ValidationReport:
    table: str
    run_id: str
    rows: int
    results: list[CheckResult]
    skipped: str | None = None

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results if r.check.blocking)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.check.blocking and not r.success]

    def describe(self) -> str:
        lines = [f"{self.table}: {len(self.failures)} blocking expectation(s) failed on {self.rows:,} rows"]
        for r in self.failures:
            lines.append(f"  ✗ {r.check.name} [{r.check.kind} on {r.check.column}]: "
                         f"{r.unexpected_count:,} unexpected, observed {r.observed}")
            for sample in r.samples[:5]:
                lines.append(f"      {json.dumps(sample, default=str, ensure_ascii=False)[:300]}")
        return "\n".join(lines)

    def summary(self) -> dict:
        return {"status": "skipped" if self.skipped else ("passed" if self.success else "failed"),
                "expectations": len(self.results), "failed_blocking": [r.check.name for r in self.failures],
                "failed_reported": [r.check.name for r in self.results if not r.success and not r.check.blocking]}


class ValidationFailed(Exception):
    def __init__(self, report: ValidationReport):
        super().__init__(report.describe())
        self.report = report


@cache
def _context():
    import great_expectations as gx

    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    # Progress bars would flood the run log (and CI's); analytics are off via GX_ANALYTICS_ENABLED.
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return context


def _expectation(check: Check):
    import great_expectations as gx

    kinds = {
        "not_null": lambda: gx.expectations.ExpectColumnValuesToNotBeNull(column=check.column, mostly=check.mostly),
        "unique": lambda: gx.expectations.ExpectColumnValuesToBeUnique(column=check.column),
        "in_set": lambda: gx.expectations.ExpectColumnValuesToBeInSet(column=check.column, value_set=list(check.value_set)),
        "between": lambda: gx.expectations.ExpectColumnValuesToBeBetween(
            column=check.column, min_value=check.min_value, max_value=check.max_value),
        "true": lambda: gx.expectations.ExpectColumnValuesToBeInSet(column=check.column, value_set=[True]),
    }
    return kinds[check.kind]()


def table_exists(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    schema, name = table.split(".")
    return bool(con.execute("select count(*) from information_schema.tables where table_schema = ? "
                            "and table_name = ?", [schema, name]).fetchall()[0][0])


def validate_table(con: duckdb.DuckDBPyConnection, table: str, *, run_id: str,
                   now: datetime | None = None, checks: list[Check] | None = None) -> ValidationReport:
    """Validate ``table`` with its suite; never raises for failed expectations (see ``enforce``)."""
    checks = checks if checks is not None else SUITES.get(table, [])
    now = now or datetime.now(timezone.utc)
    if not checks or not table_exists(con, table):
        return ValidationReport(table, run_id, 0, [], skipped="no suite" if not checks else "table missing")
    from transforms import text

    text.register(con)  # fw_norm for the split check
    columns = {}
    for check in checks:
        columns.setdefault(check.column, check.expr or f'"{check.column}"')
    select = ", ".join(f'{expr} as "{name}"' for name, expr in columns.items())
    sql = f"select {select} from {table}"
    params = {"now": now} if "$now" in sql else {}
    frame = con.execute(sql, params).df()

    context = _context()
    name = f"{table}-{run_id}".replace(".", "_")
    source = context.data_sources.add_or_update_pandas(name)
    asset = source.add_dataframe_asset(name="frame")
    batch = asset.add_batch_definition_whole_dataframe("whole").get_batch(batch_parameters={"dataframe": frame})
    results = []
    for check in checks:
        outcome = batch.validate(_expectation(check), result_format={"result_format": "COMPLETE"})
        detail = outcome.result or {}
        unexpected = int(detail.get("unexpected_count") or 0)
        index = detail.get("unexpected_index_list") or []
        samples = []
        if index:
            rows = frame.iloc[[i for i in index[:5] if isinstance(i, int)]] if all(isinstance(i, int) for i in index[:5]) else None
            if rows is not None:
                samples = json.loads(rows.to_json(orient="records", date_format="iso", default_handler=str))
        if not samples and detail.get("partial_unexpected_list"):
            samples = [{check.column: v} for v in detail["partial_unexpected_list"][:5]]
        observed = detail.get("observed_value")
        if observed is None and check.kind == "between" and len(frame):
            observed = frame[check.column].iloc[0] if check.expr and "over ()" in check.expr else None
        results.append(CheckResult(check, bool(outcome.success), observed, unexpected, samples))
    context.data_sources.delete(name)
    return ValidationReport(table, run_id, len(frame), results)


def record_validations(con: duckdb.DuckDBPyConnection, report: ValidationReport) -> None:
    con.execute("""create table if not exists ingest.validations (
        run_id varchar, table_name varchar, expectation varchar, kind varchar, column_name varchar,
        blocking boolean, success boolean, observed varchar, unexpected_count bigint, rows_validated bigint,
        sample_rows json, validated_at timestamptz)""")
    if not report.results:
        return
    con.executemany(
        "insert into ingest.validations values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now())",
        [(report.run_id, report.table, r.check.name, r.check.kind, r.check.column, r.check.blocking, r.success,
          None if r.observed is None else str(r.observed), r.unexpected_count, report.rows,
          json.dumps(r.samples, default=str, ensure_ascii=False)) for r in report.results])


def enforce(report: ValidationReport) -> None:
    if not report.success:
        raise ValidationFailed(report)
