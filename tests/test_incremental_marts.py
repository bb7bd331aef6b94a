"""Incremental labels and training sets equal one whole build of the final staging (issue 10).

Each example is a random history of appends, every step followed by an incremental build:
new interactions, new versions of old ones (other text, other label, moved to another prompt
group), sidecar events for old and new interactions and for interactions not arrived yet
(orphans), weighted examples, an identity dropped from staging for one run (a future-dated
version with no earlier one that passes), and the instant beyond which sidecar events are left
out moving. At the end every table must equal, row for row, a whole build of the same staging.
"""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from staging_fixtures import Lake, interaction_id
from transforms.delta import FINGERPRINT
from transforms.labels import LABEL_CHANGES, LABEL_INPUTS, build_labels
from transforms.training import build_training_sets

KEY = b"test-key"
AS_OF = date(2026, 3, 1)
TABLES = ["marts.interaction_labels", "marts.orphan_feedback", "lineage.prompt_keys",
          "exports.sft", "exports.kto", "exports.dpo", "exports.weighted"]
RAW = ["interactions", "feedback", "weighted_queue", "weighted_ratings"]

# few groups, so appends keep landing in groups that already have pairs
PROMPTS = ["parse json", "parse\u00a0 json", "sort\u0301", ""]
CONTEXTS = ["", "", " ", "ctx"]
OUTPUTS = ["A", "B", "A "]
LABELS = ["none", "positive", "negative"]

interaction_op = st.tuples(
    st.just("interaction"), st.integers(0, 4), st.sampled_from(PROMPTS), st.sampled_from(CONTEXTS),
    st.sampled_from(OUTPUTS), st.sampled_from(LABELS), st.booleans(), st.integers(0, 5))
feedback_op = st.tuples(
    st.just("feedback"), st.integers(0, 5), st.sampled_from(["positive", "negative", "neutral"]),
    st.integers(0, 59), st.booleans())
weighted_op = st.tuples(
    st.just("weighted"), st.sampled_from(PROMPTS), st.sampled_from(OUTPUTS), st.sampled_from([0.5, 1.0, 2.0]),
    st.booleans())
drop_op = st.tuples(st.just("drop"), st.integers(0, 4))
# the instant beyond which sidecar events are left out (staging.feedback's run time + slack),
# drawn each time: later than the last (events admitted) or earlier (a rebuild)
clock_op = st.tuples(st.just("clock"), st.integers(0, 59))
step = st.lists(st.one_of(interaction_op, interaction_op, feedback_op, feedback_op, weighted_op, drop_op,
                          clock_op), min_size=1, max_size=8)


# Every history starts with two prompt groups holding preference pairs, which the random
# appends then disturb (relabel, move, drop, add to).
SEED = [("interaction", 0, "parse json", "", "A", "positive", True, 0),
        ("interaction", 1, "parse json", "", "B", "negative", True, 0),
        ("interaction", 2, "parse\u00a0 json", " ", "A ", "negative", True, 0),
        ("interaction", 3, "sort\u0301", "ctx", "A", "positive", True, 0),
        ("interaction", 4, "sort\u0301", "ctx", "B", "negative", True, 0)]


def apply(lake: Lake, op: tuple) -> int | None:
    """Append one record; returns an interaction to drop from staging this run, if any."""
    kind = op[0]
    if kind == "interaction":
        _, i, prompt, context, output, label, accepted, minute = op
        lake.interaction(i, input_text=prompt, context=context, output_text=output, user_feedback=label,
                         was_accepted=accepted, timestamp=f"2026-02-26T14:{minute:02d}:00")
    elif kind == "feedback":
        _, i, label, minute, edited = op
        lake.feedback(i, label, f"2026-02-26T15:{minute:02d}:00", was_edited=edited)
    elif kind == "clock":
        lake.cutoff = datetime(2026, 2, 26, 15, op[1], tzinfo=timezone.utc)
    elif kind == "weighted":
        _, prompt, output, weight, queue = op
        if queue:
            lake.weighted_queue(prompt or "q", output, weight=weight)
        else:
            lake.weighted_rating(prompt or "q", output, rating="good" if weight <= 1 else "bad")
    else:
        return op[1]
    return None


def build(lake: Lake, *, incremental: bool, **kw) -> None:
    build_labels(lake.con, incremental=incremental, cutoff=getattr(lake, "cutoff", None))
    build_training_sets(lake.con, pseudonym_key=KEY, as_of=AS_OF, incremental=incremental, **kw)


def run_history(lake: Lake, history: list[list[tuple]], **kw) -> None:
    for seq, ops in enumerate(history, start=1):
        drops = [d for d in (apply(lake, op) for op in ops) if d is not None]
        for source in RAW:  # the engine gives every loaded row its observation order
            lake.con.execute(f"update raw.{source} set observed_seq = ? where observed_seq is null", [seq])
        lake.stage()
        for i in drops:  # a drop expectation removed this identity from staging for this run
            lake.con.execute("delete from staging.interactions where id = ?", [interaction_id(i)])
        build(lake, incremental=True, **kw)


def assert_equals_whole_build(lake: Lake, **kw) -> None:
    con = lake.con
    # what the next incremental labels build compares with: every staging row's fingerprint
    assert con.execute(f"select id, {FINGERPRINT} from staging.interactions except all "
                       f"select id, fp from {LABEL_INPUTS}").fetchall() == []
    assert con.execute(f"select id, fp from {LABEL_INPUTS} except all "
                       f"select id, {FINGERPRINT} from staging.interactions").fetchall() == []
    for t in TABLES:
        con.execute(f"create or replace temp table inc_{t.replace('.', '_')} as select * from {t}")
    build(lake, incremental=False, **kw)
    for t in TABLES:
        inc = f"inc_{t.replace('.', '_')}"
        extra = con.execute(f"select * from {inc} except all select * from {t}").fetchall()
        missing = con.execute(f"select * from {t} except all select * from {inc}").fetchall()
        assert (extra, missing) == ([], []), t


@pytest.mark.slow
@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(step, min_size=1, max_size=4), max_pairs=st.sampled_from([1, 2, None]),
       retention=st.sampled_from([None, 30, 2]))  # interactions kept: all, all (a window), none
def test_incremental_builds_equal_one_whole_build(history, max_pairs, retention):
    lake = Lake()
    kw = {"dpo_max_pairs": max_pairs, "eval_fraction": 0.5,
          "retention_days": None if retention is None else {"interactions": retention}}
    run_history(lake, [SEED, *history], **kw)
    assert_equals_whole_build(lake, **kw)


def small_history(lake: Lake) -> None:
    run_history(lake, [
        [("interaction", 1, "parse json", "", "A", "positive", True, 1),
         ("interaction", 2, "parse  json", "", "B", "negative", True, 2),
         ("feedback", 5, "positive", 3, False)],
        [("interaction", 3, "parse json", "", "C", "none", True, 4),
         ("feedback", 3, "negative", 5, False),
         ("interaction", 5, "other", "ctx", "A", "none", True, 6)],
    ])


def test_an_append_touches_only_the_new_and_the_relabelled_interactions():
    lake = Lake()
    small_history(lake)
    con = lake.con
    builds = con.execute("select seq, whole from lineage.label_builds order by seq").fetchall()
    assert builds == [(1, True), (2, False)]
    # step 2 touched: interaction 3 (new, and its sidecar event) and 5 (an orphan that arrived)
    assert sorted(r[0] for r in con.execute(f"select interaction_id from {LABEL_CHANGES}").fetchall()) == \
        sorted([interaction_id(3), interaction_id(5)])
    assert con.execute("select count(*) from marts.orphan_feedback").fetchone()[0] == 0
    # the new negative joined the existing prompt group: 1 positive x 2 negatives
    assert con.execute("select count(*) from exports.dpo").fetchone()[0] == 2
    assert_equals_whole_build(lake)



def test_a_new_version_is_matched_to_its_earlier_inputs_row_by_the_id_hash(monkeypatch):
    """The labels build finds the earlier input row of each new staging version through the ids'
    64-bit hashes, then the ids; having found them all, staging's count and fingerprint sum
    confirm that nothing else changed, and no row is compared (the fast path). The training sets
    find a touched interaction's earlier prompt keys the same way."""
    import transforms.labels as labels_mod

    lake = Lake()
    fast, real = [], labels_mod._touched_interactions

    def spy(con, state):
        # a 64-bit collision, planted in the labels' inputs and the prompt keys: 2's rows take 1's
        # hash; the ids still tell them apart
        con.execute(f"update {LABEL_INPUTS} set h = hash(?) where id = ?", [interaction_id(1), interaction_id(2)])
        con.execute("update lineage.prompt_keys set id_key = hash(?) where id = ?", [interaction_id(1), interaction_id(2)])
        fast.append(real(con, state))
        return fast[-1]

    monkeypatch.setattr(labels_mod, "_touched_interactions", spy)
    run_history(lake, [
        [("interaction", 1, "parse json", "", "A", "positive", True, 1),
         ("interaction", 2, "sort", "", "B", "negative", True, 2)],
        [("interaction", 1, "parse json", "", "B", "negative", True, 3),  # a new version of 1
         ("interaction", 3, "parse json", "", "A", "positive", True, 4)],
    ])
    assert fast == [True]
    assert lake.con.execute("select count(*) from fw_replaced").fetchone() == (1,)  # 1's earlier row
    lake.con.execute("update lineage.prompt_keys set id_key = hash(id)")  # the planted collision undone
    assert_equals_whole_build(lake)


class Recording:
    """A real DuckDB connection that keeps the text of every statement it runs."""

    def __init__(self, con):
        self.con, self.statements = con, []

    def execute(self, sql, *args):
        self.statements.append(sql)
        return self.con.execute(sql, *args)

    def __getattr__(self, name):  # everything else as the connection does it
        return getattr(self.con, name)


@pytest.mark.parametrize("since", [90, None])
def test_touched_interactions_are_read_from_the_rows_observed_since_unless_an_older_one_is_touched(since):
    """``delta.staging_interactions``: ids observed after ``since`` are found among the rows
    appended since (the id column of every row is not read); an id not found there is looked up
    in the whole table only when lineage.label_inputs holds it (an older interaction), and an id
    in neither (feedback whose interaction never arrived) costs no whole-table read."""
    import duckdb

    from transforms.delta import staging_interactions

    raw = duckdb.connect()
    raw.execute("create schema staging; create schema lineage")
    raw.execute("create table staging.interactions as select 'i' || n as id, n as observed_seq, 'x' || n as x "
                "from range(1, 101) t(n)")
    raw.execute("create table lineage.label_inputs as select id, 0::ubigint as fp, hash(id) as h "
                "from staging.interactions where observed_seq <= 90")
    con = Recording(raw)

    def fetch(*ids):
        raw.execute("create or replace temp table into_ (id varchar, x varchar)")
        raw.execute("create or replace temp table keys_ as select unnest($k::varchar[]) as key", {"k": list(ids)})
        con.statements.clear()
        staging_interactions(con, "into_", "id, x", "select key from keys_", since)
        whole = any("where id in" in sql and "rowid" in sql for sql in con.statements)
        return raw.execute("select id, x from into_ order by id").fetchall(), whole

    assert fetch("i95", "i96", "nope") == ([("i95", "x95"), ("i96", "x96")], since is None)
    assert fetch("i95", "i10", "nope") == ([("i10", "x10"), ("i95", "x95")], True)
    # the watermark's own row is an older one, the next a new one
    assert fetch("i90") == ([("i90", "x90")], True)
    assert fetch("i91") == ([("i91", "x91")], since is None)


def test_a_new_staging_row_without_an_id_does_not_hide_the_interactions_feedback_touched():
    """A systemic drop can keep a staging row whose id is NULL; among a build's new rows it is a
    NULL touched key, which must not stop new feedback from touching its interaction
    (``not in`` a list holding NULL is never true)."""
    lake = Lake()
    small_history(lake)
    con = lake.con
    lake.feedback(1, "negative", "2026-02-26T16:00:00")
    con.execute("update raw.feedback set observed_seq = 3 where observed_seq is null")
    lake.stage()
    # interaction 5 (no feedback, no inline label) again, without its id: no label either way
    con.execute("insert into staging.interactions select * replace (null as id, 3 as observed_seq) "
                "from staging.interactions where id = ?", [interaction_id(5)])
    build(lake, incremental=True)
    assert con.execute("select label from marts.interaction_labels where interaction_id = ?",
                       [interaction_id(1)]).fetchone() == ("negative",)
    assert_equals_whole_build(lake)


def test_inputs_of_the_earlier_layout_without_the_id_hash_are_rebuilt_whole_once():
    lake = Lake()
    small_history(lake)
    lake.con.execute(f"alter table {LABEL_INPUTS} drop column h")  # a state from before the hash
    build(lake, incremental=True)
    build(lake, incremental=True)
    assert lake.con.execute("select whole from lineage.label_builds order by seq desc limit 2").fetchall() == \
        [(False,), (True,)]
    assert_equals_whole_build(lake)

def test_an_interaction_moving_to_another_prompt_group_leaves_its_old_group():
    lake = Lake()
    run_history(lake, [
        [("interaction", 1, "parse json", "", "A", "positive", True, 1),
         ("interaction", 2, "parse json", "", "B", "negative", True, 2)],
        # a later version of 1 asks something else: its old group has no positive any more
        [("interaction", 1, "other", "", "A", "positive", True, 3)],
    ])
    assert lake.con.execute("select count(*) from exports.dpo").fetchone()[0] == 0
    assert_equals_whole_build(lake)


@pytest.mark.parametrize("change", ["setting", "no_seq", "raw_rewritten", "labels_whole"])
def test_what_cannot_be_vouched_for_rebuilds_whole(change):
    lake = Lake()
    small_history(lake)
    con = lake.con
    kw = {}
    if change == "setting":
        kw = {"eval_fraction": 0.5}
    elif change == "no_seq":  # a row without an observation order: no fingerprint to trust
        lake.feedback(1, "negative", "2026-02-26T16:00:00")
        lake.stage()
    elif change == "raw_rewritten":  # raw feedback lost a row the last build read
        con.execute("delete from raw.feedback where record_id = ?", [interaction_id(5)])
        lake.stage()
    build_labels(con, incremental=change != "labels_whole")
    build_training_sets(con, pseudonym_key=KEY, as_of=AS_OF, **kw)
    last = con.execute("select whole from lineage.label_builds order by seq desc limit 1").fetchone()[0]
    assert last == (change in ("no_seq", "raw_rewritten", "labels_whole"))
    assert_equals_whole_build(lake, **kw)


def test_training_follows_several_label_builds_and_a_stale_staging():
    lake = Lake()
    small_history(lake)
    con = lake.con
    # two label builds before the training sets run again
    lake.interaction(6, input_text="parse json", output_text="D", user_feedback="negative")
    con.execute("update raw.interactions set observed_seq = 3 where observed_seq is null")
    lake.stage()
    build_labels(con)
    lake.feedback(1, "negative", "2026-02-26T16:00:00")
    con.execute("update raw.feedback set observed_seq = 4 where observed_seq is null")
    lake.stage()
    build_labels(con)
    build_training_sets(con, pseudonym_key=KEY, as_of=AS_OF)
    assert_equals_whole_build(lake)
    # staging changed after the labels were built: the training sets must not trust the log
    lake.interaction(7, input_text="parse json", output_text="E", user_feedback="positive")
    con.execute("update raw.interactions set observed_seq = 5 where observed_seq is null")
    lake.stage()
    build_training_sets(con, pseudonym_key=KEY, as_of=AS_OF)
    assert con.execute("select count(*) from exports.sft where interaction_id = ?",
                       [interaction_id(7)]).fetchone()[0] == 0  # no label yet: not in sft
    build_labels(con)
    build_training_sets(con, pseudonym_key=KEY, as_of=AS_OF)
    assert_equals_whole_build(lake)


# Hot capped groups (sql/exports/dpo_settled_groups.sql): many answers to one prompt, so a cap
# of 1-2 pairs is full, and appends of answers later than, as late as, or earlier than the
# kept pairs, besides relabels of members.
hot_op = st.tuples(
    st.just("interaction"), st.integers(0, 11), st.sampled_from(["parse json", "parse\u00a0 json"]),
    st.just(""), st.sampled_from(["A", "B", "C", "D"]), st.sampled_from(LABELS), st.booleans(),
    st.integers(0, 59))
HOT_SEED = [("interaction", i, "parse json", "", "ABCD"[i % 4], "positive" if i % 2 else "negative", True, 10 + i)
            for i in range(6)]


@pytest.mark.slow
@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(st.lists(st.one_of(hot_op, hot_op, feedback_op), min_size=1, max_size=5),
                        min_size=1, max_size=4),
       max_pairs=st.sampled_from([1, 2, 3]))
def test_hot_capped_groups_incremental_equals_whole(history, max_pairs):
    lake = Lake()
    kw = {"dpo_max_pairs": max_pairs, "eval_fraction": 0.5}
    run_history(lake, [HOT_SEED, *history], **kw)
    assert_equals_whole_build(lake, **kw)


def _hot_group(lake: Lake, minute: int, label: str = "positive", i: int = 9) -> list[tuple]:
    run_history(lake, [HOT_SEED, [("interaction", i, "parse json", "", "C", label, True, minute)]],
                dpo_max_pairs=2)
    return lake.con.execute("select * from exports.dpo order by all").fetchall()


def test_a_full_group_gaining_only_later_answers_is_not_recomputed():
    seeded = Lake()
    run_history(seeded, [HOT_SEED], dpo_max_pairs=2)
    before = seeded.con.execute("select * from exports.dpo order by all").fetchall()
    latest = seeded.con.execute("select max(pair_timestamp) from exports.dpo").fetchone()[0]
    assert len(before) == 2 and latest.minute == 12
    lake = Lake()
    assert _hot_group(lake, 30) == before
    # the group was left out of the recomputation: none of its members was read
    assert lake.con.execute("select count(*) from fw_touched_groups").fetchone()[0] == 0
    assert lake.con.execute("select count(*) from fw_interactions").fetchone()[0] == 1
    assert_equals_whole_build(lake, dpo_max_pairs=2)


@pytest.mark.parametrize("minute", [12, 11])  # as late as the latest kept pair, earlier
def test_a_full_group_gaining_an_answer_not_strictly_later_is_recomputed(minute):
    lake = Lake()
    pairs = _hot_group(lake, minute)
    assert lake.con.execute("select count(distinct key) from fw_touched_groups").fetchone()[0] == 1
    assert len(pairs) == 2
    assert_equals_whole_build(lake, dpo_max_pairs=2)


@pytest.mark.parametrize("minutes", [(11, 30), (30, 11)])
def test_a_full_group_is_recomputed_when_any_of_its_new_answers_is_not_strictly_later(minutes):
    """Two answers join a full group in one build, one of them not later than its kept pairs: the
    group is recomputed, whichever of the two comes first (its earliest new answer decides, not
    its latest)."""
    lake = Lake()
    run_history(lake, [HOT_SEED, [("interaction", 9, "parse json", "", "C", "positive", True, minutes[0]),
                                  ("interaction", 10, "parse json", "", "D", "negative", True, minutes[1])]],
                dpo_max_pairs=2)
    assert lake.con.execute("select count(distinct key) from fw_touched_groups").fetchone()[0] == 1
    assert_equals_whole_build(lake, dpo_max_pairs=2)


def test_a_relabelled_member_of_a_full_group_recomputes_it():
    lake = Lake()
    run_history(lake, [HOT_SEED, [("feedback", 1, "negative", 50, False)]], dpo_max_pairs=2)
    assert lake.con.execute("select count(distinct key) from fw_touched_groups").fetchone()[0] == 1
    assert_equals_whole_build(lake, dpo_max_pairs=2)


def test_dpo_reads_of_an_interaction_only_what_the_member_fetch_brings():
    """An incremental build pairs a touched DPO group from its members' keys (dpo_pairs.sql reads
    no interaction) and fetches the untouched members of new pairs with DPO_MEMBER_COLUMNS only
    (the rest NULL): dpo.sql must read nothing else of them."""
    import re

    from transforms.sqlfiles import sql_text
    from transforms.training import DPO_MEMBER_COLUMNS

    def code(name: str) -> str:
        return "\n".join(line.split("--", 1)[0] for line in sql_text(name).splitlines())

    pairs = code("exports/dpo_pairs")
    ctes = set(re.findall(r"(\w+) as \(", pairs))
    assert set(re.findall(r"(?:from|join) (\w+\.?\w*)", pairs)) - ctes == {"lineage.prompt_keys", "fw_touched_groups"}
    dpo = code("exports/dpo")
    assert re.findall(r"join fw_interactions as (\w+)", dpo) == ["p", "n"]
    read = {m.group(2) for m in re.finditer(r'\b[pn]\.("?)(\w+)\1', dpo)}
    assert read and read <= set(DPO_MEMBER_COLUMNS), read - set(DPO_MEMBER_COLUMNS)
    assert not re.search(r"\b[pn]\.\*", dpo)


def test_a_group_gaining_an_answer_keeps_its_pairs_and_writes_only_the_new_one():
    """A touched DPO group's pairs between untouched interactions that the group still pairs stay
    as they are: not deleted, so their days are not hashed again by the snapshot."""
    lake = Lake()
    run_history(lake, [[("interaction", 1, "parse json", "", "A", "positive", True, 1),
                        ("interaction", 2, "parse json", "", "B", "negative", True, 2)]])
    con = lake.con
    before = con.execute("select rowid, chosen_id, rejected_id from exports.dpo").fetchall()
    assert [r[1:] for r in before] == [(interaction_id(1), interaction_id(2))]
    apply(lake, ("interaction", 3, "parse json", "", "C", "negative", True, 3))
    con.execute("update raw.interactions set observed_seq = 2 where observed_seq is null")
    lake.stage()
    build_labels(con)
    built = build_training_sets(con, pseudonym_key=KEY, as_of=AS_OF)
    assert built.deleted_days["exports.dpo"] == set()
    assert built.appended["exports.dpo"][1] == 1
    after = con.execute("select rowid, chosen_id, rejected_id from exports.dpo order by rowid").fetchall()
    assert after[0] == before[0] and after[1][1:] == (interaction_id(1), interaction_id(3))
    assert_equals_whole_build(lake)
