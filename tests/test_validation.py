"""Great Expectations suites: blocking failures name the expectation and show offending rows.

Real DuckDB tables built by the real transforms (``staging_fixtures.Lake`` → staging → labels →
training sets), then deliberately damaged; GX 1.x runs for real (ephemeral context).
"""

from __future__ import annotations

import json
import random
from datetime import date, datetime, timedelta, timezone

import duckdb
import pytest

from staging_fixtures import Lake
from dagster_project.expectations import MACROS, SUITES, Check, order_keys
from dagster_project.validation import (ValidationFailed, enforce, record_validations, validate_table)
from transforms import text
from transforms.labels import build_labels
from transforms.training import build_training_sets

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
KEY = b"test-key"


def signal(lake: Lake, i: int, **overrides) -> str:
    record = {
        "id": f"5e000000-0000-4000-8000-{i:012d}", "timestamp": 1772100000000 + i, "signal": "good",
        "strength": 0.8, "context": "c", "session_id": None, "source": "manual",
        "created_at": "2026-02-26T10:00:00", "target_type": "chunk", "target_id": f"t{i % 3}",
        "aspect": "relevance", "original_class": None, "suggested_class": None,
    }
    record.update(overrides)
    lake.add("signals", record, path="signals/feedback_buffer.jsonl")
    return record["id"]


def training_lake() -> Lake:
    lake = Lake()
    for i in range(1, 9):
        lake.interaction(i, input_text=f"question {i}", output_text=f"answer {i}",
                         user_feedback="positive" if i % 3 else "negative")
    lake.interaction(20, input_text="question 1", output_text="a worse answer", user_feedback="negative")
    lake.weighted_queue("question 1", "bad answer", 10.0, "never")
    lake.weighted_rating("question 9", "good answer", "good", 1.0)
    lake.stage()
    build_labels(lake.con)
    build_training_sets(lake.con, pseudonym_key=KEY, as_of=date(2026, 3, 1))
    return lake


@pytest.fixture(scope="module")
def lake() -> Lake:
    return training_lake()


def failed(report) -> dict[str, object]:
    return {r.name: r for r in report.failures}


# ------------------------------------------------------------------ clean tables pass


def test_real_transform_output_passes_every_blocking_expectation(lake):
    for table in ["staging.interactions", "staging.weighted_examples", "marts.interaction_labels",
                  "exports.sft", "exports.kto", "exports.dpo", "exports.weighted"]:
        report = validate_table(lake.con, table, run_id="clean", now=NOW)
        assert report.success, report.describe()
        assert report.status == "passed" and report.rows > 0
        assert all(r.status in ("passed", "skipped") or not r.blocking for r in report.results), table
        enforce(report)  # does not raise


def test_kto_class_balance_is_reported_not_blocking_with_the_observed_ratio(lake):
    report = validate_table(lake.con, "exports.kto", run_id="r", now=NOW)
    balance = next(r for r in report.results if r.name.startswith("KTO class balance"))
    assert not balance.blocking
    n_true, n_false = lake.con.execute("select count_if(label), count_if(not label) from exports.kto").fetchone()
    assert balance.observed["true"] == n_true and balance.observed["false"] == n_false
    assert balance.observed["true_to_false_ratio"] == pytest.approx(n_true / n_false)
    assert balance.observed["desirable_share"] == pytest.approx(n_true / (n_true + n_false))
    # an all-positive KTO set: reported as failed, still publishable
    con = lake.con.cursor()
    con.execute("create or replace temp table kto_skewed as select * replace (true as label) from exports.kto")
    skewed = validate_table(con, "kto_skewed", run_id="r", now=NOW, checks=SUITES["exports.kto"])
    result = skewed.result(balance.name)
    assert result.success is False and result.observed["false"] == 0 and skewed.success
    assert "KTO class balance" in skewed.describe()


# ------------------------------------------------------------------ a deliberately bad table


def test_bad_staging_table_fails_with_named_expectations_and_sample_rows():
    lake = Lake()
    ids = [signal(lake, i) for i in range(1, 6)]
    lake.stage()
    con = lake.con
    con.execute("update staging.signals set strength = 1.5 where id = ?", [ids[1]])
    con.execute("insert into staging.signals select * replace (10 as line_number) from staging.signals "
                "where id = ?", [ids[2]])  # a duplicate key
    con.execute("update staging.signals set signal = 'great' where id = ?", [ids[3]])
    con.execute("update staging.signals set created_at = ?::timestamptz + interval 3 day where id = ?",
                [NOW, ids[4]])

    report = validate_table(con, "staging.signals", run_id="bad", now=NOW)
    assert not report.success and report.status == "failed"
    fails = failed(report)
    assert set(fails) == {"id is unique", "strength in [0, 1]",
                          "signal in {correct, incorrect, good, bad, unsure, neutral}",
                          "created_at not in the future"}
    strength = fails["strength in [0, 1]"]
    assert strength.expectation_type == "expect_column_values_to_be_between" and strength.column == "strength"
    assert strength.unexpected_count == 1
    assert len(strength.samples) == 1
    assert strength.samples[0].items() >= {"id": ids[1], "path": "signals/feedback_buffer.jsonl", "line_number": 2,
                                           "strength": 1.5}.items()
    dup = fails["id is unique"]
    assert dup.unexpected_count == 2 and [s["id"] for s in dup.samples] == [ids[2], ids[2]]
    assert sorted(s["line_number"] for s in dup.samples) == [3, 10]  # provenance of both copies
    assert fails["signal in {correct, incorrect, good, bad, unsure, neutral}"].observed["unexpected_values"] == {
        "great": 1}
    future = fails["created_at not in the future"]
    assert future.samples[0]["id"] == ids[4] and future.samples[0]["created_at_text"] == "2026-02-26T10:00:00"

    with pytest.raises(ValidationFailed) as info:
        enforce(report)
    message = str(info.value)
    for name in fails:
        assert name in message
    assert ids[1] in message and '"strength": 1.5' in message
    assert info.value.report is report


def test_bad_export_fails_on_empty_prompt_split_leak_and_duplicate_keys(lake):
    con = lake.con.cursor()
    con.execute("create or replace temp table sft_bad as select * from exports.sft")
    victim, other = [r[0] for r in con.execute("select interaction_id from sft_bad order by 1 limit 2").fetchall()]
    con.execute("update sft_bad set prompt = [{'role': 'user', 'content': ' \t\u3000'}] where interaction_id = ?",
                [victim])
    # the same normalised prompt ("question 7" with other whitespace) in the other split
    con.execute("insert into sft_bad select * replace ([{'role': 'user', 'content': '  question   7 '}]"
                "::struct(role varchar, content varchar)[] as prompt, "
                "case split when 'train' then 'eval' else 'train' end as split, 'leak' as interaction_id) "
                "from sft_bad where interaction_id = (select max(interaction_id) from sft_bad "
                "where prompt[-1].content = 'question 7')")
    con.execute("insert into sft_bad select * from sft_bad where interaction_id = ?", [other])
    con.execute("update sft_bad set sample_weight = 0 where interaction_id = ?", [other])

    report = validate_table(con, "sft_bad", run_id="bad", now=NOW, checks=SUITES["exports.sft"])
    fails = failed(report)
    assert set(fails) == {"prompt is a non-empty conversation", "no normalised prompt in both splits",
                          "interaction_id is unique", "sample_weight > 0"}
    empty = fails["prompt is a non-empty conversation"]
    assert empty.samples[0]["interaction_id"] == victim and empty.samples[0]["prompt_last"] == " \t\u3000"
    leak = fails["no normalised prompt in both splits"]
    assert leak.unexpected_count == 2
    assert {s["normalised_prompt"] for s in leak.samples} == {"question 7"}
    assert {s["split"] for s in leak.samples} == {"train", "eval"}
    message = str(ValidationFailed(report))
    assert "sft_bad" in message and victim in message and "leak" in message


def test_contract_drift_missing_column_wrong_type_and_raw_ids(lake):
    con = lake.con.cursor()
    con.execute("create or replace temp table kto_drift as select * exclude (split) "
                "replace (label::varchar as label), 'raw-session' as session_id from exports.kto")
    report = validate_table(con, "kto_drift", run_id="drift", now=NOW, checks=SUITES["exports.kto"])
    fails = failed(report)
    present = next(n for n in fails if n.startswith("columns present"))
    assert fails[present].observed == {"missing": ["split"]}
    types = next(n for n in fails if n.startswith("column types"))
    assert fails[types].observed["mismatched"] == {"label": "VARCHAR", "split": "<missing>"}
    raw = next(n for n in fails if n.startswith("no raw session or user id"))
    assert fails[raw].observed == {"present": ["session_id"]}
    assert fails["split in {train, eval}"].status == "error" and "split" in fails["split in {train, eval}"].detail


def test_optional_checks_are_skipped_when_their_column_is_absent(lake):
    con = lake.con.cursor()
    con.execute("create or replace temp table kto_public as select prompt, completion, label, sample_weight, split, "
                "origin from exports.kto")
    report = validate_table(con, "kto_public", run_id="r", now=NOW, checks=SUITES["exports.kto"])
    assert report.success, report.describe()
    skipped = [r for r in report.results if r.status == "skipped"]
    assert [r.name for r in skipped] == ["(origin, example_id) is unique"]
    assert skipped[0].success is None and "example_id" in skipped[0].detail


# ------------------------------------------------------------------ times, missing tables, storage


def test_not_in_the_future_is_relative_to_the_run_time_with_one_day_of_slack():
    lake = Lake()
    signal(lake, 1, created_at="2026-03-02T06:00:00")  # 18 h after NOW: local-time skew, allowed
    signal(lake, 2)
    lake.stage()
    assert validate_table(lake.con, "staging.signals", run_id="r", now=NOW).success
    later = validate_table(lake.con, "staging.signals", run_id="r", now=NOW - timedelta(days=2))
    assert [r.name for r in later.failures] == ["created_at not in the future"]
    assert later.failures[0].observed["latest_allowed"] == "2026-02-28T12:00:00+00:00"
    naive = validate_table(lake.con, "staging.signals", run_id="r", now=datetime(2026, 2, 27, 12))  # read as UTC
    assert [r.name for r in naive.failures] == ["created_at not in the future"]


def test_a_table_that_does_not_exist_yet_is_skipped_and_recorded():
    con = duckdb.connect()
    report = validate_table(con, "marts.retrieval_summary", run_id="r1", now=NOW)
    assert report.status == "skipped" and report.success and report.results == []
    assert "does not exist" in report.skipped and "skipped" in report.describe()
    assert validate_table(con, "marts.nothing_declared", run_id="r1", now=NOW).skipped.startswith("no suite")
    assert record_validations(con, report) == 1
    assert con.execute("select table_name, expectation, status, success, detail from ingest.validations").fetchall() == [
        ("marts.retrieval_summary", "suite", "skipped", None, report.skipped)]


def test_record_validations_appends_one_row_per_expectation_and_upgrades_an_old_table():
    lake = Lake()
    ids = [signal(lake, i) for i in range(1, 4)]
    lake.stage()
    con = lake.con
    con.execute("update staging.signals set strength = -1 where id = ?", [ids[0]])
    con.execute("create schema if not exists ingest")
    con.execute("create table ingest.validations (run_id varchar, table_name varchar, expectation varchar, "
                "kind varchar, column_name varchar, blocking boolean, success boolean, observed varchar, "
                "unexpected_count bigint, rows_validated bigint, sample_rows json, validated_at timestamptz)")
    report = validate_table(con, "staging.signals", run_id="run-9", now=NOW)
    assert record_validations(con, report) == len(SUITES["staging.signals"])
    rows = con.execute("select expectation, expectation_type, column_name, blocking, success, status, "
                       "unexpected_count, rows_validated, sample_rows, observed from ingest.validations "
                       "where run_id = 'run-9' and not success").fetchall()
    assert len(rows) == 1
    name, kind, column, blocking, success, status, unexpected, n, samples, observed = rows[0]
    assert (name, kind, column, blocking, success, status, unexpected, n) == (
        "strength in [0, 1]", "expect_column_values_to_be_between", "strength", True, False, "failed", 1, 3)
    assert json.loads(samples)[0]["id"] == ids[0] and json.loads(observed)["unexpected"] == 1
    assert con.execute("select count(*) from ingest.validations where validated_at is null").fetchone() == (0,)


# ------------------------------------------------------------------ the suites themselves


def test_suites_cover_every_published_and_staged_table():
    expected = {f"staging.{n}" for n in ("interactions", "feedback", "outcomes", "session_ratings",
                                         "weighted_examples", "signals", "eventlog", "legacy_log")}
    expected |= {f"exports.{n}" for n in ("sft", "kto", "dpo", "weighted")}
    expected |= {f"marts.{n}" for n in ("interaction_labels", "retrieval_precision_by_rank",
                                        "retrieval_query_metrics", "retrieval_summary", "doc_utility",
                                        "missed_files", "session_satisfaction", "outcome_rates",
                                        "signal_opinions", "signal_conflicts", "promotion_candidates")}
    assert expected <= set(SUITES)
    for table, checks in SUITES.items():
        assert checks and all(isinstance(c, Check) and c.expectation_type.startswith("expect_") for c in checks)
        assert len({c.name for c in checks}) == len(checks), table
    names = {c.name: c for c in SUITES["staging.signals"]}
    assert names["strength in [0, 1]"].blocking and names["id is unique"].blocking
    assert not names["timestamp not in the future"].blocking  # the skewed epoch field: reported only
    assert names["created_at not in the future"].blocking  # the time last-wins orders by
    assert {c.name for c in SUITES["staging.weighted_examples"]} >= {"weight > 0", "label in {True, False}"}
    assert {"rank ≥ 1", "rank is unique"} <= {c.name for c in SUITES["marts.retrieval_precision_by_rank"]}
    assert order_keys("exports.sft") == ("interaction_id",) and order_keys("staging.signals") == ("id",)


@pytest.mark.parametrize("seed", range(3))
def test_fast_normalisation_macro_equals_fw_norm_and_python(seed):
    rng = random.Random(seed)
    alphabet = list("ab é") + list(text.WHITESPACE_CHARS) + ["e\u0301", "\u00e9", "x", "\u200b", "\ufeff"]
    strings = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14))) for _ in range(5000)] + [None]
    con = duckdb.connect()
    text.register(con)
    for statement in MACROS:
        con.execute(statement)
    got = con.execute("select s, fwq_norm(s), fw_norm(s), fwq_nonblank(s) from (select unnest(?) as s)",
                      [strings]).fetchall()
    for s, fast, reference, nonblank in got:
        assert fast == reference == text.normalize_text(s), repr(s)
        assert nonblank == bool(text.normalize_text(s)), repr(s)


# ------------------------------------------------------------------ actions: warn / drop / fail


def test_every_expectation_has_an_explicit_action_and_drops_only_rows():
    from dagster_project.expectations import ACTIONS, DROPPABLE_KINDS

    actions = {(table, c.name): c.action for table, checks in SUITES.items() for c in checks}
    assert set(actions.values()) == set(ACTIONS)
    for table, checks in SUITES.items():
        for c in checks:
            assert c.blocking == (c.action != "warn")
            if c.action == "drop":
                # staging's future-dated versions have no threshold (a producer's clock: every run
                # would fail until their date); every other drop fails the run beyond 5%
                no_threshold = (table.startswith("staging.") and c.kind == "not_future") \
                    or c.name == "prompt of a TUI rating is not empty"
                assert c.kind in DROPPABLE_KINDS and c.mostly == (0.0 if no_threshold else 0.95), (table, c.name)
    for table in ("exports.sft", "exports.kto", "exports.dpo", "exports.weighted"):
        assert actions[(table, "prompt is a non-empty conversation")] == "drop"
        assert actions[(table, "no normalised prompt in both splits")] == "fail"
        assert actions[(table, "no raw session or user id columns (session_id, user_id, user_id_or_null, "
                               "session_id_opaque)")] == "fail"
    assert actions[("staging.interactions", "timestamp not in the future")] == "drop"
    assert actions[("staging.interactions", "id is unique")] == "fail"
    with pytest.raises(ValueError, match="cannot drop rows"):
        Check("x is unique", "unique", "x", action="drop")


def _sft_copy(lake, name: str):
    con = lake.con.cursor()
    con.execute(f"create or replace table main.{name} as select * from exports.sft")
    return con


def test_drop_removes_one_bad_row_records_it_once_per_run_and_the_rest_passes(lake):
    from dagster_project.validation import apply_drops

    checks = SUITES["exports.sft"]
    con = _sft_copy(lake, "sft_one_bad")
    n = con.execute("select count(*) from sft_one_bad").fetchone()[0]
    victim = con.execute("select interaction_id from sft_one_bad order by 1 limit 1").fetchone()[0]
    con.execute("update sft_one_bad set completion = [{'role': 'user', 'content': 'hi'}] where interaction_id = ?",
                [victim])
    for run in ("run-a", "run-a", "run-b"):  # a re-materialised asset in one run does not double-count
        con.execute("delete from sft_one_bad where interaction_id = ?", [victim])
        con.execute("insert into sft_one_bad select * replace ([{'role': 'user', 'content': 'hi'}] as completion) "
                    "from exports.sft where interaction_id = ?", [victim])
        drops = apply_drops(con, "main.sft_one_bad", run_id=run, now=NOW, checks=checks)
        assert drops.candidates == n and drops.excluded == {
            "completion roles in {assistant}, last is assistant": 1} and not drops.systemic
    ledger = con.execute("select run_id, row_key, expectation, detail, path, line_number from ingest.excluded "
                         "where table_name = 'main.sft_one_bad' order by run_id").fetchall()
    assert [(r, k, e) for r, k, e, *_ in ledger] == [
        ("run-a", victim, "completion roles in {assistant}, last is assistant"),
        ("run-b", victim, "completion roles in {assistant}, last is assistant")]
    assert ledger[0][3] == 'completion_roles = ["user"]' and ledger[0][4] and ledger[0][5] >= 1
    assert con.execute("select count(*) from sft_one_bad").fetchone() == (n - 1,)
    report = validate_table(con, "main.sft_one_bad", run_id="run-b", now=NOW, checks=checks)
    assert report.success, report.describe()
    roles = report.result("completion roles in {assistant}, last is assistant")
    assert roles.observed["excluded"] == 1 and report.summary()["excluded"] == {roles.name: 1}


def test_a_dropped_dpo_pair_is_recorded_with_the_chosen_response_provenance(lake):
    from dagster_project.validation import apply_drops

    con = lake.con.cursor()
    con.execute("create or replace table main.dpo_one_bad as select * from exports.dpo")
    victim = con.execute("select chosen_id, rejected_id, chosen_path, chosen_line_number from dpo_one_bad "
                         "order by all limit 1").fetchone()
    assert victim[2] and victim[3] >= 1
    con.execute("update dpo_one_bad set rejected = chosen where chosen_id = ? and rejected_id = ?", victim[:2])
    drops = apply_drops(con, "main.dpo_one_bad", run_id="r", now=NOW, checks=SUITES["exports.dpo"])
    assert drops.excluded == {"chosen differs from rejected": 1}
    assert con.execute("select path, line_number from ingest.excluded where table_name = 'main.dpo_one_bad'"
                       ).fetchall() == [victim[2:]]


def test_drop_beyond_its_threshold_keeps_the_rows_and_fails_naming_the_expectation(lake):
    from dagster_project.validation import apply_drops

    checks = SUITES["exports.sft"]
    con = _sft_copy(lake, "sft_many_bad")
    n = con.execute("select count(*) from sft_many_bad").fetchone()[0]
    con.execute("update sft_many_bad set prompt = [{'role': 'user', 'content': ''}] "
                "where interaction_id in (select interaction_id from sft_many_bad order by 1 limit 2)")
    assert 2 > 0.05 * n  # more than 5% of the candidate rows (and more than one row)
    drops = apply_drops(con, "main.sft_many_bad", run_id="r", now=NOW, checks=checks)
    assert drops.total == 0 and drops.systemic == {
        "prompt is a non-empty conversation": {"offending": 2, "of": n, "threshold": 0.05}}
    assert con.execute("select count(*) from sft_many_bad").fetchone() == (n,)
    report = validate_table(con, "main.sft_many_bad", run_id="r", now=NOW, checks=checks)
    assert [r.name for r in report.failures] == ["prompt is a non-empty conversation"]
    with pytest.raises(ValidationFailed, match="prompt is a non-empty conversation.*systemic"):
        enforce(report)


def test_tui_ratings_with_an_empty_prompt_are_dropped_whatever_their_share_and_not_counted_again(lake):
    """The TUI writes ``"query": ""`` when the rated turn has no text before it. Counted by the
    prompt check too, such ratings over 5% of a small weighted set made it systemic: the run
    failed, and every run after it. They are dropped by a check of their own with no threshold,
    and another check is judged on the rows it excludes itself."""
    from dagster_project.validation import apply_drops

    checks = SUITES["exports.weighted"]
    con = lake.con.cursor()
    n = 24  # a small weighted set: three ratings are over 5% of it
    rows = ("select [{'role': 'user', 'content': 'q' || i}] as prompt, [{'role': 'assistant', 'content': 'a' || i}] "
            "as completion, 1.0 as weight, null as note, true as label, 'train' as split, 'weighted_queue' as origin, "
            "format('h{:03d}', i) as content_hash, 'weighted/training_queue.jsonl' as path, i + 1 as line_number, "
            f"i * 100 as byte_offset, timestamptz '2026-01-05 10:00:00+00' as example_timestamp from range({n}) t(i)")
    con.execute("create or replace table main.weighted_tui as select * from exports.weighted limit 0")
    con.execute(f"insert into weighted_tui by name ({rows})")
    hashes = ["h000", "h001", "h002", "h003"]
    tui, queue = hashes[:3], hashes[3]
    con.execute("update weighted_tui set origin = 'weighted_rating', prompt = [{'role': 'user', 'content': ''}] "
                "where content_hash in (select unnest(?::varchar[]))", [tui])
    # a queue row with a blank prompt is still one odd record of the prompt check
    con.execute("update weighted_tui set origin = 'weighted_queue', prompt = [{'role': 'user', 'content': ' '}] "
                "where content_hash = ?", [queue])
    drops = apply_drops(con, "main.weighted_tui", run_id="r", now=NOW, checks=checks)
    assert not drops.systemic and drops.excluded == {
        "prompt of a TUI rating is not empty": 3, "prompt is a non-empty conversation": 1}
    assert sorted(k for (k,) in con.execute("select row_key from ingest.excluded where table_name = "
                                             "'main.weighted_tui' and expectation like 'prompt of a TUI%'").fetchall()) \
        == tui
    report = validate_table(con, "main.weighted_tui", run_id="r", now=NOW, checks=checks)
    assert report.success, report.describe()
    # two queue rows with blank prompts are still too many for a set this small
    con.execute("create or replace table main.weighted_two as select * from exports.weighted limit 0")
    con.execute(f"insert into weighted_two by name ({rows})")
    con.execute("update weighted_two set origin = 'weighted_queue', prompt = [{'role': 'user', 'content': ''}] "
                "where content_hash in (select unnest(?::varchar[]))", [hashes[:2]])
    drops = apply_drops(con, "main.weighted_two", run_id="r", now=NOW, checks=checks)
    assert list(drops.systemic) == ["prompt is a non-empty conversation"] and drops.total == 0

def test_an_older_validations_table_is_brought_to_todays_columns_keeping_its_rows():
    """An early version's ``ingest.validations`` had a ``kind`` column and another order: every
    publish warned that ``kind`` had no description, and the published table's columns differed
    from a new lake's. Before a run's steps it is rebuilt in today's columns, its rows kept."""
    from dagster_project.validation import VALIDATIONS_COLUMNS, ensure_tables

    con = duckdb.connect()
    con.execute("create schema ingest")
    con.execute("create table ingest.validations (kind varchar, run_id varchar, table_name varchar, "
                "success boolean, validated_at timestamptz)")
    con.execute("insert into ingest.validations values ('row', 'old-run', 'staging.x', true, '2026-01-02 03:04:05+00')")
    ensure_tables(con)
    assert [r[0] for r in con.execute("select column_name from duckdb_columns() where schema_name = 'ingest' "
                                      "and table_name = 'validations' order by column_index").fetchall()] == [
        *VALIDATIONS_COLUMNS, "recorded_at"]
    assert con.execute("select run_id, table_name, expectation_type, success, recorded_at = validated_at "
                       "from ingest.validations").fetchall() == [("old-run", "staging.x", "row", True, True)]
    con.execute("insert into ingest.validations (run_id) values ('new-run')")  # recorded_at has its default
    assert con.execute("select recorded_at is not null from ingest.validations where run_id = 'new-run'").fetchall() == [(True,)]
