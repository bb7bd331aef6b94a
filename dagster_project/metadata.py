"""Small helpers that turn DuckDB results into Dagster metadata people can read."""

from __future__ import annotations

from typing import Any

import dagster as dg
import duckdb


def markdown_table(con: duckdb.DuckDBPyConnection, sql: str, params: Any = None, limit_chars: int = 60) -> str:
    """A query's result as a Markdown table (values clipped so previews stay readable)."""
    result = con.execute(sql, params or {})
    names = [d[0] for d in result.description]
    rows = result.fetchall()
    if not rows:
        return "_(no rows)_"

    def cell(value: Any) -> str:
        text = "" if value is None else str(value)
        text = text.replace("|", "\\|").replace("\n", "⏎")
        return text if len(text) <= limit_chars else text[: limit_chars - 1] + "…"

    head = "| " + " | ".join(names) + " |\n|" + "---|" * len(names) + "\n"
    return head + "\n".join("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)


def column_schema(con: duckdb.DuckDBPyConnection, table: str) -> dg.MetadataValue:
    """A table's columns and types, as the Dagster UI shows a table's schema; never its rows.
    Dagster's run history lies outside the lake's erasure and retention: a preview of each
    table's first rows, kept there for FLYWHEEL_KEEP_RUNS runs, held ids `flywheel forget` had
    erased and ratings retention had expired (raw session and user ids, git authors)."""
    return dg.MetadataValue.table_schema(dg.TableSchema(columns=[
        dg.TableColumn(name, kind) for name, kind, *_ in con.execute(f"describe {table}").fetchall()]))


def count(con: duckdb.DuckDBPyConnection, sql: str, params: Any = None) -> int:
    return int(con.execute(sql, params or {}).fetchall()[0][0] or 0)
