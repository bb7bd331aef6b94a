"""Final interaction labels (SPEC 4.1), orphan feedback and the rating/outcome marts."""

from __future__ import annotations

import hashlib
from datetime import date, datetime, timezone

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from conftest import dumps, ingest, interaction, write_lines
from staging_fixtures import DEFAULT_SESSION, Lake, interaction_id
from transforms.labels import build_labels, build_marts

UTC = timezone.utc
FB1 = "feedback/2026-02-26_feedback.jsonl"
FB2 = "feedback/2026-02-27_feedback.jsonl"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def labels(lake: Lake) -> dict[str, tuple]:
    lake.stage()
    build_labels(lake.con)
    return {r[0]: r[1:] for r in lake.rows(
        "select interaction_id, label, was_edited, label_source, labeled_at, n_events, conflicting "
        "from marts.interaction_labels")}


def one(lake: Lake, i: int = 1) -> tuple:
    return labels(lake)[interaction_id(i)]


# ---------------------------------------------------------------------------- timelines


def test_inline_then_sidecar_sidecar_wins_and_conflict_is_flagged():
    lake = Lake()
    lake.interaction(1, user_feedback="positive", timestamp="2026-02-26T14:00:00")
    lake.feedback(1, "negative", "2026-02-26T15:00:00", source="manual", was_edited=True)
    assert one(lake) == ("negative", True, "manual", at("2026-02-26T15:00:00"), 2, True)


def test_sidecar_older_than_inline_loses():
    lake = Lake()
    lake.interaction(1, user_feedback="positive", timestamp="2026-02-26T14:00:00", was_edited=True)
    lake.feedback(1, "neutral", "2026-02-26T13:00:00", source="manual")
    assert one(lake) == ("positive", True, "inline", at("2026-02-26T14:00:00"), 2, False)


def test_outcome_tracker_then_manual_whatever_the_line_order():
    lake = Lake()
    lake.interaction(1)
    # The manual correction is written FIRST in the file but happened later: time decides.
    lake.feedback(1, "negative", "2026-02-26T15:05:00", source="manual", was_edited=True)
    lake.feedback(1, "positive", "2026-02-26T15:00:00", source="outcome_tracker")
    assert one(lake) == ("negative", True, "manual", at("2026-02-26T15:05:00"), 2, True)


def test_manual_then_outcome_tracker_later_tracker_wins():
    lake = Lake()
    lake.interaction(1)
    lake.feedback(1, "negative", "2026-02-26T15:00:00", source="manual")
    lake.feedback(1, "positive", "2026-02-26T15:01:00", source="outcome_tracker")
    assert one(lake) == ("positive", False, "outcome_tracker", at("2026-02-26T15:01:00"), 2, True)


def test_equal_time_inline_vs_sidecar_sidecar_wins():
    lake = Lake()
    lake.interaction(1, user_feedback="negative", timestamp="2026-02-26T14:00:00")
    lake.feedback(1, "positive", "2026-02-26T14:00:00", source="outcome_tracker")
    assert one(lake) == ("positive", False, "outcome_tracker", at("2026-02-26T14:00:00"), 2, True)


def test_equal_time_sidecars_later_line_wins():
    lake = Lake()
    lake.interaction(1)
    lake.feedback(1, "positive", "2026-02-26T15:00:00", source="manual")
    lake.feedback(1, "negative", "2026-02-26T15:00:00", source="outcome_tracker")
    assert one(lake) == ("negative", False, "outcome_tracker", at("2026-02-26T15:00:00"), 2, True)


def test_equal_time_sidecars_later_path_wins_even_if_inserted_first():
    lake = Lake()
    lake.interaction(1)
    lake.feedback(1, "neutral", "2026-02-26T15:00:00", path=FB2, line_number=1, byte_offset=0)
    lake.feedback(1, "positive", "2026-02-26T15:00:00", path=FB1, line_number=9, byte_offset=900)
    assert one(lake) == ("neutral", False, "manual", at("2026-02-26T15:00:00"), 2, False)


def test_missing_source_is_manual_and_missing_was_edited_is_false():
    lake = Lake()
    lake.interaction(1, was_edited=True)
    lake.feedback(1, "positive", "2026-02-26T15:00:00")  # neither key written
    assert one(lake) == ("positive", False, "manual", at("2026-02-26T15:00:00"), 1, False)


def test_inline_comes_from_the_winning_interaction_version():
    lake = Lake()
    # Same id twice at the same time: the later line is the winning version.
    lake.interaction(1, user_feedback="positive", timestamp="2026-02-26T14:00:00")
    lake.interaction(1, user_feedback="negative", timestamp="2026-02-26T14:00:00", was_edited=True)
    # A later duplicate without feedback removes the inline event altogether.
    lake.interaction(2, user_feedback="positive", timestamp="2026-02-26T14:00:00")
    lake.interaction(2, user_feedback="none", timestamp="2026-02-26T14:00:01")
    got = labels(lake)
    assert got == {interaction_id(1): ("negative", True, "inline", at("2026-02-26T14:00:00"), 1, False)}


def test_none_feedback_and_no_sidecar_means_no_row_and_neutral_counts():
    lake = Lake()
    lake.interaction(1)
    lake.interaction(2, user_feedback="neutral")
    lake.feedback(2, "positive", "2026-02-26T15:00:00")
    lake.feedback(2, "neutral", "2026-02-26T16:00:00")
    got = labels(lake)
    assert got == {interaction_id(2): ("neutral", False, "manual", at("2026-02-26T16:00:00"), 3, False)}


def test_the_same_physical_line_counts_once():
    lake = Lake()
    lake.interaction(1)
    lake.feedback(1, "positive", "2026-02-26T15:00:00", line_number=1, byte_offset=0)
    lake.feedback(1, "positive", "2026-02-26T15:00:00", line_number=1, byte_offset=0)
    assert one(lake)[4] == 1


def test_naive_sidecar_times_compare_as_instants_across_zones():
    from dataclasses import replace

    from dagster_project.sources import builtin_sources

    specs = builtin_sources()
    specs["feedback"] = replace(specs["feedback"], time_zone="Europe/Oslo")  # UTC+1 in February
    lake = Lake(specs=specs)
    lake.interaction(1, user_feedback="positive", timestamp="2026-02-26T14:30:00")  # UTC
    lake.feedback(1, "negative", "2026-02-26T15:00:00")  # 14:00 UTC: before the inline one
    assert one(lake)[:4] == ("positive", False, "inline", at("2026-02-26T14:30:00"))


def test_orphans_are_listed_then_join_when_the_interaction_arrives():
    lake = Lake()
    lake.interaction(1)
    lake.feedback(7, "negative", "2026-02-26T15:00:00", source="outcome_tracker")
    lake.feedback(7, "positive", "2026-02-26T16:00:00", source="manual")
    assert labels(lake) == {}
    assert lake.rows("select record_id, n_events, first_seen, last_seen, latest_feedback "
                     "from marts.orphan_feedback") == [
        (interaction_id(7), 2, at("2026-02-26T15:00:00"), at("2026-02-26T16:00:00"), "positive")]

    lake.interaction(7, path="interactions/interactions_2026-02-27_5b0c2f7e.jsonl",
                     user_feedback="negative", timestamp="2026-02-26T14:59:00")
    assert labels(lake) == {
        interaction_id(7): ("positive", False, "manual", at("2026-02-26T16:00:00"), 3, True)}
    assert lake.rows("select count(*) from marts.orphan_feedback") == [(0,)]


def test_sidecar_events_beyond_the_cutoff_are_left_out_until_it_passes_them():
    """staging.feedback's drop step excludes an event stamped beyond its run time + slack; the
    timelines leave it out too (it set the label, and a time years ahead would win for good)."""
    lake = Lake()
    lake.interaction(1, user_feedback="positive", timestamp="2026-02-26T14:00:00")
    lake.feedback(1, "negative", "2031-01-01T00:00:00", source="manual")
    lake.feedback(7, "negative", "2031-01-01T00:00:00")  # an orphan with only a future event
    lake.stage()
    build_labels(lake.con, cutoff=at("2026-03-02T12:00:00"))

    def got():
        return (lake.rows("select interaction_id, label, label_source, n_events, conflicting "
                          "from marts.interaction_labels"),
                lake.rows("select record_id, n_events from marts.orphan_feedback"))
    assert got() == ([(interaction_id(1), "positive", "inline", 1, False)], [])
    build_labels(lake.con, cutoff=at("2031-01-01T00:00:00"))
    assert got() == ([(interaction_id(1), "negative", "manual", 2, True)], [(interaction_id(7), 1)])
    build_labels(lake.con)  # no cutoff: every event
    assert got() == ([(interaction_id(1), "negative", "manual", 2, True)], [(interaction_id(7), 1)])


def test_build_is_idempotent():
    lake = Lake()
    lake.interaction(1, user_feedback="positive")
    lake.feedback(1, "negative", "2026-02-26T15:00:00")
    first = labels(lake)
    build_labels(lake.con)
    assert labels(lake) == first


EVENT = st.tuples(
    st.integers(0, 3),                      # minute (collisions wanted)
    st.sampled_from([FB1, FB2]),            # file
    st.integers(1, 4),                      # line
    st.sampled_from(["positive", "negative", "neutral"]),
    st.sampled_from([None, "manual", "outcome_tracker"]),
    st.sampled_from([None, True, False]),
)


@hsettings(max_examples=60, deadline=None)
@given(inline=st.sampled_from(["none", "positive", "negative", "neutral"]),
       events=st.lists(EVENT, max_size=6, unique_by=lambda e: (e[1], e[2])),
       order=st.randoms(use_true_random=False))
def test_label_is_the_max_of_the_total_order_whatever_the_insertion_order(inline, events, order):
    lake = Lake()
    lake.interaction(1, user_feedback=inline, timestamp="2026-02-26T14:01:00", was_edited=False)
    shuffled = list(events)
    order.shuffle(shuffled)
    for minute, path, line, fb, source, edited in shuffled:
        extra = {k: v for k, v in (("source", source), ("was_edited", edited)) if v is not None}
        lake.feedback(1, fb, f"2026-02-26T14:0{minute}:00", path=path, line_number=line,
                      byte_offset=line * 100, **extra)
    timeline = [((at("2026-02-26T14:01:00"), 0, "", 0, 0), (inline, False, "inline"))] if inline != "none" else []
    for minute, path, line, fb, source, edited in events:
        timeline.append(((at(f"2026-02-26T14:0{minute}:00"), 1, path, line * 100, line),
                         (fb, bool(edited), source or "manual")))
    got = labels(lake)
    if not timeline:
        assert got == {}
        return
    key, (label, edited, source) = max(timeline, key=lambda e: e[0])
    kinds = {e[1][0] for e in timeline}
    assert got[interaction_id(1)] == (label, edited, source, key[0], len(timeline),
                                      {"positive", "negative"} <= kinds)


def test_labels_from_real_ingested_files(settings):
    raw = settings.raw_dir
    write_lines(raw / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl", [
        dumps(interaction(1, user_feedback="positive")),
        dumps(interaction(2)),
    ])
    write_lines(raw / "feedback" / "2026-02-26_feedback.jsonl", [
        dumps({"record_id": interaction(1)["id"], "feedback": "negative", "was_edited": True,
               "timestamp": "2026-02-26T15:00:00", "source": "manual"}),
        dumps({"record_id": interaction(2)["id"], "feedback": "positive",
               "timestamp": "2026-02-26T15:00:00.500000"}),
        dumps({"record_id": interaction(3)["id"], "feedback": "positive",
               "timestamp": "2026-02-26T15:00:00", "source": "outcome_tracker"}),
    ])
    con, _ = ingest(settings, sources=["interactions", "feedback"])
    assert build_labels(con).rows == {"marts.interaction_labels": 2, "marts.orphan_feedback": 1}
    got = con.execute("select interaction_id, label, was_edited, label_source, labeled_at, n_events, "
                      "conflicting from marts.interaction_labels").fetchall()
    assert got == [
        (interaction(1)["id"], "negative", True, "manual", at("2026-02-26T15:00:00"), 2, True),
        (interaction(2)["id"], "positive", False, "manual", at("2026-02-26T15:00:00.500000"), 1, False),
    ]
    assert con.execute("select record_id from marts.orphan_feedback").fetchall() == [(interaction(3)["id"],)]


# ---------------------------------------------------------------------------- marts

def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def rating_lake() -> Lake:
    lake = Lake()
    lake.interaction(1)  # session DEFAULT_SESSION
    lake.interaction(2, session_id="11111111-2222-4333-8444-555555555555")
    s1, s2, s3, s4, s5 = sha(DEFAULT_SESSION), "b" * 64, "c" * 64, "d" * 64, "e" * 64
    lake.session_rating(s1, "positive", "2026-02-26T09:00:00Z")
    lake.session_rating(s1, "negative", "2026-02-26T10:00:00Z", user_id_or_null="user-42")  # latest
    lake.session_rating(s2, "skip", "2026-02-26T11:00:00Z")
    lake.session_rating(s3, "positive", "2026-02-27T08:00:00Z", modality="voice")
    lake.session_rating(s4, "positive", "2025-08-01T08:00:00Z")  # beyond 180 days of 2026-03-01
    # Same instant: the later insertion wins.
    lake.session_rating(s5, "positive", "2026-02-27T09:00:00Z", modality="text")
    lake.session_rating(s5, "negative", "2026-02-27T09:00:00Z", modality="text")
    lake.outcome("accepted", "2026-02-26T10:00:00", model="m1", task_type="coding", strategy={"arm_id": "A"})
    lake.outcome("rejected", "2026-02-26T11:00:00", model="m1", task_type="coding", strategy={"arm_id": "A"})
    lake.outcome("accepted", "2026-02-26T12:00:00", model="m1", task_type="coding", strategy={"arm_id": "A"})
    lake.outcome("neutral", "2026-02-26T13:00:00", model="m1", task_type="coding", strategy={})
    lake.outcome("neutral", "2026-02-27T13:00:00", model="m2", task_type=None, strategy={"use_rag": True})
    lake.stage()
    return lake


def test_session_satisfaction_exact():
    lake = rating_lake()
    counts = build_marts(lake.con, as_of=date(2026, 3, 1), pseudonym_key=b"k")
    assert counts == {"marts.session_satisfaction": 3, "marts.session_rating_matches": 1,
                      "marts.outcome_rates": 3}
    assert lake.rows("select * from marts.session_satisfaction") == [
        # day, source, modality, sessions, positive, negative, skipped, satisfaction, matched
        (date(2026, 2, 26), "cli_end", None, 2, 0, 1, 1, 0.0, 1),
        (date(2026, 2, 27), "cli_end", "text", 1, 0, 1, 0, 0.0, 0),
        (date(2026, 2, 27), "cli_end", "voice", 1, 1, 0, 0, 1.0, 0),
    ]
    assert lake.rows("select * from marts.session_rating_matches") == [(4, 1, 0.25, 2, 0.5, 1)]


def test_session_retention_is_a_parameter():
    lake = rating_lake()
    build_marts(lake.con, as_of="2026-03-01", retention_days=None, pseudonym_key=b"k")
    assert lake.rows("select day, sessions, positive from marts.session_satisfaction "
                     "where day < '2026-01-01'") == [(date(2025, 8, 1), 1, 1)]
    build_marts(lake.con, as_of="2026-03-01", retention_days=2, pseudonym_key=b"k")
    # Cutoff 2026-02-27 00:00 UTC.
    assert lake.rows("select day, sessions from marts.session_satisfaction") == [
        (date(2026, 2, 27), 1), (date(2026, 2, 27), 1)]
    with pytest.raises(ValueError):
        build_marts(lake.con, as_of="2026-03-01", retention_days=-1, pseudonym_key=b"k")


def test_outcome_rates_exact():
    lake = rating_lake()
    build_marts(lake.con, as_of=date(2026, 3, 1), pseudonym_key=b"k")
    assert lake.rows("select * from marts.outcome_rates") == [
        (date(2026, 2, 26), "m1", "coding", None, 1, 0, 0, 1, None),
        (date(2026, 2, 26), "m1", "coding", "A", 3, 2, 1, 0, 2 / 3),
        (date(2026, 2, 27), "m2", None, None, 1, 0, 0, 1, None),
    ]
    build_marts(lake.con, as_of=date(2026, 3, 1), outcome_retention_days=2)
    assert lake.rows("select day, outcomes from marts.outcome_rates") == [(date(2026, 2, 27), 1)]


def test_marts_carry_no_raw_ids():
    lake = rating_lake()
    build_marts(lake.con, as_of=date(2026, 3, 1), pseudonym_key=b"k")
    secrets_ = {r[0] for r in lake.rows(
        "select session_id_opaque from staging.session_ratings union select user_id_or_null "
        "from staging.session_ratings union select session_id from staging.interactions "
        "union select session_id from staging.outcomes")} - {None}
    for table in ("session_satisfaction", "session_rating_matches", "outcome_rates"):
        for row in lake.rows(f"select * from marts.{table}"):
            assert not ({str(v) for v in row} & secrets_), table


def test_session_marts_from_a_real_session_store(settings):
    import json
    import sqlite3

    from dagster_project.synth import SESSION_DDL

    db = settings.raw_dir / "sessions" / "session_feedback.sqlite3"
    db.parent.mkdir(parents=True)
    con = sqlite3.connect(db)
    con.execute(SESSION_DDL)  # the session-feedback store's exact schema
    opaque = sha(DEFAULT_SESSION)
    for n, (label, at_, extra) in enumerate([
        ("positive", "2026-02-26T09:00:00.000000Z", {}),
        ("negative", "2026-02-26T09:00:00.000000Z", {"modality": "text"}),  # same instant, later row
        ("skip", "2026-02-27T10:00:00.000000Z", {"modality": "voice"}),
    ]):
        sid = opaque if n < 2 else "f" * 64
        value = {"id": f"r{n}", "session_id_opaque": sid, "user_id_or_null": "u1",
                 "recorded_at": at_, "recorded_date": at_[:10], "label": label,
                 "turn_count_at_end": 4, "source": "api_end", "schema_version": 1, **extra}
        con.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, "
                    "recorded_date, label, turn_count_at_end, source, schema_version, value) "
                    "values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [f"r{n}", sid, "u1", at_, at_[:10], label, 4, "api_end", 1, json.dumps(value)])
    con.commit()
    con.close()
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl",
                [dumps(interaction(1))])
    duck, _ = ingest(settings, sources=["interactions", "session_ratings", "outcomes"])
    build_marts(duck, as_of="2026-03-01", pseudonym_key=b"k")
    assert duck.execute("select * from marts.session_satisfaction").fetchall() == [
        (date(2026, 2, 26), "api_end", "text", 1, 0, 1, 0, 0.0, 1),
        (date(2026, 2, 27), "api_end", "voice", 1, 0, 0, 1, None, 0),
    ]
    assert duck.execute("select * from marts.session_rating_matches").fetchall() == [(2, 1, 0.5, 1, 1.0, 1)]
