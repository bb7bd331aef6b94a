"""Run-history retention: Dagster's record of the pipeline's runs is kept for the newest
``FLYWHEEL_KEEP_RUNS`` finished runs; older ones are deleted after each run.

Why: every run adds ~1.8 MB to the Dagster instance (its event log shard, ~360 events, and their
copies in the asset index), a no-op included, and Dagster never removes any. A daily schedule
grows it by ~650 MB a year; the new-file sensor can start a run a minute while producers write.
The pipeline's own ledger of every run (``ingest.runs``: mode, status, error, snapshot) and
everything a run published are not touched: only Dagster's step-by-step history of old runs goes.

Only finished runs (success, failure, cancelled) tagged as the pipeline's (``state.WRITER_TAGS``: CLI,
schedule and sensor runs) are counted and deleted; a queued or running run, and runs of other
jobs sharing the instance, are never touched. Every run materializes every asset (a reused table
reports its reuse), so the newest run always holds each asset's latest materialization.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import dagster as dg
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable

from dagster_project.state import WRITER_TAGS

# Deleting a run costs ~60 ms on SQLite: a long backlog (a lowered setting, a first upgrade) is
# removed over several runs, none held up by more than a few seconds.
MAX_PER_CALL = 100
FAILED_RUNS_STAY = timedelta(minutes=10)
FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


@dataclass(frozen=True)
class Pruned:
    runs: int  # runs deleted
    bytes: int  # bytes of their event log shards removed from disk


def prune_runs(instance: dg.DagsterInstance, keep: int) -> Pruned:
    """Delete the pipeline's finished runs beyond the newest ``keep`` (0: keep every run) from
    ``instance``, the oldest first and at most ``MAX_PER_CALL``: their run record, events,
    captured logs and, on SQLite, their shard file."""
    if keep <= 0:
        return Pruned(0, 0)
    ids = instance.get_run_ids(filters=dg.RunsFilter(tags=WRITER_TAGS, statuses=FINISHED))  # newest first
    # a run that failed lately stays until the failure sensor has recorded its error (it skips
    # runs it cannot find), whatever ``keep``
    recent = set(instance.get_run_ids(filters=dg.RunsFilter(
        tags=WRITER_TAGS, statuses=[dg.DagsterRunStatus.FAILURE],
        updated_after=datetime.now(timezone.utc) - FAILED_RUNS_STAY)))
    old = [run_id for run_id in ids[keep:][::-1] if run_id not in recent][:MAX_PER_CALL]
    freed = 0
    storage = instance.event_log_storage
    path_for_shard = getattr(storage, "path_for_shard", None)
    index_connection = getattr(storage, "index_connection", None)
    for run_id in old:
        instance.delete_run(run_id)
        if index_connection is not None:  # delete_run leaves the run's asset check evaluations
            with index_connection() as conn:
                conn.execute(AssetCheckExecutionsTable.delete().where(AssetCheckExecutionsTable.c.run_id == run_id))
        try:
            instance.compute_log_manager.delete_logs(prefix=[run_id])
        except NotImplementedError:  # a log manager that cannot delete keeps them
            pass
        if path_for_shard is not None:
            # SQLite keeps a deleted run's shard file (empty tables): remove it and its WAL files
            for path in (shard := path_for_shard(run_id), f"{shard}-wal", f"{shard}-shm"):
                try:
                    freed += os.stat(path).st_size
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            # this process's storage remembers the shard as created: a later read of the run
            # (none found) would open an empty file and fail on its missing tables
            getattr(storage, "_initialized_dbs", set()).discard(run_id)
    return Pruned(len(old), freed)


# ---------------------------------------------------------------------------------------------
# Runs whose process is gone
# ---------------------------------------------------------------------------------------------

# "<host>:<pid>" of the process that held the writer lock for a run: added once it holds it, with
# the run's own id (a run re-executed from another copies its tags: the copy names the parent).
HOLDER_TAG = "flywheel/writer_process"
HOLDER_RUN_TAG = "flywheel/writer_run"
IN_PROGRESS = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def host() -> str:
    """This machine, as ``holder`` names it."""
    import socket

    return socket.gethostname()


def holder() -> str:
    """This process: ``host:pid@start`` (``process_start``; ``host:pid`` where unknown)."""
    start = process_start(os.getpid())
    return f"{host()}:{os.getpid()}" + (f"@{start}" if start else "")


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (Linux: ``/proc/<pid>/stat``, field
    22); None when unknown. A pid alone names whichever process holds it now: a container's or a
    rebooted machine's processes take the same small pids again, and a dead run taken for alive
    held the one-run limit, queueing every scheduled and sensor run behind it for good."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()  # after "pid (comm) ": field 3 on (comm may hold anything)
    return fields[19].decode() if len(fields) > 19 else None


def shown(process: str) -> str:
    """``host:pid`` of a ``holder``, for messages."""
    return process.partition("@")[0]


def holder_tags(run_id: str) -> dict[str, str]:
    return {HOLDER_TAG: holder(), HOLDER_RUN_TAG: run_id}


def dead_runs(instance: dg.DagsterInstance, exclude: str | None = None) -> list[dg.DagsterRun]:
    """The pipeline's runs still in progress in ``instance`` whose writer process, on this host,
    is gone: killed (``kill -9``, the OOM killer, a reboot) while it held the writer lock, a run
    stays STARTED for good, and the one-run-at-a-time limit queued every later scheduled and
    sensor run behind it, silently. A run not tagged by itself (it never held the lock; a
    re-execution carries its parent's tags) or whose process lives is left alone."""
    return [run for run in instance.get_runs(filters=dg.RunsFilter(tags=WRITER_TAGS, statuses=IN_PROGRESS))
            if run.run_id != exclude and killed(run)]


def process_gone(process: str) -> bool:
    """``host:pid@start`` (``holder``) names a process of this host that no longer exists: no
    process has the pid, or the one that has it started at another time (the pid was reused).
    Another host's, or a malformed name, is never taken as gone; without a start (a tag written
    before it was noted, or no ``/proc``) the pid alone decides."""
    noted_host, _, named = process.rpartition(":")
    pid, _, start = named.partition("@")
    if noted_host != host() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    now = process_start(int(pid)) if start else None
    return now is not None and now != start


def killed(run: dg.DagsterRun) -> str | None:
    """How ``run`` ended, if its own process is gone (it tagged itself: ``holder_tags``): the
    line ``ingest.runs`` records for it, whoever failed it (Dagster's run monitor said only "This
    run has been marked as failed from outside the execution context")."""
    process = run.tags.get(HOLDER_TAG, "")
    if run.tags.get(HOLDER_RUN_TAG) != run.run_id or not process_gone(process):
        return None
    return killed_line(process)


def killed_line(process: str) -> str:
    return f"killed while it ran (its process {shown(process)} is gone)"


def report_dead(instance: dg.DagsterInstance, runs: list[dg.DagsterRun]) -> None:
    for run in runs:
        instance.report_run_failed(run, f"its process ({shown(run.tags[HOLDER_TAG])}) is gone: killed while it ran")
