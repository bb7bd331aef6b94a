"""``flywheel``: run the pipeline, inspect what it ingested and quarantined, make lakes."""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import duckdb
import typer
from rich.console import Console
from rich.table import Table

from dagster_project.settings import Settings

os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "yes")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

app = typer.Typer(help="Flywheel Lake: lossless feedback-data pipeline.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
quarantine_app = typer.Typer(help="Inspect, export and replay quarantined lines.", no_args_is_help=True)
app.add_typer(quarantine_app, name="quarantine")
console = Console(stderr=True)
# Piped output (CI logs, files) gets room for the tables instead of rich's 80-column default.
out = Console(width=None if sys.stdout.isatty() else 160)


def _reader(settings: Settings) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the published warehouse (never blocks a run)."""
    if not settings.warehouse.exists():
        console.print(f"[red]No warehouse at {settings.warehouse}[/]: run `flywheel run` first.")
        raise typer.Exit(1)
    con = duckdb.connect(str(settings.warehouse), read_only=True)
    con.execute("set TimeZone = 'UTC'")
    return con


@app.command()
def run(
    full_refresh: Annotated[bool, typer.Option("--full-refresh", help="Forget all watermarks and rebuild from every raw file.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
) -> None:
    """Run the whole pipeline in-process (ingest → staging → marts → exports → publish)."""
    from dagster_project.pipeline import run_pipeline

    settings = Settings.from_env()
    console.print(f"[bold]Flywheel Lake[/] raw={settings.raw_dir} warehouse={settings.warehouse}"
                  f"{' [yellow](full refresh)[/]' if full_refresh else ''}")
    started = time.perf_counter()
    result = run_pipeline(settings, full_refresh=full_refresh, console=None if quiet else console)
    elapsed = time.perf_counter() - started
    if not result.success:
        console.print(f"[red bold]Run {result.run_id} failed[/] after {elapsed:.1f} s")
        for step, message in result.failures:
            console.print(f"[red]✗ {step}[/]\n{message}")
        raise typer.Exit(1)
    console.print(f"[green bold]Run {result.run_id} succeeded[/] in {elapsed:.1f} s")
    _print_status(settings, run_id=result.run_id)


@app.command()
def status() -> None:
    """Per source: files, lines, loaded, quarantined, deferred, last run; published versions."""
    _print_status(Settings.from_env())


def _print_status(settings: Settings, run_id: str | None = None) -> None:
    con = _reader(settings)
    try:
        table = Table(title=f"Sources ({settings.warehouse})")
        for col in ("source", "files", "lines", "loaded", "quarantined", "blank", "deferred bytes",
                    "staged rows", "last ingested"):
            table.add_column(col, justify="left" if col in ("source", "last ingested") else "right")
        staged = dict(con.execute(
            "select table_name, estimated_size from duckdb_tables() where schema_name = 'staging'").fetchall())
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
        runs = con.execute(
            "select run_id, mode, status, started_at, finished_at, lines_read, rows_loaded, "
            "rows_quarantined from ingest.runs order by started_at desc limit 5").fetchall()
        if runs:
            rt = Table(title="Recent runs")
            for col in ("run", "mode", "status", "started", "lines", "loaded", "quarantined"):
                rt.add_column(col)
            for rid, mode, st, start, _, lines, loaded, quarantined in runs:
                rt.add_row(rid[:8] + ("*" if rid == run_id else ""), mode, st,
                           start.strftime("%Y-%m-%d %H:%M:%S"), f"{lines:,}", f"{loaded:,}", f"{quarantined:,}")
            out.print(rt)
        if run_id:
            for source, path, event, detail in con.execute(
                    "select source, path, event, detail from ingest.file_events where run_id = ? "
                    "order by occurred_at, path", [run_id]).fetchall():
                out.print(f"[yellow]{event}[/] {source}: {path}: {detail}")
        from dagster_project.engine import bronze_usage

        usage = bronze_usage(settings)
        out.print(f"bronze record: {usage['objects']:,} objects, {usage['compressed_bytes'] / 1e6:,.1f} MB "
                  f"compressed for {usage['raw_bytes'] / 1e6:,.1f} MB read ({settings.state_dir / 'bronze'})")
        _print_publications(con, settings)
    finally:
        con.close()


def _print_publications(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    try:
        from dagster_project.publish import current_version
    except ImportError:
        return
    datasets = sorted(p for p in settings.export_dir.glob("*/*") if not p.name.startswith("."))
    if not datasets:
        return
    table = Table(title=f"Published exports ({settings.export_dir})")
    for col in ("dataset", "rows", "run", "created", "validation"):
        table.add_column(col)
    for path in datasets:
        manifest = current_version(path)
        if manifest is None:
            continue
        m = manifest if isinstance(manifest, dict) else manifest.__dict__
        validation = m.get("validation") or {}
        table.add_row(f"{path.parent.name}/{path.name}", f"{m.get('rows', 0):,}", str(m.get("run_id", ""))[:8],
                      str(m.get("created_at", ""))[:19],
                      str(validation.get("status", validation) if isinstance(validation, dict) else validation))
    out.print(table)
    try:
        failed = con.execute(
            "select table_name, expectation, column_name, observed from ingest.validations "
            "where not success and run_id = (select max_by(run_id, validated_at) from ingest.validations)").fetchall()
    except duckdb.Error:
        return
    for table_name, expectation, column, observed in failed:
        out.print(f"[yellow]validation failed[/] {table_name}: {expectation}({column or ''}) observed {observed}")


@quarantine_app.command("list")
def quarantine_list(
    source: Annotated[Optional[str], typer.Option(help="Only this source.")] = None,
    reason: Annotated[Optional[str], typer.Option(help="Only this reason (prefix match, e.g. bad_type).")] = None,
    limit: Annotated[int, typer.Option(help="At most this many rows.")] = 50,
) -> None:
    """Quarantined lines with file, line, reason and detail."""
    con = _reader(Settings.from_env())
    rows = con.execute(
        "select source, path, line_number, byte_offset, reason, detail, raw_text from ingest.quarantine "
        "where ($source is null or source = $source) and ($reason is null or starts_with(reason, $reason)) "
        "order by source, path, line_number limit $limit",
        {"source": source, "reason": reason, "limit": limit}).fetchall()
    summary = con.execute(
        "select reason, count(*) from ingest.quarantine where ($source is null or source = $source) "
        "group by all order by 2 desc", {"source": source}).fetchall()
    table = Table(title="Quarantine")
    for col in ("source", "file:line", "offset", "reason", "detail", "raw"):
        table.add_column(col, overflow="fold", no_wrap=col in ("file:line", "reason"))
    for src, path, line, offset, why, detail, raw in rows:
        table.add_row(src, f"{path}:{line}", "" if offset is None else str(offset), why, detail or "",
                      (raw or "")[:80])
    out.print(table)
    out.print("by reason: " + ", ".join(f"{r} {n}" for r, n in summary) if summary else "nothing quarantined")


@quarantine_app.command("export")
def quarantine_export(
    destination: Annotated[Path, typer.Argument(help="File to write (.jsonl or .csv).")],
    source: Annotated[Optional[str], typer.Option(help="Only this source.")] = None,
    reason: Annotated[Optional[str], typer.Option(help="Only this reason (prefix match).")] = None,
) -> None:
    """Write quarantined lines (raw text, reason, file, line, offset) to JSONL or CSV."""
    con = _reader(Settings.from_env())
    result = con.execute(
        "select source, path, line_number, byte_offset, reason, detail, raw_text, "
        "case when raw_bytes is not null then to_base64(raw_bytes) end as raw_bytes_base64, "
        "raw_sha256, raw_length, run_id, quarantined_at::varchar as quarantined_at from ingest.quarantine "
        "where ($source is null or source = $source) and ($reason is null or starts_with(reason, $reason)) "
        "order by source, path, line_number", {"source": source, "reason": reason})
    names = [d[0] for d in result.description]
    rows = result.fetchall()
    if destination.suffix == ".csv":
        with destination.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(names)
            writer.writerows(rows)
    elif destination.suffix in (".jsonl", ".ndjson"):
        with destination.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(dict(zip(names, row)), ensure_ascii=False) + "\n")
    else:
        console.print(f"[red]{destination}: use a .jsonl or .csv file name[/]")
        raise typer.Exit(2)
    console.print(f"wrote {len(rows):,} quarantined rows to {destination}")


@quarantine_app.command("replay")
def quarantine_replay(
    source: Annotated[Optional[str], typer.Option(help="Only this source.")] = None,
) -> None:
    """Re-read the files that have quarantined lines, e.g. after a sources-file fix (time zone,
    globs) — their rows and quarantine are rebuilt from the raw bytes; nothing is double counted."""
    from dagster_project.pipeline import run_pipeline

    settings = Settings.from_env()
    con = _reader(settings)
    paths = con.execute("select distinct source, path from ingest.quarantine "
                        "where ($source is null or source = $source)", {"source": source}).fetchall()
    con.close()
    if not paths:
        console.print("nothing quarantined: nothing to replay")
        return
    result = run_pipeline(settings, replay=paths, console=console)
    if not result.success:
        for step, message in result.failures:
            console.print(f"[red]✗ {step}[/]\n{message}")
        raise typer.Exit(1)
    _print_status(settings, run_id=result.run_id)


@app.command()
def synth(
    root: Annotated[Path, typer.Argument(help="Raw lake directory to write.")] = Path("data/raw"),
    interactions: Annotated[int, typer.Option(help="Number of interaction lines.")] = 3000,
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same bytes).")] = 7,
    clean: Annotated[bool, typer.Option("--clean/--no-clean", help="Produce no bad-input cases.")] = False,
    manifest: Annotated[Optional[Path], typer.Option(help="Write the expected quarantine here.")] = None,
) -> None:
    """Generate a deterministic synthetic raw lake (the sample lake, or large ones for benchmarks)."""
    from dagster_project.synth import generate_lake

    summary = generate_lake(root, interactions=interactions, seed=seed, bad_cases=not clean,
                            manifest_path=manifest, progress=lambda m: console.print(m, style="dim"))
    out.print_json(data=summary, default=str)


@app.command("eval")
def eval_(
    feedback: Annotated[bool, typer.Option("--feedback", help="Real-world retrieval feedback (query → commit).")] = False,
) -> None:
    """Retrieval evaluation report from the published warehouse."""
    if not feedback:
        console.print("nothing to evaluate: pass --feedback")
        raise typer.Exit(2)
    from transforms.retrieval import feedback_report

    con = _reader(Settings.from_env())
    out.print(feedback_report(con), highlight=False)


@app.command()
def bench(
    interactions: Annotated[int, typer.Option(help="Interaction lines in the generated lake.")] = 1_000_000,
    workdir: Annotated[Path, typer.Option(help="Where to generate the lake and run.")] = Path("data/bench"),
) -> None:
    """Benchmark the pipeline against bare DuckDB read_json on the same files."""
    from dagster_project.bench import run_bench

    run_bench(workdir, interactions=interactions, console=out)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
