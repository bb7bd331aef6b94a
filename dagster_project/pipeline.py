"""Run the Dagster job in-process (what ``flywheel run`` does), with progress on a console."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import dagster as dg

from dagster_project import progress
from dagster_project.settings import Settings
from dagster_project.sources import builtin_sources
from dagster_project.state import state_connection, writer_lock


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
    """Make the engine classify these files' sources again: their derived tables are dropped and
    the next run replays every byte bronze holds for them (nothing is re-read or lost)."""
    from dagster_project.engine import ensure_schema, reset_source

    with state_connection(settings) as con:
        ensure_schema(con)
        for source in sorted({source for source, _ in paths}):
            reset_source(con, source)


@contextmanager
def environment(settings: Settings) -> Iterator[None]:
    """Resources read FLYWHEEL_* when a run starts: let them see these settings, then restore."""
    wanted = {
        "FLYWHEEL_RAW_DIR": str(settings.raw_dir),
        "FLYWHEEL_WAREHOUSE": str(settings.warehouse),
        "FLYWHEEL_EXPORT_DIR": str(settings.export_dir),
        "FLYWHEEL_SEAL_AFTER": f"{settings.seal_after_seconds}s",
        "FLYWHEEL_MAX_LINE_BYTES": str(settings.max_line_bytes),
        "FLYWHEEL_SOURCES": str(settings.sources_file) if settings.sources_file else None,
        "FLYWHEEL_AS_OF": settings.as_of.isoformat() if settings.as_of else None,
        "FLYWHEEL_PSEUDONYM_KEY": settings.pseudonym_key,
        "FLYWHEEL_DPO_MAX_PAIRS": str(settings.dpo_max_pairs),
        "FLYWHEEL_EVAL_FRACTION": str(settings.eval_fraction),
        "FLYWHEEL_SESSION_RETENTION_DAYS": str(settings.session_retention_days),
    }
    saved = {name: os.environ.get(name) for name in wanted}
    try:
        for name, value in wanted.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_pipeline(settings: Settings, *, full_refresh: bool = False,
                 replay: list[tuple[str, str]] | None = None, console=None,
                 selection: list[str] | None = None) -> PipelineResult:
    from dagster_project.definitions import load_definitions

    job = load_definitions().resolve_job_def("flywheel_job")
    if selection:
        job = job.get_subset(asset_selection={dg.AssetKey.from_user_string(s) for s in selection})
    run_id = str(uuid.uuid4())
    with ExitStack() as stack:
        stack.enter_context(environment(settings))
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
    if not result.success:
        mark_failed(settings, run_id, "; ".join(f"{step}: {msg.splitlines()[0]}" for step, msg in failures))
    return PipelineResult(run_id=run_id, success=result.success, failures=failures)


def mark_failed(settings: Settings, run_id: str, error: str) -> None:
    """Record a failed run in ``ingest.runs`` (the published warehouse keeps its last version)."""
    if not settings.state_db.exists():
        return
    from dagster_project.engine import ensure_schema
    from dagster_project.state import record_run

    with state_connection(settings) as con:
        ensure_schema(con)
        record_run(con, run_id, mode="incremental", status="failed", error=error[:2000])
