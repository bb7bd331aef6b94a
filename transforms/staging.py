"""Last-wins deduplication: one row per identity, the greatest by the source's total order."""

from __future__ import annotations

import duckdb

from transforms.classify import q
from transforms.spec import SourceSpec

PROVENANCE = [("path", "varchar"), ("line_number", "bigint"), ("byte_offset", "bigint"),
              ("ingest_run_id", "varchar"), ("observed_seq", "bigint"), ("deleted_at_source", "timestamptz")]


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


def last_wins_sql(spec: SourceSpec) -> str:
    partition = ", ".join(q(c) for c in identity_columns(spec))
    order = ", ".join(f"{q(c)} desc nulls last" for c in order_terms(spec))
    return (
        f"select * from raw.{q(spec.name)}\n"
        f"qualify row_number() over (partition by {partition} order by {order}) = 1"
    )


def build_staging(con: duckdb.DuckDBPyConnection, spec: SourceSpec) -> int:
    """Rebuild ``staging.<source>`` from every loaded version in ``raw.<source>``.

    Rebuilding from all versions (instead of merging increments) is what makes an incremental
    sequence of runs produce exactly the table one full refresh would.
    """
    con.execute("create schema if not exists staging")
    table = f"staging.{q(spec.name)}"
    con.execute(f"create or replace table {table} as {last_wins_sql(spec)}")
    return con.execute(f"select count(*) from {table}").fetchall()[0][0]
