"""The writer's side of the warehouse: one lock, one state database, run bookkeeping.

DuckDB allows one writing process, and any connection from another process (even read-only)
blocks it. So the pipeline never writes what analysts open: it works in a private state
database (``<warehouse dir>/.flywheel/state.duckdb``) under an exclusive file lock, and
publishes it as a snapshot of Parquet files plus a small views-only warehouse file
(``publishing.publish_snapshot``). Analysts can keep the warehouse open; the next connection
sees the new snapshot.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from dagster_project.settings import Settings


# The runs and steps that write the state database carry this tag: ``.dagster_home/dagster.yaml``
# lets one such run at a time (the writer lock below stops any other), and run-history retention
# (``history.prune_runs``) counts only the runs tagged with it.
WRITER_TAGS = {"flywheel/warehouse": "writer"}


class WarehouseBusy(RuntimeError):
    pass


class RunInterrupted(RuntimeError):
    """A step whose statements were interrupted because the run was (Ctrl-C, a termination)."""


class _Held:
    """The writer lock as this process holds it: the open lock file and how many hold it."""

    def __init__(self, fh) -> None:
        self.fh, self.depth = fh, 1


_held: dict[str, _Held] = {}  # lock path -> the lock this process holds (re-entrant, any thread)
_held_guard = threading.Lock()  # guards _held; held while taking the file lock, so one thread waits


@contextmanager
def writer_lock(settings: Settings, wait_seconds: float = 600) -> Iterator[None]:
    """Hold the exclusive writer lock; wait for another run to finish, then give up loudly.

    Re-entrant within a process and across its threads, so ``flywheel run`` can hold it for a
    whole run while each asset takes it again (a second ``flock`` on a new descriptor would
    block on ourselves); whoever leaves last releases it.
    """
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    lock_path = writer_lock_path(settings)
    key = str(lock_path.resolve())
    with _held_guard:
        held = _held.get(key)
        if held is not None:
            held.depth += 1
        else:
            _held[key] = _acquire(lock_path, wait_seconds)
    try:
        yield
    finally:
        with _held_guard:
            held = _held[key]
            held.depth -= 1
            if not held.depth:
                del _held[key]
                held.fh.seek(0)
                held.fh.truncate()
                fcntl.flock(held.fh, fcntl.LOCK_UN)
                held.fh.close()


def writer_lock_path(settings: Settings) -> Path:
    """The writer lock's file; while held it names its holder (``pid N since T``)."""
    return settings.state_dir / "writer.lock"


def writer_activity(settings: Settings) -> tuple[str, str] | None:
    """Who writes the lake, from the writer lock, for ``flywheel status`` (which never opens the
    state database): ``("writing", holder)`` while a process holds the lock; ``("gone", holder)``
    when no process holds it but the file still names a holder, whom a release would have
    erased (killed by ``kill -9``, the OOM killer, a reboot: its run is recorded failed only by
    the next run or the ``flywheel_dead_runs`` sensor); None otherwise. Takes the lock shared
    for an instant, never waits (a writer starting in that instant retries 0.2 s later)."""
    lock_path = writer_lock_path(settings)
    with _held_guard:
        if str(lock_path.resolve()) in _held:  # this process writes (its own lock would look taken)
            return None
    try:
        fh = open(lock_path, "rb")
    except OSError:  # no lock file (no writer ever ran) or not ours to read: nothing to say
        return None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return "writing", fh.read().decode("utf-8", "replace").strip() or "another process"
        try:  # no writer can write the file while we hold the lock shared
            holder = fh.read().decode("utf-8", "replace").strip()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    return ("gone", holder) if holder else None


def _acquire(lock_path: Path, wait_seconds: float) -> _Held:
    fh = open(lock_path, "a+")
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    fh.seek(0)
                    holder = fh.read().strip() or "another process"
                    raise WarehouseBusy(
                        f"{lock_path}: the warehouse is being written by {holder}; "
                        f"gave up after {wait_seconds:.0f} s"
                    ) from exc
                time.sleep(0.2)
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} since {datetime.now(timezone.utc).isoformat(timespec='seconds')}")
        fh.flush()
        return _Held(fh)
    except BaseException:
        fh.close()
        raise


class _Shared:
    """The state connection of an in-process run and, for every other thread that uses it, a
    cursor of its own: a DuckDB connection is not to be used by two threads at once, while two
    connections to one database run their transactions side by side (``executor``)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con, self.owner = con, threading.get_ident()
        self.local = threading.local()
        self.cursors: list[duckdb.DuckDBPyConnection] = []
        self.guard = threading.Lock()

    def for_this_thread(self) -> duckdb.DuckDBPyConnection:
        if threading.get_ident() == self.owner:
            return self.con
        cursor = getattr(self.local, "cursor", None)
        if cursor is None:
            cursor = self.local.cursor = _cursor(self.con)
            self.add(cursor)
        return cursor

    def add(self, cursor: duckdb.DuckDBPyConnection) -> None:
        """A cursor the run's interrupt reaches (``interrupt``) and its end closes."""
        with self.guard:
            self.cursors.append(cursor)

    def remove(self, cursor: duckdb.DuckDBPyConnection) -> None:
        with self.guard:
            if cursor in self.cursors:
                self.cursors.remove(cursor)

    def interrupt(self) -> None:
        """Interrupt what the other threads' cursors are executing (their step then fails)."""
        with self.guard:
            for cursor in self.cursors:
                cursor.interrupt()

    def close_cursors(self) -> None:
        with self.guard:
            for cursor in self.cursors:
                cursor.close()
            self.cursors.clear()


_shared: dict[str, _Shared] = {}  # state db -> the connection of an in-process run


_interrupted = threading.Event()  # set when the run's statements were interrupted


def is_shared(settings: Settings) -> bool:
    """Whether this process holds a run's shared connection to ``settings``' state database."""
    return os.path.abspath(settings.state_db) in _shared


def interrupt_statements() -> None:
    """Interrupt the statements the steps on other threads are executing (an interrupted run)."""
    _interrupted.set()
    for shared in list(_shared.values()):
        shared.interrupt()


@contextmanager
def side_cursors(con: duckdb.DuckDBPyConnection, n: int) -> Iterator[list[duckdb.DuckDBPyConnection]]:
    """``n`` more connections to ``con``'s database, for statements a step runs beside its own on
    other threads (each with its own transactions and temp objects; in ``con``'s time zone, which
    decides how a time prints and which day it falls on). An interrupted run interrupts them too;
    they are closed on leaving."""
    owner = next((shared for shared in _shared.values()
                  if shared.con is con or any(c is con for c in shared.cursors)), None)
    zone = con.execute("select current_setting('TimeZone')").fetchone()[0]
    cursors: list[duckdb.DuckDBPyConnection] = []
    try:
        for _ in range(n):
            cursors.append(_cursor(con, zone))
            if owner is not None:
                owner.add(cursors[-1])
        yield cursors
    finally:
        for cursor in cursors:
            if owner is not None:
                owner.remove(cursor)
            cursor.close()


def _cursor(con: duckdb.DuckDBPyConnection, zone: str = "UTC") -> duckdb.DuckDBPyConnection:
    """A new connection to ``con``'s database (a cursor of it), its session in time zone ``zone``."""
    cursor = con.cursor()
    try:
        cursor.execute("set TimeZone = '" + zone.replace("'", "''") + "'")
    except BaseException:
        cursor.close()
        raise
    return cursor


@contextmanager
def shared_state(settings: Settings) -> Iterator[None]:
    """One connection for a whole in-process run: each step uses it (a step on another thread,
    a cursor of it) rather than opening the database and checkpointing it again (~40 ms a
    step). Holds the writer lock throughout; a step run anywhere else (``dg launch``, another
    process) opens its own as before."""
    key = os.path.abspath(settings.state_db)
    with state_connection(settings) as con:  # opened before it is shared: a connection of its own
        shared = _Shared(con)
        _shared[key] = shared
        _interrupted.clear()
        try:
            yield
        finally:
            _shared.pop(key, None)
            shared.close_cursors()
            _interrupted.clear()


@contextmanager
def state_connection(settings: Settings, *, lock: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection to the state database, under the writer lock."""
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    shared = _shared.get(os.path.abspath(settings.state_db)) if lock else None
    if shared is not None:
        con = shared.for_this_thread()
        with writer_lock(settings):
            try:
                yield con
            except BaseException as exc:
                _rollback(con)  # a step that failed mid-transaction must not poison the next
                if _interrupted.is_set() and isinstance(exc, duckdb.Error):
                    raise RunInterrupted("interrupted (Ctrl-C or a termination signal): its unfinished "
                                         "transaction was rolled back") from exc
                raise
        return
    guard = writer_lock(settings) if lock else _nothing()
    with guard:
        con = duckdb.connect(str(settings.state_db))
        try:
            con.execute("set TimeZone = 'UTC'")
            yield con
            _checkpoint(con, settings)
        finally:
            con.close()


_failed_checkpoints: set[str] = set()  # state databases whose last checkpoint failed (warned once)
_checkpoints_guard = threading.Lock()  # (a run's step threads close connections at once)


def _checkpoint(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """Fold the write-ahead log into the database. What was committed is in the log, which the
    next open replays: a checkpoint that fails (a full disk) loses nothing, so it fails nothing
    (a run that had published exited 1 with a traceback, saying nothing was published). It is
    said once until a checkpoint succeeds again: each connection a run closes tried again, and the
    same warning stood two or three times in one run's output."""
    key = os.path.abspath(settings.state_db)
    try:
        con.execute("checkpoint")
    except duckdb.Error as exc:
        with _checkpoints_guard:
            said = key in _failed_checkpoints
            _failed_checkpoints.add(key)
        if not said:
            first = str(exc).strip().splitlines()[0]
            print(f"warning: {settings.state_db}: the checkpoint failed ({first}); what was committed is "
                  "kept in its write-ahead log, which the next run replays", file=sys.stderr, flush=True)
    else:
        with _checkpoints_guard:
            _failed_checkpoints.discard(key)


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("rollback")
    except duckdb.Error:  # no transaction open: the usual case
        pass


@contextmanager
def _nothing() -> Iterator[None]:
    yield


_run_row = threading.Lock()  # steps on two threads update the run's one row: one at a time


def record_run(con: duckdb.DuckDBPyConnection, run_id: str, *, mode: str, source: str | None = None,
               counts: dict[str, int] | None = None, status: str = "running",
               error: str | None = None, warnings: list[str] | None = None) -> None:
    """Create or update the ``ingest.runs`` row of ``run_id``; counts and warnings accumulate.
    Each statement commits on its own, under ``_run_row``: two steps updating the row at once
    would conflict (DuckDB aborts the second transaction).

    An update, then an insert when the run has no row yet: ``insert … on conflict do update``
    cost 4.3 ms where the update costs 0.9 ms, and a run records itself ten times."""
    counts = counts or {}
    params = {"run": run_id, "mode": mode, "status": status, "source": source,
              "files_seen": counts.get("files_seen", 0), "files_changed": counts.get("files_changed", 0),
              "lines": counts.get("lines", 0), "loaded": counts.get("loaded", 0),
              "quarantined": counts.get("quarantined", 0), "blank": counts.get("blank", 0),
              "deferred": counts.get("deferred_bytes", 0), "error": error, "warnings": list(warnings or [])}
    with _run_row:
        _record(con, params)


def _record(con: duckdb.DuckDBPyConnection, params: dict) -> None:
    sources = "case when $source is null then []::varchar[] else [$source] end"
    updated = con.execute(
        f"""
        update ingest.runs set
            mode = case when $mode = 'full_refresh' then $mode else mode end,
            status = case when status = 'failed' then status else $status end,
            sources = list_distinct(list_concat(sources, {sources})),
            files_seen = files_seen + $files_seen,
            files_changed = files_changed + $files_changed,
            lines_read = lines_read + $lines,
            rows_loaded = rows_loaded + $loaded,
            rows_quarantined = rows_quarantined + $quarantined,
            blank_lines = blank_lines + $blank,
            deferred_bytes = deferred_bytes + $deferred,
            error = coalesce($error, error),
            warnings = list_distinct(list_concat(coalesce(warnings, []), $warnings::varchar[])),
            finished_at = case when $status in ('success', 'failed') then now() else finished_at end
        where run_id = $run
        """, params).fetchone()[0]
    if updated:
        return
    con.execute(
        f"""
        insert into ingest.runs (run_id, started_at, mode, status, sources, files_seen,
            files_changed, lines_read, rows_loaded, rows_quarantined, blank_lines, deferred_bytes, error, warnings,
            finished_at)
        values ($run, now(), $mode, $status, {sources},
            $files_seen, $files_changed, $lines, $loaded, $quarantined, $blank, $deferred, $error,
            $warnings::varchar[], case when $status in ('success', 'failed') then now() end)
        """, params)


# ``flywheel status`` lists the newest runs from this file beside the state database: the
# published warehouse holds the run log as of the last publish, so a run that published nothing
# (nothing changed, or it failed) was not listed. Written when a run ends (its snapshot step, or
# ``mark_failed``); a reader never opens the state database (any connection from another
# process blocks the next run).
RECENT_RUNS = "recent_runs.json"
RUN_FIELDS = ("run_id", "mode", "status", "started_at", "finished_at", "lines_read", "rows_loaded",
              "rows_quarantined", "snapshot_status", "error")
EVENTS_KEPT = 100  # per run: a directory whose mode changed makes every file in it an event
# File events that leave a file unread for the run, its earlier rows kept: retried next run
# (unreadable, locked), when it changes (a corrupt SQLite store), or waited for (a JSON array cut short)
NOT_READ = ("unreadable", "locked", "corrupt", "waiting")


def save_recent_runs(con: duckdb.DuckDBPyConnection, settings: Settings, keep: int = 10) -> str | None:
    """Write ``RECENT_RUNS``: the newest ``keep`` runs, each with its first file events (a file
    missing, unreadable, locked: no row changes, so nothing is published that would show them).
    A display cache: a failure to write it is returned as a warning, never raised (the run has
    published)."""
    import json

    from dagster_project.engine.bronze import _atomic_write
    from transforms.sqlfiles import table_columns

    try:
        present = table_columns(con, "ingest.runs") or {}
        columns = ", ".join(c if c in present else f"null as {c}" for c in RUN_FIELDS)
        rows = con.execute(f"select {columns} from ingest.runs order by started_at desc limit ?", [keep]).fetchall()
        runs = [{k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in zip(RUN_FIELDS, row)} for row in rows]
        events: dict[str, list] = {}
        totals: dict[str, int] = {}
        for run_id, source, path, event, detail, n in con.execute(
                "select run_id, source, path, event, detail, n from ("
                # the files a run could not read first: status alone lists them
                "select *, row_number() over (partition by run_id order by "
                "list_contains($not_read::varchar[], event) desc, occurred_at, path) as k, "
                "count(*) over (partition by run_id) as n "
                "from ingest.file_events where run_id in (select unnest($runs::varchar[]))) where k <= $kept "
                "order by run_id, k",
                {"runs": [r["run_id"] for r in runs], "kept": EVENTS_KEPT, "not_read": list(NOT_READ)}).fetchall():
            events.setdefault(run_id, []).append([source, path, event, detail])
            totals[run_id] = n
        for run in runs:
            run["events"], run["events_total"] = events.get(run["run_id"], []), totals.get(run["run_id"], 0)
        _atomic_write(settings.state_dir / RECENT_RUNS, json.dumps(runs, indent=1).encode("utf-8"))
    except (OSError, duckdb.Error) as exc:
        return f"{settings.state_dir / RECENT_RUNS} not written ({exc}): `flywheel status` lists runs up to the last publish"
    return None


PENDING_FAILURES = "failed_runs"  # under the state dir: failures the next run records (``pipeline.mark_failed``)


def pending_failures(settings: Settings) -> list[dict]:
    """The failed runs ``ingest.runs`` does not hold yet (another run held it, or it could not be
    written: a full disk), newest first, as ``recent_runs`` gives runs: `flywheel status` showed
    the last success while every run failed on a full disk."""
    import json

    runs = []
    for path in (settings.state_dir / PENDING_FAILURES).glob("*.json"):
        try:
            failure = json.loads(path.read_text(encoding="utf-8"))
            at = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat()
        except (OSError, ValueError):
            continue
        if isinstance(failure, dict) and failure.get("run_id"):
            runs.append({**dict.fromkeys(RUN_FIELDS), "run_id": failure["run_id"], "mode": failure.get("mode"),
                         "status": "failed", "started_at": at, "error": failure.get("error")})
    return sorted(runs, key=lambda r: r["started_at"], reverse=True)


def recent_runs(settings: Settings) -> list[dict] | None:
    """The runs ``save_recent_runs`` wrote, newest first; None when there is no such file (a state
    from before it) or it cannot be read."""
    import json

    try:
        runs = json.loads((settings.state_dir / RECENT_RUNS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return runs if isinstance(runs, list) else None
