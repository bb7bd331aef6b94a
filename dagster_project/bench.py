"""``make bench``: the pipeline against bare DuckDB on the same generated lake, in one run.

Each measurement runs in its own subprocess so its peak RSS is its own. Figures:

* (a) ``flywheel run --full-refresh`` through staging (every source, lossless);
* (b) bare ``read_json`` with an explicit schema and ``ignore_errors=true`` into tables over the
  same JSONL files: the fast but lossy lower bound;
* (c) an incremental run after appending 1% new interaction lines;
* (d) the whole pipeline through exports, against (e) bare ``read_json`` + ``COPY … TO parquet``.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dagster_project.settings import Settings
from transforms.spec import STORAGE_TYPE


def _settings(workdir: Path) -> Settings:
    return Settings.from_env({
        "FLYWHEEL_RAW_DIR": str(workdir / "raw"),
        "FLYWHEEL_WAREHOUSE": str(workdir / "warehouse.duckdb"),
        "FLYWHEEL_EXPORT_DIR": str(workdir / "exports"),
    })


def _jsonl_files(settings: Settings) -> dict[str, list[Path]]:
    from dagster_project.engine import SQLITE_SUFFIXES, discover
    from dagster_project.sources import load_sources

    out = {}
    for name, spec in load_sources().items():
        files = [real for _, real in discover(spec, settings.raw_dir) if real.suffix not in SQLITE_SUFFIXES]
        if files and spec.format != "sqlite":
            out[name] = files
    return out


def _bare_columns(spec) -> dict[str, str]:
    return {f.name: ("VARCHAR" if f.time and f.type == "string" else STORAGE_TYPE[f.type].upper())
            for f in spec.fields}


def phase_bare(workdir: Path, parquet: bool) -> dict:
    """read_json(explicit schema, ignore_errors) of every JSONL file into tables (+ Parquet)."""
    import duckdb

    from dagster_project.sources import load_sources

    settings = _settings(workdir)
    db = workdir / "bare.duckdb"
    db.unlink(missing_ok=True)
    out_dir = workdir / "bare_parquet"
    out_dir.mkdir(exist_ok=True)
    specs = load_sources()
    con = duckdb.connect(str(db))
    rows = 0
    for name, files in _jsonl_files(settings).items():
        con.execute(
            f'create table "{name}" as select * from read_json($files, format = \'newline_delimited\', '
            f"columns = $columns, ignore_errors = true)",
            {"files": [str(f) for f in files], "columns": _bare_columns(specs[name])})
        rows += con.execute(f'select count(*) from "{name}"').fetchall()[0][0]
        if parquet:
            con.execute(f"copy \"{name}\" to '{out_dir / name}.parquet' (format parquet, compression zstd)")
    con.execute("checkpoint")
    con.close()
    return {"rows": rows}


def phase_pipeline(workdir: Path, full_refresh: bool, through: str) -> dict:
    from dagster_project.pipeline import run_pipeline
    from dagster_project.sources import builtin_sources

    settings = _settings(workdir)
    selection = None
    if through == "staging":
        selection = [f"ingest/{n}" for n in builtin_sources()] + [f"staging/{n}" for n in builtin_sources()]
    result = run_pipeline(settings, full_refresh=full_refresh, selection=selection)
    if not result.success:
        raise SystemExit(f"pipeline failed: {result.failures}")
    return {"run_id": result.run_id}


def append_one_percent(workdir: Path) -> dict:
    """Append 1% new interaction lines (new ids, one new file per day) — what a day of use adds."""
    settings = _settings(workdir)
    files = sorted((settings.raw_dir / "interactions").glob("interactions_*.jsonl"))
    total = sum(1 for f in files for _ in f.open("rb"))
    wanted = max(1, total // 100)
    template = files[0].open("rb").readline().decode()
    record = json.loads(template)
    # a new collector file for the day after the lake ends (not in the future: GX would block it)
    target = settings.raw_dir / "interactions" / "interactions_2026-04-15_bench000.jsonl"
    with target.open("a", encoding="utf-8") as fh:
        start = sum(1 for _ in target.open("rb")) if target.exists() else 0
        for i in range(wanted):
            record["id"] = f"bench-append-{start + i:09d}"
            record["timestamp"] = "2026-04-15T00:00:00"
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    return {"appended_lines": wanted, "existing_lines": total}


def _child(args: list[str], console: Console | None = None) -> tuple[float, float, dict]:
    """Run one phase in a fresh interpreter: (seconds, peak RSS MB, its JSON result)."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dagster_project.bench", *args],
                          capture_output=True, text=True, env={**os.environ})
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"bench phase {args} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if console is not None:
        console.print(f"    {seconds:.2f} s, peak RSS {result['peak_rss_mb']:,.0f} MB")
    return seconds, result["peak_rss_mb"], result


def run_bench(workdir: Path, *, interactions: int, console: Console | None = None) -> dict:
    console = console or Console()
    workdir = workdir.resolve()
    settings = _settings(workdir)
    marker = workdir / "lake.json"
    wanted = {"interactions": interactions, "seed": 7}
    if not marker.exists() or json.loads(marker.read_text()) != wanted:
        import shutil

        from dagster_project.synth import generate_lake

        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        console.print(f"generating a {interactions:,}-interaction lake in {settings.raw_dir} …")
        t = time.perf_counter()
        generate_lake(settings.raw_dir, interactions=interactions, seed=7, bad_cases=False)
        console.print(f"  generated in {time.perf_counter() - t:.1f} s")
        marker.write_text(json.dumps(wanted))
    # A fresh copy of the appended file each bench run keeps runs comparable.
    (settings.raw_dir / "interactions" / "interactions_2026-04-15_bench000.jsonl").unlink(missing_ok=True)
    jsonl = _jsonl_files(settings)
    nbytes = sum(f.stat().st_size for fs in jsonl.values() for f in fs)
    nlines = sum(1 for fs in jsonl.values() for f in fs for _ in f.open("rb"))
    console.print(f"lake: {nbytes / 1e6:,.1f} MB of JSONL in {sum(map(len, jsonl.values())):,} files, "
                  f"{nlines:,} lines")

    figures = {}
    console.print("(b) bare read_json …")
    figures["b"] = _child(["_bare", str(workdir)], console)
    console.print("(a) flywheel run --full-refresh through staging …")
    figures["a"] = _child(["_pipeline", str(workdir), "full", "staging"], console)
    appended = append_one_percent(workdir)
    console.print(f"(c) incremental run after appending {appended['appended_lines']:,} lines …")
    figures["c"] = _child(["_pipeline", str(workdir), "incremental", "staging"], console)
    console.print("(e) bare read_json + COPY TO parquet …")
    figures["e"] = _child(["_bare_parquet", str(workdir)], console)
    console.print("(d) whole pipeline through exports (full refresh) …")
    figures["d"] = _child(["_pipeline", str(workdir), "full", "all"], console)

    table = Table(title=f"Flywheel Lake benchmark — {nlines:,} lines, {nbytes / 1e6:,.0f} MB JSONL "
                        f"({os.cpu_count()} cores)")
    for col in ("measurement", "seconds", "MB/s", "lines/s", "peak RSS MB"):
        table.add_column(col, justify="left" if col == "measurement" else "right")
    labels = {
        "a": "(a) flywheel run --full-refresh → staging",
        "b": "(b) bare read_json (lossy lower bound)",
        "c": "(c) incremental run, +1% lines",
        "d": "(d) whole pipeline → exports",
        "e": "(e) bare read_json + COPY TO parquet",
    }
    for key in "abcde":
        seconds, rss, _ = figures[key]
        table.add_row(labels[key], f"{seconds:.2f}", f"{nbytes / 1e6 / seconds:,.0f}",
                      f"{nlines / seconds:,.0f}", f"{rss:,.0f}")
    console.print(table)
    ratios = {
        "a/b (target ≤ 1.5)": figures["a"][0] / figures["b"][0],
        "c/a (target ≤ 0.05)": figures["c"][0] / figures["a"][0],
        "d/e (target ≤ 2.5)": figures["d"][0] / figures["e"][0],
    }
    for name, value in ratios.items():
        console.print(f"{name}: {value:.3f}")
    console.print(f"peak RSS max: {max(f[1] for f in figures.values()):,.0f} MB (target ≤ 4096)")
    return {"figures": {k: {"seconds": v[0], "peak_rss_mb": v[1]} for k, v in figures.items()},
            "ratios": ratios, "bytes": nbytes, "lines": nlines}


def _main(argv: list[str]) -> None:
    phase, workdir = argv[0], Path(argv[1])
    if phase == "_bare":
        result = phase_bare(workdir, parquet=False)
    elif phase == "_bare_parquet":
        result = phase_bare(workdir, parquet=True)
    elif phase == "_pipeline":
        result = phase_pipeline(workdir, full_refresh=argv[2] == "full", through=argv[3])
    else:
        raise SystemExit(f"unknown phase {phase}")
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


if __name__ == "__main__":
    _main(sys.argv[1:])
