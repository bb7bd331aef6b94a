"""Validating a changed table looks at what is new, and reports exactly what a full validation does.

Row-level expectations run through GX on the rows whose checked columns are not in the last clean
validation's baseline; table-level ones (uniqueness, counts, means, window columns) run in DuckDB
SQL over the whole table. Real DuckDB, real GX; the reference is ``validate_table(...,
incremental=False)`` (GX on every row) and, for the SQL checks, GX itself on the whole frame.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from staging_fixtures import Lake
from dagster_project import validation
from dagster_project.expectations import (SUITES, Check, between, compound_unique, holds, in_set, not_future,
                                          not_null, positive, row_count, unique)
from dagster_project.validation import validate_table

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)

SUITE = [
    not_null("k"), unique("k"), compound_unique("a", "b"),
    in_set("s", ("x", "y", "z")), between("w", 0, 1), positive("w"), not_future("t"),
    Check("b is lowercase a-c", "regex", "b", regex=r"^[a-c]+$", blocking=False),
    holds("a is not negative", "a__ok", "a >= 0", needs=("a",)),
    Check("one b per grp", "between", "b_per_grp", expr="count(distinct b) over (partition by grp)",
          needs=("b", "grp"), max_value=1, blocking=False),
    row_count(1, None, name="not empty", blocking=False),
    Check("label share in [0.2, 0.8]", "mean_between", "label__share", expr="label::int", needs=("label",),
          min_value=0.2, max_value=0.8, blocking=False),
    in_set("label", (True, False)),
]
COLUMNS = "k varchar, a integer, b varchar, s varchar, w double, t timestamptz, label boolean, grp varchar"

rows_st = st.tuples(
    st.one_of(st.none(), st.sampled_from([f"k{i}" for i in range(12)])),  # k: nulls and duplicates
    st.one_of(st.none(), st.integers(-1, 3)),
    st.one_of(st.none(), st.sampled_from(["a", "b", "ab", "c", "D"])),
    st.one_of(st.none(), st.sampled_from(["x", "y", "z", "bad"])),
    st.one_of(st.none(), st.sampled_from([-0.5, 0.0, 0.25, 1.0, 1.5])),
    st.one_of(st.none(), st.integers(-72, 72)),  # hours from NOW
    st.one_of(st.none(), st.booleans()),
    st.sampled_from(["g1", "g2", "g3"]),
)
step_st = st.one_of(
    st.tuples(st.just("append"), st.lists(rows_st, min_size=1, max_size=4)),
    st.tuples(st.just("delete"), st.integers(0, 50)),
    st.tuples(st.just("update"), st.integers(0, 50), rows_st),
    st.tuples(st.just("now"), st.integers(-2, 2)),
)


def _insert(con, table: str, rows) -> None:
    for k, a, b, s, w, hours, label, grp in rows:
        con.execute(f"insert into {table} values (?, ?, ?, ?, ?, ?, ?, ?)",
                    [k, a, b, s, w, None if hours is None else NOW + timedelta(hours=hours), label, grp])


def _nth_rowid(con, table: str, n: int):
    ids = [r[0] for r in con.execute(f"select rowid from {table} order by rowid").fetchall()]
    return ids[n % len(ids)] if ids else None


def _shape(report) -> list[dict]:
    return [r.as_dict() for r in report.results]


@hsettings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(rows_st, min_size=0, max_size=6), st.lists(step_st, min_size=1, max_size=4))
def test_incremental_validation_of_a_sequence_of_changes_reports_what_full_validation_reports(initial, steps):
    con = duckdb.connect()
    con.execute(f"create table t ({COLUMNS})")
    _insert(con, "t", initial)
    now = NOW
    validate_table(con, "t", run_id="r0", now=now, checks=SUITE)
    for n, step in enumerate(steps, 1):
        if step[0] == "append":
            _insert(con, "t", step[1])
        elif step[0] == "delete" and (rid := _nth_rowid(con, "t", step[1])) is not None:
            con.execute("delete from t where rowid = ?", [rid])
        elif step[0] == "update" and (rid := _nth_rowid(con, "t", step[1])) is not None:
            con.execute("delete from t where rowid = ?", [rid])  # a replaced row is appended anew
            _insert(con, "t", [step[2]])
        elif step[0] == "now":
            now = now + timedelta(days=step[1])
        got = validate_table(con, "t", run_id=f"r{n}", now=now, checks=SUITE)
        con.execute("create or replace table t_full as select * from t")
        want = validate_table(con, "t_full", run_id=f"r{n}", now=now, checks=SUITE, incremental=False)
        assert got.rows == want.rows and got.success == want.success
        assert _shape(got) == _shape(want), step


@hsettings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(rows_st, min_size=0, max_size=10))
def test_table_level_checks_in_sql_report_what_gx_reports_on_the_whole_frame(rows):
    con = duckdb.connect()
    con.execute(f"create table t ({COLUMNS})")
    _insert(con, "t", rows)
    n = len(rows)
    for i, check in enumerate(SUITE):
        if check.row_level:
            continue
        sql = validation._table_level(con, '"t"', check, n, NOW)
        gx = validation._gx_on_frame(con, "t", "r", '"t"', [(i, check)], n, NOW)[i]
        if check.kind == "mean_between":  # validation adds the class counts to GX's observed mean
            assert sql.observed["desirable_share"] == pytest.approx(gx.observed) if gx.observed is not None \
                else sql.observed["desirable_share"] is None
            sql.observed = gx.observed
        assert sql.as_dict() == gx.as_dict(), check.name


def _signals(n: int) -> Lake:
    from test_validation import signal

    lake = Lake()
    for i in range(1, n + 1):
        signal(lake, i)
    lake.stage()
    return lake


def test_a_violation_in_a_newly_appended_row_is_caught_looking_only_at_that_row():
    lake = _signals(6)
    con = lake.con
    first = validate_table(con, "staging.signals", run_id="r1", now=NOW)
    assert first.success and first.rows_examined == 6
    again = validate_table(con, "staging.signals", run_id="r2", now=NOW)
    assert again.success and again.rows_examined == 0 and _shape(again) == _shape(first)

    con.execute("insert into staging.signals select * replace ('5e000000-0000-4000-8000-000000000099' as id, "
                "1.5 as strength, 99 as line_number) from staging.signals limit 1")
    report = validate_table(con, "staging.signals", run_id="r3", now=NOW)
    assert report.rows_examined == 1 and report.rows == 7
    assert [r.name for r in report.failures] == ["strength in [0, 1]"]
    strength = report.failures[0]
    assert strength.unexpected_count == 1 and strength.element_count == 7
    assert strength.observed["of"] == 7 and strength.observed["unexpected_percent"] == pytest.approx(100 / 7)
    assert strength.samples[0]["id"] == "5e000000-0000-4000-8000-000000000099"
    # a failed validation leaves no baseline: the next one looks at every row again
    assert validate_table(con, "staging.signals", run_id="r4", now=NOW).rows_examined == 7


def test_a_duplicate_key_formed_between_an_old_and_a_new_row_is_caught():
    lake = _signals(5)
    con = lake.con
    assert validate_table(con, "staging.signals", run_id="r1", now=NOW).success
    old = con.execute("select id from staging.signals order by line_number limit 1").fetchone()[0]
    con.execute("insert into staging.signals select * replace (40 as line_number) from staging.signals "
                "where id = ?", [old])
    report = validate_table(con, "staging.signals", run_id="r2", now=NOW)
    assert [r.name for r in report.failures] == ["id is unique"]
    dup = report.failures[0]
    assert dup.unexpected_count == 2 and sorted(s["line_number"] for s in dup.samples) == [1, 40]
    assert report.rows_examined == 1  # GX saw only the copy; the duplicate is found by SQL over every row


def test_a_baseline_is_only_trusted_for_the_same_checks_and_a_later_run_time():
    lake = _signals(4)
    con = lake.con
    validate_table(con, "staging.signals", run_id="r1", now=NOW)
    assert validate_table(con, "staging.signals", run_id="r2", now=NOW + timedelta(days=1)).rows_examined == 0
    # earlier than the baseline: "not in the future" is stricter, so every row is looked at again
    earlier = validate_table(con, "staging.signals", run_id="r3", now=NOW - timedelta(days=5))
    assert earlier.rows_examined == 4 and [r.name for r in earlier.failures] == ["created_at not in the future"]
    validate_table(con, "staging.signals", run_id="r4", now=NOW)
    fewer = [c for c in SUITES["staging.signals"] if c.name != "strength in [0, 1]"]
    assert validate_table(con, "staging.signals", run_id="r5", now=NOW, checks=fewer).rows_examined == 4
    assert validate_table(con, "staging.signals", run_id="r6", now=NOW, incremental=False).rows_examined == 4


def test_the_baseline_stays_private_and_small():
    lake = _signals(3)
    con = lake.con
    validate_table(con, "staging.signals", run_id="r1", now=NOW)
    assert con.execute("select count(*) from lineage.validated_rows where table_name = 'staging.signals'"
                       ).fetchone() == (3,)
    from dagster_project.publishing.snapshot import WAREHOUSE_SCHEMAS

    assert "lineage" not in WAREHOUSE_SCHEMAS


def test_forgetting_the_baselines_makes_the_next_validation_look_at_every_row():
    lake = _signals(3)
    con = lake.con
    validate_table(con, "staging.signals", run_id="r1", now=NOW)
    validation.forget_baselines(con)  # flywheel forget: the hashes derive from personal data
    assert con.execute("select count(*) from duckdb_tables() where schema_name = 'lineage' "
                       "and table_name in ('validated_rows', 'validation_baselines')").fetchone() == (0,)
    assert validate_table(con, "staging.signals", run_id="r2", now=NOW).rows_examined == 3
    assert validate_table(con, "staging.signals", run_id="r3", now=NOW).rows_examined == 0


def test_a_caller_holding_a_transaction_keeps_it():
    lake = _signals(2)
    con = lake.con
    con.execute("begin transaction")
    assert validate_table(con, "staging.signals", run_id="r1", now=NOW).success
    con.execute("rollback")  # the caller's decision: the baseline goes with it
    assert validate_table(con, "staging.signals", run_id="r2", now=NOW).rows_examined == 2
