"""What changed since a builder's last build: the watermarks incremental marts and exports keep.

A builder that maintains its tables incrementally (``transforms.labels.build_labels``,
``transforms.training.build_training_sets``) keeps, in the private schema ``lineage``, what its
previous build consumed, and from it derives the *touched keys* of this build: it deletes their
rows and inserts them recomputed. Whenever it cannot be sure (first build, a setting or the code
changed, a raw table was replayed, rows without an observation order, a watermark missing or
inconsistent) it rebuilds whole, which is always correct.

* ``lineage.mart_watermarks``: per builder, the key of everything a whole build depends on
  besides the data (settings, code, raw epochs) and a small JSON state.
* A staging row's *fingerprint* is ``hash(observed_seq, path, byte_offset, line_number,
  deleted_at_source)``: within one raw epoch raw rows are never rewritten (only
  ``deleted_at_source`` is set), so the same fingerprint means the same row.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from transforms.classify import q
from transforms.partitions import partition_column, time_sql
from transforms.sqlfiles import relation_exists, sql_text, table_columns

SCHEMA = "lineage"


@dataclass(frozen=True)
class Built:
    """What a builder made: rows per table and, per table it changed incrementally, what it wrote.

    ``appended[table] = (start, rows)``: every row the build inserted or changed has a rowid from
    ``start`` on (DuckDB appends after every rowid used; the build changes rows only by deleting
    and inserting), and it inserted ``rows`` of them; every other row was in the table before the
    build. A table rebuilt whole has no entry. Validation and the drop checks then look at those
    rows only (when the table before the build was validated clean): ``scope``.
    """

    rows: dict[str, int]
    appended: dict[str, tuple[int, int]] = field(default_factory=dict)
    # per table changed incrementally, the event days of the rows it deleted (``delete_recomputed``;
    # None: the table has no event time); with the days of the appended rows, the snapshot's
    # files to hash again (``versions.record_changes``)
    deleted_days: dict[str, set[str] | None] = field(default_factory=dict)

    def scope(self, table: str) -> str | None:
        """A predicate over the table (alias ``base``) true of every row the build wrote."""
        return f"base.rowid >= {int(self.appended[table][0])}" if table in self.appended else None


def delete_recomputed(con: duckdb.DuckDBPyConnection, recomputed: dict[str, str]) -> dict[str, set[str] | None]:
    """Delete from each table the rows its predicate (alias ``base``) selects: the rows an
    incremental build recomputes. Returns the event days they were on (None: no event time).

    One scan names the rows and their days (rowid, day); the delete then goes by rowid. Asking
    the days first and deleting by the predicate after read the table twice."""
    days = {}
    for table, rows in recomputed.items():
        day = day_sql(con, table)
        con.execute(f"create or replace temp table _fw_gone as select base.rowid as rid"
                    f"{f', {day} as day' if day else ''} from {_quoted(table)} as base where {rows}")
        con.execute(f"delete from {_quoted(table)} where rowid in (select rid from _fw_gone)")
        days[table] = day and {r[0] for r in con.execute("select distinct day from _fw_gone").fetchall()}
        con.execute("drop table _fw_gone")
    return days


def day_sql(con: duckdb.DuckDBPyConnection, table: str) -> str | None:
    """A row's event day (alias ``base``) as the snapshot names its file (``transforms.partitions``),
    None when ``table`` has no event time."""
    column = partition_column(table_columns(con, table) or {})
    return None if column is None else time_sql(column, alias="base")


def days_of(con: duckdb.DuckDBPyConnection, table: str, rows: str) -> set[str] | None:
    """The event days (``transforms.partitions``: as the snapshot cuts files) of the rows of
    ``table`` that ``rows`` (a predicate, alias ``base``) selects; None without an event time."""
    day = day_sql(con, table)
    return day and {r[0] for r in con.execute(f"select distinct {day} from {_quoted(table)} as base "
                                              f"where {rows}").fetchall()}


def rows_in(con: duckdb.DuckDBPyConnection, table: str, rows: str) -> int:
    """How many rows of ``table`` the predicate ``rows`` (alias ``base``) selects: a rowid range
    a build appended still holds all its rows when this is as many as it appended (a checkpoint
    renumbers rows only downwards, and older rows all lie below the range)."""
    return con.execute(f"select count(*) from {_quoted(table)} base where {rows}").fetchone()[0]


def _quoted(table: str) -> str:
    return ".".join(q(part) for part in table.split("."))


def next_rowid(con: duckdb.DuckDBPyConnection, table: str) -> int:
    """Where the rows appended to ``table`` next begin, or below (deleted rows keep their ids)."""
    return con.execute(f"select coalesce(max(rowid) + 1, 0) from {table}").fetchone()[0]

WATERMARKS = f"{SCHEMA}.mart_watermarks"
FINGERPRINT = "hash(observed_seq, path, byte_offset, line_number, deleted_at_source)"
FINGERPRINT_COLUMNS = ("observed_seq", "path", "byte_offset", "line_number", "deleted_at_source")


def ensure(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"create schema if not exists {SCHEMA}")
    con.execute(f"create table if not exists {WATERMARKS} (builder varchar primary key, "
                "settings_key varchar not null, state varchar not null)")


def load(con: duckdb.DuckDBPyConnection, builder: str, settings_key: str) -> dict[str, Any] | None:
    """The builder's state when its last build had the same settings key, else None."""
    ensure(con)
    row = con.execute(f"select settings_key, state from {WATERMARKS} where builder = ?", [builder]).fetchone()
    if row is None or row[0] != settings_key:
        return None
    return json.loads(row[1])


def save(con: duckdb.DuckDBPyConnection, builder: str, settings_key: str, state: dict[str, Any]) -> None:
    ensure(con)
    con.execute(f"insert or replace into {WATERMARKS} values (?, ?, ?)",
                [builder, settings_key, json.dumps(state, sort_keys=True, default=str)])


# The Python the incremental builds run: a change to it rebuilds whole, like a SQL change.
CODE = tuple(Path(__file__).resolve().parent / f"{name}.py" for name in ("delta", "labels", "training", "text"))


def code_fingerprint(*paths: Path) -> str:
    """sha256 over the text of every file under ``paths``: a code change rebuilds what it built."""
    digest = hashlib.sha256()
    for root in paths:
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        for f in files:
            if f.is_file() and f.suffix in {".py", ".sql"}:
                digest.update(str(f.relative_to(root.parent)).encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()


def settings_key(*parts: Any, sql: tuple[str, ...] = ()) -> str:
    """A digest of settings and code (the SQL files a builder runs, the builders, the macros)."""
    digest = hashlib.sha256()
    digest.update(json.dumps(parts, sort_keys=True, default=str).encode())
    for name in sql:
        digest.update(b"\0" + sql_text(name).encode())
    digest.update(b"\0" + code_fingerprint(*CODE).encode())
    return digest.hexdigest()


def raw_epoch(con: duckdb.DuckDBPyConnection, table: str) -> str | None:
    """The epoch ``lineage.table_versions`` gives ``table`` (changes when it is replayed)."""
    if not relation_exists(con, "lineage.table_versions"):
        return None
    row = con.execute("select epoch from lineage.table_versions where table_name = ?", [table]).fetchone()
    return row[0] if row else None


def has_fingerprints(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """True when every row of ``table`` has an observation order (engine-loaded rows do)."""
    if not set(FINGERPRINT_COLUMNS) <= set(table_columns(con, table) or {}):
        return False
    return con.execute(f"select count(*) = count(observed_seq) from {table}").fetchone()[0]


def table_exists(con: duckdb.DuckDBPyConnection, qualified: str) -> bool:
    return relation_exists(con, qualified)


def temp_keys(con: duckdb.DuckDBPyConnection, name: str, select: str | None = None,
              params: dict[str, Any] | None = None) -> int:
    """(Re)create temp table ``name(key varchar)`` from ``select`` (empty without); its size."""
    if select is None:
        con.execute(f"create or replace temp table {name} (key varchar)")
    else:
        con.execute(f"create or replace temp table {name} as select distinct key from ({select})", params or {})
    return con.execute(f"select count(*) from {name}").fetchone()[0]


STAGING_INTERACTIONS = "staging.interactions"
# Every staging interaction id a labels build read, with its 64-bit hash (``transforms.labels``).
LABEL_INPUTS = f"{SCHEMA}.label_inputs"


def staging_interactions(con: duckdb.DuckDBPyConnection, into: str, columns: str, ids: str,
                         since: int | None) -> None:
    """Append to the temp table ``into`` (by name; it holds none of these ids) the ``columns`` of
    the staging interactions whose id ``ids`` selects (a select of one column, ``key``).

    Matching a day's few thousand ids against staging's 1M-row id column costs 25-35 ms a
    statement, and most of a day's touched ids are its new interactions: rows observed after
    ``since`` (the largest ``observed_seq`` of the rows the caller's last build read), appended
    after every earlier row, so zone maps skip all row groups but the last (matching 10,000 of
    1M rows there took 4 ms, the whole column 35 ms). An id not found among them has an earlier row only if ``lineage.label_inputs``
    holds it (feedback on an older interaction; the caller vouches that it holds every id
    observed up to ``since``), found by its hash (~4 ms): only then is the whole id column
    matched, those rows fetched by rowid (a semi join would read every column of every row).
    ``since`` None: the whole column. The caller holds the transaction."""
    rest = f"select key from ({ids}) as t where key not in (select id from {into} where id is not null)"
    if since is not None and "h" in (table_columns(con, LABEL_INPUTS) or {}):
        con.execute(f"insert into {into} by name select {columns} from {STAGING_INTERACTIONS} "
                    f"where observed_seq > $since and id in ({ids})", {"since": since})
        if not con.execute(f"select count(*) from {LABEL_INPUTS} where h in (select hash(key) from ({rest}))"
                           ).fetchone()[0]:
            return
    found = [r[0] for r in con.execute(f"select rowid from {STAGING_INTERACTIONS} where id in ({rest})").fetchall()]
    # rowid in (unnest): 0.04 s for 10,000 of 1M rows, where rowid = any(list) took 0.08 s
    con.execute(f"insert into {into} by name select {columns} from {STAGING_INTERACTIONS} "
                "where rowid in (select unnest($rows::bigint[]))", {"rows": found})


def staging_watermark(con: duckdb.DuckDBPyConnection) -> int:
    """The largest ``observed_seq`` of staging's interactions (-1 when none): a build's ``since``
    for ``staging_interactions`` next time."""
    return con.execute(f"select coalesce(max(observed_seq), -1) from {STAGING_INTERACTIONS}").fetchone()[0]


def rows_with_ids(con: duckdb.DuckDBPyConnection, into: str, table: str, columns: str, id_hash: str,
                  ids: str) -> None:
    """Temp table ``into``: ``rowid as rid`` and ``columns`` of the rows of ``table`` whose ``id``
    is one that ``ids`` selects, found by ``id_hash`` (the table's ``hash(id)`` column) first.

    Matching a few thousand ids against a 1M-row id column costs ~20 ms however few rows match
    (a day's new interactions mostly have no earlier row at all); the 64-bit hashes are a scan
    of 1M integers (~4 ms), and only the rows they find are matched by id, so a hash collision
    only adds a row the id check removes. The caller holds the transaction: the rowids found
    name the same rows in the second statement."""
    found = [r[0] for r in con.execute(f"select rowid from {table} where {id_hash} in "
                                       f"(select hash(id) from ({ids}) as t(id))").fetchall()]
    con.execute(f"create or replace temp table {into} as select rowid as rid, {columns} from {table} "
                f"where rowid in (select unnest($rows::bigint[])) and id in ({ids})", {"rows": found})
