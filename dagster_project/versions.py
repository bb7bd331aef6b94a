"""Content versions of the state database's tables: how a run knows what it may skip.

Every table a run writes has a version in ``lineage.table_versions`` (a private schema: never
published). ``raw.<source>`` gets a fresh version whenever ingest writes it, and a fresh *epoch*
when it is dropped and replayed (a full refresh, a forget, retention), so a consumer can tell
"rows were appended or flagged" from "start again". A table built from other tables is versioned
by the key of everything its content is a function of (code, the settings it reads, its inputs'
versions): when that key equals the one it was built with, the build, its validation and its
hashing for the snapshot are all skipped, because they would produce the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from transforms.delta import code_fingerprint
from transforms.sqlfiles import ensure_table, is_base_table, quote_table, table_columns

SCHEMA = "lineage"
TABLE = f"{SCHEMA}.table_versions"
VALIDATED = f"{SCHEMA}.validated"  # the last validation of each table: on which version, by which run
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Version:
    table: str
    version: str  # changes whenever the content may have changed
    epoch: str  # changes only when the table was rebuilt rather than appended to
    input_key: str | None  # built tables: the key they were built from
    run_id: str | None  # the run that made this version


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Every lineage table of this module: created before a run's steps, which may run at once
    (two transactions creating one table conflict)."""
    ensure_validated(con)
    ensure_table(con, FINGERPRINTS, FINGERPRINTS_COLUMNS)
    ensure_table(con, CHANGES, CHANGES_COLUMNS)


def ensure(con: duckdb.DuckDBPyConnection) -> None:
    ensure_table(con, TABLE, "table_name varchar primary key, version varchar not null, epoch varchar not null, "
                             "input_key varchar, run_id varchar, updated_at timestamptz not null default now()")


def get(con: duckdb.DuckDBPyConnection, table: str) -> Version | None:
    ensure(con)
    row = con.execute(f"select version, epoch, input_key, run_id from {TABLE} where table_name = ?",
                      [table]).fetchone()
    return Version(table, *row) if row else None


def get_many(con: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> dict[str, Version | None]:
    """``get`` of each table, in one statement (a step that reuses nine tables asks once)."""
    ensure(con)
    wanted = list(dict.fromkeys(tables))
    found = {row[0]: Version(*row) for row in con.execute(
        f"select table_name, version, epoch, input_key, run_id from {TABLE} "
        "where table_name in (select unnest(?::varchar[]))", [wanted]).fetchall()}
    return {t: found.get(t) for t in wanted}


def bump(con: duckdb.DuckDBPyConnection, table: str, run_id: str | None, *, reset: bool = False) -> str:
    """Record that ``table``'s content changed (``reset``: it was dropped and is being rebuilt).

    Call it inside the transaction that changes the table, so the version never lies.
    """
    ensure(con)
    version = uuid.uuid4().hex
    before = get(con, table)
    epoch = version if reset or before is None else before.epoch
    con.execute(f"insert or replace into {TABLE} values (?, ?, ?, null, ?, now())",
                [table, version, epoch, run_id])
    return version


def record_build(con: duckdb.DuckDBPyConnection, table: str, input_key: str, run_id: str | None,
                 fingerprint: str | None = None) -> None:
    """``table`` now holds what ``input_key`` determines; its version is that key. ``fingerprint``:
    its content's (``content_fingerprint``), for the next whole rebuild to compare with."""
    ensure(con)
    before = get(con, table)
    epoch = before.epoch if before is not None and before.input_key == input_key else input_key
    con.execute(f"insert or replace into {TABLE} values (?, ?, ?, ?, ?, now())",
                [table, input_key, epoch, input_key, run_id])
    ensure_table(con, FINGERPRINTS, FINGERPRINTS_COLUMNS)
    con.execute(f"delete from {FINGERPRINTS} where table_name = ?", [table])
    if fingerprint is not None:
        con.execute(f"insert into {FINGERPRINTS} values (?, ?, ?)", [table, input_key, fingerprint])


FINGERPRINTS = f"{SCHEMA}.table_fingerprints"
FINGERPRINTS_COLUMNS = "table_name varchar primary key, version varchar not null, fingerprint varchar not null"
# Summing the row hashes reads the whole table: only tables this small are fingerprinted.
FINGERPRINT_MAX_ROWS = 100_000


def content_fingerprint(con: duckdb.DuckDBPyConnection, table: str) -> str | None:
    """A digest of ``table``'s columns (names and types, in order) and rows (their number and the
    sum of the 64-bit hashes of each row's JSON: independent of row order), None for a table of more
    than ``FINGERPRINT_MAX_ROWS`` rows. The JSON keeps what ``hash()`` of the values loses: an empty
    list from NULL, nesting, a struct of NULLs from NULL, -0.0 from 0.0."""
    quoted = quote_table(table)
    rows = con.execute(f"select count(*) from {quoted}").fetchone()[0]
    if rows > FINGERPRINT_MAX_ROWS:
        return None
    hashes = con.execute(f"select coalesce(sum(hash(to_json(t)::varchar)), 0)::varchar from {quoted} t").fetchone()[0]
    return key(list(table_columns(con, table).items()), rows, hashes)


def same_content(con: duckdb.DuckDBPyConnection, table: str, before: Version | None, fingerprint: str | None) -> bool:
    """A whole rebuild of ``table`` gave the content of its version ``before`` (one a completed
    build made and fingerprinted)."""
    if fingerprint is None or before is None or before.input_key is None or not is_base_table(con, FINGERPRINTS):
        return False
    row = con.execute(f"select fingerprint from {FINGERPRINTS} where table_name = ? and version = ?",
                      [table, before.version]).fetchone()
    return row is not None and row[0] == fingerprint


def record_unchanged(con: duckdb.DuckDBPyConnection, table: str, input_key: str, run_id: str | None,
                     before: Version) -> None:
    """``table`` was built from ``input_key`` and holds exactly the rows of its version ``before``
    (an incremental build that deleted and inserted nothing): it keeps that version, so its
    validation and its snapshot files are reused instead of redone."""
    ensure(con)
    con.execute(f"insert or replace into {TABLE} values (?, ?, ?, ?, ?, now())",
                [table, before.version, before.epoch, input_key, run_id])


def invalidate(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """``table`` is being rebuilt: until ``record_build`` its content may be anything, so it gets a
    fresh version matching no input key, validation or manifest entry (a build that fails half-way
    is never reused); its epoch stays for whoever reads it."""
    ensure(con)
    con.execute(f"update {TABLE} set input_key = null, version = ? where table_name = ?", [uuid.uuid4().hex, table])


def forget(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """The table was dropped: whatever depended on its version must be rebuilt."""
    ensure(con)
    con.execute(f"delete from {TABLE} where table_name = ?", [table])


CHANGES = f"{SCHEMA}.table_changes"
CHANGES_COLUMNS = ("table_name varchar not null, version varchar not null, base_version varchar not null, "
                   "days varchar[] not null, primary key (table_name, version)")


def record_changes(con: duckdb.DuckDBPyConnection, table: str, version: str, base: Version | None,
                   days: Iterable[str] | None) -> None:
    """``version`` of ``table`` differs from its ``base`` version only in rows whose event day
    (``transforms.partitions.time_sql`` of the table's partition column) is in ``days``: every row
    deleted, inserted or changed lies on one of them. ``days`` None (a rebuild) records nothing,
    which ``changed_days`` reads as "anything may have changed"."""
    if base is None or days is None:
        return
    ensure_table(con, CHANGES, CHANGES_COLUMNS)
    con.execute(f"insert or replace into {CHANGES} values (?, ?, ?, ?)", [table, version, base.version, sorted(days)])


def changed_days(con: duckdb.DuckDBPyConnection, table: str, since: str | None, limit: int = 1000) -> set[str] | None:
    """The event days on which ``table``'s current version may differ from its version ``since``
    (the union over the builds in between), or None when some build in between did not say (a
    rebuild, a failed build, another writer): then anything may differ."""
    current = get(con, table)
    if since is None or current is None:
        return None
    days: set[str] = set()
    version = current.version
    for _ in range(limit):
        if version == since:
            return days
        try:
            row = con.execute(f"select base_version, days from {CHANGES} where table_name = ? and version = ?",
                              [table, version]).fetchone()
        except duckdb.CatalogException:  # nothing recorded yet
            return None
        if row is None:
            return None
        version, more = row
        days.update(more)
    return None


KEEP_CHANGES = 64  # builds' day lists kept per table; a snapshot further behind hashes the table whole


def prune_changes(con: duckdb.DuckDBPyConnection, keep: int = KEEP_CHANGES) -> int:
    """Forget all but the ``keep`` latest builds' day lists of each table (rows deleted): a
    snapshot asks for the builds since the one it published, and a table behind by more than
    ``keep`` builds is hashed whole (``changed_days`` finds the chain broken), so the list stops
    growing with the number of runs."""
    if not is_base_table(con, CHANGES):
        return 0
    return int(con.execute(
        f"delete from {CHANGES} where rowid in (select rowid from (select rowid, row_number() over "
        f"(partition by table_name order by rowid desc) as n from {CHANGES}) where n > ?)", [keep]).fetchone()[0])


def key(*parts) -> str:
    """A stable digest of JSON-able parts (code fingerprint, settings, input versions)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# defs/ files that decide when runs happen (job, schedule, sensors), not what a table holds: an
# edit to them must not make every table be validated again
NOT_IN_CODE_KEY = ("automation.py",)


def code_paths() -> list:
    """The files and directories ``code`` hashes."""
    project = ROOT / "dagster_project"
    defs = [p for p in sorted((project / "defs").rglob("*.py")) if p.name not in NOT_IN_CODE_KEY]
    return [ROOT / "transforms", ROOT / "sql", project / "expectations.py", project / "validation.py",
            project / "tables.py", *defs, project / "sources"]


@functools.cache
def code() -> str:
    """The fingerprint of the code a built table's content (and its validation) depends on.

    Computed once per process: hashing the files costs ~10 ms, and the code cannot change under
    a running process anyway.
    """
    return code_fingerprint(*code_paths())


def versions_of(con: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> dict[str, str | None]:
    ensure(con)
    wanted = sorted(set(tables))
    found = dict(con.execute(f"select table_name, version from {TABLE} where table_name in "
                             "(select unnest(?::varchar[]))", [wanted]).fetchall())
    return {t: found.get(t) for t in wanted}


def input_key(con: duckdb.DuckDBPyConnection, inputs: Iterable[str], settings: dict) -> str:
    """The key of a build: the code, the settings it reads and the current versions of its inputs."""
    return key(code(), settings, versions_of(con, inputs))


def reusable(con: duckdb.DuckDBPyConnection, tables: Iterable[str], input_key: str) -> bool:
    """Every table exists and was last built from ``input_key``: building again would give the same rows."""
    for table in tables:
        recorded = get(con, table)
        if recorded is None or recorded.input_key != input_key or not exists(con, table):
            return False
    return True


def exists(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return is_base_table(con, table)


def secret_hash(secret: bytes | str | None) -> str | None:
    """What a key stands for in an input key: its sha256, never the key itself."""
    if secret is None:
        return None
    return hashlib.sha256(secret if isinstance(secret, bytes) else secret.encode()).hexdigest()


def built_by(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Built table -> the run that built its current version."""
    try:
        return dict(con.execute(f"select table_name, run_id from {TABLE} where input_key is not null").fetchall())
    except duckdb.CatalogException:  # a state database from before the lineage
        return {}


def exclusions(con: duckdb.DuckDBPyConnection, run_id: str,
               built: dict[str, str] | None = None) -> list[tuple[str, str, int]]:
    """(table, expectation, rows) a drop expectation keeps out of each table after ``run_id`` (the
    latest run): a table it reused counts the ledger rows of the run that built its version
    (``built``: table -> that run; default: the lineage of ``con``)."""
    built = built_by(con) if built is None else built
    # Only the ledger rows of those runs are counted: the ledger grows by every run's exclusions
    # (an incremental build carries the earlier ones forward), and a no-op calls this once per
    # step (1M ledger rows: 18.5 ms a call grouped whole, 2.6 ms filtered first).
    try:
        rows = con.execute("select table_name, expectation, run_id, count(*)::bigint from ingest.excluded "
                           "where run_id in (select unnest($runs)) group by all order by all",
                           {"runs": sorted({run_id, *built.values()} - {None})}).fetchall()
    except duckdb.CatalogException:  # no ledger yet
        return []
    return [(t, e, n) for t, e, r, n in rows if r == (built.get(t) or run_id)]


# ---------------------------------------------------------------------------------------------
# Validations: a suite's result is a function of the table's version, the suite's code and the
# clock's day ("not in the future"), so a table that did not change keeps its last result.
# ---------------------------------------------------------------------------------------------

def ensure_validated(con: duckdb.DuckDBPyConnection) -> None:
    ensure(con)
    ensure_table(con, VALIDATED, "table_name varchar primary key, validation_key varchar not null, "
                                 "run_id varchar not null, passed boolean not null, result json")


def validation_key_of(version: Version | None) -> str | None:
    """The validation key of a version of a table: None for a table without a version (it is
    validated every run).

    Neither the run date nor the clock is part of it: the suites compare times with the clock
    only as "not in the future", which a row that passed keeps passing as time goes on. A result
    with any unexpected row is reused only on the day it was found (``reuse_validations``).
    """
    return None if version is None else key(code(), version.version)


def reuse_validations(con: duckdb.DuckDBPyConnection, keys: dict[str, str | None], run_id: str,
                      today) -> dict[str, tuple[bool, dict, str]]:
    """Of the tables ``keys`` names (table -> the validation key of its current version), those
    whose last validation ran on what their key stands for, with (passed, result, run that
    validated); their ``ingest.validations`` rows are recorded again under ``run_id``, so the
    publish gate, the manifest and ``flywheel status`` read this run as usual. Two statements
    whatever the number of tables: the copy reads the run log once, not once per table (it grows
    by every run's rows)."""
    wanted = [table for table, key in keys.items() if key is not None]
    if not wanted:
        return {}
    ensure_validated(con)
    last = {table: (key, before, passed, json.loads(result) if result else {})
            for table, key, before, passed, result in con.execute(
                f"select table_name, validation_key, run_id, passed, result from {VALIDATED} "
                "where table_name in (select unnest(?::varchar[]))", [wanted]).fetchall()}
    reusable = {}
    for table in wanted:
        key, before, passed, result = last.get(table, (None, None, None, None))
        if key != keys[table] or before == run_id:
            continue
        if result.get("failed", "none") != "none" and result.get("validated_on") != str(today):
            continue  # something was unexpected: time may have changed the verdict, validate again
        reusable[table] = (bool(passed), result, before)
    if not reusable:
        return {}
    copied = {table for (table,) in con.execute(
        "insert into ingest.validations by name select * exclude (recorded_at) replace ($run as run_id) "
        "from ingest.validations v "
        "semi join (select unnest($tables) as table_name, unnest($runs) as run_id) c "
        "on c.table_name = v.table_name and c.run_id = v.run_id returning table_name",
        {"run": run_id, "tables": list(reusable), "runs": [r[2] for r in reusable.values()]}).fetchall()}
    # a table whose rows are gone (a scrubbed run log) is validated again
    return {table: found for table, found in reusable.items() if table in copied}


def record_validation(con: duckdb.DuckDBPyConnection, table: str, validation_key: str | None, run_id: str,
                      passed: bool, result: dict) -> None:
    ensure_validated(con)
    if validation_key is None:
        con.execute(f"delete from {VALIDATED} where table_name = ?", [table])
        return
    con.execute(f"insert or replace into {VALIDATED} values (?, ?, ?, ?, ?)",
                [table, validation_key, run_id, passed, json.dumps(result, default=str)])
