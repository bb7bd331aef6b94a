"""``flywheel``: run the pipeline, inspect what it ingested and quarantined, make lakes."""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import duckdb
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dagster_project.settings import Settings, SettingsError
from dagster_project.state import NOT_READ, RUN_FIELDS, pending_failures, recent_runs
from transforms.sqlfiles import plain_error

os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "yes")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

app = typer.Typer(help="Flywheel Lake: lossless feedback-data pipeline.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
quarantine_app = typer.Typer(help="Inspect, export and replay quarantined lines.", no_args_is_help=True)
app.add_typer(quarantine_app, name="quarantine")
console = Console(stderr=True)
# Piped output (CI logs, files) gets room for the tables instead of rich's 80-column default.
out = Console(width=None if sys.stdout.isatty() else 160)
VERBOSE = {"on": False}


@app.callback()
def main_options(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show full tracebacks of failed steps.")] = False,
) -> None:
    VERBOSE["on"] = verbose


def fail(lines: list[str] | str, code: int = 2) -> None:
    """Print each problem on one line (no traceback) and exit non-zero."""
    for line in [lines] if isinstance(lines, str) else lines:
        console.print(f"[red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _locked_out(exc: BaseException) -> bool:
    """DuckDB could not open the state database because another process holds it (its lock);
    not any other IO error (a full disk said "another process holds it" too)."""
    return isinstance(exc, duckdb.IOException) and ("Could not set lock" in str(exc) or "Conflicting lock" in str(exc))


def _said(exc: BaseException) -> str:
    """An exception's first line (DuckDB's carry hints and context after it, and may nest an error
    as JSON in it: ``plain_error``), else its type."""
    text = plain_error(str(exc).strip())
    return text.splitlines()[0] if text else type(exc).__name__


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except SettingsError as exc:
        fail(exc.problems)


def _check_source(con: duckdb.DuckDBPyConnection, source: str | None) -> None:
    """``--source nosuch`` is a typo, not an empty result: name the sources there are."""
    if source is None:
        return
    from dagster_project.sources import builtin_sources

    known = set(builtin_sources()) | {r[0] for r in con.execute("select distinct source from ingest.files").fetchall()}
    if source not in known:
        fail(f"--source {source}: no such source; known: {', '.join(sorted(known))}")


def _run(settings: Settings, **kwargs):
    """run_pipeline, with what can go wrong before the first step as one line each."""
    from dagster_project import uncollected

    with uncollected():  # the run loads the definitions: imported here, with the pipeline
        import dagster_project.definitions  # noqa: F401
        from dagster_project.engine import LegacyStateError
        from dagster_project.pipeline import run_pipeline
        from dagster_project.state import WarehouseBusy

    try:
        return run_pipeline(settings, verbose=VERBOSE["on"], **kwargs)
    except SettingsError as exc:
        fail(exc.problems)
    except (WarehouseBusy, LegacyStateError) as exc:  # (legacy: `quarantine replay`, before any step)
        fail(str(exc), 1)
    except (duckdb.Error, OSError) as exc:  # outside any step (a full disk, a lost mount): one line
        if _locked_out(exc):
            fail(f"{settings.state_db}: cannot open the state database, another process holds it ({_said(exc)}); "
                 "close that connection and run again", 1)
        _stopped(exc)
    except Exception as exc:
        if not type(exc).__module__.startswith("sqlalchemy"):
            raise  # a bug: its traceback
        from dagster_project.pipeline import dagster_home

        # Dagster's own storage, a full or damaged DAGSTER_HOME (120 lines of traceback ended in it)
        _stopped(exc, f"Dagster's run history in DAGSTER_HOME={dagster_home()} could not be read or written: ")


def _stopped(exc: BaseException, what: str = "") -> None:
    """A run stopped outside its steps, in one line (``-v``: and its traceback)."""
    if VERBOSE["on"]:
        import traceback

        traceback.print_exception(exc)
    fail(f"the run stopped: {what}{_said(exc)}; `flywheel status` shows what is published (-v: the traceback)", 1)


def _print_pruned(result, settings: Settings) -> None:
    """A line when the run deleted old runs from Dagster's history, or could not."""
    if result.prune_error:
        console.print(f"[yellow]warning[/] {escape(result.prune_error)}", highlight=False, soft_wrap=True)
    elif result.pruned and result.pruned.runs:
        console.print(f"[dim]Dagster history: {result.pruned.runs} run(s) beyond the newest {settings.keep_runs} "
                      f"deleted ({result.pruned.bytes / 1e6:.1f} MB; FLYWHEEL_KEEP_RUNS)[/]", highlight=False, soft_wrap=True)


def _print_result(result, settings: Settings, elapsed: float) -> None:
    """One line for the run (and each failure once, short, with its step; the stack with -v)."""
    if not result.success:
        _print_pruned(result, settings)
        console.print(f"[red bold]Run {result.run_id} ({result.mode}) failed[/] after {elapsed:.1f} s; "
                      f"{_snapshot_after_failure(settings, result.run_id)}", soft_wrap=True)
        for step, message in result.failures:
            console.print(f"[red]✗ {step}:[/] {escape(message)}", highlight=False, soft_wrap=True)
        if VERBOSE["on"]:
            for step, trace in result.traces:
                console.print(f"{step}:\n{trace}", highlight=False, markup=False, soft_wrap=True)
        else:
            console.print("[dim](run with -v for the full traceback)[/]")
        raise typer.Exit(1)
    console.print(f"[green bold]Run {result.run_id} ({result.mode}) succeeded[/] in {elapsed:.1f} s", soft_wrap=True)
    _print_pruned(result, settings)
    from dagster_project.publishing.snapshot import describe_run

    console.print(describe_run(settings, *result.snapshot), highlight=False, soft_wrap=True)
    try:
        _print_status(settings, run_id=result.run_id)
    except typer.Exit:  # the run succeeded: a status that cannot be shown (why is printed) does not undo that
        pass


def _snapshot_after_failure(settings: Settings, run_id: str) -> str:
    """What a failed run left published: a signal after its commit (a SIGTERM as ``current``
    moved) failed a run whose snapshot had been published whole, and the line said "unchanged"."""
    from dagster_project.publishing import read_manifest

    manifest = read_manifest(settings.export_dir) or {}
    if manifest.get("run_id") == run_id:
        return (f"its snapshot {manifest.get('version')} had been published whole and is the current one "
                "(warehouse and exports)")
    return "the current snapshot (warehouse and exports) is unchanged"


def _reader(settings: Settings) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the published warehouse (never blocks a run). Close it, on an
    error too: while a connection of this process is open, the next one to that file reuses its
    instance, so an analyst's read-write lock went unnoticed (a test failed now and then)."""
    if directory := settings.warehouse_directory():  # as a run says it (DuckDB's read error was the line)
        fail(directory)
    if not settings.warehouse.exists():
        console.print(f"[red]No warehouse at {escape(str(settings.warehouse))}[/]: run `flywheel run` first.")
        raise typer.Exit(1)
    # The real file of the current snapshot: a connection still open in this process to an older
    # one must not be reused from DuckDB's instance cache.
    path = os.path.realpath(settings.warehouse)
    try:
        con = duckdb.connect(path, read_only=True)
    except duckdb.IOException as exc:
        first = _said(exc)
        if "lock" not in first:  # (a file that cannot be read: DuckDB's own words)
            fail(f"{path}: cannot open the published warehouse: {first}", 1)
        # another process opened it read-write (DuckDB's default)
        fail(f"{path}: cannot open the published warehouse, another process holds it read-write "
             f"({first}); open it with read_only=True (duckdb -readonly)", 1)
    con.execute("set TimeZone = 'UTC'")
    return con


@app.command()
def run(
    full_refresh: Annotated[bool, typer.Option("--full-refresh", help="Rebuild raw, staging and accounting from the lake's bronze record, then read what is new.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
    allow_empty: Annotated[bool, typer.Option("--allow-empty", help="Publish a dataset that became empty (FLYWHEEL_ALLOW_EMPTY=1).")] = False,
) -> None:
    """Run the whole pipeline in-process (ingest → staging → marts → exports → publish)."""
    settings = _settings()
    if allow_empty:
        settings = replace(settings, allow_empty=True)
    console.print(f"[bold]Flywheel Lake[/] raw={escape(str(settings.raw_dir))} warehouse={escape(str(settings.warehouse))}"
                  f"{' as-of=' + settings.as_of.isoformat() if settings.as_of else ''}"
                  f"{' [yellow](full refresh)[/]' if full_refresh else ''}", highlight=False, soft_wrap=True)
    started = time.perf_counter()
    result = _run(settings, full_refresh=full_refresh, console=None if quiet else console)
    if quiet:  # no progress, but warnings are never silent
        for warning in result.warnings + result.step_warnings:
            console.print(f"[yellow]warning[/] {escape(warning)}", highlight=False, soft_wrap=True)
    _print_result(result, settings, time.perf_counter() - started)


@app.command()
def forget(
    session: Annotated[str | None, typer.Option("--session", help="The session id to erase from every layer.")] = None,
    user: Annotated[str | None, typer.Option("--user", help="The user id to erase from every layer.")] = None,
) -> None:
    """Erase one session or user from bronze, raw, staging, marts, exports and every kept snapshot."""
    from dagster_project import privacy
    from dagster_project.sources import load_sources

    if (session is None) == (user is None):
        fail("give exactly one of --session ID or --user ID")
    if not (session if session is not None else user).strip():
        fail(f"--{'session' if session is not None else 'user'}: give the id to erase, not an empty one")
    settings = _settings()
    try:  # what the rebuild's preflight would refuse, refused before anything is erased
        settings.preflight()
    except SettingsError as exc:
        fail(exc.problems)
    kind, subject = ("session", session) if session is not None else ("user", user)
    if kind == "session" and (base := privacy.session_of(subject)) != subject:
        console.print(f"forgetting session {base}, whose id {subject} names it with its adapter", highlight=False,
                      soft_wrap=True)
        subject = base

    retry = f"run `flywheel forget --{kind} ...` again with the same id to finish"
    again = f"fix the cause and {retry}"

    def rebuild() -> None:
        # A dataset the erased person alone filled is emptied on purpose: the guard against a
        # dataset published empty (a producer's files wiped) refused that rebuild, and every
        # retry of the forget, leaving the person in the current snapshot. The rebuild reads
        # bronze, which no producer can wipe, so the guard has nothing to protect here.
        started = time.perf_counter()
        try:
            result = _run(replace(settings, allow_empty=True), full_refresh=True, console=None)
        except typer.Exit:  # refused or stopped outside its steps (_run printed why): bronze is erased
            console.print(f"[red]error:[/] the rebuild after erasing from bronze did not finish; {again}",
                          highlight=False, soft_wrap=True)
            raise
        for warning in result.step_warnings:  # (the rebuild runs without a console)
            console.print(f"[yellow]warning[/] {escape(warning)}", highlight=False, soft_wrap=True)
        if not result.success:
            console.print(f"[red]error:[/] the rebuild after erasing from bronze failed; {again}",
                          highlight=False, soft_wrap=True)
            _print_result(result, settings, time.perf_counter() - started)

    from dagster_project.engine import BronzeDamaged
    from dagster_project.state import WarehouseBusy

    try:
        done = privacy.forget(settings, kind, subject, load_sources(settings.sources_file, disabled=True), rebuild)
    except privacy.NothingToErase as exc:
        fail(str(exc), 1)
    except BronzeDamaged as exc:  # an object the erasure must rewrite is gone
        fail(f"{exc}; then {retry}", 1)
    except WarehouseBusy as exc:  # a run holds the writer lock
        fail(f"{exc}; then {retry}", 1)
    except (duckdb.IOException, duckdb.TransactionException, duckdb.FatalException, OSError) as exc:
        if _locked_out(exc):  # another process's connection to the state database
            fail(f"{settings.state_db}: another process holds it ({_said(exc)}); "
                 f"close that connection and {retry}", 1)
        # (a full disk, a lost mount): what was erased stays erased; a retry does the rest
        fail(f"the erasure stopped: {_said(exc)}; {again}", 1)
    console.print(done.summary(), highlight=False, soft_wrap=True)


@app.command()
def status() -> None:
    """Per source: files, lines, loaded, quarantined, deferred, last run; kept snapshots."""
    _print_status(_settings())


def _alike_folded(events) -> list[tuple]:
    """File events as (source, path, event, detail, how many more alike): the files of one source
    with one event and one detail are one line (a directory that may not be listed made each
    file it holds a line of its own, 53 for one directory), in the order they came."""
    groups: dict[tuple, list] = {}
    for source, path, event, detail in events:
        groups.setdefault((source, event, detail), []).append(path)
    return [(source, paths[0], event, detail, len(paths) - 1) for (source, event, detail), paths in groups.items()]


ERROR_SHOWN = 600  # characters of a failed run's error line that status prints


def _print_runs(runs: list[dict], run_id: str | None) -> None:
    """The last five runs, and each failed one's error."""
    if not runs:
        return
    rt = Table(title="Recent runs")
    for col in ("run", "mode", "status", "started", "lines", "loaded", "quarantined", "snapshot"):
        rt.add_column(col)
    for r in runs[:5]:
        rt.add_row(r["run_id"][:8] + ("*" if r["run_id"] == run_id else ""), r["mode"],
                   f"[red]{r['status']}[/]" if r["status"] == "failed" else r["status"],
                   str(r["started_at"] or "")[:19].replace("T", " "), f"{r['lines_read'] or 0:,}",
                   f"{r['rows_loaded'] or 0:,}", f"{r['rows_quarantined'] or 0:,}", r["snapshot_status"] or "")
    out.print(rt)
    for r in runs[:5]:
        if r["status"] == "failed" and r["error"]:
            line = r["error"].splitlines()[0]
            if len(line) > ERROR_SHOWN:  # every ingest step refused, each naming its source: ~5,000 characters
                line = f"{line[:ERROR_SHOWN]}… ({len(line) - ERROR_SHOWN:,} more characters)"
            out.print(f"[red]run {r['run_id'][:8]} failed:[/] {escape(line)}", highlight=False, soft_wrap=True)


def _with_pending(settings: Settings, runs: list[dict]) -> list[dict]:
    """``runs``, after the failed runs not recorded yet (``state.pending_failures``)."""
    pending = pending_failures(settings)
    listed = {r["run_id"] for r in pending}
    return pending + [r for r in runs if r["run_id"] not in listed]


def _print_status(settings: Settings, run_id: str | None = None) -> None:
    if not settings.warehouse.exists():
        # runs that failed before any publish: their errors are what a first-time user needs
        # (a Dagster-only operator whose first launches failed saw only "run `flywheel run` first")
        _print_runs(_with_pending(settings, recent_runs(settings) or []), run_id)
        _print_writer(settings)
    con = _reader(settings)
    try:
        table = Table(title=escape(f"Sources ({settings.warehouse})"))
        for col in ("source", "files", "lines", "loaded", "quarantined", "blank", "deferred bytes",
                    "staged rows", "last ingested"):
            table.add_column(col, justify="left" if col in ("source", "last ingested") else "right")
        # views in a published warehouse; tables in one an older version wrote (they were counted as 0)
        staged = {name: con.execute(f'select count(*) from staging."{name}"').fetchone()[0] for (name,) in con.execute(
            "select view_name from duckdb_views() where schema_name = 'staging' and not internal "
            "union all select table_name from duckdb_tables() where schema_name = 'staging'").fetchall()}
        rows = con.execute(
            "select source, count(*), sum(lines_read), sum(rows_loaded), sum(rows_quarantined), "
            "sum(blank_lines), sum(deferred_bytes), max(last_ingested_at) "
            "from ingest.files group by source order by source").fetchall()
        for source, files, lines, loaded, quarantined, blank, deferred, last in rows:
            table.add_row(source, f"{files:,}", f"{lines:,}", f"{loaded:,}",
                          f"[red]{quarantined:,}[/]" if quarantined else "0", f"{blank:,}",
                          f"{deferred:,}", f"{staged.get(source, 0):,}",
                          last.strftime("%Y-%m-%d %H:%M:%S") if last else "")
        out.print(table)
        published = con.execute("select run_id from ingest.runs order by started_at desc limit 1").fetchone()
        # every run, failed and unchanged ones included (the warehouse's log: only up to its publish)
        runs = recent_runs(settings) or [
            dict(zip(RUN_FIELDS, row)) for row in con.execute(
                "select run_id, mode, status, started_at::varchar, finished_at::varchar, lines_read, rows_loaded, "
                "rows_quarantined, null, error from ingest.runs order by started_at desc limit 5").fetchall()]
        _print_runs(_with_pending(settings, runs), run_id)
        _print_writer(settings)
        if published:
            _print_excluded(con, settings, run_id or published[0])
        # the run's files missing, unreadable, locked... (published only with the next change);
        # alone, the newest run's files that it could not read: a file unreadable every night
        # (a producer's mode, a lock never released) showed only in each run's own output
        this = next((r for r in runs if (r["run_id"] == run_id if run_id else r.get("status") != "running")
                     and "events" in r), None)
        events = None
        if this is not None:
            events = this["events"] if run_id else [e for e in this["events"] if e[2] in NOT_READ]
            if events and not run_id:
                out.print(f"[yellow]run {this['run_id'][:8]}[/] could not read these files:", highlight=False)
        elif run_id:
            events = con.execute("select source, path, event, detail from ingest.file_events where run_id = ? "
                                 "order by occurred_at, path", [run_id]).fetchall()
        if events:
            for source, path, event, detail, alike in _alike_folded(events):
                out.print(f"[yellow]{event}[/] {source}: {escape(path)}: {escape(detail or '')}"
                          + (f" [yellow](and {alike:,} more {source} files, the same)[/]" if alike else ""),
                          highlight=False, soft_wrap=True)
            if this and this["events_total"] > len(this["events"]):
                out.print(f"[yellow]… and {this['events_total'] - len(this['events']):,} more file events[/] "
                          "(ingest.file_events)")
        from dagster_project.engine import bronze_usage
        from dagster_project.privacy import unfinished_erasures

        for when in unfinished_erasures(settings):
            out.print(f"[red]erasure unfinished[/]: a `flywheel forget` was interrupted ({when} UTC); its subject "
                      "stays in the published data until the same command is run again", highlight=False, soft_wrap=True)
        usage = bronze_usage(settings)
        out.print(f"bronze record: {usage['objects']:,} objects, {usage['compressed_bytes'] / 1e6:,.1f} MB "
                  f"compressed for {usage['raw_bytes'] / 1e6:,.1f} MB read ({escape(str(settings.state_dir / 'bronze'))})")
        _print_publications(con, settings)
    except UNREADABLE_VIEWS as exc:
        _unreadable_views(settings, exc)
    finally:
        con.close()


# What a published warehouse that does not stand whole raises: views that read no file, or
# views and tables that are not the published ones
UNREADABLE_VIEWS = (duckdb.IOException, duckdb.CatalogException, duckdb.BinderException)


def _unreadable_views(settings: Settings, exc: duckdb.Error) -> None:
    """Views that read no file (a lake moved elsewhere; a snapshot's file removed by hand), or that
    are not the ones published (the warehouse opened read-write, a view dropped or replaced: `eval`
    ended in a traceback): one line, not a traceback. Any other error (the file is as published:
    a bug) is raised."""
    path = os.path.realpath(settings.warehouse)
    if isinstance(exc, duckdb.IOException):
        fail(f"{path}: the published warehouse's views cannot read their files ({_said(exc)}): the lake moved or "
             "its snapshot was damaged; the next `flywheel run` publishes it again", 1)
    from dagster_project.publishing.parquet import sha256_file
    from dagster_project.publishing.snapshot import read_manifest

    published = ((read_manifest(settings.export_dir) or {}).get("warehouse") or {}).get("sha256")
    if not published or sha256_file(Path(path)) == published:
        raise exc
    fail(f"{path}: the published warehouse was changed after it was published ({_said(exc)}): it was opened "
         "read-write (use read_only=True, duckdb -readonly); the next `flywheel run` publishes it again", 1)


def _print_writer(settings: Settings) -> None:
    """A line when a process writes the lake now, or the last one was killed while it did: its
    run is in neither table above until the next run (or the sensor) records it failed."""
    from dagster_project.state import writer_activity, writer_lock_path

    activity = writer_activity(settings)
    if activity is None:
        return
    what, holder = activity
    lock = writer_lock_path(settings)
    if what == "writing":
        out.print(f"[yellow]writing now[/]: {escape(holder)} holds the writer lock ({escape(str(lock))}); the tables above "
                  "are as of the last publish", highlight=False, soft_wrap=True)
    else:
        out.print(f"[red]the last writer did not finish[/]: {escape(holder)} stopped (killed, or the machine "
                  f"stopped) without releasing the writer lock ({escape(str(lock))}); the next run records it as failed "
                  "and does what it left undone (an interrupted forget: run it again)", highlight=False, soft_wrap=True)


def _print_excluded(con: duckdb.DuckDBPyConnection, settings: Settings, run_id: str) -> None:
    """Rows a ``drop`` expectation kept out of a table in that run (the ledger ingest.excluded)."""
    from dagster_project.publishing import read_manifest
    from dagster_project.versions import exclusions

    # the warehouse has no lineage: the current manifest names the run that built each table
    datasets = (read_manifest(settings.export_dir) or {}).get("datasets") or {}
    built = {d["table"]: d["built_by_run"] for d in datasets.values() if d.get("built_by_run")}
    rows = exclusions(con, run_id, built=built)
    if not rows:
        out.print(f"Excluded rows (run {run_id[:8]}): none")
        return
    table = Table(title=f"Excluded rows (run {run_id[:8]}; select * from ingest.excluded)")
    for col in ("table", "expectation", "rows"):
        table.add_column(col, justify="right" if col == "rows" else "left")
    for name, expectation, n in rows:
        table.add_row(name, expectation, f"[yellow]{n:,}[/]")
    out.print(table)


def _print_publications(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    from dagster_project.publishing import status as publishing_status

    info = publishing_status(settings.export_dir)
    if not info["snapshots"]:
        return
    # each snapshot's directory is <this>/<version>: the version whole, a path to copy (a path
    # column was cut with "…" beside the others)
    snaps = Path(info["snapshots"][0]["path"]).parent
    out.print(f"Snapshots in {escape(str(snaps))}/ (* current):", highlight=False, soft_wrap=True)
    table = Table()
    for col in ("version", "run", "created", "datasets", "rows", "validation"):
        table.add_column(col, no_wrap=col == "version")
    for snap in info["snapshots"]:
        table.add_row(Text(snap["version"] + (" *" if snap["current"] else "")), str(snap["run_id"] or "")[:8],
                      str(snap["created_at"] or "")[:19], str(snap["datasets"]), f"{snap['rows']:,}",
                      str(snap["validation"] or ""))
    out.print(table)
    try:
        failed = con.execute(
            "select table_name, expectation, action, observed from ingest.validations "
            "where not success and run_id = (select max_by(run_id, validated_at) from ingest.validations) "
            "order by action = 'warn', table_name, expectation").fetchall()
    except duckdb.Error:
        return
    # a warn expectation reports (the run published); a failed drop or fail one stopped the publish
    for table_name, expectation, action, observed in failed:
        label = "[yellow]validation warning[/]" if action == "warn" else f"[red]validation failed ({action})[/]"
        out.print(f"{label} {escape(f'{table_name}: {expectation}; observed {observed}')}",
                  highlight=False, soft_wrap=True)


@quarantine_app.command("list")
def quarantine_list(
    source: Annotated[Optional[str], typer.Option(help="Only this source.")] = None,
    reason: Annotated[Optional[str], typer.Option(help="Only this reason (prefix match, e.g. bad_type).")] = None,
    limit: Annotated[int, typer.Option(min=0, help="At most this many rows.")] = 50,
) -> None:
    """Quarantined lines with file, line, reason and detail."""
    with closing(_reader(_settings())) as con:  # closed on an error too: see _reader
        _check_source(con, source)
        rows = con.execute(
            "select source, path, line_number, byte_offset, reason, detail, raw_text from ingest.quarantine "
            "where ($source is null or source = $source) and ($reason is null or starts_with(reason, $reason)) "
            "order by source, path, line_number limit $limit",
            {"source": source, "reason": reason, "limit": limit}).fetchall()
        summary = con.execute(
            "select reason, count(*) from ingest.quarantine where ($source is null or source = $source) "
            "and ($reason is null or starts_with(reason, $reason)) "
            "group by all order by 2 desc, 1", {"source": source, "reason": reason}).fetchall()
    table = Table(title="Quarantine")
    for col in ("source", "file:line", "offset", "reason", "detail", "raw"):
        table.add_column(col, overflow="fold", no_wrap=col in ("file:line", "reason"))
    for src, path, line, offset, why, detail, raw in rows:
        # Text, not markup: a quarantined line is anything a producer wrote (`[/]` raised MarkupError)
        table.add_row(src, Text(_visible(f"{path}:{line}")), "" if offset is None else str(offset), Text(why),
                      Text(detail or ""), Text(_visible((raw or "")[:80])))
    out.print(table)
    out.print("by reason: " + ", ".join(f"{r} {n}" for r, n in summary) if summary else "nothing quarantined")


def _visible(text: str) -> str:
    """``text`` with control characters (a UTF-16 line's NULs, an escape sequence) as ``\\xNN``:
    printed raw they went to the terminal as they are."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


@quarantine_app.command("export")
def quarantine_export(
    destination: Annotated[Path, typer.Argument(help="File to write (.jsonl or .csv).")],
    source: Annotated[Optional[str], typer.Option(help="Only this source.")] = None,
    reason: Annotated[Optional[str], typer.Option(help="Only this reason (prefix match).")] = None,
) -> None:
    """Write quarantined lines (raw text, reason, file, line, offset) to JSONL or CSV."""
    if destination.suffix not in (".csv", ".jsonl", ".ndjson"):
        fail(f"{destination}: use a .jsonl or .csv file name")
    if not destination.parent.is_dir():
        fail(f"{destination}: directory {destination.parent} does not exist; create it or choose another path")
    with closing(_reader(_settings())) as con:
        _check_source(con, source)
        result = con.execute(
            "select source, path, line_number, byte_offset, reason, detail, raw_text, "
            "case when raw_bytes is not null then to_base64(raw_bytes) end as raw_bytes_base64, "
            "raw_sha256, raw_length, run_id, quarantined_at::varchar as quarantined_at from ingest.quarantine "
            "where ($source is null or source = $source) and ($reason is null or starts_with(reason, $reason)) "
            "order by source, path, line_number", {"source": source, "reason": reason})
        names = [d[0] for d in result.description]
        rows = result.fetchall()
    try:
        if destination.suffix == ".csv":
            with destination.open("w", newline="", encoding="utf-8") as fh:
                writer = csv.writer(fh)
                writer.writerow(names)
                writer.writerows(rows)
        else:
            with destination.open("w", encoding="utf-8") as fh:
                for row in rows:
                    fh.write(json.dumps(dict(zip(names, row)), ensure_ascii=False) + "\n")
    except OSError as exc:  # a directory of that name, a read-only directory, a full disk
        fail(f"{destination}: cannot write it: {exc.strerror or exc}")
    console.print(f"wrote {len(rows):,} quarantined rows to {escape(str(destination))}")


@quarantine_app.command("replay")
def quarantine_replay(
    source: Annotated[Optional[str], typer.Option(help="Only this source.")] = None,
) -> None:
    """Classify again, from the lake's bronze record, every source with quarantined lines (the
    whole source, not only those files), e.g. after a sources-file fix (time zone, globs); its
    rows and quarantine are rebuilt; nothing is double counted."""
    settings = _settings()
    with closing(_reader(settings)) as con:
        _check_source(con, source)
        paths = con.execute("select distinct source, path from ingest.quarantine "
                            "where ($source is null or source = $source)", {"source": source}).fetchall()
    if not paths:
        console.print("nothing quarantined: nothing to replay")
        return
    sources = sorted({name for name, _ in paths})
    from dagster_project.sources import SourcesConfigError, load_sources

    try:
        enabled = load_sources(settings.sources_file)
    except SourcesConfigError as exc:  # (the command is for after a sources-file fix)
        fail(f"FLYWHEEL_SOURCES: {exc}")
    if off := sorted(set(sources) - set(enabled)):
        # (replayed, nothing was: a disabled source's files are not read, its rows kept as they are)
        fail(f"{', '.join(off)}: switched off in FLYWHEEL_SOURCES={settings.sources_file} (enabled: false), so "
             f"not replayed; switch it on to replay it" + ("" if source else f", or replay the others with --source"))
    console.print(f"replaying {len(sources)} source(s) with quarantined lines in {len(paths):,} file(s), "
                  f"each whole from the bronze record: {', '.join(sources)}", highlight=False, soft_wrap=True)
    started = time.perf_counter()
    result = _run(settings, replay=paths, console=console)
    _print_result(result, settings, time.perf_counter() - started)


@app.command()
def synth(
    root: Annotated[Path, typer.Argument(help="Raw lake directory to write.")] = Path("data/raw"),
    interactions: Annotated[int, typer.Option(min=1, help="Number of interaction lines.")] = 3000,
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same bytes).")] = 7,
    clean: Annotated[bool, typer.Option("--clean/--no-clean", help="Produce no bad-input cases.")] = False,
    manifest: Annotated[Optional[Path], typer.Option(help="Write the expected quarantine here.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Empty a non-empty directory first.")] = False,
) -> None:
    """Generate a deterministic synthetic raw lake (the sample lake, or large ones for benchmarks)."""
    import shutil

    from dagster_project.synth import generate_lake

    if root.exists() and not root.is_dir():
        fail(f"{root} is a file: name a directory")
    if root.is_dir() and any(root.iterdir()):
        if not force:
            fail(f"{root} is not empty: old and new files would mix; choose an empty directory "
                 f"or pass --force to delete its contents first")
        if held := _lake_record(root):  # `synth --force data` for `data/raw` deleted the lake's bronze
            fail(f"{root} holds a lake's own record ({held}): --force would delete it; "
                 "name the raw directory (e.g. data/raw) or an empty one")
        for child in root.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()

    summary = generate_lake(root, interactions=interactions, seed=seed, bad_cases=not clean,
                            manifest_path=manifest, progress=lambda m: console.print(m, style="dim"))
    out.print_json(data=summary, default=str)


def _lake_record(root: Path) -> Path | None:
    """A state directory (bronze, the state database, the erasure keys), a snapshot tree, a
    DuckDB file or a Dagster instance (its `dagster.yaml`: `synth --force $DAGSTER_HOME` deleted
    the run history and the instance's settings) under ``root``: what no producer writes and no
    run can bring back."""
    for here, dirs, files in os.walk(root):
        for name in dirs:
            if name in (".flywheel", ".snapshots"):
                return Path(here) / name
        for name in files:
            if name.endswith(".duckdb") or name == "dagster.yaml":
                return Path(here) / name
    return None


@app.command("eval")
def eval_(
    feedback: Annotated[bool, typer.Option("--feedback", help="Real-world retrieval feedback (query → commit).")] = False,
) -> None:
    """Retrieval evaluation report from the published warehouse."""
    if not feedback:
        console.print("nothing to evaluate: pass --feedback")
        raise typer.Exit(2)
    from transforms.retrieval import feedback_report

    settings = _settings()
    with closing(_reader(settings)) as con:
        try:
            report = feedback_report(con)
        except UNREADABLE_VIEWS as exc:
            _unreadable_views(settings, exc)
    out.print(report, highlight=False)


@app.command()
def bench(
    interactions: Annotated[int, typer.Option(help="Interactions in the main lake (no-op, incremental, RSS).")] = 1_000_000,
    marginal: Annotated[str, typer.Option(help="Two lake sizes N,2N for the marginal cost per interaction (2N may be the main lake: its phases are then measured once).")] = "500000,1000000",
    workdir: Annotated[Path, typer.Option(help="Where lakes are generated (cached) and runs write.")] = Path("data/bench"),
    quick: Annotated[bool, typer.Option("--quick", help="Use the larger marginal lake (2N) as the main lake, e.g. with --marginal 20000,40000.")] = False,
    repeat: Annotated[int, typer.Option(help="Run each phase this many times and keep the fastest (the no-op and the +1% run alternate, each from a copy of the full refresh's state).")] = 1,
    json_file: Annotated[Optional[Path], typer.Option("--json", help="Write every figure to this JSON file.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only a line per phase, not each step of the runs.")] = False,
) -> None:
    """Issue 10's targets side by side: bare read_json (+ COPY), full refresh (staging, exports),
    no-op, incremental after +1%, bytes written, peak RSS; marginal costs at N and 2N."""
    from dagster_project.bench import BenchError, run_bench

    try:
        sizes = tuple(int(x.replace("_", "")) for x in marginal.split(","))
    except ValueError:
        sizes = ()
    if len(sizes) != 2 or not 0 < min(sizes) < max(sizes):
        fail(f"--marginal {marginal}: give two different sizes above 0, N,2N, e.g. --marginal 200000,400000")
    if interactions < 1:
        fail(f"--interactions {interactions}: give a size above 0, e.g. --interactions 1000000")
    if repeat < 1:
        fail(f"--repeat {repeat}: give 1 or more, e.g. --repeat 3")
    try:
        run_bench(workdir, interactions=interactions, marginal=sizes, quick=quick, repeat=repeat, json_path=json_file,
                  console=out, echo_steps=not quiet)
    except BenchError as exc:
        fail(str(exc), 1)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
