"""The job that runs the whole pipeline, its daily schedule, and the new-file sensor."""


import hashlib
import json

import dagster as dg

from dagster_project.engine import discover
from dagster_project.executor import threaded_executor
from dagster_project.history import prune_runs
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

daily_schedule = dg.ScheduleDefinition(
    name="flywheel_daily",
    job=flywheel_job,
    cron_schedule="0 3 * * *",
    execution_timezone="UTC",
    description="The whole pipeline every day at 03:00 UTC (picks up anything the sensor missed).",
)


def lake_fingerprint(settings: Settings) -> dict[str, list[int]]:
    """Size and mtime of every file any source claims, by path."""
    state: dict[str, list[int]] = {}
    for spec in load_sources(settings.sources_file).values():
        for path, real in discover(spec, settings.raw_dir):
            stat = real.stat()
            state[f"{spec.name}:{path}"] = [stat.st_size, stat.st_mtime_ns]
    return state


@dg.sensor(
    name="flywheel_new_files",
    job=flywheel_job,
    minimum_interval_seconds=60,
    description="Requests a run when a raw file appears or grows. The cursor holds each file's "
    "size and mtime, so an unchanged lake never triggers a run.",
    default_status=dg.DefaultSensorStatus.STOPPED,
)
def new_files_sensor(context: dg.SensorEvaluationContext, flywheel: FlywheelResource):
    current = lake_fingerprint(flywheel.settings())
    previous = json.loads(context.cursor) if context.cursor else {}
    changed = sorted(p for p, v in current.items() if previous.get(p) != v)
    if not changed:
        return dg.SkipReason(f"no new or grown files among {len(current)}")
    context.update_cursor(json.dumps(current, sort_keys=True))
    run_key = hashlib.sha256(json.dumps(current, sort_keys=True).encode()).hexdigest()[:16]
    return dg.RunRequest(run_key=run_key, tags={"flywheel/changed_files": str(len(changed))})


@dg.run_failure_sensor(
    name="flywheel_mark_failed_runs",
    monitored_jobs=[flywheel_job],
    description="Records a failed run in ingest.runs with its error, so `flywheel status` shows it.",
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def mark_failed_runs(context: dg.RunFailureSensorContext, flywheel: FlywheelResource):
    from dagster_project.pipeline import mark_failed

    data = context.failure_event.job_failure_data
    error = (data.error.message.strip() if data is not None and data.error is not None else "") \
        or context.failure_event.message or "run failed"
    # The next run may hold the database already (one run at a time, queued): wait less than the
    # sensor's own timeout; mark_failed leaves the failure for that run to record otherwise.
    mark_failed(flywheel.settings(), context.dagster_run.run_id, error, wait_seconds=30)


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


defs = dg.Definitions(
    jobs=[flywheel_job],
    schedules=[daily_schedule],
    sensors=[new_files_sensor, mark_failed_runs, prune_history],
)
