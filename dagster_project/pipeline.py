"""Run the Dagster job in-process (what ``flywheel run`` does), with progress on a console."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import duckdb
from rich.markup import escape

from dagster_project import progress
from dagster_project.history import (HOLDER_TAG, Pruned, dead_runs, holder, holder_tags, host, killed_line,
                                     process_gone, prune_runs, report_dead, shown)
from dagster_project.settings import PROJECT_ROOT, Settings, SettingsError
from dagster_project.sources import builtin_sources
from dagster_project.state import PENDING_FAILURES, shared_state, state_connection, writer_lock
from transforms.sqlfiles import plain_error


@dataclass
class PipelineResult:
    run_id: str
    success: bool
    failures: list[tuple[str, str]] = field(default_factory=list)
    traces: list[tuple[str, str]] = field(default_factory=list)  # (step, full error with stack)
    mode: str = "incremental"
    warnings: list[str] = field(default_factory=list)
    # what the steps logged as warnings, "<step>: <message>" (a progress display prints them as
    # they come; without one, the caller says them)
    step_warnings: list[str] = field(default_factory=list)
    # Dagster's history after the run (``history``): runs deleted, or why it could not be pruned
    pruned: Pruned | None = None
    prune_error: str | None = None
    # (snapshot, snapshot_status) the run recorded, read while it held the writer lock: a
    # connection opened after it (to say what was published) made the next run's open of the
    # state fail, "another process holds it", the moment this one let go
    snapshot: tuple[str | None, str | None] = (None, None)


def dagster_home() -> Path | None:
    """``$DAGSTER_HOME``, else the project's ``.dagster_home``: CLI runs, schedules and UI runs
    share one history. None (a throwaway instance) outside a checkout without DAGSTER_HOME."""
    home = os.environ.get("DAGSTER_HOME")
    if home:
        return Path(home)
    default = PROJECT_ROOT / ".dagster_home"
    return default if (default / "dagster.yaml").is_file() else None


def instance() -> dg.DagsterInstance:
    home = dagster_home()
    # FLYWHEEL_DAGSTER_EPHEMERAL=1 (the test suite): an in-memory instance, no history, no
    # SQLite event log (a run on the sample lake takes about half the time).
    if home is None or os.environ.get("FLYWHEEL_DAGSTER_EPHEMERAL") == "1":
        return dg.DagsterInstance.ephemeral()
    home.mkdir(parents=True, exist_ok=True)
    ensure_instance_config(home)
    return dg.DagsterInstance.from_config(str(home))


INSTANCE_CONFIG = PROJECT_ROOT / ".dagster_home" / "dagster.yaml"


def ensure_instance_config(home: Path) -> None:
    """A ``DAGSTER_HOME`` with no ``dagster.yaml`` gets the project's: without it Dagster kept a
    telemetry log there (~35 KB a run, up to 110 MB), and runs had no one-at-a-time limit on the
    warehouse. One the user wrote is theirs: left as it is."""
    config = home / "dagster.yaml"
    if config.exists() or not INSTANCE_CONFIG.is_file() or config.resolve() == INSTANCE_CONFIG.resolve():
        return
    from dagster_project.engine.bronze import create_once

    create_once(config, INSTANCE_CONFIG.read_bytes())  # never over one another process just wrote


@contextmanager
def event_log_held_open(dagster: dg.DagsterInstance, run_id: str) -> Iterator[None]:
    """Make the instance's SQLite event log cheap to append to for the run (Postgres or in-memory
    instances are left alone).

    Dagster opens and closes a connection for every event (two or three for an asset event): the
    connection that closes last checkpoints the write-ahead log into the database and deletes it,
    and every commit fsyncs (~10-40 ms and ~100 kB written an event: most of a no-op run's time
    and all of its 50 MB of writes). So the run's and the index's files stay open here (no close
    is the last: the log is appended to and checkpointed once, at the end), and the run's
    connections to them commit with ``synchronous=NORMAL``, which in WAL mode syncs at checkpoints
    only: a power cut may lose the run's last events, never corrupt the history, and the data the
    run publishes is synced by its own writers. Those two files are also reached through one
    connection each for the run (``_one_connection_per_shard``), not a new engine and connection
    per event."""
    storage = dagster.event_log_storage
    path_for_shard = getattr(storage, "path_for_shard", None)
    if path_for_shard is None or not hasattr(storage, "index_connection"):
        yield
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    directory = os.path.dirname(os.path.abspath(path_for_shard("index")))

    def relax(dbapi_connection, _record) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            name = dbapi_connection.execute("pragma database_list").fetchone()[2]
            if name and os.path.dirname(os.path.abspath(name)) == directory:
                dbapi_connection.execute("pragma synchronous = normal")

    held: list[sqlite3.Connection] = []
    event.listen(Engine, "connect", relax)
    restore = _one_connection_per_shard(storage, {"index", run_id})
    try:
        for shard, connect in (("index", storage.index_connection), (run_id, lambda: storage.run_connection(run_id))):
            with connect():  # creates the shard (tables, WAL mode) as Dagster would
                pass
            con = sqlite3.connect(path_for_shard(shard))
            con.execute("select count(*) from sqlite_master").fetchall()  # joins the WAL: now a reader
            held.append(con)
        yield
    finally:
        try:
            restore()  # before the held files close: the last close is still the one checkpoint
        finally:
            event.remove(Engine, "connect", relax)
            for con in held:
                con.close()


def _one_connection_per_shard(storage, shards: set[str]) -> Callable[[], None]:
    """For the run, reach each of ``shards`` (its event-log file and the index) through one
    engine holding one open connection, instead of Dagster's new engine and SQLite connection for
    each call (~1,100 a no-op run: each connection reads the schema again). Returns what undoes it.

    Measured on the 1M lake, three rounds alternating with the code before: a no-op 5.55-5.91 s ->
    4.01-4.73 s (5.5 -> 4.5 CPU-s), a +1% run 7.18-8.43 s -> 6.21-6.89 s. Dagster's
    ``_connect`` serialises every use of the storage under its ``_db_lock`` (a plain lock: never
    nested), so one connection shared by the steps' threads is used by one at a time, as Dagster's
    own were; each use is its own transaction, committed at its end, as there. Other shards (a
    pruned run's) keep Dagster's way. ``has_table`` (a new engine a call, ~150 a run) remembers
    the tables it found: a table is not dropped during a run. Where the storage lacks what this
    relies on (another Dagster version), nothing changes."""
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
    from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
    from sqlalchemy import create_engine
    from sqlalchemy.pool import StaticPool

    if not (isinstance(storage, SqliteEventLogStorage) and all(hasattr(storage, name) for name in (
            "_connect", "_db_lock", "_initdb", "_initialized_dbs", "conn_string_for_shard", "has_table"))):
        return lambda: None

    dagster_connect, dagster_has_table = storage._connect, storage.has_table
    engines: dict[str, object] = {}
    found: set[str] = set()

    @contextmanager
    def connect(shard: str):
        if shard not in shards:
            with dagster_connect(shard) as conn:
                yield conn
            return
        with storage._db_lock:
            engine = engines.get(shard)
            if engine is None:
                engine = engines[shard] = create_engine(
                    storage.conn_string_for_shard(shard), poolclass=StaticPool,
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False})  # under the lock
                if shard not in storage._initialized_dbs:
                    storage._initdb(engine)  # should it fail, the engine is still disposed at the end
                    storage._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def has_table(name: str) -> bool:
        if name not in found and dagster_has_table(name):
            found.add(name)
        return name in found

    storage._connect, storage.has_table = connect, has_table  # on the instance: the class's stay

    def restore() -> None:
        del storage._connect, storage.has_table
        with storage._db_lock:
            for engine in engines.values():
                engine.dispose()
    return restore


def prepare_state(con, settings: Settings) -> None:
    """Before a run's steps: the schemas and the bookkeeping tables every step shares (steps that
    run at once must not both create one: DuckDB aborts the second transaction), and the
    failures ``mark_failed`` left for this run to record."""
    from dagster_project import privacy, validation, versions
    from dagster_project.engine import ensure_schema
    from dagster_project.publishing.snapshot import ensure_publish_tables
    from transforms import delta, staging

    ensure_schema(con)
    con.execute(privacy.SCHEMA)  # published from the first run: an analyst's query finds it empty
    ensure_publish_tables(con)
    for schema in ("lineage", "marts", "exports"):
        con.execute(f"create schema if not exists {schema}")
    versions.ensure_tables(con)
    validation.ensure_tables(con)
    delta.ensure(con)
    staging.ensure_tables(con)
    con.execute(f"create table if not exists {RUN_PROCESSES} (run_id varchar primary key, process varchar, "
                "boot varchar)")
    record_pending_failures(con, settings)


def execute(job: dg.JobDefinition, threads: int, instance: dg.DagsterInstance, run_id: str, *,
            run_config: dict, tags: dict[str, str]):
    """``job.execute_in_process`` with the steps on ``threads`` threads (``executor``): what
    ``execute_in_process`` does, but it always runs steps one at a time."""
    from dagster._core.definitions.job_base import InMemoryJob
    from dagster._core.execution.execute_in_process import core_execute_in_process

    from dagster_project.executor import threaded_executor

    ephemeral = job.as_ephemeral_job(resource_defs={}, input_values={}).with_executor_def(threaded_executor)
    return core_execute_in_process(
        job=InMemoryJob(job_def=ephemeral),
        run_config={**run_config, "execution": {"config": {"threads": threads}}},
        instance=instance, output_capturing_enabled=True, raise_on_error=False,
        run_tags={**job.run_tags, **tags}, run_id=run_id, asset_selection=frozenset())


def run_config(full_refresh: bool, *, verbose: bool = False, nodes: set[str] | None = None) -> dict:
    """``nodes``: the ops of a subset job (config for an op it lacks is an error)."""
    ops = {f"ingest__{name}": {"config": {"full_refresh": full_refresh}} for name in builtin_sources()
           if nodes is None or f"ingest__{name}" in nodes}
    # Dagster's console logger prints every failure with its stack, once per step and again in the
    # summary; the CLI prints each failure once itself (with the stack only when verbose).
    level = "WARNING" if verbose else "CRITICAL"
    return {"ops": ops, "loggers": {"console": {"config": {"log_level": level}}}}


def source_warnings(settings: Settings) -> list[str]:
    """One line per enabled source whose globs match no file (its tables will stay empty).
    Raises ``SettingsError`` when two sources claim one file: each read it, so its lines were
    counted twice and loaded or quarantined by both (a glob widened by mistake); and undoing it
    later (``quarantine replay``) left the file "missing" for one of them. Listing every
    source's files costs ~10 ms on the 1M bench lake's 3,938 files."""
    from dagster_project.engine.discovery import StoredPathClash, listing, no_files_warning
    from dagster_project.sources import load_sources

    warnings, owner, twice = [], {}, []
    for name, spec in load_sources(settings.sources_file).items():
        unlisted: list[tuple[str, str]] = []
        try:
            files = [path for path, _ in listing(spec, settings.raw_dir, unlisted, exclude=settings.own_dirs)]
        except StoredPathClash as exc:
            raise SettingsError([f"source {name}: {exc}"]) from None
        if not files:
            warnings.append(no_files_warning(name, spec.globs, settings.raw_dir, unlisted))
        for path in files:
            if owner.setdefault(path, name) != name:
                twice.append((owner[path], name, path))
    if twice:
        first, second, path = twice[0]
        raise SettingsError([f"sources {first} and {second} both claim {path}"
                             f"{f' (and {len(twice) - 1} more files)' if len(twice) > 1 else ''}: a file is read "
                             f"by one source; narrow their globs in {settings.sources_file or 'FLYWHEEL_SOURCES'}"])
    return warnings


SHORT_SEAL_SECONDS = 600


def preflight(settings: Settings) -> list[str]:
    """Refuse to start on settings that cannot work (``SettingsError``); return warnings."""
    from dagster_project.privacy import unfinished_erasures

    settings.preflight(need_raw=True)
    warnings = source_warnings(settings)
    # (a run does not finish it: the subject's id, which the snapshots are scrubbed by, is not kept)
    warnings += [f"an erasure (`flywheel forget`) was interrupted ({when} UTC): its subject stays in the published "
                 "data until the same command is run again" for when in unfinished_erasures(settings)]
    if settings.seal_after_seconds < SHORT_SEAL_SECONDS:  # `24` for `24h`: a bare number is seconds
        warnings.append(f"FLYWHEEL_SEAL_AFTER={settings.seal_after_seconds:g}s: a last line a writer is still "
                        "writing for longer than that is quarantined as unterminated and its rest read as another "
                        "line, for good (a bare number is seconds: 24h is a day)")
    return warnings


def forget_files(settings: Settings, paths: list[tuple[str, str]]) -> None:
    """Make the engine classify these files' sources again: their derived tables are dropped and
    the next run replays every byte bronze holds for them (nothing is re-read or lost)."""
    from dagster_project.engine import ensure_schema, reset_source
    from dagster_project.engine.accounting import check_legacy_raw
    from dagster_project.sources import load_sources

    enabled = set(load_sources(settings.sources_file))
    with state_connection(settings) as con:
        ensure_schema(con)
        sources = sorted({source for source, _ in paths})
        for source in sources:  # all refused before any is reset (a disabled one: its files are not read again)
            check_legacy_raw(con, settings, source, read_files=source in enabled)
        for source in sources:
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
        # the run's date, once: each step read "today" for itself (a run across midnight UTC)
        "FLYWHEEL_AS_OF": settings.run_date.isoformat(),
        "FLYWHEEL_PSEUDONYM_KEY": settings.pseudonym_key,
        "FLYWHEEL_DPO_MAX_PAIRS": str(settings.dpo_max_pairs),
        "FLYWHEEL_EVAL_FRACTION": str(settings.eval_fraction),
        "FLYWHEEL_SESSION_RETENTION_DAYS": str(settings.session_retention_days),
        "FLYWHEEL_RETENTION_CONFIRM": str(settings.retention_confirm) if settings.retention_confirm else None,
        "FLYWHEEL_RAW_DIR_CONFIRM": str(settings.raw_dir_confirm) if settings.raw_dir_confirm else None,
        "FLYWHEEL_LEGACY_REBUILD": "1" if settings.legacy_rebuild else None,
        "FLYWHEEL_KEEP_SNAPSHOTS": str(settings.keep_snapshots),
        "FLYWHEEL_KEEP_RUNS": str(settings.keep_runs),
        "FLYWHEEL_ALLOW_EMPTY": "1" if settings.allow_empty else None,
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
                 selection: list[str] | None = None, verbose: bool = False) -> PipelineResult:
    """Run the job in-process. Raises ``SettingsError`` before any work when settings cannot work."""
    from dagster_project.definitions import load_definitions
    from dagster_project.publishing.snapshot import run_outcome
    from dagster_project.state import record_run

    warnings = preflight(settings)
    if console is not None:
        for warning in warnings:
            console.print(f"[yellow]warning[/] {escape(warning)}", highlight=False, soft_wrap=True)
    job = load_definitions().resolve_job_def("flywheel_job")
    if selection:
        job = job.get_subset(asset_selection={dg.AssetKey.from_user_string(s) for s in selection})
    run_id = str(uuid.uuid4())
    mode = "replay" if replay else "full_refresh" if full_refresh else "incremental"
    with ExitStack() as stack:
        stack.enter_context(environment(settings))
        stack.enter_context(writer_lock(settings))
        with state_connection(settings) as con:
            # The run's row exists before any step: its mode and warnings survive the steps'
            # updates (they keep the first mode unless a full refresh) and reach the publish.
            prepare_state(con, settings)
            record_run(con, run_id, mode=mode, warnings=warnings)
            note_holder(con, run_id)
        if replay:
            forget_files(settings, replay)
        dagster = instance()
        stack.enter_context(dagster)
        sweep_dead_runs(dagster, settings)
        stack.enter_context(event_log_held_open(dagster, run_id))
        heard: list[str] = []
        dagster.add_event_listener(run_id, lambda record: heard.extend(_step_warning(record, warnings)))
        if console is not None:
            steps = progress.StepProgress(console, total_steps=len(job.graph.nodes), said=warnings)
            stack.enter_context(steps)
            stack.callback(progress.listen(steps.message))
            dagster.add_event_listener(run_id, steps.event)
        with shared_state(settings):  # steps run here: one connection, a cursor of it per thread
            result = execute(job, settings.step_threads, dagster, run_id,
                             run_config=run_config(full_refresh, verbose=verbose, nodes=set(job.graph.node_dict)),
                             tags={"flywheel/launched_by": "cli", "flywheel/mode": mode, **holder_tags(run_id)})
        snapshot = (None, None)
        if result.success:
            with state_connection(settings) as con:
                settle_row(con, run_id, mode)
                snapshot = run_outcome(con, run_id)
        pruned, prune_error = prune_history(dagster, settings.keep_runs)
    failures, traces, error = step_failures(result.all_events)
    if not result.success and not failures:  # no step failed: say why the run did
        failures = [("run", run_failure(result.all_events))]
        error = failures[0][1]
    if not result.success:
        mark_failed(settings, run_id, error, mode=mode)
    return PipelineResult(run_id=run_id, success=result.success, failures=failures, traces=traces,
                          mode=mode, warnings=warnings, step_warnings=heard, pruned=pruned, prune_error=prune_error,
                          snapshot=snapshot)


def _step_warning(record, said: list[str]) -> list[str]:
    """A warning a step logged for the user (``progress.user_warning``), as "<step>: <message>"."""
    return [f"{record.step_key or ''}: {record.user_message}"] if progress.user_warning(record, said) else []


def run_failure(events) -> str:
    """Why a run failed that no step failed in: interrupted between steps (before the first, or
    once those running had ended), else Dagster's own words."""
    if any(e.event_type == dg.DagsterEventType.ENGINE_EVENT and (e.message or "").startswith("Interrupted")
           for e in events):
        return "interrupted (Ctrl-C or a termination signal) between steps: the steps not started did not run"
    said = [e.message for e in events if e.event_type == dg.DagsterEventType.RUN_FAILURE and e.message]
    return _first_line(said[-1]) if said else "the run failed outside its steps (its Dagster events say more)"


def step_failures(events) -> tuple[list[tuple[str, str]], list[tuple[str, str]], str]:
    """From a run's events: each failed step's message (Dagster's wrapping taken off; a failed
    check's report after it), its traceback, and the run's error in one line (per step, a failed
    check's first failed expectation, not Dagster's "1 blocking asset check failed"), as
    ``ingest.runs.error`` records it whoever records it (``flywheel run``, the run's resource, the
    failure sensor)."""
    failures, traces = [], []
    # A failed blocking check fails the step that builds its table with a bare "check failed":
    # each report (which expectation, sample rows) is in its evaluation's description.
    checks: dict[str, list[str]] = {}
    for event in events:
        if (event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
                and not event.asset_check_evaluation_data.passed and event.asset_check_evaluation_data.description
                and event.asset_check_evaluation_data.severity == dg.AssetCheckSeverity.ERROR):
            checks.setdefault(event.step_key, []).append(event.asset_check_evaluation_data.description)
    for event in events:
        if event.event_type == dg.DagsterEventType.STEP_FAILURE:
            error = event.step_failure_data.error
            message = short_error(event.step_failure_data)
            if event.step_key in checks:
                reports = "\n".join(checks[event.step_key])
                # failed by its checks alone: the first failed expectation, then each report
                # (Dagster's "DagsterAssetCheckFailedError: 2 blocking asset checks failed" said
                # neither which nor why on the line the console and status print)
                message = (f"{_first_line(reports)}\n{reports}"
                           if error is not None and error.cls_name == "DagsterAssetCheckFailedError"
                           else f"{message}\n{reports}")
            failures.append((event.step_key or "?", message.strip()))
            traces.append((event.step_key or "?", error.to_string() if error else "unknown error"))
    # steps failing alike (a bad setting fails every ingest step) are named once, with their count
    alike: dict[str, list[str]] = {}
    for step, msg in failures:
        alike.setdefault(_first_line(checks.get(step, [msg])[0]), []).append(step)
    line = "; ".join(f"{steps[0]}: {first}" if len(steps) == 1 else
                     f"{first} ({len(steps)} steps: {', '.join(steps[:3])}{', …' if len(steps) > 3 else ''})"
                     for first, steps in alike.items())
    return failures, traces, line


def run_events(instance: dg.DagsterInstance, run_id: str) -> list[dg.DagsterEvent]:
    """The run's step failures and check evaluations, as ``step_failures`` reads them."""
    return [record.dagster_event for record in instance.all_logs(run_id, of_type={
        dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.ASSET_CHECK_EVALUATION}) if record.dagster_event]


def _first_line(message: str) -> str:
    """A failure in one line: a check report's first failed expectation (``✗ name [...]: counts``)
    with its table, else the message's first line."""
    lines = [line.strip() for line in (message or "").strip().splitlines()]
    failed = next((line for line in lines if line.startswith("✗")), None)
    return f"{lines[0].split(':')[0]}: {failed}" if failed else (lines[0] if lines else "")


def sweep_dead_runs(dagster: dg.DagsterInstance, settings: Settings, exclude: str | None = None,
                    wait_seconds: float = 600) -> list[dg.DagsterRun]:
    """The pipeline's runs whose process is gone (``history.dead_runs``), failed in Dagster (they
    queued every later run) and in ``ingest.runs``; returns them. Called by a run once it holds
    the writer lock and by the ``flywheel_dead_runs`` sensor (``wait_seconds``: how long
    ``mark_failed`` waits for the lock)."""
    dead = dead_runs(dagster, exclude)
    report_dead(dagster, dead)
    for run in dead:
        mark_failed(settings, run.run_id, killed_line(run.tags[HOLDER_TAG]),
                    mode=run.tags.get("flywheel/mode", "incremental"), wait_seconds=wait_seconds)
    return dead


def prune_history(dagster: dg.DagsterInstance, keep: int) -> tuple[Pruned | None, str | None]:
    """After a run, Dagster's history beyond the newest ``keep`` finished runs goes
    (``history.prune_runs``). It never fails the run, whose data is published: what went wrong
    is reported and the next run tries again."""
    try:
        return prune_runs(dagster, keep), None
    except Exception as exc:  # noqa: BLE001 (maintenance after the run: report, never raise)
        return None, f"Dagster's run history was not pruned ({type(exc).__name__}: {exc}); the next run tries again"


# Dagster's wrappers around the user's exception: their text says nothing the step name doesn't.
WRAPPERS = {"DagsterExecutionStepExecutionError", "DagsterUserCodeExecutionError",
            "DagsterExecutionHandleOutputError", "DagsterExecutionLoadInputError"}


def short_error(failure_data) -> str:
    """What went wrong in a step, without Dagster's wrapping: a ``Failure``'s description, else the
    first non-wrapper exception's message (the user's exception, with its detail lines), an error
    DuckDB nested as JSON in it replaced by its message."""
    user = getattr(failure_data, "user_failure_data", None)
    if user is not None and user.description:
        return plain_error(user.description.strip())
    error = failure_data.error if failure_data else None
    while error is not None and error.cls_name in WRAPPERS and error.cause is not None:
        error = error.cause
    return plain_error(error.message.strip()) if error is not None else "unknown error"


def mark_failed(settings: Settings, run_id: str, error: str, mode: str = "incremental",
                wait_seconds: float = 600) -> None:
    """Record a failed run in ``ingest.runs`` (the current snapshot stays current). When another
    run holds the database for longer than ``wait_seconds`` (the failure sensor cannot wait for a
    whole run), the failure is left in a file that the next run records first."""
    if not settings.state_db.exists():
        return
    from dagster_project.engine import ensure_schema
    from dagster_project.state import WarehouseBusy, save_recent_runs

    try:
        with writer_lock(settings, wait_seconds=wait_seconds), state_connection(settings) as con:
            ensure_schema(con)
            _record_failed(con, settings, run_id, mode, error[:2000])
            save_recent_runs(con, settings)  # (a file not written is no failure of the run's)
    # held by a run, open in another process, or not writable now (a full disk: the run that
    # failed on it left no other trace, and stayed "running" for good)
    except (WarehouseBusy, duckdb.Error, OSError):
        pending = settings.state_dir / PENDING_FAILURES
        pending.mkdir(parents=True, exist_ok=True)
        tmp = pending / f".{run_id}.tmp"
        tmp.write_text(json.dumps({"run_id": run_id, "mode": mode, "error": error[:2000]}), encoding="utf-8")
        os.replace(tmp, pending / f"{run_id}.json")


def _record_failed(con, settings: Settings, run_id: str, mode: str, error: str) -> None:
    """The failed run's row in ``ingest.runs``, with no snapshot it never committed."""
    from dagster_project.state import record_run

    record_run(con, run_id, mode=mode, status="failed", error=error)
    if kept := _unpublished(con, settings, run_id):
        # killed after its commit (while it ended): "failed" alone read as "nothing published";
        # said on the first line, the one `flywheel status` prints
        snapshot, committed = kept
        note = (f"its snapshot {snapshot} had been published whole and stays" if committed else
                f"its snapshot {snapshot} was written whole and is kept (with no current snapshot, whether it "
                "was committed cannot be told)")
        first, newline, rest = error.partition("\n")
        con.execute("update ingest.runs set error = ? where run_id = ?", [f"{first}; {note}{newline}{rest}", run_id])


def _unpublished(con, settings: Settings, run_id: str) -> tuple[str, bool] | None:
    """A run killed while it published recorded its snapshot as published before writing it (the
    run log it publishes says so): the row named a snapshot the next run removed as a leftover.
    Committed, it is the current snapshot or, once a later run published, an older one still
    kept (names only grow: a snapshot never committed is newer than the current one, and is gone
    once a later run published); else the run published nothing. With no ``current`` (the lake's
    first publish, or the link removed) a snapshot with its manifest cannot be told from one that
    was committed: it stays "published" (it is kept, and listed, until retention prunes it).
    Returns the snapshot the row still names, and whether it is known to have been committed."""
    from dagster_project.publishing.snapshot import MANIFEST, current_version, snapshots_dir

    row = con.execute("select snapshot from ingest.runs where run_id = ? and snapshot_status = 'published'",
                      [run_id]).fetchone()
    current = current_version(settings.export_dir)
    if row is None or row[0] is None:
        return None
    written = (snapshots_dir(settings.export_dir) / row[0] / MANIFEST).exists()
    if written and (current is None or row[0] <= current):
        return row[0], current is not None
    con.execute("update ingest.runs set snapshot = null, snapshot_status = 'not published' where run_id = ?", [run_id])
    return None


def record_pending_failures(con, settings: Settings) -> None:
    """Record the failures ``mark_failed`` could not, while another run held the database; then
    those of runs whose process died before anything could (``dead_rows``). A file that cannot be
    recorded is left for the next run, with a warning: it must not fail every run from now on."""
    for path in sorted((settings.state_dir / PENDING_FAILURES).glob("*.json")):
        try:
            failure = json.loads(path.read_text(encoding="utf-8"))
            _record_failed(con, settings, failure["run_id"], failure["mode"], failure["error"])
        except (OSError, ValueError, KeyError, TypeError, duckdb.Error) as exc:
            print(f"warning: {path}: a failed run's record could not be written to ingest.runs "
                  f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); kept for the next run",
                  file=sys.stderr, flush=True)
            continue
        path.unlink()
    for run_id, mode, process in dead_rows(con):
        _record_failed(con, settings, run_id, mode, killed_line(process))


# Private: the process of each `flywheel run` (``history.holder``: host:pid@start), noted with its
# ``ingest.runs`` row. That row is written before the run's Dagster record, which the dead-runs
# sweep goes by (tagged with the process): a run killed in between (~1 s: the Dagster instance
# loading) stayed "running" in ingest.runs, `flywheel status` and the published run log for good.
RUN_PROCESSES = "lineage.run_processes"


def note_holder(con, run_id: str) -> None:
    con.execute(f"insert or replace into {RUN_PROCESSES} values (?, ?, ?)", [run_id, holder(), _boot_id()])


def settle_row(con, run_id: str, mode: str) -> None:
    """After a run whose steps all succeeded: its row says so when no snapshot step did (a run of
    part of the job: it stayed "running"), and its process note goes. (A run that failed keeps
    its note until its failure is recorded: if nothing can record it, the next run does.)"""
    from dagster_project.state import record_run

    if con.execute("select status from ingest.runs where run_id = ?", [run_id]).fetchone() == ("running",):
        record_run(con, run_id, mode=mode, status="success")
    con.execute(f"delete from {RUN_PROCESSES} where run_id = ?", [run_id])


def _boot_id() -> str:
    """This boot of the machine (Linux; '' elsewhere): a pid noted before a reboot names another
    process, or none, after it."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""


def dead_rows(con) -> list[tuple[str, str, str]]:
    """(run id, mode, process) of each run still "running" in ``ingest.runs`` whose noted process,
    on this host, is gone (or was noted before the machine's last boot, or is this one: its own
    run is noted after this); the notes of runs no longer running are dropped. No live
    `flywheel run` is among them: each holds the writer lock from its row to its end, and this is
    called under it (a run the daemon launched is not noted: the dead-runs sweep finds it by its
    Dagster run). Usually there is no note (a run that succeeded drops its own): one statement."""
    rows = con.execute(f"select p.run_id, r.mode, r.status, p.process, p.boot from {RUN_PROCESSES} p "
                       "left join ingest.runs r using (run_id) order by r.started_at").fetchall()
    if not rows:
        return []
    here, boot = holder(), _boot_id()
    dead = [(run_id, mode, process) for run_id, mode, status, process, noted_boot in rows if status == "running"
            and (shown(process) == shown(here) or process_gone(process)
                 or (noted_boot != boot and process.rpartition(":")[0] == host()))]
    gone = [run_id for run_id, _, status, _, _ in rows if status != "running"] + [r[0] for r in dead]
    if gone:
        con.execute(f"delete from {RUN_PROCESSES} where run_id in (select unnest(?::varchar[]))", [gone])
    return dead
