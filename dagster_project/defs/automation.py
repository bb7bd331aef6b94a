"""The job that runs the whole pipeline, its daily schedule, and the new-file sensor."""


import hashlib
import json
import os

import dagster as dg

from dagster_project.engine.discovery import listing
from dagster_project.executor import threaded_executor
from dagster_project.history import killed, prune_runs
from dagster_project.resources import FlywheelResource
from dagster_project.settings import Settings
from dagster_project.sources import load_sources
from dagster_project.state import WRITER_TAGS

# Every run writes the same DuckDB state database: its tag (WRITER_TAGS) is limited to one run at a
# time in .dagster_home/dagster.yaml, and the assets also take a file lock, so runs never overlap.
flywheel_job = dg.define_asset_job(
    "flywheel_job",
    selection=dg.AssetSelection.all(),
    description="Ingest every source, stage, build marts and exports, validate, publish.",
    tags=WRITER_TAGS,
    executor_def=threaded_executor,
)

# A run the schedule or the sensor starts that crashes (its worker killed, the machine or the
# container restarted: Dagster fails it, or the dead-runs sensor does) is retried once, whole, by
# the daemon (``run_retries`` in .dagster_home/dagster.yaml): the sensor's cursor has moved past
# the files it was started for, so they waited until a producer wrote again. A run that failed in
# a step (a blocking check, a bad setting) is not: the same run would fail the same way. Not on
# the job: a `flywheel run` that failed is the user's to run again.
RETRY_TAGS = {"dagster/max_retries": "1", "dagster/retry_on_asset_or_op_failure": "false",
              "dagster/retry_strategy": "ALL_STEPS"}

daily_schedule = dg.ScheduleDefinition(
    name="flywheel_daily",
    job=flywheel_job,
    cron_schedule="0 3 * * *",
    execution_timezone="UTC",
    tags=RETRY_TAGS,
    description="The whole pipeline every day at 03:00 UTC (picks up anything the sensor missed).",
    # off until turned on (UI, `dg`): a daemon (`make ui`) would otherwise run the sample lake as
    # of today, and retention would erase its ratings, older than 180 days, from the lake for good
    default_status=dg.DefaultScheduleStatus.STOPPED,
)


def lake_fingerprint(settings: Settings) -> dict[str, dict]:
    """Per source: how many files it claims and a sha256 of each one's path, size and mtime, in
    path order. A file that appears, grows, is rewritten or vanishes changes its source's digest.

    The sensor keeps this as its cursor: a few hundred bytes however many files the lake holds
    (it kept every file's size and mtime: ~5 MB at 60,000 files, read and written each minute)."""
    fingerprint = {}
    for spec in load_sources(settings.sources_file).values():
        files = []
        for path, real in listing(spec, settings.raw_dir):  # in path order
            try:
                stat = os.stat(real)
            except OSError:  # gone since it was listed: as if it had not been there
                continue
            files.append((path, stat.st_size, stat.st_mtime_ns))
            if spec.format == "sqlite":
                # a store in WAL mode commits into its -wal file, not the store (the reader
                # looks at both; the sensor missed every such commit until a checkpoint)
                try:
                    wal = os.stat(f"{real}-wal")
                    files.append((f"{path}-wal", wal.st_size, wal.st_mtime_ns))
                except OSError:
                    pass
        fingerprint[spec.name] = _digest(files)
    return fingerprint


def _digest(files: list[tuple[str, int, int]]) -> dict:
    """A source's entry: its number of files and a sha256 of their (path, size, mtime), which
    ``files`` lists in path order."""
    digest = hashlib.sha256()
    for path, size, mtime_ns in files:
        digest.update(f"{path}\0{size}\0{mtime_ns}\n".encode())
    return {"files": len(files), "digest": digest.hexdigest()}


_NO_FILES = _digest([])  # a source not seen before


def _previous(cursor: str | None) -> tuple[dict[str, dict], int]:
    """The fingerprint a cursor holds and how many runs the sensor requested. A cursor of the
    earlier sensor (every file's ``"source:path": [size, mtime]``) is digested the same way, so
    upgrading starts no run while the lake still holds the files it lists."""
    if not cursor:
        return {}, 0
    stored = json.loads(cursor)
    if "sources" in stored and isinstance(stored["sources"], dict):
        return stored["sources"], int(stored.get("requests", 0))
    by_source: dict[str, list[tuple[str, int, int]]] = {}
    for key, (size, mtime_ns) in stored.items():
        source, _, path = key.partition(":")
        by_source.setdefault(source, []).append((path, size, mtime_ns))
    return {source: _digest(sorted(files)) for source, files in by_source.items()}, 0


@dg.sensor(
    name="flywheel_new_files",
    job=flywheel_job,
    minimum_interval_seconds=60,
    description="Requests a run when a raw file appears, grows, changes or vanishes. The cursor "
    "holds a digest of each source's files (path, size, mtime), so an unchanged lake never "
    "triggers a run.",
    default_status=dg.DefaultSensorStatus.STOPPED,
)
def new_files_sensor(context: dg.SensorEvaluationContext, flywheel: FlywheelResource):
    current = lake_fingerprint(flywheel.settings())
    previous, requests = _previous(context.cursor)
    changed = sorted(name for name, now in current.items() if previous.get(name, _NO_FILES) != now)
    if not changed:
        files = sum(source["files"] for source in current.values())
        return dg.SkipReason(f"no new or changed files among {files:,}")
    # The request's number is part of its run key: a lake back in an earlier state (a file that
    # appeared, then vanished) is a new request, which a key of the state alone would repeat and
    # Dagster would drop; a tick evaluated again still repeats its own key.
    cursor = json.dumps({"requests": requests + 1, "sources": current}, sort_keys=True)
    context.update_cursor(cursor)
    return dg.RunRequest(run_key=f"{requests + 1}-{hashlib.sha256(cursor.encode()).hexdigest()[:16]}",
                         tags={"flywheel/changed_sources": ",".join(changed), **RETRY_TAGS})


@dg.run_failure_sensor(
    name="flywheel_mark_failed_runs",
    monitored_jobs=[flywheel_job],
    description="Records a failed run in ingest.runs with its error, so `flywheel status` shows it.",
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def mark_failed_runs(context: dg.RunFailureSensorContext, flywheel: FlywheelResource):
    from dagster_project.pipeline import mark_failed, run_events, step_failures

    # the steps' own one-line errors, as `flywheel run` records them (the run's failure event
    # says only "dagster._core.errors.DagsterAssetCheckFailedError: 1 blocking asset check failed")
    _, _, error = step_failures(run_events(context.instance, context.dagster_run.run_id))
    data = context.failure_event.job_failure_data
    # a run failed from outside (Dagster's run monitor: "marked as failed from outside the
    # execution context") whose own process is gone was killed; any run's process is gone by now,
    # so only when nothing says otherwise
    error = error or (data.error.message.strip() if data is not None and data.error is not None else "") \
        or killed(context.dagster_run) or context.failure_event.message or "run failed"
    # The next run may hold the database already (one run at a time, queued): wait less than the
    # sensor's own timeout; mark_failed leaves the failure for that run to record otherwise.
    mark_failed(flywheel.ledger_settings(), context.dagster_run.run_id, error, wait_seconds=30)


@dg.run_status_sensor(
    name="flywheel_prune_history",
    run_status=dg.DagsterRunStatus.SUCCESS,
    monitored_jobs=[flywheel_job],
    description="After a successful run, deletes Dagster's history of the pipeline's finished runs beyond "
    "the newest FLYWHEEL_KEEP_RUNS (what `flywheel run` does itself after each run).",
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def prune_history(context: dg.RunStatusSensorContext, flywheel: FlywheelResource):
    pruned = prune_runs(context.instance, flywheel.settings().keep_runs)
    if pruned.runs:
        context.log.info(f"deleted {pruned.runs} old runs from Dagster's history ({pruned.bytes / 1e6:.1f} MB)")


@dg.sensor(
    name="flywheel_dead_runs",
    minimum_interval_seconds=60,
    description="Fails the pipeline's runs whose process is gone (killed while they ran: kill -9, the OOM "
    "killer, a reboot), which stay STARTED and queue every later run behind them.",
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def fail_dead_runs(context: dg.SensorEvaluationContext, flywheel: FlywheelResource):
    # The next run to hold the writer lock does this too (``pipeline.sweep_dead_runs``), but a
    # scheduled or sensor run never starts while the dead one holds the one-run limit: only the
    # daemon, evaluating this on the same host, can free the queue by itself.
    from dagster_project.pipeline import sweep_dead_runs

    dead = sweep_dead_runs(context.instance, flywheel.ledger_settings(), wait_seconds=30)
    if not dead:
        return dg.SkipReason("no run of the pipeline whose process is gone")
    return dg.SkipReason(f"failed {len(dead)} run(s) whose process is gone: {', '.join(r.run_id[:8] for r in dead)}")


defs = dg.Definitions(
    jobs=[flywheel_job],
    schedules=[daily_schedule],
    sensors=[new_files_sensor, mark_failed_runs, prune_history, fail_dead_runs],
)
