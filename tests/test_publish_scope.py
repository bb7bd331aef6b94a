"""The publisher reads what is new: a partition's rows are found by a range on the raw time column
(row groups skipped by their zone maps) as well as by the partition name, and the range never
loses a row, whatever the column's type, grain, time zone or NULLs. Real DuckDB, real files."""

from __future__ import annotations

import re
import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from dagster_project.engine import ensure_schema
from dagster_project.publishing import PublishError, publish_snapshot, verify_snapshot
from dagster_project.publishing.parquet import (DAY_GRAIN_ROWS, Dataset, Plan, extent, grouping, month_counts,
                                                partition_of, partition_sql, rows_of)
from transforms.partitions import DAY, time_sql
from dagster_project.publishing.snapshot import RUN_LOG
from transforms.classify import q

KEY = b"test-key"
TYPES = ("TIMESTAMP WITH TIME ZONE", "TIMESTAMP", "DATE", "TIMESTAMP_NS")
# the zones furthest from UTC both ways: a TIMESTAMPTZ's day is printed in the session's zone
ZONES = ("UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Asia/Kathmandu")


def planned(con: duckdb.DuckDBPyConnection, table: str, kind: str = "analytics", compacted: bool = False) -> Plan:
    """The table's plan as the publisher cuts it (``compacted``: cut by day as a big table is,
    its days before the month preceding its latest grouped by month)."""
    select = f"select * from {table}"
    columns = {n: str(t) for n, t, *_ in con.execute(f"describe {select}").fetchall()}
    dataset = Dataset(table=table, path=table, kind=kind, select=select, order=())
    rows, latest = extent(con, dataset, columns)
    grouped = set()
    if compacted:
        rows = DAY_GRAIN_ROWS + 1
        grouped = grouping(month_counts(con, dataset, "ts"), latest)
    return Plan(dataset, [{"name": c, "type": t} for c, t in columns.items()], partition_sql(dataset, columns, rows, grouped))


def by_name(con, planned_: Plan, names: list[str]) -> int:
    exact = f"{planned_.part_sql} in ({', '.join(repr(n) for n in names)})"
    return con.execute(f"select count(*) from ({planned_.dataset.select}) where {exact}").fetchone()[0]


def by_rows_of(con, planned_: Plan, names: list[str]) -> int:
    return con.execute(f"select count(*) from ({planned_.dataset.select}) where {rows_of(planned_, names)}").fetchone()[0]


INSTANTS = st.one_of(st.none(), st.datetimes(min_value=datetime(2025, 12, 25), max_value=datetime(2026, 3, 5)))


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(type_=st.sampled_from(TYPES), zone=st.sampled_from(ZONES), grain=st.sampled_from(["month", "day", "compacted"]),
       instants=st.lists(INSTANTS, min_size=1, max_size=40), pick=st.randoms(use_true_random=False))
def test_the_range_selects_exactly_the_partitions_rows_for_every_type_zone_grain_and_null(
        type_, zone, grain, instants, pick):
    con = duckdb.connect()
    con.execute(f"set TimeZone = '{zone}'")
    con.execute(f"create table t (id integer, ts {type_})")
    con.executemany("insert into t values (?, ?)",
                    [[i, None if x is None else x.replace(tzinfo=timezone.utc)] for i, x in enumerate(instants)])
    p = planned(con, "t", compacted=grain == "compacted")
    if grain == "day":  # the size rule picks the month for small tables: cut by day as a big one would be
        p.part_sql = p.part_sql.replace("%Y-%m'", "%Y-%m-%d'")
    if grain == "compacted":  # every row's file is the one Python names for its day (replan relies on it)
        latest = extent(con, p.dataset, {"id": "INTEGER", "ts": type_})[1]
        counts = month_counts(con, p.dataset, "ts")
        assert sum(counts.values()) == con.execute("select count(ts) from t").fetchone()[0]
        grouped = grouping(counts, latest)
        for name, day in con.execute(f"select {p.part_sql}, {time_sql('ts', DAY)} from t").fetchall():
            assert name == f"part-{partition_of(day, DAY, grouped)}", (name, day, grouped)
    names = [r[0] for r in con.execute(f"select distinct {p.part_sql} from t order by 1").fetchall()]
    chosen = [n for n in names if pick.random() < 0.5] or names[-1:]
    assert "strftime" in p.part_sql
    assert by_rows_of(con, p, chosen) == by_name(con, p, chosen)
    # the rows of the chosen partitions, by id: the same, not just as many
    got = con.execute(f"select list(id order by id) from t where {rows_of(p, chosen)}").fetchone()[0]
    exact = con.execute(f"select list(id order by id) from t where {p.part_sql} in "
                        f"({', '.join(repr(n) for n in chosen)})").fetchone()[0]
    assert got == exact


def test_the_range_is_on_the_raw_time_column_and_absent_where_there_is_no_time():
    con = duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    con.execute("create table t (id integer, ts timestamptz, split varchar)")
    con.execute("create table plain (id integer)")
    p = planned(con, "t", kind="training")
    # a day and a month far apart stay two ranges (old row groups between them are skipped)
    assert rows_of(p, ["train-2026-01-05", "test-2026-03"]) == (
        f"({p.part_sql}) in ('test-2026-03', 'train-2026-01-05') and "
        "((\"ts\" >= cast('2026-01-04' as TIMESTAMP WITH TIME ZONE) and \"ts\" < cast('2026-01-07' as TIMESTAMP WITH TIME ZONE)) or "
        "(\"ts\" >= cast('2026-02-28' as TIMESTAMP WITH TIME ZONE) and \"ts\" < cast('2026-04-02' as TIMESTAMP WITH TIME ZONE)))")
    assert rows_of(p, ["train-undated"]).endswith("and (\"ts\" is null)")
    assert rows_of(p, ["train-2026-01-05", "train-2026-01-06"]).count(" or ") == 0  # adjacent days merge
    plain = planned(con, "plain")
    assert rows_of(plain, ["part-all"]) == "('part-' || 'all') in ('part-all')"
    assert " and " not in rows_of(p, ["train-empty"])  # a name this module did not cut by time: no range


def test_reading_a_new_day_skips_the_old_row_groups(tmp_path):
    """The point of the range: DuckDB reads the new day's row groups, not the whole table."""
    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    con.execute("set TimeZone = 'UTC'")
    con.execute("""create table t as select range as id, timestamptz '2026-01-01 00:00:00+00' + to_minutes(range::int)
                   as ts, repeat('x', 50) as pad from range(600000)""")
    con.execute("checkpoint")
    p = planned(con, "t")
    p.part_sql = p.part_sql.replace("%Y-%m'", "%Y-%m-%d'")
    last = con.execute(f"select max({p.part_sql}) from t").fetchone()[0]
    where = rows_of(p, [last])
    assert con.execute(f"select count(*) from t where {where}").fetchone()[0] == by_name(con, p, [last]) > 0
    profile = con.execute(f"explain analyze select count(*) from t where {where}").fetchall()[0][1]
    scanned = re.search(r"Row Groups Scanned: (\d+) / (\d+)", profile)
    assert scanned and int(scanned[1]) == 1 and int(scanned[2]) >= 5, profile


# ---------------------------------------------------------------------------------------------
# end to end: publishing with the range equals publishing once
# ---------------------------------------------------------------------------------------------

def state(path: Path) -> Path:
    con = duckdb.connect(str(path))
    con.execute("set TimeZone = 'UTC'")
    ensure_schema(con)
    con.execute("create schema if not exists exports; create schema if not exists marts")
    # a day-grain training set (over DAY_GRAIN_ROWS), TIMESTAMPTZ; a month-grain mart on a DATE
    con.execute("""create table exports.sft as
        select 'p' || i as prompt, 'c' || i as completion, case when i % 10 = 0 then 'eval' else 'train' end as split,
               format('i{:07d}', i) as interaction_id,
               timestamptz '2026-01-01 00:00:00+00' + to_minutes((i * 7)::int) as interaction_timestamp
        from range(6000) t(i)""")
    con.execute("""create table marts.daily as select date '2025-10-01' + (i % 90)::int as day, i as n, 'note' as note
                   from range(300) t(i)""")
    con.close()
    return path


def publish(path: Path, root: Path, run_id: str):
    con = duckdb.connect(str(path))
    con.execute("set TimeZone = 'UTC'")
    try:
        return publish_snapshot(con, export_dir=root / "exports", warehouse=root / "warehouse.duckdb",
                                run_id=run_id, pseudonym_key=KEY)
    finally:
        con.close()


def objects(manifest: dict) -> dict[str, list]:
    # the content address, not the bytes: an identical partition written from another table
    # layout may encode differently (DuckDB's writer), and the first object written is kept
    return {p: [(f["name"], f["rows"], f["object"]) for f in d["files"]]
            for p, d in manifest["datasets"].items() if d["table"] not in RUN_LOG}


def test_new_undated_rows_and_a_new_month_publish_as_publishing_once(tmp_path):
    db = state(tmp_path / "state.duckdb")
    first = publish(db, tmp_path, "first")
    assert "training/sft/train-undated.parquet" not in {f"training/sft/{f['name']}" for f in
                                                       first.manifest["datasets"]["training/sft"]["files"]}
    con = duckdb.connect(str(db))
    # new: rows without a time (their own partition), a new day, a new month of the DATE mart,
    # and one changed row in an old day
    con.execute("insert into exports.sft values ('p-new', 'c', 'train', 'n1', null), ('p-new2', 'c', 'eval', 'n2', null), "
                "('p-new3', 'c', 'train', 'n3', timestamptz '2026-02-20 23:59:59+00')")
    con.execute("insert into marts.daily values (null, -1, 'undated'), (date '2026-02-01', -2, 'new month')")
    con.execute("update exports.sft set completion = 'changed' where interaction_id = 'i0000100'")
    con.close()
    second = publish(db, tmp_path, "second")
    written = {(p, f["name"]) for p, d in second.manifest["datasets"].items() if d["table"] not in RUN_LOG
               for f in d["files"] if not f["reused"]}
    assert written == {("training/sft", "train-undated.parquet"), ("training/sft", "test-undated.parquet"),
                       ("training/sft", "train-2026-02-20.parquet"), ("training/sft", "test-2026-01-01.parquet"),
                       ("analytics/daily", "part-undated.parquet"), ("analytics/daily", "part-2026-02.parquet")}
    verify_snapshot(tmp_path / "exports")
    once = publish(db, tmp_path / "once", "once")
    assert objects(second.manifest) == objects(once.manifest)
    rows = duckdb.connect().execute("select count(*), count(*) filter (where interaction_timestamp is null) from "
                                    "read_parquet(?)", [str(second.path / "training/sft/*.parquet")]).fetchone()
    assert rows == (6003, 2)


def test_a_raw_id_in_a_new_undated_partition_blocks_the_publish(tmp_path):
    db = state(tmp_path / "state.duckdb")
    con = duckdb.connect(str(db))
    con.execute("create schema if not exists staging")
    con.execute("create table staging.interactions as select 'sess-raw-1' as session_id")
    con.close()
    first = publish(db, tmp_path, "first")
    con = duckdb.connect(str(db))
    con.execute("insert into marts.daily values (null, -1, 'sess-raw-1')")
    con.close()
    with pytest.raises(PublishError, match=r"\(analytics/daily.note: 1 rows\); nothing was published"):
        publish(db, tmp_path, "second")
    assert verify_snapshot(tmp_path / "exports")["version"] == first.version


# ---------------------------------------------------------------------------------------------
# hashing per day, naming per partition: the same partitions, rows and keys as per row
# ---------------------------------------------------------------------------------------------

def per_row_digests(con, dataset: Dataset, part_sql: str) -> list[tuple]:
    """The partition digests as the publisher computed them before (strftime on every row)."""
    columns = [r[0] for r in con.execute(f"describe {dataset.select}").fetchall()]
    return con.execute(
        f"select __part, count(*)::bigint, count(*)::varchar || ':' || sum(__h)::varchar || ':' || "
        f"sum(hash(__h, 'fw'))::varchar from (select {part_sql} as __part, hash({', '.join(q(c) for c in columns)}) "
        f"as __h from ({dataset.select})) group by __part order by __part").fetchall()


@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(type_=st.sampled_from(TYPES), zone=st.sampled_from(ZONES), training=st.booleans(),
       rows=st.lists(st.tuples(INSTANTS, st.sampled_from(["train", "eval", None])), max_size=30),
       big=st.booleans())
def test_hashing_per_day_gives_the_partitions_rows_and_keys_of_hashing_per_row(type_, zone, training, rows, big):
    from dagster_project.publishing import parquet

    con = duckdb.connect()
    con.execute(f"set TimeZone = '{zone}'")
    con.execute(f"create table t (id integer, ts {type_}, split varchar)")
    if rows:
        con.executemany("insert into t values (?, ?, ?)", [[i, None if x is None else x.replace(tzinfo=timezone.utc), s]
                                                           for i, (x, s) in enumerate(rows)])
    dataset = Dataset(table="t", path="t", kind="training" if training else "analytics", select="select * from t",
                      order=("id",))
    grain = parquet.DAY_GRAIN_ROWS
    try:
        if big:  # cut by day as a table over DAY_GRAIN_ROWS is
            parquet.DAY_GRAIN_ROWS = -1
        got = parquet.plan(con, dataset, Path("/nonexistent"))
    finally:
        parquet.DAY_GRAIN_ROWS = grain
    expected = per_row_digests(con, dataset, got.part_sql) or [(
        "train-empty" if training else "part-empty", 0, "")]
    schema = json.dumps([[c["name"], c["type"]] for c in got.columns])
    assert [(p.name, p.rows, p.key) for p in got.parts] == [
        (f"{name}.parquet", n, hashlib.sha256(
            f"{parquet.FORMAT}|{duckdb.__version__}|{schema}|{dataset.order}|{digest}".encode()).hexdigest())
        for name, n, digest in expected]
    assert ("%Y-%m-%d" in got.part_sql) == big
