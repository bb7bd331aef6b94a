"""The analyst warehouse built from the previous snapshot's (``publishing.warehouse``): kept views
read the new snapshot's files, and views and comments equal those of a warehouse built afresh."""

from __future__ import annotations

import hashlib
import shutil

import duckdb
import pytest

from dagster_project.publishing.warehouse import SCHEME, build_warehouse, verify_warehouse


def write_snapshot(root, tables: dict[str, list[tuple[int, str]]]) -> dict[str, list[tuple[str, int]]]:
    """One Parquet file per table under ``root``; the views argument build_warehouse takes."""
    con = duckdb.connect()
    views = {}
    for table, rows in tables.items():
        folder = root / table.replace(".", "/")
        folder.mkdir(parents=True, exist_ok=True)
        values = ", ".join(f"({n}, '{text}')" for n, text in rows)
        con.execute(f"copy (select * from (values {values}) t(n, text)) to '{folder / 'part-1.parquet'}' (format parquet)")
        views[table] = [(f"{table.replace('.', '/')}/part-1.parquet", (folder / "part-1.parquet").stat().st_size)]
    return views


def catalog(path) -> set[tuple]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return set(con.execute("select schema_name, view_name, comment from duckdb_views() where not internal").fetchall()
                   + con.execute("select schema_name, table_name, column_name, comment from duckdb_columns()").fetchall())
    finally:
        con.close()


@pytest.fixture
def state():
    con = duckdb.connect()
    con.execute("create schema marts; create schema exports")
    for table in ("marts.a", "marts.b", "exports.c"):
        con.execute(f"create table {table} (n bigint, text varchar)")
        con.execute(f"comment on table {table} is 'table {table}'")
        con.execute(f"comment on column {table}.n is 'n of {table}'")
    return con


def test_a_warehouse_built_from_the_previous_one_equals_one_built_afresh(tmp_path, state, monkeypatch):
    from dagster_project.publishing import warehouse

    started_from_copy = []
    start = warehouse._start
    monkeypatch.setattr(warehouse, "_start", lambda *a: (r := start(*a), started_from_copy.append(r[1]))[0])
    first, second = tmp_path / "snap-1", tmp_path / "snap-2"
    views = write_snapshot(first, {"marts.a": [(1, "x")], "marts.b": [(2, "y")], "exports.c": [(3, "z")]})
    entry = build_warehouse(state, first / "warehouse.duckdb", views)

    # next snapshot: a unchanged (kept), b rewritten, c no longer published; a description changed
    shutil.copytree(first / "marts" / "a", second / "marts" / "a")
    views = {"marts.a": views["marts.a"], **write_snapshot(second, {"marts.b": [(2, "y"), (4, "w")]})}
    state.execute("comment on column marts.a.n is 'a better description'")
    state.execute("comment on column marts.a.text is 'text of a'")
    state.execute("comment on table marts.a is null")
    build_warehouse(state, second / "warehouse.duckdb", views, previous=first / "warehouse.duckdb",
                    previous_entry=entry, kept={"marts.a"})
    build_warehouse(state, second / "fresh.duckdb", views)
    assert started_from_copy == [False, True, False]  # the second from the first's copy

    assert catalog(second / "warehouse.duckdb") == catalog(second / "fresh.duckdb")
    assert ("marts", "a", "n", "a better description") in catalog(second / "warehouse.duckdb")
    shutil.rmtree(first)  # the views read the second snapshot's files, not the first's
    verify_warehouse(second / "warehouse.duckdb", {"marts.a": 1, "marts.b": 2})
    con = duckdb.connect(str(second / "warehouse.duckdb"), read_only=True)
    assert con.execute("select * from marts.b order by n").fetchall() == [(2, "y"), (4, "w")]
    assert con.execute("select flywheel_snapshot()").fetchone()[0] == str(second.resolve())


def test_a_kept_view_whose_file_is_missing_fails_the_publish(tmp_path, state):
    first, second = tmp_path / "snap-1", tmp_path / "snap-2"
    views = write_snapshot(first, {"marts.a": [(1, "x")]})
    entry = build_warehouse(state, first / "warehouse.duckdb", views)
    second.mkdir()
    with pytest.raises(RuntimeError, match="view marts.a does not read .*is missing"):
        build_warehouse(state, second / "warehouse.duckdb", views, previous=first / "warehouse.duckdb",
                        previous_entry=entry, kept={"marts.a"})


def test_a_previous_warehouse_that_does_not_open_is_not_used(tmp_path, state):
    first = tmp_path / "snap-1"
    views = write_snapshot(first, {"marts.a": [(1, "x")]})
    (tmp_path / "broken.duckdb").write_bytes(b"not a database")
    # the bytes the manifest records, so the copy is trusted and then fails to open
    build_warehouse(state, first / "warehouse.duckdb", views, previous=tmp_path / "broken.duckdb",
                    previous_entry={"scheme": SCHEME, "sha256": hashlib.sha256(b"not a database").hexdigest()},
                    kept={"marts.a"})
    verify_warehouse(first / "warehouse.duckdb", {"marts.a": 1})


def test_a_previous_warehouse_whose_manifest_records_no_sha256_is_built_afresh(tmp_path, state, monkeypatch):
    """A manifest written before the warehouse's sha256 was recorded (it held a catalog digest):
    the next publish cannot tell the file is the publisher's, so it builds a new one."""
    from dagster_project.publishing import warehouse

    started_from_copy = []
    start = warehouse._start
    monkeypatch.setattr(warehouse, "_start", lambda *a: (r := start(*a), started_from_copy.append(r[1]))[0])
    first, second = tmp_path / "snap-1", tmp_path / "snap-2"
    views = write_snapshot(first, {"marts.a": [(1, "x")]})
    entry = build_warehouse(state, first / "warehouse.duckdb", views)
    shutil.copytree(first / "marts", second / "marts")
    old_entry = {k: v for k, v in entry.items() if k != "sha256"} | {"catalog": "a digest of its catalog"}
    build_warehouse(state, second / "warehouse.duckdb", views, previous=first / "warehouse.duckdb",
                    previous_entry=old_entry, kept={"marts.a"})
    build_warehouse(state, second / "again.duckdb", views, previous=first / "warehouse.duckdb",
                    previous_entry=entry, kept={"marts.a"})
    assert started_from_copy == [False, False, True]
    verify_warehouse(second / "warehouse.duckdb", {"marts.a": 1})


@pytest.mark.parametrize("change", [
    "create table marts.scratch as select * from marts.a",  # an analyst's table: never carried forward
    "create or replace view marts.a as select 42 as n, 'mine' as text",  # a view replaced by hand
])
def test_a_previous_warehouse_someone_changed_is_not_used(tmp_path, state, change):
    first, second = tmp_path / "snap-1", tmp_path / "snap-2"
    views = write_snapshot(first, {"marts.a": [(1, "x")]})
    entry = build_warehouse(state, first / "warehouse.duckdb", views)
    con = duckdb.connect(str(first / "warehouse.duckdb"))
    con.execute(change)
    con.close()
    shutil.copytree(first / "marts", second / "marts")
    build_warehouse(state, second / "warehouse.duckdb", views, previous=first / "warehouse.duckdb",
                    previous_entry=entry, kept={"marts.a"})
    build_warehouse(state, second / "fresh.duckdb", views)
    assert catalog(second / "warehouse.duckdb") == catalog(second / "fresh.duckdb")
    con = duckdb.connect(str(second / "warehouse.duckdb"), read_only=True)
    assert con.execute("select * from marts.a").fetchall() == [(1, "x")]
    assert con.execute("select count(*) from duckdb_tables()").fetchone()[0] == 0


def test_a_kept_view_reads_the_files_its_directory_gained_and_a_stray_file_fails_the_publish(tmp_path, state):
    """A view reads its dataset's directory: a day's new file needs no new view, and a file the
    manifest does not list would be read too, so the publish refuses it."""
    first, second = tmp_path / "snap-1", tmp_path / "snap-2"
    views = write_snapshot(first, {"marts.a": [(1, "x")]})
    entry = build_warehouse(state, first / "warehouse.duckdb", views)
    shutil.copytree(first / "marts", second / "marts")
    con = duckdb.connect()
    con.execute(f"copy (select 2::bigint as n, 'y' as text) to '{second / 'marts' / 'a' / 'part-2.parquet'}' "
                "(format parquet)")
    con.close()
    grown = {"marts.a": views["marts.a"] + [("marts/a/part-2.parquet", (second / "marts/a/part-2.parquet").stat().st_size)]}
    build_warehouse(state, second / "warehouse.duckdb", grown, previous=first / "warehouse.duckdb",
                    previous_entry=entry, kept={"marts.a"})
    verify_warehouse(second / "warehouse.duckdb", {"marts.a": 2})
    assert catalog(second / "warehouse.duckdb") == catalog(first / "warehouse.duckdb")  # the view was kept

    shutil.copyfile(second / "marts/a/part-2.parquet", second / "marts/a/stray.parquet")
    with pytest.raises(RuntimeError, match=r"view marts.a would also read stray.parquet .*not publishing"):
        build_warehouse(state, second / "again.duckdb", grown)


def test_a_snapshot_under_a_path_with_glob_characters_reads_its_own_files(tmp_path, state):
    """The views read a directory through a glob: ``[`` and ``*`` in the export path are matched
    literally (``data [1]`` would otherwise match nothing, ``a*b`` a sibling too). (``?`` cannot
    occur: DuckDB reads it in a database path as the start of options.)"""
    odd = tmp_path / "exports [1] *" / "snap-1"
    views = write_snapshot(odd, {"marts.a": [(1, "x"), (2, "y")]})
    sibling = tmp_path / "exports [1] x" / "snap-1"  # what "*" would also match
    write_snapshot(sibling, {"marts.a": [(3, "z")]})
    build_warehouse(state, odd / "warehouse.duckdb", views)
    verify_warehouse(odd / "warehouse.duckdb", {"marts.a": 2})
