"""The bronze record and producer changes: versions, never deletions; faults never remove data."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import dumps, ingest, interaction, rows, run_dying, unprivileged, write_lines
from dagster_project.engine import bronze_usage, check_accounting
from dagster_project.engine.bronze import Bronze
from dagster_project.engine.readers import sqlite as sqlite_reader
from dagster_project.synth import SESSION_DDL

SESSIONS = "sessions/session_feedback.sqlite3"


def rating(rid, label="positive", at="2026-02-26T10:00:00Z"):
    return json.dumps({"id": rid, "session_id_opaque": "ab" * 32, "user_id_or_null": None, "recorded_at": at,
                       "recorded_date": at[:10], "label": label, "turn_count_at_end": 3, "source": "cli_end",
                       "schema_version": 1})


def queued(*items) -> list[str]:
    """Lines of the weighted training queue, one per item number."""
    return [json.dumps({"query": f"q{i}", "response": f"a{i}", "weight": 1.0}) for i in items]


def store(path, ids, journal="WAL"):
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute(SESSION_DDL.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
    for rid in ids:
        add(conn, rid)
    conn.commit()
    return conn


def add(conn, rid, label="positive"):
    conn.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, recorded_date, "
                 "label, turn_count_at_end, source, value) values (?,?,?,?,?,?,?,?,?)",
                 (rid, "ab" * 32, None, "2026-02-26T10:00:00Z", "2026-02-26", label, 3, "cli_end", rating(rid, label)))


def everything(con):
    """Every derived table, exactly (bronze replay must reproduce all of it)."""
    out = {}
    for table in ("raw.interactions", "raw.session_ratings", "staging.interactions", "staging.session_ratings",
                  "ingest.quarantine", "ingest.file_events", "ingest.sqlite_keys", "lineage.bronze_known",
                  "lineage.bronze_known_through"):
        if rows(con, "select count(*) from duckdb_tables() where schema_name || '.' || table_name = ?", [table])[0][0]:
            out[table] = rows(con, f"select * from {table} order by all")
    out["ingest.files"] = rows(con, "select * exclude (last_ingested_at) from ingest.files order by all")
    return out


def assert_known_is_bronzes(settings, con, sources):
    """The cache of what the lake knows (engine/known.py) is what bronze's whole manifest says:
    each path's latest state among the applied entries."""
    from dagster_project.engine import known
    from dagster_project.engine.bronze import Bronze

    for source in sources:
        found = rows(con, "select seq from ingest.bronze_applied where source = ?", [source])
        applied = found[0][0] if found else 0
        every = Bronze(settings, source).entries()
        states = known.states(e for e in every if e.seq <= applied)
        cached = known.load(con, source, applied)
        assert cached == states
        # settled: exactly the read line files with nothing deferred and a ctime recorded, by their stat
        assert cached.settled == {path: (s["size"], s["mtime_ns"], s["ino"], s["ctime_ns"]) for path, s in states.items()
                                  if s.get("format") == "jsonl" and s.get("status") == "ok" and s.get("deferred") == 0
                                  and s.get("ctime_ns") is not None}


def test_a_run_reads_only_the_bronze_segments_after_what_raw_holds(settings, monkeypatch):
    """A run opens the manifest segment holding the entry raw applied last and those after it,
    not bronze's whole history; a state without the cache (from before it, or dropped) reads
    every segment once and rebuilds it, to the same states."""
    from dagster_project.engine import bronze as bronze_mod

    opened = []
    monkeypatch.setattr(bronze_mod, "open", lambda path, *a, **k: opened.append(Path(path).name) or open(path, *a, **k),
                        raising=False)
    segments = settings.state_dir / "bronze" / "interactions"
    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000a.jsonl",
                       [dumps(interaction(i)) for i in range(3)])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    assert opened == []  # a new state: no cache yet, and no segment to read
    for run, lines in ((2, 5), (3, 5), (4, 8)):  # run-3 rewrites the same lines: a state entry
        opened.clear()
        write_lines(path, [dumps(interaction(i)) for i in range(lines)])
        con, _ = ingest(settings, f"run-{run}", sources=["interactions"], con=con)
        assert opened == [f"{run - 1:012d}.jsonl"], run  # the last run's segment (one entry each)
        assert_known_is_bronzes(settings, con, ["interactions"])
    assert len(list(segments.glob("*.jsonl"))) == 4
    con.execute("drop table lineage.bronze_known_through")
    opened.clear()
    con, _ = ingest(settings, "run-5", sources=["interactions"], con=con)
    assert opened == [f"{seq:012d}.jsonl" for seq in range(1, 5)]  # every segment, once
    assert_known_is_bronzes(settings, con, ["interactions"])
    opened.clear()
    con, _ = ingest(settings, "run-6", sources=["interactions"], con=con)
    assert opened == [f"{4:012d}.jsonl"]


def test_files_gone_for_a_while_and_back_as_they_were_are_read_on_not_again(settings):
    """A mount point unmounted for a run, a glob narrowed then restored: every file the lake knew
    was gone for that run. When they came back, each was read again whole as a new generation
    (every line twice in raw, ``lines_read`` doubled, every quarantined line listed twice). A line
    file back with the bytes the lake read is read on from there; a JSON array back unchanged is
    not read again. One whose consumed bytes changed is still a new generation."""
    logs = settings.raw_dir / "interactions"
    kept = write_lines(logs / "interactions_2026-02-26_00000001.jsonl", [dumps(interaction(i)) for i in range(3)])
    changed = write_lines(logs / "interactions_2026-02-26_00000002.jsonl", [dumps(interaction(3)), "not json"])
    queue = settings.raw_dir / "weighted" / "training_queue.jsonl"
    queue.parent.mkdir(parents=True)
    queue.write_text(f"[{queued(1)[0]}]")
    con, _ = ingest(settings, "run-1", sources=["interactions", "weighted_queue"])
    away = settings.raw_dir.parent / "away"
    settings.raw_dir.rename(away)  # unmounted
    settings.raw_dir.mkdir()
    con, reports = ingest(settings, "run-2", sources=["interactions", "weighted_queue"], con=con)
    assert {f.event for r in reports.values() for f in r.files} == {"missing"}
    settings.raw_dir.rmdir()
    away.rename(settings.raw_dir)
    write_lines(kept, [dumps(interaction(9))], mode="ab")
    write_lines(changed, [dumps(interaction(4)), "not json"])  # its first line is another
    con, reports = ingest(settings, "run-3", sources=["interactions", "weighted_queue"], con=con)
    assert sorted(f.event for r in reports.values() for f in r.files) == ["reappeared"] * 3
    assert rows(con, "select path, lines_read, rows_loaded, rows_quarantined, generation from ingest.files "
                     "order by path") == [
        ("interactions/interactions_2026-02-26_00000001.jsonl", 4, 4, 0, 1),
        ("interactions/interactions_2026-02-26_00000002.jsonl", 4, 2, 2, 2),
        ("weighted/training_queue.jsonl", 1, 1, 0, 1)]
    assert rows(con, "select count(*) from raw.interactions") == [(6,)]
    check_accounting(con)
    con.close()


@pytest.mark.parametrize("source", ["interactions", "weighted_queue"])
def test_a_file_its_producer_rewrites_during_the_run_is_kept_as_read(settings, source):
    """A producer rewrites a file (truncate and write, shorter) after the run read it and before
    its batch is applied: the run was still holding the file mapped, so bronze and raw got bytes
    it never read (zeros past the new end), its lines were lost, and a larger file truncated so
    killed the process (SIGBUS). The run keeps what it read; the next run reads the new content
    as a new generation. A line file and a JSON array (rewritten whole by its older saver)."""
    if source == "interactions":
        a, b = (settings.raw_dir / f"interactions/interactions_2026-02-26_0000000{n}.jsonl" for n in (1, 2))
        write_lines(a, [dumps(interaction(i)) for i in range(1, 4)])
        write_lines(b, [dumps(interaction(i)) for i in range(10, 12)])
        rewritten, key = dumps(interaction(99)) + "\n", "id"
        before, after = {"1", "2", "3", "10", "11"}, {"1", "2", "3", "10", "11", "99"}
    else:
        a, b = (settings.raw_dir / f"weighted/training_queue{n}.jsonl" for n in ("", "_archive"))
        a.parent.mkdir(parents=True)
        a.write_text(f"[{', '.join(queued(*range(3)))}]")
        b.write_text(f"[{queued(9)[0]}]")
        rewritten, key = f"[{', '.join(queued(*range(1, 5)))}]", "query"
        before, after = {"q0", "q1", "q2", "q9"}, {"q0", "q1", "q2", "q3", "q4", "q9"}

    def producer(line):
        if line.endswith(b.name):  # the run has read a and goes on to b
            a.write_bytes(rewritten.encode())

    def staged(con):
        return {str(int(v[-12:])) if source == "interactions" else v
                for v, in rows(con, f"select {key} from staging.{source}")}

    con, reports = ingest(settings, "run-1", sources=[source], progress=producer)
    assert a.read_bytes() == rewritten.encode()
    assert staged(con) == before
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    check_accounting(con)
    kept = Bronze(settings, source)
    for entry in kept.entries():
        if entry.kind in ("span", "array"):  # bronze holds the bytes it recorded the hash of
            assert hashlib.sha256(bytes(kept.payload(entry))).hexdigest() == entry.sha256
    con, reports = ingest(settings, "run-2", sources=[source], con=con)
    assert staged(con) == after
    con.close()


def test_a_manifest_restored_from_an_older_copy_is_read_whole_and_the_lines_it_lacks_read_again(settings):
    """Bronze losing its newest segments while the state database keeps them applied (a restore
    from an older backup): the run finds the entry raw applied last missing, reads what bronze
    still holds, and reads the producer's lines after that watermark again, so bronze holds
    them again."""
    from dagster_project.engine.bronze import Bronze

    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000a.jsonl",
                       [dumps(interaction(i)) for i in range(3)])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    write_lines(path, [dumps(interaction(i)) for i in range(5)])
    con, _ = ingest(settings, "run-2", sources=["interactions"], con=con)
    spans = [(e.meta["start"], e.meta["end"]) for e in Bronze(settings, "interactions").entries()]
    (settings.state_dir / "bronze" / "interactions" / f"{2:012d}.jsonl").unlink()
    con, reports = ingest(settings, "run-3", sources=["interactions"], con=con)
    assert reports["interactions"].files[0].event == "appended"
    assert [(e.meta["start"], e.meta["end"]) for e in Bronze(settings, "interactions").entries()] == spans
    assert rows(con, "select count(distinct id) from staging.interactions") == [(5,)]
    assert_known_is_bronzes(settings, con, ["interactions"])


def test_the_entries_after_a_seq_come_from_the_segments_that_can_hold_them(settings):
    """A segment is one batch of consecutive seqs named by its first; a replay may apply part of
    one, so the segment holding ``seq`` is read too; a seq bronze does not hold gives None."""
    from dagster_project.engine.bronze import Bronze, Entry

    store = Bronze(settings, "scratch")
    at = "2026-02-26T10:00:00+00:00"
    for first in (1, 4, 7):
        store.write([Entry(seq, "scratch", f"f{seq}", "state", "r", at, state={"n": seq})
                     for seq in range(first, first + 3)])
    assert [e.seq for e in store.entries()] == list(range(1, 10))
    for seq in range(0, 10):
        assert [e.seq for e in store.entries_after(seq)] == list(range(seq + 1, 10)), seq
    assert store.entries_after(10) is None
    (store.dir / f"{4:012d}.jsonl").unlink()
    assert [store.entries_after(seq) is None for seq in range(0, 10)] == [False] * 4 + [True] * 3 + [False] * 3


def test_jsonl_rewritten_shorter_keeps_rows_only_the_removed_lines_held(settings):
    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000a.jsonl",
                       [dumps(interaction(i)) for i in range(5)])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    write_lines(path, [dumps(interaction(i)) for i in range(3, 6)])  # first 3 lines removed, one added
    con, reports = ingest(settings, "run-2", sources=["interactions"], con=con)
    assert reports["interactions"].files[0].event == "shrunk"
    assert rows(con, "select count(*) from staging.interactions") == [(6,)]
    assert rows(con, "select lines_read, rows_loaded, generation from ingest.files") == [(8, 8, 2)]
    assert rows(con, "select event from ingest.file_events") == [("shrunk",)]


def test_recreated_store_keeps_old_rows_flagged_and_adds_new_ones(settings):
    db = settings.raw_dir / SESSIONS
    store(db, ["a", "b", "c"]).close()
    con, _ = ingest(settings, "run-1", sources=["session_ratings"])
    db.unlink()
    store(db, ["x", "y"]).close()  # ids restart at 1
    con, reports = ingest(settings, "run-2", sources=["session_ratings"], con=con)
    assert reports["session_ratings"].files[0].event == "recreated"
    assert rows(con, "select id, line_number, deleted_at_source is not null from staging.session_ratings order by id") == [
        ("a", 1, True), ("b", 2, True), ("c", 3, True), ("x", 1, False), ("y", 2, False)]
    assert rows(con, "select lines_read, rows_loaded from ingest.files") == [(5, 5)]
    check_accounting(con)


@pytest.mark.parametrize("seen_missing", [False, True])
def test_a_store_recreated_smaller_flags_every_old_row_whether_or_not_a_run_saw_it_gone(settings, seen_missing):
    """The old store's keys span two checksum ranges, the recreated one's only the first. When a
    run had seen the store missing in between, the reader compared the new store's ranges alone:
    the old rows of the second range kept no flag (and their keys, so the store growing back into
    that range much later 'updated' and 'deleted' them)."""
    db = settings.raw_dir / SESSIONS
    store(db, [f"old{i}" for i in range(1100)], journal="DELETE").close()  # keys 1..1100
    con, _ = ingest(settings, "run-1", sources=["session_ratings"])
    db.unlink()
    if seen_missing:
        con, reports = ingest(settings, "run-2", sources=["session_ratings"], con=con)
        assert reports["session_ratings"].files[0].event == "missing"
    store(db, ["new1", "new2"], journal="DELETE").close()  # ids restart at 1
    con, reports = ingest(settings, "run-3", sources=["session_ratings"], con=con)
    assert reports["session_ratings"].files[0].event == "recreated"
    assert rows(con, "select count(*), count(deleted_at_source) from staging.session_ratings where id like 'old%'") == [
        (1100, 1100)]
    assert rows(con, "select key from ingest.sqlite_keys order by key") == [(1,), (2,)]
    check_accounting(con)


def test_files_where_the_run_may_not_look_are_kept_and_found_unchanged_later(open_tmp):
    """Permission denied, briefly (modes changed by a permissions fix): a directory that may not
    be listed had its files taken as gone, then read again whole as new generations (every line
    twice in raw, ``lines_read`` doubled; ``Path.glob``, for a glob with wildcards before its last
    part, skips such a directory); a link into a directory that may not be searched hid
    every file beside it; a source naming one file in such a directory (the README's
    ``~/.store/session_feedback.sqlite3``) failed its step. Each such file is now ``unreadable``
    for that run, its rows kept, the files beside it read as usual, and the next run finds it
    unchanged. When the tests run as root, the run that may not look runs without the two
    capabilities that let root past any mode (``setpriv``)."""
    from dagster_project.settings import Settings

    base = open_tmp
    store_path = base / "tool" / "session_feedback.sqlite3"
    store(store_path, ["r1", "r2"], journal="DELETE").close()
    sources = base / "sources.yml"
    sources.write_text(f"sources:\n  session_ratings:\n    globs: [{str(store_path)!r}]\n"
                       "  interactions:\n    globs: ['interactions/interactions_*.jsonl', 'more/*/interactions_*.jsonl']\n")
    env = {"FLYWHEEL_SOURCES": str(sources), "FLYWHEEL_SESSION_RETENTION_DAYS": "3650"}
    settings = Settings.from_env({"FLYWHEEL_RAW_DIR": str(base / "raw"), "FLYWHEEL_WAREHOUSE": str(base / "w.duckdb"),
                                  "FLYWHEEL_EXPORT_DIR": str(base / "exports"), **env})
    logs = settings.raw_dir / "interactions"
    write_lines(logs / "interactions_2026-02-26_00000001.jsonl", [dumps(interaction(i)) for i in range(3)])
    write_lines(logs / "interactions_2026-02-26_00000002.jsonl", [dumps(interaction(i)) for i in range(3, 5)])
    deeper = settings.raw_dir / "more" / "a"  # its glob goes through Path.glob, which skips it unlisted
    write_lines(deeper / "interactions_2026-02-26_00000003.jsonl", [dumps(interaction(5))])

    queue = write_lines(settings.raw_dir / "weighted" / "training_queue.jsonl", queued(1))
    elsewhere = write_lines(base / "elsewhere" / "queue.jsonl", queued(2))
    (queue.parent / "training_queue_linked.jsonl").symlink_to(elsewhere)
    sources_read = ["interactions", "session_ratings", "weighted_queue"]
    con, _ = ingest(settings, "run-1", sources=sources_read)
    con.close()
    write_lines(queue, queued(3), mode="ab")  # beside the link that may not be followed: read
    private = [logs, deeper, store_path.parent, elsewhere.parent]
    for path in private:
        path.chmod(0)
    done = run_dying(settings, "", run_id="run-2", sources=sources_read, env=env, wrapper=unprivileged())
    for path in private:
        path.chmod(0o755)
    assert done.returncode == 0, done.stderr
    con, reports = ingest(settings, "run-3", sources=sources_read)
    assert {f.event for r in reports.values() for f in r.files} == {"unchanged"}
    assert rows(con, "select run_id, event, count(*) from ingest.file_events group by all order by all") == [
        ("run-2", "unreadable", 5)]
    assert rows(con, "select source, lines_read, rows_loaded, generation from ingest.files order by source, path") == [
        ("interactions", 3, 3, 1), ("interactions", 2, 2, 1), ("interactions", 1, 1, 1), ("session_ratings", 2, 2, 1),
        ("weighted_queue", 1, 1, 1), ("weighted_queue", 2, 2, 1)]
    assert rows(con, "select (select count(*) from raw.interactions), (select count(*) from raw.session_ratings), "
                     "(select count(*) from raw.weighted_queue)") == [(6, 2, 3)]
    con.close()


def test_row_updated_in_place_wins_and_deleted_row_is_flagged(settings):
    db = settings.raw_dir / SESSIONS
    conn = store(db, ["a", "b", "c"])
    con, _ = ingest(settings, "run-1", sources=["session_ratings"])
    conn.execute("update session_feedback set value = ? where id = 'a'", [rating("a", "negative")])
    conn.execute("delete from session_feedback where id = 'b'")
    conn.commit()
    conn.close()
    con, _ = ingest(settings, "run-2", sources=["session_ratings"], con=con)
    assert rows(con, "select id, label, deleted_at_source is not null from staging.session_ratings order by id") == [
        ("a", "negative", False), ("b", "positive", True), ("c", "positive", False)]
    assert rows(con, "select count(*) from raw.session_ratings") == [(4,)]
    assert sorted(e for (e,) in rows(con, "select event from ingest.file_events")) == ["rows_deleted", "rows_updated"]
    assert rows(con, "select lines_read, rows_loaded from ingest.files") == [(4, 4)]
    # the deleted row's key is forgotten: a row inserted later under it is new, not an update
    assert rows(con, "select key from ingest.sqlite_keys order by key") == [(1,), (3,)]


def test_store_locked_by_its_writer_is_retried_not_quarantined(settings, monkeypatch):
    monkeypatch.setattr(sqlite_reader, "LOCK_WAIT_SECONDS", 0.3)
    db = settings.raw_dir / SESSIONS
    store(db, ["a", "b"], journal="DELETE").close()
    con, _ = ingest(settings, "run-1", sources=["session_ratings"])
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sqlite3, sys, time
conn = sqlite3.connect({str(db)!r}, isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
conn.execute("insert into session_feedback (id, session_id_opaque, recorded_at, recorded_date, label, "
             "turn_count_at_end, source, value) select 'c', session_id_opaque, recorded_at, recorded_date, label, "
             "turn_count_at_end, source, replace(value, '\\"a\\"', '\\"c\\"') from session_feedback where id = 'a'")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        os.utime(db)  # make sure the lake notices a change
        con, reports = ingest(settings, "run-2", sources=["session_ratings"], con=con)
        assert reports["session_ratings"].files[0].event == "locked"
        assert rows(con, "select count(*) from staging.session_ratings") == [(2,)]
        assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
        assert rows(con, "select event from ingest.file_events") == [("locked",)]
    finally:
        holder.communicate("\n", timeout=30)
    con, reports = ingest(settings, "run-3", sources=["session_ratings"], con=con)
    assert rows(con, "select id from staging.session_ratings order by id") == [("a",), ("b",), ("c",)]
    assert rows(con, "select lines_read, rows_loaded, rows_quarantined from ingest.files") == [(3, 3, 0)]


def test_store_corrupted_after_ingest_keeps_its_rows(settings):
    db = settings.raw_dir / SESSIONS
    store(db, ["a", "b"], journal="DELETE").close()
    con, _ = ingest(settings, "run-1", sources=["session_ratings"])
    db.write_bytes(b"garbage" * 1000)
    con, reports = ingest(settings, "run-2", sources=["session_ratings"], con=con)
    assert reports["session_ratings"].files[0].event == "corrupt"
    assert rows(con, "select count(*) from staging.session_ratings") == [(2,)]
    assert rows(con, "select status, lines_read, rows_loaded, rows_quarantined from ingest.files") == [("corrupt", 2, 2, 0)]
    con, reports = ingest(settings, "run-3", sources=["session_ratings"], con=con)  # unchanged: no new event
    assert rows(con, "select count(*) from ingest.file_events") == [(1,)]


def test_vanished_file_keeps_its_rows_and_full_refresh_keeps_them_too(settings):
    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000b.jsonl",
                       [dumps(interaction(i)) for i in range(3)])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    path.unlink()
    con, _ = ingest(settings, "run-2", sources=["interactions"], con=con)
    before = everything(con)
    assert rows(con, "select count(*) from staging.interactions") == [(3,)]
    con, _ = ingest(settings, "run-3", sources=["interactions"], con=con, full_refresh=True)
    assert everything(con) == before


def test_deleting_state_db_rebuilds_the_same_result_from_bronze(settings):
    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000c.jsonl",
                       [dumps(interaction(i)) for i in range(3)] + [b"null"])
    db = settings.raw_dir / SESSIONS
    conn = store(db, ["a", "b"])
    con, _ = ingest(settings, "run-1", sources=["interactions", "session_ratings"])
    write_lines(path, [dumps(interaction(9))])  # rewritten
    conn.execute("delete from session_feedback where id = 'a'")
    conn.commit()
    conn.close()
    con, _ = ingest(settings, "run-2", sources=["interactions", "session_ratings"], con=con)
    before = everything(con)
    con.close()
    settings.state_db.unlink()
    con, reports = ingest(settings, "run-3", sources=["interactions", "session_ratings"])
    assert all(f.event == "unchanged" for r in reports.values() for f in r.files)
    assert everything(con) == before
    usage = bronze_usage(settings)
    assert usage["objects"] >= 2 and 0 < usage["compressed_bytes"] and usage["raw_bytes"] >= path.stat().st_size


def test_same_size_and_mtime_but_changed_bytes_is_reread(settings):
    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000d.jsonl",
                       [dumps(interaction(i)) for i in range(3)])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[data.rindex(b"Use")] = ord("W")
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    con, reports = ingest(settings, "run-2", sources=["interactions"], con=con)
    assert reports["interactions"].files[0].event == "rewritten"
    assert rows(con, "select output_text from staging.interactions where id = ?", [interaction(2)["id"]]) == [
        ("Wse open().",)]


def read_twice(settings, monkeypatch):
    """A line file ingested, then ingested again untouched with every ``pread`` recorded (every
    ctime counts as settled): (its path, the second run's reports, the connection, the sizes read)."""
    from dagster_project.engine import readers

    monkeypatch.setattr(readers, "CTIME_SETTLED_SECONDS", 0.0)
    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000e.jsonl",
                       [dumps(interaction(i)) for i in range(3)])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    reads = []
    pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: reads.append(a[1]) or pread(*a))
    con, reports = ingest(settings, "run-2", sources=["interactions"], con=con)
    return path, reports, con, reads


def test_a_file_untouched_since_its_read_is_not_read_again_and_a_rewrite_moves_its_ctime(settings, monkeypatch):
    """A file whose size, mtime, inode and settled ctime are the recorded ones is known unchanged
    without reading a byte; rewriting it in place with its size and mtime restored moves the
    ctime, so its last block is read again and the rewrite found."""
    path, reports, con, reads = read_twice(settings, monkeypatch)
    assert reports["interactions"].files[0].event == "unchanged" and reads == []
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[data.rindex(b"Use")] = ord("W")
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_ctime_ns != st.st_ctime_ns
    con, reports = ingest(settings, "run-3", sources=["interactions"], con=con)
    assert reports["interactions"].files[0].event == "rewritten" and reads[0] == st.st_size  # its last block


def test_a_settled_file_is_decided_by_its_stat_alone_and_any_change_sends_it_to_its_reader(settings, monkeypatch):
    """A line file whose size, mtime, inode and recorded ctime its stat still shows is unchanged
    without its reader or its state being looked at (a lake of years is mostly such files); an
    append, or a chmod that moves the ctime alone, sends it to the reader again, which decides."""
    from dagster_project.engine.readers import jsonl

    path, reports, con, reads = read_twice(settings, monkeypatch)
    looked = []
    for name in ("unchanged", "read"):
        real = getattr(jsonl, name)
        monkeypatch.setattr(jsonl, name, lambda view, *a, _real=real, _name=name: looked.append(_name) or _real(view, *a))
    con, reports = ingest(settings, "run-3", sources=["interactions"], con=con)
    assert reports["interactions"].files[0].event == "unchanged" and looked == [] and reads == []
    os.chmod(path, 0o600)  # the ctime moves, nothing else
    con, reports = ingest(settings, "run-4", sources=["interactions"], con=con)
    assert reports["interactions"].files[0].event == "unchanged" and looked == ["unchanged"]
    with path.open("a") as fh:
        fh.write(dumps(interaction(3)) + "\n")
    looked.clear()
    con, reports = ingest(settings, "run-5", sources=["interactions"], con=con)
    assert reports["interactions"].files[0].event == "appended" and looked == ["unchanged", "read"]
    assert rows(con, "select count(*) from raw.interactions") == [(4,)]


def test_a_state_newer_than_the_cache_is_never_taken_as_settled(settings, monkeypatch):
    """Entries bronze holds beyond the cache (a run killed after its bronze write) give a file a
    newer state than the cache's: that file is looked at by its reader, whatever its stat."""
    from dagster_project.engine import known

    path, _, con, _ = read_twice(settings, monkeypatch)
    applied = rows(con, "select seq from ingest.bronze_applied where source = 'interactions'")[0][0]
    cached = known.load(con, "interactions", applied)
    stored = "interactions/" + path.name
    assert stored in cached.settled
    newer = {**cached[stored], "deferred": 5}
    cached.update({stored: newer})
    assert stored not in cached.settled and cached[stored] == newer and list(cached) == [stored]


def test_without_trusting_ctime_an_untouched_file_has_its_last_block_read(settings, monkeypatch):
    """FLYWHEEL_TRUST_CTIME=0 (a mount whose ctime does not follow writes): an untouched file
    still has its last 64 KiB read and hashed, so a same-size rewrite with its mtime put back is
    found however the mount reports the ctime."""
    from dataclasses import replace

    path, reports, _, reads = read_twice(replace(settings, trust_ctime=False), monkeypatch)
    assert reports["interactions"].files[0].event == "unchanged" and reads == [path.stat().st_size]


def test_a_ctime_that_settles_after_the_read_is_recorded_once_and_the_file_is_not_read_again(settings, monkeypatch):
    """A file read within CTIME_SETTLED_SECONDS of its last write (a day's file read just after
    its last append; or a state from before ctimes were kept) has no ctime recorded, so the next
    run reads its last block. That run records the settled ctime in one state entry, without a
    row or a new version of a line; every run after it reads nothing of the file."""
    from dagster_project.engine import readers
    from dagster_project.engine.bronze import Bronze

    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000e.jsonl",
                       [dumps(interaction(i)) for i in range(3)])
    monkeypatch.setattr(readers, "CTIME_SETTLED_SECONDS", 1e9)  # no ctime is settled yet
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    entries = Bronze(settings, "interactions").entries()
    assert entries[-1].state["ctime_ns"] is None
    before = everything(con)
    monkeypatch.setattr(readers, "CTIME_SETTLED_SECONDS", 0.0)
    reads = []
    pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: reads.append(a[1]) or pread(*a))
    con, reports = ingest(settings, "run-2", sources=["interactions"], con=con)
    # its last block (the whole file here), by the check and again by the reader that records the ctime
    assert reports["interactions"].files[0].event == "unchanged" and reads == [path.stat().st_size] * 2
    added = Bronze(settings, "interactions").entries()[len(entries):]
    assert [(e.kind, e.state["ctime_ns"]) for e in added] == [("state", path.stat().st_ctime_ns)]
    assert {k: v for k, v in added[0].state.items() if k != "ctime_ns"} == {
        k: v for k, v in entries[-1].state.items() if k != "ctime_ns"}
    after = everything(con)
    assert after.pop("ingest.files") != before.pop("ingest.files")  # its last run moved
    assert after.pop("lineage.bronze_known") != before.pop("lineage.bronze_known")  # the state cached
    assert after.pop("lineage.bronze_known_through") != before.pop("lineage.bronze_known_through")
    assert after == before
    reads.clear()
    con, reports = ingest(settings, "run-3", sources=["interactions"], con=con)
    assert reports["interactions"].files[0].event == "unchanged" and reads == []
    assert len(Bronze(settings, "interactions").entries()) == len(entries) + 1


def test_without_trusting_ctime_no_ctime_is_recorded_after_the_read(settings, monkeypatch):
    """FLYWHEEL_TRUST_CTIME=0: a settled ctime is not worth a state entry (it is never used)."""
    from dataclasses import replace

    from dagster_project.engine import readers
    from dagster_project.engine.bronze import Bronze

    settings = replace(settings, trust_ctime=False)
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000e.jsonl",
                [dumps(interaction(i)) for i in range(3)])
    monkeypatch.setattr(readers, "CTIME_SETTLED_SECONDS", 1e9)
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    entries = len(Bronze(settings, "interactions").entries())
    monkeypatch.setattr(readers, "CTIME_SETTLED_SECONDS", 0.0)
    con, reports = ingest(settings, "run-2", sources=["interactions"], con=con)
    assert reports["interactions"].files[0].event == "unchanged"
    assert len(Bronze(settings, "interactions").entries()) == entries


def test_a_session_store_whose_ctime_alone_moved_is_not_read_again(settings, monkeypatch):
    """Only the line reader keeps a ctime: a SQLite store linked or chmodded (its ctime moved,
    nothing else) still matches its recorded signature, and is not scanned again."""
    from dagster_project.engine import readers
    from dagster_project.engine.readers import sqlite as reader

    monkeypatch.setattr(readers, "CTIME_SETTLED_SECONDS", 0.0)
    db = settings.raw_dir / SESSIONS
    store(db, ["r1", "r2"], journal="DELETE").close()
    con, _ = ingest(settings, "run-1", sources=["session_ratings"])
    os.chmod(db, 0o640)
    scans = []
    snapshot = reader._snapshot
    monkeypatch.setattr(reader, "_snapshot", lambda *a: scans.append(a) or snapshot(*a))
    con, reports = ingest(settings, "run-2", sources=["session_ratings"], con=con)
    assert reports["session_ratings"].files[0].event == "unchanged" and scans == []


def test_future_mtime_still_seals_the_partial_tail(settings):
    path = settings.raw_dir / "feedback" / "2026-02-26_feedback.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"record_id": "r1", "feedb')
    future = time.time() + 30 * 86400
    os.utime(path, (future, future))
    now = time.time()
    con, reports = ingest(settings, "run-1", sources=["feedback"], now=now)
    assert reports["feedback"].files[0].deferred_bytes == 26
    con, reports = ingest(settings, "run-2", sources=["feedback"], con=con,
                          now=now + settings.seal_after_seconds + 1)
    assert reports["feedback"].files[0].event == "sealed"
    assert rows(con, "select reason from ingest.quarantine") == [("unterminated_last_line",)]
    assert rows(con, "select lines_read, rows_quarantined, deferred_bytes from ingest.files") == [(1, 1, 0)]


def test_a_partial_last_line_is_sealed_though_its_file_never_changes_again(settings, monkeypatch):
    """A file waiting with a partial last line is looked at by its reader every run, whatever its
    stat says (its ctime settled and recorded): the line is sealed once the quiet period is over."""
    from dagster_project.engine import readers

    monkeypatch.setattr(readers, "CTIME_SETTLED_SECONDS", 0.0)  # the first read records the ctime
    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000f.jsonl",
                       [dumps(interaction(0))])
    with path.open("a") as fh:
        fh.write('{"id": "partial')
    now = time.time()
    con, reports = ingest(settings, "run-1", sources=["interactions"], now=now)
    assert reports["interactions"].files[0].deferred_bytes == 15
    con, reports = ingest(settings, "run-2", sources=["interactions"], con=con, now=now + 1)
    assert reports["interactions"].files[0].deferred_bytes == 15  # still waiting
    con, reports = ingest(settings, "run-3", sources=["interactions"], con=con,
                          now=now + settings.seal_after_seconds + 1)
    assert reports["interactions"].files[0].event == "sealed"
    assert rows(con, "select reason from ingest.quarantine") == [("unterminated_last_line",)]


def test_crash_after_bronze_write_is_recovered_by_the_next_run(settings):
    """A run killed between writing bronze and committing raw: the next run applies it once."""
    path = write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000e.jsonl",
                       [dumps(interaction(i)) for i in range(3)])
    crash = run_dying(settings, """
def die(self, batch, bronze_written=None):
    if batch:
        bronze_written.result()  # bronze is written on another thread: crash once it is durable
        os.kill(os.getpid(), 9)
engine.Ingestor._apply = die
""")
    assert crash.returncode == -9
    assert bronze_usage(settings)["objects"] == 1
    con, reports = ingest(settings, "run-2", sources=["interactions"])
    assert reports["interactions"].replayed_entries == 1
    assert reports["interactions"].files[0].event == "unchanged"  # bronze already holds its bytes
    assert rows(con, "select count(*), min(ingest_run_id) from raw.interactions") == [(3, "crashed")]
    assert rows(con, "select lines_read, rows_loaded from ingest.files") == [(3, 3)]
    with path.open("ab") as fh:
        fh.write(dumps(interaction(7)).encode() + b"\n")
    con, _ = ingest(settings, "run-3", sources=["interactions"], con=con)
    assert rows(con, "select lines_read, rows_loaded from ingest.files") == [(4, 4)]


def test_a_full_refresh_killed_while_it_resets_a_source_leaves_it_as_it_was(settings, monkeypatch):
    """kill -9 half way through a source's reset (its raw dropped, its bookkeeping not yet
    cleared): the reset is one transaction, so the next run finds raw, the accounting and the
    cache as they were. Statement by statement, it found raw empty and bronze applied, and
    replayed nothing into it. (Every ctime counts as settled: on a loaded machine the next run
    came after the 2 s a ctime takes to settle and recorded it, one state entry more.)"""
    from dagster_project.engine import readers

    monkeypatch.setattr(readers, "CTIME_SETTLED_SECONDS", 0.0)
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_0000000e.jsonl",
                [dumps(interaction(i)) for i in range(3)])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    before = everything(con)
    con.close()
    crash = run_dying(settings, """
from dagster_project import versions
run = engine.Ingestor.run
engine.Ingestor.run = lambda self, full_refresh=False: run(self, full_refresh=True)
versions.forget = lambda con, table: os.kill(os.getpid(), 9)  # after raw is dropped
""")
    assert crash.returncode == -9
    con, reports = ingest(settings, "run-2", sources=["interactions"])
    assert reports["interactions"].replayed_entries == 0
    assert rows(con, "select count(*) from raw.interactions") == [(3,)]
    assert everything(con) == before


def test_a_run_killed_between_retention_and_the_replay_it_needs_is_replayed_by_the_next(settings):
    """Retention rewrites bronze without the expired records, then raw follows by a replay. Killed
    in between, the next run finds nothing left to expire: the marker left by the pass makes it
    replay, so raw does not keep the expired rows."""
    from dataclasses import replace

    store(settings.raw_dir / SESSIONS, ["r1", "r2"], journal="DELETE").close()  # recorded 2026-02-26
    con, _ = ingest(settings, "run-1", sources=["session_ratings"])
    assert rows(con, "select count(*) from raw.session_ratings") == [(2,)]
    con.close()
    week = {"FLYWHEEL_SESSION_RETENTION_DAYS": "7"}  # every rating is older than a week
    crash = run_dying(settings, """
from dagster_project import privacy
enforce = privacy.enforce_retention
def enforce_and_die(settings, spec, **kwargs):
    removed = enforce(settings, spec, **kwargs)
    if removed:
        os.kill(os.getpid(), 9)  # bronze rewritten, raw not reset
    return removed
privacy.enforce_retention = enforce_and_die
""", sources=["session_ratings"], env=week)
    assert crash.returncode == -9, crash.stderr
    con, reports = ingest(replace(settings, session_retention_days=7), "run-2", sources=["session_ratings"])
    assert rows(con, "select count(*) from raw.session_ratings") == [(0,)]
    assert not (settings.state_dir / "retention_pending" / "session_ratings").exists()


def test_a_stored_record_holding_unicode_line_separators_is_read_and_replayed(settings):
    """A SQLite row's record is kept in bronze as one JSON line, and JSON leaves U+2028, U+2029
    and U+0085 unescaped: read back by ``str.splitlines``, which also ends lines there, such a
    record (a pasted query, a note) broke into pieces that no longer parse, and the source's
    ingest failed on every run. Its lines end at newlines only."""
    odd = "line\u2028separator\u2029paragraph\x85next"
    conn = store(settings.raw_dir / SESSIONS, ["r1"], journal="DELETE")
    record = {**json.loads(rating("r2")), "note": odd}
    conn.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, recorded_date, "
                 "label, turn_count_at_end, source, value) values (?,?,?,?,?,?,?,?,?)",
                 ("r2", "ab" * 32, None, record["recorded_at"], record["recorded_date"], "positive", 3, "cli_end",
                  json.dumps(record, ensure_ascii=False)))
    conn.commit()
    conn.close()
    con, _ = ingest(settings, "run-1", sources=["session_ratings"])
    assert rows(con, "select id, extra->>'note' from raw.session_ratings order by id") == [("r1", None), ("r2", odd)]
    before = everything(con)
    con.close()
    settings.state_db.unlink()  # raw rebuilt from bronze alone
    con, reports = ingest(settings, "run-2", sources=["session_ratings"])
    assert reports["session_ratings"].replayed_entries > 0
    assert everything(con) == before
    con.close()


def test_a_rating_already_expired_when_first_read_reaches_neither_bronze_nor_raw(settings):
    """Under a retention window, new reads are filtered before bronze is written; the records the
    SQLite reader hands to its decoder (as read) go with what the filter removed."""
    from dataclasses import replace
    from datetime import date, timedelta

    from dagster_project.engine.bronze import Bronze

    young = (settings.run_date - timedelta(days=1)).isoformat() + "T10:00:00Z"
    conn = store(settings.raw_dir / SESSIONS, [], journal="DELETE")
    for rid, at in (("old", "2026-02-26T10:00:00Z"), ("young", young)):
        conn.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, "
                     "recorded_date, label, turn_count_at_end, source, value) values (?,?,?,?,?,?,?,?,?)",
                     (rid, "ab" * 32, None, at, at[:10], "positive", 3, "cli_end", rating(rid, at=at)))
    conn.commit()
    conn.close()
    assert (settings.run_date - date(2026, 2, 26)).days > 30
    con, _ = ingest(replace(settings, session_retention_days=30), "run-1", sources=["session_ratings"])
    assert rows(con, "select id from raw.session_ratings") == [("young",)]
    store_ = Bronze(settings, "session_ratings")
    kept = b"".join(bytes(store_.payload(e)) for e in store_.entries() if e.object is not None)
    assert b'\\"old\\"' not in kept and b'\\"young\\"' in kept  # records JSON-encoded in a rows payload
    con.close()


def test_a_retention_pass_rewrites_only_the_segments_whose_records_expired(settings):
    """Every object whose records all expired becomes the same empty object: segments were
    matched by the new objects' names, so each day's pass rewrote (and fsynced) every segment any
    earlier pass had emptied, a cost growing with the lake's age."""
    from dataclasses import replace
    from datetime import date, timedelta

    conn = store(settings.raw_dir / SESSIONS, [], journal="DELETE")
    days = [date(2026, 2, 1) + timedelta(days=d) for d in range(3)]
    for n, day in enumerate(days):  # one rating a day, each read by its own run: one segment each
        at = f"{day}T10:00:00Z"
        conn.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, "
                     "recorded_date, label, turn_count_at_end, source, value) values (?,?,?,?,?,?,?,?,?)",
                     (f"r{n}", "ab" * 32, None, at, at[:10], "positive", 3, "cli_end", rating(f"r{n}", at=at)))
        conn.commit()
        con, _ = ingest(replace(settings, as_of=days[0], session_retention_days=1), f"run-{n}",
                        sources=["session_ratings"])
        con.close()
    conn.close()
    segments = sorted((settings.state_dir / "bronze" / "session_ratings").glob("*.jsonl"))
    assert len(segments) == 3

    def stamps() -> list[tuple[int, int]]:
        return [(os.stat(seg).st_ino, os.stat(seg).st_mtime_ns) for seg in segments]

    seen = [stamps()]
    for n, day in enumerate(days, start=3):  # r0, then r1, then r2 expire
        con, _ = ingest(replace(settings, as_of=day + timedelta(days=2), session_retention_days=1), f"run-{n}",
                        sources=["session_ratings"])
        assert rows(con, "select count(*) from raw.session_ratings") == [(5 - n,)]
        con.close()
        seen.append(stamps())
    for n in range(3):  # pass n rewrote segment n alone
        assert [a != b for a, b in zip(seen[n], seen[n + 1])] == [i == n for i in range(3)], n


def test_a_record_too_deep_or_too_long_for_python_passes_the_privacy_filters(settings):
    """The retention filter (on by default) reads each new record with Python's JSON parser: a
    record nested deeper than its recursion limit raised RecursionError and the source's ingest
    failed on every run; the filter reads it down to 64 levels now, and keeps it (it is not
    expired), as DuckDB reads it. One holding an integer of more than 4,300 digits is read too
    (it was kept before as unreadable)."""
    from dataclasses import replace
    from datetime import date

    conn = store(settings.raw_dir / SESSIONS, ["r1"], journal="DELETE")
    deep = rating("r2")[:-1] + ', "x": ' + "[" * 3000 + "]" * 3000 + "}"
    huge = rating("r3")[:-1] + ', "n": ' + "9" * 5000 + "}"
    for rid, value in (("r2", deep), ("r3", huge)):
        conn.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, "
                     "recorded_date, label, turn_count_at_end, source, value) values (?,?,?,?,?,?,?,?,?)",
                     (rid, "ab" * 32, None, "2026-02-26T10:00:00Z", "2026-02-26", "positive", 3, "cli_end", value))
    conn.commit()
    conn.close()
    windowed = replace(settings, session_retention_days=(settings.run_date - date(2026, 2, 1)).days)
    con, _ = ingest(windowed, "run-1", sources=["session_ratings"])
    assert rows(con, "select id from raw.session_ratings order by id") == [("r1",), ("r2",), ("r3",)]
    check_accounting(con)
    con.close()
    con, _ = ingest(windowed, "run-2", sources=["session_ratings"])  # the retention pass reads them
    assert rows(con, "select count(*) from raw.session_ratings") == [(3,)]
    con.close()


def test_a_record_too_deep_for_python_is_still_erased_or_expired():
    """The filters read records with Python's JSON parser, which gives up past ~1,000 levels of
    nesting: such a record (valid: DuckDB loads it) was kept unread, so an erased session's
    record came back with each new file and an expired rating never went. It is read down to
    64 levels now: its subject and time decide, and at erase time a mention of the subject in
    the part cut off still removes it."""
    from datetime import datetime, timezone

    from dagster_project import privacy
    from dagster_project.sources.interactions import SOURCE as INTERACTIONS
    from dagster_project.sources.session_ratings import SOURCE as RATINGS

    def deep(record: dict, inner: str = "") -> bytes:
        return (json.dumps(record)[:-1] + ', "x": ' + "[" * 3000 + inner + "]" * 3000 + "}").encode()

    gone, kept = "sess-erased", "sess-kept"
    lines = [deep({"id": "i1", "session_id": gone}), deep({"id": "i2", "session_id": kept}),
             json.dumps({"id": "i3", "session_id": gone}).encode()]
    payload = b"\n".join(lines) + b"\n"
    erased = privacy.Matcher(INTERACTIONS, b"k", privacy.subject_keys(b"k", "session", gone))
    out = privacy.scrub_payload("span", payload, erased).split(b"\n")
    assert [line.strip() == b"" for line in out[:3]] == [True, False, True]
    assert erased.removed == 2 and erased.values == {"i1", "i3"}

    mention = privacy.Matcher(INTERACTIONS, b"k", set(), None, mention=gone)
    named_deep_down = deep({"id": "i4", "session_id": kept}, json.dumps(f"archive {gone}"))
    assert privacy.scrub_payload("span", named_deep_down + b"\n", mention).strip() == b""
    # a record read whole (just within Python's limit) whose mention check (json.dumps, a few
    # frames deeper) raised RecursionError; built here, as where parsing stops is not exact
    nested: list = []
    for _ in range(sys.getrecursionlimit() + 100):
        nested = [nested]
    record = {"id": "i5", "session_id": gone, "x": nested}
    raw = deep({"id": "i5", "session_id": gone})
    both = privacy.Matcher(INTERACTIONS, b"k", privacy.subject_keys(b"k", "session", gone), None, mention=gone)
    assert privacy._goes(both, record, raw) and both.removed == 1 and both.values == {"i5"}

    cutoff = datetime(2026, 3, 1, tzinfo=timezone.utc)
    expiring = privacy.Matcher(RATINGS, b"k", set(), cutoff)
    old = deep({"id": "r1", "recorded_at": "2026-02-06T10:00:00Z"})
    young = deep({"id": "r2", "recorded_at": "2026-03-06T10:00:00Z"})
    out = privacy.scrub_payload("span", old + b"\n" + young + b"\n", expiring).split(b"\n")
    assert [line.strip() == b"" for line in out[:2]] == [True, False]
    assert expiring.oldest_kept == datetime(2026, 3, 6, 10, tzinfo=timezone.utc)


def test_the_privacy_filters_read_numbers_odd_bytes_and_24_00_and_a_damaged_cache(settings):
    """A mention of an id written as a number still matches (the filters convert numbers, but for
    one of thousands of digits); a record that is not UTF-8 is read with replacement characters,
    so its time still counts; 24:00 is the next day's midnight; a damaged retention cache is
    ignored (every object read), never fatal."""
    from datetime import datetime, timezone

    from dagster_project import privacy
    from dagster_project.engine.bronze import Bronze
    from dagster_project.sources.session_ratings import SOURCE

    mention = privacy.Matcher(SOURCE, b"k", set(), None, mention="12345678")
    line = b'{"id": "x", "ticket": 12345678}\n'
    assert privacy.scrub_payload("span", line, mention) == b" " * (len(line) - 1) + b"\n"
    expiring = privacy.Matcher(SOURCE, b"k", set(), datetime(2026, 3, 1, tzinfo=timezone.utc))
    old = b'{"id": "r\xff", "recorded_at": "2026-02-06T10:00:00Z"}\n'
    assert privacy.scrub_payload("span", old, expiring) != old
    assert privacy.retention_time("2026-02-06T24:00:00Z") == datetime(2026, 2, 7, tzinfo=timezone.utc)
    store_ = Bronze(settings, "session_ratings")
    store_.dir.mkdir(parents=True)
    for damaged in ("[]", '{"version": 2, "field": "recorded_at", "objects": {"o": "not a time"}}', "{"):
        (store_.dir / privacy.RETENTION_CACHE).write_text(damaged)
        assert privacy._retention_cache(store_, SOURCE) == {}


def test_a_rating_whose_time_is_written_unpadded_expires_like_any_other(settings):
    """The classifier (DuckDB's cast) reads '2026-2-6T9:00:00Z'; the retention filter read times
    with ``datetime.fromisoformat``, which refuses it, so such a rating was never removed."""
    from dataclasses import replace
    from datetime import timedelta

    conn = store(settings.raw_dir / SESSIONS, [], journal="DELETE")
    young = (settings.run_date - timedelta(days=1)).isoformat() + "T10:00:00Z"
    for rid, at in (("old", "2026-2-6T9:00:00Z"), ("young", young)):
        conn.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, "
                     "recorded_date, label, turn_count_at_end, source, value) values (?,?,?,?,?,?,?,?,?)",
                     (rid, "ab" * 32, None, "2026-02-06T09:00:00Z", "2026-02-06", "positive", 3, "cli_end",
                      json.dumps({**json.loads(rating(rid, at=at)), "recorded_date": at[:10].replace("2026-2-6T9", "2026-02-06")})))
    conn.commit()
    conn.close()
    con, _ = ingest(settings, "run-1", sources=["session_ratings"])  # the fixture's window keeps both
    assert rows(con, "select id, recorded_at::varchar from raw.session_ratings order by id") == [
        ("old", "2026-02-06 09:00:00+00"), ("young", young.replace("T", " ").replace(":00Z", ":00+00"))]
    con.close()
    con, _ = ingest(replace(settings, session_retention_days=30), "run-2", sources=["session_ratings"])
    assert rows(con, "select id from raw.session_ratings") == [("young",)]
    con.close()


def test_a_retention_pass_reads_only_the_objects_that_may_hold_an_expired_record(settings, monkeypatch):
    """The earliest retention time each bronze object keeps is cached (objects are immutable):
    a pass whose cutoff is not past it reads no object and writes no marker; one whose cutoff is
    past it reads that object and removes what expired, from bronze and raw."""
    from dataclasses import replace
    from datetime import timedelta

    from dagster_project.engine import bronze as bronze_mod
    from dagster_project.engine.bronze import Bronze

    def at(days_ago):
        return (settings.run_date - timedelta(days=days_ago)).isoformat() + "T10:00:00Z"

    conn = store(settings.raw_dir / SESSIONS, [], journal="DELETE")
    for rid, days_ago in (("a", 40), ("b", 20)):
        conn.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, "
                     "recorded_date, label, turn_count_at_end, source, value) values (?,?,?,?,?,?,?,?,?)",
                     (rid, "ab" * 32, None, at(days_ago), at(days_ago)[:10], "positive", 3, "cli_end",
                      rating(rid, at=at(days_ago))))
    conn.commit()
    conn.close()
    read, markers = [], []
    payload, write = Bronze.payload, bronze_mod._atomic_write
    monkeypatch.setattr(Bronze, "payload", lambda self, e: read.append(e.object) or payload(self, e))
    monkeypatch.setattr(bronze_mod, "_atomic_write", lambda target, data: (
        markers.append(target) if "retention_pending" in str(target) else None, write(target, data))[1])

    def run(run_id, days):
        read.clear()
        markers.clear()
        con, _ = ingest(replace(settings, session_retention_days=days), run_id, sources=["session_ratings"])
        ids = [r[0] for r in rows(con, "select id from raw.session_ratings order by id")]
        con.close()
        return ids

    assert run("run-1", 60) == ["a", "b"]  # the pass ran before bronze held anything
    assert run("run-2", 60) == ["a", "b"] and len(read) == 1 and not markers  # read once: not cached yet
    assert run("run-3", 60) == ["a", "b"] and read == [] and not markers  # nothing may have expired
    assert run("run-4", 30) == ["b"] and read and len(markers) == 1  # "a" (40 days old) expired
    assert run("run-5", 30) == ["b"] and read == [] and not markers
    kept = Bronze(settings, "session_ratings")
    blob = b"".join(bytes(payload(kept, e)) for e in kept.entries() if e.object is not None)
    assert b'\\"a\\"' not in blob and b'\\"b\\"' in blob  # records JSON-encoded in a rows payload


def test_a_stored_record_that_is_a_blob_or_not_utf8_is_read_or_quarantined_under_its_key(settings):
    """A record bound as bytes (a BLOB of UTF-8 JSON, as ``orjson.dumps`` gives) is read as its
    text; one that is not UTF-8 is quarantined as ``invalid_utf8`` under its key, with its bytes.
    Either failed the source's ingest on every run (a BLOB) or made the whole store unreadable (a
    checksum or a fetch that could not decode it). The next run reads nothing again, and a replay
    from bronze gives the same tables. The eventlog's text columns holding a BLOB too."""
    from dagster_project.synth import EVENTLOG_DDL

    conn = store(settings.raw_dir / SESSIONS, ["r1"], journal="DELETE")
    insert = ("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, recorded_date, "
              "label, turn_count_at_end, source, value) values (?,?,?,?,?,?,?,?,?)")
    conn.execute(insert, ("r2", "ab" * 32, None, "2026-02-26T10:00:00Z", "2026-02-26", "positive", 3, "cli_end",
                          rating("r2").encode()))
    latin1 = rating("r3").replace("cli_end", "cl\u00ee_end").encode("latin-1")
    conn.execute(insert, ("r3", "ab" * 32, None, "2026-02-26T10:00:00Z", "2026-02-26", "positive", 3, "cli_end", latin1))
    conn.execute("update session_feedback set value = cast(value as text) where id = 'r3'")  # TEXT, not UTF-8
    conn.commit()
    assert conn.execute("select id, typeof(value) from session_feedback order by id").fetchall() == [
        ("r1", "text"), ("r2", "blob"), ("r3", "text")]
    conn.close()
    # a store in UTF-16 (PRAGMA encoding): its text is read as text, not as undecodable bytes
    utf16 = sqlite3.connect(settings.raw_dir / "sessions" / "utf16.sqlite3")
    utf16.execute("pragma encoding = 'UTF-16le'")
    utf16.execute(SESSION_DDL)
    utf16.execute(insert, ("r4", "ab" * 32, None, "2026-02-26T10:00:00Z", "2026-02-26", "positive", 3, "cli_end",
                           rating("r\u00ee4")))
    utf16.commit()
    utf16.close()
    log = settings.raw_dir / "eventlog" / "log.db"
    log.parent.mkdir()
    conn = sqlite3.connect(log)
    conn.execute(EVENTLOG_DDL.replace(",\n  CHECK(json_valid(data))", ""))
    conn.execute("insert into eventlog (event_type, timestamp, source_id, source_file, data) values (?,?,?,?,?)",
                 ("scry.query", "2026-02-26T10:00:00", "q1", None, b'{"query_id": "q1"}'))
    conn.commit()
    conn.close()

    con, reports = ingest(settings, "run-1", sources=["session_ratings", "eventlog"])
    assert rows(con, "select id, source from raw.session_ratings order by id") == [
        ("r1", "cli_end"), ("r2", "cli_end"), ("r\u00ee4", "cli_end")]
    assert rows(con, "select path, line_number, reason, raw_bytes from ingest.quarantine "
                     "where source = 'session_ratings'") == [(SESSIONS, 3, "invalid_utf8", latin1)]
    assert rows(con, "select data->>'query_id' from raw.eventlog") == [("q1",)]
    check_accounting(con)
    before = everything(con)
    con, reports = ingest(settings, "run-2", sources=["session_ratings"], con=con)
    assert [f.lines for f in reports["session_ratings"].files] == [0, 0]  # every key known, the reject's too
    con.close()
    settings.state_db.unlink()  # raw rebuilt from bronze alone
    con, _ = ingest(settings, "run-3", sources=["session_ratings", "eventlog"])
    assert everything(con) == before
    con.close()


def test_a_blob_in_a_utf16_eventlog_is_read_as_in_a_utf8_one(settings):
    """SQLite casts a BLOB to text in the store's encoding: in a UTF-16 store, a tool's UTF-8 bytes
    bound into a text column came out as other characters, silently. A UTF-16 store now gives the
    records a UTF-8 one gives: such bytes decoded as UTF-8; bytes that are not UTF-8 (two columns
    of one row here) quarantine the whole record as ``invalid_utf8`` under its key, with the same
    bytes, and an edit of the row's other columns is seen as one. A replay from bronze agrees."""
    from dagster_project.synth import EVENTLOG_DDL

    insert = "insert into eventlog (event_type, timestamp, source_id, source_file, data) values (?,?,?,?,?)"
    latin1 = b'{"query_id": "q\xee2"}'
    stores = {}
    for encoding in ("UTF-8", "UTF-16le"):
        stores[encoding] = settings.raw_dir / "eventlog" / f"{encoding}.db"
        stores[encoding].parent.mkdir(exist_ok=True)
        conn = sqlite3.connect(stores[encoding])
        conn.execute(f"pragma encoding = '{encoding}'")
        conn.execute(EVENTLOG_DDL.replace(",\n  CHECK(json_valid(data))", ""))
        for row in [("scry.query", "2026-02-26T10:00:00", "q\u00ee1".encode(), None, '{"query_id": "q\u00ee1"}'.encode()),
                    ("scry.query", "2026-02-26T10:01:00", b"q\xff\n2", None, latin1),
                    ("scry.query", "2026-02-26T10:02:00", "q\u00ee3", "f\u00ee.py", '{"query_id": "q\u00ee3"}')]:
            conn.execute(insert, row)
        conn.commit()
        assert conn.execute("select typeof(source_id), typeof(data) from eventlog order by seq").fetchall() == [
            ("blob", "blob"), ("blob", "blob"), ("text", "text")]
        conn.close()
    record = (b'{"seq":2,"event_type":"scry.query","timestamp":"2026-02-26T10:01:00","source_id":"q\xff\\n2",'
              b'"source_file":null,"data":"{\\"query_id\\": \\"q\xee2\\"}"}')

    con, _ = ingest(settings, "run-1", sources=["eventlog"])
    assert rows(con, "select path, source_id, data->>'query_id', source_file from raw.eventlog order by path, seq") == [
        (f"eventlog/{e}.db", s, s, f) for e in sorted(stores) for s, f in (("q\u00ee1", None), ("q\u00ee3", "f\u00ee.py"))]
    assert rows(con, "select path, line_number, reason, raw_bytes from ingest.quarantine order by path") == [
        (f"eventlog/{e}.db", 2, "invalid_utf8", record) for e in sorted(stores)]
    check_accounting(con)
    for db in stores.values():  # another column of the quarantined row edited in place
        conn = sqlite3.connect(db)
        conn.execute("update eventlog set source_file = 'g.py' where seq = 2")
        conn.commit()
        conn.close()
    con, reports = ingest(settings, "run-2", sources=["eventlog"], con=con)
    assert [f.lines for f in reports["eventlog"].files] == [1, 1]
    edited = record.replace(b'"source_file":null', b'"source_file":"g.py"')
    assert rows(con, "select path, raw_bytes from ingest.quarantine where run_id = 'run-2' order by path") == [
        (f"eventlog/{e}.db", edited) for e in sorted(stores)]
    before = everything(con)
    con, reports = ingest(settings, "run-3", sources=["eventlog"], con=con)
    assert [f.lines for f in reports["eventlog"].files] == [0, 0]
    con.close()
    settings.state_db.unlink()  # raw rebuilt from bronze alone
    con, _ = ingest(settings, "run-4", sources=["eventlog"])
    assert everything(con) == before
    con.close()


def test_a_symlinked_store_in_wal_mode_is_read_while_its_writer_holds_it_open(settings):
    """A tool keeps its store in its own directory, linked into the raw lake, in WAL mode with a
    connection it keeps open (no checkpoint yet): committed rows live in the target's -wal file.
    The signature looked for a -wal beside the link, so no commit changed it and the rows waited
    for a checkpoint (1,000 pages: thousands of ratings)."""
    target = settings.raw_dir.parent / "tool" / "session_feedback.sqlite3"
    writer = store(target, ["a1", "a2"])
    (settings.raw_dir / SESSIONS).parent.mkdir(parents=True)
    (settings.raw_dir / SESSIONS).symlink_to(target)
    con, _ = ingest(settings, "run-1", sources=["session_ratings"])
    for n, rid in enumerate(["b1", "b2"], start=2):
        add(writer, rid)
        writer.commit()
        assert target.with_name(target.name + "-wal").stat().st_size  # the rows are in the WAL
        con, _ = ingest(settings, f"run-{n}", sources=["session_ratings"], con=con)
        assert rows(con, "select count(*) from raw.session_ratings")[0][0] == n + 1
    writer.close()
    con.close()


def test_an_edit_deep_in_a_large_table_reads_only_its_key_range(settings):
    from dagster_project.engine.bronze import Bronze

    db = settings.raw_dir / SESSIONS
    conn = store(db, [f"k{i}" for i in range(1, 5001)])  # rowid i: ranges of 1,024 keys 0..4
    con, _ = ingest(settings, "run-1", sources=["session_ratings"])
    conn.execute("update session_feedback set value = ? where id = 'k1500'", [rating("k1500", "negative")])
    conn.execute("delete from session_feedback where id = 'k10'")
    add(conn, "k5001")
    conn.commit()
    conn.close()
    con, reports = ingest(settings, "run-2", sources=["session_ratings"], con=con)
    assert reports["session_ratings"].files[0].lines == 2  # the edited row and the new one
    last = [e for e in Bronze(settings, "session_ratings").entries() if e.kind == "rows"][-1]
    assert last.meta == {"rows": 2, "ranges_read": 3, "rows_compared": 5000 - 2048}  # ranges 2, 3 untouched
    assert rows(con, "select id, label, deleted_at_source is not null from staging.session_ratings "
                     "where id in ('k10', 'k1500', 'k5001') order by id") == [
        ("k10", "positive", True), ("k1500", "negative", False), ("k5001", "positive", False)]
    assert rows(con, "select lines_read, high_water_mark from ingest.files") == [(5002, 5001)]


def test_every_bronze_entry_records_the_sha256_of_the_bytes_it_stores(settings):
    """A span read from byte 0 was hashed whole by the reader and that digest is recorded for its
    entry; appended, rewritten and scrubbed (erased subject) bytes are hashed by bronze."""
    import hashlib

    from dagster_project import privacy
    from dagster_project.engine.bronze import Bronze

    folder = settings.raw_dir / "interactions"
    path = write_lines(folder / "interactions_2026-02-26_0000000a.jsonl", [dumps(interaction(i)) for i in range(5)])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    with path.open("ab") as fh:  # appended: a span that does not start at byte 0
        fh.write((dumps(interaction(7)) + "\n").encode())
    con, _ = ingest(settings, "run-2", sources=["interactions"], con=con)
    write_lines(path, [dumps(interaction(i)) for i in range(10, 12)])  # rewritten shorter: read again from 0
    secret = privacy._secret(settings)
    privacy._save_keys(settings, privacy.subject_keys(secret, "session", "erased-session"))
    write_lines(folder / "interactions_2026-02-27_0000000b.jsonl",
                [dumps(interaction(20, session_id="erased-session")), dumps(interaction(21))])
    con, _ = ingest(settings, "run-3", sources=["interactions"], con=con)
    store = Bronze(settings, "interactions")
    spans = [e for e in store.entries() if e.kind == "span"]
    assert [e.meta["start"] > 0 for e in spans] == [False, True, False, False]
    for e in spans:
        assert e.sha256 == hashlib.sha256(store.payload(e)).hexdigest(), (e.path, e.meta)
    scrubbed = bytes(store.payload(spans[-1]))
    assert b"erased-session" not in scrubbed and scrubbed.count(b"\n") == 2  # blanked in place
    con.close()


def test_an_object_is_compressed_a_frame_at_a_time_and_one_written_in_one_frame_still_replays(settings, monkeypatch):
    """A batch's object is its payload compressed as zstd frames of about ``FRAME_BYTES`` each
    (small parts gathered, large ones cut), never joined into one buffer first (that held the GIL
    ~0.2 s a batch); every entry reads back its bytes, and an object written as one frame, as
    before, replays into the same tables."""
    import pyarrow as pa

    from dagster_project.engine import bronze

    monkeypatch.setattr(bronze, "FRAME_BYTES", 1024)
    folder = settings.raw_dir / "interactions"
    files = [write_lines(folder / f"interactions_2026-02-2{d}_0000000{d}.jsonl",
                         [dumps(interaction(10 * d + i)) for i in range(8)]) for d in range(3)]
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    before = everything(con)
    con.close()
    store = bronze.Bronze(settings, "interactions")
    spans = [e for e in store.entries() if e.object is not None]
    assert sorted(bytes(store.payload(e)) for e in spans) == sorted(f.read_bytes() for f in files)
    [obj] = (store.root / "objects").glob("*/*.zst")
    blob = obj.read_bytes()
    payload = b"".join(f.read_bytes() for f in files)
    assert int.from_bytes(blob[:8], "little") == len(payload)
    # small parts are gathered into a frame, large ones cut: each file is over 1 KiB, so more
    # frames than files (the zstd frame magic number starts each)
    assert blob.count(b"\x28\xb5\x2f\xfd") > len(files)

    obj.write_bytes(len(payload).to_bytes(8, "little") + pa.compress(payload, "zstd", asbytes=True))  # one frame
    settings.state_db.unlink()
    con, reports = ingest(settings, "run-2", sources=["interactions"])
    assert reports["interactions"].replayed_entries >= len(spans)
    assert everything(con) == before
    con.close()


def test_an_object_is_named_by_its_parts_and_objects_named_by_their_whole_content_still_replay(settings):
    """An object is named from its parts' sha256 and length (its bytes are hashed once, by the
    reader), the same parts give the same name (written once) unless an object of that name holds
    other bytes, and a lake whose objects were named by the sha256 of their whole content, before,
    replays into the same tables."""
    import hashlib

    from dagster_project.engine.bronze import Bronze, object_name

    folder = settings.raw_dir / "interactions"
    write_lines(folder / "interactions_2026-02-26_0000000a.jsonl", [dumps(interaction(i)) for i in range(4)])
    write_lines(folder / "interactions_2026-02-27_0000000b.jsonl", [dumps(interaction(i)) for i in range(4, 7)])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    before = everything(con)
    con.close()
    store = Bronze(settings, "interactions")
    spans = [e for e in store.entries() if e.object is not None]
    assert len(spans) == 2 and len({e.object for e in spans}) == 1
    name = spans[0].object
    assert name == object_name([(e.sha256, e.length) for e in spans])
    assert name != object_name([(e.sha256, e.length) for e in reversed(spans)])  # the parts' order counts
    objects = sorted((store.root / "objects").glob("*/*.zst"))
    assert [o.name for o in objects] == [f"{name}.zst"]
    written = objects[0].stat().st_mtime_ns
    again = store.entries()
    for e in again:
        e.data = store.payload(e)
    store.write(again)  # the same parts again: the object is kept
    assert objects[0].stat().st_mtime_ns == written
    assert sorted((store.root / "objects").glob("*/*.zst")) == objects

    # Parts whose bytes changed after their digest was taken (a file rewritten in place between
    # its read and the write): the object of that name holds other bytes, so these bytes are
    # stored under the sha256 of their own content, and each name reads back what it was given.
    raced = store.entries()
    for e in raced:
        e.data = bytes(store.payload(e)).replace(b"read a file", b"READ A FILE")
    assert raced[0].data != bytes(store.payload(spans[0]))
    Bronze(settings, "scratch").write(raced)  # its own segment: the interactions' stay as they are
    content = b"".join(e.data for e in raced)
    assert {e.object for e in raced} == {hashlib.sha256(content).hexdigest()}
    assert all(bytes(Bronze(settings, "scratch").payload(e)) == e.data for e in raced)
    assert bytes(Bronze(settings, "interactions").payload(spans[0])) != raced[0].data  # the first object kept
    assert len(list((store.root / "objects").glob("*/*.zst"))) == 2

    # the layout before: the object named by the sha256 of its uncompressed content
    content = b"".join(bytes(store.payload(e)) for e in sorted(spans, key=lambda e: e.offset))
    old = hashlib.sha256(content).hexdigest()
    (store.root / "objects" / old[:2]).mkdir(exist_ok=True)
    objects[0].rename(store.root / "objects" / old[:2] / f"{old}.zst")
    for segment in store.dir.glob("*.jsonl"):
        segment.write_text(segment.read_text().replace(name, old))
    settings.state_db.unlink()
    con, reports = ingest(settings, "run-2", sources=["interactions"])
    assert reports["interactions"].replayed_entries >= 2
    assert everything(con) == before
    con.close()


def test_a_state_from_before_the_bronze_record_is_rebuilt_only_when_confirmed(settings):
    """An older version kept raw rows and no bronze record of them. A replay (a full refresh, a
    changed declaration, a retention pass) rebuilds raw from bronze: the rows of files the
    producer had deleted since were lost, with a message saying nothing is lost. The run is
    refused, raw untouched, until confirmed; then raw is rebuilt from the files as they are."""
    import shutil
    from dataclasses import replace

    import duckdb

    from dagster_project.engine import LegacyStateError
    from dagster_project.engine.bronze import bronze_dir
    from dagster_project.pipeline import forget_files

    logs = settings.raw_dir / "interactions"
    write_lines(logs / "interactions_2026-02-26_00000001.jsonl", [dumps(interaction(i)) for i in range(3)])
    gone = write_lines(logs / "interactions_2026-02-26_00000002.jsonl", [dumps(interaction(i)) for i in range(3, 5)])
    con, _ = ingest(settings, sources=["interactions"])
    # what an older version left: raw rows, no bronze record
    con.execute("delete from ingest.bronze_applied")
    shutil.rmtree(bronze_dir(settings))
    gone.unlink()  # the producer rotated a file away
    for full_refresh in (False, True):
        with pytest.raises(LegacyStateError) as refused:
            ingest(settings, "run-2", sources=["interactions"], con=con, full_refresh=full_refresh)
        assert str(refused.value) == (
            f"source interactions: raw.interactions in {settings.state_db} holds 5 rows an older version read before "
            "the lake kept a bronze record of them; this version rebuilds raw from that record, so the rows of files "
            f"deleted or rewritten since would be lost: copy {settings.state_dir} aside, then run once with "
            "FLYWHEEL_LEGACY_REBUILD=1, which rebuilds raw from the producers' files as they are now (the rows of "
            "files no longer there are dropped)")
        assert rows(con, "select count(*) from raw.interactions") == [(5,)]
    con.close()
    with pytest.raises(LegacyStateError):  # `quarantine replay` resets the sources it replays first
        forget_files(settings, [("interactions", "interactions/interactions_2026-02-26_00000001.jsonl")])
    con = duckdb.connect(str(settings.state_db))
    assert rows(con, "select count(*) from raw.interactions") == [(5,)]
    confirmed = replace(settings, legacy_rebuild=True)
    con, _ = ingest(confirmed, "run-3", sources=["interactions"], con=con)
    assert rows(con, "select count(*) from raw.interactions") == [(3,)]
    con, _ = ingest(settings, "run-4", sources=["interactions"], con=con, full_refresh=True)  # bronze holds them
    assert rows(con, "select count(*) from raw.interactions") == [(3,)]


def test_a_missing_bronze_object_stops_a_rebuild_before_raw_is_emptied(settings):
    """An object of the bronze record deleted by hand: a full refresh emptied raw, then failed on
    the missing file (a bare FileNotFoundError), and so did every run after it. The rebuild is
    refused before raw is touched, in one line naming the object; incremental runs read on."""
    from dataclasses import replace

    from dagster_project.engine.bronze import object_path
    import duckdb

    from dagster_project.pipeline import run_pipeline

    settings = replace(settings, pseudonym_key="test-key")
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_00000001.jsonl",
                [dumps(interaction(i)) for i in range(3)])
    assert run_pipeline(settings).success
    [gone] = [object_path(settings.state_dir / "bronze", e.object) for e in
              Bronze(settings, "interactions").entries() if e.object]
    gone.unlink()
    refused = run_pipeline(settings, full_refresh=True)
    assert not refused.success
    assert dict(refused.failures)["ingest__interactions"] == (
        f"source interactions: 1 object(s) of the lake's bronze record are missing ({gone}): rebuilding raw from it "
        f"would lose their records, so raw.interactions and staging are kept as they are; restore "
        f"{settings.state_dir / 'bronze' / 'objects'} from a backup (incremental runs read on without them)")
    con = duckdb.connect(str(settings.state_db), read_only=True)
    assert con.execute("select count(*) from raw.interactions").fetchone() == (3,)
    con.close()
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_00000001.jsonl",
                [dumps(interaction(3))], mode="ab")
    assert run_pipeline(settings).success
    # retention needs the object holding its expired records: named in one line too (review)
    store(settings.raw_dir / "sessions" / "session_feedback.sqlite3", ["r1", "r2"]).close()
    assert run_pipeline(settings).success
    [gone] = [object_path(settings.state_dir / "bronze", e.object) for e in
              Bronze(settings, "session_ratings").entries() if e.object]
    gone.unlink()
    expiring = run_pipeline(replace(settings, session_retention_days=1, retention_confirm=1))
    assert not expiring.success
    assert dict(expiring.failures)["ingest__session_ratings"] == (
        f"source session_ratings: object {gone} of the lake's bronze record is missing: retention or an erasure "
        f"cannot remove the records it held; restore {settings.state_dir / 'bronze' / 'objects'} from a backup")


def test_ratings_past_the_window_when_first_read_are_counted_once(settings):
    """A rating already past the retention window when first read is kept out of bronze, and was
    kept out without a word; counted, the same rating was counted again each time its store's
    key range was read again (an append), and after a retention pass (review)."""
    from dataclasses import replace
    from datetime import date

    import duckdb

    from dagster_project.pipeline import run_pipeline

    settings = replace(settings, pseudonym_key="test-key", as_of=date(2026, 11, 1), session_retention_days=180)
    path = settings.raw_dir / "sessions" / "session_feedback.sqlite3"
    conn = store(path, ["r1", "r2", "r3"])  # recorded 2026-02-26: past the window as of 2026-11-01 ...
    conn.execute("update session_feedback set recorded_at = ?, recorded_date = '2026-10-30', value = ? "
                 "where id = 'r3'", ["2026-10-30T10:00:00Z", rating("r3", at="2026-10-30T10:00:00Z")])  # ... but r3
    conn.commit()
    conn.close()

    def retention() -> list[int]:
        con = duckdb.connect(str(settings.state_db), read_only=True)
        try:
            return [r[0] for r in con.execute("select bronze_rows from ingest.erasures where kind = 'retention' "
                                              "order by erased_at").fetchall()]
        finally:
            con.close()

    first = run_pipeline(settings)
    assert first.success and retention() == [2]
    store(path, ["r4"]).close()  # one more old rating: the key range holding r1 and r2 is read again
    assert run_pipeline(settings).success and retention() == [2, 1]
    assert run_pipeline(settings, full_refresh=True).success and retention() == [2, 1]
    con = duckdb.connect(str(settings.state_db), read_only=True)
    assert con.execute("select id from raw.session_ratings").fetchall() == [("r3",)]
    con.close()
