"""What raw directories look like on users' machines: odd file names, stores in directories we
may not write, clocks and copies that set mtimes back, a FIFO where a file was. Each is read (or
reported and retried) like any other file, and never stops the source or the run."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import dumps, ingest, interaction, rows, run_dying, unprivileged, write_lines
from test_bronze import store

LOGS = "interactions"


def test_a_session_store_whose_name_has_uri_characters_is_read(settings):
    """SQLite opens a store by URI: a `#`, `?` or `%` in the path ended the URI early, so the
    store was reported corrupt and never read, and SQLite created an empty file at the cut-off
    name, in the producer's directory."""
    names = ["a#2.sqlite3", "b%41.sqlite3", "c?x.sqlite3"]
    for i, name in enumerate(names):
        store(settings.raw_dir / "sessions" / name, [f"r{i}"]).close()
    before = sorted(os.listdir(settings.raw_dir / "sessions"))
    con, reports = ingest(settings, sources=["session_ratings"])
    assert sorted(f.event for f in reports["session_ratings"].files) == ["new"] * 3
    assert rows(con, "select path, id from raw.session_ratings order by id") == [
        (f"sessions/{name}", f"r{i}") for i, name in enumerate(names)]
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    # nothing created beside them (but the -wal and -shm files SQLite keeps beside a WAL store)
    assert sorted(n for n in os.listdir(settings.raw_dir / "sessions") if not n.endswith(("-wal", "-shm"))) == before


def test_a_file_name_that_is_not_utf8_is_read_under_an_escaped_name(settings):
    """A name's bytes that are not UTF-8 reached DuckDB as lone surrogates: the source's whole
    ingest failed (UnicodeEncodeError, no file named) on every run until the file was renamed."""
    logs = settings.raw_dir / LOGS
    write_lines(logs / "interactions_2026-02-26_00000001.jsonl", [dumps(interaction(1))])
    odd = Path(os.fsdecode(bytes(logs) + b"/interactions_2026-02-26_\xff\xfe.jsonl"))
    write_lines(odd, [dumps(interaction(2)), dumps(interaction(3))])
    con, reports = ingest(settings, sources=["interactions"])
    assert rows(con, "select path, count(*) from raw.interactions group by all order by all") == [
        ("interactions/interactions_2026-02-26_00000001.jsonl", 1),
        ("interactions/interactions_2026-02-26_\\xff\\xfe.jsonl", 2)]
    with odd.open("ab") as fh:  # read on under the same name
        fh.write((dumps(interaction(4)) + "\n").encode())
    con, reports = ingest(settings, "run-2", sources=["interactions"], con=con)
    assert {f.path: f.event for f in reports["interactions"].files} == {
        "interactions/interactions_2026-02-26_00000001.jsonl": "unchanged",
        "interactions/interactions_2026-02-26_\\xff\\xfe.jsonl": "appended"}
    assert rows(con, "select count(*) from staging.interactions") == [(4,)]


def test_a_wal_store_in_a_directory_we_may_not_write_is_unreadable_then_read(settings, open_tmp):
    """SQLite reads a store in WAL mode only where its -shm file exists or can be created: in a
    directory of another user, or on a read-only mount, the open fails. That was taken for a
    corrupt store, and as the store's signature did not change, it stayed unread after access
    came back. It is now ``unreadable``, retried each run. (As root, the run that may not write
    runs without the two capabilities that let root past any mode.)"""
    from dataclasses import replace

    settings = replace(settings, raw_dir=open_tmp / "raw")
    tool = settings.raw_dir / "sessions"
    store(tool / "session_feedback.sqlite3", ["r1", "r2"]).close()  # WAL; closed: no -shm left
    assert sorted(os.listdir(tool)) == ["session_feedback.sqlite3"]
    tool.chmod(0o555)
    done = run_dying(settings, "", run_id="run-1", sources=("session_ratings",), wrapper=unprivileged())
    tool.chmod(0o755)
    assert done.returncode == 0, done.stderr
    con, reports = ingest(settings, "run-2", sources=["session_ratings"])
    assert [f.event for f in reports["session_ratings"].files] == ["new"]
    assert rows(con, "select run_id, event from ingest.file_events") == [("run-1", "unreadable")]
    assert rows(con, "select id from raw.session_ratings order by 1") == [("r1",), ("r2",)]
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    con.close()


def test_a_partial_last_line_is_not_sealed_when_the_mtime_is_set_back(settings):
    """A partial last line is sealed once the lake has seen the file unchanged for
    FLYWHEEL_SEAL_AFTER. A known file whose mtime was set back (`touch -d`, a copy keeping
    times) took its mtime as when it changed: the line was sealed at once, quarantined, and its
    rest, written next, quarantined too: the record lost in two halves."""
    path = write_lines(settings.raw_dir / LOGS / "interactions_2026-02-26_00000001.jsonl",
                       [dumps(interaction(1)), dumps(interaction(2))[:30]], newline_at_end=False)
    con, _ = ingest(settings, sources=["interactions"])
    assert rows(con, "select rows_loaded, deferred_bytes from ingest.files") == [(1, 30)]
    old = time.time() - 3 * settings.seal_after_seconds
    os.utime(path, (old, old))
    con, _ = ingest(settings, "run-2", sources=["interactions"], con=con)
    assert rows(con, "select rows_loaded, rows_quarantined, deferred_bytes from ingest.files") == [(1, 0, 30)]
    with path.open("ab") as fh:  # the writer finishes the line
        fh.write((dumps(interaction(2))[30:] + "\n").encode())
    con, _ = ingest(settings, "run-3", sources=["interactions"], con=con)
    assert rows(con, "select id from staging.interactions order by 1") == [
        (interaction(1)["id"],), (interaction(2)["id"],)]
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]


def test_a_fifo_put_where_a_listed_file_was_is_unreadable_and_never_waited_on(settings):
    """A file replaced by a FIFO between the listing and the read: opening it waited for a writer
    for good, the run holding the writer lock. It is reported unreadable, the run goes on."""
    logs = settings.raw_dir / LOGS
    write_lines(logs / "interactions_2026-02-26_00000001.jsonl", [dumps(interaction(1))])
    write_lines(logs / "interactions_2026-02-26_00000002.jsonl", [dumps(interaction(2))])
    ingest(settings, sources=["interactions"])[0].close()
    write_lines(logs / "interactions_2026-02-26_00000002.jsonl", [dumps(interaction(3))], mode="ab")
    done = run_dying(settings, """
from dagster_project.engine import engine as _engine
_listing = _engine.listing
def _racing(spec, raw_dir, unlisted=None, **kw):
    found = _listing(spec, raw_dir, unlisted, **kw)
    for _, real in found:
        if real.endswith("_00000002.jsonl"):
            os.unlink(real)
            os.mkfifo(real)
    return found
_engine.listing = _racing
""", run_id="run-2", timeout=60)
    assert done.returncode == 0, done.stderr
    con, _ = ingest(settings, "run-3", sources=["interactions"])  # (the FIFO is not listed: missing)
    assert rows(con, "select run_id, path, event from ingest.file_events order by all") == [
        ("run-2", "interactions/interactions_2026-02-26_00000002.jsonl", "unreadable"),
        ("run-3", "interactions/interactions_2026-02-26_00000002.jsonl", "missing")]
    assert rows(con, "select count(*) from staging.interactions") == [(2,)]


def test_a_source_directory_that_may_not_be_listed_is_warned_about_as_such(open_tmp):
    """A source whose directory may not be listed found no file, and the warning said "no files
    match": the user looked for a typo in a glob. It now names the directory and why."""
    import subprocess
    import sys

    base = open_tmp
    logs = base / "raw" / LOGS
    write_lines(logs / "interactions_2026-02-26_00000001.jsonl", [dumps(interaction(1))])
    logs.chmod(0o311)  # searched, not listed
    shown = subprocess.run([*unprivileged(), sys.executable, "-c", f"""
import sys; sys.path.insert(0, {os.getcwd()!r})
from dagster_project.pipeline import source_warnings
from dagster_project.settings import Settings
settings = Settings.from_env({{"FLYWHEEL_RAW_DIR": {str(base / "raw")!r}, "FLYWHEEL_WAREHOUSE": {str(base / "w.duckdb")!r}}})
print([w for w in source_warnings(settings) if w.startswith("source interactions:")][0])
"""], capture_output=True, text=True, timeout=60)
    logs.chmod(0o755)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == (f"source interactions: interactions/ under {base / 'raw'} may not be listed "
                                    "(permission denied): none of its files read")


def test_a_partial_last_line_is_sealed_on_time_when_only_its_files_inode_moves(settings):
    """A file restored or copied into place (same bytes, same mtime, a new inode; a mount without
    stable inodes) is the file the lake read: its partial last line is sealed when its quiet
    period ends, not waited for again from each run that sees the inode move."""
    path = write_lines(settings.raw_dir / LOGS / "interactions_2026-02-26_00000001.jsonl",
                       [dumps(interaction(1)), dumps(interaction(2))[:30]], newline_at_end=False)
    start = time.time()
    con, _ = ingest(settings, sources=["interactions"], now=start)
    for i, hours in enumerate((1, 2 * settings.seal_after_seconds / 3600)):
        copy = path.with_name(".restored")
        shutil.copy2(path, copy)  # bytes and times kept, another inode
        os.replace(copy, path)
        con, _ = ingest(settings, f"run-{i + 2}", sources=["interactions"], con=con, now=start + hours * 3600)
    assert rows(con, "select rows_loaded, rows_quarantined, deferred_bytes from ingest.files") == [(1, 1, 0)]
    assert rows(con, "select reason from ingest.quarantine") == [("unterminated_last_line",)]


def test_an_escaped_file_name_that_is_another_files_real_name_is_refused(settings):
    """A name's bytes that are not UTF-8 are stored escaped (``\\xff``): a file really named so
    (a backslash, x, f, f) had the same stored path, and the two were read in turn as each
    other's rewrites, raw growing on every run. The run is refused, naming both."""
    from dagster_project.pipeline import source_warnings
    from dagster_project.settings import SettingsError

    logs = settings.raw_dir / LOGS
    odd = Path(os.fsdecode(bytes(logs) + b"/interactions_2026-02-26_\xff.jsonl"))
    write_lines(odd, [dumps(interaction(1))])
    literal = write_lines(logs / "interactions_2026-02-26_\\xff.jsonl", [dumps(interaction(2))])
    with pytest.raises(SettingsError) as refused:
        source_warnings(settings)
    assert refused.value.problems == [
        f"source interactions: {literal} and a file whose name is not UTF-8 would both be stored as "
        "interactions/interactions_2026-02-26_\\xff.jsonl (bytes that are not UTF-8 are stored escaped as \\xNN): "
        "rename one of them"]


def test_a_store_an_earlier_reader_took_for_corrupt_is_read_once_more(settings, monkeypatch):
    """A lake an earlier version read has the stores it could not open (a `#` in the name, a WAL
    store in a directory it might not write) recorded as corrupt, and a corrupt store is skipped
    while it does not change: upgrading left them unread for good. Such a store is read once more."""
    import sqlite3

    from dagster_project.engine.readers import sqlite as reader

    store(settings.raw_dir / "sessions" / "a#2.sqlite3", ["r1", "r2"]).close()
    real = reader._snapshot

    def earlier(view, table, known_ranges):  # what the earlier reader's URI opened
        raise sqlite3.OperationalError("no such table: session_feedback")

    monkeypatch.setattr(reader, "_snapshot", earlier)
    monkeypatch.setattr(reader, "CORRUPT_READER", None)  # its states carry no reader
    con, reports = ingest(settings, sources=["session_ratings"])
    assert [f.event for f in reports["session_ratings"].files] == ["corrupt"]
    monkeypatch.setattr(reader, "_snapshot", real)
    monkeypatch.setattr(reader, "CORRUPT_READER", 2)
    con, reports = ingest(settings, "run-2", sources=["session_ratings"], con=con)
    assert rows(con, "select id from raw.session_ratings order by 1") == [("r1",), ("r2",)]
    con, reports = ingest(settings, "run-3", sources=["session_ratings"], con=con)
    assert [f.event for f in reports["session_ratings"].files] == ["unchanged"]


EVENTLOG_COLUMNS = {"seq": "integer primary key autoincrement", "event_type": "text not null",
                    "timestamp": "text not null", "source_id": "text not null", "source_file": "text",
                    "data": "text not null"}


def _eventlog_store(path: Path, columns: dict[str, str], rows_: list[dict]) -> None:
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute(f"create table eventlog ({', '.join(f'{c} {t}' for c, t in columns.items())})")
    for row in rows_:
        db.execute(f"insert into eventlog ({', '.join(row)}) values ({', '.join('?' * len(row))})", list(row.values()))
    db.commit()
    db.close()


def _commit_event(i: int) -> dict:
    sha = f"{i:040x}"
    return {"event_type": "git.commit", "timestamp": f"2026-02-0{i}T10:00:00+00:00", "source_id": sha,
            "source_file": ".git", "data": json.dumps({"sha": sha, "message": f"commit {i}", "files": []})}


def test_an_eventlog_store_lacking_a_declared_column_is_read_by_the_columns_it_has(settings):
    """SQLite takes a double-quoted name that is no column for a string: a store without
    ``source_id`` loaded the text "source_id" as every row's value (its six commits one identity:
    staging kept one), one without ``source_file`` the text "source_file". A missing column is
    now missing from the record (``missing_field`` when required, NULL when optional); a column
    the source does not declare is not read, as before (a record holding it would differ from
    the one every lake read: each store with one re-read whole)."""
    logs = settings.raw_dir / "eventlog"
    no_sha = {c: t for c, t in EVENTLOG_COLUMNS.items() if c != "source_id"} | {"sha": "text"}
    _eventlog_store(logs / "no_source_id.db", no_sha,
                    [{**{k: v for k, v in _commit_event(i).items() if k != "source_id"}, "sha": f"{i:040x}"}
                     for i in range(1, 7)])
    no_file = {c: t for c, t in EVENTLOG_COLUMNS.items() if c != "source_file"}
    _eventlog_store(logs / "no_source_file.db", no_file,
                    [{k: v for k, v in _commit_event(i).items() if k != "source_file"} for i in (7, 8)])
    con, reports = ingest(settings, sources=["eventlog"])
    assert rows(con, "select path, reason, count(*) from ingest.quarantine group by all order by all") == [
        ("eventlog/no_source_id.db", "missing_field:source_id", 6)]
    assert rows(con, "select source_id, source_file, extra from raw.eventlog order by seq") == [
        (f"{i:040x}", None, None) for i in (7, 8)]
    assert "source_id" not in str(rows(con, "select * from staging.eventlog"))  # no column's name as a value
    assert rows(con, "select count(*) from ingest.quarantine where raw_text like '%\"sha\"%'") == [(0,)]
    (record,) = rows(con, "select raw_text from ingest.quarantine order by line_number limit 1")[0]
    assert sorted(json.loads(record)) == ["data", "event_type", "seq", "source_file", "timestamp"]


def test_an_eventlog_store_without_its_key_column_is_unreadable_and_the_others_load(settings):
    """A store without ``seq`` read every row's key as the text "seq": the source's ingest failed
    (bytes are not JSON serializable) on every run, the other stores unread, nothing published."""
    logs = settings.raw_dir / "eventlog"
    _eventlog_store(logs / "good.db", EVENTLOG_COLUMNS, [_commit_event(1)])
    no_seq = {"id": "integer primary key"} | {c: t for c, t in EVENTLOG_COLUMNS.items() if c != "seq"}
    _eventlog_store(logs / "no_seq.db", no_seq, [_commit_event(i) for i in (2, 3)])
    con, reports = ingest(settings, sources=["eventlog"])
    assert {f.path: f.event for f in reports["eventlog"].files} == {
        "eventlog/good.db": "new", "eventlog/no_seq.db": "corrupt"}
    assert rows(con, "select source_id from raw.eventlog") == [(f"{1:040x}",)]
    (detail,) = rows(con, "select detail from ingest.file_events where path = 'eventlog/no_seq.db'")[0]
    assert detail.startswith("table eventlog has no column seq (its key); its columns: id, event_type"), detail
    # a column the tool adds later is not read: the rows already read keep their records
    import sqlite3

    db = sqlite3.connect(logs / "good.db")
    db.execute("alter table eventlog add column cwd text default '/home/alice/repo'")
    db.execute("insert into eventlog (event_type, timestamp, source_id, source_file, data) values (?, ?, ?, ?, ?)",
               list(_commit_event(4).values()))
    db.commit()
    db.close()
    con, reports = ingest(settings, "run-2", sources=["eventlog"], con=con)
    assert {f.path: f.event for f in reports["eventlog"].files}["eventlog/good.db"] == "appended"
    assert rows(con, "select count(*) from ingest.file_events where run_id = 'run-2' and path = 'eventlog/good.db'") == [(0,)]
    assert rows(con, "select source_id, extra from raw.eventlog order by seq") == [(f"{1:040x}", None), (f"{4:040x}", None)]
