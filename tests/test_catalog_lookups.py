"""Catalog lookups bind a name (``transforms.sqlfiles``) instead of querying ``information_schema``:
the same answers, and a name that does not exist never aborts the caller's transaction."""

from __future__ import annotations

import duckdb
import pytest

from transforms.sqlfiles import is_base_table, relation_exists, table_columns

DDL = """
create schema s;
create table s.t (id varchar, created timestamptz, n bigint, x double, d decimal(18, 3), ok boolean,
                  msgs struct("role" varchar, "content" varchar)[], tags varchar[], doc json, "odd name" date);
create view s.v as select id, n from s.t;
create table "we.ird" (a int);
create temp table tmp (b int);
"""


@pytest.fixture
def con():
    con = duckdb.connect()
    con.execute(DDL)
    yield con
    con.close()


def information_schema(con, schema: str, table: str) -> dict[str, str] | None:
    rows = con.execute("select column_name, data_type from information_schema.columns "
                       "where table_schema = ? and table_name = ? order by ordinal_position", [schema, table]).fetchall()
    return dict(rows) or None


@pytest.mark.parametrize("schema, table", [("s", "t"), ("s", "v"), ("main", "tmp")])
def test_columns_and_types_are_information_schemas(con, schema, table):
    assert table_columns(con, f"{schema}.{table}") == information_schema(con, schema, table)
    assert list(table_columns(con, "s.t"))[-1] == "odd name"  # declaration order


def test_kinds(con):
    assert is_base_table(con, "s.t") and relation_exists(con, "s.t")
    assert relation_exists(con, "s.v") and not is_base_table(con, "s.v")  # a view has no rowid
    assert is_base_table(con, "tmp")
    assert table_columns(con, "we.ird") is None  # a dotted name is schema.table, as everywhere


def test_a_missing_name_leaves_the_transaction_usable(con):
    con.execute("begin transaction")
    con.execute("insert into s.t (id) values ('kept')")
    for name in ("s.nope", "nope.t", "nope", "s.table", "con"):  # no Python object stands in for them
        assert table_columns(con, name) is None
        assert not relation_exists(con, name) and not is_base_table(con, name)
    con.execute("commit")  # a failed query here would have aborted it: "Current transaction is aborted"
    assert con.execute("select id from s.t").fetchall() == [("kept",)]


def test_ensure_table_creates_what_is_missing_and_leaves_what_is_there(con):
    from transforms.sqlfiles import ensure_table

    ensure_table(con, "fresh.log", "seq bigint, note varchar")  # schema and table
    assert table_columns(con, "fresh.log") == {"seq": "BIGINT", "note": "VARCHAR"}
    con.execute("insert into fresh.log values (1, 'kept')")
    ensure_table(con, "fresh.log", "other int")  # as "if not exists": an existing table is not touched
    assert con.execute("select * from fresh.log").fetchall() == [(1, "kept")]


def test_a_transaction_commits_what_its_block_wrote_and_rolls_all_of_it_back_on_an_error():
    import duckdb

    from transforms.sqlfiles import transaction

    con = duckdb.connect()
    con.execute("create table t (x int)")
    with transaction(con):
        con.execute("insert into t values (1)")
    with pytest.raises(ZeroDivisionError):
        with transaction(con):
            con.execute("insert into t values (2)")
            1 / 0
    assert con.execute("select x from t").fetchall() == [(1,)]
    with transaction(con):  # no transaction was left open
        con.execute("insert into t values (3)")
    assert con.execute("select x from t order by x").fetchall() == [(1,), (3,)]
