"""Run a table's Great Expectations suite (GX 1.x, ephemeral context, suites in code).

Validating a changed table costs what is new:

* **Row-level** checks (not null, in set, between, not in the future, regex, roles: a row's
  outcome depends on that row alone) look only at the rows not seen by the table's last clean
  validation: rows whose checked columns hash to a value outside ``lineage.validated_rows``.
  Those go through every check in one DuckDB query (:func:`_screen`); a check that one of them
  may offend goes to GX on a narrow pandas frame of them, so clean rows never import GX and
  every failure is GX's verdict. Old rows passed then and still pass, so the counts on the new
  rows are restated for the whole table (:func:`_restate`) and the result is exactly GX's on
  every row. No baseline, a check that found offenders, an earlier run time or changed checks:
  the same on every row, then a new baseline (see :func:`_row_level`). ``incremental=False`` is
  the reference: GX on every row for every check.
* **Table-level** checks (uniqueness, compound uniqueness, row count, KTO class balance, columns
  derived with window functions such as split leakage) look at every row, in DuckDB SQL (group by
  / having), reported in GX's terms (:func:`_table_level`; ``tests/test_validation_incremental.py``
  compares both with GX). Split leakage reuses each prompt's stored group key
  (:func:`_per_group`, ``lineage.validation_group_keys``). When the caller names the rows added
  since the last clean validation (``row_scope``) and that validation found a uniqueness or
  split-leakage check clean (``lineage.validation_clean_checks``), only the keys of those rows
  are looked up (:func:`_scoped_table_level`); split leakage first compares their splits with
  each group's stored ones (``lineage.validation_group_values``). Schema checks read the DuckDB catalog.
* Sample offending rows (≤ 5, with the table's key and provenance columns) are fetched from DuckDB
  for failed checks only, so GX never materialises unexpected-index lists.

GX is imported when a frame first needs it (a run where nothing is new never imports it); one
context, data source and batch definition serve the whole process, and GX's per-frame md5
fingerprint (only a batch label) is switched off. Frames come through Arrow, strings as Arrow
buffers.

Why not a GX SQL datasource over duckdb-engine: in-process it cannot open the database file the
pipeline already holds ("Can't open a connection to same database file with a different
configuration"), and with duckdb 2.0 / duckdb_engine 0.17 GX's ``table.column_types`` metric
fails on every expectation.

Results are appended to ``ingest.validations`` (``record_validations``); ``enforce`` raises
``ValidationFailed`` naming each failed blocking expectation with sample rows. ``apply_drops``
runs a table's ``drop`` checks first: offending rows are deleted and recorded in the ledger
``ingest.excluded`` in one transaction, unless a check's offending share is systemic (then
nothing is dropped for it and its GX result fails the run). Nothing here imports Dagster.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import duckdb

from dagster_project.expectations import (MACROS, NATIVE_KINDS, SCHEMA_KINDS, SUITES, Check, order_keys,
                                          suite_key)
from transforms.sqlfiles import ensure_table, is_base_table, table_columns, transaction

# GX must never phone home (no network in production): set before great_expectations is imported.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

SAMPLE_ROWS = 5
SAMPLE_TEXT_CHARS = 200
KEY_COLUMNS = ("id", "record_id", "interaction_id", "example_id", "content_hash", "event_key", "chosen_id",
               "rejected_id", "query_id", "origin", "path", "line_number")


@dataclass
class CheckResult:
    check: Check
    success: bool | None  # None: skipped
    status: str  # passed | failed | skipped | error
    observed: Any = None
    unexpected_count: int = 0
    element_count: int | None = None
    samples: list[dict] = field(default_factory=list)
    detail: str | None = None

    @property
    def name(self) -> str:
        return self.check.name

    @property
    def expectation_type(self) -> str:
        return self.check.expectation_type

    @property
    def column(self) -> str | None:
        if self.check.kind == "compound_unique":
            return ",".join(self.check.columns)
        return self.check.column

    @property
    def blocking(self) -> bool:
        return self.check.blocking

    @property
    def action(self) -> str:
        return self.check.action

    def as_dict(self) -> dict:
        return {"expectation": self.name, "expectation_type": self.expectation_type, "column": self.column,
                "action": self.action, "blocking": self.blocking, "success": self.success, "status": self.status,
                "observed": self.observed, "unexpected_count": self.unexpected_count,
                "element_count": self.element_count, "samples": self.samples, "detail": self.detail}


@dataclass
class ValidationReport:
    table: str
    run_id: str
    rows: int
    results: list[CheckResult]
    skipped: str | None = None  # why the whole suite did not run (no table, no suite)
    validated_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    now: datetime | None = None
    seconds: float = 0.0
    rows_examined: int | None = None  # rows the row-level checks looked at (the new ones when incremental)

    @property
    def success(self) -> bool:
        """True when every blocking expectation passed (a skipped suite blocks nothing)."""
        return not self.failures

    @property
    def status(self) -> str:
        if self.skipped:
            return "skipped"
        return "passed" if self.success else "failed"

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.blocking and r.success is False]

    @property
    def warnings(self) -> list[CheckResult]:
        return [r for r in self.results if not r.blocking and r.success is False]

    def result(self, name: str) -> CheckResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(f"{self.table}: no expectation named {name!r}")

    def describe(self) -> str:
        if self.skipped:
            return f"{self.table}: validation skipped ({self.skipped})"
        head = (f"{self.table}: {len(self.failures)} blocking expectation(s) failed on {self.rows:,} rows"
                if self.failures else f"{self.table}: all blocking expectations passed on {self.rows:,} rows")
        lines = [head]
        for r in self.failures + self.warnings:
            tag = "✗" if r.blocking else "!"
            lines.append(f"  {tag} {r.name} [{r.expectation_type}"
                         f"{' on ' + r.column if r.column else ''}; action {r.action}"
                         f"{' (beyond its drop threshold: systemic)' if r.action == 'drop' else ''}]: "
                         f"{r.unexpected_count:,} unexpected, observed {_short(r.observed)}"
                         + (f" — {r.detail}" if r.detail else ""))
            for sample in r.samples[:SAMPLE_ROWS]:
                lines.append(f"      {_short(sample, 400)}")
        return "\n".join(lines)

    def summary(self) -> dict:
        """Compact status for manifests and Dagster metadata."""
        return {
            "status": self.status,
            "skipped": self.skipped,
            "rows": self.rows,
            "expectations": len(self.results),
            "passed": sum(1 for r in self.results if r.success),
            "failed_blocking": [r.name for r in self.failures],
            "failed_reported": [r.name for r in self.warnings],
            "excluded": {r.name: r.observed.get("excluded") for r in self.results
                         if r.action == "drop" and isinstance(r.observed, dict) and r.observed.get("excluded")},
            "run_id": self.run_id,
            "validated_at": self.validated_at.isoformat(),
        }


class ValidationFailed(Exception):
    """A blocking expectation failed; the message names each one and shows sample rows."""

    def __init__(self, report: ValidationReport):
        super().__init__(report.describe())
        self.report = report


def enforce(report: ValidationReport) -> ValidationReport:
    if not report.success:
        raise ValidationFailed(report)
    return report


# ---------------------------------------------------------------------------------------------
# Running a suite
# ---------------------------------------------------------------------------------------------

def validate_table(con: duckdb.DuckDBPyConnection, table: str, *, run_id: str, now: datetime | None = None,
                   db_path: str | None = None, checks: list[Check] | None = None,
                   incremental: bool = True, row_scope: str | None = None) -> ValidationReport:
    """Validate ``schema.table`` with its suite (or ``checks``); never raises for failed checks.

    ``now`` is the run time "not in the future" compares with (default: the current time;
    a naive value is read as UTC). ``db_path`` is accepted for symmetry with a SQL datasource
    but unused: the frame is built through ``con`` (see the module docstring).
    ``incremental=False`` ignores the table's baseline and has GX look at every row (the result is
    the same; see :func:`_row_level`).
    ``row_scope``: a predicate over the table (alias ``base``) that every row added since the
    table's last clean validation satisfies (the caller's guarantee, e.g. the identities an
    incremental staging step re-decided): with a baseline, only those rows are hashed, and a
    uniqueness check that validation found clean looks only at the keys of those rows
    (:func:`_scoped_table_level`).
    """
    started = time.perf_counter()
    now = _utc(now or datetime.now(timezone.utc))
    suite = checks if checks is not None else SUITES.get(table)
    if not suite:
        return ValidationReport(table, run_id, 0, [], skipped=f"no suite declared for {table}", now=now)
    columns = table_columns(con, table)
    if columns is None:
        return ValidationReport(table, run_id, 0, [], skipped=f"table {table} does not exist yet", now=now)

    for statement in MACROS:  # temp macros: nothing is written to the database
        con.execute(statement)
    quoted = _quote_table(table)
    rows = int(con.execute(f"select count(*) from {quoted}").fetchone()[0])
    results: dict[int, CheckResult] = {}
    # the table's row baseline, read once; its run (the last clean validation) is what the
    # caller's row_scope is relative to
    baseline = _baseline(con, table)
    since = baseline.run_id if incremental and baseline is not None and row_scope is not None else None
    row_checks: list[tuple[int, Check]] = []
    table_checks: list[tuple[Check, CheckResult]] = []
    whole_checks: list[tuple[int, Check]] = []  # through GX on every row (none in today's suites)
    for i, check in enumerate(suite):
        missing = [c for c in check.required_columns if c not in columns]
        if check.kind in NATIVE_KINDS or check.kind == "columns_present":
            results[i] = _native(check, columns)
        elif missing:
            if check.optional:
                results[i] = CheckResult(check, None, "skipped", detail=f"column(s) absent: {', '.join(missing)}")
            else:
                results[i] = CheckResult(check, False, "error", observed={"missing_columns": missing},
                                         detail=f"column(s) missing: {', '.join(missing)}")
        elif check.row_level:
            row_checks.append((i, check))
        elif check.kind in TABLE_SQL_KINDS:
            results[i] = (since and _scoped_table_level(con, table, quoted, check, columns, rows, now, row_scope, since,
                                                        run_id)
                          or _table_level(con, quoted, check, rows, now, keys_of=table if incremental else None,
                                          run_id=run_id))
            table_checks.append((check, results[i]))
        else:
            whole_checks.append((i, check))

    if incremental:
        _note_clean(con, table, table_checks, columns, run_id)
    examined = 0
    if whole_checks:
        results.update(_gx_on_frame(con, table, run_id, quoted, whole_checks, rows, now))
        examined = rows
    if row_checks:
        found, examined_rows = _row_level(con, table, quoted, columns, row_checks, rows, run_id, now, incremental,
                                          row_scope, baseline)
        results.update(found)
        examined = max(examined, examined_rows)

    for i, result in results.items():
        if result.status == "failed" and result.check.kind not in SCHEMA_KINDS | {"row_count", "mean_between"}:
            try:
                result.samples = _samples(con, table, columns, result.check, now)
            except duckdb.Error as exc:  # never let sampling hide the failure itself
                result.detail = f"could not fetch sample rows: {exc}"

    ordered = [results[i] for i in range(len(suite))]
    _note_exclusions(con, table, run_id, ordered)
    return ValidationReport(table, run_id, rows, ordered, now=now, seconds=time.perf_counter() - started,
                            rows_examined=examined)


# ---------------------------------------------------------------------------------------------
# Row-level checks: GX on the rows not validated before
# ---------------------------------------------------------------------------------------------

BASELINES = "lineage.validation_baselines"
VALIDATED_ROWS = "lineage.validated_rows"
# Bump when what a baseline means changes (the hash, the result arithmetic): every table is then
# validated whole once.
BASELINE_SCHEME = "1"


def _row_level(con: duckdb.DuckDBPyConnection, table: str, quoted: str, columns: dict[str, str],
               checks: list[tuple[int, Check]], rows: int, run_id: str, now: datetime,
               incremental: bool, row_scope: str | None = None, stored: Baseline | None = None
               ) -> tuple[dict[int, CheckResult], int]:
    """Row-level checks (not null, in set, between, regex, roles...): only the new rows are looked at.

    A row's outcome depends on its own values alone, so a row whose checked columns hash to a
    row the previous validation saw, when that validation found no offender for any of these
    checks, cannot offend now: only the other rows (appended or replaced) are checked (SQL, then
    GX for a check one of them may offend: :func:`_screen`), and the
    counts are restated for the whole table (old rows contribute no offender), so the result
    equals GX's on every row. The baseline is the set of 64-bit hashes of the checked columns of
    every row of the last clean validation (``lineage.validated_rows``) with a fingerprint of the
    checks, the column types and the DuckDB and GX versions (``hash`` is not stable across
    versions), and the run time it was valid at: "not in the future" only gets looser as time
    passes, so an earlier ``now`` validates whole. Anything else (no or another baseline, a check
    that found offenders, a ``mostly`` below 1, a view) validates every row and, when clean,
    records the baseline for the next time. A 64-bit collision between a new offending row and an old row
    would hide it: about n_old × n_new / 2^64 (5e-10 for 10^6 × 10^4).
    """
    needed = sorted({c for _, check in checks for c in check.required_columns})
    fingerprint = hashlib.sha256(json.dumps(
        [BASELINE_SCHEME, duckdb.__version__, _gx_version(), [repr(c) for _, c in checks],
         [(c, columns[c]) for c in needed]], default=str).encode()).hexdigest()
    keep = bool(needed) and all(c.gx_mostly == 1.0 for _, c in checks) and _is_table(con, table)
    baseline = stored if keep and incremental else None
    use = baseline is not None and baseline.fingerprint == fingerprint and baseline.valid_at <= now
    where = ""
    every_row = (f"create or replace temp table _fw_rows as select rowid as rid, "
                 f"hash({', '.join(_q(c) for c in needed)}) as h from {quoted} base")
    # Rows outside the caller's scope were in the table the baseline was taken of: only the
    # scope can hold new rows, so hashing every row (the cost that grows with the table) is spared.
    scoped = use and row_scope is not None
    if keep:  # a table of its own, not a subquery: the anti join then builds on the smaller side
        con.execute(every_row + (f" where {row_scope}" if scoped else ""))
    examined = rows
    if use:  # the rows whose hash the baseline lacks, with it (the statement returns their number)
        examined = int(con.execute(
            f"create or replace temp table _fw_new as select rid, h from _fw_rows anti join "
            f"(select row_hash from {VALIDATED_ROWS} where table_name = ?) v on h = v.row_hash", [table]).fetchone()[0])
        where = " where rowid in (select rid from _fw_new) order by rowid"

    results: dict[int, CheckResult] = {}
    if not incremental:  # the reference: GX on every row
        results.update(_gx_on_frame(con, table, run_id, quoted, checks, rows, now))
    elif examined or not use:
        scope = " where rowid in (select rid from _fw_new)" if use else ""
        screened = _screen(con, quoted, columns, checks, now, scope)
        suspects = [(i, c) for i, c in checks if screened is None or screened[i] is None]
        if suspects:  # GX decides for every check some row in scope may offend
            results.update(_gx_on_frame(
                con, table, run_id, quoted, suspects, rows, now, where=where,
                restate=(lambda check, detail: _restate(con, quoted, check, detail, rows, columns)) if use else None))
        for i, check in checks:
            if i not in results:
                detail = _restate(con, quoted, check, screened[i], rows, columns)
                results[i] = _from_detail(check, detail["success"], detail, now)
    else:  # nothing new: the old rows passed and still pass
        present = _any_non_null(con, quoted, [c for _, c in checks if c.kind != "not_null"], columns)
        for i, check in checks:
            detail = _restate(con, quoted, check, {"unexpected_count": 0, "element_count": 0,
                                                   "unexpected_percent": 0.0 if present.get(check.name) else None},
                              rows, columns)
            results[i] = _from_detail(check, detail["success"], detail, now)

    if keep:
        clean = all(results[i].status == "passed" and not results[i].unexpected_count for i, _ in checks)
        if not clean:
            _store_baseline(con, table, None, now, run_id, stored)
        elif not use:
            _store_baseline(con, table, fingerprint, now, run_id, stored)
        elif examined:
            _store_baseline(con, table, fingerprint, now, run_id, stored, add_only=True, rows=rows,
                            every_row=every_row if scoped else None)
        # else: nothing new, the baseline still holds (as of its own, earlier run time)
        con.execute("drop table if exists _fw_new; drop table if exists _fw_rows")
    return results, examined


def _screen(con: duckdb.DuckDBPyConnection, quoted: str, columns: dict[str, str],
            checks: list[tuple[int, Check]], now: datetime, scope: str = "") -> dict[int, dict | None] | None:
    """The rows in ``scope`` (a where clause: the new rows, or every row when there is no
    baseline) through every row-level check in one DuckDB query.

    Per check, GX's result on those rows when none offends (no unexpected value, the percentage
    0 or ``None`` when every value is missing), else ``None``: GX then looks at them. GX's fixed
    cost (importing it, ~2 s; then ~50 ms per expectation) dwarfs a few thousand new rows, its
    pandas frame costs more than the scan for a whole table (39 suites on the 100k lake: 2.3 s
    instead of 12.3 s), and when nothing offends its result carries nothing but these counts;
    where something may offend, GX earns its keep: its counts, unexpected values and semantics
    are the report.

    A check SQL calls clean must be clean for GX too: the predicates are the ones that choose
    the samples and the dropped rows, and pandas' missing values (NULL, float NaN) are missing
    here too. SQL may be stricter (a regex's ``$`` before a final newline), which only sends the
    check to GX. A regex on anything but text, or with a POSIX class (``[[:alpha:]]``: RE2 and
    Python's ``re`` read it differently), always goes to GX. ``None`` when the query fails (e.g.
    a column of the wrong type): GX reports that.
    """
    select, counts, to_gx = [], [], set()
    for i, check in checks:
        if check.kind == "regex" and (check.expr or _norm_type(columns.get(check.column, "")) != "VARCHAR"
                                      or "[:" in (check.regex or "")):
            to_gx.add(i)
            continue
        value = _value(check, columns)
        predicate, _ = _offending(check, now, v=f"__v{i}")
        select.append(f"{value} as __v{i}")
        counts.append(f"count(*) filter (where {predicate}), count(__v{i})")
    if not counts:
        return {i: None for i in to_gx}
    try:
        found = con.execute(f"select count(*), {', '.join(counts)} from (select {', '.join(select)} "
                            f"from {quoted}{scope})").fetchone()
    except duckdb.Error:
        return None
    new = int(found[0])
    out: dict[int, dict | None] = {i: None for i in to_gx}
    for n, (i, check) in enumerate([(i, c) for i, c in checks if i not in to_gx]):
        unexpected, nonnull = int(found[1 + 2 * n]), int(found[2 + 2 * n])
        present = new if check.kind == "not_null" else nonnull
        out[i] = None if unexpected else {"element_count": new, "unexpected_count": 0,
                                          "unexpected_percent": 0.0 if present else None,
                                          "partial_unexpected_list": [], "partial_unexpected_counts": []}
    return out


def _value(check: Check, columns: dict[str, str] | None = None) -> str:
    """The checked value in SQL, missing where pandas (so GX) reads it as missing: NULL and float NaN."""
    value = check.expr or _q(check.column)
    if columns and _norm_type(columns.get(check.column or "", "")) in ("DOUBLE", "FLOAT", "REAL"):
        return f"nullif({value}, 'nan'::double)"
    return value


@functools.cache
def _gx_version() -> str:
    """Read once per process: each read parses the package's metadata file (~5 ms)."""
    from importlib.metadata import version

    return version("great_expectations")  # without importing GX (2 s)


def _restate(con: duckdb.DuckDBPyConnection, quoted: str, check: Check, detail: dict, rows: int,
             columns: dict[str, str] | None = None) -> dict:
    """A GX map result on the new rows, restated for the whole table (whose old rows all passed).

    GX's arithmetic (``expectation._format_map_output``): the percentage is of the non-null rows
    (of all rows for ``not_null``), ``None`` when there are none; success is vacuous then.
    """
    unexpected = int(detail.get("unexpected_count") or 0)
    if check.kind == "not_null":
        nonnull = None
    elif not unexpected and detail.get("unexpected_percent") is not None:
        nonnull = 1  # some new row is non-null; the exact count cannot change 0 %
    elif not unexpected:
        nonnull = int(con.execute(f"select exists (select 1 from {quoted} where ({_value(check, columns)}) "
                                  f"is not null)::int").fetchone()[0])
    else:
        nonnull = int(con.execute(f"select count({_value(check, columns)}) from {quoted}").fetchone()[0])
    success, counts = _map_outcome(rows, nonnull, unexpected, check.gx_mostly)
    return {**detail, **counts, "success": success}


def _map_outcome(total: int, nonnull: int | None, unexpected: int, mostly: float) -> tuple[bool, dict]:
    """GX's map-expectation success and counts; ``nonnull`` None: every row counts (``not_null``)."""
    if nonnull is None:
        success = total == 0 or (total - unexpected) / total >= mostly
        percent = unexpected / total * 100 if total else None
    else:
        success = total == 0 or nonnull == 0 or (nonnull - unexpected) / nonnull >= mostly
        percent = unexpected / nonnull * 100 if total and nonnull else None
    return success, {"element_count": total, "unexpected_count": unexpected, "unexpected_percent": percent}


def _is_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """A base table (a view has no rowid: it is validated whole). A catalog lookup, not a failing
    query: an error would abort the caller's transaction."""
    return is_base_table(con, table)


def forget_baselines(con: duckdb.DuckDBPyConnection) -> None:
    """Drop every validation baseline (erasure: the row hashes are derived from personal data);
    the next validation of each table looks at every row and records a fresh one."""
    con.execute(f"drop table if exists {VALIDATED_ROWS}")
    con.execute(f"drop table if exists {BASELINES}")
    con.execute(f"drop table if exists {GROUP_KEYS}")
    con.execute(f"drop table if exists {GROUP_VALUES}")
    con.execute(f"drop table if exists {GROUP_VALUES_RUNS}")
    con.execute(f"drop table if exists {CLEAN_CHECKS}")


def _any_non_null(con: duckdb.DuckDBPyConnection, quoted: str, checks: list[Check],
                  columns: dict[str, str] | None = None) -> dict[str, bool]:
    """Per check: does any row hold a non-null checked value (GX's percentage is ``None`` if not)?"""
    if not checks:
        return {}
    found = con.execute("select " + ", ".join(
        f"exists (select 1 from {quoted} where ({_value(c, columns)}) is not null)" for c in checks)).fetchone()
    return {c.name: bool(x) for c, x in zip(checks, found)}


CLEAN_CHECKS_COLUMNS = "table_name varchar not null, check_key varchar not null, run_id varchar not null"
GROUP_KEYS_COLUMNS = ("table_name varchar not null, group_expr varchar not null, content_hash ubigint not null, "
                      "group_hash ubigint")


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Every table validation writes: created before a run's steps, which may run at once (two
    transactions creating one table conflict)."""
    _ensure_baselines(con)
    ensure_table(con, CLEAN_CHECKS, CLEAN_CHECKS_COLUMNS)
    ensure_table(con, GROUP_KEYS, GROUP_KEYS_COLUMNS)
    ensure_table(con, GROUP_VALUES, GROUP_VALUES_COLUMNS)
    ensure_table(con, GROUP_VALUES_RUNS, GROUP_VALUES_RUNS_COLUMNS)
    ensure_validations_table(con)
    _reorder_validations_table(con)
    ensure_excluded_table(con)


def _ensure_baselines(con: duckdb.DuckDBPyConnection) -> None:
    # lineage is private: never published (snapshot.WAREHOUSE_SCHEMAS)
    ensure_table(con, BASELINES, "table_name varchar primary key, fingerprint varchar not null, "
                                 "valid_at timestamptz not null, hashes bigint, run_id varchar, updated_at timestamptz")
    ensure_table(con, VALIDATED_ROWS, "table_name varchar not null, row_hash ubigint not null")


@dataclass(frozen=True)
class Baseline:
    """A table's row baseline (``lineage.validation_baselines``): what its hashes were checked
    with, the run time they hold at, how many ``lineage.validated_rows`` holds, and the run of
    that clean validation."""

    fingerprint: str
    valid_at: datetime
    hashes: int | None
    run_id: str | None


def _baseline(con: duckdb.DuckDBPyConnection, table: str) -> Baseline | None:
    if not _is_table(con, BASELINES):  # never validated here
        return None
    row = con.execute(f"select fingerprint, valid_at, hashes, run_id from {BASELINES} where table_name = ?",
                      [table]).fetchone()
    return Baseline(row[0], _utc(row[1]), row[2], row[3]) if row else None


def _store_baseline(con: duckdb.DuckDBPyConnection, table: str, fingerprint: str | None, now: datetime,
                    run_id: str, held: Baseline | None, *, add_only: bool = False, rows: int = 0,
                    every_row: str | None = None) -> None:
    """Record the hashes of ``_fw_rows`` as validated at ``now`` (``fingerprint`` None: forget them).
    ``held``: the table's baseline as the validation found it (``_baseline``).

    ``add_only``: only the new rows' hashes (``_fw_new``) are added. A hash left by a row since
    deleted is still sound (that content passed), so the set is rewritten only when such hashes
    outnumber the table's rows (``every_row``: how to hash every row when ``_fw_rows`` holds a
    scope only). No transaction of its own (the caller may hold one): the
    baseline's row is deleted first and inserted last, so an interruption anywhere leaves no
    baseline (the next validation looks at every row), never one that claims too much.
    """
    if fingerprint is None and held is None:
        return
    _ensure_baselines(con)
    con.execute(f"delete from {BASELINES} where table_name = ?", [table])
    hashes = 0
    if add_only:
        added = con.execute(f"insert into {VALIDATED_ROWS} select distinct ?, h from _fw_new", [table]).fetchone()[0]
        # _fw_new holds only hashes the baseline lacks: the count adds up (no scan of every hash)
        hashes = (int(held.hashes) + int(added) if held is not None and held.hashes is not None else
                  int(con.execute(f"select count(*) from {VALIDATED_ROWS} where table_name = ?",
                                  [table]).fetchone()[0]))
    if not add_only or hashes > 2 * rows + 1000:
        con.execute(f"delete from {VALIDATED_ROWS} where table_name = ?", [table])
        hashes = 0
        if fingerprint is not None:
            if every_row is not None:
                con.execute(every_row)
            hashes = con.execute(f"insert into {VALIDATED_ROWS} select distinct ?, h from _fw_rows",
                                 [table]).fetchone()[0]
    if fingerprint is not None:
        con.execute(f"insert into {BASELINES} values (?, ?, ?, ?, ?, now())", [table, fingerprint, now, hashes, run_id])


# ---------------------------------------------------------------------------------------------
# Table-level checks: DuckDB SQL over the whole table, in GX's terms
# ---------------------------------------------------------------------------------------------

TABLE_SQL_KINDS = {"unique", "compound_unique", "row_count", "mean_between", "between", "true", "not_null"}


def _table_level(con: duckdb.DuckDBPyConnection, quoted: str, check: Check, rows: int, now: datetime,
                 keys_of: str | None = None, run_id: str | None = None) -> CheckResult:
    """Uniqueness, compound uniqueness, row count, mean and window-derived columns, as GX reports them.

    GX (pandas) semantics: ``unique`` counts every non-null row whose value occurs twice or more
    (``duplicated(keep=False)``), of the non-null rows; ``compound_unique`` the same over the rows
    where not every column is null (``ignore_row_if="all_values_are_missing"``), nulls equal to
    each other; a mean of no values fails with observed ``None``. ``keys_of``: the table whose
    stored group keys a ``per_group`` check may use (:func:`_per_group`).
    """
    k = check.kind
    value = check.expr or (_q(check.column) if check.column else "null")
    try:
        if k == "row_count":
            ok = ((check.min_value is None or rows >= check.min_value)
                  and (check.max_value is None or rows <= check.max_value))
            return _from_detail(check, ok, {"observed_value": rows}, now)
        if k == "mean_between":
            mean, n_true, n_false = con.execute(
                f"select avg(__v)::double, coalesce(count_if(__v = 1), 0), coalesce(count_if(__v = 0), 0) "
                f"from (select {value} as __v from {quoted})").fetchone()
            ok = (mean is not None and (check.min_value is None or mean >= check.min_value)
                  and (check.max_value is None or mean <= check.max_value))
            result = _from_detail(check, ok, {"observed_value": mean}, now)
            result.observed = _balance(check, mean, int(n_true), int(n_false))
            return result
        if k == "compound_unique":
            cols = ", ".join(_q(c) for c in check.columns)
            all_null = " and ".join(f"{_q(c)} is null" for c in check.columns)
            nonnull, unexpected = con.execute(
                f"select coalesce(sum(n), 0)::bigint, coalesce(sum(n) filter (where n > 1), 0)::bigint from "
                f"(select count(*) as n from {quoted} where not ({all_null}) group by {cols})").fetchone()
        elif k == "unique":
            nonnull, unexpected = con.execute(
                f"select coalesce(sum(n), 0)::bigint, coalesce(sum(n) filter (where n > 1), 0)::bigint from "
                f"(select count(*) as n from (select {value} as __v from {quoted}) where __v is not null "
                f"group by __v)").fetchone()
        elif check.per_group and keys_of and (counted := _per_group(con, quoted, keys_of, check, rows, now,
                                                                    run_id=run_id)):
            nonnull, unexpected = counted
        else:  # a row-wise kind over a derived column that looks at other rows (window)
            predicate, _ = _offending(check, now)
            nonnull, unexpected = con.execute(
                f"with base as (select {value} as __v from {quoted}) "
                f"select count(__v), count(*) filter (where {predicate}) from base").fetchone()
    except duckdb.Error as exc:  # e.g. a column of the wrong type: the check errs, the others still run
        return CheckResult(check, False, "error", detail=f"cannot evaluate: {str(exc).splitlines()[0][:300]}")
    success, detail = _map_outcome(rows, None if k == "not_null" else int(nonnull), int(unexpected),
                                   check.gx_mostly)
    return _from_detail(check, success, detail, now)


# Per table and table-level check (a fingerprint of it): the run whose validation found it with no
# unexpected row, when that is the latest validation of the table.
CLEAN_CHECKS = "lineage.validation_clean_checks"


def _check_key(check: Check, columns: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps([BASELINE_SCHEME, duckdb.__version__, repr(check),
                                      [(c, columns.get(c)) for c in check.required_columns]],
                                     default=str).encode()).hexdigest()[:32]


def _scoped(check: Check) -> bool:
    """Whether a clean result of ``check`` can be carried forward looking at the new rows' keys.

    Uniqueness: rows outside the scope were all in the table when it had no duplicate, so every
    duplicate now shares its key with a row in the scope. A per-group distinct count bounded
    above only: a group of old rows only is part of an old group, which was within the bound
    (a lower bound could be broken by a deletion)."""
    if check.kind == "unique":
        return check.expr is None
    if check.kind == "compound_unique":
        return True
    return bool(check.per_group) and check.kind == "between" and check.min_value is None \
        and check.max_value is not None


def _note_clean(con: duckdb.DuckDBPyConnection, table: str, results: list[tuple[Check, CheckResult]],
                columns: dict[str, str], run_id: str) -> None:
    """Record which of the table-level ``results`` found nothing unexpected in this validation
    (and forget the others): one delete and one insert for the table's checks."""
    keys = {_check_key(check, columns): result.status == "passed" and not result.unexpected_count
            for check, result in results if _scoped(check)}
    if not keys or (not any(keys.values()) and not _is_table(con, CLEAN_CHECKS)):
        return
    ensure_table(con, CLEAN_CHECKS, CLEAN_CHECKS_COLUMNS)
    con.execute(f"delete from {CLEAN_CHECKS} where table_name = ? and check_key in (select unnest(?::varchar[]))",
                [table, list(keys)])
    clean = [key for key, ok in keys.items() if ok]
    if clean:
        con.execute(f"insert into {CLEAN_CHECKS} select ?, unnest(?::varchar[]), ?", [table, clean, run_id])


def _scoped_table_level(con: duckdb.DuckDBPyConnection, table: str, quoted: str, check: Check,
                        columns: dict[str, str], rows: int, now: datetime, scope: str,
                        since: str, run_id: str | None = None) -> CheckResult | None:
    """A uniqueness (or bounded per-group) check over the keys of the rows in ``scope`` only, when
    the validation of run ``since`` found it clean (None: the whole-table query decides).

    ``scope`` is the caller's guarantee that every row outside it was in the table at that
    validation (``validate_table``'s ``row_scope``). Then a duplicate key (a group beyond its
    bound) has a row in the scope, so counting the rows whose key is one of the scope's gives
    GX's unexpected count; the non-null count is the whole table's (one cheap count).
    """
    if not _scoped(check) or not _is_table(con, CLEAN_CHECKS):
        return None
    found = con.execute(f"select run_id from {CLEAN_CHECKS} where table_name = ? and check_key = ?",
                        [table, _check_key(check, columns)]).fetchone()
    if found is None or found[0] != since:
        return None
    try:
        if check.kind == "unique":
            col = _q(check.column)
            nonnull, unexpected = con.execute(
                f"select (select count({col}) from {quoted}), (select coalesce(sum(n), 0)::bigint from ("
                f"select count(*) as n from {quoted} t where {col} in (select {col} from {quoted} base "
                f"where ({scope}) and {col} is not null) group by {col} having count(*) > 1))").fetchone()
        elif check.kind == "compound_unique":
            cols = ", ".join(_q(c) for c in check.columns)
            all_null = " and ".join(f"{_q(c)} is null" for c in check.columns)
            same = " and ".join(f"t.{_q(c)} is not distinct from k.{_q(c)}" for c in check.columns)
            nonnull, unexpected = con.execute(
                f"with k as (select distinct {cols} from {quoted} base where ({scope}) and not ({all_null})) "
                f"select (select count(*) from {quoted} where not ({all_null})), "
                f"(select coalesce(sum(n), 0)::bigint from (select count(*) as n from {quoted} t semi join k "
                f"on {same} group by {', '.join('t.' + _q(c) for c in check.columns)} having count(*) > 1))"
            ).fetchone()
        else:
            counted = _per_group(con, quoted, table, check, rows, now, scope=scope, since=since, run_id=run_id)
            if counted is None:
                return None
            nonnull, unexpected = counted
    except duckdb.Error:  # the whole-table query reports it
        return None
    success, detail = _map_outcome(rows, int(nonnull), int(unexpected), check.gx_mostly)
    return _from_detail(check, success, detail, now)


GROUP_KEYS = "lineage.validation_group_keys"
# Per table and group expression: each group's distinct counted values (as text), and the run
# whose validation left them holding every value of every row then in the table.
GROUP_VALUES = "lineage.validation_group_values"
GROUP_VALUES_COLUMNS = ("table_name varchar not null, group_expr varchar not null, group_hash ubigint not null, "
                        "value varchar not null")
GROUP_VALUES_RUNS = "lineage.validation_group_value_runs"
GROUP_VALUES_RUNS_COLUMNS = "table_name varchar not null, group_expr varchar not null, run_id varchar not null"


def _per_group(con: duckdb.DuckDBPyConnection, quoted: str, table: str, check: Check, rows: int,
               now: datetime, scope: str | None = None, since: str | None = None,
               run_id: str | None = None) -> tuple[int, int] | None:
    """A ``per_group`` check's (non-null, unexpected) counts, each content's group key computed once.

    Split leakage groups rows by their normalised last user turn: NFC and a whitespace regex over
    every prompt cost 15-20x hashing the prompt. So ``lineage.validation_group_keys`` keeps, per
    table and group expression, the 64-bit hash of the columns the expression reads -> the hash
    of its value; only contents not stored yet are normalised, and the groups are then counted
    over every current row by joining the table to the stored keys: the result is the whole
    table's (nothing is inferred from an earlier validation, so deletions and replaced rows
    count as they are). A key is a pure function of the content, so a stored one never goes
    stale (the DuckDB version is part of the expression's key: ``hash`` may change with it).
    A 64-bit collision of two prompts would put them in one group (about n^2 / 2^65: a false
    leak, never a hidden one, for the normalised values; a hidden one only if two different raw
    prompts collide). A content already keyed for another table under the same expression takes
    that key instead of being normalised again. ``None`` (the plain window query decides) if a row finds no key.

    ``scope`` (:func:`_scoped_table_level`: rows outside it were in the table when the check was
    clean, at the validation of run ``since``): only the contents in scope are normalised and
    only the groups they fall in are counted; every other row of the table had its key stored by
    that validation or an earlier one. Counting those groups still hashes the content of every
    row of the table (~70 ms a run for kto, sft and dpo on the 1M lake, growing with it), so a
    scoped validation first asks ``lineage.validation_group_values``: each group's values as
    that validation left them, a superset of the values its rows outside the scope hold (a
    deleted row may leave a value behind, never take one away). When the scope's values added
    to them leave every group within the bound, so does the table (the bound is an upper one:
    :func:`_scoped`). Otherwise, or when the values were not complete at ``since``, the groups
    are counted exactly as above, and their values are replaced by the exact ones.
    """
    group_by, needs, counted = check.per_group
    key = hashlib.sha256(json.dumps([BASELINE_SCHEME, duckdb.__version__, group_by, needs]).encode()).hexdigest()[:32]
    content = f"hash({', '.join(_q(c) for c in needs)})"
    ensure_table(con, GROUP_KEYS, GROUP_KEYS_COLUMNS)
    ensure_table(con, GROUP_VALUES, GROUP_VALUES_COLUMNS)
    ensure_table(con, GROUP_VALUES_RUNS, GROUP_VALUES_RUNS_COLUMNS)
    # the values are the counted column's: their own key (the group expression's and the column)
    names = {"table": table, "key": key, "vkey": hashlib.sha256(f"{key}|{counted}".encode()).hexdigest()[:32]}

    def run(sql: str) -> duckdb.DuckDBPyConnection:  # each statement binds the names it uses
        return con.execute(sql, {k: v for k, v in names.items() if f"${k}" in sql})

    stored = f"(select content_hash, group_hash from {GROUP_KEYS} where table_name = $table and group_expr = $key)"
    # A content another table stored a key for under the same expression takes that key (a pure
    # function of the content): sft, kto and dpo share most prompts, so each is normalised once
    # (only the contents in scope are looked up there: it holds every table's keys).
    theirs = f" and content_hash in (select {content} from {quoted} base where {scope})" if scope else ""
    run(f"insert into {GROUP_KEYS} select distinct $table, $key, b.__h, coalesce(o.group_hash, hash({group_by})) "
        f"from (select {content} as __h, * from {quoted} base{f' where {scope}' if scope else ''}) b "
        f"anti join {stored} k on b.__h = k.content_hash left join (select content_hash, any_value(group_hash) "
        f"as group_hash from {GROUP_KEYS} where group_expr = $key and table_name <> $table{theirs} "
        "group by content_hash) o on o.content_hash = b.__h")
    predicate, _ = _offending(check, now)
    # (group, counted value) pairs and their rows, of the rows b selects whose keys ``keys`` holds
    per_value = "select group_hash, __c, count(*) as n from b join {keys} k on b.__h = k.content_hash group by all"
    per_group = "select sum(n) as n, count(__c) as __v from _fw_groups group by group_hash"  # count(__c): distinct
    values = f"from {GROUP_VALUES} where table_name = $table and group_expr = $vkey"
    held = run(f"select run_id from {GROUP_VALUES_RUNS} where table_name = $table and group_expr = $vkey").fetchone()
    # values not known to be complete at ``since`` (e.g. a state from before they were kept): the
    # whole table is counted below, which records them
    if scope and since is not None and held is not None and held[0] == since:
        run(f"create or replace temp table _fw_scope_groups as with b as (select {content} as __h, "
            f"{_q(counted)} as __c from {quoted} base where {scope}) " + per_value.format(keys=stored))
        # per group the scope touches: its values in the scope and those stored
        offending = run(
            f"select count(*) from (select count(distinct __c) as __v from (select group_hash, __c::varchar as __c "
            f"from _fw_scope_groups union all select group_hash, value {values} and group_hash in "
            f"(select group_hash from _fw_scope_groups)) group by group_hash) where {predicate}").fetchone()[0]
        if not offending:
            run(f"insert into {GROUP_VALUES} select distinct $table, $vkey, group_hash, __c::varchar "
                f"from _fw_scope_groups s where __c is not null and not exists (select 1 {values} "
                "and group_hash = s.group_hash and value = s.__c::varchar)")
            _values_hold(con, names, run_id)
            con.execute("drop table _fw_scope_groups")
            return rows, 0
        # the groups the scope touches, counted over every row of the table
        run(f"create or replace temp table _fw_groups as with b as (select {content} as __h, {_q(counted)} "
            f"as __c from {quoted}) " + per_value.format(
                keys=f"(select * from {stored} semi join _fw_scope_groups using (group_hash))"))
        con.execute("drop table _fw_scope_groups")
        unexpected = con.execute(f"select coalesce(sum(n) filter (where {predicate}), 0)::bigint "
                                 f"from ({per_group})").fetchone()[0]
        # the groups counted get their exact values; the others' still hold. Not complete while
        # they are replaced: a validation stopped in between must not leave a group without them
        _values_hold(con, names, None)
        run(f"delete {values} and group_hash in (select group_hash from _fw_groups)")
        run(f"insert into {GROUP_VALUES} select $table, $vkey, group_hash, __c::varchar from _fw_groups "
            "where __c is not null")
        _values_hold(con, names, run_id)
        con.execute("drop table _fw_groups")
        return rows, int(unexpected)
    run(f"create or replace temp table _fw_groups as with b as (select {content} as __h, {_q(counted)} "
        f"as __c from {quoted}) " + per_value.format(keys=stored))
    total, unexpected = con.execute(
        f"select coalesce(sum(n), 0)::bigint, coalesce(sum(n) filter (where {predicate}), 0)::bigint "
        f"from ({per_group})").fetchone()
    if int(total) != rows:
        con.execute("drop table _fw_groups")
        return None
    # every group's values, from every row: what a later scoped validation starts from (not
    # complete while they are replaced)
    _values_hold(con, names, None)
    run(f"delete {values}")
    run(f"insert into {GROUP_VALUES} select $table, $vkey, group_hash, __c::varchar from _fw_groups "
        "where __c is not null")
    con.execute("drop table _fw_groups")
    _values_hold(con, names, run_id)
    kept = int(run(f"select count(*) from {GROUP_KEYS} where table_name = $table and group_expr = $key").fetchone()[0])
    if kept > 2 * rows + 1000:  # contents since replaced: keep what the table holds now
        run(f"delete from {GROUP_KEYS} where table_name = $table and (group_expr <> $key or content_hash "
            f"not in (select {content} from {quoted}))")
    return int(total), int(unexpected)


def _values_hold(con: duckdb.DuckDBPyConnection, names: dict, run_id: str | None) -> None:
    """Record that ``lineage.validation_group_values`` holds (at least) every value of the
    table's rows as the validation of ``run_id`` saw them; no run (a validation outside one):
    recorded as not holding."""
    con.execute(f"delete from {GROUP_VALUES_RUNS} where table_name = ? and group_expr = ?", [names["table"], names["vkey"]])
    if run_id is not None:
        con.execute(f"insert into {GROUP_VALUES_RUNS} values (?, ?, ?)", [names["table"], names["vkey"], run_id])


# ---------------------------------------------------------------------------------------------
# GX
# ---------------------------------------------------------------------------------------------

def _gx_on_frame(con: duckdb.DuckDBPyConnection, table: str, run_id: str, quoted: str,
                 checks: list[tuple[int, Check]], rows: int, now: datetime, *, where: str = "",
                 restate=None) -> dict[int, CheckResult]:
    """GX on a frame of exactly the columns ``checks`` read (the rows ``where`` selects)."""
    frame_cols: dict[str, str] = {}
    for _, check in checks:
        if check.kind == "compound_unique":
            for c in check.columns:
                frame_cols.setdefault(c, _q(c))
        elif check.column:
            frame_cols.setdefault(check.column, check.expr or _q(check.column))
    frame, broken = _frame(con, quoted, frame_cols, where)
    if not len(frame.columns):  # only table-level checks: GX needs some frame with the right row count
        import pandas as pd

        frame = pd.DataFrame({"__row": range(rows)})
    results: dict[int, CheckResult] = {}
    runnable = []
    for i, check in checks:
        if (check.column or "") in broken:  # e.g. a column of the wrong type: the check errs, the others still run
            results[i] = CheckResult(check, False, "error", detail=f"cannot evaluate: {broken[check.column]}")
        else:
            runnable.append((i, check))
    if runnable:
        with _GX_LOCK:  # one shared in-memory context per process
            outcomes = _run_gx(table, run_id, runnable, frame, now)
        for i, check in runnable:
            outcome = outcomes.get(i)
            result = _result(check, outcome, now)
            if restate is not None and result.status in ("passed", "failed"):
                detail = restate(check, dict(outcome.result or {}))
                result = _from_detail(check, detail["success"], detail, now)
            results[i] = result
    return results


def _frame(con: duckdb.DuckDBPyConnection, quoted: str, columns: dict[str, str], where: str = ""):
    """The columns GX checks, in one query; if it fails, column by column to isolate the culprit."""
    import pandas as pd

    if not columns:
        return pd.DataFrame(), {}
    select = ", ".join(f"{expr} as {_q(name)}" for name, expr in columns.items())
    try:
        return _pandas(con, f"select {select} from {quoted}{where}"), {}
    except duckdb.Error:
        pass

    parts, broken = {}, {}
    for name, expr in columns.items():
        try:
            parts[name] = _pandas(con, f"select {expr} as {_q(name)} from {quoted}{where}")[name]
        except duckdb.Error as exc:
            broken[name] = str(exc).splitlines()[0][:300]
    return pd.DataFrame(parts), broken


def _pandas(con: duckdb.DuckDBPyConnection, sql: str):
    """The result as pandas, dtype for dtype what ``.df()`` gives, but through Arrow: strings stay
    Arrow buffers (pandas' ``str`` dtype) instead of being copied one Python object at a time
    (2-3x faster on text columns)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    # con.sql, not con.execute: Arrow from a DB-API result is one more copy of the rows. It refuses
    # to run while an earlier execute() result is unread: complete() runs that to its end.
    con.complete()
    table = con.sql(sql).to_arrow_table()
    string = pd.StringDtype("pyarrow", na_value=np.nan)
    columns = {}
    for name, column in zip(table.column_names, table.columns):
        t = column.type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            columns[name] = column.to_pandas(types_mapper=lambda _: string)
        elif pa.types.is_integer(t) and column.null_count:  # .df(): nullable Int64, not float64
            columns[name] = column.to_pandas(types_mapper=lambda x: pd.api.types.pandas_dtype(
                str(x).replace("uint", "UInt").replace("int", "Int")))
        elif pa.types.is_date(t):  # .df(): datetime64, not datetime.date objects
            columns[name] = column.cast(pa.timestamp("us")).to_pandas()
        else:
            columns[name] = column.to_pandas()
    return pd.DataFrame(columns) if columns else pd.DataFrame(index=range(table.num_rows))


def _run_gx(table: str, run_id: str, checks: list[tuple[int, Check]], frame, now: datetime) -> dict[int, Any]:
    """GX's validation result per check index, the suite run in one pass over ``frame``."""
    import great_expectations as gx

    batch = _batch_definition().get_batch(batch_parameters={"dataframe": frame})
    suite = gx.ExpectationSuite(name=f"{table}:{run_id}", expectations=[_expectation(c, i, now) for i, c in checks])
    validated = batch.validate(suite, result_format={"result_format": "SUMMARY",
                                                     "partial_unexpected_count": SAMPLE_ROWS})
    return {int(r.expectation_config.meta["check"]): r for r in validated.results}


_CONTEXT = None
_BATCH_DEFINITION = None
_GX_LOCK = threading.Lock()


def _context():
    """One ephemeral GX context per process: in memory, no analytics, no progress bars."""
    global _CONTEXT
    if _CONTEXT is None:
        import great_expectations as gx
        from great_expectations.data_context.types.base import (DataContextConfig, InMemoryStoreBackendDefaults,
                                                                 ProgressBarsConfig)
        from great_expectations.execution_engine import pandas_execution_engine

        # GX fingerprints every in-memory frame below this size (md5 over hash_pandas_object, 3.4 s
        # per 1M-row run) only to label the batch (``batch_markers``); nothing here reads it.
        pandas_execution_engine.HASH_THRESHOLD = 0
        config = DataContextConfig(
            store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
            analytics_enabled=False,
            progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
        )
        _CONTEXT = gx.get_context(mode="ephemeral", project_config=config)
    return _CONTEXT


def _batch_definition():
    """One pandas data source, asset and whole-frame batch definition per process, reused for every
    frame (adding and deleting a data source per table re-serialised the context config each time)."""
    global _BATCH_DEFINITION
    if _BATCH_DEFINITION is None:
        source = _context().data_sources.add_pandas("flywheel")
        _BATCH_DEFINITION = source.add_dataframe_asset(name="frame").add_batch_definition_whole_dataframe("whole")
    return _BATCH_DEFINITION


def _expectation(check: Check, index: int, now: datetime):
    import great_expectations.expectations as gxe

    meta = {"check": index, "name": check.name, "blocking": check.blocking}
    k = check.kind
    if k == "not_null":
        return gxe.ExpectColumnValuesToNotBeNull(column=check.column, mostly=check.gx_mostly, meta=meta)
    if k == "unique":
        return gxe.ExpectColumnValuesToBeUnique(column=check.column, mostly=check.gx_mostly, meta=meta)
    if k == "compound_unique":
        return gxe.ExpectCompoundColumnsToBeUnique(column_list=list(check.columns), mostly=check.gx_mostly, meta=meta)
    if k == "in_set":
        return gxe.ExpectColumnValuesToBeInSet(column=check.column, value_set=list(check.value_set),
                                               mostly=check.gx_mostly, meta=meta)
    if k == "true":
        return gxe.ExpectColumnValuesToBeInSet(column=check.column, value_set=[True], mostly=check.gx_mostly, meta=meta)
    if k == "between":
        return gxe.ExpectColumnValuesToBeBetween(column=check.column, min_value=check.min_value,
                                                 max_value=check.max_value, strict_min=check.strict_min,
                                                 strict_max=check.strict_max, mostly=check.gx_mostly, meta=meta)
    if k == "not_future":
        return gxe.ExpectColumnValuesToBeBetween(column=check.column, max_value=now + check.slack,
                                                 mostly=check.gx_mostly, meta=meta)
    if k == "regex":
        return gxe.ExpectColumnValuesToMatchRegex(column=check.column, regex=check.regex, mostly=check.gx_mostly,
                                                  meta=meta)
    if k == "mean_between":
        return gxe.ExpectColumnMeanToBeBetween(column=check.column, min_value=check.min_value,
                                               max_value=check.max_value, meta=meta)
    if k == "row_count":
        return gxe.ExpectTableRowCountToBeBetween(min_value=check.min_value, max_value=check.max_value, meta=meta)
    if k == "columns_present":
        return gxe.ExpectTableColumnsToMatchSet(column_set=list(check.columns), exact_match=False, meta=meta)
    raise ValueError(f"no GX expectation for kind {k!r}")


def _result(check: Check, outcome, now: datetime) -> CheckResult:
    if outcome is None:
        return CheckResult(check, False, "error", detail="GX returned no result for this expectation")
    info = outcome.exception_info or {}
    raised = [v for v in (info.values() if isinstance(info, dict) and "raised_exception" not in info else [info])
              if isinstance(v, dict) and v.get("raised_exception")]
    if raised:
        message = str(raised[0].get("exception_message") or "exception")
        return CheckResult(check, False, "error", detail=f"GX raised: {message[:500]}")
    return _from_detail(check, bool(outcome.success), outcome.result or {}, now)


def _from_detail(check: Check, success: bool, detail: dict, now: datetime) -> CheckResult:
    """A CheckResult from GX's result dict (or one computed in GX's terms)."""
    unexpected = int(detail.get("unexpected_count") or 0)
    element_count = detail.get("element_count")
    if "observed_value" in detail:
        observed = _jsonable(detail["observed_value"])
        if check.kind == "columns_present":
            observed = {"missing": _jsonable(((detail.get("details") or {}).get("mismatched") or {}).get("missing", []))}
    else:
        observed = {"unexpected": unexpected, "of": element_count}
        if detail.get("unexpected_percent") is not None:
            observed["unexpected_percent"] = round(float(detail["unexpected_percent"]), 6)
        counts = detail.get("partial_unexpected_counts") or []
        if counts and check.kind in ("in_set", "regex"):
            observed["unexpected_values"] = {str(_jsonable(c["value"])): int(c["count"]) for c in counts[:SAMPLE_ROWS]}
        if check.kind == "not_future":
            observed["latest_allowed"] = (now + check.slack).isoformat()
    return CheckResult(check, success, "passed" if success else "failed", _jsonable(observed), unexpected,
                       None if element_count is None else int(element_count))


def _native(check: Check, columns: dict[str, str]) -> CheckResult:
    if check.kind == "columns_present":  # as GX's expect_table_columns_to_match_set (exact_match=False)
        missing = sorted(str(c) for c in set(check.columns) - set(columns))
        return CheckResult(check, not missing, "passed" if not missing else "failed", {"missing": missing}, 0)
    if check.kind == "column_types":
        wrong = {c: columns.get(c, "<missing>") for c, t in check.types
                 if _norm_type(columns.get(c, "")) != _norm_type(t)}
        return CheckResult(check, not wrong, "passed" if not wrong else "failed",
                           {"mismatched": wrong} if wrong else {c: columns[c] for c, _ in check.types},
                           len(wrong), detail=None if not wrong else
                           "expected " + ", ".join(f"{c} {t}" for c, t in check.types if c in wrong))
    if check.kind == "forbidden_columns":
        present = [c for c in check.columns if c in columns]
        return CheckResult(check, not present, "passed" if not present else "failed",
                           {"present": present}, len(present))
    raise ValueError(check.kind)


def _balance(check: Check, mean: float | None, n_true: int, n_false: int) -> dict:
    """KTO class balance: the mean (share of desirable) plus counts and the true:false ratio."""
    return {
        "desirable_share": mean,
        "true": n_true,
        "false": n_false,
        "true_to_false_ratio": round(n_true / n_false, 6) if n_false else None,
    }


# ---------------------------------------------------------------------------------------------
# Sample offending rows (from DuckDB, only for failed checks)
# ---------------------------------------------------------------------------------------------

def _offending(check: Check, now: datetime, v: str = "__v") -> tuple[str, tuple[str, ...]]:
    """(SQL predicate over ``base`` selecting offending rows, default sample order); ``v`` names
    the checked value."""
    k = check.kind
    if k == "not_null":
        return f"{v} is null", ()
    if k == "unique":
        return f"{v} in (select {v} from base where {v} is not null group by {v} having count(*) > 1)", (v,)
    if k == "compound_unique":
        cols = ", ".join(_q(c) for c in check.columns)
        return f"({cols}) in (select ({cols}) from base group by {cols} having count(*) > 1)", \
            tuple(_q(c) for c in check.columns)
    if k in ("in_set", "true"):
        values = ", ".join(_sql_literal(x) for x in (check.value_set if k == "in_set" else (True,)))
        return f"{v} is not null and {v} not in ({values})", ()
    if k == "between":
        parts = []
        if check.min_value is not None:
            parts.append(f"{v} {'<=' if check.strict_min else '<'} {_sql_literal(check.min_value)}")
        if check.max_value is not None:
            parts.append(f"{v} {'>=' if check.strict_max else '>'} {_sql_literal(check.max_value)}")
        return f"{v} is not null and ({' or '.join(parts) or 'false'})", ()
    if k == "not_future":
        return f"{v} > '{(now + check.slack).isoformat()}'::timestamptz", (f"{v} desc",)
    if k == "regex":
        return f"{v} is not null and not regexp_matches({v}::varchar, {_sql_literal(check.regex)})", ()
    raise ValueError(k)


def _samples(con: duckdb.DuckDBPyConnection, table: str, columns: dict[str, str], check: Check,
             now: datetime) -> list[dict]:
    """Up to ``SAMPLE_ROWS`` offending rows: key and provenance columns, the checked value, extras."""
    keys = [c for c in KEY_COLUMNS if c in columns]
    shown = [c for c in check.show if c in columns]
    plain = list(dict.fromkeys(keys + shown + list(check.columns)))
    select = [_q(c) for c in plain]
    if check.kind != "compound_unique":
        select.append(f"{check.expr or _q(check.column)} as __v")
    select += [f"{expr} as {_q(name)}" for name, expr in check.sample_exprs if name not in plain]
    select += [f"{expr} as __o{i}" for i, expr in enumerate(check.sample_order)]
    predicate, default_order = _offending(check, now)
    order = [f"__o{i}" for i in range(len(check.sample_order))] or list(default_order)
    order += [_q(c) for c in keys]
    hidden = [f"__o{i}" for i in range(len(check.sample_order))]
    sql = (f"with base as (select {', '.join(select)} from {_quote_table(table)}) "
           f"select * {'exclude (' + ', '.join(hidden) + ')' if hidden else ''} from base where {predicate} "
           f"{'order by ' + ', '.join(order) if order else ''} limit {SAMPLE_ROWS}")
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    label = check.column or "value"
    out = []
    for row in cursor.fetchall():
        out.append({(label if name == "__v" else name): _jsonable(value, truncate=True)
                    for name, value in zip(names, row)
                    if value is not None or name == "__v" or name not in keys})  # no all-null key noise
    return out


# ---------------------------------------------------------------------------------------------
# ingest.validations
# ---------------------------------------------------------------------------------------------

VALIDATIONS_COLUMNS = {
    "run_id": "varchar",
    "table_name": "varchar",
    "expectation": "varchar",
    "expectation_type": "varchar",
    "column_name": "varchar",
    "action": "varchar",
    "blocking": "boolean",
    "success": "boolean",
    "status": "varchar",
    "observed": "varchar",
    "unexpected_count": "bigint",
    "rows_validated": "bigint",
    "sample_rows": "json",
    "detail": "varchar",
    "validated_at": "timestamptz",
}


# When a row was written to the run log, a copy of a reused result or of a standing exclusion
# included (``validated_at`` / ``excluded_at`` keep when the check ran): the day the publisher cuts
# the run log's files by, so a run's rows fall on the day it ran and earlier days' files never
# change (``snapshot.APPEND_ONLY``). Written by its default: no insert names it.
RECORDED_AT = "recorded_at timestamptz default current_timestamp"
VALIDATIONS_ORDER = [*VALIDATIONS_COLUMNS, "recorded_at"]  # ingest.validations' columns, in order


def _ensure_recorded_at(con: duckdb.DuckDBPyConnection, table: str, have: dict, stamp: str) -> None:
    """An older ``table`` without ``recorded_at``: add it, its rows stamped with ``stamp``."""
    if "recorded_at" not in have:
        con.execute(f"alter table {table} add column recorded_at timestamptz")
        con.execute(f"update {table} set recorded_at = {stamp}")
        con.execute(f"alter table {table} alter column recorded_at set default current_timestamp")


def ensure_validations_table(con: duckdb.DuckDBPyConnection) -> None:
    ensure_table(con, "ingest.validations",
                 ", ".join([*(f"{name} {kind}" for name, kind in VALIDATIONS_COLUMNS.items()), RECORDED_AT]))
    have = table_columns(con, "ingest.validations") or {}
    if list(have) == VALIDATIONS_ORDER:
        return
    for name, kind in VALIDATIONS_COLUMNS.items():  # an older table: add what it lacks
        if name not in have:
            con.execute(f"alter table ingest.validations add column {name} {kind}")
    _ensure_recorded_at(con, "ingest.validations", have, "validated_at")


def _reorder_validations_table(con: duckdb.DuckDBPyConnection) -> None:
    """An older ``ingest.validations``: what this version no longer writes dropped, in today's
    column order. A stale column (an early version's ``kind``) made every publish warn that it had
    no description, and the published table's columns differed from a new lake's. Before a run's
    steps (``ensure_tables``), outside any transaction."""
    have = list(table_columns(con, "ingest.validations") or {})
    if have != VALIDATIONS_ORDER:
        # the early ``kind`` held what ``expectation_type`` holds now
        columns = ["coalesce(expectation_type, kind) as expectation_type" if c == "expectation_type" and "kind" in have
                   else c for c in VALIDATIONS_ORDER]
        with transaction(con):
            con.execute(f"create or replace table ingest.validations_new as select {', '.join(columns)} "
                        "from ingest.validations")
            con.execute("drop table ingest.validations")
            con.execute("alter table ingest.validations_new rename to validations")
            con.execute("alter table ingest.validations alter column recorded_at set default current_timestamp")


def record_validations(con: duckdb.DuckDBPyConnection, report: ValidationReport) -> int:
    """Append one row per expectation result (one ``skipped`` row for a skipped suite)."""
    ensure_validations_table(con)
    rows = []
    for r in report.results:
        rows.append((report.run_id, report.table, r.name, r.expectation_type, r.column, r.action, r.blocking,
                     r.success,
                     r.status, _dumps(r.observed), r.unexpected_count, report.rows, _dumps(r.samples), r.detail,
                     report.validated_at))
    if report.skipped:
        rows.append((report.run_id, report.table, "suite", None, None, None, False, None, "skipped",
                     None, 0, 0, "[]", report.skipped, report.validated_at))
    names = ", ".join(VALIDATIONS_COLUMNS)
    marks = "(" + ", ".join("?" for _ in VALIDATIONS_COLUMNS) + ")"
    if rows:  # one statement: executemany runs one insert per row, ~1 ms each
        con.execute(f"insert into ingest.validations ({names}) values {', '.join([marks] * len(rows))}",
                    [value for row in rows for value in row])
    return len(rows)


# ---------------------------------------------------------------------------------------------
# drop: the exclusion ledger ingest.excluded
# ---------------------------------------------------------------------------------------------

EXCLUDED_COLUMNS = {
    "run_id": "varchar",
    "table_name": "varchar",
    "row_key": "varchar",  # the table's key columns as text, '|'-joined
    "expectation": "varchar",  # the first drop check (in suite order) the row failed
    "detail": "varchar",
    "path": "varchar",  # provenance, when the table carries it
    "line_number": "bigint",
    "excluded_at": "timestamptz",
}
# A DPO pair has no single source line: its ledger row points at the chosen response.
PROVENANCE_PAIRS = (("path", "line_number"), ("chosen_path", "chosen_line_number"))


@dataclass
class DropReport:
    table: str
    run_id: str
    candidates: int
    excluded: dict[str, int] = field(default_factory=dict)  # expectation -> rows excluded by it
    systemic: dict[str, dict] = field(default_factory=dict)  # expectation -> {offending, of, threshold}
    # a predicate over the table's columns true of a row no drop check excludes (None: no drop
    # checks): staging gives an identity whose winner was excluded its greatest version that passes
    passing: str | None = None

    @property
    def total(self) -> int:
        return sum(self.excluded.values())

    def metadata(self) -> dict:
        return {"candidate_rows": self.candidates, "excluded_rows": self.total,
                "excluded_by_expectation": dict(self.excluded), "systemic": dict(self.systemic)}


def ensure_excluded_table(con: duckdb.DuckDBPyConnection) -> None:
    ensure_table(con, "ingest.excluded",
                 ", ".join([*(f"{name} {kind}" for name, kind in EXCLUDED_COLUMNS.items()), RECORDED_AT]))
    _ensure_recorded_at(con, "ingest.excluded", table_columns(con, "ingest.excluded") or {}, "excluded_at")


def apply_drops(con: duckdb.DuckDBPyConnection, table: str, *, run_id: str, now: datetime | None = None,
                checks: list[Check] | None = None, scope: str | None = None) -> DropReport:
    """Delete the rows of ``table`` that fail its ``drop`` checks and record each in ``ingest.excluded``.

    One statement counts each check's offenders (and this run's ledger rows for the table);
    when there are any, one transaction deletes the rows and writes their ledger rows, which
    replace any earlier ones of the same run (a re-materialised asset never double-counts). A check whose offenders
    are more than ``1 - mostly`` of the rows (and more than one row: one odd record never stops a
    run) is systemic: its rows are kept, so its GX result fails and names it. A check counts the
    offenders no earlier check drops (``_own_offenders``): a row is excluded by the first it fails.

    ``scope``: a SQL predicate over the table's columns (alias ``base``) limiting which rows are
    checked; the caller guarantees no row outside it fails (incremental staging). The ledger of
    this (run, table) is still replaced whole and the threshold is still against every row.
    """
    now = _utc(now or datetime.now(timezone.utc))
    suite = checks if checks is not None else SUITES.get(table) or []
    drops = [c for c in suite if c.action == "drop"]
    columns = table_columns(con, table)
    if columns is None:
        return DropReport(table, run_id, 0)
    drops = [c for c in drops if all(n in columns for n in c.required_columns)]
    quoted = _quote_table(table)
    if not drops:  # most tables: nothing can be dropped, so no ledger rows and no transaction
        return DropReport(table, run_id, int(con.execute(f"select count(*) from {quoted}").fetchone()[0]))
    ensure_excluded_table(con)
    for statement in MACROS:
        con.execute(statement)
    # One statement first: the rows, this run's earlier ledger rows for the table (a step run
    # again) and each check's offenders. Usually all are none: no transaction, nothing written.
    # The offenders are counted in one pass over the rows in scope, each check's value once (a
    # subquery per check cost ~45 ms to plan and run for exports.dpo's seven checks on 2,700 new
    # rows; the pass ~9 ms), and only over rows offending some check: the optimizer pushes that
    # filter under the scope's join (staging's scope is a semi join on the touched ids: a check
    # on the time skips every row group by its statistics instead of joining each row).
    values = ", ".join(f"{check.expr or _q(check.column)} as __v{order}" for order, check in enumerate(drops))
    predicates = [f"({_offending(check, now, v=f'__v{order}')[0]})" for order, check in enumerate(drops)]
    found = con.execute(
        f"select (select count(*) from {quoted}), (select count(*) from ingest.excluded where run_id = $run "
        f"and table_name = $table), c.* from (select {', '.join(f'count(*) filter (where {p})' for p in predicates)} "
        f"from (select {values} from {quoted} as base{f' where {scope}' if scope else ''}) "
        f"where {' or '.join(predicates)}) c",
        {"run": run_id, "table": table}).fetchone()
    report = DropReport(table, run_id, int(found[0]), passing=" and ".join(
        f"not coalesce(({_offending(check, now, v=f'({check.expr or _q(check.column)})')[0]}), false)"
        for check in drops))
    candidates = report.candidates
    if not any(found[1:]):
        return report
    offenders = _own_offenders(con, drops, list(found[2:]), predicates, candidates,
                               f"(select {values} from {quoted} as base{f' where {scope}' if scope else ''})")
    # each check's offending rows, with what the ledger records of them
    key_sql = _row_key_sql(table, suite, columns)
    path_col, line_col = next(((p, l) for p, l in PROVENANCE_PAIRS if p in columns and l in columns),
                              (None, None))
    path_sql = f"{_q(path_col)}::varchar" if path_col else "null::varchar"
    line_sql = f"{_q(line_col)}::bigint" if line_col else "null::bigint"
    selects = []
    for order, check in enumerate(drops):
        predicate, _ = _offending(check, now)
        value = check.sample_exprs[0][1] if check.sample_exprs else "__v"
        label = check.sample_exprs[0][0] if check.sample_exprs else (check.column or "value")
        selects.append((check, (
            f"select __rid, {order} as __order, {_sql_literal(check.name)} as expectation, "
            f"{_sql_literal(label + ' = ')} || left(coalesce(to_json({value})::varchar, 'null'), {SAMPLE_TEXT_CHARS}) as detail, "
            f"__key, __path, __line from (select rowid as __rid, *, {check.expr or _q(check.column)} as __v, "
            f"{key_sql} as __key, {path_sql} as __path, {line_sql} as __line "
            # the scope inside: only its rows are computed (a rowid range is skipped to)
            f"from {quoted} as base{f' where {scope}' if scope else ''}) base where {predicate}")))
    with transaction(con):  # the connection's only writer: the counts still hold
        con.execute("delete from ingest.excluded where run_id = ? and table_name = ?", [run_id, table])
        con.execute("create or replace temp table _fw_drop (__rid bigint, __order int, expectation varchar, "
                    "detail varchar, __key varchar, __path varchar, __line bigint)")
        for (check, sql), offending in zip(selects, offenders):
            if not offending:
                continue
            if _systemic(check, offending, candidates):
                report.systemic[check.name] = {"offending": offending, "of": candidates,
                                               "threshold": round(1 - check.mostly, 6)}
                continue
            con.execute(f"insert into _fw_drop {sql}")
        # A row failing several drop checks is excluded once, by the first in suite order.
        con.execute(
            f"insert into ingest.excluded ({', '.join(EXCLUDED_COLUMNS)}) "
            "select ?, ?, __key, expectation, detail, __path, __line, ? from ("
            "select * from _fw_drop qualify row_number() over (partition by __rid order by __order) = 1)",
            [run_id, table, now])
        con.execute(f"delete from {quoted} where rowid in (select __rid from _fw_drop)")
        report.excluded = dict(con.execute(
            "select expectation, count(*)::bigint from ingest.excluded where run_id = ? and table_name = ? "
            "group by all order by all", [run_id, table]).fetchall())
        con.execute("drop table _fw_drop")
    return report


def _systemic(check: Check, offending: int, candidates: int) -> bool:
    """More rows offend than the check's threshold allows, and more than one."""
    return offending > 1 and offending > (1 - check.mostly) * candidates


def _own_offenders(con: duckdb.DuckDBPyConnection, drops: list[Check], counts: list[int], predicates: list[str],
                   candidates: int, rows: str) -> list[int]:
    """Each drop check's offenders that no earlier check (in suite order) drops: the rows it
    would exclude itself, by which it is judged systemic or not. A row failing several checks is
    excluded by the first; counted by every check it failed, the TUI's ratings with an empty
    prompt (a known producer habit, excluded by a check with no threshold) also made the
    prompt check systemic once they were over 5% of a small weighted set, and every run failed.
    ``counts``: each check's offenders among ``rows`` (every one); counted again, only over
    ``rows``, when an earlier check drops some."""
    own, dropping = list(counts), []
    for order, check in enumerate(drops):
        if own[order] and dropping:
            earlier = " or ".join(predicates[d] for d in dropping)
            own[order] = int(con.execute(f"select count(*) from {rows} where {predicates[order]} "
                                         f"and not coalesce({earlier}, false)").fetchone()[0])
        if own[order] and not _systemic(check, own[order], candidates):
            dropping.append(order)
    return own


def _row_key_sql(table: str, suite: list[Check], columns) -> str:
    """A row's ``row_key`` in the ledger: the table's key columns as text, '|'-joined."""
    keys = [c for c in (order_keys(table) or suite_key(suite)) if c in columns]
    return ("concat_ws('|', " + ", ".join(f"coalesce({_q(k)}::varchar, '∅')" for k in keys) + ")"
            if keys else "rowid::varchar")


def carry_exclusions(con: duckdb.DuckDBPyConnection, table: str, *, run_id: str, previous_run: str | None,
                     recomputed: str | None = None) -> int:
    """Record again, for ``run_id``, the exclusions of ``previous_run`` that still hold.

    An incremental build recomputes only what changed, so its drop step sees only those rows: a
    row a drop expectation kept out before, that this build neither brought back nor excluded
    again, is still out. Its ledger row is copied to this run so that the ledger of the run that
    built a table (what the manifest and ``flywheel status`` count) names everything it lacks.
    ``recomputed``: a predicate over the earlier ledger row (alias ``p``) true when this build
    recomputed its key: not carried (it passes now, was excluded again, or is no longer produced).
    """
    columns = table_columns(con, table)
    suite = SUITES.get(table) or []
    if previous_run is None or previous_run == run_id or columns is None \
            or not any(c.action == "drop" for c in suite):
        return 0
    ensure_excluded_table(con)
    # the usual case, nothing excluded before: no look-up of every row key of the table
    if not con.execute("select count(*) from ingest.excluded where run_id = ? and table_name = ?",
                       [previous_run, table]).fetchone()[0]:
        return 0
    return int(con.execute(
        f"""insert into ingest.excluded by name
        select * exclude (recorded_at) replace ($run as run_id) from ingest.excluded as p
        where p.run_id = $previous and p.table_name = $table
            and not exists (select 1 from ingest.excluded as n where n.run_id = $run
                            and n.table_name = $table and n.row_key = p.row_key and n.expectation = p.expectation)
            and p.row_key not in (select {_row_key_sql(table, suite, columns)} from {_quote_table(table)})
            {f"and not coalesce(({recomputed}), false)" if recomputed else ""}""",
        {"run": run_id, "previous": previous_run, "table": table}).fetchone()[0])


def _note_exclusions(con: duckdb.DuckDBPyConnection, table: str, run_id: str, results: list[CheckResult]) -> None:
    """Put each drop check's excluded count (this run) in its observed value."""
    drops = [r for r in results if r.action == "drop"]
    if not drops or not _is_table(con, "ingest.excluded"):
        return
    counts = dict(con.execute("select expectation, count(*)::bigint from ingest.excluded "
                              "where run_id = ? and table_name = ? group by all", [run_id, table]).fetchall())
    for r in drops:
        observed = r.observed if isinstance(r.observed, dict) else {"observed": r.observed}
        r.observed = {**observed, "excluded": int(counts.get(r.name, 0)),
                      "threshold": round(1 - r.check.mostly, 6)}


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote_table(table: str) -> str:
    return ".".join(_q(p) for p in table.split("."))


def _norm_type(t: str) -> str:
    return "".join(t.upper().replace('"', "").split())


def _utc(moment: datetime) -> datetime:
    if isinstance(moment, date) and not isinstance(moment, datetime):
        moment = datetime(moment.year, moment.month, moment.day)
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def _sql_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _jsonable(value: Any, truncate: bool = False) -> Any:
    """JSON-friendly copy of GX / DuckDB values (numpy scalars, timestamps, NaN...)."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, str):
        if truncate and len(value) > SAMPLE_TEXT_CHARS:
            return value[:SAMPLE_TEXT_CHARS] + f"… ({len(value):,} chars)"
        return value
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v, truncate) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v, truncate) for v in value]
    item = getattr(value, "item", None)  # numpy scalar
    if callable(item):
        try:
            return _jsonable(item(), truncate)
        except (TypeError, ValueError):
            pass
    isoformat = getattr(value, "isoformat", None)  # pandas Timestamp
    if callable(isoformat):
        return isoformat()
    return str(value)


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(_jsonable(value), ensure_ascii=False, default=str)


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(_jsonable(value, truncate=True), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "…"
