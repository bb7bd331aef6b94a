"""Training sets (SPEC 4.4 / 5), text normalisation, splits and pseudonyms."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
import sys
from collections import Counter
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from staging_fixtures import DEFAULT_SESSION, Lake, interaction_id
from transforms import pseudonyms, text
from dagster_project.validation import apply_drops
from transforms.labels import build_labels
from transforms.pseudonyms import load_or_create_key, pseudonym, session_pseudonym
from transforms.text import normalize_text, split_bucket, split_of
from transforms.training import PUBLIC_COLUMNS, build_training_sets, kto_balance, public_columns

KEY = b"test-key"
AS_OF = date(2026, 3, 1)
IPATH = "interactions/interactions_2026-02-26_5b0c2f7e.jsonl"
SESSION_P = session_pseudonym(KEY, DEFAULT_SESSION)
MESSAGE = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


def user(t):
    return [{"role": "user", "content": t}]


def system(c, t):
    return [{"role": "system", "content": c}, {"role": "user", "content": t}]


def assistant(t):
    return [{"role": "assistant", "content": t}]


def build(lake: Lake, **kw) -> dict[str, int]:
    lake.stage()
    build_labels(lake.con)
    kw.setdefault("pseudonym_key", KEY)
    kw.setdefault("as_of", AS_OF)
    return build_training_sets(lake.con, **kw).rows


# ---------------------------------------------------------------------------- sft / kto / weighted


def small_lake() -> Lake:
    lake = Lake()
    lake.interaction(1, input_text="question 0", output_text="A1", context="ctx", user_feedback="positive")
    lake.interaction(2, input_text="question 1", output_text="A2", user_feedback="negative")
    lake.interaction(3, input_text="question 1", output_text="A3", user_feedback="positive", was_accepted=False)
    lake.interaction(4, input_text="question 1", output_text="A4", user_feedback="negative")
    lake.feedback(4, "positive", "2026-02-26T15:00:00", source="manual", was_edited=True)
    lake.interaction(5, input_text="question 1", output_text="A5")
    lake.interaction(6, input_text="question 1", output_text="A6", user_feedback="neutral")
    lake.weighted_queue("question 0", "W1", 10.0, "never do this")
    lake.weighted_queue("question 2", "W2", 1.0)
    lake.weighted_queue("question 2", "W2", 1.0, path="weighted/training_queue_archive_20260226_120000.jsonl")
    lake.weighted_rating("question 3", "W3", "bad", 10.0, 1772114400, note="wrong")
    return lake


def test_sft_exact_rows():
    lake = small_lake()
    counts = build(lake)
    assert counts == {"exports.sft": 2, "exports.kto": 7, "exports.dpo": 2, "exports.weighted": 3}
    assert lake.rows("select prompt, completion, sample_weight, split, interaction_id, path, "
                     "line_number, session_pseudonym, label_source, was_edited from exports.sft") == [
        (system("ctx", "question 0"), assistant("A1"), 1.0, "eval", interaction_id(1), IPATH, 1,
         SESSION_P, "inline", False),
        (user("question 1"), assistant("A4"), 1.0, "train", interaction_id(4), IPATH, 4,
         SESSION_P, "manual", True),
    ]


def test_kto_exact_rows_and_balance():
    lake = small_lake()
    build(lake)
    assert lake.rows("select prompt, completion, label, sample_weight, split, origin, example_id "
                     "from exports.kto where origin = 'interaction'") == [
        (system("ctx", "question 0"), assistant("A1"), True, 1.0, "eval", "interaction", interaction_id(1)),
        (user("question 1"), assistant("A2"), False, 1.0, "train", "interaction", interaction_id(2)),
        (user("question 1"), assistant("A3"), True, 1.0, "train", "interaction", interaction_id(3)),
        (user("question 1"), assistant("A4"), True, 1.0, "train", "interaction", interaction_id(4)),
    ]
    # Queue + archive copies of one line are one example; the neutral interaction (6) and the
    # unlabelled one (5) are not examples.
    assert lake.rows("select prompt, completion, label, sample_weight, split, origin, path "
                     "from exports.kto where origin <> 'interaction' order by prompt[1].content") == [
        (user("question 0"), assistant("W1"), False, 10.0, "eval", "weighted_queue",
         "weighted/training_queue.jsonl"),
        (user("question 2"), assistant("W2"), True, 1.0, "train", "weighted_queue",
         "weighted/training_queue_archive_20260226_120000.jsonl"),
        (user("question 3"), assistant("W3"), False, 10.0, "train", "weighted_rating",
         "weighted/feedback.jsonl"),
    ]
    assert kto_balance(lake.con) == {
        "rows": 7, "true": 4, "false": 3, "true_fraction": 4 / 7,
        "weight_true": 4.0, "weight_false": 21.0, "weighted_true_fraction": 4 / 25,
        "by_origin": {"interaction": {"true": 3, "false": 1},
                      "weighted_queue": {"true": 1, "false": 1},
                      "weighted_rating": {"true": 0, "false": 1}},
        "by_split": {"eval": {"true": 1, "false": 1}, "train": {"true": 3, "false": 2}},
        "suggested_desirable_weight": 3 / 4,
    }


def test_weighted_exact_rows():
    lake = small_lake()
    build(lake)
    assert lake.rows("select prompt, completion, weight, note, label, split, origin, path "
                     "from exports.weighted order by origin, prompt[1].content") == [
        (user("question 0"), assistant("W1"), 10.0, "never do this", False, "eval", "weighted_queue",
         "weighted/training_queue.jsonl"),
        (user("question 2"), assistant("W2"), 1.0, None, True, "train", "weighted_queue",
         "weighted/training_queue_archive_20260226_120000.jsonl"),
        (user("question 3"), assistant("W3"), 10.0, "wrong", False, "train", "weighted_rating",
         "weighted/feedback.jsonl"),
    ]


def test_public_columns_come_first_in_contract_order():
    lake = small_lake()
    build(lake)
    for name, cols in PUBLIC_COLUMNS.items():
        assert public_columns(lake.con, name)[:len(cols)] == cols, name


def test_message_columns_have_the_trl_arrow_type():
    lake = small_lake()
    build(lake)
    for table, cols in {"sft": ["prompt", "completion"], "kto": ["prompt", "completion"],
                        "dpo": ["prompt", "chosen", "rejected"],
                        "weighted": ["prompt", "completion"]}.items():
        schema = lake.con.sql(f"select * from exports.{table}").to_arrow_table().schema
        for col in cols:
            assert schema.field(col).type == MESSAGE, (table, col)
    assert schema.field("label").type == pa.bool_()
    assert schema.field("weight").type == pa.float64()


def test_text_is_published_byte_for_byte():
    lake = Lake()
    raw_in = "  Cafe\u0301\r\n  how?\t"
    raw_ctx = " ctx\u00a0 "
    raw_out = "\ufeffkeep  this \n"
    lake.interaction(1, input_text=raw_in, context=raw_ctx, output_text=raw_out, user_feedback="positive")
    lake.interaction(2, input_text="x", context=" \t\u3000", output_text="y", user_feedback="positive")
    build(lake)
    assert lake.rows("select prompt, completion from exports.sft") == [
        (system(raw_ctx, raw_in), assistant(raw_out)),
        (user("x"), assistant("y")),  # a blank context is no system message
    ]


# ---------------------------------------------------------------------------- dpo


def test_dpo_exact_pairs_grouping_and_identical_responses():
    lake = Lake()
    # One group: same question modulo NFC and whitespace, blank contexts.
    lake.interaction(1, input_text="Café  how?", context="", output_text="good", user_feedback="positive")
    lake.interaction(2, input_text=" Cafe\u0301 how?\n", context=None, output_text="bad", user_feedback="negative")
    lake.interaction(3, input_text="Café how?", context="  ", output_text="good", user_feedback="negative")
    lake.interaction(4, input_text="Café how?", output_text="meh", user_feedback="neutral")
    # Same question, other context: its own group; its negative has no positive.
    lake.interaction(5, input_text="Café how?", context="py", output_text="worse", user_feedback="negative")
    # Positive by the sidecar (inline negative superseded) in a group of its own.
    lake.interaction(6, input_text="other", context="sys", output_text="O+", user_feedback="negative")
    lake.feedback(6, "positive", "2026-02-26T15:00:00")
    lake.interaction(7, input_text="other", context="sys ", output_text="O-", user_feedback="negative")
    counts = build(lake)
    assert counts["exports.dpo"] == 2
    got = lake.rows("select prompt, chosen, rejected, chosen_id, rejected_id, split from exports.dpo "
                    "order by chosen_id")
    assert got == [
        (user("Café  how?"), assistant("good"), assistant("bad"), interaction_id(1), interaction_id(2),
         split_of("Café how?")),
        (system("sys", "other"), assistant("O+"), assistant("O-"), interaction_id(6), interaction_id(7),
         split_of("other")),
    ]  # (1, 3) excluded: byte-identical responses


def test_dpo_pairs_only_prompts_and_answers_that_hold_text():
    """A blank prompt is no prompt: the blank prompts of unrelated interactions used to form one
    group, and a blank answer took a candidate's place; every pair of theirs was dropped by the
    exports' checks (a run failed when they passed 5% of the pairs). KTO drops and records them."""
    lake = Lake()
    lake.interaction(1, input_text="real", output_text="A", user_feedback="positive")
    lake.interaction(2, input_text="real", output_text="B", user_feedback="negative")
    lake.interaction(3, input_text="  ", output_text="x", user_feedback="positive")
    lake.interaction(4, input_text="", output_text="y", user_feedback="negative")
    lake.interaction(5, input_text="\u3000\t", output_text="z", user_feedback="negative")
    lake.interaction(6, input_text="q", output_text=" \n ", user_feedback="positive")
    lake.interaction(7, input_text="q", output_text="no", user_feedback="negative")
    lake.interaction(8, input_text="q", output_text="yes", user_feedback="positive")
    for i in range(100, 200):  # so that 4 rows of kto are under its 5% threshold
        lake.interaction(i, input_text=f"filler {i}", output_text="x", user_feedback="positive")
    build(lake)
    assert set(lake.rows("select chosen_id, rejected_id from exports.dpo")) == {
        (interaction_id(1), interaction_id(2)), (interaction_id(8), interaction_id(7))}
    assert lake.rows("select id, pairable from lineage.prompt_keys where not pairable order by id") == sorted(
        (interaction_id(i), False) for i in (3, 4, 5, 6))
    apply_drops(lake.con, "exports.kto", run_id="run-1")  # kto's checks drop and record them
    assert lake.rows("select row_key from ingest.excluded where table_name = 'exports.kto' order by 1") == [
        (f"interaction|{interaction_id(i)}",) for i in (3, 4, 5, 6)]


def at(minute: int, day: str = "2026-02-26") -> str:
    """A collector time ``minute`` minutes after ``day`` 00:00 (naive, as the collector writes)."""
    return f"{day}T{minute // 60:02d}:{minute % 60:02d}:00"


def h(i: int) -> str:
    return hashlib.sha256(interaction_id(i).encode()).hexdigest()


def pair_key(pq: tuple[str, str]) -> str:
    return hashlib.sha256(f"{pq[0]}:{pq[1]}".encode()).hexdigest()


def capped(pos: dict[int, int], neg: dict[int, int], n: int) -> list[tuple[str, str]]:
    """The rule, on {id: minute} per side (distinct texts): the first n + 1 responses per side by
    (time, sha256(id)), then the first n pairs by (the later time, sha256(chosen:rejected))."""
    def first(side):
        return sorted(side, key=lambda i: (side[i], h(i)))[:n + 1]
    pairs = [(p, q) for p in first(pos) for q in first(neg)]
    pairs.sort(key=lambda pq: (max(pos[pq[0]], neg[pq[1]]), pair_key((interaction_id(pq[0]), interaction_id(pq[1])))))
    return [(interaction_id(p), interaction_id(q)) for p, q in pairs[:n]]


# 1..5 positive, 6..10 negative; times neither in id nor in hash order, with ties
CAP_TIMES = {i: (i * 7) % 5 for i in range(1, 11)}


def cap_lake(reverse: bool) -> Lake:
    lake = Lake()
    ids = list(range(1, 11))
    for i in (reversed(ids) if reverse else ids):
        lake.interaction(i, input_text="Same prompt", output_text=f"answer {i}", timestamp=at(CAP_TIMES[i]),
                         user_feedback="positive" if i <= 5 else "negative",
                         path=f"interactions/interactions_2026-02-2{i % 3}_5b0c2f7e.jsonl")
    return lake


def expected_cap(n: int) -> set[tuple[str, str]]:
    return set(capped({i: CAP_TIMES[i] for i in range(1, 6)}, {i: CAP_TIMES[i] for i in range(6, 11)}, n))


def test_dpo_cap_is_exact_and_deterministic_across_runs_and_input_order():
    a, b = cap_lake(False), cap_lake(True)
    assert build(a)["exports.dpo"] == 16
    assert build(b)["exports.dpo"] == 16
    first = a.rows("select chosen_id, rejected_id from exports.dpo")
    assert set(first) == expected_cap(16)
    assert b.rows("select chosen_id, rejected_id from exports.dpo") == first
    assert build(a)["exports.dpo"] == 16 and a.rows("select chosen_id, rejected_id from exports.dpo") == first
    assert build(a, dpo_max_pairs=3)["exports.dpo"] == 3
    assert set(a.rows("select chosen_id, rejected_id from exports.dpo")) == expected_cap(3)
    assert expected_cap(3) != set(capped({i: 0 for i in range(1, 6)}, {i: 0 for i in range(6, 11)}, 3))
    assert build(a, dpo_max_pairs=None)["exports.dpo"] == 25
    with pytest.raises(ValueError):
        build(a, dpo_max_pairs=0)


def test_dpo_repeated_responses_count_once_with_the_earliest_interaction():
    lake = Lake()
    # "good" is first written at minute 1 by 2 and 3 (a tie: the smaller sha256(id) wins)
    for i, minute in ((1, 5), (2, 1), (3, 1)):
        lake.interaction(i, input_text="p", output_text="good", timestamp=at(minute), user_feedback="positive")
    for i, minute in ((4, 9), (5, 2)):
        lake.interaction(i, input_text="p", output_text="bad", timestamp=at(minute), user_feedback="negative")
    build(lake)
    rep_pos = min((2, 3), key=h)
    expected = [(interaction_id(rep_pos), interaction_id(5), assistant("good"), assistant("bad"))]
    assert lake.rows("select chosen_id, rejected_id, chosen, rejected from exports.dpo") == expected
    # A later interaction repeating the text keeps the representative, even with the smallest hash.
    later_pos, later_neg = sorted(range(6, 2000), key=h)[:2]
    assert max(h(later_pos), h(later_neg)) < min(h(rep_pos), h(5))
    lake.interaction(later_pos, input_text="p", output_text="good", timestamp=at(30), user_feedback="positive")
    lake.interaction(later_neg, input_text="p", output_text="bad", timestamp=at(30), user_feedback="negative")
    build(lake)
    assert lake.rows("select chosen_id, rejected_id, chosen, rejected from exports.dpo") == expected


def test_dpo_cap_is_filled_even_when_a_candidate_text_is_on_both_sides():
    lake = Lake()
    lake.interaction(1, input_text="p", output_text="same", user_feedback="positive")
    for i in range(2, 40):
        lake.interaction(i, input_text="p", output_text="same" if i == 2 else f"no {i}",
                         user_feedback="negative")
    assert build(lake)["exports.dpo"] == 16
    assert lake.rows("select count(*) from exports.dpo where rejected_id = $r",
                     {"r": interaction_id(2)}) == [(0,)]


def test_dpo_hot_prompt_is_bounded_and_deterministic():
    lake = Lake()
    times = {i: (i * 7919) % 600 for i in range(1, 601)}
    for i in range(1, 601):
        lake.interaction(i, input_text="continue", output_text=f"answer {i}", timestamp=at(times[i]),
                         user_feedback="positive" if i % 2 else "negative")
    assert build(lake)["exports.dpo"] == 16
    pairs = capped({i: times[i] for i in range(1, 601, 2)}, {i: times[i] for i in range(2, 601, 2)}, 16)
    assert lake.rows("select chosen_id, rejected_id from exports.dpo") == pairs


def test_dpo_new_answers_to_a_capped_group_leave_every_earlier_pair_and_file_unchanged():
    """A day's answers add pairs only to groups under the cap, dated that day: the published
    files of earlier days are the same objects (the rule used to rank by sha256 alone, so a new
    answer with a small hash displaced pairs on many days)."""
    from dagster_project.publishing.parquet import Dataset, plan

    lake = Lake()

    def add(i, prompt, label, day, minute):
        lake.interaction(i, input_text=prompt, output_text=f"answer {i}", timestamp=at(minute, day),
                         user_feedback=label, path=f"interactions/interactions_{day}_5b0c2f7e.jsonl")

    def run():  # as the engine does: every loaded row gets its observation order
        seq = lake.rows("select coalesce(max(observed_seq), 0) + 1 from raw.interactions")[0][0]
        lake.con.execute("update raw.interactions set observed_seq = ? where observed_seq is null", [seq])
        build(lake)

    for i in range(1, 13):  # 36 valid pairs over four February days, capped to 16
        add(i, "hot", "positive" if i % 2 else "negative", f"2026-02-{20 + i % 4:02d}", i)
    add(13, "cold", "positive", "2026-02-21", 0)
    add(14, "cold", "negative", "2026-02-22", 0)
    run()
    dpo = Dataset("exports.dpo", "training/dpo", "training", "select * from exports.dpo",
                  ("prompt_group", "chosen_id", "rejected_id"))
    every_column = "select chosen_id, rejected_id, pair_timestamp, to_json(d)::varchar from exports.dpo as d"
    before = lake.rows(every_column)
    parts_before = {p.name: p.key for p in plan(lake.con, dpo, Path(os.devnull)).parts}
    assert len(before) == 17 and {n[-16:] for n in parts_before} == {"-2026-02.parquet"}  # small: by month

    # March's answers, with the smallest hashes there are: the old rule took them first
    smallest = sorted(range(100, 3000), key=h)[:6]
    for n, i in enumerate(smallest[:4]):
        add(i, "hot", "positive" if n % 2 else "negative", "2026-03-02", n)
    add(smallest[4], "cold", "positive", "2026-03-02", 9)
    add(smallest[5], "cold ", "negative", "2026-03-03", 9)  # the same normalised prompt
    run()
    assert lake.rows("select count(*) from lineage.label_builds where not whole")[0][0] == 1
    after = lake.rows(every_column)
    assert Counter(before) - Counter(after) == Counter()  # every earlier row unchanged
    added = Counter(after) - Counter(before)
    ids = {interaction_id(i) for i in smallest}
    assert sorted((r[0], r[1]) for r in added) == sorted(
        (c, r) for c in (interaction_id(13), interaction_id(smallest[4]))
        for r in (interaction_id(14), interaction_id(smallest[5])) if {c, r} & ids)
    assert {r[2].strftime("%Y-%m") for r in added} == {"2026-03"}
    parts_after = {p.name: p.key for p in plan(lake.con, dpo, Path(os.devnull)).parts}
    assert {k: parts_after[k] for k in parts_before} == parts_before
    split = "test" if split_of("cold") == "eval" else "train"
    assert set(parts_after) - set(parts_before) == {f"{split}-2026-03.parquet"}


answer = st.tuples(st.sampled_from(["positive", "negative"]), st.sampled_from(["a", "b", "c", "d", "e"]),
                   st.integers(0, 3))


@hsettings(max_examples=15, deadline=None)
@given(old=st.lists(answer, max_size=12), new=st.lists(answer, min_size=1, max_size=6),
       max_pairs=st.sampled_from([1, 2, 3, None]))
def test_dpo_later_answers_keep_every_earlier_pair(old, new, max_pairs):
    """Whatever the group holds (repeated texts, a text on both sides, equal times), answers
    later than all of it only add pairs, dated at their time; and input order does not matter."""
    def lake_of(answers):
        lake = Lake()
        for i, (label, text_, minute) in reversed(list(enumerate(answers, start=1))):
            lake.interaction(i, input_text="p", output_text=text_, timestamp=at(minute), user_feedback=label)
        return lake

    query = "select chosen_id, rejected_id, pair_timestamp from exports.dpo"
    before = lake_of(old)
    build(before, dpo_max_pairs=max_pairs)
    later = [(label, text_, minute + 10) for label, text_, minute in new]
    after = lake_of(old + later)
    build(after, dpo_max_pairs=max_pairs)
    old_rows, new_rows = set(before.rows(query)), set(after.rows(query))
    assert old_rows <= new_rows
    old_end = before.rows("select max(timestamp) from staging.interactions")[0][0]
    assert all(old_end is None or r[2] > old_end for r in new_rows - old_rows)
    forward = Lake()
    for i, (label, text_, minute) in enumerate(old + later, start=1):
        forward.interaction(i, input_text="p", output_text=text_, timestamp=at(minute), user_feedback=label)
    build(forward, dpo_max_pairs=max_pairs)
    assert set(forward.rows(query)) == new_rows


# ---------------------------------------------------------------------------- splits, normalisation


def test_split_hash_definition_is_pinned():
    # sha256('question 0')[:15] as an integer, mod 10000 — a change of definition fails here.
    assert split_bucket("question 0") == 70
    assert split_bucket("How do I read a file?") == 4962
    assert split_of("  question\u00a00 ") == "eval"
    assert split_of("question 0", 0.0) == "train"
    assert split_of("How do I read a file?", 0.4962) == "train"
    assert split_of("How do I read a file?", 0.4963) == "eval"


def test_eval_fraction_bounds():
    lake = small_lake()
    build(lake, eval_fraction=1.0)
    assert lake.rows("select distinct split from exports.kto") == [("eval",)]
    build(lake, eval_fraction=0.0)
    assert lake.rows("select distinct split from exports.kto") == [("train",)]
    with pytest.raises(ValueError):
        build(lake, eval_fraction=1.5)


def test_whitespace_class_is_pythons_isspace():
    assert set(text.WHITESPACE_CHARS) == {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    con = Lake().con
    text.register(con)
    got = con.execute("select fw_norm($s)", {"s": "a" + "a".join(text.WHITESPACE_CHARS) + "a"}).fetchall()
    assert got == [(" ".join("a" * (len(text.WHITESPACE_CHARS) + 1)),)]


ALPHABET = st.sampled_from(list("aAeé\u0301 \t\n\u00a0\u2003\u3000xZ?") + ["e\u0301", "\r\n"])


@hsettings(max_examples=200, deadline=None)
@given(st.lists(ALPHABET, max_size=12).map("".join),
       st.one_of(st.floats(0, 1), st.sampled_from([0.05, 0.00005, 0.00015, 0.5, 1.0])))
def test_sql_normalisation_and_split_match_python(s, fraction):
    con = _norm_con()
    assert con.execute("select fw_norm($s)", {"s": s}).fetchall() == [(normalize_text(s),)]
    assert con.execute("select fw_nonblank($s)", {"s": s}).fetchall() == [(normalize_text(s) != "",)]
    assert con.execute("select fw_split(fw_norm($s), $f)", {"s": s, "f": fraction}).fetchall() == [
        (split_of(s, fraction),)]


_CON = None


def _norm_con():
    global _CON
    if _CON is None:
        _CON = Lake().con
        text.register(_CON)
    return _CON


@hsettings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.lists(ALPHABET, min_size=1, max_size=6).map("".join),
                          st.sampled_from(["positive", "negative", "neutral"]),
                          st.sampled_from(["r1", "r2", "r3"]),
                          st.booleans()),
                min_size=1, max_size=12))
def test_no_normalised_prompt_in_both_splits(items):
    lake = Lake()
    for n, (prompt, fb, out, accepted) in enumerate(items, start=1):
        lake.interaction(n, input_text=prompt, output_text=out, user_feedback=fb, was_accepted=accepted)
        lake.weighted_queue(prompt, out, 1.0 if accepted else 10.0)
    build(lake, eval_fraction=0.5)
    rows = lake.rows(
        "select fw_norm(list_filter(prompt, lambda m: m.role = 'user')[1].content) as p, split from ("
        "select prompt, split from exports.sft union all select prompt, split from exports.kto "
        "union all select prompt, split from exports.dpo union all select prompt, split from exports.weighted)")
    seen: dict[str, set[str]] = {}
    for p, split in rows:
        seen.setdefault(p, set()).add(split)
    assert all(len(s) == 1 for s in seen.values())
    assert all(s == {split_of(p, 0.5)} for p, s in seen.items())


# ---------------------------------------------------------------------------- retention


def test_retention_per_source_in_exports():
    lake = Lake()
    lake.interaction(1, timestamp="2025-01-01T00:00:00", user_feedback="positive")
    lake.interaction(2, timestamp="2026-02-28T00:00:00", user_feedback="positive")
    lake.weighted_queue("old-or-unknown", "r", 1.0)  # no timestamp: kept
    lake.weighted_rating("old", "r", "good", 1.0, 1700000000)  # 2023-11-14
    lake.weighted_rating("new", "r", "good", 1.0, 1772114400)  # 2026-02-26
    counts = build(lake, retention_days={"interactions": 30, "weighted_ratings": 30, "weighted_queue": 30})
    assert counts == {"exports.sft": 1, "exports.kto": 3, "exports.dpo": 0, "exports.weighted": 2}
    assert lake.rows("select example_id from exports.kto where origin = 'interaction'") == [(interaction_id(2),)]
    assert sorted(lake.rows("select prompt[1].content from exports.weighted")) == [("new",), ("old-or-unknown",)]
    assert build(lake)["exports.kto"] == 5
    with pytest.raises(ValueError):
        build(lake, retention_days={"sessions": 3})


# ---------------------------------------------------------------------------- pseudonyms


def test_pseudonym_format_and_stability():
    p = pseudonym(KEY, "abc")
    assert p == "p_" + hmac.new(KEY, b"abc", hashlib.sha256).hexdigest()[:32]
    assert p == "p_5d0ea494ece26078f3d279ea524a2dd1"
    assert re.fullmatch(r"p_[0-9a-f]{32}", p)
    assert pseudonym(KEY, "abc") == p and pseudonym(b"other", "abc") != p
    assert session_pseudonym(KEY, DEFAULT_SESSION) == pseudonym(
        KEY, hashlib.sha256(DEFAULT_SESSION.encode()).hexdigest())
    with pytest.raises(ValueError):
        pseudonym(b"", "abc")


@hsettings(max_examples=100, deadline=None)
@given(key=st.binary(min_size=1, max_size=100), values=st.lists(st.text(max_size=40), max_size=5))
def test_sql_pseudonyms_equal_python(key, values):
    con = _norm_con()
    pseudonyms.register(con, key)
    got = [tuple(r) for r in con.execute(
        "select fw_pseudonym(v), fw_session_pseudonym(v) from (select unnest($vs) as v, "
        "unnest(range(len($vs))) as i) order by i", {"vs": values}).fetchall()] if values else []
    assert got == [(pseudonym(key, v), session_pseudonym(key, v)) for v in values]
    for v, (p, _) in zip(values, got):
        assert p != v
    assert con.execute("select fw_pseudonym(null)").fetchall() == [(None,)]


def test_exports_never_carry_raw_session_or_user_ids():
    lake = small_lake()
    lake.session_rating(hashlib.sha256(DEFAULT_SESSION.encode()).hexdigest(), "positive",
                        user_id_or_null="user-42")
    build(lake)
    raw_ids = {DEFAULT_SESSION, hashlib.sha256(DEFAULT_SESSION.encode()).hexdigest(), "user-42"}
    for table in PUBLIC_COLUMNS:
        for row in lake.rows(f"select * from exports.{table}"):
            assert not ({str(v) for v in row} & raw_ids), table
    # Sessions are joinable through the pseudonym of the opaque id, without either raw id.
    assert lake.rows("select distinct session_pseudonym from exports.sft") == [(SESSION_P,)]
    assert lake.rows("select distinct fw_pseudonym(session_id_opaque) from staging.session_ratings") == [(SESSION_P,)]


def test_load_or_create_key(tmp_path):
    path = tmp_path / "state" / "pseudonym.key"
    assert load_or_create_key("from-env", path) == (b"from-env", False)
    assert not path.exists()
    key, created = load_or_create_key(None, path)
    assert created and re.fullmatch(rb"[0-9a-f]{64}", key)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_or_create_key("", path) == (key, False)
    assert load_or_create_key(None, path) == (key, False)
    # The file's text used as FLYWHEEL_PSEUDONYM_KEY gives the same key.
    assert load_or_create_key(path.read_text().strip(), tmp_path / "unused") == (key, False)
    path.write_text("\n")
    with pytest.raises(ValueError):
        load_or_create_key(None, path)
