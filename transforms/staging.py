"""Last-wins deduplication: one row per identity, the greatest by the source's total order.

The winner is the greatest version that passes the drop step (``validation.apply_drops``: an
order time beyond the run time + slack). A version that would win but fails it is excluded and
named in the ledger, and its identity keeps its greatest version that passes, if any: a re-flush
dated years ahead does not remove the good row it would have replaced.

``staging.<source>`` is maintained incrementally: a run re-decides only the identities touched
since the last build (new raw versions, rows a SQLite delete flagged, identities a version of
which was excluded last time) by deleting their staging rows and inserting last-wins over *all*
raw versions of just those identities. Everything else is untouched. Whenever that could differ from a rebuild
(raw was dropped and replayed, staging is missing, this code, the drop suite or raw's columns
changed, the drop step's clock went backwards, the last drop step was systemic) it rebuilds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from transforms import delta
from transforms.classify import q
from transforms.spec import SourceSpec
from transforms.sqlfiles import table_columns, transaction

PROVENANCE = [("path", "varchar"), ("line_number", "bigint"), ("byte_offset", "bigint"),
              ("ingest_run_id", "varchar"), ("observed_seq", "bigint"), ("deleted_at_source", "timestamptz")]

# Private bookkeeping (the lineage schema is never published).
WATERMARKS = "lineage.staging_watermarks"
TOMBSTONES = "lineage.raw_tombstones"  # (source, seq, path, line_number): rows a SQLite delete flagged
TOMBSTONES_DDL = (f"create table if not exists {TOMBSTONES} "
                  "(source varchar, seq bigint, path varchar, line_number bigint)")
_ROOT = Path(__file__).resolve().parents[1]
# What the outcome of an incremental step is a function of besides the data: this module, the
# drop suite and the drop step (a changed expectation must be re-applied to every winner).
_CODE = tuple(_ROOT / p for p in ("transforms/staging.py", "dagster_project/expectations.py",
                                  "dagster_project/validation.py"))


def identity_columns(spec: SourceSpec) -> list[str]:
    return ["content_hash" if name == "@content" else name for name in spec.identity]


def order_terms(spec: SourceSpec) -> list[str]:
    """The total order, greatest last: the spec's keys, then file path and position.

    Ties on every source key are broken by path and byte offset (line number for SQLite rows),
    so the winner never depends on the order files were listed or read. The observation order
    (``observed_seq``, kept in bronze) comes last: a SQLite row edited in place, or a line at the
    same offset of a later generation of a file, wins over what was seen before.
    """
    keys = [*spec.order, "path", "byte_offset", "line_number", "observed_seq"]
    seen: list[str] = []
    for key in keys:
        if key not in seen:
            seen.append(key)
    return seen


def _window(spec: SourceSpec) -> str:
    partition = ", ".join(q(c) for c in identity_columns(spec))
    order = ", ".join(f"{q(c)} desc nulls last" for c in order_terms(spec))
    return f"qualify row_number() over (partition by {partition} order by {order}) = 1"


def last_wins_sql(spec: SourceSpec, where: str | None = None) -> str:
    """The greatest version of each identity in ``raw.<source>`` (of the rows ``where`` holds)."""
    return f"select * from raw.{q(spec.name)}\n{f'where {where}' + chr(10) if where else ''}{_window(spec)}"


def _same_identity(spec: SourceSpec, a: str, b: str) -> str:
    # null-safe: a nullable identity column groups its nulls together, as the window does
    return " and ".join(f"{a}.{q(c)} is not distinct from {b}.{q(c)}" for c in identity_columns(spec))


@dataclass
class StagingResult:
    rows: int  # in staging after the drop step
    mode: str  # "full" | "incremental"
    redecided: int  # identities re-decided (full: every identity in staging before drops)
    reason: str  # why full, or what incremental covered
    drops: Any = None  # the drop step's report (validation.DropReport), None without one
    # incremental: a predicate over staging (alias ``base``) true of every row this step added, and
    # how many rows that is; validation hashes only those rows (``added_rows_in_scope``). None
    # after a rebuild: every row is new.
    scope: str | None = None
    added: int = 0
    # incremental: the event days (``transforms.partitions``) of every row this step deleted or
    # inserted, so the publisher re-hashes only their files; None after a rebuild
    changed_days: list[str] | None = None


# validation.apply_drops: (con, table, *, run_id, now, scope) -> DropReport, whose ``passing`` is a
# predicate over the table's columns true of a row no drop check excludes
DropStep = Callable[..., Any]


def log_tombstones(con: duckdb.DuckDBPyConnection, source: str, seq: int, path: str, keys: list[int]) -> None:
    """Called by ingest, in its transaction, when a SQLite delete flags rows of ``path``: the
    flagged rows keep their old ``observed_seq``, so staging needs this to find them."""
    if not keys:
        return
    con.execute("create schema if not exists lineage")
    con.execute(TOMBSTONES_DDL)  # an Ingestor used outside a run finds no prepared state (ensure_tables)
    con.execute(f"insert into {TOMBSTONES} select $source, $seq, $path, unnest($keys::bigint[])",
                {"source": source, "seq": seq, "path": path, "keys": keys})


def build_staging(con: duckdb.DuckDBPyConnection, spec: SourceSpec, *, run_id: str | None = None,
                  now: datetime | None = None, drop: DropStep | None = None) -> int:
    """``staging.<source>``: rows in it after the step.

    Without ``drop``: a rebuild from every version in ``raw.<source>`` (no drop step; the next
    incremental call rebuilds too). With ``drop`` (``validation.apply_drops``) and ``run_id``:
    incremental when sound, drop step included; see ``refresh_staging``.
    """
    if drop is None:
        ensure_tables(con)
        con.execute(f"delete from {WATERMARKS} where table_name = ?", [f"staging.{spec.name}"])
        return _rebuild(con, spec)
    return refresh_staging(con, spec, run_id=run_id, now=now, drop=drop).rows


def refresh_staging(con: duckdb.DuckDBPyConnection, spec: SourceSpec, *, run_id: str, drop: DropStep,
                    now: datetime | None = None) -> StagingResult:
    """Bring ``staging.<source>`` and its drop step up to date with ``raw.<source>``.

    The result (rows, and the ledger ``ingest.excluded`` rows of ``run_id``) equals what a rebuild
    followed by ``drop`` over the whole table and the fallback to the greatest passing version
    gives: untouched identities keep winners that passed the drop checks at an earlier, not
    later, ``now`` (``not in the future`` only gets easier to pass), and every identity with a
    version excluded last time is re-decided every time.
    """
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    table = f"staging.{spec.name}"
    ensure_tables(con)
    state = _state(con, spec)
    mark = con.execute(f"select raw_epoch, code_key, applied_seq, drop_now from {WATERMARKS} "
                       "where table_name = ?", [table]).fetchone()
    reason = _why_rebuild(state, mark, now)
    if reason:
        return _full(con, spec, run_id=run_id, now=now, drop=drop, state=state, reason=reason)
    return _incremental(con, spec, run_id=run_id, now=now, drop=drop, state=state, since=mark[2])


def note_still_current(con: duckdb.DuckDBPyConnection, spec: SourceSpec, now: datetime) -> None:
    """A run reuses ``staging.<source>``: raw is unchanged and as many versions lie beyond the
    cutoff as when it was built, so it is what a drop step at ``now`` gives. Its watermark's
    ``drop_now`` moves to ``now`` (the instant beyond which the labels leave sidecar events out
    is staging.feedback's ``drop_now`` + slack, as of this run). Needless when no version lies
    beyond the cutoff: every one passes whatever the instant."""
    if delta.table_exists(con, WATERMARKS):
        con.execute(f"update {WATERMARKS} set drop_now = $now where table_name = $table and drop_now < $now",
                    {"now": now, "table": f"staging.{spec.name}"})


# ------------------------------------------------------------------------------ internals


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    """The schemas and bookkeeping tables staging writes (created before a run's steps)."""
    con.execute("create schema if not exists staging")
    con.execute("create schema if not exists lineage")
    con.execute(f"create table if not exists {WATERMARKS} (table_name varchar primary key, "
                "raw_epoch varchar, code_key varchar, applied_seq bigint, drop_now timestamptz, "
                "run_id varchar, mode varchar, redecided bigint, built_at timestamptz)")
    con.execute(TOMBSTONES_DDL)


def _excluded_table(spec: SourceSpec) -> str:
    """Identities whose last-wins winner the drop step removed (re-decided every run)."""
    return f"lineage.{q('staging_excluded_' + spec.name)}"


@dataclass
class _State:
    epoch: str | None  # raw.<source>'s epoch in lineage.table_versions
    applied_seq: int | None  # the last bronze entry applied to raw
    code_key: str
    has_staging: bool
    has_excluded: bool


def _catalog(con: duckdb.DuckDBPyConnection, tables: list[str]) -> dict[str, dict[str, str]]:
    """``{schema.table: {column: type}}`` of those of ``tables`` that exist, each bound by name
    (0.6 ms for five; a ``duckdb_columns()`` query lists every column of the state database:
    2.7 ms, 17 ms cold)."""
    return {table: columns for table in tables if (columns := table_columns(con, table)) is not None}


def _state(con: duckdb.DuckDBPyConnection, spec: SourceSpec) -> _State:
    tables = _catalog(con, ["lineage.table_versions", "ingest.bronze_applied", f"raw.{spec.name}",
                            f"staging.{spec.name}", f"lineage.staging_excluded_{spec.name}"])
    epoch = delta.raw_epoch(con, f"raw.{spec.name}") if "lineage.table_versions" in tables else None
    applied = None
    if "ingest.bronze_applied" in tables:
        row = con.execute("select seq from ingest.bronze_applied where source = ?", [spec.name]).fetchone()
        applied = row[0] if row else None
    raw = tables.get(f"raw.{spec.name}", {})
    code_key = hashlib.sha256((delta.code_fingerprint(*_CODE) + repr(
        (identity_columns(spec), order_terms(spec), list(raw.items())))).encode()).hexdigest()
    return _State(epoch, applied, code_key, f"staging.{spec.name}" in tables,
                  f"lineage.staging_excluded_{spec.name}" in tables)


def _why_rebuild(state: _State, mark, now: datetime) -> str | None:
    if not state.has_staging:
        return "staging is missing"
    if mark is None:
        return "no watermark"
    raw_epoch, code_key, applied_seq, drop_now = mark
    if state.epoch is None or state.applied_seq is None:
        return "raw has no version"
    if raw_epoch != state.epoch:
        return "raw was rebuilt"
    if code_key != state.code_key:
        return "code, drop suite or raw columns changed"
    if not state.has_excluded:
        return "excluded identities are missing"
    if drop_now is not None and now < drop_now:
        return "the drop step's clock went backwards"
    if applied_seq is None or applied_seq > state.applied_seq:
        return "raw is behind the watermark"
    return None


def _rebuild(con: duckdb.DuckDBPyConnection, spec: SourceSpec) -> int:
    table = f"staging.{q(spec.name)}"
    con.execute(f"create or replace table {table} as {_winners(spec, f'raw.{q(spec.name)} r')}")
    return con.execute(f"select count(*) from {table}").fetchone()[0]


def _winners(spec: SourceSpec, scope: str) -> str:
    """``last_wins_sql`` over the raw rows of ``scope`` (``raw.<source> r``, or a semi join naming ``r``):
    decided on the narrow identity and order columns, then only the winners' whole rows are
    fetched (a rowid filter on the scan), so the wide text columns are never sorted."""
    narrow = ", ".join(f"r.{q(c)}" for c in dict.fromkeys([*identity_columns(spec), *order_terms(spec)]))
    return (f"select * from raw.{q(spec.name)} where rowid in (select rowid from ("
            f"select r.rowid, {narrow} from {scope}) {_window(spec)})")


def _full(con, spec: SourceSpec, *, run_id: str, now: datetime, drop: DropStep, state: _State,
          reason: str) -> StagingResult:
    table = f"staging.{spec.name}"
    with transaction(con):
        # no watermark until the drop step is done: a crash in between rebuilds again
        con.execute(f"delete from {WATERMARKS} where table_name = ?", [table])
        candidates = _rebuild(con, spec)
    report = drop(con, table, run_id=run_id, now=now)
    # The excluded winners: raw rows at the ledger's positions whose identity left staging.
    ids = ", ".join(f"r.{q(c)}" for c in identity_columns(spec))
    con.execute(
        f"create or replace temp table _stg_touched as select distinct {ids} from raw.{q(spec.name)} r "
        "semi join (select path, line_number from ingest.excluded where run_id = $run and table_name = $table) x "
        "on r.path = x.path and r.line_number = x.line_number"
        if report.total else
        f"create or replace temp table _stg_touched as select {ids} from raw.{q(spec.name)} r limit 0",
        {"run": run_id, "table": table} if report.total else None)
    _left_out(con, spec, report, None)
    fallen_back, _ = _fall_back(con, spec, report, False)
    _finish(con, spec, run_id=run_id, now=now, state=state, report=report, mode="full", redecided=candidates)
    return StagingResult(candidates - report.total + fallen_back, "full", candidates, reason, report)


def _incremental(con, spec: SourceSpec, *, run_id: str, now: datetime, drop: DropStep, state: _State,
                 since: int) -> StagingResult:
    table = f"staging.{spec.name}"
    raw, staging, excluded = f"raw.{q(spec.name)}", f"staging.{q(spec.name)}", _excluded_table(spec)
    cols = ", ".join(q(c) for c in identity_columns(spec))
    flagged = con.execute(f"select count(*) from {TOMBSTONES} where source = ? and seq > ?",
                          [spec.name, since]).fetchone()[0]
    touched = [f"select {cols} from {raw} where observed_seq > $since", f"select {cols} from {excluded}"]
    if flagged:
        touched.append(
            f"select {cols} from {raw} r semi join (select path, line_number, seq from {TOMBSTONES} "
            "where source = $source and seq > $since) t "
            "on r.path = t.path and r.line_number = t.line_number and r.observed_seq < t.seq")
    con.execute("create or replace temp table _stg_touched as " + " union ".join(touched),
                {"since": since, **({"source": spec.name} if flagged else {})})
    redecided = con.execute("select count(*) from _stg_touched").fetchone()[0]
    touched_rows = f"exists (select 1 from _stg_touched t where {_same_identity(spec, 'base', 't')})"
    start, inserted = 0, 0
    # nothing re-decided: no day changed (None: no event time)
    days = None if delta.day_sql(con, table) is None else set()
    if redecided:
        with transaction(con):
            gone = delta.delete_recomputed(con, {table: touched_rows})[table]
            # DuckDB appends after every row id ever used, so the rows of this insert are the ones
            # from ``start`` on: a range the scan skips to, for the validation of just these rows
            start = delta.next_rowid(con, staging)
            inserted = con.execute(f"insert into {staging} " + _winners(
                spec, f"{raw} r semi join _stg_touched t on {_same_identity(spec, 'r', 't')}")).fetchone()[0]
            # and of the rows that came (the drop step deletes only some of these)
            came = delta.days_of(con, table, f"base.rowid >= {int(start)}")
            days = None if gone is None else gone | came
    # Winners outside the scope passed the same checks at an earlier now: only the scope is checked.
    scope = touched_rows if redecided else "false"
    report = drop(con, table, run_id=run_id, now=now, scope=scope)
    added = inserted - report.total  # the drop step deletes only rows of this insert (its scope)
    _left_out(con, spec, report, (start, added) if redecided else None)
    fallen_back, came_back = _fall_back(con, spec, report, days is not None)
    if days is not None:
        days |= came_back
    added += fallen_back
    _finish(con, spec, run_id=run_id, now=now, state=state, report=report, mode="incremental",
            redecided=redecided)
    rows = con.execute(f"select count(*) from {staging}").fetchone()[0]
    return StagingResult(rows, "incremental", redecided, f"{redecided} identities since seq {since}", report,
                         scope=f"base.rowid >= {int(start)}" if redecided else "false",
                         added=added, changed_days=None if days is None else sorted(days))


def added_rows_in_scope(con: duckdb.DuckDBPyConnection, spec: SourceSpec, result: StagingResult) -> bool:
    """Every row the incremental step added is still in ``result.scope``.

    A checkpoint that vacuums deleted rows renumbers the rows after them, only ever downwards,
    and rows from before the insert all lie below the range: so the range still holding as many
    rows as were added means none of them moved out of it."""
    return result.scope is not None and delta.rows_in(con, f"staging.{spec.name}", result.scope) == result.added


def _left_out(con, spec: SourceSpec, report, kept: tuple[int, int] | None) -> None:
    """``_stg_out``: the touched identities the drop step left without a row, their winner
    excluded. ``kept``: (first rowid, rows) of what an incremental step inserted and kept, the
    only rows of a touched identity."""
    table = f"staging.{spec.name}"
    if not report.total:  # nothing was deleted: every touched identity that had a version has its row
        rows = None
    elif kept and delta.rows_in(con, table, f"base.rowid >= {int(kept[0])}") == kept[1]:
        # the range still holds exactly the kept rows: look up the touched identities there
        rows = f"(select * from staging.{q(spec.name)} base where base.rowid >= {int(kept[0])})"
    else:
        rows = f"staging.{q(spec.name)}"
    con.execute("create or replace temp table _stg_out as select t.* from _stg_touched t "
                + (f"anti join {rows} s on {_same_identity(spec, 't', 's')}" if rows else "limit 0"))


def _fall_back(con, spec: SourceSpec, report, with_days: bool) -> tuple[int, set[str]]:
    """Give each identity in ``_stg_out`` its greatest version that passes every drop check
    (``report.passing``, at the same run time): rows added, and their event days when
    ``with_days``. A version beyond it was excluded, so it is older than the excluded one and,
    of the versions the drop step would keep, the greatest: what last-wins over those gives."""
    if not report.total or not getattr(report, "passing", None):
        return 0, set()
    table, raw = f"staging.{spec.name}", f"raw.{q(spec.name)}"
    with transaction(con):  # no checkpoint between the insert and the look at its rowid range
        start = delta.next_rowid(con, f"staging.{q(spec.name)}")
        # the semi join hides _stg_out's columns: the predicate's names are the raw row's
        added = con.execute(f"insert into staging.{q(spec.name)} " + _winners(
            spec, f"{raw} r semi join _stg_out t on {_same_identity(spec, 'r', 't')} where {report.passing}")
        ).fetchone()[0]
        days = delta.days_of(con, table, f"base.rowid >= {int(start)}") if with_days and added else set()
    return added, days


def _finish(con, spec: SourceSpec, *, run_id: str, now: datetime, state: _State, report, mode: str,
            redecided: int) -> None:
    """Record the identities a version of which was excluded (``_stg_out``, re-decided next run:
    an excluded version may pass then) and the watermark, in one transaction."""
    table = f"staging.{spec.name}"
    excluded = _excluded_table(spec)
    with transaction(con):
        # every identity excluded before is in _stg_touched, so this is the whole excluded set
        if redecided or mode == "full":
            con.execute(f"create or replace table {excluded} as select * from _stg_out")
        con.execute(f"delete from {TOMBSTONES} where source = ? and seq <= ?", [spec.name, state.applied_seq or 0])
        con.execute(f"delete from {WATERMARKS} where table_name = ?", [table])
        # A systemic drop keeps its offenders in staging, outside the excluded set: rebuild next time.
        if state.epoch is not None and state.applied_seq is not None and not getattr(report, "systemic", None):
            con.execute(f"insert into {WATERMARKS} values (?, ?, ?, ?, ?, ?, ?, ?, now())",
                        [table, state.epoch, state.code_key, state.applied_seq, now, run_id, mode, redecided])
    con.execute("drop table if exists _stg_touched")
    con.execute("drop table if exists _stg_out")
