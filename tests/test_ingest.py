"""The lossless reader: every line classified, at its exact line and byte offset."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time

import pytest

from conftest import SAMPLES, dumps, ingest, interaction, rows, write_lines
from dagster_project.engine import AccountingError, check_accounting
from dagster_project.synth import EVENTLOG_DDL, SESSION_DDL

BAD_CASES = [
    # (line bytes, expected reason)
    (b'{"id": "x", "input_text": "\xff\xfe broken"}', "invalid_utf8"),
    (dumps(interaction(2))[:40].encode(), "invalid_json"),
    (b"null", "not_an_object"),
    (b"[1, 2]", "not_an_object"),
    (b'"just a string"', "not_an_object"),
    (dumps(interaction(3)).replace('"id": ', '"id": "dup", "id": ', 1).encode(), "duplicate_key"),
    (dumps(interaction(4)).replace('"latency_ms": 812.5', '"latency_ms": NaN').encode(), "non_standard_json"),
    (dumps(interaction(5)).replace('"tokens_used": 120', '"tokens_used": Infinity').encode(), "non_standard_json"),
    (dumps(interaction(6))[:-1].encode() + b", }", "invalid_json"),  # trailing comma
    (dumps({k: v for k, v in interaction(7).items() if k != "id"}).encode(), "missing_field:id"),
    (dumps(interaction(8, was_accepted="yes")).encode(), "bad_type:was_accepted"),
    (dumps(interaction(9, tokens_used="12")).encode(), "bad_type:tokens_used"),
    (dumps(interaction(10, tokens_used=1.5)).encode(), "bad_type:tokens_used"),
    (dumps(interaction(11, interaction_type="chitchat")).encode(), "bad_value:interaction_type"),
    (dumps(interaction(12, user_feedback="meh")).encode(), "bad_value:user_feedback"),
    (dumps(interaction(13, timestamp="yesterday")).encode(), "bad_timestamp:timestamp"),
    (dumps(interaction(14, id=None)).encode(), "bad_type:id"),
    (dumps(interaction(16, id="")).encode(), "bad_value:id"),  # every such line collapsed into one
    (dumps(interaction(17, id=" \t")).encode(), "bad_value:id"),  # as blank as an empty one
    (dumps(interaction(15, tokens_used=10**30)).encode(), "bad_value:tokens_used"),
    (b'{"id": "a\\ud800b", "x": 1}', "invalid_json"),  # lone surrogate escape
]


def test_every_bad_line_gets_its_reason_line_and_offset(settings):
    good = [dumps(interaction(100 + i)).encode() for i in range(3)]
    lines = [good[0]] + [b for b, _ in BAD_CASES] + [good[1], good[2]]
    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl", lines)
    data = path.read_bytes()

    con, reports = ingest(settings, sources=["interactions"])

    got = rows(con, "select line_number, byte_offset, reason, detail, raw_text, raw_bytes "
                    "from ingest.quarantine order by line_number")
    assert [(ln, reason) for ln, _, reason, *_ in got] == [(i + 2, r) for i, (_, r) in enumerate(BAD_CASES)]
    for (line_number, offset, reason, detail, raw_text, raw_bytes), (raw, _) in zip(got, BAD_CASES):
        assert data[offset:offset + len(raw)] == raw, f"line {line_number}: offset must point at the line"
        assert detail, f"{reason} needs a human-readable detail"
        if reason == "invalid_utf8":
            assert raw_bytes == raw  # exact bytes kept
        else:
            assert raw_text.encode() == raw
    assert rows(con, "select count(*) from staging.interactions") == [(3,)]
    f = reports["interactions"].files[0]
    assert (f.lines, f.loaded, f.quarantined, f.blank) == (len(lines), 3, len(BAD_CASES), 0)


def test_detail_messages_name_the_problem(settings):
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_aaaaaaaa.jsonl", [
        dumps(interaction(1, was_accepted="yes")),
        dumps(interaction(2, interaction_type="chitchat")),
        dumps({k: v for k, v in interaction(3).items() if k != "session_id"}),
    ])
    con, _ = ingest(settings, sources=["interactions"])
    details = [d for (d,) in rows(con, "select detail from ingest.quarantine order by line_number")]
    assert details[0] == 'expected a boolean, got a string "yes"'
    assert details[1].startswith('value "chitchat" is not one of prompt_response|')
    assert details[2] == 'required key "session_id" is absent'


def test_bom_crlf_blank_lines_and_extra_keys_are_not_errors(settings):
    lines = [b"\xef\xbb\xbf" + dumps(interaction(1)).encode() + b"\r",
             b"", b"   \t", dumps(interaction(2, surprise={"k": [1, 2]})).encode() + b"\r"]
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_bbbbbbbb.jsonl", lines)
    con, reports = ingest(settings, sources=["interactions"])
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    f = reports["interactions"].files[0]
    assert (f.lines, f.loaded, f.blank) == (4, 2, 2)
    assert rows(con, "select id, extra::varchar, line_number, byte_offset from staging.interactions order by id") == [
        (interaction(1)["id"], None, 1, 0),
        (interaction(2)["id"], '{"surprise":{"k":[1,2]}}', 4, len(lines[0]) + 1 + 1 + len(lines[2]) + 1),
    ]


def test_values_are_typed_and_text_is_kept_byte_for_byte(settings):
    text = "naïve ✓ \"quoted\"\nsecond line\ttab 🚀"
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_cccccccc.jsonl", [
        dumps(interaction(1, input_text=text, latency_ms=0, timestamp="2026-02-26T14:03:12")),
    ])
    con, _ = ingest(settings, sources=["interactions"])
    (got,) = rows(con, "select input_text, latency_ms, tokens_used, was_accepted, timestamp_text, "
                       "timestamp::varchar from staging.interactions")
    assert got == (text, 0.0, 120, True, "2026-02-26T14:03:12", "2026-02-26 14:03:12+00")


def test_naive_timestamps_read_in_the_configured_time_zone(settings, tmp_path):
    from dataclasses import replace

    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  interactions:\n    time_zone: Europe/Oslo\n")
    settings = replace(settings, sources_file=sources)
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-07-01_dddddddd.jsonl",
                [dumps(interaction(1, timestamp="2026-07-01T12:00:00"))])
    write_lines(settings.raw_dir / "signals" / "feedback_buffer.jsonl",
                [(SAMPLES / "energyflow-cosmology" / "feedback_buffer.jsonl").read_bytes().splitlines()[0]])
    con, _ = ingest(settings, sources=["interactions", "signals"])
    assert rows(con, "select timestamp::varchar from staging.interactions") == [("2026-07-01 10:00:00+00",)]
    # signals' created_at is written in UTC whatever the source's zone
    assert rows(con, "select created_at::varchar, timestamp::varchar from staging.signals") == [
        ("2025-12-10 13:27:37.929481+00", "2025-12-10 12:27:37.929+00")]


def test_a_time_zone_set_later_reads_every_row_again_in_it(settings, tmp_path):
    """A time zone set in the sources file after rows were read applied only to new lines: one
    snapshot held the same local time as two instants, until a --full-refresh. A source declared
    otherwise than raw was read with is replayed from bronze."""
    from dataclasses import replace

    logs = settings.raw_dir / "interactions"
    write_lines(logs / "interactions_2026-07-01_dddddddd.jsonl", [dumps(interaction(1, timestamp="2026-07-01T12:00:00"))])
    con, _ = ingest(settings, sources=["interactions"])
    assert rows(con, "select timestamp::varchar from staging.interactions") == [("2026-07-01 12:00:00+00",)]
    con.close()
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  interactions:\n    time_zone: Europe/Oslo\n")
    write_lines(logs / "interactions_2026-07-01_dddddddd.jsonl", [dumps(interaction(2, timestamp="2026-07-01T12:00:00"))],
                mode="ab")
    con, _ = ingest(replace(settings, sources_file=sources), "run-2", sources=["interactions"])
    assert rows(con, "select id, timestamp::varchar from staging.interactions order by id") == [
        (interaction(1)["id"], "2026-07-01 10:00:00+00"), (interaction(2)["id"], "2026-07-01 10:00:00+00")]
    assert rows(con, "select lines_read, rows_loaded from ingest.files") == [(2, 2)]
    con.close()
    con, reports = ingest(replace(settings, sources_file=sources), "run-3", sources=["interactions"])
    assert reports["interactions"].replayed_entries == 0  # declared as read: not replayed again


def test_partial_last_line_is_deferred_then_loaded_when_completed(settings):
    path = settings.raw_dir / "feedback" / "2026-02-26_feedback.jsonl"
    first = dumps({"record_id": "r1", "feedback": "positive", "was_edited": False,
                   "timestamp": "2026-02-26T10:00:00", "source": "manual"})
    second = dumps({"record_id": "r2", "feedback": "negative", "was_edited": True,
                    "timestamp": "2026-02-26T10:00:01", "source": "manual"})
    path.parent.mkdir(parents=True)
    path.write_text(first + "\n" + second[:25])

    con, reports = ingest(settings, "run-1", sources=["feedback"])
    f = reports["feedback"].files[0]
    assert (f.lines, f.loaded, f.deferred_bytes) == (1, 1, 25)
    assert rows(con, "select deferred_bytes, offset_bytes from ingest.files") == [(25, len(first) + 1)]

    with path.open("a") as fh:  # the writer finishes its line
        fh.write(second[25:] + "\n")
    con, reports = ingest(settings, "run-2", sources=["feedback"], con=con)
    f = reports["feedback"].files[0]
    assert (f.event, f.lines, f.loaded, f.deferred_bytes) == ("appended", 1, 1, 0)
    assert rows(con, "select record_id, line_number, byte_offset from staging.feedback order by 1") == [
        ("r1", 1, 0), ("r2", 2, len(first) + 1)]
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]


def test_partial_last_line_is_sealed_after_the_quiet_period(settings):
    path = settings.raw_dir / "feedback" / "2026-02-26_feedback.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"record_id": "r1", "feedb')
    old = time.time() - 2 * settings.seal_after_seconds
    os.utime(path, (old, old))
    con, reports = ingest(settings, sources=["feedback"])
    assert rows(con, "select line_number, byte_offset, reason, raw_text from ingest.quarantine") == [
        (1, 0, "unterminated_last_line", '{"record_id": "r1", "feedb')]
    assert rows(con, "select lines_read, rows_quarantined, deferred_bytes from ingest.files") == [(1, 1, 0)]
    con, _ = ingest(settings, "run-2", sources=["feedback"], con=con)  # nothing new: nothing changes
    assert rows(con, "select count(*) from ingest.quarantine") == [(1,)]


def test_rerun_without_new_input_changes_nothing(settings):
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_eeeeeeee.jsonl",
                [dumps(interaction(i)) for i in range(5)] + [b"null"])
    con, _ = ingest(settings, "run-1")
    before = {t: rows(con, f"select * from {t} order by all") for t in
              ("raw.interactions", "staging.interactions", "ingest.quarantine", "ingest.files")}
    con, reports = ingest(settings, "run-2", con=con)
    assert all(f.event == "unchanged" for r in reports.values() for f in r.files)
    for table, content in before.items():
        assert rows(con, f"select * from {table} order by all") == content, table


def test_rewritten_and_shrunk_files_become_generations_and_keep_earlier_rows(settings):
    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_ffffffff.jsonl",
                       [dumps(interaction(i)) for i in range(4)] + [b"null"])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    # Rewrite: same size, one byte of the consumed prefix changed -> generation 2, read whole.
    data = bytearray(path.read_bytes())
    data[data.index(b"How")] = ord("W")
    path.write_bytes(bytes(data))
    con, reports = ingest(settings, "run-2", sources=["interactions"], con=con)
    assert reports["interactions"].files[0].event == "rewritten"
    assert rows(con, "select lines_read, rows_loaded, rows_quarantined, generation from ingest.files") == [(10, 8, 2, 2)]
    assert rows(con, "select count(*), count(distinct observed_seq) from raw.interactions") == [(8, 2)]
    # the edited record is a new version of interaction 0 and wins (observed later, same offset)
    assert rows(con, "select input_text from staging.interactions where id = ?", [interaction(0)["id"]]) == [
        ("Wow do I read a file?",)]
    # Shrink: first three lines removed -> generation 3; rows only the removed lines held stay.
    write_lines(path, [dumps(interaction(i)) for i in range(3, 4)])
    con, reports = ingest(settings, "run-3", sources=["interactions"], con=con)
    assert reports["interactions"].files[0].event == "shrunk"
    assert rows(con, "select lines_read, rows_loaded, rows_quarantined, generation from ingest.files") == [(11, 9, 2, 3)]
    assert rows(con, "select count(*) from staging.interactions") == [(4,)]
    events = [e for (e,) in rows(con, "select event from ingest.file_events order by occurred_at")]
    assert events == ["rewritten", "shrunk"]
    check_accounting(con)


def test_legacy_logger_files_stay_out_of_interactions(settings):
    write_lines(settings.raw_dir / "interactions" / "2026-02-26_interactions.jsonl", [
        dumps({"timestamp": "2026-02-26T09:00:00", "type": "interaction", "user_input": "hi",
               "assistant_output": "hello", "tags": ["x"]}),
        dumps({"timestamp": "2026-02-26T09:00:01", "type": "pipeline_event", "project": "p"}),
    ])
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_12345678.jsonl",
                [dumps(interaction(1))])
    con, _ = ingest(settings, sources=["interactions", "legacy_log"])
    assert rows(con, "select count(*) from staging.interactions") == [(1,)]
    assert rows(con, "select type, user_input from staging.legacy_log order by timestamp") == [
        ("interaction", "hi"), ("pipeline_event", None)]
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]


def test_last_wins_ties_are_broken_by_path_then_offset(settings):
    same_time = "2026-02-26T10:00:00"
    a = settings.raw_dir / "feedback" / "2026-02-26_feedback.jsonl"
    b = settings.raw_dir / "feedback" / "2026-02-27_feedback.jsonl"
    write_lines(b, [dumps({"record_id": "r", "feedback": "positive", "timestamp": same_time, "source": "manual"})])
    write_lines(a, [dumps({"record_id": "r", "feedback": "negative", "timestamp": same_time, "source": "manual"}),
                    dumps({"record_id": "r", "feedback": "neutral", "timestamp": same_time, "source": "manual"})])
    con, _ = ingest(settings, sources=["feedback"])
    # equal event time: the greater path wins (2026-02-27 > 2026-02-26) ...
    assert rows(con, "select feedback, path from staging.feedback") == [("positive", "feedback/2026-02-27_feedback.jsonl")]
    # ... and within one file the later line (a fresh lake: a deleted file's rows would stay)
    b.unlink()
    from dataclasses import replace
    fresh = replace(settings, warehouse=settings.warehouse.parent / "other" / "warehouse.duckdb")
    con, _ = ingest(fresh, "run-2", sources=["feedback"])
    assert rows(con, "select feedback, line_number from staging.feedback") == [("neutral", 2)]


def test_weighted_queue_and_archive_are_one_history_and_arrays_are_read(settings):
    line = '{"query":"q1","response":"r1","weight":10.0,"feedback":"never unwrap"}'
    write_lines(settings.raw_dir / "weighted" / "training_queue.jsonl",
                [line, '{"query":"q2","response":"r2","weight":1.0,"feedback":null}'])
    write_lines(settings.raw_dir / "weighted" / "training_queue_archive_20260201_101500.jsonl", [line])
    (settings.raw_dir / "weighted" / "training_queue_old.jsonl").write_text(json.dumps([
        {"query": "q3", "response": "r3", "feedback": None, "weight": 3.0,
         "timestamp": "2026-01-05T10:00:00Z", "tags": ["improvement"]},
        {"query": "q4", "response": "r4", "feedback": None, "weight": 0, "timestamp": "2026-01-05T10:00:00Z", "tags": []},
    ], indent=2))
    write_lines(settings.raw_dir / "weighted" / "feedback.jsonl", [
        '{"timestamp": 1767225600, "query": "q5", "response": "r5", "rating": "good", "weight": 1.0}'])
    con, _ = ingest(settings, sources=["weighted_queue", "weighted_ratings"])
    assert rows(con, "select query, weight from staging.weighted_queue order by query") == [
        ("q1", 10.0), ("q2", 1.0), ("q3", 3.0)]
    assert rows(con, "select path, line_number, reason from ingest.quarantine") == [
        ("weighted/training_queue_old.jsonl", 2, "bad_value:weight")]
    assert rows(con, "select timestamp::varchar, note from staging.weighted_ratings") == [("2026-01-01 00:00:00+00", None)]
    from transforms.sqlfiles import materialize
    materialize(con, "staging/weighted_examples")
    assert rows(con, "select origin, query, label from staging.weighted_examples order by query") == [
        ("queue", "q1", False), ("queue", "q2", True), ("queue", "q3", False), ("rating", "q5", True)]


def test_a_cut_json_array_is_waited_for_then_quarantined_whole_once_sealed(settings):
    """An array whose text ends inside it (its writer still writing) is deferred, as a partial
    last line is; unchanged for FLYWHEEL_SEAL_AFTER, it is one ``corrupt_file`` line."""
    (settings.raw_dir / "weighted").mkdir(parents=True)
    (settings.raw_dir / "weighted" / "training_queue_old.jsonl").write_text('[{"query": "q", "respo')
    con, _ = ingest(settings, sources=["weighted_queue"])
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    assert rows(con, "select lines_read, deferred_bytes from ingest.files") == [(0, 22)]
    con, _ = ingest(settings, "run-2", sources=["weighted_queue"], con=con, now=time.time() + 3600)
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    con, _ = ingest(settings, "run-3", sources=["weighted_queue"], con=con, now=time.time() + 25 * 3600)
    assert rows(con, "select reason, raw_length, run_id from ingest.quarantine") == [("corrupt_file", 22, "run-3")]
    assert rows(con, "select lines_read, rows_quarantined, deferred_bytes from ingest.files") == [(1, 1, 0)]
    check_accounting(con)


def test_an_array_cut_short_on_every_run_is_quarantined_once_sealed_though_rewritten(settings):
    """A finished file can look cut (a stray quote): rewritten on every run, each text reset the
    wait, and its generations were neither loaded nor quarantined for as long as it was."""
    path = settings.raw_dir / "weighted" / "training_queue_old.jsonl"
    path.parent.mkdir(parents=True)
    start = time.time()
    con = None
    for hours in (0, 12, 23, 25):
        path.write_text('[{"query": "q%d", "note": "a stray quote: " "}]' % hours)
        os.utime(path, (start + hours * 3600, start + hours * 3600))  # rewritten at that hour
        con, _ = ingest(settings, f"run-{hours}", sources=["weighted_queue"], con=con, now=start + hours * 3600)
        quarantined = rows(con, "select count(*) from ingest.quarantine")[0][0]
        assert quarantined == (1 if hours == 25 else 0), hours
    assert rows(con, "select event from ingest.file_events order by occurred_at") == [
        ("waiting",), ("waiting",), ("waiting",), ("sealed",)]
    check_accounting(con)


def test_an_array_caught_mid_write_on_two_runs_a_day_apart_is_not_sealed(settings):
    """A nightly rewrite caught cut on two runs: the wait restarts with the new bytes, as a
    partial line's does, so the second cut is not quarantined (it would stay in the quarantine
    after the finished array loads)."""
    path = settings.raw_dir / "weighted" / "training_queue_old.jsonl"
    path.parent.mkdir(parents=True)
    whole = json.dumps([{"query": f"q{i}", "response": "r", "feedback": None, "weight": 1.0,
                         "timestamp": "2026-01-05T10:00:00Z"} for i in range(5)])
    start = time.time()
    con = None
    for hours, text in ((0, whole[:50]), (24, whole[:70]), (48, whole)):
        path.write_text(text)
        os.utime(path, (start + hours * 3600, start + hours * 3600))
        con, _ = ingest(settings, f"run-{hours}", sources=["weighted_queue"], con=con, now=start + hours * 3600 + 60)
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    assert rows(con, "select count(*) from raw.weighted_queue") == [(5,)]
    check_accounting(con)


def test_a_cut_array_back_as_it_was_or_back_from_gone_is_not_read_again(settings):
    path = settings.raw_dir / "weighted" / "training_queue_old.jsonl"
    path.parent.mkdir(parents=True)
    whole = json.dumps([{"query": "q0", "response": "r", "feedback": None, "weight": 1.0,
                         "timestamp": "2026-01-05T10:00:00Z"}])
    path.write_text(whole)
    con, _ = ingest(settings, sources=["weighted_queue"])
    path.write_text(whole[:30])
    con, _ = ingest(settings, "run-2", sources=["weighted_queue"], con=con)
    path.unlink()
    con, _ = ingest(settings, "run-3", sources=["weighted_queue"], con=con)
    assert rows(con, "select status from ingest.files") == [("missing",)]
    path.write_text(whole[:30])  # back with the same cut bytes: still waited for
    con, _ = ingest(settings, "run-4", sources=["weighted_queue"], con=con)
    assert rows(con, "select status, deferred_bytes, generation from ingest.files") == [("ok", 30, 1)]
    path.write_text(whole)  # the writer put back what the lake holds: nothing to read
    con, _ = ingest(settings, "run-5", sources=["weighted_queue"], con=con)
    assert rows(con, "select status, deferred_bytes, generation from ingest.files") == [("ok", 0, 1)]
    assert rows(con, "select run_id, event from ingest.file_events order by occurred_at") == [
        ("run-2", "waiting"), ("run-3", "missing"), ("run-4", "reappeared"), ("run-4", "waiting")]
    assert rows(con, "select count(*) from raw.weighted_queue") == [(1,)]
    check_accounting(con)


@pytest.mark.parametrize("cut", ["[", '[{"query": "q1"', '[{"query": "q1", "weight": 3.0}',
                                 '[{"query": "q1", "weight": 3.0},\n', '[{"query": "q1", "weight": 3.0}, {"que',
                                 '[{"query": "q1", "weight": 3.0}, tr'])
def test_a_json_array_caught_mid_write_loads_whole_when_finished(settings, cut):
    """``json.dump`` to the path truncates the file, then writes it in blocks: a run between two
    blocks read a cut array, quarantined it as ``corrupt_file`` for good, and the quarantine
    kept it after the next run read the finished array. Now the earlier generation stays, the
    cut one is waited for, and the finished one loads with nothing quarantined."""
    folder = settings.raw_dir / "weighted"
    folder.mkdir(parents=True)
    path = folder / "training_queue_old.jsonl"
    first = [{"query": "q0", "response": "r", "feedback": None, "weight": 1.0, "timestamp": "2026-01-05T10:00:00Z"}]
    path.write_text(json.dumps(first))
    con, _ = ingest(settings, sources=["weighted_queue"])
    path.write_text(cut)
    con, _ = ingest(settings, "run-2", sources=["weighted_queue"], con=con)
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    assert rows(con, "select query from staging.weighted_queue") == [("q0",)]
    assert rows(con, "select deferred_bytes, generation from ingest.files") == [(len(cut.encode()), 1)]
    whole = first + [{**first[0], "query": "q1", "weight": 3.0}]
    path.write_text(json.dumps(whole))
    con, reports = ingest(settings, "run-3", sources=["weighted_queue"], con=con)
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    assert rows(con, "select query, weight from staging.weighted_queue order by query") == [("q0", 1.0), ("q1", 3.0)]
    assert rows(con, "select deferred_bytes, generation from ingest.files") == [(0, 2)]
    check_accounting(con)


def test_a_line_file_whose_first_line_is_an_array_is_read_as_lines(settings):
    """Its first byte made it the older array format: "content after the closing ']'", the file
    was ``corrupt_file`` and its good lines never loaded, then or after any append."""
    folder = settings.raw_dir / "weighted"
    folder.mkdir(parents=True)
    good = {"query": "q1", "response": "r1", "feedback": None, "weight": 3.0, "timestamp": "2026-01-05T10:00:00Z"}
    (folder / "training_queue_stray.jsonl").write_text(
        '["stray"]\n' + json.dumps(good) + "\n" + json.dumps({**good, "query": "q2"}) + "\n")
    # still arrays: one line, and an array whose first line does not close it
    (folder / "training_queue_one.jsonl").write_text("[" + json.dumps({**good, "query": "q3"}) + "]\n")
    (folder / "training_queue_many.jsonl").write_text(
        "[" + json.dumps({**good, "query": "q4"}) + ",\n" + json.dumps({**good, "query": "q5"}) + "\n]\n")
    con, _ = ingest(settings, sources=["weighted_queue"])
    assert rows(con, "select path, line_number, reason from ingest.quarantine") == [
        ("weighted/training_queue_stray.jsonl", 1, "not_an_object")]
    assert rows(con, "select query, path from raw.weighted_queue order by query") == [
        ("q1", "weighted/training_queue_stray.jsonl"), ("q2", "weighted/training_queue_stray.jsonl"),
        ("q3", "weighted/training_queue_one.jsonl"), ("q4", "weighted/training_queue_many.jsonl"),
        ("q5", "weighted/training_queue_many.jsonl")]
    assert rows(con, "select path, format from ingest.files order by path") == [
        ("weighted/training_queue_many.jsonl", "json_array"), ("weighted/training_queue_one.jsonl", "json_array"),
        ("weighted/training_queue_stray.jsonl", "jsonl")]
    check_accounting(con)

def test_each_array_element_is_found_at_its_byte_offset():
    """An element's offset is counted in bytes (a BOM, multi-byte characters and any white space
    before it), advanced element by element (measuring the whole prefix each time made a large
    array quadratic: 8,000 elements took 5.1 s)."""
    from dagster_project.engine.readers.json_array import elements

    items = [{"query": f"q{i} \u00e9\u2028", "weight": i} for i in range(50)]
    data = ("\ufeff [" + ",\n\t ".join(json.dumps(x, ensure_ascii=False) for x in items) + " ]\n").encode()
    found = list(elements(data))
    assert [n for n, _, _ in found] == list(range(1, 51))
    assert [json.loads(text) for _, _, text in found] == items
    assert all(data[offset:offset + len(text.encode())] == text.encode() for _, offset, text in found)


def test_an_array_element_too_deep_or_too_long_for_python_is_read(settings):
    """Elements are delimited with Python's JSON decoder: an element nested deeper than its
    recursion limit raised RecursionError and the source's ingest failed on every run (later the
    file was quarantined whole), and one holding an integer of more than 4,300 digits cost the
    whole file. Both are valid JSON: the deep one is delimited by its brackets, and both load."""
    from dagster_project.engine import check_accounting

    folder = settings.raw_dir / "weighted"
    folder.mkdir(parents=True)
    good = {"query": "q1", "response": "r1", "feedback": None, "weight": 3.0, "timestamp": "2026-01-05T10:00:00Z"}
    deep = json.dumps({**good, "query": "q0"})[:-1] + ', "tags": ' + "[" * 3000 + "]" * 3000 + "}"
    (folder / "training_queue_old.jsonl").write_text("[" + json.dumps(good) + ", " + deep + "]")
    huge = json.dumps({**good, "query": "q2"})[:-1] + ', "n": ' + "9" * 5000 + "}"
    (folder / "training_queue_older.jsonl").write_text("[" + json.dumps({**good, "query": "q3"}) + ", " + huge + "]")
    con, _ = ingest(settings, sources=["weighted_queue"])
    assert rows(con, "select path, reason from ingest.quarantine") == []
    assert rows(con, "select query, line_number from raw.weighted_queue order by query") == [
        ("q0", 2), ("q1", 1), ("q2", 2), ("q3", 1)]
    check_accounting(con)


def test_an_unreadable_array_element_is_quarantined_alone(settings):
    """One element that is not JSON (a hand edit: single quotes, a trailing comma inside it, a
    leading zero) cost the whole file (``corrupt_file``). Its quotes (single ones too) and
    brackets still close, so it is one element: quarantined with its number and offset, and the
    elements around it load; a record written inside a single-quoted string stays that string's
    text. Brackets that do not close still make the file unreadable."""
    from dagster_project.engine import check_accounting

    folder = settings.raw_dir / "weighted"
    folder.mkdir(parents=True)
    good = {"query": "q1", "response": "r1", "feedback": None, "weight": 3.0, "timestamp": "2026-01-05T10:00:00Z"}
    hidden = json.dumps({**good, "query": "hidden"})
    text = ("[" + json.dumps(good) + ", {'query': 'q2', 'weight': 1}, " + json.dumps({**good, "query": "q3,]"})[:-1]
            + ",}, 'a note, " + hidden + ", end', 01, " + json.dumps({**good, "query": "q4"}) + "]")
    (folder / "training_queue_old.jsonl").write_text(text)
    (folder / "training_queue_older.jsonl").write_text("[" + json.dumps(good) + ", {\"query\": [}]")
    con, _ = ingest(settings, sources=["weighted_queue"])
    at = [text.index(s) for s in ("{'query'", '{"query": "q3', "'a note")] + [text.index(", 01,") + 2]
    assert rows(con, "select path, line_number, byte_offset, reason from ingest.quarantine order by path, line_number") == [
        ("weighted/training_queue_old.jsonl", 2, at[0], "invalid_json"),
        ("weighted/training_queue_old.jsonl", 3, at[1], "invalid_json"),
        ("weighted/training_queue_old.jsonl", 4, at[2], "invalid_json"),  # the record inside the quotes stays text
        ("weighted/training_queue_old.jsonl", 5, at[3], "invalid_json"),
        ("weighted/training_queue_older.jsonl", 1, 0, "corrupt_file")]
    assert rows(con, "select query, line_number from raw.weighted_queue order by query") == [("q1", 1), ("q4", 6)]
    check_accounting(con)


def test_an_array_element_that_is_not_utf8_is_quarantined_alone_with_its_bytes(settings):
    """The array was decoded whole first: one element holding a byte that is not UTF-8 made the
    file ``corrupt_file`` and the valid elements around it were never loaded."""
    folder = settings.raw_dir / "weighted"
    folder.mkdir(parents=True)
    good = {"query": "q1", "response": "r1", "feedback": None, "weight": 3.0, "timestamp": "2026-01-05T10:00:00Z"}
    bad = json.dumps({**good, "query": "q2-#"}).encode().replace(b"#", b"\xff\xfe")
    data = (b"\xef\xbb\xbf[" + json.dumps(good).encode() + b",\n" + bad + b",\n"
            + json.dumps({**good, "query": "q3 \u00e9"}, ensure_ascii=False).encode() + b"]")
    (folder / "training_queue_old.jsonl").write_bytes(data)
    con, _ = ingest(settings, sources=["weighted_queue"])
    got = rows(con, "select line_number, byte_offset, reason, detail, raw_bytes from ingest.quarantine")
    at = bad.index(b"\xff")
    assert got == [(2, data.index(bad), "invalid_utf8", f"invalid UTF-8 at byte {at} of the element: invalid start byte",
                    bad)]
    assert rows(con, "select query, line_number from raw.weighted_queue order by query") == [
        ("q1", 1), ("q3 \u00e9", 3)]
    check_accounting(con)

def test_line_over_the_size_limit_keeps_a_pointer_and_hash(settings):
    from dataclasses import replace

    settings = replace(settings, max_line_bytes=1000)
    big = dumps(interaction(1, output_text="x" * 5000)).encode()
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_99999999.jsonl",
                [dumps(interaction(2)), big])
    con, _ = ingest(settings, sources=["interactions"])
    got = rows(con, "select line_number, reason, raw_text, raw_sha256, raw_length from ingest.quarantine")
    assert got == [(2, "line_too_large", None, hashlib.sha256(big).hexdigest(), len(big))]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_a_line_one_byte_over_the_limit_is_too_large_and_one_at_it_is_read(settings, newline):
    """A line of limit + 1 bytes ended by a bare "\n" was loaded: the first pass, sized for CRLF,
    let it through."""
    from dataclasses import replace

    settings = replace(settings, max_line_bytes=1000)

    def sized(i: int, size: int) -> bytes:
        line = dumps(interaction(i, output_text="")).encode()
        return dumps(interaction(i, output_text="x" * (size - len(line)))).encode()

    at, over = sized(1, 1000), sized(2, 1001)
    assert (len(at), len(over)) == (1000, 1001)
    path = settings.raw_dir / "interactions" / "interactions_2026-02-26_99999999.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(at + newline + over + newline)
    con, _ = ingest(settings, sources=["interactions"])
    assert rows(con, "select line_number from raw.interactions") == [(1,)]
    assert rows(con, "select line_number, reason, raw_sha256, raw_length from ingest.quarantine") == [
        (2, "line_too_large", hashlib.sha256(over).hexdigest(), 1001)]


def test_a_sealed_last_line_over_the_limit_keeps_a_pointer_and_hash_not_its_text(settings):
    """A partial last line is quarantined whole when sealed: one over the size limit (a binary
    tail) was stored as text in the quarantine, where a terminated one keeps its place and hash."""
    from dataclasses import replace

    settings = replace(settings, max_line_bytes=1000)
    path = settings.raw_dir / "feedback" / "2026-02-26_feedback.jsonl"
    path.parent.mkdir(parents=True)
    first = b'{"record_id": "r1", "feedback": "positive", "timestamp": "2026-02-26T10:00:00"}\n'
    tail = b'{"record_id": "r2", "note": "' + b"y" * 3000
    path.write_bytes(first + tail)
    old = time.time() - 2 * settings.seal_after_seconds
    os.utime(path, (old, old))
    con, _ = ingest(settings, sources=["feedback"])
    assert rows(con, "select line_number, byte_offset, reason, raw_text, raw_bytes, raw_sha256, raw_length "
                     "from ingest.quarantine") == [
        (2, len(first), "line_too_large", None, None, hashlib.sha256(tail).hexdigest(), len(tail))]
    assert rows(con, "select lines_read, rows_quarantined, deferred_bytes from ingest.files") == [(2, 1, 0)]


def _session_db(path, rows_):
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(SESSION_DDL.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
    for rid, label, value in rows_:
        conn.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, "
                     "recorded_date, label, turn_count_at_end, source, value) values (?,?,?,?,?,?,?,?,?)",
                     (rid, "ab" * 32, None, "2026-02-26T10:00:00Z", "2026-02-26", label, 3, "cli_end", value))
    conn.commit()
    return conn


def _rating(rid, label="positive", at="2026-02-26T10:00:00Z", **extra):
    return json.dumps({"id": rid, "session_id_opaque": "ab" * 32, "user_id_or_null": None, "recorded_at": at,
                       "recorded_date": at[:10], "label": label, "turn_count_at_end": 3, "source": "cli_end",
                       "schema_version": 1, **extra})


def test_sqlite_rows_are_incremental_and_bad_values_quarantined(settings):
    db = settings.raw_dir / "sessions" / "session_feedback.sqlite3"
    db.parent.mkdir(parents=True)
    conn = _session_db(db, [("r1", "positive", _rating("r1")), ("r2", "skip", "{not json"),
                            ("r1", "negative", _rating("r1", "negative", "2026-02-26T10:05:00Z", modality="voice"))])
    con, reports = ingest(settings, sources=["session_ratings"])
    assert rows(con, "select line_number, byte_offset, reason from ingest.quarantine") == [(2, None, "invalid_json")]
    assert rows(con, "select id, label, modality, line_number from staging.session_ratings") == [("r1", "negative", "voice", 3)]
    conn.execute("insert into session_feedback (id, session_id_opaque, recorded_at, recorded_date, label, "
                 "turn_count_at_end, source, value) values ('r3', 'x', 'x', 'x', 'skip', 1, 'api_end', ?)",
                 [_rating("r3", "skip")])
    conn.commit()
    con, reports = ingest(settings, "run-2", sources=["session_ratings"], con=con)
    f = reports["session_ratings"].files[0]
    assert (f.event, f.lines, f.loaded) == ("appended", 1, 1)
    assert rows(con, "select lines_read, rows_loaded, rows_quarantined, high_water_mark from ingest.files") == [(4, 3, 1, 4)]
    conn.close()


def test_recorded_date_is_a_strict_calendar_date(settings):
    """``recorded_date`` is staged as DATE; any other shape is quarantined, never coerced."""
    import datetime

    bad = {"2026-2-3": "bad_value", "2026-02-30": "bad_value", "0000-01-01": "bad_value",
           "2026-02-26T00:00:00": "bad_value", " 2026-02-26": "bad_value", "": "bad_value",
           20260226: "bad_type", None: "bad_type"}
    db = settings.raw_dir / "sessions" / "session_feedback.sqlite3"
    db.parent.mkdir(parents=True)
    _session_db(db, [("ok", "positive", _rating("ok")),
                     ("leap", "positive", _rating("leap", at="2024-02-29T10:00:00Z")),
                     ("absent", "positive", json.dumps({k: v for k, v in json.loads(_rating("absent")).items()
                                                        if k != "recorded_date"}))]
                + [(f"b{i}", "skip", json.dumps({**json.loads(_rating(f"b{i}")), "recorded_date": v}))
                   for i, v in enumerate(bad)]).close()
    con, _ = ingest(settings, sources=["session_ratings"])
    assert rows(con, "select typeof(recorded_date) from staging.session_ratings limit 1") == [("DATE",)]
    assert rows(con, "select id, recorded_date from staging.session_ratings order by id") == [
        ("absent", None), ("leap", datetime.date(2024, 2, 29)), ("ok", datetime.date(2026, 2, 26))]
    got = rows(con, "select line_number, reason, detail from ingest.quarantine order by line_number")
    assert [(n, r) for n, r, _ in got] == [(i + 4, f"{kind}:recorded_date") for i, kind in enumerate(bad.values())]
    assert got[0][2] == 'string "2026-2-3" is not a calendar date YYYY-MM-DD'
    assert got[6][2] == "expected a date string YYYY-MM-DD, got a number 20260226"
    check_accounting(con)


def test_sqlite_snapshot_is_consistent_while_another_process_writes(settings):
    """A writer process commits batches of 10 rows during ingestion: the reader sees whole batches."""
    import subprocess
    import sys

    db = settings.raw_dir / "sessions" / "live.sqlite3"
    db.parent.mkdir(parents=True)
    _session_db(db, [("seed", "positive", _rating("seed"))]).close()
    writer = subprocess.Popen([sys.executable, "-c", f"""
import sqlite3, json, time
conn = sqlite3.connect({str(db)!r}, timeout=30)
for batch in range(60):
    with conn:
        for i in range(10):
            rid = f"b{{batch}}-{{i}}"
            conn.execute("insert into session_feedback (id, session_id_opaque, recorded_at, recorded_date, "
                         "label, turn_count_at_end, source, value) values (?, 'x', 'x', 'x', 'skip', 1, 'api_end', ?)",
                         (rid, json.dumps({{"id": rid, "session_id_opaque": "x", "recorded_at": "2026-02-26T10:00:00Z",
                                           "recorded_date": "2026-02-26", "label": "skip", "turn_count_at_end": 1,
                                           "source": "api_end", "schema_version": 1}})))
    time.sleep(0.005)
"""])
    con = None
    try:
        for run in range(15):
            con, _ = ingest(settings, f"run-{run}", sources=["session_ratings"], con=con)
            (loaded,) = rows(con, "select count(*) from raw.session_ratings")[0]
            assert (loaded - 1) % 10 == 0, f"torn read: {loaded - 1} rows is not whole batches"
    finally:
        writer.wait(timeout=60)
    con, _ = ingest(settings, "final", sources=["session_ratings"], con=con)
    assert rows(con, "select count(*) from raw.session_ratings") == [(601,)]
    check_accounting(con)


def test_corrupt_sqlite_file_is_quarantined_not_fatal(settings):
    path = settings.raw_dir / "sessions" / "broken.sqlite3"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a database" * 100)
    con, _ = ingest(settings, sources=["session_ratings"])
    assert rows(con, "select reason from ingest.quarantine") == [("corrupt_file",)]
    check_accounting(con)


def test_real_signal_buffer_reads_without_quarantine(settings):
    sample = SAMPLES / "energyflow-cosmology" / "feedback_buffer.jsonl"
    (settings.raw_dir / "signals").mkdir(parents=True)
    (settings.raw_dir / "signals" / "feedback_buffer.jsonl").write_bytes(sample.read_bytes())
    con, reports = ingest(settings, sources=["signals"])
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    assert rows(con, "select count(*), count(distinct target_id) from staging.signals") == [(4, 2)]


def test_real_patina_git_log_as_eventlog_reads_without_quarantine(settings):
    gitlog = pytest.importorskip("transforms.gitlog")
    commits = gitlog.parse_numstat_log((SAMPLES / "patina" / "git_log_numstat_2025-12-17_to_23.txt").read_text())
    tags = gitlog.parse_session_tags((SAMPLES / "patina" / "session_tags.psv").read_text())
    events = gitlog.to_eventlog_rows(commits, tags)
    db = settings.raw_dir / "eventlog" / "patina.db"
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.execute(EVENTLOG_DDL)
    conn.executemany("insert into eventlog (event_type, timestamp, source_id, source_file, data) values (?,?,?,?,?)",
                     [(e["event_type"], e["timestamp"], e["source_id"], e.get("source_file"), e["data"]) for e in events])
    conn.commit()
    conn.close()
    con, _ = ingest(settings, sources=["eventlog"])
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    assert rows(con, "select count(*) from staging.eventlog where event_type = 'git.commit'") == [(61,)]


def test_an_eventlog_commit_or_query_with_no_id_is_quarantined_not_collapsed(settings):
    """The eventlog's identity is derived (commit by sha, query by query id): an empty or blank
    id named no record, and every such commit (or query) collapsed into one under last-wins. Those
    are quarantined as bad_value:event_key; a query whose query_id is blank is keyed by its
    source_id; other events are keyed by their content, so an empty source_id is theirs to keep."""
    def event(event_type, source_id, data, ts="2025-12-17T22:50:42-05:00"):
        return dumps({"event_type": event_type, "timestamp": ts, "source_id": source_id, "data": data})
    write_lines(settings.raw_dir / "eventlog" / "events.jsonl", [
        event("git.commit", "", {"sha": "", "message": "one"}),
        event("git.commit", " ", {"sha": " ", "message": "two"}),
        event("git.commit", "abc123", {"sha": "abc123", "message": "kept"}),
        event("scry.query", "", {"query_id": "", "query": "q", "results": []}),
        event("scry.query", "q_20251217_1", {"query_id": " ", "query": "keyed by source_id", "results": []}),
        event("scry.query", "2025-12-18T03:00:00+00:00", {"query": "v1", "results": []}),
        event("session.started", "", {"session_id": "20251217-070135"}),
        event("session.started", "", {"session_id": "20251218-070135"}),
    ])
    con, reports = ingest(settings, sources=["eventlog"])
    assert rows(con, "select line_number, reason, detail from ingest.quarantine order by line_number") == [
        (n, "bad_value:event_key", "the identity (event_key) is empty: it names no record") for n in (1, 2, 4)]
    assert rows(con, "select event_key from staging.eventlog where event_type <> 'session.started' order by 1") == [
        ("git.commit:abc123",), ("scry.query:2025-12-18T03:00:00+00:00",), ("scry.query:q_20251217_1",)]
    assert rows(con, "select count(*) from staging.eventlog where event_type = 'session.started'") == [(2,)]
    f = reports["eventlog"].files[0]
    assert (f.lines, f.loaded, f.quarantined) == (8, 5, 3)
    check_accounting(con)


def test_accounting_identity_is_enforced(settings):
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_abababab.jsonl",
                [dumps(interaction(1)), b"", b"null"])
    con, _ = ingest(settings, sources=["interactions"])
    assert rows(con, "select lines_read, rows_loaded, rows_quarantined, blank_lines from ingest.files") == [(3, 1, 1, 1)]
    con.execute("update ingest.files set rows_loaded = rows_loaded + 1")
    with pytest.raises(AccountingError, match="interactions_2026-02-26_abababab.jsonl"):
        check_accounting(con)


def test_a_latin1_file_is_quarantined_line_by_line_with_exact_bytes(settings):
    """A producer writing Latin-1 rejects every line before JSON: each keeps its bytes, and an
    over-long line in the same batch its hash and length (one insert for all of them)."""
    from dataclasses import replace

    settings = replace(settings, max_line_bytes=1000)
    latin = [dumps(interaction(i, output_text="café")).encode("latin-1") for i in range(50)]
    big = dumps(interaction(99, output_text="x" * 5000)).encode()
    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_1a7e1a7e.jsonl",
                       latin + [big, dumps(interaction(100)).encode()])
    data = path.read_bytes()
    con, reports = ingest(settings, sources=["interactions"])
    got = rows(con, "select line_number, byte_offset, reason, raw_text, raw_bytes, raw_sha256, raw_length, run_id, "
                    "quarantined_at is not null from ingest.quarantine order by line_number")
    assert [(ln, reason) for ln, _, reason, *_ in got] == \
        [(i + 1, "invalid_utf8") for i in range(50)] + [(51, "line_too_large")]
    for (ln, offset, reason, raw_text, raw_bytes, sha, length, run_id, stamped), raw in zip(got, latin + [big]):
        assert data[offset:offset + len(raw)] == raw and run_id == "run-1" and stamped
        if reason == "invalid_utf8":
            assert (raw_bytes, raw_text) == (raw, raw.decode("utf-8", errors="backslashreplace"))
        else:
            assert (raw_bytes, raw_text, sha, length) == (None, None, hashlib.sha256(raw).hexdigest(), len(raw))
    f = reports["interactions"].files[0]
    assert (f.lines, f.loaded, f.quarantined) == (52, 1, 51)


def test_strict_verdicts_land_on_their_own_file_and_line(settings):
    """Two files in one batch with flagged lines at the same line numbers: each line keeps its
    own verdict (they are written back in one statement, joined on file and line)."""
    folder = settings.raw_dir / "interactions"
    write_lines(folder / "interactions_2026-02-26_aaaaaaaa.jsonl",
                [b'{"id": "a", "id": "b"}', b'{"id": 1, broken', dumps(interaction(1)).encode()])
    write_lines(folder / "interactions_2026-02-26_bbbbbbbb.jsonl",
                [b'{"id": 1, broken', b'{"x": NaN}', dumps(interaction(2)).encode()])
    con, _ = ingest(settings, sources=["interactions"])
    assert rows(con, "select path, line_number, reason from ingest.quarantine order by path, line_number") == [
        ("interactions/interactions_2026-02-26_aaaaaaaa.jsonl", 1, "duplicate_key"),
        ("interactions/interactions_2026-02-26_aaaaaaaa.jsonl", 2, "invalid_json"),
        ("interactions/interactions_2026-02-26_bbbbbbbb.jsonl", 1, "invalid_json"),
        ("interactions/interactions_2026-02-26_bbbbbbbb.jsonl", 2, "non_standard_json")]
    assert rows(con, "select count(*) from ingest.quarantine where detail is null or detail = ''") == [(0,)]


def test_a_flagged_line_holding_an_integer_of_thousands_of_digits_is_settled(settings):
    """A line DuckDB flags for Python's strict parser (here a trailing comma inside a string) that
    holds an integer of more than 4,300 digits: Python's int conversion refused it (ValueError)
    and the source's ingest failed, on every run and on replay. The verdict needs no value: the
    line is valid JSON and loads, its number kept in ``extra``."""
    huge = "9" * 4301
    line = dumps(interaction(2, input_text="xs = [1, 2, ]"))[:-1] + f', "n": {huge}}}'
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_aaaaaaaa.jsonl",
                [dumps(interaction(1)), line])
    con, _ = ingest(settings, sources=["interactions"])
    assert rows(con, "select right(id, 1), extra->>'n' = ? from raw.interactions order by id", [huge]) == [("1", None), ("2", True)]
    con.close()
    con, _ = ingest(settings, "run-2", sources=["interactions"], full_refresh=True)  # replayed from bronze
    assert rows(con, "select count(*) from raw.interactions") == [(2,)]


def test_a_runs_record_accumulates_its_steps_and_a_failure_sticks():
    """``record_run``: the first call makes the row, later ones add their counts, sources and
    warnings; the mode stays the first unless a step runs a full refresh; a failed run stays
    failed and keeps its error; a finished run gets its end time."""
    import duckdb

    from dagster_project.engine import ensure_schema
    from dagster_project.state import record_run

    con = duckdb.connect()
    ensure_schema(con)
    record_run(con, "r1", mode="incremental", warnings=["w1"])
    record_run(con, "r1", mode="incremental", source="interactions",
               counts={"files_seen": 3, "lines": 10, "loaded": 9, "quarantined": 1})
    record_run(con, "r1", mode="full_refresh", source="feedback", counts={"files_seen": 1, "deferred_bytes": 5},
               warnings=["w2", "w1"])
    record_run(con, "r1", mode="incremental", source="interactions", counts={"blank": 2})
    record_run(con, "r1", mode="incremental", status="failed", error="boom")
    assert con.execute("select finished_at is not null from ingest.runs").fetchone()[0]
    record_run(con, "r1", mode="incremental", status="success")
    record_run(con, "r2", mode="replay", status="success")
    got = con.execute("select run_id, mode, status, list_sort(sources), files_seen, lines_read, rows_loaded, "
                      "rows_quarantined, blank_lines, deferred_bytes, error, list_sort(warnings) "
                      "from ingest.runs order by run_id").fetchall()
    assert got == [("r1", "full_refresh", "failed", ["feedback", "interactions"], 4, 10, 9, 1, 2, 5, "boom", ["w1", "w2"]),
                   ("r2", "replay", "success", [], 0, 0, 0, 0, 0, 0, None, [])]
