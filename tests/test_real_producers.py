"""What the real producers write: repeated and skipped local hours, impossible instants,
nested duplicate keys, and values staged as written (issue 8)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from conftest import dumps, ingest, interaction, rows, write_lines

MADRID_FILE = "interactions/interactions_2026-10-25_5b0c2f7e.jsonl"


def _zoned(settings, tmp_path, zone: str = "Europe/Madrid", source: str = "interactions"):
    from dagster_project.settings import Settings

    sources = tmp_path / f"sources_{source}.yaml"
    sources.write_text(f"sources:\n  {source}:\n    time_zone: {zone}\n")
    return Settings.from_env({
        "FLYWHEEL_RAW_DIR": str(settings.raw_dir), "FLYWHEEL_WAREHOUSE": str(settings.warehouse),
        "FLYWHEEL_EXPORT_DIR": str(settings.export_dir), "FLYWHEEL_SOURCES": str(sources)})


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


# The collector's datetime.now().isoformat() in Europe/Madrid across the night of 2026-10-25.
FALL_BACK = [
    ("2026-10-25T01:59:00", "2026-10-24T23:59:00", "unambiguous"),
    ("2026-10-25T02:52:21.110814", "2026-10-25T00:52:21.110814", "fold_first"),  # before the change
    ("2026-10-25T02:00:38.594316", "2026-10-25T01:00:38.594316", "fold_second"),  # after it
    ("2026-10-25T02:30:00", "2026-10-25T01:30:00", "fold_second"),
    ("2026-10-25T03:10:00", "2026-10-25T02:10:00", "unambiguous"),
]


@pytest.mark.parametrize("split", [None, 1, 2, 3])
def test_repeated_hour_resolved_from_the_file_in_one_or_several_runs(settings, tmp_path, split):
    s = _zoned(settings, tmp_path)
    path = settings.raw_dir / MADRID_FILE
    lines = [dumps(interaction(i, timestamp=t)) for i, (t, _, _) in enumerate(FALL_BACK)]
    runs = [lines] if split is None else [lines[:split], lines[split:]]
    con = None
    for n, part in enumerate(runs):
        write_lines(path, part, mode="ab")
        if con is not None:
            con.close()
        con, _ = ingest(s, f"run-{n}", sources=["interactions"])
    got = rows(con, "select timestamp, timestamp_fold from staging.interactions order by line_number")
    assert got == [(_utc(u), fold) for _, u, fold in FALL_BACK]


def test_a_busy_repeated_hour_moves_every_second_pass_line(settings, tmp_path):
    """Hundreds of lines in each pass of the repeated hour: every second-pass line gets the later
    offset (one update for all of them), every first-pass line keeps the earlier one."""
    s = _zoned(settings, tmp_path)
    n = 400
    walls = [f"2026-10-25T02:{(i * 3600 // n) // 60:02d}:{(i * 3600 // n) % 60:02d}.{i:06d}" for i in range(n)]
    write_lines(settings.raw_dir / MADRID_FILE,
                [dumps(interaction(p * n + i, timestamp=w)) for p in range(2) for i, w in enumerate(walls)])
    con, _ = ingest(s, "run-1", sources=["interactions"])
    got = rows(con, "select timestamp, timestamp_fold from staging.interactions order by line_number")
    madrid = ZoneInfo("Europe/Madrid")
    assert got == [(datetime.fromisoformat(w).replace(tzinfo=madrid, fold=p).astimezone(timezone.utc),
                    "fold_second" if p else "fold_first") for p in range(2) for w in walls]


@pytest.mark.parametrize("second_line", ["02:10:00", "01:55:00"])
def test_a_line_appended_to_a_rewritten_file_is_judged_by_that_generation_alone(settings, tmp_path, second_line):
    """A producer rewrote the file, and its new third line was quarantined: the next append's
    pass through the repeated hour was judged against the old generation's third line (02:40,
    then 02:20 looked like a step back: the second pass), while a full refresh, which replays the
    generations in order, judged it by 02:10 alone: the first pass. Incremental and full refresh
    gave two instants for one line. With no line of the new generation in the hour (01:55), the
    replay judged the append against the old generation instead (its reset waited for a first
    line in the hour)."""
    s = _zoned(settings, tmp_path)
    path = settings.raw_dir / MADRID_FILE
    write_lines(path, [dumps(interaction(i, timestamp=f"2026-10-25T{w}")) for i, w in
                       enumerate(["01:50:00", "02:10:00", "02:40:00"], start=1)])
    ingest(s, "run-1", sources=["interactions"])[0].close()
    write_lines(path, [dumps(interaction(1, timestamp="2026-10-25T01:50:00")),
                       dumps(interaction(2, timestamp=f"2026-10-25T{second_line}")), b'{"broken": '])
    ingest(s, "run-2", sources=["interactions"])[0].close()
    with open(path, "ab") as fh:
        fh.write(dumps(interaction(4, timestamp="2026-10-25T02:20:00")).encode() + b"\n")
    query = "select timestamp, timestamp_fold from raw.interactions where id = ? order by observed_seq"
    con, _ = ingest(s, "run-3", sources=["interactions"])
    incremental = rows(con, query, [interaction(4)["id"]])
    con.close()
    con, _ = ingest(s, "run-4", sources=["interactions"], full_refresh=True)
    assert incremental == rows(con, query, [interaction(4)["id"]]) == [(_utc("2026-10-25T00:20:00"), "fold_first")]
    con.close()


# (line's interaction, wall time) in write order; the expected instant of each, and of the winner
REFLUSHED = {
    # the clocks went back (02:05 after 02:50), then the collector wrote line 1 again
    "after the change": ([(1, "02:10:00.100000"), (2, "02:50:00.100000"), (3, "02:05:00.100000"),
                          (1, "02:10:00.100000")],
                         ["00:10:00.1", "00:50:00.1", "01:05:00.1", "00:10:00.1"]),
    # written again before the change: a new line of the first pass after it stays in the first
    "before the change": ([(1, "02:10:00.100000"), (2, "02:50:00.100000"), (1, "02:10:00.100000"),
                           (3, "02:55:00.100000"), (4, "02:05:00.100000")],
                          ["00:10:00.1", "00:50:00.1", "00:10:00.1", "00:55:00.1", "01:05:00.1"]),
}


@pytest.mark.parametrize("case", list(REFLUSHED))
@pytest.mark.parametrize("split", [None, 2])
def test_a_line_written_again_in_the_repeated_hour_keeps_its_pass(settings, tmp_path, case, split):
    """A collector re-flushing a line of the repeated hour wrote a smaller wall time after a larger
    one: read as the clocks going back, the copy was an hour late (it won last-wins, its inline
    feedback an hour after a later thumbs) and every later first-pass line of the file with it."""
    s = _zoned(settings, tmp_path)
    path = settings.raw_dir / MADRID_FILE
    written, expected = REFLUSHED[case]
    lines = [dumps(interaction(i, timestamp=f"2026-10-25T{w}")) for i, w in written]
    for n, part in enumerate([lines] if split is None else [lines[:split], lines[split:]]):
        write_lines(path, part, mode="ab")
        ingest(s, f"run-{n}", sources=["interactions"])[0].close()
    for full_refresh in (False, True):  # incremental (then read as it stands), and one full refresh
        con, _ = ingest(s, f"again-{full_refresh}", sources=["interactions"], full_refresh=full_refresh)
        got = rows(con, "select timestamp from raw.interactions order by line_number")
        staged = rows(con, "select id, timestamp from staging.interactions order by id")
        con.close()
        assert got == [(_utc(f"2026-10-25T{u}"),) for u in expected]
        assert staged == sorted({(interaction(i)["id"], _utc(f"2026-10-25T{u}"))
                                 for (i, _), u in zip(written, expected)})


def test_a_source_identified_by_content_tells_a_line_written_again_by_its_content(settings, tmp_path):
    """The legacy log has no id (its content is its identity): two different rows at one wall time
    (a writer with second resolution) are two lines, the later one after the clocks went back;
    the same row logged again is one. (Keyed by wall time alone, the second pass's line at a time
    the first pass had used stayed an hour early.)"""
    s = _zoned(settings, tmp_path, source="legacy_log")

    def row(wall: str, text: str) -> str:
        return json.dumps({"timestamp": f"2026-10-25T{wall}", "type": "interaction", "user_input": text})

    write_lines(settings.raw_dir / "interactions" / "2026-10-25_interactions.jsonl",
                [row("02:10:00", "a"), row("02:50:00", "b"), row("02:10:00", "c"), row("02:20:00", "d"),
                 row("02:50:00", "b")])
    con, _ = ingest(s, "run-1", sources=["legacy_log"])
    got = rows(con, "select user_input, timestamp from raw.legacy_log order by line_number")
    con.close()
    assert got == [("a", _utc("2026-10-25T00:10:00")), ("b", _utc("2026-10-25T00:50:00")),
                   ("c", _utc("2026-10-25T01:10:00")), ("d", _utc("2026-10-25T01:20:00")),
                   ("b", _utc("2026-10-25T00:50:00"))]


def test_a_repeated_hour_written_without_zero_padding_is_resolved(settings, tmp_path):
    """DuckDB reads a naive time written without zero-padding ('2026-10-25 2:10:00', as a writer
    formatting its own hour does, and the repeated hour is 02:xx in Europe); the second pass was
    found by parsing the text again with ``datetime.fromisoformat``, which refused it and failed
    the source's ingest on every run. The pass is now read from the instant the classifier
    computed, whatever the spelling."""
    s = _zoned(settings, tmp_path)
    walls = ["2026-10-25 2:10:00", "2026-10-25 2:50:00", "2026-10-25  2:05:00"]  # the last: back
    write_lines(settings.raw_dir / MADRID_FILE, [dumps(interaction(i, timestamp=w)) for i, w in enumerate(walls)])
    con, _ = ingest(s, "run-1", sources=["interactions"])
    assert rows(con, "select timestamp, timestamp_fold from staging.interactions order by line_number") == [
        (_utc("2026-10-25T00:10:00"), "fold_first"), (_utc("2026-10-25T00:50:00"), "fold_first"),
        (_utc("2026-10-25T01:05:00"), "fold_second")]


@pytest.mark.parametrize("zoned", [False, True])
def test_naive_times_with_seven_to_nine_fraction_digits_are_read_to_the_microsecond(settings, tmp_path, zoned):
    """numpy's datetime64[ns] writes 9 fraction digits, .NET's round-trip format 7: a naive time
    so written was bad_timestamp, while the same digits with a `Z` or an offset were read (to the
    microsecond)."""
    s = _zoned(settings, tmp_path) if zoned else settings
    texts = ["2026-02-26T14:03:12.1234567", "2026-02-26 14:03:12.123456789", "2026-02-26T14:03:12.123456789Z",
             "2026-02-26T14:03:12.1234567890"]
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl",
                [dumps(interaction(i, timestamp=t)) for i, t in enumerate(texts)])
    con, _ = ingest(s, sources=["interactions"])
    wall = datetime(2026, 2, 26, 14, 3, 12, 123456)
    naive = (wall.replace(tzinfo=ZoneInfo("Europe/Madrid")) if zoned else wall.replace(tzinfo=timezone.utc))
    assert rows(con, "select line_number, timestamp, timestamp_text from staging.interactions order by 1") == [
        (1, naive, texts[0]), (2, naive, texts[1]), (3, wall.replace(tzinfo=timezone.utc), texts[2])]
    # ten digits: more than any clock writes
    assert rows(con, "select line_number, reason from ingest.quarantine") == [(4, "bad_timestamp:timestamp")]


def test_skipped_hour_is_quarantined_and_says_why(settings, tmp_path):
    s = _zoned(settings, tmp_path)
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-03-29_5b0c2f7e.jsonl", [
        dumps(interaction(1, timestamp="2026-03-29T01:59:59")),
        dumps(interaction(2, timestamp="2026-03-29T02:30:00")),
        dumps(interaction(3, timestamp="2026-03-29T03:00:01")),
    ])
    con, _ = ingest(s, sources=["interactions"])
    [(line, reason, detail)] = rows(con, "select line_number, reason, detail from ingest.quarantine")
    assert (line, reason) == (2, "bad_timestamp:timestamp")
    assert "does not exist in Europe/Madrid" in detail
    assert rows(con, "select timestamp, timestamp_fold from staging.interactions order by line_number") == [
        (_utc("2026-03-29T00:59:59"), "unambiguous"), (_utc("2026-03-29T01:00:01"), "unambiguous")]


def test_impossible_instants_and_nested_duplicate_keys_are_quarantined(settings):
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl", [
        dumps(interaction(1, timestamp="2026-02-26T14:03:12+25:00")),
        dumps(interaction(2, timestamp="2026-02-26T14:03:12+18:00")),  # the limit is fine
        dumps(interaction(3, timestamp="1999-12-31T23:59:59Z")),
        dumps(interaction(4, timestamp="2026-02-26T14:03:12Z")),
    ])
    signal = {"id": "s1", "timestamp": 1765369657929, "signal": "good", "strength": 1.0, "context": None,
              "session_id": None, "source": "manual", "created_at": "2025-12-10T13:27:37.929481",
              "target_type": "chunk", "target_id": "c1", "aspect": "classification",
              "original_class": None, "suggested_class": None}
    write_lines(settings.raw_dir / "signals" / "feedback_buffer.jsonl", [
        dumps(signal), dumps({**signal, "id": "s2", "timestamp": 1765369657})])  # seconds in an ms field
    outcome = {"id": "o1", "timestamp": "2026-02-26T10:00:00", "outcome": "accepted",
               "strategy": {"arm_id": "arm-a", "weights": {"v": 1}}}
    nested_dup = dumps(outcome).replace('"weights": {"v": 1}', '"weights": {"v": 1, "v": 2}')
    write_lines(settings.raw_dir / "outcomes" / "2026-02-26_outcomes.jsonl", [
        dumps(outcome), nested_dup.replace('"o1"', '"o2"')])
    con, _ = ingest(settings, sources=["interactions", "signals", "outcomes"])
    got = rows(con, "select source, line_number, reason, detail from ingest.quarantine order by source, line_number")
    assert [(s, l, r) for s, l, r, _ in got] == [
        ("interactions", 1, "bad_timestamp:timestamp"), ("interactions", 3, "bad_timestamp:timestamp"),
        ("outcomes", 2, "duplicate_key"), ("signals", 2, "bad_timestamp:timestamp")]
    details = {(s, l): d for s, l, _, d in got}
    assert "beyond ±18:00" in details[("interactions", 1)]
    assert "plausible window [2000-01-01" in details[("interactions", 3)]
    assert "1970-01-21" in details[("signals", 2)]
    assert "'v'" in details[("outcomes", 2)]
    assert rows(con, "select timestamp_fold from staging.interactions order by line_number") == [
        ("offset",), ("utc",)]
    assert rows(con, "select timestamp_fold from staging.signals") == [("epoch",)]



def test_a_key_repeated_in_a_fields_own_object_or_in_a_string_held_document_is_quarantined(settings):
    # ``$..*`` reaches a value's descendants, not the value: {"arm_id": "a", "arm_id": "b"} as
    # the strategy was loaded with arm "a" (Python readers of the row see "b"); the eventlog's
    # data, a JSON document in a string, was not looked into at all
    import sqlite3

    from dagster_project.synth import EVENTLOG_DDL

    outcome = {"id": "o1", "timestamp": "2026-02-26T10:00:00", "outcome": "accepted",
               "strategy": {"arm_id": "arm-a", "use_rag": True}}
    write_lines(settings.raw_dir / "outcomes" / "2026-02-26_outcomes.jsonl", [
        dumps(outcome),
        dumps({**outcome, "id": "o2"}).replace('"use_rag": true', '"use_rag": true, "arm_id": "arm-b"'),
        # the same key at two levels is no repeat
        dumps({**outcome, "id": "o3", "strategy": {"arm_id": "arm-a", "weights": {"arm_id": "arm-b"}}})])
    query = {"query_id": "q1", "query": "x", "mode": "hybrid", "results": [{"doc_id": "a.rs", "score": 0.5,
                                                                           "rank": 1, "event_type": "hit"}]}
    db = settings.raw_dir / "eventlog" / "patina.db"
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.execute(EVENTLOG_DDL)
    conn.executemany("insert into eventlog (event_type, timestamp, source_id, source_file, data) values (?,?,?,?,?)", [
        ("scry.query", "2026-02-26T10:00:00Z", "q1", None, json.dumps(query)),
        ("scry.query", "2026-02-26T10:01:00Z", "q2", None,
         json.dumps({**query, "query_id": "q2"}).replace('"mode": "hybrid"', '"mode": "hybrid", "mode": "graph"')),
        ("scry.query", "2026-02-26T10:02:00Z", "q3", None,
         json.dumps({**query, "query_id": "q3"}).replace('"doc_id": "a.rs"', '"doc_id": "a.rs", "doc_id": "b.rs"'))])
    conn.commit()
    conn.close()
    con, _ = ingest(settings, sources=["outcomes", "eventlog"])
    assert rows(con, "select source, line_number, reason from ingest.quarantine order by source, line_number") == [
        ("eventlog", 2, "duplicate_key"), ("eventlog", 3, "duplicate_key"), ("outcomes", 2, "duplicate_key")]
    assert rows(con, "select id from staging.outcomes order by id") == [("o1",), ("o3",)]
    assert rows(con, "select count(*) from staging.eventlog") == [(1,)]


# --- hypothesis: writers appending across both transitions of several zones ----------------------

ZONES = {  # zone -> (fall-back, spring-forward) instants in 2026 (UTC)
    "Europe/Madrid": (datetime(2026, 10, 25, 1, tzinfo=timezone.utc), datetime(2026, 3, 29, 1, tzinfo=timezone.utc)),
    "America/New_York": (datetime(2026, 11, 1, 6, tzinfo=timezone.utc), datetime(2026, 3, 8, 7, tzinfo=timezone.utc)),
    "Australia/Lord_Howe": (datetime(2026, 4, 4, 15, tzinfo=timezone.utc),  # 30-minute shift
                            datetime(2026, 10, 3, 15, 30, tzinfo=timezone.utc)),
}


@st.composite
def writers(draw):
    zone = draw(st.sampled_from(sorted(ZONES)))
    transition = draw(st.sampled_from(ZONES[zone]))
    # The file begins before the first pass through the repeated hour (a file that begins inside
    # the second pass has no step back to see: the documented limit).
    start = transition - timedelta(minutes=draw(st.integers(61, 180)))
    # One writer, in time order, never silent for a whole shift (else no step back is visible).
    steps = draw(st.lists(st.integers(1, 29 * 60), min_size=2, max_size=14))
    cuts = draw(st.lists(st.integers(1, len(steps)), max_size=3, unique=True))
    return zone, start, steps, sorted(cuts)


@hsettings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=writers())
def test_staged_instants_follow_write_order_across_runs(tmp_path_factory, case):
    from dagster_project.settings import Settings

    zone, start, steps, cuts = case
    tmp = tmp_path_factory.mktemp("dst")
    (tmp / "raw").mkdir()
    base = Settings.from_env({"FLYWHEEL_RAW_DIR": str(tmp / "raw"), "FLYWHEEL_WAREHOUSE": str(tmp / "w.duckdb"),
                              "FLYWHEEL_EXPORT_DIR": str(tmp / "exports")})
    s = _zoned(base, tmp, zone)
    instants, t = [], start
    for step in steps:
        t = t + timedelta(seconds=step)
        instants.append(t)
    lines = [dumps(interaction(i, timestamp=u.astimezone(ZoneInfo(zone)).replace(tzinfo=None).isoformat()))
             for i, u in enumerate(instants)]
    path = s.raw_dir / "interactions" / "interactions_2026-01-01_aaaaaaaa.jsonl"
    con = None
    for n, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(lines)])):
        write_lines(path, lines[a:b], mode="ab")
        if con is not None:
            con.close()
        con, _ = ingest(s, f"run-{n}", sources=["interactions"])
    got = [r[0] for r in rows(con, "select timestamp from raw.interactions order by line_number")]
    con.close()
    assert got == instants


# --- every value as written ---------------------------------------------------------------------

def test_a_negative_latency_is_kept_and_reported_not_quarantined(settings):
    """Collectors measure latency with the wall clock, which steps back (NTP): a negative latency
    quarantined the whole interaction (bad_value:latency_ms), its text and label lost to training."""
    from dagster_project.validation import validate_table

    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl", [
        dumps(interaction(1, latency_ms=-3.5)), dumps(interaction(2))])
    write_lines(settings.raw_dir / "outcomes" / "2026-02-26_outcomes.jsonl", [
        dumps({"id": "o1", "timestamp": "2026-02-26T10:00:00", "outcome": "accepted", "latency_ms": -1})])
    con, _ = ingest(settings, sources=["interactions", "outcomes"])
    assert rows(con, "select latency_ms from staging.interactions order by id") == [(-3.5,), (812.5,)]
    assert rows(con, "select latency_ms from staging.outcomes") == [(-1.0,)]
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    for table, rows_seen in (("staging.interactions", 2), ("staging.outcomes", 1)):
        report = validate_table(con, table, run_id="run-1")
        assert report.success, report.failures  # reported, not blocking
        (failed,) = [r for r in report.results if r.success is False]
        assert (failed.name, failed.check.blocking, failed.unexpected_count, failed.element_count) == (
            "latency_ms ≥ 0", False, 1, rows_seen)
    con.close()


def test_string_fields_are_staged_as_written_not_as_json_text(settings):
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl", [
        dumps(interaction(1, project_context="")), dumps(interaction(2, project_context="patina")),
        dumps(interaction(3, project_context=None)), dumps(interaction(4, project_context={"repo": "x"}))])
    write_lines(settings.raw_dir / "outcomes" / "2026-02-26_outcomes.jsonl", [
        dumps({"id": "o1", "timestamp": "2026-02-26T10:00:00", "outcome": "accepted",
               "competence_level": "Unknown"})])
    con, _ = ingest(settings, sources=["interactions", "outcomes"])
    assert rows(con, "select project_context from staging.interactions order by line_number") == [
        ("",), ("patina",), (None,)]
    assert rows(con, "select reason from ingest.quarantine where source = 'interactions'") == [
        ("bad_type:project_context",)]
    assert rows(con, "select competence_level, typeof(competence_level) from staging.outcomes") == [
        ("Unknown", "VARCHAR")]


# --- no single record stops a publish (end to end, real Dagster run on the sample lake) ---------

TUI_EMPTY_QUERY = '{"timestamp":1795395866,"query":"","response":"It is injectable.","rating":"good","weight":1.0}'


@pytest.mark.slow
def test_an_empty_tui_query_and_a_2031_interaction_do_not_stop_the_run(sample_run_copy):
    import duckdb

    from dagster_project.pipeline import run_pipeline

    lake = sample_run_copy  # the sample lake, run once; the producers then append these lines
    raw = lake.raw_dir
    ratings = raw / "weighted" / "feedback.jsonl"
    ratings_lines = ratings.read_bytes().count(b"\n")
    write_lines(ratings, [TUI_EMPTY_QUERY], mode="ab")
    # a new id dated 2031; an answer, then a re-flush of it and a thumbs stamped 2031 (a clock
    # years ahead): the answer and its label stay until 2031 (they used to vanish)
    future = write_lines(raw / "interactions" / "interactions_2026-02-26_0a0a0a0a.jsonl", [
        dumps(interaction("future-1", timestamp="2031-05-01T10:00:00")),
        dumps(interaction("today-1", timestamp="2026-02-26T10:00:00", user_feedback="positive")),
        dumps(interaction("today-1", timestamp="2031-05-01T10:00:00", output_text="re-flushed"))])
    thumbs = write_lines(raw / "feedback" / "2031-05-01_feedback.jsonl", [dumps(
        {"record_id": "today-1", "feedback": "negative", "was_edited": False, "timestamp": "2031-05-01T10:00:00",
         "source": "manual"})])

    result = run_pipeline(lake)
    assert result.success, result.failures
    con = duckdb.connect(str(lake.warehouse), read_only=True)
    ledger = rows(con, "select table_name, row_key, expectation, path, line_number from ingest.excluded "
                       "where run_id = ? order by table_name, row_key", [result.run_id])
    content_hash = rows(con, "select content_hash from staging.weighted_ratings where query = ''")[0][0]
    assert [(t, k, e) for t, k, e, _, _ in ledger] == [
        ("exports.kto", f"weighted_rating|{content_hash}", "prompt of a TUI rating is not empty"),
        ("exports.weighted", f"weighted_rating|{content_hash}", "prompt of a TUI rating is not empty"),
        ("staging.feedback", "today-1", "timestamp not in the future"),
        ("staging.interactions", "future-1", "timestamp not in the future"),
        ("staging.interactions", "today-1", "timestamp not in the future"),
    ]
    assert ledger[1][3:] == ("weighted/feedback.jsonl", ratings_lines + 1)
    assert ledger[2][3:] == (thumbs.relative_to(raw).as_posix(), 1)
    assert ledger[3][3:] == (future.relative_to(raw).as_posix(), 1)
    assert ledger[4][3:] == (future.relative_to(raw).as_posix(), 3)
    assert rows(con, "select id, output_text from staging.interactions where id in ('future-1', 'today-1')") == [
        ("today-1", interaction("today-1")["output_text"])]
    assert rows(con, "select label, label_source, n_events from marts.interaction_labels "
                     "where interaction_id = 'today-1'") == [("positive", "inline", 1)]
    assert rows(con, "select count(*) from exports.weighted where prompt[-1].content = ''") == [(0,)]
    con.close()
