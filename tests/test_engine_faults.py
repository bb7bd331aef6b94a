"""The engine's fast paths keep its guarantees: bronze is durable before raw commits (it is
written on another thread while DuckDB classifies), a lake's stored paths do not depend on how
its files were found, and an unchanged file is not read past its last consumed block."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from conftest import dumps, ingest, interaction, rows, run_dying, write_lines
from dagster_project.engine import bronze_usage, discover, stored_path
from dagster_project.engine.bronze import Bronze
from dagster_project.sources import builtin_sources

INTERACTIONS = "interactions/interactions_2026-02-26_0000000f.jsonl"


def test_killed_while_bronze_is_written_loses_nothing_and_counts_nothing_twice(settings):
    write_lines(settings.raw_dir / INTERACTIONS, [dumps(interaction(i)) for i in range(3)])
    # the object is on disk, its manifest segment is not: raw must not have committed either
    crash = run_dying(settings, """
real_write = bronze._atomic_write
def die_before_segment(target, data):
    if target.suffix == ".jsonl":
        os.kill(os.getpid(), 9)
    real_write(target, data)
bronze._atomic_write = die_before_segment
""")
    assert crash.returncode == -9, crash.stderr
    assert bronze_usage(settings)["objects"] == 1 and bronze_usage(settings)["segments"] == 0
    con, reports = ingest(settings, "run-2", sources=["interactions"])
    assert reports["interactions"].replayed_entries == 0
    assert reports["interactions"].files[0].event == "new"  # read again: bronze never named it
    assert rows(con, "select count(*), count(distinct id), min(ingest_run_id) from raw.interactions") == [
        (3, 3, "run-2")]
    assert rows(con, "select lines_read, rows_loaded from ingest.files") == [(3, 3)]
    assert [e.kind for e in Bronze(settings, "interactions").entries()] == ["span"]


def test_a_failed_bronze_write_commits_nothing_to_raw(settings):
    write_lines(settings.raw_dir / INTERACTIONS, [dumps(interaction(i)) for i in range(3)])
    failed = run_dying(settings, """
def full(self, entries):
    raise OSError(28, "No space left on device")
bronze.Bronze.write = full
""")
    assert failed.returncode == 1 and "No space left on device" in failed.stderr
    assert bronze_usage(settings)["objects"] == 0
    con, reports = ingest(settings, "run-2", sources=["interactions"])
    assert reports["interactions"].files[0].event == "new"
    assert rows(con, "select count(*), min(ingest_run_id) from raw.interactions") == [(3, "run-2")]
    assert rows(con, "select lines_read, rows_loaded from ingest.files") == [(3, 3)]


def test_stored_paths_do_not_depend_on_links(settings, tmp_path):
    """Discovery resolves each directory once; a linked file, a linked directory and a linked raw
    root are stored under the same path ``stored_path`` gives each file on its own."""
    spec = builtin_sources()["interactions"]
    elsewhere = tmp_path / "elsewhere"
    write_lines(settings.raw_dir / INTERACTIONS, [dumps(interaction(1))])
    write_lines(elsewhere / "interactions_2026-02-27_00000010.jsonl", [dumps(interaction(2))])
    write_lines(elsewhere / "inner" / "interactions_2026-02-28_00000011.jsonl", [dumps(interaction(3))])
    (settings.raw_dir / "interactions" / "interactions_2026-02-27_00000010.jsonl").symlink_to(
        elsewhere / "interactions_2026-02-27_00000010.jsonl")
    (settings.raw_dir / "interactions" / "interactions_2026-03-01_dangling.jsonl").symlink_to(elsewhere / "gone")
    (settings.raw_dir / "linked").symlink_to(elsewhere / "inner")
    linked_root = tmp_path / "root-link"
    linked_root.symlink_to(settings.raw_dir)
    spec = replace(spec, globs=(*spec.globs, "linked/*.jsonl"))

    for root in (settings.raw_dir, linked_root):
        found = discover(spec, root)
        assert found == sorted((stored_path(real, root), real) for _, real in found)
        assert [p for p, _ in found] == [
            str(elsewhere / "inner" / "interactions_2026-02-28_00000011.jsonl"),
            str(elsewhere / "interactions_2026-02-27_00000010.jsonl"),
            INTERACTIONS,
        ]


@pytest.mark.parametrize("deferred", [False, True])
def test_an_unchanged_file_is_not_read(settings, monkeypatch, deferred):
    """A file whose size, mtime, inode and last consumed block are unchanged is skipped with one
    small read; a partial last line due for sealing still reads it."""
    from dagster_project.engine.readers import jsonl

    path = write_lines(settings.raw_dir / INTERACTIONS, [dumps(interaction(i)) for i in range(3)],
                       newline_at_end=not deferred)
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    opened, real_read = [], jsonl.read
    monkeypatch.setattr(jsonl, "read", lambda view, fh: opened.append(view.real) or real_read(view, fh))
    later = os.path.getmtime(path) + settings.seal_after_seconds + 1
    con, reports = ingest(settings, "run-2", sources=["interactions"], con=con, now=later)
    assert opened == ([path] if deferred else [])
    assert reports["interactions"].files[0].event == ("sealed" if deferred else "unchanged")
    assert rows(con, "select lines_read, rows_loaded, rows_quarantined from ingest.files") == [
        (3, 2 + (not deferred), int(deferred))]


@pytest.mark.parametrize("window", [None, 1000])  # the reader's default, or a span every ~2 lines
@pytest.mark.parametrize("lines", [1, 148, 200])  # 148 lines fit one tail block, 149 do not
def test_recorded_tail_hash_is_the_last_consumed_block(settings, monkeypatch, lines, window):
    """For a file within one tail block the prefix hash is reused as the tail hash: both must be
    the sha256 of the last consumed block, however the file was read (at once or appended to, in
    one window or in many, the tail block then assembled from many spans), and the spans are the
    file's bytes, each line once."""
    import hashlib

    from dagster_project.engine.readers import TAIL_CHECK_BYTES, jsonl

    if window:
        monkeypatch.setattr(jsonl, "CHUNK_BYTES", window)
    path = write_lines(settings.raw_dir / INTERACTIONS, [dumps(interaction(i)) for i in range(lines)])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    with path.open("ab") as fh:
        fh.write(dumps(interaction(lines)).encode() + b"\n" + b'{"partial": ')
    con, _ = ingest(settings, "run-2", sources=["interactions"], con=con)
    data = path.read_bytes()
    for entry, end in zip([e for e in Bronze(settings, "interactions").entries() if e.state],
                          [len(data) - len(b'{"partial": ') - len(dumps(interaction(lines))) - 1,
                           len(data) - len(b'{"partial": ')]):
        assert entry.state["offset"] == end
        assert entry.state["tail_sha"] == hashlib.sha256(data[max(0, end - TAIL_CHECK_BYTES):end]).hexdigest()
        assert entry.state["prefix_sha"] == hashlib.sha256(data[:end]).hexdigest()
    kept = Bronze(settings, "interactions")
    spans = [e for e in kept.entries() if e.kind == "span"]
    assert b"".join(bytes(kept.payload(e)) for e in spans) == data[:len(data) - len(b'{"partial": ')]
    assert len(spans) > lines // 4 if window else len(spans) == 2  # (a line is 439 bytes)
    assert rows(con, "select count(*), count(distinct line_number) from raw.interactions") == [(lines + 1, lines + 1)]


def test_more_new_files_than_the_process_may_hold_open_are_all_read_in_one_run(settings):
    """A batch once kept each new file's bytes mapped, each map holding a file descriptor: with
    300 new files and a limit of 64 open files (hard: the run cannot raise it), the run read ~50
    and called the rest "unreadable: Too many open files". A batch holds no file open now (each
    file's new bytes are read into memory): every file is read, in one run."""
    for day in range(300):
        write_lines(settings.raw_dir / f"interactions/interactions_2026-02-26_{day:08x}.jsonl",
                    [dumps(interaction(day * 2)), dumps(interaction(day * 2 + 1))])
    done = run_dying(settings, """
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
""", run_id="run-1")
    assert done.returncode == 0, done.stderr
    con, reports = ingest(settings, "run-2", sources=["interactions"])
    assert {f.event for f in reports["interactions"].files} == {"unchanged"}
    assert rows(con, "select count(*), count(distinct id), min(ingest_run_id), max(ingest_run_id) "
                     "from raw.interactions") == [(600, 600, "run-1", "run-1")]
    assert rows(con, "select count(*) from ingest.file_events where event = 'unreadable'") == [(0,)]


def test_a_commit_that_cannot_write_its_log_fails_with_its_own_error(tmp_path):
    """A commit whose write-ahead log cannot be written (a full disk; here the file-size limit, a
    real write failing in DuckDB) ends its transaction: the rollback after it raised "cannot
    rollback - no transaction is active", the only error the step reported."""
    import subprocess
    import sys

    script = """
import os, resource, signal, sys
import duckdb
from transforms.sqlfiles import transaction
con = duckdb.connect(sys.argv[1])
con.execute("create table t (s varchar)")
con.execute("checkpoint")
limit = os.path.getsize(sys.argv[1]) + 100_000
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
with transaction(con):
    con.execute("insert into t select repeat('x', 1000) || i from range(20000) r(i)")
"""
    db = tmp_path / "state.duckdb"
    failed = subprocess.run([sys.executable, "-c", script, str(db)], capture_output=True, text=True, timeout=120,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert failed.returncode == 1
    last = failed.stderr.strip().splitlines()[-1]
    assert f'Failed to commit: Could not write file "{db}.wal": File too large' in last, failed.stderr


def test_a_bronze_write_that_fails_names_where(tmp_path):
    """A write to an open file names no file: a full disk under bronze was a bare "[Errno 28] No
    space left on device" on the step's line. (The file-size limit fails the write for real.)"""
    import subprocess
    import sys

    script = """
import resource, signal, sys
from pathlib import Path
from dagster_project.engine.bronze import _durable_temp
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
_durable_temp(Path(sys.argv[1]), b"x" * 5000)
"""
    failed = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                            timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines()[-1].startswith(f"OSError: [Errno 27] File too large: '{tmp_path}/.tmp-")
    assert list(tmp_path.iterdir()) == []  # no temp file left


def test_a_failing_checkpoint_is_said_once_until_one_succeeds(tmp_path):
    """Each state connection a run closes checkpoints; on a full disk every one failed and the same
    warning stood two or three times in one run's output. Said once per failure streak, nothing
    committed lost. (The file-size limit makes the checkpoint's growth of the database fail for
    real while the write-ahead log, smaller than the limit, still takes the commits.)"""
    import subprocess
    import sys

    script = """
import os, resource, signal, sys
from pathlib import Path
from dagster_project.settings import Settings
from dagster_project.state import state_connection
root = Path(sys.argv[1])
(root / "raw").mkdir()
os.environ.update(FLYWHEEL_RAW_DIR=str(root / "raw"), FLYWHEEL_WAREHOUSE=str(root / "warehouse.duckdb"),
                  FLYWHEEL_EXPORT_DIR=str(root / "exports"))
settings = Settings.from_env()
with state_connection(settings) as con:
    con.execute("create table t as select repeat('x', 200) || i as s from range(50000) r(i)")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
def limit(n):
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, resource.RLIM_INFINITY))
def append():
    with state_connection(settings) as con:
        con.execute("insert into t select md5(i::varchar) || i from range(5000) r(i)")
limit(os.path.getsize(settings.state_db) + 200_000)
for _ in range(3):
    append()
limit(resource.RLIM_INFINITY)
with state_connection(settings) as con:
    print(con.execute("select count(*) from t").fetchone()[0])
limit(os.path.getsize(settings.state_db) + 200_000)
append()
"""
    ran = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["65000"]  # three failed checkpoints lost no commit
    warnings = ran.stderr.strip().splitlines()
    assert len(warnings) == 2, ran.stderr  # the first failure, then the first after a success
    assert all(w.startswith(f"warning: {tmp_path}/.flywheel/state.duckdb: the checkpoint failed (") and
               "File too large" in w for w in warnings), ran.stderr


def test_a_failed_parquet_write_says_its_file_and_cause_in_plain_text(tmp_path):
    """DuckDB nests the cause of a failed Parquet write as JSON in its message: a full export disk
    put `{"exception_type":"IO","exception_message":"Could not write file \\"…\\": …","errno":"28"}`
    on the step's line. ``plain_error`` (which the step's line and the CLI's one-line errors go
    through) keeps DuckDB's own words around it and the nested message alone. (The file-size
    limit fails the write for real.)"""
    import subprocess
    import sys

    from transforms.sqlfiles import plain_error

    script = """
import resource, signal, sys
import duckdb
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
try:
    duckdb.connect().execute(f"copy (select md5(i::varchar) s from range(100000) r(i)) to '{sys.argv[1]}' (format parquet)")
except duckdb.IOException as exc:
    print(exc)
"""
    target = tmp_path / "sft.parquet"
    ran = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, text=True, timeout=120)
    said = ran.stdout.strip()
    assert '"exception_message"' in said, said  # DuckDB's text, as a step raised it
    plain = plain_error(said)
    assert plain.startswith("IO Error: "), plain
    assert plain.endswith(f': Could not write file "{target}": File too large'), plain
    assert "{" not in plain and "errno" not in plain
    assert plain_error("Binder Error: column {x} not found") == "Binder Error: column {x} not found"
    assert plain_error('A: {"exception_type":"IO","exception_message":"m1"} in {part}; '
                       'B: {"exception_type":"IO","exception_message":"m2","errno":"28"}') == "A: m1 in {part}; B: m2"
    assert plain_error('C: {"exception_type" cut short') == 'C: {"exception_type" cut short'
