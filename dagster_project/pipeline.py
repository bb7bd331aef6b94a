"""Run the Dagster job in-process (what ``flywheel run`` does), with progress on a console."""

from __future__ import annotations

import os
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field

import dagster as dg

from dagster_project import progress
from dagster_project.settings import Settings
from dagster_project.sources import builtin_sources
from dagster_project.state import state_connection, writer_lock
from transforms.classify import q


@dataclass
class PipelineResult:
    run_id: str
    success: bool
    failures: list[tuple[str, str]] = field(default_factory=list)


def instance() -> dg.DagsterInstance:
    """The instance of ``$DAGSTER_HOME`` when set (runs show up in the UI), else a throwaway one."""
    home = os.environ.get("DAGSTER_HOME")
    if home and os.path.isdir(home):
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.ephemeral()


def run_config(full_refresh: bool) -> dict:
    ops = {f"ingest__{name}": {"config": {"full_refresh": full_refresh}} for name in builtin_sources()}
    return {"ops": ops, "loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def forget_files(settings: Settings, paths: list[tuple[str, str]]) -> None:
    """Make the engine read these files again from byte 0 (their rows and quarantine go first)."""
    with state_connection(settings) as con:
        for source, path in paths:
            con.execute(f"delete from raw.{q(source)} where path = ?", [path])
            for table in ("ingest.quarantine", "ingest.files"):
                con.execute(f"delete from {table} where source = ? and path = ?", [source, path])


def run_pipeline(settings: Settings, *, full_refresh: bool = False,
                 replay: list[tuple[str, str]] | None = None, console=None,
                 selection: list[str] | None = None) -> PipelineResult:
    from dagster_project.definitions import load_definitions

    # Resources read FLYWHEEL_* at run time: make the settings we were given the ones they see.
    os.environ.update({
        "FLYWHEEL_RAW_DIR": str(settings.raw_dir),
        "FLYWHEEL_WAREHOUSE": str(settings.warehouse),
        "FLYWHEEL_EXPORT_DIR": str(settings.export_dir),
        "FLYWHEEL_SEAL_AFTER": f"{settings.seal_after_seconds}s",
        "FLYWHEEL_MAX_LINE_BYTES": str(settings.max_line_bytes),
        **({"FLYWHEEL_SOURCES": str(settings.sources_file)} if settings.sources_file else {}),
    })
    job = load_definitions().resolve_job_def("flywheel_job")
    if selection:
        job = job.get_subset(asset_selection={dg.AssetKey.from_user_string(s) for s in selection})
    run_id = str(uuid.uuid4())
    with ExitStack() as stack:
        stack.enter_context(writer_lock(settings))
        if replay:
            forget_files(settings, replay)
        if console is not None:
            status = stack.enter_context(console.status("starting…"))
            stack.callback(progress.listen(lambda message: status.update(message)))
        result = job.execute_in_process(
            run_config=run_config(full_refresh), instance=instance(), raise_on_error=False,
            run_id=run_id, tags={"flywheel/launched_by": "cli"},
        )
    failures = []
    for event in result.all_events:
        if event.event_type == dg.DagsterEventType.STEP_FAILURE:
            error = event.step_failure_data.error
            message = error.message if error else "unknown error"
            cause = error.cause if error else None
            while cause is not None:
                message += f"\n  caused by: {cause.message.strip()}"
                cause = cause.cause
            failures.append((event.step_key or "?", message.strip()))
    return PipelineResult(run_id=run_id, success=result.success, failures=failures)
