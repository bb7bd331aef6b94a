"""Signal decay, supersession, conflicts and promotion (SPEC 4.3) on hand-built staging.signals,
and on the four real rows of energyflow-cosmology's feedback_buffer.jsonl."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import pytest

from conftest import SAMPLES
from eventlog_fixtures import EventLake
from transforms.signals import effective_strength


def build(signals: list[dict], as_of: date) -> EventLake:
    ev = EventLake()
    for s in signals:
        ev.signal(**s)
    ev.build(as_of)
    return ev


def sig(sid, target, signal, created, **kw) -> dict:
    return {"sid": sid, "target": target, "signal": signal, "created": created, **kw}


@pytest.mark.parametrize("age_days, factor", [
    (0, 1.0), (29, 1.0), (30, 0.8), (59, 0.8), (60, 0.64), (61, 0.64), (90, 0.512)])
def test_decay_per_full_30_days(age_days, factor):
    as_of = date(2026, 1, 1) + timedelta(days=age_days)
    ev = build([sig("s1", "t", "good", "2026-01-01T23:59:59", strength=0.9)], as_of)
    assert ev.rows("select age_days, decay_periods, effective_strength from marts.signal_opinions") == [
        (age_days, age_days // 30, pytest.approx(0.9 * factor))]
    assert effective_strength(0.9, date(2026, 1, 1), as_of) == pytest.approx(0.9 * factor)


def test_age_counts_from_created_at_not_the_skewed_timestamp():
    # created just after midnight UTC; the writer's epoch is an hour behind: the previous day
    skewed = int(datetime(2025, 12, 31, 23, 30, tzinfo=timezone.utc).timestamp() * 1000)
    ev = build([sig("s1", "t", "good", "2026-01-01T00:30:00", timestamp=skewed)], date(2026, 1, 30))
    assert ev.rows("select age_days, effective_strength from marts.signal_opinions") == [(29, 1.0)]


def test_a_signal_after_as_of_does_not_grow():
    ev = build([sig("s1", "t", "good", "2026-03-01T10:00:00", strength=0.5)], date(2026, 1, 1))
    assert ev.rows("select age_days, effective_strength from marts.signal_opinions") == [(0, 0.5)]


def test_polarity():
    ev = build([sig(f"s{i}", f"t{i}", s, "2026-01-01T10:00:00")
                for i, s in enumerate(["good", "correct", "bad", "incorrect", "unsure", "neutral"])], date(2026, 1, 1))
    assert ev.rows("select signal, polarity from marts.signal_opinions order by id") == [
        ("good", "positive"), ("correct", "positive"), ("bad", "negative"), ("incorrect", "negative"),
        ("unsure", "neutral"), ("neutral", "neutral")]


def test_latest_signal_supersedes_by_created_at_then_id():
    ev = build([
        sig("a", "t1", "good", "2026-01-01T10:00:00", timestamp=1_900_000_000_000),  # the epoch is not the order
        sig("b", "t1", "bad", "2026-01-02T10:00:00", timestamp=1_000_000_000_000),
        sig("c", "t1", "unsure", "2026-01-03T10:00:00"),
        sig("d", "t2", "good", "2026-01-01T10:00:00"),
        sig("e", "t2", "bad", "2026-01-01T10:00:00"),                                  # same instant: greater id wins
        sig("f", "t1", "correct", "2026-01-01T10:00:00", aspect="accuracy"),          # another aspect
        sig("g", "t1", "bad", "2026-01-05T10:00:00", target_type="concept"),          # another target
    ], date(2026, 1, 10))
    assert ev.rows("select id, is_current, superseded_by from marts.signal_opinions order by id") == [
        ("a", False, "b"), ("b", False, "c"), ("c", True, None), ("d", False, "e"), ("e", True, None),
        ("f", True, None), ("g", True, None)]


def test_conflicts_use_current_opinions_per_target():
    ev = build([
        sig("a1", "t1", "bad", "2026-01-02T10:00:00", aspect="relevance"),
        sig("a2", "t1", "correct", "2026-01-01T10:00:00", aspect="accuracy"),
        sig("a3", "t1", "good", "2026-01-01T09:00:00", aspect="content"),
        sig("b1", "t2", "good", "2026-01-01T10:00:00"),
        sig("b2", "t2", "bad", "2026-01-02T10:00:00"),  # supersedes b1: no conflict left
        sig("c1", "t3", "unsure", "2026-01-01T10:00:00", aspect="classification"),
        sig("c2", "t3", "good", "2026-01-01T10:00:00"),
        sig("d1", "t4", "good", "2026-01-01T10:00:00", target_type="chunk"),
        sig("d2", "t4", "bad", "2026-01-01T10:00:00", target_type="concept", aspect="accuracy"),
    ], date(2026, 1, 3))
    assert ev.rows("select target_type, target_id, positive_opinions, negative_opinions, neutral_opinions, opinions "
                   "from marts.signal_conflicts") == [
        ("chunk", "t1", 2, 1, 0, ["accuracy:correct", "content:good", "relevance:bad"])]


PROMOTION = [
    # promote: manual + heuristic, two aspects
    sig("p1", "mixed", "good", "2026-01-01T10:00:00", source="manual"),
    sig("p2", "mixed", "correct", "2026-01-01T11:00:00", source="heuristic", aspect="accuracy"),
    # promote: two manual signals (the seed's consensus: >= 2 signals, one manual)
    sig("m1", "manual_twice", "good", "2026-01-01T10:00:00"),
    sig("m2", "manual_twice", "good", "2026-01-01T11:00:00"),  # same aspect, agreeing: both count
    # no: a single signal never promotes
    sig("s1", "single", "good", "2026-01-01T10:00:00", strength=1.0),
    # no: automated sources alone, however many
    sig("n1", "automated", "good", "2026-01-01T10:00:00", source="heuristic"),
    sig("n2", "automated", "good", "2026-01-01T11:00:00", source="llm_agreement", aspect="content"),
    sig("n3", "automated", "correct", "2026-01-01T12:00:00", source="heuristic", aspect="accuracy"),
    # no: one of the two is too weak
    sig("w1", "weak", "good", "2026-01-01T10:00:00", strength=0.69),
    sig("w2", "weak", "good", "2026-01-01T11:00:00", strength=0.9, aspect="content"),
    # yes: 0.7 is enough
    sig("e1", "edge", "good", "2026-01-01T10:00:00", strength=0.7),
    sig("e2", "edge", "correct", "2026-01-01T11:00:00", strength=0.7, source="llm_agreement", aspect="accuracy"),
    # no: the manual relevance 'good' was overturned by a later 'bad' on the same aspect
    sig("o1", "overturned", "good", "2026-01-01T10:00:00"),
    sig("o2", "overturned", "correct", "2026-01-01T11:00:00", source="heuristic", aspect="accuracy"),
    sig("o3", "overturned", "bad", "2026-01-01T12:00:00", source="heuristic"),
    # yes, but flagged: two positive aspects and a negative one
    sig("c1", "conflicted", "good", "2026-01-01T10:00:00"),
    sig("c2", "conflicted", "correct", "2026-01-01T11:00:00", aspect="accuracy"),
    sig("c3", "conflicted", "bad", "2026-01-01T12:00:00", source="heuristic", aspect="content"),
    # no: neutral signals are not positive
    sig("u1", "unsure", "unsure", "2026-01-01T10:00:00"),
    sig("u2", "unsure", "neutral", "2026-01-01T11:00:00", aspect="content"),
]


def test_promotion_candidates():
    ev = build(PROMOTION, date(2026, 1, 2))
    assert ev.rows("select target_id, strong_positive_signals, manual_signals, distinct_sources, sources, aspects, "
                   "in_conflict from marts.promotion_candidates order by target_id") == [
        ("conflicted", 2, 2, 1, ["manual"], ["accuracy", "relevance"], True),
        ("edge", 2, 1, 2, ["llm_agreement", "manual"], ["accuracy", "relevance"], False),
        ("manual_twice", 2, 2, 1, ["manual"], ["relevance"], False),
        ("mixed", 2, 1, 2, ["heuristic", "manual"], ["accuracy", "relevance"], False),
    ]
    assert ev.rows("select target_id from marts.signal_conflicts order by 1") == [("conflicted",), ("overturned",)]


def test_promotion_fades_with_decay():
    signals = [sig("a", "t", "good", "2026-01-01T10:00:00"), sig("b", "t", "correct", "2026-01-01T10:00:00",
                                                                   aspect="accuracy", source="heuristic")]
    # 1.0 x 0.8 = 0.8 after 30 days still qualifies; x 0.64 after 60 does not
    assert build(signals, date(2026, 3, 1)).one("select count(*) from marts.promotion_candidates") == 1  # 59 days
    assert build(signals, date(2026, 3, 2)).one("select count(*) from marts.promotion_candidates") == 0  # 60 days


REAL = SAMPLES / "energyflow-cosmology" / "feedback_buffer.jsonl"
CHUNK_A = "6056a8f7-61af-4f88-8c07-eed1d7f3c6aa"
CHUNK_B = "82f873c7-4a60-4797-8491-6cc78934085e"


def real(as_of: date) -> EventLake:
    ev = EventLake()
    for line in REAL.read_text(encoding="utf-8").splitlines():
        ev.signal_record(json.loads(line))
    ev.build(as_of)
    return ev


def test_the_four_real_rows():
    """Two chunks, each with a manual 'good' (classification) and a manual 'correct' (relevance),
    strength 1.0, created 2025-12-10. Two distinct positive signals, one (both) manual: they
    promote while the decayed strength stays >= 0.7, i.e. for 59 days (1.0 x 0.8); from day 60
    (x 0.64) they do not. All four are current (one per target and aspect); nothing conflicts."""
    ev = real(date(2025, 12, 10))
    assert ev.rows("select target_id, aspect, signal, polarity, is_current, effective_strength "
                   "from marts.signal_opinions order by target_id, aspect") == [
        (CHUNK_A, "classification", "good", "positive", True, 1.0),
        (CHUNK_A, "relevance", "correct", "positive", True, 1.0),
        (CHUNK_B, "classification", "good", "positive", True, 1.0),
        (CHUNK_B, "relevance", "correct", "positive", True, 1.0)]
    assert ev.rows("select target_id, strong_positive_signals, manual_signals, distinct_sources "
                   "from marts.promotion_candidates order by target_id") == [(CHUNK_A, 2, 2, 1), (CHUNK_B, 2, 2, 1)]
    assert ev.one("select count(*) from marts.signal_conflicts") == 0
    # created_at is the time: the epoch timestamp is one hour behind it in the real file
    assert ev.rows("select distinct date_trunc('second', created_at) - date_trunc('second', \"timestamp\") "
                   "from staging.signals") == [(timedelta(hours=1),)]

    assert real(date(2026, 2, 7)).rows(
        "select count(*), min(min_effective_strength) from marts.promotion_candidates") == [(2, pytest.approx(0.8))]
    late = real(date(2026, 2, 8))
    assert late.one("select count(*) from marts.promotion_candidates") == 0
    assert late.rows("select distinct age_days, effective_strength from marts.signal_opinions") == [
        (60, pytest.approx(0.64))]


def test_as_of_is_a_bound_parameter():
    from transforms.sqlfiles import sql_text

    assert "$as_of" in sql_text("marts/signal_opinions")
    with pytest.raises(TypeError):
        EventLake().build(as_of="2026-01-01")  # type: ignore[arg-type]
