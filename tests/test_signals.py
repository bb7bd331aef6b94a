"""Signal decay, supersession, conflicts and promotion (SPEC 4.3), through the real engine."""

from __future__ import annotations

import json
from datetime import date

import pytest

from conftest import SAMPLES, ingest, rows, write_lines
from transforms.signals import build_signal_marts


def signal(sid, target, signal_, created, *, strength=1.0, source="manual", aspect="relevance"):
    return json.dumps({"id": sid, "timestamp": 0, "signal": signal_, "strength": strength, "context": "",
                       "session_id": None, "source": source, "created_at": created, "target_type": "chunk",
                       "target_id": target, "aspect": aspect, "original_class": None, "suggested_class": None})


def build(settings, lines, as_of):
    write_lines(settings.raw_dir / "signals" / "feedback_buffer.jsonl", lines)
    con, _ = ingest(settings, sources=["signals"])
    build_signal_marts(con, as_of)
    return con


@pytest.mark.parametrize("age_days, factor", [(0, 1.0), (29, 1.0), (30, 0.8), (61, 0.64)])
def test_decay_per_full_30_days(settings, age_days, factor):
    created = date(2026, 1, 1)
    as_of = date.fromordinal(created.toordinal() + age_days)
    con = build(settings, [signal("s1", "t", "good", "2026-01-01T12:00:00", strength=0.9)], as_of)
    assert rows(con, "select effective_strength from marts.signal_opinions")[0][0] == pytest.approx(0.9 * factor)


def test_latest_signal_supersedes_and_conflicts_are_found(settings):
    con = build(settings, [
        signal("a", "t1", "good", "2026-01-01T10:00:00", aspect="relevance"),
        signal("b", "t1", "bad", "2026-01-02T10:00:00", aspect="relevance"),      # supersedes a
        signal("c", "t1", "correct", "2026-01-01T10:00:00", aspect="accuracy"),   # current, positive
        signal("d", "t2", "good", "2026-01-01T10:00:00"),
    ], date(2026, 1, 3))
    assert rows(con, "select id, is_current, superseded_by from marts.signal_opinions order by id") == [
        ("a", False, "b"), ("b", True, None), ("c", True, None), ("d", True, None)]
    assert rows(con, "select target_id, positive_opinions, negative_opinions from marts.signal_conflicts") == [
        ("t1", 1, 1)]


def test_promotion_needs_two_strong_positives_and_a_manual_one(settings):
    con = build(settings, [
        signal("p1", "promote", "good", "2026-01-01T10:00:00", source="manual"),
        signal("p2", "promote", "correct", "2026-01-01T11:00:00", source="heuristic", aspect="accuracy"),
        signal("s1", "single", "good", "2026-01-01T10:00:00", source="manual"),  # a single signal
        signal("n1", "no_manual", "good", "2026-01-01T10:00:00", source="heuristic"),
        signal("n2", "no_manual", "good", "2026-01-01T11:00:00", source="llm_agreement", aspect="content"),
        signal("w1", "weak", "good", "2026-01-01T10:00:00", strength=0.6),
        signal("w2", "weak", "good", "2026-01-01T11:00:00", strength=0.9, aspect="content"),
    ], date(2026, 1, 2))
    assert rows(con, "select target_id, strong_positive_signals, manual_signals from marts.promotion_candidates") == [
        ("promote", 2, 1)]


def test_the_four_real_rows(settings):
    lines = (SAMPLES / "energyflow-cosmology" / "feedback_buffer.jsonl").read_text().splitlines()
    # Two chunks, each with a manual 'good' (classification) and 'correct' (relevance) at strength 1.0:
    # both promote while fresh; after 11 full 30-day periods (0.8^11 = 0.086) neither does.
    fresh = build(settings, lines, date(2025, 12, 10))
    assert rows(fresh, "select target_id, strong_positive_signals from marts.promotion_candidates order by 1") == [
        ("6056a8f7-61af-4f88-8c07-eed1d7f3c6aa", 2), ("82f873c7-4a60-4797-8491-6cc78934085e", 2)]
    assert rows(fresh, "select count(*) from marts.signal_conflicts") == [(0,)]
    build_signal_marts(fresh, date(2026, 11, 22))
    assert rows(fresh, "select count(*) from marts.promotion_candidates") == [(0,)]
    assert rows(fresh, "select distinct round(effective_strength, 4) from marts.signal_opinions") == [(round(0.8 ** 11, 4),)]
