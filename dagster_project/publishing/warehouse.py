"""The analyst warehouse of a snapshot: a small DuckDB file of views over its Parquet files.

Views name the snapshot's files by absolute path, so a connection keeps reading the snapshot it
opened even after newer ones are published (until retention deletes it). Each table's and
column's ``COMMENT`` in the state database is carried over to its view. Before the snapshot can
become current every view must bind and every file it lists must be there with the size the
manifest records: a view that does not read fails the publish, not the analyst. Row counts are
not read back: each file's Parquet footer was checked against its rows when it was written
(``parquet.verify_written``) and objects are immutable, so reading every footer again per publish
would cost what the lake holds, not what is new. ``verify_warehouse`` (``verify_snapshot``) still
reads every view.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from dagster_project.catalog import column_comment
from dagster_project.publishing.parquet import fsync_file, lit, q


def build_warehouse(state: duckdb.DuckDBPyConnection, path: Path, views: dict[str, list[tuple[Path, int]]]) -> int:
    """Write ``path`` with one view per ``schema.table`` -> its (file, bytes) list (absolute paths:
    the views read them from wherever the warehouse is opened); returns bytes."""
    comments = _comments(state)
    path.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    try:
        # One transaction, a view's comments in one call: ~600 COMMENT statements each committed
        # alone cost 1.6 ms apiece, most of an incremental publish.
        con.execute("begin transaction")
        for table, files in sorted(views.items()):
            schema, name = table.split(".", 1)
            con.execute(f"create schema if not exists {q(schema)}")
            _check_files(path, table, files)
            listing = "[" + ", ".join(lit(f) for f, _ in files) + "]"
            con.execute(f"create view {q(schema)}.{q(name)} as select * from read_parquet({listing})")
            table_comment, column_comments = comments.get(table, (None, {}))
            statements = [f"comment on view {q(schema)}.{q(name)} is {lit(table_comment)}"] if table_comment else []
            try:  # binds the view: its files' schema is read
                present = {r[0] for r in con.execute(f"describe {q(schema)}.{q(name)}").fetchall()}
            except duckdb.Error as exc:
                raise RuntimeError(f"{path}: view {table} does not read ({exc}); not publishing") from exc
            for column in sorted(present):
                # a pseudonymised column is renamed in the published data: describe it by its new name
                text = column_comments.get(column) or column_comment(schema, name, column, {})
                if text:
                    statements.append(f"comment on column {q(schema)}.{q(name)}.{q(column)} is {lit(text)}")
            if statements:
                con.execute(";\n".join(statements))
        con.execute("commit")
        con.execute("checkpoint")
    finally:
        con.close()
    _check_opens(path, len(views))
    fsync_file(path)
    return path.stat().st_size


def _check_opens(path: Path, views: int) -> None:
    """The file opens as an analyst opens it (read-only) and lists every view: no view is read."""
    try:
        con = duckdb.connect(str(path), read_only=True)
        try:
            got = con.execute("select count(*) from duckdb_views() where not internal").fetchone()[0]
        finally:
            con.close()
    except duckdb.Error as exc:
        raise RuntimeError(f"{path}: the warehouse does not open ({exc}); not publishing") from exc
    if got != views:
        raise RuntimeError(f"{path}: the warehouse lists {got} views, expected {views}; not publishing")


def _check_files(path: Path, table: str, files: list[tuple[Path, int]]) -> None:
    for file, size in files:
        try:
            got = file.stat().st_size
        except OSError as exc:
            raise RuntimeError(f"{path}: view {table} does not read ({file} is missing: {exc.strerror}); "
                               "not publishing") from exc
        if got != size:
            raise RuntimeError(f"{path}: view {table} does not read ({file} has {got} bytes, the manifest "
                               f"{size}); not publishing")


def verify_warehouse(path: Path, expected: dict[str, int]) -> None:
    """Open read-only and read every view; its row count must be the manifest's."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        for table, rows in expected.items():
            schema, name = table.split(".", 1)
            try:
                got = con.execute(f"select count(*) from {q(schema)}.{q(name)}").fetchone()[0]
            except duckdb.Error as exc:
                raise RuntimeError(f"{path}: view {table} does not read ({exc}); not publishing") from exc
            if got != rows:
                raise RuntimeError(f"{path}: view {table} reads {got} rows, expected {rows}; not publishing")
    finally:
        con.close()


def _comments(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str | None, dict[str, str]]]:
    out: dict[str, tuple[str | None, dict[str, str]]] = {}
    for schema, name, comment in con.execute(
            "select schema_name, table_name, comment from duckdb_tables() "
            "where database_name = current_database() and not temporary").fetchall():
        out[f"{schema}.{name}"] = (comment, {})
    for schema, name, column, comment in con.execute(
            "select schema_name, table_name, column_name, comment from duckdb_columns() "
            "where database_name = current_database() and comment is not null and comment <> ''").fetchall():
        if f"{schema}.{name}" in out:
            out[f"{schema}.{name}"][1][column] = comment
    return out
