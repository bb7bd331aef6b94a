"""The analyst warehouse of a snapshot: a small DuckDB file of views over its Parquet files.

Views read the snapshot's files by absolute path: each view reads its dataset's directory
(``<dir>/*.parquet``) under ``flywheel_snapshot()``, a macro of the warehouse file that returns the
snapshot's directory, so a connection keeps reading the snapshot it opened even after newer ones
are published (until retention deletes it). Each table's and column's ``COMMENT`` in the state
database is carried over to its view. Before the snapshot can become current every dataset
directory must hold exactly the files the manifest lists, each with the size it records, and every
new view must bind (a kept view bound over the same directory and columns in the last snapshot):
a view that does not read fails the publish, not the analyst. Row counts are not read back: each
file's Parquet footer was checked against its rows when it was written (``parquet.verify_written``)
and objects are immutable, so reading every footer again per publish would cost what the lake
holds, not what is new. ``verify_warehouse`` (``verify_snapshot``) still reads every view.

A publish starts from a copy of the previous snapshot's warehouse: the macro is pointed at the new
directory, a view whose dataset directory and columns are unchanged is kept with its comments (a
day's new file changes neither), and only the other views are created again, bound and commented
(each ``COMMENT`` is a catalog write, ~0.25 ms: about 600 of them made most of the cost of an
incremental publish). Comments are compared with the state database's, so a changed description
still reaches a kept view. The copy is used only when the file is byte for byte what the publisher
left (the sha256 the previous manifest records) and its views follow this code's ``SCHEME``: a
table an analyst created in it, a view replaced by hand or an older template is never carried
forward. (A digest of its catalog, which this replaced, bound every view to read it: ~35 ms of
each incremental publish, on its critical path.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import duckdb

from dagster_project.catalog import column_comment
from dagster_project.publishing.parquet import fsync_file, lit, q

MACRO = "flywheel_snapshot"
SCHEME = 2  # the views' template: bump when it changes, so no view of an older one is kept
# (1: a list of the files; 2: the dataset's directory)
STATE_TABLES = ("select schema_name, table_name, comment from duckdb_tables() "
                "where database_name = current_database() and not temporary")
VIEWS = "select schema_name, view_name, comment from duckdb_views() where not internal"
# The snapshot directory as a glob pattern that matches only itself: DuckDB reads ``[``, ``*`` and
# ``?`` in a path as glob syntax (an export directory named ``data [1]`` would match nothing), and
# ``[x]`` matches exactly ``x``.
ROOT_GLOB = f"regexp_replace({MACRO}(), '([\\[*?])', '[\\1]', 'g')"


def _glob_literal(path: str) -> str:
    return "".join(f"[{c}]" if c in "[*?" else c for c in path)


def build_warehouse(state: duckdb.DuckDBPyConnection, path: Path, views: dict[str, list[tuple[str, int]]], *,
                    previous: Path | None = None, previous_entry: dict | None = None,
                    kept: Iterable[str] = ()) -> dict:
    """Write ``path`` with one view per ``schema.table`` -> its (file relative to ``path``'s
    directory, bytes) list, all in one directory; returns its manifest entry's figures (bytes,
    scheme, the file's sha256). ``previous``: the warehouse of the snapshot this one follows,
    ``previous_entry`` that snapshot's manifest entry for it; ``kept``: tables whose directory and
    columns are those of their view there (it is kept as it is, not created again)."""
    root = path.parent.resolve()
    comments = _comments(state, STATE_TABLES)
    trusted = (previous_entry or {}).get("scheme") == SCHEME and (previous_entry or {}).get("sha256")
    con, start_from = _start(path, previous if trusted else None, (previous_entry or {}).get("sha256"))
    try:
        # One transaction, a view's comments in one call: ~600 COMMENT statements each committed
        # alone cost 1.6 ms apiece.
        con.execute("begin transaction")
        con.execute(f"create or replace macro main.{MACRO}() as {lit(str(root))}")
        have = _comments(con, VIEWS) if start_from else {}
        for table in sorted(set(have) - set(views)):  # a dataset no longer published
            schema, name = table.split(".", 1)
            con.execute(f"drop view {q(schema)}.{q(name)}")
        keep = set(kept) & set(have)
        for table, files in sorted(views.items()):
            schema, name = table.split(".", 1)
            folder = _check_files(path, table, root, files)
            if table not in keep:
                con.execute(f"create schema if not exists {q(schema)}")
                con.execute(f"create or replace view {q(schema)}.{q(name)} as select * from read_parquet("
                            f"{ROOT_GLOB} || {lit('/' + _glob_literal(folder) + '/*.parquet')}, hive_partitioning = false)")
            table_comment, column_comments = comments.get(table, (None, {}))
            old_table_comment, old_columns = have.get(table, (None, {})) if table in keep else (None, {})
            statements = ([f"comment on view {q(schema)}.{q(name)} is {_text(table_comment)}"]
                          if table_comment != old_table_comment else [])
            if table in keep:  # it bound on files of this directory and these columns in the last snapshot
                present = set(old_columns)
            else:
                try:  # binds the view: its files' schema is read
                    present = {r[0] for r in con.execute(f"describe {q(schema)}.{q(name)}").fetchall()}
                except duckdb.Error as exc:
                    raise RuntimeError(f"{path}: view {table} does not read ({exc}); not publishing") from exc
            for column in sorted(present):
                # a pseudonymised column is renamed in the published data: describe it by its new name
                text = column_comments.get(column) or column_comment(schema, name, column, {})
                if text != old_columns.get(column):  # None unsets a description no longer given
                    statements.append(f"comment on column {q(schema)}.{q(name)}.{q(column)} is {_text(text)}")
            if statements:
                con.execute(";\n".join(statements))
        con.execute("commit")
        con.execute("checkpoint")
    finally:
        con.close()
    _check_opens(path, len(views))
    fsync_file(path)
    # ``root``: the directory its views read by absolute path (a moved or copied lake's differs)
    return {"bytes": path.stat().st_size, "scheme": SCHEME, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "root": str(root)}


def _text(comment: str | None) -> str:
    return "null" if comment is None else lit(comment)


def _start(path: Path, previous: Path | None, sha256: str | None) -> tuple[duckdb.DuckDBPyConnection, bool]:
    """``path`` opened read-write: a copy of ``previous`` when its bytes are the ones the publisher
    left (``sha256``), else empty; and which of the two."""
    path.unlink(missing_ok=True)
    if previous is not None:
        try:
            data = previous.read_bytes()
            if hashlib.sha256(data).hexdigest() == sha256:
                path.write_bytes(data)
                return duckdb.connect(str(path)), True
        except (OSError, duckdb.Error):  # gone or unreadable: built from scratch
            pass
        path.unlink(missing_ok=True)
    return duckdb.connect(str(path)), False


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


def _check_files(path: Path, table: str, root: Path, files: list[tuple[str, int]]) -> str:
    """The directory (relative to ``root``) holding exactly ``files`` (relative names, bytes), each
    of its size: what the view of ``table`` reads."""
    folders = {rel.rpartition("/")[0] for rel, _ in files}
    if len(folders) != 1:
        raise RuntimeError(f"{path}: view {table} must read one directory, got {sorted(folders)}; not publishing")
    folder = folders.pop()
    for rel, size in files:
        file = root / rel
        try:
            got = file.stat().st_size
        except OSError as exc:
            raise RuntimeError(f"{path}: view {table} does not read ({file} is missing: {exc.strerror}); "
                               "not publishing") from exc
        if got != size:
            raise RuntimeError(f"{path}: view {table} does not read ({file} has {got} bytes, the manifest "
                               f"{size}); not publishing")
    extra = sorted({p.name for p in (root / folder).glob("*.parquet")} - {rel.rpartition("/")[2] for rel, _ in files})
    if extra:
        raise RuntimeError(f"{path}: view {table} would also read {', '.join(extra)} in {root / folder}, which the "
                           "manifest does not list; not publishing")
    return folder


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


def _comments(con: duckdb.DuckDBPyConnection, relations: str) -> dict[str, tuple[str | None, dict[str, str | None]]]:
    """Each relation ``relations`` selects (schema, name, comment): its comment and every column's
    (None where it has none)."""
    out: dict[str, tuple[str | None, dict[str, str | None]]] = {}
    for schema, name, comment in con.execute(relations).fetchall():
        out[f"{schema}.{name}"] = (comment, {})
    for schema, name, column, comment in con.execute(
            "select schema_name, table_name, column_name, comment from duckdb_columns() "
            "where database_name = current_database()").fetchall():
        if f"{schema}.{name}" in out:
            out[f"{schema}.{name}"][1][column] = comment
    return out
