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

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb

SCHEMA = "lineage"
TABLE = f"{SCHEMA}.table_versions"


@dataclass(frozen=True)
class Version:
    table: str
    version: str  # changes whenever the content may have changed
    epoch: str  # changes only when the table was rebuilt rather than appended to
    input_key: str | None  # built tables: the key they were built from
    run_id: str | None  # the run that made this version


def ensure(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"create schema if not exists {SCHEMA}")
    con.execute(f"""
        create table if not exists {TABLE} (
            table_name varchar primary key,
            version varchar not null,
            epoch varchar not null,
            input_key varchar,
            run_id varchar,
            updated_at timestamptz not null default now()
        )""")


def get(con: duckdb.DuckDBPyConnection, table: str) -> Version | None:
    ensure(con)
    row = con.execute(f"select version, epoch, input_key, run_id from {TABLE} where table_name = ?",
                      [table]).fetchone()
    return Version(table, *row) if row else None


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


def record_build(con: duckdb.DuckDBPyConnection, table: str, input_key: str, run_id: str | None) -> None:
    """``table`` now holds what ``input_key`` determines; its version is that key."""
    ensure(con)
    before = get(con, table)
    epoch = before.epoch if before is not None and before.input_key == input_key else input_key
    con.execute(f"insert or replace into {TABLE} values (?, ?, ?, ?, ?, now())",
                [table, input_key, epoch, input_key, run_id])


def forget(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """The table was dropped: whatever depended on its version must be rebuilt."""
    ensure(con)
    con.execute(f"delete from {TABLE} where table_name = ?", [table])


def key(*parts) -> str:
    """A stable digest of JSON-able parts (code fingerprint, settings, input versions)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def code_fingerprint(*paths: Path) -> str:
    """sha256 over the text of every file under ``paths``: a code change rebuilds what it built."""
    digest = hashlib.sha256()
    for root in paths:
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        for f in files:
            if f.is_file() and f.suffix in {".py", ".sql"}:
                digest.update(str(f.relative_to(root.parent)).encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()
