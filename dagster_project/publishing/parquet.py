"""Tables as content-addressed, partitioned Parquet files: a partition whose rows did not change
is never written again.

A table is cut into partitions by the day (month, for small tables) of its event time
(``partition_sql``): a lake grows at the end of time, so a 1% append touches the newest day and
leaves the others' rows, hashes and files alone. An old month of at most ``MONTH_FILE_ROWS``
rows is one file (``grouping``), so a small table's files grow by months, not days. Each partition's rows are hashed in DuckDB
(row count and sums of DuckDB's 64-bit ``hash`` of every row: order-independent, no
serialisation), and that digest — with the schema and sort order — names the
object ``.objects/<key>.parquet``. An object that exists already is hard-linked into the new
snapshot; only missing ones are written (to a temp name, verified from the bytes hashed; then
all of a publish's new files are fsynced in one pass and renamed, so an object file is complete
or absent). Their rows are read through a range on the raw time column as well as their names
(``rows_of``), so DuckDB skips the old row groups instead of naming every row's partition.
When the builds since the last snapshot said on which event days they changed rows
(``versions.changed_days``), only those days' rows are hashed and the other files are the last
manifest's (``replan``); for a table rows are only appended to (the run log), the days of the
rows after the mark of where it ended (``append_mark``, ``appended_days``).
Training sets are also cut by split (``train-*`` / ``test-*`` files, the Hugging Face
convention; our ``eval`` split is HF's ``test``).

Nothing here imports Dagster.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

import duckdb

from transforms.classify import q
from transforms.partitions import DAY, MONTH, UNDATED, partition_column, time_sql
from transforms.sqlfiles import lit, quote_table

FORMAT = "flywheel-parquet/2"
ROW_GROUP_ROWS = 100_000
# zstd at level 1: the 1M lake's snapshot is as large as at DuckDB's default level 3 (157 MB
# against 158 MB: small files, mostly dictionary-encoded) and costs ~8% less CPU to write
# (20.8 s against 22.2-23.0 s of a full publish).
PARQUET_OPTIONS = f"format parquet, compression zstd, compression_level 1, row_group_size {ROW_GROUP_ROWS}"
DAY_GRAIN_ROWS = 5_000
# A day-cut table's old month is one file when it holds at most this many rows (``grouping``).
MONTH_FILE_ROWS = 50_000
# Rows sorted at once for writing (``_copy_sorted``): a sort holds them in memory (the 1M lake's
# staging.interactions in one partitioned COPY peaked at 1.5 GB, in four at 0.68 GB), so a full
# refresh's peak does not grow with the largest table (with two writers, two chunks at once).
# Partitions are cut by day, so a chunk's rows are read through a range on the time column.
COPY_ROWS = 250_000
STOP_POLL = 0.05  # seconds between two interrupts of a stopping worker (``on_connections``)
# Fewer rows to write are sorted by every column: telling that no key repeats (a statement,
# ~2 ms) costs more than it saves (a day's 10,000 interactions: 34 ms to write either way).
KEY_SORT_ROWS = 100_000
ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
ISO_MONTH = re.compile(r"\d{4}-\d{2}")
# The range's bounds are cast in the session's zone, as strftime prints a TIMESTAMPTZ, so a day's
# range holds its rows exactly; the slack keeps it a superset should the two ever disagree (the
# partition name still decides), at the cost of a few more rows read.
RANGE_SLACK = timedelta(days=1)
# A partition's digest: its row count and two sums of 64-bit row hashes (DuckDB's hash() of every
# column, and a hash of that), so it does not depend on row order and never serialises a row:
# md5(to_json(row)) and sorting the hashes cost 28 s of a 1M-interaction publish. The DuckDB
# version is part of the object key, since hash() is only stable within one version. The sums
# are summed again per partition (over its days), which leaves them as they were.
ROW_DIGEST = "sum(__n)::varchar || ':' || sum(__s)::varchar || ':' || sum(__t)::varchar"


@dataclass(frozen=True)
class Dataset:
    """One table published as one directory of the snapshot."""

    table: str  # schema.table in the state database
    path: str  # directory inside the snapshot: training/sft, analytics/doc_utility, internal/staging.x
    kind: str  # "training" | "analytics" | "internal"
    select: str  # the projection written (pseudonymised for shared datasets)
    order: tuple[str, ...]  # total row order inside a file

    @property
    def shared(self) -> bool:
        return self.kind != "internal"

    @property
    def plain(self) -> str:
        """The table as it is: what counting its rows and event days reads (a shared dataset's
        select joins each provenance path to its published form, which a count need not pay for:
        31 ms a path column on 1M rows, against 3-5)."""
        return f"select * from {quote_table(self.table)}"


@dataclass
class Part:
    name: str  # file name inside the dataset directory
    rows: int
    key: str  # object key (content address)
    reused: bool = False
    bytes: int = 0
    sha256: str = ""

    @property
    def stem(self) -> str:
        """The partition's name: the file name without ``.parquet`` (what ``part_sql`` gives)."""
        return self.name[:-len(".parquet")]

    @property
    def when(self) -> str:
        """Its day or month (or ``undated``): the name after its prefix (``train-2026-02-03`` -> ``2026-02-03``)."""
        return self.stem.split("-", 1)[1]


@dataclass
class Plan:
    dataset: Dataset
    columns: list[dict[str, str]]
    part_sql: str  # the partition expression this plan was cut by
    parts: list[Part] = field(default_factory=list)
    from_manifest: bool = False  # taken from the current manifest: the table was not read
    rule: str | None = None  # the grouping rule it was cut under (``partition_rule``)
    mark: dict | None = None  # where an append-only table ended when it was planned (``append_mark``)

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(json.dumps([[p.name, p.key] for p in self.parts]).encode()).hexdigest()


def partition_inputs(dataset: Dataset, columns: dict[str, str]) -> list[str]:
    """The columns ``partition_sql`` reads: the event time and, for training sets, the split."""
    col = partition_column(columns)
    return ([col] if col else []) + (["split"] if dataset.kind == "training" and "split" in columns else [])


def partition_sql(dataset: Dataset, columns: dict[str, str], rows: int, grouped: Iterable[str] = ()) -> str:
    """The file name (without ``.parquet``) each row goes to.

    The event time's day for tables over ``DAY_GRAIN_ROWS`` rows (a day's append is a new
    file), its month for smaller ones (fewer tiny files; rewriting them costs little); one
    partition without a time column. A day-cut table's ``grouped`` months (``grouping``) are
    one file each instead of one per day.
    """
    col = partition_column(columns)
    when = "'all'" if col is None else when_sql(col, _grain(rows), grouped)
    if "split" in partition_inputs(dataset, columns):
        # HF maps train-* to the train split and test-* to test (our eval split).
        return f"(case when split = 'eval' then 'test' else 'train' end) || '-' || {when}"
    return f"'part-' || {when}"


def _grain(rows: int) -> str:
    return DAY if rows > DAY_GRAIN_ROWS else MONTH


def when_sql(column: str, fmt: str, grouped: Iterable[str] = ()) -> str:
    """A row's partition day or month (``partition_sql`` without its prefix): by ``fmt``, and for
    a day cut the month of a day in a ``grouped`` month. ``partition_of`` is the same in Python."""
    grouped = sorted(grouped)
    if fmt != DAY or not grouped:
        return time_sql(column, fmt)
    day = time_sql(column, DAY)
    return f"(case when left({day}, 7) in ({', '.join(lit(m) for m in grouped)}) then left({day}, 7) else {day} end)"


def partition_of(day: str, fmt: str, grouped: Iterable[str] = ()) -> str:
    """The partition (``when_sql``) of the rows of ``day`` (``transforms.partitions.time_sql``'s
    day): for a month cut an ISO day's month."""
    if day == UNDATED:
        return day
    if fmt == MONTH or day[:7] in set(grouped):
        return day[:7]
    return day


def compaction_cutoff(latest: str | None) -> str | None:
    """The first day of the month before ``latest``'s (a table's latest event day): a day cut
    may group the months before it (``grouping``). None when ``latest`` is not a plain ISO day
    (no rows, '-infinity', year 10000)."""
    if not latest or not ISO_DAY.fullmatch(latest):
        return None
    year, month = int(latest[:4]), int(latest[5:7])
    year, month = (year, month - 1) if month > 1 else (year - 1, 12)
    return f"{year:04d}-{month:02d}-01" if year >= 1 else None


def partition_rule() -> str:
    """What decides which months are grouped, recorded with each manifest entry: an entry cut under
    another rule (or before there was one) is not replanned, its table is hashed whole."""
    return f"months-before-the-latest-but-one/at-most-{MONTH_FILE_ROWS}-rows"


def grouping(counts: dict[str, int], latest: str | None) -> set[str]:
    """The months of a day-cut table whose days make one file: those before the month preceding
    its ``latest`` event day that hold at most ``MONTH_FILE_ROWS`` rows (``counts``: rows per
    month). A lake that grows for years then keeps about two months of day files, not a file per
    day and split of its history (900 days of 100,000 interactions were 17,858 files), while a
    busy month stays cut by day: one big file would cost its sort's memory when written."""
    cutoff = compaction_cutoff(latest)
    return {m for m, n in counts.items() if cutoff and m < cutoff[:7] and 0 < n <= MONTH_FILE_ROWS}


def month_counts(con: duckdb.DuckDBPyConnection, dataset: Dataset, col: str, where: str = "") -> dict[str, int]:
    """Rows per month ``YYYY-MM`` of the dataset's ISO event days (``where``: of these rows only).
    Rows are counted per date first, so the days are printed once each, not once per row; the
    cast to DATE is in the session's zone, as ``strftime`` prints a TIMESTAMPTZ."""
    counts: dict[str, int] = {}
    for day, n in con.execute(f"select strftime(d, '%Y-%m-%d'), n from (select {q(col)}::date as d, count(*) as n "
                              f"from ({dataset.plain}){f' where {where}' if where else ''} group by 1) "
                              "where d is not null").fetchall():
        if ISO_DAY.fullmatch(day):
            counts[day[:7]] = counts.get(day[:7], 0) + int(n)
    return counts


def extent(con: duckdb.DuckDBPyConnection, dataset: Dataset, columns: dict[str, str]) -> tuple[int, str | None]:
    """The dataset's rows and its latest event day (None without an event time or rows): what
    ``partition_sql`` cuts by. The maximum costs nothing beside the count (column statistics)."""
    col = partition_column(columns)
    if col is None:
        return con.execute(f"select count(*) from ({dataset.plain})").fetchone()[0], None
    total, latest = con.execute(f"select count(*), strftime(max({q(col)}), '%Y-%m-%d') "
                                f"from ({dataset.plain})").fetchone()
    return total, latest


def rows_of(planned: Plan, names: Iterable[str], named: str | None = None) -> str:
    """The rows of the partitions ``names`` (``<prefix>-<when>``, no ``.parquet``): the partition
    filter, and for day/month partitions also a range on the raw time column. ``named``: a column
    already holding each row's partition name (else the partition expression is used).

    The range selects the same rows or more (the partition filter decides), but DuckDB can test
    it against each row group's min/max and skip the old ones: a 1% append then reads its new row
    groups instead of computing the partition name (and the projection) of every row.
    """
    names = sorted(set(names))
    exact = f"({named or planned.part_sql}) in ({', '.join(lit(n) for n in names)})"
    near = _time_range({c["name"]: c["type"] for c in planned.columns}, planned.part_sql,
                       [name.split("-", 1)[-1] for name in names])
    return f"{exact} and {near}" if near else exact


def _time_range(columns: dict[str, str], part_sql: str, whens: list[str]) -> str | None:
    """A range on the raw time column holding the rows of every day or month of ``whens``
    (``undated``: NULL), or None when the partitions are not cut by time."""
    col = partition_column(columns)
    if col is None or f"strftime({q(col)}, " not in part_sql:
        return None
    spans, undated = [], False
    for when in whens:
        if when == UNDATED:  # strftime(NULL): the partition of rows without a time
            undated = True
            continue
        try:
            if len(when) == len("YYYY-MM-DD"):
                lo = date.fromisoformat(when)
                hi = lo + timedelta(days=1)
            elif len(when) == len("YYYY-MM"):
                lo = date.fromisoformat(f"{when}-01")
                hi = (lo + timedelta(days=31)).replace(day=1)
            else:
                return None
            spans.append((lo - RANGE_SLACK, hi + RANGE_SLACK))
        except (ValueError, OverflowError):  # not a partition this module names: no shortcut
            return None
    merged: list[list[date]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    # the literal is cast to the column's type, so the comparison is on the stored column
    # (TIMESTAMP, TIMESTAMPTZ, DATE…) and can use its zone maps
    typed = columns[col]
    terms = [f"({q(col)} >= cast({lit(lo)} as {typed}) and {q(col)} < cast({lit(hi)} as {typed}))" for lo, hi in merged]
    if undated:
        terms.append(f"{q(col)} is null")
    return f"({' or '.join(terms)})" if terms else None


def plan(con: duckdb.DuckDBPyConnection, dataset: Dataset, objects: Path) -> Plan:
    """Hash every partition of ``dataset``; mark those whose object exists as reused."""
    columns = _columns(con, dataset)
    total, latest = extent(con, dataset, columns)
    col = partition_column(columns)
    grouped = grouping(month_counts(con, dataset, col), latest) if col and _grain(total) == DAY else set()
    part_sql = partition_sql(dataset, columns, total, grouped)
    result = Plan(dataset, [{"name": c, "type": t} for c, t in columns.items()], part_sql,
                  _hash_parts(con, dataset, columns, part_sql, objects), rule=partition_rule())
    if not result.parts:  # an empty table still has a schema: one empty file
        result.parts = _hash_parts(con, dataset, columns, part_sql, objects,
                                   empty="train-empty" if dataset.kind == "training" else "part-empty")
    return result


def replan(con: duckdb.DuckDBPyConnection, dataset: Dataset, objects: Path, entry: dict,
           days: set[str]) -> Plan | None:
    """``plan`` from the manifest ``entry`` of an earlier version of the table and the event
    ``days`` it changed on since (``versions.changed_days``): only those days' rows are read and
    hashed, every other file is the entry's (the same rows: nothing else changed). A month that
    groups otherwise now (``grouping``: a change in it, or the latest event moved a month on) is
    hashed again whole, in its new form. None when that cannot be told: another schema, order or
    cut (a table crossing ``DAY_GRAIN_ROWS``), no event time, an empty table, an object gone. A
    kept file keeps the object key it was published under (after a DuckDB upgrade, new files are
    named by the new version's row hash: same rows)."""
    written = reuse(dataset, entry, objects)  # the entry as the publisher wrote it (no erasure since)
    if written is None or any(p.rows == 0 for p in written.parts) or written.rule != partition_rule():
        return None
    columns = _columns(con, dataset)
    col = partition_column(columns)
    if col is None or entry.get("columns") != [{"name": c, "type": t} for c, t in columns.items()]:
        return None
    total, latest = extent(con, dataset, columns)
    fmt = _grain(total)
    # the months the entry's files group: month-named files of a day cut
    before = {p.when for p in written.parts if ISO_MONTH.fullmatch(p.when)} if fmt == DAY else set()
    if entry.get("partition_sql") != partition_sql(dataset, columns, total, before):
        return None  # another cut: a table crossing DAY_GRAIN_ROWS
    if fmt == MONTH and any(d != UNDATED and not ISO_DAY.fullmatch(d) for d in days):
        return None  # '-infinity', year 10000 or BC: its month is not the day's first 7 characters
    grouped = set(before)
    if fmt == DAY:
        # Only the months a change touched, or that the cutoff passed since (from the entry's
        # latest day file), can group otherwise now: their rows are counted again. A file of a
        # day that is not ISO ('infinity', year 10000) may have held the entry's latest event, so
        # its cutoff is unknown: every row is hashed then.
        whens = [p.when for p in written.parts]
        if any(not (ISO_DAY.fullmatch(w) or ISO_MONTH.fullmatch(w) or w == UNDATED) for w in whens):
            return None
        cutoff = compaction_cutoff(latest)
        days_before = [w for w in whens if ISO_DAY.fullmatch(w)]
        cutoff_before = compaction_cutoff(max(days_before)) if days_before else None
        if (cutoff is None and before) or (cutoff is not None and cutoff_before is None):
            return None
        passed = _months(cutoff_before or "", cutoff or "")
        recount = {m for m in {d[:7] for d in days if ISO_DAY.fullmatch(d)} | set(passed)
                   if cutoff and m < cutoff[:7]}
        if any(m >= cutoff[:7] for m in before):  # the latest event moved back: months split again
            return None
        if recount:
            near = _time_range(columns, time_sql(col, MONTH), sorted(recount))
            counts = month_counts(con, dataset, col, near or "")
            grouped = (grouped - recount) | grouping({m: counts.get(m, 0) for m in recount}, latest)
    regrouped = before ^ grouped  # months whose files change form, day files <-> one month file
    part_sql = partition_sql(dataset, columns, total, grouped)
    names = sorted({partition_of(d, fmt, grouped) for d in days} | regrouped)
    kept = [p for p in written.parts if p.when not in names and p.when[:7] not in regrouped]
    near = _time_range(columns, part_sql, names)  # zone maps skip the other days' row groups
    month = f"left({time_sql(col, DAY)}, 7)"
    where = (f"({when_sql(col, fmt, grouped)} in ({', '.join(lit(n) for n in names)})"
             + (f" or {month} in ({', '.join(lit(m) for m in sorted(regrouped))})" if regrouped else "") + ")"
             + (f" and {near}" if near else ""))
    fresh = _hash_parts(con, dataset, columns, part_sql, objects, where=where) if names else []
    parts = sorted(kept + fresh, key=lambda p: p.stem)  # as plan orders __part
    return Plan(dataset, entry["columns"], part_sql, parts, rule=partition_rule()) if parts else None


def _through(con: duckdb.DuckDBPyConnection, table: str, rowid: int) -> tuple[int, str | None]:
    """The rows of ``table`` up to ``rowid`` and the hash of the row at it: what a mark records
    (``append_mark``) and what ``appended_days`` compares, computed by the one statement."""
    rows, row_hash = con.execute(
        f"select count(*), (select hash(t)::varchar from {quote_table(table)} t where rowid = $r) "
        f"from {quote_table(table)} where rowid <= $r", {"r": rowid}).fetchone()
    return int(rows), row_hash


def append_mark(con: duckdb.DuckDBPyConnection, table: str) -> dict | None:
    """Where ``table``, a table rows are only appended to, ends now: its last rowid, its row count
    and that row's hash (None when empty), for ``appended_days`` at its next publish."""
    (last,) = con.execute(f"select max(rowid) from {quote_table(table)}").fetchone()
    if last is None:
        return None
    rows, row_hash = _through(con, table, int(last))
    return {"rowid": int(last), "rows": rows, "row_hash": row_hash, "duckdb": duckdb.__version__}


def appended_days(con: duckdb.DuckDBPyConnection, table: str, mark: dict) -> set[str] | None:
    """The event days of the rows appended to ``table`` since ``mark`` (its ``append_mark`` then),
    for ``replan``; None when the rows up to the mark may have changed since. DuckDB numbers rows
    by position: appended rows come after the mark, a deleted row leaves one fewer up to it, and
    a checkpoint that vacuums it (or a compaction) numbers the rows after it one lower, which
    moves another row to the mark's rowid (its hash differs: rows hold their run and time)."""
    if mark.get("duckdb") != duckdb.__version__:  # hash() is stable within a version only
        return None
    columns = {name: str(type_) for name, type_, *_ in con.execute(f"describe {quote_table(table)}").fetchall()}
    col = partition_column(columns)
    if col is None:
        return None
    if _through(con, table, mark["rowid"]) != (mark["rows"], mark["row_hash"]):
        return None
    return {day for (day,) in con.execute(f"select distinct {time_sql(col)} from {quote_table(table)} "
                                          "where rowid > $r", {"r": mark["rowid"]}).fetchall()}


def _months(start: str, end: str) -> list[str]:
    """The months ``YYYY-MM`` from the one of day ``start`` up to the one of day ``end``, excluded."""
    months, day = [], start
    while day and day < end:
        months.append(day[:7])
        year, month = int(day[:4]), int(day[5:7])
        day = f"{year + month // 12:04d}-{month % 12 + 1:02d}-01"
    return months


def _columns(con: duckdb.DuckDBPyConnection, dataset: Dataset) -> dict[str, str]:
    described = con.execute(f"describe {dataset.select}").fetchall()
    columns = {name: str(type_) for name, type_, *_ in described}
    if "__part" in columns or "__h" in columns:
        raise ValueError(f"{dataset.table}: columns __part/__h are reserved by the publisher")
    return columns


def _hash_parts(con: duckdb.DuckDBPyConnection, dataset: Dataset, columns: dict[str, str], part_sql: str,
                objects: Path, where: str = "", empty: str | None = None) -> list[Part]:
    """The partitions of the rows ``where`` selects, each named by its content (``empty``: one
    partition of that name and no rows); an object already stored is marked reused."""
    schema = json.dumps([[c, t] for c, t in columns.items()])
    # Rows are hashed and summed per day (and split) first, the partition named per day after:
    # strftime once per day instead of once per row (a quarter of the hashing). A day is within
    # one partition: the cast to DATE is in the session's zone, as strftime prints a TIMESTAMPTZ.
    inputs = partition_inputs(dataset, columns)
    time_col = partition_column(columns)
    per_day = [f"{q(c)}::date as {q(c)}" if c == time_col else q(c) for c in inputs]
    hashed = [q(c) for c in inputs] + [f"hash({', '.join(q(c) for c in columns)}) as __h"]
    rows = [(empty, 0, "")] if empty else con.execute(
        f"select {part_sql} as __part, sum(__n)::bigint, {ROW_DIGEST} from ("
        f"select {', '.join(per_day + ['count(*) as __n', 'sum(__h) as __s', 'sum(hash(__h, ' + lit('fw') + ')) as __t'])} "
        f"from (select {', '.join(hashed)} from ({dataset.select}){f' where {where}' if where else ''}) "
        "group by all having count(*) > 0) group by __part order by __part").fetchall()
    parts = []
    for part, n, digest in rows:
        key = hashlib.sha256(f"{FORMAT}|{duckdb.__version__}|{schema}|{dataset.order}|{digest}".encode()).hexdigest()
        parts.append(Part(name=f"{part}.parquet", rows=int(n), key=key, reused=(objects / f"{key}.parquet").exists()))
    return parts


def reuse(dataset: Dataset, entry: dict | None, objects: Path) -> Plan | None:
    """The plan a manifest ``entry`` recorded for ``dataset``, when every object it names is still
    stored and the entry is as the publisher wrote it (an erasure rewrites files and their hash)."""
    if not entry or entry.get("order_by") != list(dataset.order) or "partition_sql" not in entry:
        return None
    files = entry.get("files") or []
    if not files or not all(intact(objects / f"{f['object']}.parquet", f["bytes"]) for f in files):
        return None
    planned = Plan(dataset, entry["columns"], entry["partition_sql"], [
        Part(name=f["name"], rows=f["rows"], key=f["object"], reused=True, bytes=f["bytes"], sha256=f["sha256"])
        for f in files], from_manifest=True, rule=entry.get("partition_rule"))
    return planned if planned.content_hash == entry.get("content_hash") else None


def on_connections(cons: list[duckdb.DuckDBPyConnection], items: list, fn: Callable) -> list:
    """``fn(con, item)`` for every item, taken in their order by one worker thread per connection
    of ``cons``; the results in the items' order. On the first error (or Ctrl-C in the calling
    thread) no item starts, the other workers' statements are interrupted until the workers have
    stopped, and that first error is raised.

    DuckDB drops an interrupt that arrives between two statements, and a worker may be between
    two (verifying a file it wrote): so the calling thread only supervises, interrupting every
    ``STOP_POLL`` seconds until each worker has returned."""
    results: list = [None] * len(items)
    todo = list(enumerate(items))[::-1]
    errors: list[BaseException] = []
    stop = threading.Event()

    def work(con: duckdb.DuckDBPyConnection) -> None:
        while not stop.is_set():
            try:
                i, item = todo.pop()  # atomic: each item is taken once
            except IndexError:
                return
            try:
                results[i] = fn(con, item)
            except BaseException as exc:  # noqa: BLE001 - raised below, in the calling thread
                errors.append(exc)
                stop.set()
                return

    workers = cons[:max(1, min(len(cons), len(items)))]
    if len(workers) == 1:  # nothing to run beside: in this thread
        work(workers[0])
    else:
        with ThreadPoolExecutor(max_workers=len(workers)) as pool:
            running = {pool.submit(work, con): con for con in workers}

            def supervise() -> None:  # until every worker has returned
                while running:
                    if stop.is_set():
                        for con in running.values():
                            con.interrupt()
                    done, _ = wait(running, timeout=STOP_POLL)
                    for future in done:
                        del running[future]

            try:
                supervise()
            except BaseException:  # Ctrl-C while waiting: stop the workers before leaving
                stop.set()
                supervise()
                raise
    if errors:
        raise errors[0]
    return results


def write_all(cons: list[duckdb.DuckDBPyConnection], plans: list[Plan], objects: Path,
              known: dict[str, tuple[str, int]], pending: dict[str, Path]) -> None:
    """``write_objects`` for every plan, on the connections ``cons`` at once, the plans with the
    most rows to write first.

    One dataset keeps two cores busy only part of the time (a partition's ``COPY`` runs on one
    thread; with one partitioned ``COPY`` per dataset, 1.37 cores on average over the
    500,000-interaction lake's full publish): while one connection waits on a single-threaded
    step, another dataset's runs. Two at a time wrote that publish's 827 files in 5.5–6.0 s
    instead of 7.8–8.2 s. Which plan writes an object that two datasets share is decided before
    any thread starts, in plan order, so the manifest does not depend on timing.
    """
    claimed: set[str] = set()
    work, shared = [], []
    for planned in plans:
        missing, theirs = _claim(planned, objects, claimed, known)
        work.append((planned, missing))
        shared.extend(theirs)
    work.sort(key=lambda item: -sum(p.rows for p in item[1]))
    others = {id(part) for part in shared}
    on_connections(cons, work, lambda con, item: write_objects(con, *item, objects, known, pending, others))
    for part in shared:  # another dataset's identical partition, written by this publish
        part.sha256, part.bytes = known[part.key]
        part.reused = True


def _claim(planned: Plan, objects: Path, claimed: set[str],
           known: dict[str, tuple[str, int]]) -> tuple[list[Part], list[Part]]:
    """The parts of ``planned`` it writes (its object is missing, or not the size the manifests
    recorded, and no plan before claimed it) and those an earlier plan of this publish writes."""
    missing, theirs = [], []
    for part in planned.parts:
        if part.key in claimed:
            theirs.append(part)
        elif not (part.reused and (planned.from_manifest or intact(objects / f"{part.key}.parquet",
                                                                     known.get(part.key, (None, None))[1]))):
            missing.append(part)
    claimed.update(p.key for p in missing)
    return missing, theirs


def write_objects(con: duckdb.DuckDBPyConnection, planned: Plan, missing: list[Part], objects: Path,
                  known: dict[str, tuple[str, int]], pending: dict[str, Path],
                  elsewhere: set[int] = frozenset()) -> None:
    """Write the ``missing`` partitions of ``planned`` to temp files; fill bytes/sha256 of its
    other parts but those another plan writes (``elsewhere``: their ids; ``write_all`` fills them).

    ``known``: object key -> (file sha256, bytes) from earlier manifests (reused objects are not
    re-read).
    ``pending``: object key -> temp file written by this publish, not yet durable nor named:
    ``commit_objects`` fsyncs them all in one pass and renames them (so an object file is complete
    or absent). A part of a manifest-reused plan keeps its recorded bytes and sha256: objects are
    immutable, and ``reuse`` checked each exists.
    """
    dataset = planned.dataset
    order_sql = ", ".join(f"{q(c)} asc nulls first" for c in sort_columns(con, planned, missing))
    batch_dir = objects / f".tmp-{os.getpid()}-{uuid.uuid4().hex}"
    try:
        # sorted once per ``COPY_ROWS`` rows (a sort holds its rows in memory), then a COPY per
        # partition
        written: dict[str, Path] = {}
        for chunk in copy_chunks(missing):
            batch_dir.mkdir(exist_ok=True)
            written |= _copy_sorted(con, planned, chunk, batch_dir, order_sql, PARQUET_OPTIONS)
        for part in planned.parts:
            if id(part) in elsewhere:
                continue
            if part not in missing:
                if not (planned.from_manifest and part.sha256):
                    target = objects / f"{part.key}.parquet"
                    part.bytes = target.stat().st_size
                    part.sha256 = known[part.key][0] if part.key in known else sha256_file(target)
                continue
            tmp = objects / f".tmp-{os.getpid()}-{part.key}.parquet"
            os.replace(written[part.name], tmp)
            part.sha256, part.bytes = verify_written(tmp, part.rows, f"{dataset.table}: {part.name}")
            part.reused = False
            known[part.key] = part.sha256, part.bytes
            pending[part.key] = tmp
    finally:
        shutil.rmtree(batch_dir, ignore_errors=True)


def copy_chunks(parts: list[Part], limit: int | None = None) -> list[list[Part]]:
    """``parts`` cut into runs of consecutive partitions of at most ``limit`` rows
    (``COPY_ROWS``; a larger partition alone): what one sort (``_copy_sorted``) holds."""
    limit = COPY_ROWS if limit is None else limit
    chunks: list[list[Part]] = []
    rows = 0
    for part in parts:
        if chunks and rows + part.rows <= limit:
            chunks[-1].append(part)
            rows += part.rows
        else:
            chunks.append([part])
            rows = part.rows
    return chunks


def sort_columns(con: duckdb.DuckDBPyConnection, planned: Plan, parts: list[Part]) -> list[str]:
    """The columns the rows of ``parts`` are sorted by in their files: the dataset's key, then
    every other column, so that the order is total and a file's bytes depend on its rows alone.

    When no two of these rows share a key (NULLs count as equal), the key alone decides that
    order: the files are byte for byte the same, and the sort compares keys only. Sorting the
    1M-interaction lake's staging.interactions by every column (texts included) took 4.4 s, by
    its id 2.9 s; telling that no id repeats took 0.1 s.
    """
    types = {c["name"]: c["type"] for c in planned.columns}
    keys = [c for c in planned.dataset.order if c in types]
    every = keys + [c for c in types if c not in keys]
    names = [p.stem for p in parts if p.rows]
    # a float key may hold -0.0 and 0.0: equal to the sort, not to a hash
    if (not keys or len(keys) == len(types) or any(types[c] in ("FLOAT", "DOUBLE") for c in keys)
            or sum(p.rows for p in parts) < KEY_SORT_ROWS):
        return every
    # Distinct 64-bit hashes mean distinct keys (two NULL keys hash alike); a collision only
    # makes the sort look at every column.
    where = "" if len(names) == sum(1 for p in planned.parts if p.rows) else f" where {rows_of(planned, names)}"
    rows, distinct = con.execute(f"select count(*), count(distinct hash({', '.join(q(c) for c in keys)})) "
                                 f"from ({planned.dataset.select}){where}").fetchone()
    return keys if rows == distinct else every


def _copy_sorted(con: duckdb.DuckDBPyConnection, planned: Plan, parts: list[Part], directory: Path,
                 order_sql: str, options: str) -> dict[str, Path]:
    """Write each partition of ``parts`` to a file under ``directory``, its rows in ``order_sql``
    order: the rows of all of them sorted once into a temp table by (partition, order), then a
    ``COPY`` of each partition's rows, which keeps the table's order. Returns file name -> file.

    The same files, byte for byte, as a ``COPY … PARTITION_BY … ORDER_BY`` (every file of the
    1M-interaction lake's publish compared), for less: on its staging.interactions (61 days) that
    statement cost 6.4 s of CPU, the sort 2.3 s and the 61 COPYs 2.4 s (each on one thread: the
    snapshot's other connection fills the second core); the whole publish 21.6 -> 17.9 s of CPU,
    11.3 -> 9.8 s."""
    names = [p.stem for p in parts]
    # A scan keeps the table's order only under preserve_insertion_order (DuckDB's default, a
    # database-wide setting): without it a partition spanning two row groups came out of order,
    # so each COPY sorts its rows again (~20% more for those COPYs).
    kept = con.execute("select current_setting('preserve_insertion_order')").fetchone()[0]
    resort = "" if kept else f" order by {order_sql}"
    try:
        con.execute(f"create or replace temp table _fw_sorted as select * from (select *, {planned.part_sql} "
                    f"as __part from ({planned.dataset.select})) where {rows_of(planned, names, named='__part')} "
                    f"order by __part, {order_sql}")
        # A row of NULLs (no partition: never copied). DuckDB marks a column REQUIRED in a file's
        # schema when it knows the column holds no NULL (a partitioned COPY marks every column
        # OPTIONAL): with this row every column is OPTIONAL in every file, so the files of a
        # dataset share one schema whatever their rows (a day's new file was REQUIRED where it
        # had no NULL).
        con.execute("insert into _fw_sorted (__part) values (null)")
        found = {}
        for name in names:
            target = directory / f"{name}.parquet"
            con.execute(f"copy (select * exclude (__part) from _fw_sorted where __part = {lit(name)}{resort}) "
                        f"to {lit(target)} ({options})")
            found[f"{name}.parquet"] = target
        return found
    finally:
        con.execute("drop table if exists _fw_sorted")


def copy_nullable(con: duckdb.DuckDBPyConnection, select_sql: str, target: Path, options: str) -> None:
    """``COPY`` the rows of ``select_sql``, in its order, to ``target`` with every column OPTIONAL
    in the file's schema, as ``_copy_sorted`` writes them: through a table that also holds a row of
    NULLs, left out of the copy (a COPY straight from a query marks REQUIRED each column DuckDB
    knows holds no NULL there: a kept snapshot's file rewritten by a scrub did)."""
    con.execute(f"create or replace temp table _fw_nullable as select *, true as __kept from ({select_sql})")
    try:
        con.execute("insert into _fw_nullable (__kept) values (null)")
        con.execute(f"copy (select * exclude (__kept) from _fw_nullable where __kept) to {lit(target)} ({options})")
    finally:
        con.execute("drop table if exists _fw_nullable")


def verify_written(path: Path, rows: int, what: str) -> tuple[str, int]:
    """Read the file just written once: its sha256, and its Parquet footer must count ``rows``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = path.read_bytes()
    try:
        problem = None
        written = pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows
        if written != rows:
            problem = f"wrote {written} rows, expected {rows}"
    except (pa.ArrowException, OSError) as exc:
        problem = f"wrote a file that does not read as Parquet ({exc})"
    if problem:
        path.unlink(missing_ok=True)
        raise RuntimeError(f"{what}: {problem}; nothing was published")
    return hashlib.sha256(data).hexdigest(), len(data)


def commit_objects(pending: dict[str, Path], objects: Path) -> None:
    """Make this publish's temp objects durable, then give them their names.

    One fsync pass over every file, issued from threads so the file system commits them together
    (a serial fsync per file cost 7 ms each, most of a full publish), then the renames and ONE
    fsync of the objects directory. A kill before the renames leaves only temp files, which the
    next publish removes.
    """
    for tmp in pending.values():
        seal(tmp)
    fsync_all(list(pending.values()))
    for key, tmp in pending.items():
        os.replace(tmp, objects / f"{key}.parquet")
    fsync_dir(objects)
    pending.clear()


def intact(path: Path, size: int | None) -> bool:
    """An object still as published: present, and of the size a manifest recorded (``size``; None:
    none did). Objects are hard-linked into every snapshot that holds them, so a file overwritten
    in an export directory (``df.to_parquet`` over it) changed every snapshot, and the next
    publish reused it: it is written again instead (the snapshots before keep the changed file)."""
    try:
        actual = path.stat().st_size
    except FileNotFoundError:
        return False
    return size is None or actual == size


def seal(path: Path) -> None:
    """Make a new object read-only: it is hard-linked into every snapshot that holds it, so writing
    one exported file in place would change them all. Where the file system refuses modes (some
    FUSE and network mounts), the object stays as written: ``intact`` still checks its size."""
    try:
        os.chmod(path, 0o444)
    except OSError:
        pass


def fsync_all(paths: list[Path]) -> None:
    """fsync every file or directory in ``paths`` (in parallel); the first error is raised."""
    if len(paths) <= 1:
        for path in paths:
            _fsync(path)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(16, len(paths))) as pool:
        for _ in pool.map(_fsync, paths):
            pass


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_file(path: Path) -> None:
    _fsync(path)


def fsync_dir(path: Path) -> None:
    _fsync(path)
