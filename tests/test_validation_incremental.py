"""Validating a changed table looks at what is new, and reports exactly what a full validation does.

Row-level expectations look only at the rows whose checked columns are not in the last clean
validation's baseline (one DuckDB query; GX for a check one of them may offend); table-level ones
(uniqueness, counts, means, window columns) run in DuckDB SQL over the whole table, split leakage
through stored group keys. Real DuckDB, real GX; the reference is ``validate_table(...,
incremental=False)`` (GX on every row) and, for the SQL checks, GX itself on the whole frame.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from staging_fixtures import Lake
from dagster_project import validation
from dagster_project.expectations import (SUITES, Check, between, compound_unique, distinct_per_group, holds, in_set,
                                          not_future, not_null, positive, row_count, unique)
from dagster_project.validation import validate_table

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)

SUITE = [
    not_null("k"), unique("k"), compound_unique("a", "b"),
    in_set("s", ("x", "y", "z")), between("w", 0, 1), positive("w"), not_future("t"),
    Check("b is lowercase a-c", "regex", "b", regex=r"^[a-c]+$", blocking=False),
    holds("a is not negative", "a__ok", "a >= 0", needs=("a",)),
    Check("one b per grp", "between", "b_per_grp", expr="count(distinct b) over (partition by grp)",
          needs=("b", "grp"), max_value=1, blocking=False),
    # through stored group keys when incremental; lower() merges "a" and "A" as normalising merges prompts
    distinct_per_group("one s per lower(b)", "s_per_b", "s", "lower(b)", ("b",), max_value=1),
    not_null("w", blocking=False),
    row_count(1, None, name="not empty", blocking=False),
    Check("label share in [0.2, 0.8]", "mean_between", "label__share", expr="label::int", needs=("label",),
          min_value=0.2, max_value=0.8, blocking=False),
    in_set("label", (True, False)),
]
COLUMNS = "k varchar, a integer, b varchar, s varchar, w double, t timestamptz, label boolean, grp varchar"

rows_st = st.tuples(
    st.one_of(st.none(), st.sampled_from([f"k{i}" for i in range(12)])),  # k: nulls and duplicates
    st.one_of(st.none(), st.integers(-1, 3)),
    st.one_of(st.none(), st.sampled_from(["a", "A", "b", "ab", "ab\n", "c", "D"])),
    st.one_of(st.none(), st.sampled_from(["x", "y", "z", "bad"])),
    st.one_of(st.none(), st.sampled_from([-0.5, 0.0, 0.25, 1.0, 1.5, float("nan")])),  # NaN: missing to GX
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


def _apply_step(con, step, now: datetime) -> datetime:
    """One change of table ``t`` (append, delete, update: a replaced row is appended anew) or of
    the clock; returns the run time after it."""
    if step[0] == "append":
        _insert(con, "t", step[1])
    elif step[0] == "delete" and (rid := _nth_rowid(con, "t", step[1])) is not None:
        con.execute("delete from t where rowid = ?", [rid])
    elif step[0] == "update" and (rid := _nth_rowid(con, "t", step[1])) is not None:
        con.execute("delete from t where rowid = ?", [rid])
        _insert(con, "t", [step[2]])
    elif step[0] == "now":
        return now + timedelta(days=step[1])
    return now


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
        now = _apply_step(con, step, now)
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
        if check.per_group:  # twice: the first stores every content's group key, the second reuses them
            for _ in range(2):
                assert validation._table_level(con, '"t"', check, n, NOW, keys_of="t").as_dict() == sql.as_dict()
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


def _sft(con):
    return [r.as_dict() for r in validate_table(con, "exports.sft", run_id="r", now=NOW).results]


def test_a_split_leak_formed_between_an_old_and_a_new_row_is_caught_through_the_stored_group_keys():
    from test_validation import training_lake

    con = training_lake().con
    first = validate_table(con, "exports.sft", run_id="r1", now=NOW)
    assert first.success
    keys = "select count(*) from lineage.validation_group_keys where table_name = 'exports.sft'"
    distinct_prompts = con.execute("select count(distinct prompt) from exports.sft").fetchone()[0]
    assert con.execute(keys).fetchone()[0] == distinct_prompts
    # "question 7" with other whitespace (the same normalised prompt) in the other split: a new content
    con.execute("insert into exports.sft select * replace ([{'role': 'user', 'content': '  question   7 '}]"
                "::struct(role varchar, content varchar)[] as prompt, "
                "case split when 'train' then 'eval' else 'train' end as split, 'leak' as interaction_id) "
                "from exports.sft where prompt[-1].content = 'question 7' limit 1")
    report = validate_table(con, "exports.sft", run_id="r2", now=NOW)
    assert con.execute(keys).fetchone()[0] == distinct_prompts + 1  # only the new prompt was normalised
    assert [r.name for r in report.failures] == ["no normalised prompt in both splits"]
    leak = report.failures[0]
    old = con.execute("select count(*) from exports.sft where prompt[-1].content = 'question 7'").fetchone()[0]
    assert leak.unexpected_count == old + 1 and leak.element_count == report.rows
    assert {s["split"] for s in leak.samples} == {"train", "eval"} and "leak" in {s["interaction_id"] for s in leak.samples}
    con.execute("create or replace table t_full as select * from exports.sft")
    full = validate_table(con, "t_full", run_id="r2", now=NOW, checks=SUITES["exports.sft"], incremental=False)
    assert [r.as_dict() for r in report.results] == [r.as_dict() for r in full.results]
    # the keys describe contents, not the table: once the row is gone, so is the leak
    con.execute("delete from exports.sft where interaction_id = 'leak'")
    assert validate_table(con, "exports.sft", run_id="r3", now=NOW).success


def test_a_table_sharing_prompts_with_one_validated_before_reuses_its_keys_and_reports_the_same():
    """sft, kto and dpo share most prompts: a content keyed for one table under the same group
    expression takes that key for another instead of being normalised again, and the other's
    verdict (a leak included) is the full validation's."""
    from test_validation import training_lake

    con = training_lake().con
    assert validate_table(con, "exports.sft", run_id="r1", now=NOW).success
    # the same contents, and "question 7" with other whitespace in the other split: a leak between
    # a content keyed for sft and a new one
    con.execute("create table exports.sft_copy as select * from exports.sft")
    con.execute("insert into exports.sft_copy select * replace ([{'role': 'user', 'content': '  question   7 '}]"
                "::struct(role varchar, content varchar)[] as prompt, "
                "case split when 'train' then 'eval' else 'train' end as split, 'leak' as interaction_id) "
                "from exports.sft where prompt[-1].content = 'question 7' limit 1")
    shared = validate_table(con, "exports.sft_copy", run_id="r2", now=NOW, checks=SUITES["exports.sft"])
    full = validate_table(con, "exports.sft_copy", run_id="r2", now=NOW, checks=SUITES["exports.sft"],
                          incremental=False)
    assert [r.as_dict() for r in shared.results] == [r.as_dict() for r in full.results]
    assert [r.name for r in shared.failures] == ["no normalised prompt in both splits"]
    # the key was taken from sft's, not computed again: a marked key of sft reaches a later copy
    keys = "lineage.validation_group_keys"
    content = con.execute(f"select content_hash from {keys} where table_name = 'exports.sft' limit 1").fetchone()[0]
    con.execute(f"update {keys} set group_hash = 42 where table_name = 'exports.sft' and content_hash = ?", [content])
    con.execute(f"delete from {keys} where table_name = 'exports.sft_copy'")
    validate_table(con, "exports.sft_copy", run_id="r3", now=NOW, checks=SUITES["exports.sft"])
    assert con.execute(f"select group_hash from {keys} where table_name = 'exports.sft_copy' and content_hash = ?",
                       [content]).fetchall() == [(42,)]


def test_group_keys_of_replaced_contents_are_pruned_and_forgotten_with_the_baselines():
    con = duckdb.connect()
    con.execute(f"create table t ({COLUMNS})")
    check = [distinct_per_group("one s per lower(b)", "s_per_b", "s", "lower(b)", ("b",), max_value=1)]
    keys = "select count(*) from lineage.validation_group_keys where table_name = 't'"
    for n in range(4):  # each round replaces every row with 600 new contents
        con.execute("delete from t")
        con.execute("insert into t (b, s) select 'b' || (? * 1000 + i), 'x' from range(600) r(i)", [n])
        assert validate_table(con, "t", run_id=f"r{n}", now=NOW, checks=check).success
        assert con.execute(keys).fetchone()[0] <= 2 * 600 + 1000
    validation.forget_baselines(con)
    assert con.execute("select count(*) from duckdb_tables() where table_name = 'validation_group_keys'"
                       ).fetchone() == (0,)



def test_a_scoped_split_leak_check_uses_the_stored_values_as_a_screen_and_never_as_the_verdict():
    """A scoped validation of a per-group bound first compares the new rows' values with the ones
    stored per group (lineage.validation_group_values, complete as of the last clean validation):
    a leak between an old row and a new one is caught there; a stored value the table no longer
    holds (its rows deleted, or a wrong one) only sends the touched groups to the exact count,
    which replaces their values; without a record that the values were complete, the whole
    table is counted. Each verdict is the full validation's."""
    con = duckdb.connect()
    con.execute(f"create table t ({COLUMNS})")
    # (a row-level check on a column new rows differ in: each validation leaves the row baseline
    # a scope follows)
    check = [not_null("k"),
             distinct_per_group("one s per lower(b)", "s_per_b", "s", "lower(b)", ("b",), max_value=1)]
    runs = "select run_id from lineage.validation_group_value_runs"
    values = ("select value from lineage.validation_group_values v join lineage.validation_group_keys k "
              "using (group_hash) where k.table_name = 't' and k.content_hash = hash(?::varchar) order by value")

    def step(run: str, sql: str):
        since = con.execute("select coalesce(max(rowid) + 1, 0) from t").fetchone()[0]
        con.execute(sql)
        got = validate_table(con, "t", run_id=run, now=NOW, checks=check, row_scope=f"base.rowid >= {since}")
        con.execute("create or replace table t_full as select * from t")
        want = validate_table(con, "t_full", run_id=run, now=NOW, checks=check, incremental=False)
        assert _shape(got) == _shape(want)
        return got

    con.execute("insert into t (k, b, s) values ('k0', 'a', 'x'), ('k1', 'a', 'x'), ('k2', 'c', 'y')")
    assert validate_table(con, "t", run_id="r0", now=NOW, checks=check).success  # every row: values stored
    assert con.execute(runs).fetchall() == [("r0",)] and con.execute(values, ["a"]).fetchall() == [("x",)]
    # a new row in an old group, the same split: clean from the stored values
    assert step("r1", "insert into t (k, b, s) values ('k3', 'A', 'x')").success
    assert con.execute(runs).fetchall() == [("r1",)] and con.execute(values, ["A"]).fetchall() == [("x",)]
    # the old group's rows gone, a new one in the other split: no leak, and the group's value is now y
    assert step("r2", "delete from t where lower(b) = 'a'; insert into t (k, b, s) values ('k4', 'a', 'y')").success
    assert con.execute(values, ["a"]).fetchall() == [("y",)]
    # a wrong stored value is not a leak
    con.execute("update lineage.validation_group_values set value = 'z' where value = 'y'")
    assert step("r3", "insert into t (k, b, s) values ('k5', 'c', 'y')").success
    assert con.execute(values, ["c"]).fetchall() == [("y",)]
    assert con.execute(values, ["a"]).fetchall() == [("z",)]  # an untouched group: not read, not replaced
    # a leak between an old row and a new one, caught through the stored values
    report = step("r4", "insert into t (k, b, s) values ('k6', 'C', 'x')")
    assert [f.name for f in report.failures] == ["one s per lower(b)"] and report.failures[0].unexpected_count == 3
    # (a check that failed is counted over the whole table next: the values are complete again)
    assert step("r5", "delete from t where b = 'C'; insert into t (k, b, s) values ('k8', 'e', 'x')").success
    assert con.execute(runs).fetchall() == [("r5",)] and con.execute(values, ["a"]).fetchall() == [("y",)]
    # values no run recorded as complete (a missing one would hide a leak): the whole table decides
    con.execute("delete from lineage.validation_group_values where value = 'y'")
    con.execute("delete from lineage.validation_group_value_runs")
    report = step("r6", "insert into t (k, b, s) values ('k7', 'a', 'x')")
    assert [f.name for f in report.failures] == ["one s per lower(b)"]

APPEND = """
import sys
from datetime import datetime, timezone
import duckdb
from dagster_project.validation import validate_table
con = duckdb.connect(sys.argv[1])
con.execute("insert into staging.signals select * replace (? || id[3:] as id, ? as strength, "
            "line_number + 100 as line_number) from staging.signals order by line_number limit 3",
            [sys.argv[2], float(sys.argv[3])])
report = validate_table(con, "staging.signals", run_id="r", now=datetime(2026, 3, 1, 12, tzinfo=timezone.utc))
print(report.rows_examined, [r.name for r in report.failures], "great_expectations" in sys.modules)
"""


def test_clean_rows_are_validated_without_great_expectations_and_an_offender_by_it(tmp_path):
    import os
    import subprocess
    import sys

    lake = _signals(6)
    path = tmp_path / "state.duckdb"
    lake.con.execute(f"attach '{path}' as f")
    lake.con.execute("create schema f.staging")
    lake.con.execute("create table f.staging.signals as select * from staging.signals")
    lake.con.execute("detach f")

    def append(suffix: str, strength: float) -> str:
        return subprocess.run([sys.executable, "-c", APPEND, str(path), suffix, str(strength)], check=True,
                              capture_output=True, text=True, env={**os.environ}).stdout.strip()

    assert append("a0", 0.5) == "9 [] False"  # no baseline: every row screened in SQL, GX never imported
    assert append("a1", 0.5) == "3 [] False"  # the 3 new rows
    assert append("b0", 1.5) == "3 ['strength in [0, 1]'] True"  # a new offender: GX's verdict


def test_where_sql_is_stricter_than_gx_the_new_rows_go_to_gx_and_its_verdict_stands():
    con = duckdb.connect()
    con.execute(f"create table t ({COLUMNS})")
    regex = [c for c in SUITE if c.kind == "regex"] + [not_null("w", blocking=False)]
    _insert(con, "t", [("k1", 1, "ab", "x", 0.5, 0, True, "g1")])
    validate_table(con, "t", run_id="r0", now=NOW, checks=regex)
    # Python's $ matches before a final newline, RE2's does not; NaN is missing to pandas, not to SQL
    _insert(con, "t", [("k2", 1, "ab\n", "x", float("nan"), 0, True, "g1")])
    got = validate_table(con, "t", run_id="r1", now=NOW, checks=regex)
    assert got.rows_examined == 1
    assert [(r.name, r.success, r.unexpected_count) for r in got.results] == [
        ("b is lowercase a-c", True, 0), ("w is not null", False, 1)]
    con.execute("create table t_full as select * from t")
    want = validate_table(con, "t_full", run_id="r1", now=NOW, checks=regex, incremental=False)
    assert _shape(got) == _shape(want)


# ---------------------------------------------------------------------------------------------
# A builder's scope (tables.table_assets): drops and validation of what the build appended only
# ---------------------------------------------------------------------------------------------

def _sft_rows(ids, blank: bool = False) -> str:
    """exports.sft rows (the columns its suite reads) for interaction ids ``ids`` (``blank``: with
    a blank prompt, which its drop expectation excludes)."""
    values = ", ".join(f"('{i}')" for i in ids)
    return (f"select [{{'role': 'user', 'content': {repr('') if blank else repr('question ') + ' || id'}}}] as prompt, "
            f"[{{'role': 'assistant', 'content': 'answer'}}] as completion, 1.0::double as sample_weight, "
            f"'train' as split, id as interaction_id from (values {values}) v(id)")


def _scoped_sft_run(settings, changes):
    """Materialise a one-table group whose builder creates exports.sft whole, then applies each of
    ``changes`` (ids to delete, rows SQL to append) as an incremental build reporting its rows."""
    import dagster as dg

    from dagster_project import tables, versions
    from dagster_project.state import state_connection
    from test_dagster import resource_for
    from transforms.delta import Built, next_rowid

    step = {"n": 0}

    def build(con, flywheel, context):
        n = step["n"]
        versions.bump(con, "raw.scope_test", context.run_id)  # the input changed: the group is rebuilt
        if n == 0:
            con.execute("create schema if not exists exports")
            con.execute(f"create or replace table exports.sft as {_sft_rows(range(10))}")
            return {"exports.sft": 10}
        deleted, appended = changes[n - 1]
        if deleted:
            con.execute("delete from exports.sft where interaction_id in (select unnest(?::varchar[]))",
                        [[str(i) for i in deleted]])
        start = next_rowid(con, "exports.sft")
        added = con.execute(f"insert into exports.sft {appended}").fetchone()[0]
        rows = con.execute("select count(*) from exports.sft").fetchone()[0]
        return Built({"exports.sft": rows}, {"exports.sft": (start, added)})

    group = tables.TableGroup(name="scope_test", group="exports", tables=["exports.sft"], deps=["raw/scope_test"],
                              build=build, description="test")
    runs = []
    for n in range(len(changes) + 1):
        step["n"] = n
        with state_connection(settings) as con:  # the first run: the dep's version exists
            versions.bump(con, "raw.scope_test", None)
        result = dg.materialize([table_assets_of(group)], resources={"flywheel": resource_for(settings)},
                                raise_on_error=False)
        runs.append(result)
    return runs


def table_assets_of(group):
    from dagster_project.tables import table_assets

    return table_assets(group)


def _validations(settings, run_id: str) -> list[tuple]:
    con = duckdb.connect(str(settings.state_db), read_only=True)
    try:
        return con.execute("select expectation, success, status, observed, unexpected_count, rows_validated "
                           "from ingest.validations where run_id = ? and table_name = 'exports.sft' order by all",
                           [run_id]).fetchall()
    finally:
        con.close()


def _whole(settings, run_id: str) -> list[tuple]:
    """What validating every row of the current exports.sft reports (as ingest.validations rows)."""
    con = duckdb.connect(str(settings.state_db))
    try:
        con.execute("create or replace table sft_whole as select * from exports.sft")
        report = validate_table(con, "sft_whole", run_id=run_id, incremental=False,
                                checks=SUITES["exports.sft"])
        return sorted((r.name, r.success, r.status, validation._dumps(r.observed), r.unexpected_count, report.rows)
                      for r in report.results)
    finally:
        con.close()


def test_a_builders_scope_drops_new_offenders_and_catches_a_new_duplicate_as_whole_validation_does(settings,
                                                                                                   monkeypatch):
    scoped, real = [], validation._scoped_table_level

    def spy(*args, **kw):  # the real thing, noting which checks it answered
        result = real(*args, **kw)
        scoped.append((args[3].name, result is not None))
        return result

    monkeypatch.setattr(validation, "_scoped_table_level", spy)
    runs = _scoped_sft_run(settings, [
        ([1, 2], _sft_rows([10, 11]) + " union all " + _sft_rows([12], blank=True)),  # a blank prompt: dropped
        ([], _sft_rows([3])),  # interaction 3 again: a duplicate of a row the first build wrote
    ])
    first, dropped, duplicated = runs
    assert first.success and dropped.success and not duplicated.success
    # uniqueness and split leakage looked at the appended keys only (the first validation: whole)
    assert [name for name, hit in scoped if hit] == ["interaction_id is unique", "no normalised prompt in both splits"] * 2
    con = duckdb.connect(str(settings.state_db), read_only=True)
    ledger = con.execute("select row_key, expectation from ingest.excluded where run_id = ?",
                         [dropped.run_id]).fetchall()
    con.close()
    assert ledger == [("12", "prompt is a non-empty conversation")]
    got = _validations(settings, duplicated.run_id)
    unique = [r for r in got if r[0] == "interaction_id is unique"]
    assert unique[0][1] is False and unique[0][4] == 2
    assert [r[:3] + r[4:] for r in got] == [r[:3] + r[4:] for r in _whole(settings, duplicated.run_id)]
    assert [r for r in got if r[0] != "prompt is a non-empty conversation"] == \
        [r for r in _whole(settings, duplicated.run_id) if r[0] != "prompt is a non-empty conversation"]


# Row-level checks that always pass (so each validation leaves a baseline a scope can follow),
# and the checks a scope answers from its keys (SUITE[9] is a window check it does not).
SCOPED_SUITE = [in_set("grp", ("g1", "g2", "g3")), unique("k"), compound_unique("a", "b"), SUITE[10], SUITE[9],
                row_count(1, None, name="not empty", blocking=False)]


@hsettings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(rows_st, min_size=0, max_size=6), st.lists(step_st, min_size=1, max_size=5))
def test_validation_scoped_to_the_rows_added_since_the_last_clean_one_reports_what_full_validation_reports(
        initial, steps):
    """The caller's ``row_scope`` names the rows appended since the last clean validation (a rowid
    range, as a builder reports it): uniqueness (NULL keys, a new row repeating an old key,
    deletions) and split leakage then look at those keys only, and report what GX does on every row."""
    con = duckdb.connect()
    con.execute(f"create table t ({COLUMNS})")
    _insert(con, "t", initial)
    now = NOW
    validate_table(con, "t", run_id="r0", now=now, checks=SCOPED_SUITE)
    # the first rowid after the last clean validation (its baseline's run is that validation's)
    since = con.execute("select coalesce(max(rowid) + 1, 0) from t").fetchone()[0]
    scoped = 0
    for n, step in enumerate(steps, 1):
        now = _apply_step(con, step, now)
        clean = getattr(validation._baseline(con, "t"), "run_id", None) is not None
        hits = []
        real = validation._scoped_table_level

        def spy(*args, **kw):
            result = real(*args, **kw)
            hits.append(result is not None)
            return result

        validation._scoped_table_level = spy
        try:
            got = validate_table(con, "t", run_id=f"r{n}", now=now, checks=SCOPED_SUITE,
                                 row_scope=f"base.rowid >= {since}" if clean else None)
        finally:
            validation._scoped_table_level = real
        scoped += any(hits)
        # the baseline's count of its hashes is kept by arithmetic: it is the count
        assert con.execute(f"select hashes from {validation.BASELINES} where table_name = 't'").fetchall() in (
            [], con.execute(f"select count(*) from {validation.VALIDATED_ROWS} where table_name = 't'").fetchall())
        if getattr(validation._baseline(con, "t"), "run_id", None) == f"r{n}":
            since = con.execute("select coalesce(max(rowid) + 1, 0) from t").fetchone()[0]
        con.execute("create or replace table t_full as select * from t")
        want = validate_table(con, "t_full", run_id=f"r{n}", now=now, checks=SCOPED_SUITE, incremental=False)
        assert got.rows == want.rows and got.success == want.success
        assert _shape(got) == _shape(want), step


def test_a_duplicate_of_an_old_key_or_a_null_key_in_the_scope_is_counted_as_gx_counts_it(monkeypatch):
    checks = [unique("k"), compound_unique("a", "b"), in_set("s", ("x", "y", "z"))]
    con = duckdb.connect()
    con.execute(f"create table t ({COLUMNS})")
    _insert(con, "t", [(f"k{i}", i, "a", "x", 0.5, 0, True, "g1") for i in range(4)]
            + [(None, None, "b", "x", 0.5, 0, False, "g2")])
    assert validate_table(con, "t", run_id="r1", now=NOW, checks=checks).success
    since = con.execute("select max(rowid) + 1 from t").fetchone()[0]
    _insert(con, "t", [("k1", 1, "a", "y", 0.5, 0, True, "g1"), (None, None, "b", "x", 0.5, 0, False, "g2"),
                       (None, None, None, "x", 0.5, 0, False, "g2")])
    con.execute("delete from t where k = 'k2'")
    hits, real = [], validation._scoped_table_level
    monkeypatch.setattr(validation, "_scoped_table_level",
                        lambda *a, **k: hits.append(real(*a, **k)) or hits[-1])
    got = validate_table(con, "t", run_id="r2", now=NOW, checks=checks, row_scope=f"base.rowid >= {since}")
    assert all(hits) and len(hits) == 2  # both answered from the scope's keys
    con.execute("create or replace table t_full as select * from t")
    want = validate_table(con, "t_full", run_id="r2", now=NOW, checks=checks, incremental=False)
    assert _shape(got) == _shape(want)
    assert got.result("k is unique").unexpected_count == 2  # k1 twice; NULL keys are no duplicates
    assert got.result("(a, b) is unique").unexpected_count == 4  # (1, a) and (NULL, b) twice; (NULL, NULL) ignored
    # a failed check is not carried forward: the next validation looks at the whole table again
    hits.clear()
    validate_table(con, "t", run_id="r3", now=NOW, checks=checks, row_scope="false")
    assert hits == [None, None]


def test_a_range_that_does_not_hold_every_appended_row_is_not_used(settings, monkeypatch):
    """A builder's range is checked against the rows it says it appended (a checkpoint may renumber
    rows): when they differ, the drops and the validation look at the whole table."""
    import dagster as dg

    from dagster_project import tables
    from transforms.delta import Built

    scoped, drop_scopes = [], []
    real_scoped, real_drops = validation._scoped_table_level, tables.apply_drops
    monkeypatch.setattr(validation, "_scoped_table_level",
                        lambda *a, **k: scoped.append(real_scoped(*a, **k)) or scoped[-1])
    monkeypatch.setattr(tables, "apply_drops", lambda *a, **k: drop_scopes.append(k.get("scope")) or real_drops(*a, **k))
    real_built = Built.__init__

    def miscounted(self, rows, appended=None):  # one more row than the range holds
        real_built(self, rows, {t: (start, n + 1) for t, (start, n) in (appended or {}).items()})

    monkeypatch.setattr(Built, "__init__", miscounted)
    first, second = _scoped_sft_run(settings, [([], _sft_rows([3]))])
    assert first.success and not second.success  # the duplicate is still found, by the whole table
    assert drop_scopes == [None, None] and not any(scoped)
    unique = [r for r in _validations(settings, second.run_id) if r[0] == "interaction_id is unique"]
    assert unique[0][4] == 2
