"""``make bench``: issue 10's targets measured side by side in one run.

On the main lake (1,000,000 interactions by default): process start-up, bare ``read_json`` (explicit
schema, ``ignore_errors``: the fast but lossy lower bound), bare ``read_json`` + ``COPY … TO
parquet``, a full refresh through staging, a full refresh through exports, a no-op run, and an
incremental run after appending 1% new interactions with their sidecars. At N and 2N interactions
the four full-read phases, for marginal costs per interaction (start-up cancels). The default is
500,000 and 1,000,000 (the main lake, whose phases are then measured once): at 200,000 and 400,000
bare ``read_json`` differed by 0.2-1.1 s between runs, as much as its whole marginal cost, so the
ratio moved between 6 and 17 with the same code.

Every phase is its own subprocess (``python -m dagster_project.bench PHASE OUT.json``), so its peak
RSS is its own and its wall time includes start-up like a real ``flywheel run``. Each full refresh
starts from an empty state (no warehouse, no bronze): it reads every raw file, as the bare reads do.
Runs use a Dagster instance of their own under the run directory (SQLite event log, as
``flywheel run`` under ``make``), whose event log gives per-step seconds and the snapshot's metadata.

Lakes are generated once, cached by a marker (interactions, seed, generator source hash). The
no-op and the incremental run alternate, each from a copy of the full refresh's state, so both
see the same minutes of a machine whose speed drifts. The 1% append is journaled before it is
written and undone after each incremental run (or at the start of the next bench if one was
interrupted), so re-runs measure the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

SEED = 7
APPEND_SEED = 1_000_003  # another seed: new sessions and new ids
APPEND_SHARE = 0.01
# What the collector writes together, as the generator names it (the sources' default globs; the
# deprecated logger's ``interactions/<day>_interactions.jsonl`` is another source).
APPEND_SOURCES = {"interactions": "interactions_*.jsonl", "feedback": "*_feedback.jsonl",
                  "outcomes": "*_outcomes.jsonl"}
DAY = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})(?!\d)")
# The generated lake spans about 60 days; squeezing its clock by 64 puts a whole generated lake
# (interactions, then feedback and outcomes minutes to hours later) inside one day, in order.
APPEND_SQUEEZE = 64
PSEUDONYM_KEY = "flywheel-bench-key"
MAIN_PHASES = ("startup", "bare", "bare_copy", "full_staging", "full_exports", "noop", "incremental")
MARGINAL_PHASES = ("bare", "bare_copy", "full_staging", "full_exports")
LABELS = {
    "startup": "process start-up (import definitions)",
    "bare": "bare read_json (lossy lower bound)",
    "bare_copy": "bare read_json + COPY TO parquet",
    "full_staging": "full refresh → staging",
    "full_exports": "full refresh → exports (whole pipeline)",
    "noop": "no-op run (nothing new)",
    "incremental": "incremental run after +1%",
}


class BenchError(RuntimeError):
    """A phase failed or the workdir cannot be used; the message is one line."""


# ------------------------------------------------------------------------------ lakes


def generator_version() -> str:
    """A change to the generator invalidates every cached lake."""
    from dagster_project import synth

    return hashlib.sha256(Path(synth.__file__).read_bytes()).hexdigest()[:12]


@dataclass
class Lake:
    interactions: int
    root: Path  # lakes/<key>: raw/, append/, lake.json

    @property
    def raw(self) -> Path:
        return self.root / "raw"

    @property
    def journal(self) -> Path:
        return self.root / "append-journal.json"


def prepare_lake(workdir: Path, interactions: int, say) -> Lake:
    """The cached lake of this size (generated when its marker is missing or differs)."""
    from dagster_project.synth import generate_lake

    lake = Lake(interactions, workdir / "lakes" / f"{interactions}")
    wanted = {"interactions": interactions, "seed": SEED, "generator": generator_version(), "bad_cases": False}
    marker = lake.root / "lake.json"
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        restore_append(lake, say)
        return lake
    shutil.rmtree(lake.root, ignore_errors=True)
    lake.root.mkdir(parents=True)
    say(f"generating a {interactions:,}-interaction lake in {lake.raw} …")
    started = time.perf_counter()
    generate_lake(lake.raw, interactions=interactions, seed=SEED, bad_cases=False)
    marker.write_text(json.dumps(wanted))  # last: an interrupted generation is redone
    say(f"  generated in {time.perf_counter() - started:.1f} s")
    return lake


def lake_end(raw: Path) -> date:
    """The newest day any interaction, feedback or outcome file is named after."""
    days = [date.fromisoformat(m.group(1)) for source, pattern in APPEND_SOURCES.items()
            for path in (raw / source).glob(pattern) if (m := DAY.search(path.name))]
    if not days:
        raise BenchError(f"{raw}: no interaction, feedback or outcome files named by day; regenerate the lake")
    return max(days)


def _day_named(name: str, day: date) -> str:
    """``interactions_2026-02-03_ab12cd34.jsonl`` → the same name on ``day``."""
    if not DAY.search(name):
        raise BenchError(f"{name}: no day (YYYY-MM-DD) in the file name")
    return DAY.sub(day.isoformat(), name, count=1)


def prepare_append(lake: Lake, say) -> dict:
    """The 1% to append, built once: a lake of 1% the interactions generated with another seed
    (new sessions and ids, sidecars as the generator writes them), its clock squeezed into the
    day after the lake ends. Returns {relative path: bytes} to append, and counts."""
    from dagster_project.synth import BASE, generate_lake

    n = max(1, round(lake.interactions * APPEND_SHARE))
    day = lake_end(lake.raw) + timedelta(days=1)
    folder = lake.root / "append"
    marker = folder / "append.json"
    wanted = {"interactions": n, "seed": APPEND_SEED, "day": day.isoformat(), "generator": generator_version()}
    ready = folder / "ready"
    if not (marker.exists() and json.loads(marker.read_text()).get("wanted") == wanted):
        shutil.rmtree(folder, ignore_errors=True)
        say(f"generating the 1% to append ({n:,} interactions with their feedback and outcomes, on {day}) …")
        generate_lake(folder / "generated", interactions=n, seed=APPEND_SEED, bad_cases=False)
        start = datetime(day.year, day.month, day.day)
        lines: dict[str, list[str]] = {}
        for source, pattern in APPEND_SOURCES.items():
            for path in sorted((folder / "generated" / source).glob(pattern)):
                rel = f"{source}/{_day_named(path.name, day)}"
                for line in path.read_text(encoding="utf-8").splitlines():
                    if not line.strip():
                        continue
                    record = json.loads(line)
                    at = datetime.fromisoformat(record["timestamp"])
                    record["timestamp"] = (start + (at - BASE) / APPEND_SQUEEZE).isoformat()
                    lines.setdefault(rel, []).append(json.dumps(record, ensure_ascii=False))
        for rel, rows in lines.items():
            target = ready / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("\n".join(rows) + "\n", encoding="utf-8")
        shutil.rmtree(folder / "generated")
        counts = {source: sum(len(rows) for rel, rows in lines.items() if rel.startswith(source + "/"))
                  for source in APPEND_SOURCES}
        marker.write_text(json.dumps({"wanted": wanted, "lines": counts}))
    counts = json.loads(marker.read_text())["lines"]
    files = sorted(str(p.relative_to(ready)) for p in ready.rglob("*.jsonl"))
    return {"interactions": n, "day": day.isoformat(), "lines": counts, "files": files, "ready": ready}


def apply_append(lake: Lake, append: dict) -> dict:
    """Append the prepared lines to the raw lake. The journal (each file's size before, or that it
    did not exist) is written first, so ``restore_append`` can always undo it."""
    entries = []
    for rel in append["files"]:
        path = lake.raw / rel
        entries.append({"path": rel, "size": path.stat().st_size if path.exists() else None})
    tmp = lake.journal.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries))
    os.replace(tmp, lake.journal)
    written = 0
    for rel in append["files"]:
        data = (append["ready"] / rel).read_bytes()
        target = lake.raw / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("ab") as fh:
            fh.write(data)
        written += len(data)
    return {"bytes": written, "files": len(append["files"]),
            "new_files": sum(e["size"] is None for e in entries)}


def restore_append(lake: Lake, say=None) -> None:
    """Undo an append: truncate each file to its size before, remove the files it created."""
    if not lake.journal.exists():
        return
    for entry in json.loads(lake.journal.read_text()):
        path = lake.raw / entry["path"]
        if entry["size"] is None:
            path.unlink(missing_ok=True)
        elif path.exists():
            with path.open("r+b") as fh:
                fh.truncate(entry["size"])
    lake.journal.unlink()
    if say:
        say(f"restored {lake.raw} (the 1% append removed)")


# ------------------------------------------------------------------------------ phases (children)


def _jsonl_files(settings) -> dict[str, list[Path]]:
    from dagster_project.engine import SQLITE_SUFFIXES, discover
    from dagster_project.sources import load_sources

    out = {}
    for name, spec in load_sources(settings.sources_file).items():
        files = [real for _, real in discover(spec, settings.raw_dir) if real.suffix not in SQLITE_SUFFIXES]
        if files and spec.format != "sqlite":
            out[name] = files
    return out


def _bare_columns(spec) -> dict[str, str]:
    from transforms.spec import STORAGE_TYPE

    return {f.name: ("VARCHAR" if f.time and f.type == "string" else STORAGE_TYPE[f.type].upper())
            for f in spec.fields}


def phase_bare(settings, parquet: bool) -> dict:
    """read_json(explicit schema, ignore_errors) of every JSONL file into tables (+ Parquet)."""
    import duckdb

    from dagster_project.sources import load_sources

    work = settings.warehouse.parent
    db = work / "bare.duckdb"
    db.unlink(missing_ok=True)
    out_dir = work / "bare_parquet"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    specs = load_sources(settings.sources_file)
    con = duckdb.connect(str(db))
    rows = 0
    for name, files in _jsonl_files(settings).items():
        con.execute(
            f'create table "{name}" as select * from read_json($files, format = \'newline_delimited\', '
            f"columns = $columns, ignore_errors = true)",
            {"files": [str(f) for f in files], "columns": _bare_columns(specs[name])})
        rows += con.execute(f'select count(*) from "{name}"').fetchone()[0]
        if parquet:
            con.execute(f"copy \"{name}\" to '{out_dir / name}.parquet' (format parquet, compression zstd)")
    con.execute("checkpoint")
    con.close()
    parquet_bytes = sum(p.stat().st_size for p in out_dir.glob("*.parquet"))
    db.unlink(missing_ok=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"rows": rows, "parquet_bytes": parquet_bytes if parquet else None}


def phase_pipeline(settings, full_refresh: bool, through: str) -> dict:
    """The run, and only the run: what it did is read from its event log by the parent, after
    the clock stops (``describe_run``: reading ~360 events back cost a no-op ~0.25 s)."""
    from rich.console import Console

    from dagster_project import uncollected

    with uncollected():  # as flywheel run imports the pipeline
        from dagster_project.definitions import load_definitions
        from dagster_project.pipeline import run_pipeline
        from dagster_project.publishing.snapshot import current_version

    selection = None
    if through == "staging":
        graph = load_definitions().resolve_asset_graph()
        selection = sorted(k.to_user_string() for k in graph.get_all_asset_keys()
                           if k.path[0] in ("ingest", "staging"))
    before = current_version(settings.export_dir)
    progress = Console(file=sys.stderr, width=200, no_color=True, highlight=False)
    result = run_pipeline(settings, full_refresh=full_refresh, selection=selection, console=progress)
    if not result.success:
        raise SystemExit("pipeline failed: " + "; ".join(f"{s}: {m.splitlines()[0] if m else ''}"
                                                        for s, m in result.failures))
    return {"run_id": result.run_id, "mode": result.mode, "current_before": before}


def describe_run(result: dict, env: dict[str, str]) -> dict:
    """A pipeline phase's ``result`` with what its run did, from the run's event log (in the
    phase's ``DAGSTER_HOME``) and the export directory: each step's seconds, the snapshot's
    figures, the current version after it and the published size."""
    import dagster as dg

    from dagster_project.publishing.snapshot import current_version

    steps: dict[str, dict] = {}
    snapshot = None
    home = env.get("DAGSTER_HOME")
    try:
        with dg.DagsterInstance.from_config(home) as dagster:
            records = dagster.all_logs(result["run_id"])
    except Exception as exc:  # noqa: BLE001 (one line for the bench's user, whatever Dagster raised)
        raise BenchError(f"cannot read run {result['run_id']}'s events in DAGSTER_HOME={home}: {exc}") from exc
    if not records:
        raise BenchError(f"run {result['run_id']} left no events in DAGSTER_HOME={home}")
    for record in records:
        event = record.dagster_event
        if event is None:
            continue
        kind = event.event_type_value
        if kind == "STEP_START":
            steps.setdefault(record.step_key, {})["start"] = record.timestamp
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE"):
            steps.setdefault(record.step_key, {})["end"] = record.timestamp
        elif event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
            materialization = event.event_specific_data.materialization
            if materialization.asset_key.to_user_string() == "snapshot":
                snapshot = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()
                            if k in ("status", "version", "bytes_written", "bytes_reused", "files_written",
                                     "files_reused", "seconds")}
    export_dir = Path(env["FLYWHEEL_EXPORT_DIR"])
    out = {**result, "steps": {key: round(s["end"] - s["start"], 3) for key, s in steps.items()
                               if "start" in s and "end" in s},
           "snapshot": snapshot, "current_after": current_version(export_dir)}
    if snapshot is not None:
        out["published"] = published_size(export_dir)
    return out


def published_size(export_dir: Path) -> dict:
    """The current snapshot's size from its manifest: every dataset's Parquet files (shared and
    internal), the warehouse file and the manifest itself."""
    from dagster_project.publishing.snapshot import MANIFEST, current_version, read_manifest, snapshots_dir

    manifest = read_manifest(export_dir) or {}
    files = [f for d in manifest.get("datasets", {}).values() for f in d["files"]]
    shared = [f for d in manifest.get("datasets", {}).values() if d.get("kind") != "internal" for f in d["files"]]
    version = current_version(export_dir)
    manifest_file = snapshots_dir(export_dir) / version / MANIFEST if version else None
    return {"version": version, "parquet_bytes": sum(f["bytes"] for f in files),
            "shared_parquet_bytes": sum(f["bytes"] for f in shared), "files": len(files),
            "warehouse_bytes": (manifest.get("warehouse") or {}).get("bytes", 0),
            "manifest_bytes": manifest_file.stat().st_size if manifest_file and manifest_file.exists() else 0}


def _io() -> dict:
    """Bytes this process asked the kernel to write (wchar) and that reached storage (write_bytes)."""
    try:
        fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
        return {"wchar": int(fields["wchar"]), "write_bytes": int(fields["write_bytes"])}
    except (OSError, KeyError, ValueError):
        return {}


def _main(argv: list[str]) -> None:
    started = time.perf_counter()
    phase, out_file = argv[0], Path(argv[1])
    if phase == "startup":
        from dagster_project import uncollected

        with uncollected():  # as flywheel run imports the pipeline
            import dagster_project.definitions  # noqa: F401  (what every run pays before its first step)

        result: dict = {}
    else:
        from dagster_project.settings import Settings

        settings = Settings.from_env()
        if phase in ("bare", "bare_copy"):
            result = phase_bare(settings, parquet=phase == "bare_copy")
        elif phase == "full_staging":
            result = phase_pipeline(settings, full_refresh=True, through="staging")
        elif phase == "full_exports":
            result = phase_pipeline(settings, full_refresh=True, through="exports")
        elif phase in ("noop", "incremental"):
            result = phase_pipeline(settings, full_refresh=False, through="exports")
        else:
            raise SystemExit(f"unknown bench phase {phase!r}")
    result["inner_seconds"] = round(time.perf_counter() - started, 3)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)
    # every thread's (the steps' and DuckDB's): against the wall seconds, how busy the cores were
    result["cpu_seconds"] = round(usage.ru_utime + usage.ru_stime, 3)
    result["io"] = _io()
    out_file.write_text(json.dumps(result, default=str))


# ------------------------------------------------------------------------------ the parent


OLD_LAYOUT = ("raw", "warehouse.duckdb", "warehouse.duckdb.wal", ".flywheel", "exports", "bare.duckdb",
              "bare_parquet", "lake.json")


def remove_old_layout(workdir: Path, say) -> None:
    """The bench before issue 10 kept one lake and its runs at the top of the workdir (marker
    ``lake.json`` there): about a gigabyte no one reads any more."""
    if not ((workdir / "lake.json").is_file() and (workdir / "raw").is_dir()):
        return
    for name in OLD_LAYOUT:
        path = workdir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    say(f"removed the previous bench layout's lake and runs from {workdir}")


def _run_dir(workdir: Path, lake: Lake) -> Path:
    return workdir / "runs" / str(lake.interactions)


def _env(run_dir: Path, lake: Lake, as_of: date) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYWHEEL_")}
    env.update({
        "FLYWHEEL_RAW_DIR": str(lake.raw),
        "FLYWHEEL_WAREHOUSE": str(run_dir / "warehouse.duckdb"),
        "FLYWHEEL_EXPORT_DIR": str(run_dir / "exports"),
        # Fixed, so retention and signal decay keep every mart populated whatever today's date.
        "FLYWHEEL_AS_OF": as_of.isoformat(),
        "FLYWHEEL_PSEUDONYM_KEY": PSEUDONYM_KEY,
        # A history of its own (SQLite event log, as `flywheel run` under make): per-step seconds.
        "DAGSTER_HOME": str(run_dir / "dagster_home"),
        "DAGSTER_DISABLE_TELEMETRY": "yes",
        "GX_ANALYTICS_ENABLED": "false",
        "PYTHONUNBUFFERED": "1",
    })
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _fresh_state(run_dir: Path) -> None:
    """Nothing ingested or published yet: the next run reads every raw file."""
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "dagster_home").mkdir(parents=True)
    (run_dir / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")


def run_phase(phase: str, env: dict[str, str], run_dir: Path, echo) -> dict:
    """One phase in a fresh interpreter, its output streamed as progress: its figures, with the
    wall seconds of the whole process."""
    out_file = run_dir / f".phase-{phase}.json"
    out_file.unlink(missing_ok=True)
    tail: deque[str] = deque(maxlen=30)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "dagster_project.bench", phase, str(out_file)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        tail.append(line)
        echo(line)
    code = proc.wait()
    seconds = time.perf_counter() - started
    if code != 0 or not out_file.exists():
        last = next((line for line in reversed(tail) if line.strip()), "no output")
        raise BenchError(f"bench phase {phase} failed (exit {code}) in {run_dir}: {last}")
    result = json.loads(out_file.read_text())
    out_file.unlink()
    if "run_id" in result:
        result = describe_run(result, env)  # after the clock: the bench's reading, not the run's work
    # to the microsecond: at 1 ms two phases of a tiny lake could tie, leaving a marginal cost of 0
    result["seconds"] = round(seconds, 6)
    return result


def measure_phase(phase: str, env: dict[str, str], run_dir: Path, echo, *, fresh: bool, repeat: int = 1) -> dict:
    """The phase ``repeat`` times (each full refresh from an empty state; the other phases leave
    the state as they found it): the fastest sample's figures (``_fastest``) and the state the
    last sample left (what the next phase starts from). The no-op and the +1% run, which must
    start from the same state, are ``measure_noop_and_incremental``'s."""
    return _fastest([_sample(phase, env, run_dir, echo, fresh) for _ in range(max(1, repeat))])


def measure_noop_and_incremental(env: dict[str, str], run_dir: Path, lake: Lake, append: dict, echo, say, *,
                                 repeat: int = 1) -> tuple[dict, dict, dict]:
    """The no-op and the +1% run alternately, ``repeat`` rounds of one each, every sample from a
    copy of the same state (the one ``run_dir`` holds: the full refresh's), the append applied for
    the incremental run only and undone after it. Returns each phase's ``_fastest`` figures and
    what the append wrote; the state left is the last incremental run's.

    The machine's speed drifts over minutes: three no-ops and then three +1% runs compared runs
    of different minutes, while the share's numerator is their difference. Alternating, each
    round's two runs see the same minutes (``paired_seconds``: incremental − no-op, round by round).
    With one round nothing is copied (~1.2 GB at 1M): the +1% run starts from the state the no-op
    left, which differs from the one it found only in the run log."""
    start = run_dir.with_name(run_dir.name + ".start") if repeat > 1 else None
    if start is not None:
        shutil.rmtree(start, ignore_errors=True)
        copy_state(run_dir, start)
    noops, incrementals, applied = [], [], {}
    try:
        for i in range(max(1, repeat)):
            if i:
                _reset(run_dir, start)
            noops.append(_sample("noop", env, run_dir, echo, False))
            if start is not None:
                _reset(run_dir, start)
            applied = apply_append(lake, append)
            try:
                incrementals.append(_sample("incremental", env, run_dir, echo, False))
            finally:
                restore_append(lake, say)
    finally:
        if start is not None:
            shutil.rmtree(start, ignore_errors=True)
    noop, incremental = _fastest(noops), _fastest(incrementals)
    incremental["paired_seconds"] = [round(b["seconds"] - a["seconds"], 6) for a, b in zip(noops, incrementals)]
    return noop, incremental, applied


def _reset(run_dir: Path, start: Path) -> None:
    shutil.rmtree(run_dir)
    copy_state(start, run_dir)


def copy_state(source: Path, target: Path) -> None:
    """Copy a run directory as a run left it: symlinks as links, and files hard-linked to each
    other (a snapshot's files and their objects) still one file. ``shutil.copytree`` makes each
    link a file of its own: the objects then look unlinked, which no real state is."""
    seen: dict[tuple[int, int], Path] = {}

    def copy(src: str, dst: str) -> None:
        st = os.stat(src)
        first = seen.get((st.st_dev, st.st_ino))
        if first is not None:
            os.link(first, dst)
        else:
            shutil.copy2(src, dst)
            if st.st_nlink > 1:
                seen[(st.st_dev, st.st_ino)] = Path(dst)

    shutil.copytree(source, target, symlinks=True, copy_function=copy)


def _fastest(samples: list[dict]) -> dict:
    """The fastest sample's figures (the machine is shared: the minimum is the least disturbed),
    every sample's seconds and the 1-minute load average before each, the highest peak RSS, the
    snapshot before the first and after the last sample."""
    best = dict(min(samples, key=lambda r: r["seconds"]))
    best["samples"] = [r["seconds"] for r in samples]
    best["loads_before"] = [r["load_before"] for r in samples]
    best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in samples)
    if "current_after" in samples[-1]:
        best["current_before"] = samples[0]["current_before"]
        best["current_after"] = samples[-1]["current_after"]
    if any("snapshot" in r for r in samples):
        best["snapshot_statuses"] = [(r.get("snapshot") or {}).get("status") for r in samples]
    return best


def _sample(phase: str, env: dict[str, str], run_dir: Path, echo, fresh: bool) -> dict:
    if fresh or not run_dir.exists():
        _fresh_state(run_dir)
    # Write back what the bench itself left dirty (the copy of a state each incremental sample
    # starts from, ~1.2 GB at 1M; the previous phase's writes) before the clock starts: with
    # ~900 MB dirty a no-op took 0.2-0.3 s longer, time no scheduled run pays.
    os.sync()
    load = os.getloadavg()[0]
    result = run_phase(phase, env, run_dir, echo)
    result["load_before"] = round(load, 2)
    return result


def _lake_size(lake: Lake) -> dict:
    from dagster_project.settings import Settings

    settings = Settings.from_env({"FLYWHEEL_RAW_DIR": str(lake.raw)})
    jsonl = _jsonl_files(settings)
    files = [f for fs in jsonl.values() for f in fs]
    lines = 0
    for f in files:
        with f.open("rb") as fh:
            lines += sum(buf.count(b"\n") for buf in iter(lambda: fh.read(1 << 20), b""))
    return {"interactions": lake.interactions, "jsonl_files": len(files), "jsonl_lines": lines,
            "jsonl_bytes": sum(f.stat().st_size for f in files),
            "raw_bytes": sum(p.stat().st_size for p in lake.raw.rglob("*") if p.is_file())}


def _top_steps(result: dict, n: int = 8) -> list[list]:
    steps = sorted(result.get("steps", {}).items(), key=lambda kv: -kv[1])[:n]
    return [[step.replace("__", "/"), seconds] for step, seconds in steps]


def _ratio(a: float | None, b: float | None) -> float | None:
    """a / b; None only when it has no value (a missing figure, b = 0). A negative b (a no-op
    slower than a full refresh on a tiny, noisy lake) gives a negative ratio, which fails its target."""
    return None if a is None or b is None or b == 0 else a / b


def _within(ratio: float | None, limit: float) -> bool:
    return ratio is not None and 0 <= ratio <= limit


def evaluate(main: dict, marginal: dict[int, dict], sizes: list[int], main_n: int) -> tuple[dict, list[dict]]:
    """The derived figures and each target: value, limit, whether it holds."""
    t = {phase: main[phase]["seconds"] for phase in MAIN_PHASES}
    figures: dict = {}
    targets: list[dict] = []

    def target(name: str, value, limit, holds, detail: str) -> None:
        targets.append({"target": name, "value": value, "limit": limit, "holds": holds, "detail": detail})

    inc_extra, full_extra = t["incremental"] - t["noop"], t["full_exports"] - t["noop"]
    figures["incremental_minus_noop_seconds"] = inc_extra
    paired = main["incremental"].get("paired_seconds") or []
    figures["incremental_minus_noop_paired"] = paired
    figures["full_minus_noop_seconds"] = full_extra
    figures["incremental_share"] = _ratio(inc_extra, full_extra)
    target("incremental ∝ new data: (t_incremental − t_noop) / (t_full − t_noop)", figures["incremental_share"],
           0.05, full_extra > 0 and _within(figures["incremental_share"], 0.05),
           f"({t['incremental']:.2f} − {t['noop']:.2f}) / ({t['full_exports']:.2f} − {t['noop']:.2f}) s"
           + (f"; incremental − no-op round by round: {', '.join(f'{x:.2f}' for x in paired)} s" if paired else ""))

    snap = main["incremental"].get("snapshot") or {}
    pub = main["incremental"].get("published") or {}
    written = snap.get("bytes_written")
    constant = (pub.get("warehouse_bytes") or 0) + (pub.get("manifest_bytes") or 0)
    figures["bytes_written"] = written
    figures["bytes_written_total"] = None if written is None else written + constant
    figures["published_bytes"] = pub.get("parquet_bytes")
    figures["bytes_constant"] = constant
    figures["bytes_share"] = _ratio(written, pub.get("parquet_bytes"))
    target("incremental writes ≤ 5% of published data + warehouse and manifest", figures["bytes_share"], 0.05,
           _within(figures["bytes_share"], 0.05),
           f"{(written or 0) / 1e6:,.2f} MB new Parquet of {(pub.get('parquet_bytes') or 0) / 1e6:,.2f} MB "
           f"published, + {constant / 1e6:,.2f} MB warehouse file and manifest")

    figures["noop_beyond_startup"] = t["noop"] - t["startup"]
    noop = main["noop"]
    statuses = noop.get("snapshot_statuses") or [(noop.get("snapshot") or {}).get("status")]
    figures["noop_published_nothing"] = (
        all(s == "unchanged" for s in statuses) and noop.get("current_before") == noop.get("current_after"))
    target("no-op publishes nothing", figures["noop_published_nothing"], True, figures["noop_published_nothing"],
           f"snapshot status {', '.join(map(str, statuses))}")
    target("no-op ≤ 5 s beyond start-up", round(figures["noop_beyond_startup"], 3), 5.0,
           figures["noop_beyond_startup"] <= 5.0, f"{t['noop']:.2f} − {t['startup']:.2f} s")
    figures["incremental_published"] = (snap.get("status") == "published" and (snap.get("bytes_written") or 0) > 0)

    peak = max(main[p]["peak_rss_mb"] for p in MAIN_PHASES)
    figures["peak_rss_mb"] = peak
    target(f"peak RSS ≤ 4 GB at {main_n:,}", peak, 4096, peak <= 4096, "max over the main lake's phases (MB)")

    n1, n2 = sizes
    m = {}
    for phase in MARGINAL_PHASES:
        dt = marginal[n2][phase]["seconds"] - marginal[n1][phase]["seconds"]
        m[phase] = {"seconds_per_interaction": dt / (n2 - n1), "microseconds_per_interaction": dt / (n2 - n1) * 1e6,
                    "seconds": {str(n1): marginal[n1][phase]["seconds"], str(n2): marginal[n2][phase]["seconds"]}}
        cpu = [marginal[n].get(phase, {}).get("cpu_seconds") for n in (n1, n2)]
        if None not in cpu:
            m[phase]["cpu_microseconds_per_interaction"] = (cpu[1] - cpu[0]) / (n2 - n1) * 1e6
    figures["marginal"] = m
    figures["marginal_steps"] = {phase: marginal_steps(marginal[n1][phase], marginal[n2][phase])
                                 for phase in ("full_staging", "full_exports")}
    for through, base, limit in (("full_staging", "bare", 1.5), ("full_exports", "bare_copy", 2.5)):
        ratio = _ratio(m[through]["seconds_per_interaction"], m[base]["seconds_per_interaction"])
        figures[f"marginal_{through}_vs_{base}"] = ratio
        cpu = [m[p].get("cpu_microseconds_per_interaction") for p in (through, base)]
        target(f"marginal {LABELS[through]} / {LABELS[base]}", ratio, limit,
               m[base]["seconds_per_interaction"] > 0 and _within(ratio, limit),
               f"{m[through]['microseconds_per_interaction']:.1f} vs {m[base]['microseconds_per_interaction']:.1f} "
               f"µs per extra interaction ({n1:,} → {n2:,})"
               + (f"; CPU {cpu[0]:.1f} vs {cpu[1]:.1f} µs" if None not in cpu else ""))

    # Sub-linear: RSS grows by a smaller factor than the lake (exponent < 1 between sizes).
    points = sorted({n1: marginal[n1]["full_exports"]["peak_rss_mb"], n2: marginal[n2]["full_exports"]["peak_rss_mb"],
                     main_n: main["full_exports"]["peak_rss_mb"]}.items())
    exponents = [math.log(r2 / r1) / math.log(s2 / s1) for (s1, r1), (s2, r2) in zip(points, points[1:])]
    figures["rss_full_exports_mb"] = {str(n): r for n, r in points}
    figures["rss_growth_exponents"] = exponents
    target("peak RSS grows sub-linearly (full refresh → exports)", max(exponents) if exponents else None, 1.0,
           bool(exponents) and max(exponents) < 1.0,
           ", ".join(f"{n:,}: {r:,.0f} MB" for n, r in points) + " (log-log slope between sizes)")
    return figures, targets


def marginal_steps(small: dict, large: dict) -> list[list]:
    """Where a full refresh's marginal time goes: each step's seconds in the run on the smaller
    lake and on the larger, and the difference, largest first. Two steps run at once, so the
    differences add up to about twice the run's."""
    a, b = small.get("steps") or {}, large.get("steps") or {}
    rows = [[step.replace("__", "/"), a.get(step, 0.0), b.get(step, 0.0), round(b.get(step, 0.0) - a.get(step, 0.0), 3)]
            for step in sorted(set(a) | set(b))]
    return sorted(rows, key=lambda row: -row[3])


def run_bench(workdir: Path, *, interactions: int = 1_000_000, marginal: tuple[int, int] = (500_000, 1_000_000),
              quick: bool = False, repeat: int = 1, json_path: Path | None = None, console=None,
              echo_steps: bool = True) -> dict:
    """Measure every figure of issue 10 in one run; print tables; write ``json_path`` if given."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    n1, n2 = sorted(marginal)
    if not 0 < n1 < n2:
        raise BenchError(f"--marginal {n1},{n2}: give two different sizes above 0, e.g. --marginal 200000,400000")
    if quick:
        interactions = n2
    if repeat < 1:
        raise BenchError(f"--repeat {repeat}: give 1 or more, e.g. --repeat 3")
    if interactions < 1:
        raise BenchError(f"--interactions {interactions}: give a size above 0, e.g. --interactions 1000000")
    workdir = Path(os.path.abspath(workdir))
    workdir.mkdir(parents=True, exist_ok=True)
    say = lambda text: console.print(text, highlight=False, markup=False, soft_wrap=True)  # noqa: E731
    echo = (lambda line: say("    │ " + line)) if echo_steps else (lambda line: None)
    remove_old_layout(workdir, say)
    began = time.perf_counter()

    sizes = sorted({interactions, n1, n2})
    lakes = {n: prepare_lake(workdir, n, say) for n in sizes}
    main_lake = lakes[interactions]
    append = prepare_append(main_lake, say)
    # One run date for every phase: the day after the appended day.
    as_of = lake_end(main_lake.raw) + timedelta(days=2)
    lake_sizes = {str(n): _lake_size(lake) for n, lake in lakes.items()}
    for n in sizes:
        s = lake_sizes[str(n)]
        say(f"lake {n:,}: {s['jsonl_bytes'] / 1e6:,.1f} MB of JSONL in {s['jsonl_files']:,} files, "
            f"{s['jsonl_lines']:,} lines ({s['raw_bytes'] / 1e6:,.1f} MB raw with SQLite)")

    results: dict[int, dict] = {n: {} for n in sizes}

    def record(n: int, phase: str, result: dict) -> None:
        samples = f" (samples {', '.join(f'{x:.2f}' for x in result['samples'])})" if repeat > 1 else ""
        say(f"[{n:,}] {LABELS[phase]}: {result['seconds']:.2f} s{samples}, peak RSS {result['peak_rss_mb']:,.0f} MB, "
            f"load {result['load_before']:.1f}")
        results[n][phase] = result

    def measure(n: int, phase: str, fresh: bool = False) -> None:
        run_dir = _run_dir(workdir, lakes[n])
        say(f"[{n:,}] {LABELS[phase]}{f' ×{repeat}' if repeat > 1 else ''} …")
        record(n, phase, measure_phase(phase, _env(run_dir, lakes[n], as_of), run_dir, echo, fresh=fresh,
                                       repeat=repeat))

    measure(interactions, "startup")
    for n in sizes:  # the marginal sizes first: the smaller lakes' figures come early
        if n == interactions:
            continue
        for phase in MARGINAL_PHASES:
            measure(n, phase, fresh=phase.startswith("full"))
    for phase in MARGINAL_PHASES:
        measure(interactions, phase, fresh=phase.startswith("full"))
    say(f"[{interactions:,}] {LABELS['noop']} and {LABELS['incremental']}, alternating"
        f"{f' ×{repeat}' if repeat > 1 else ''} (each from a copy of the full refresh's state; the append "
        f"is {sum(append['lines'].values()):,} lines {append['lines']} dated {append['day']}, undone after each run) …")
    main_dir = _run_dir(workdir, main_lake)
    noop, incremental, applied = measure_noop_and_incremental(
        _env(main_dir, main_lake, as_of), main_dir, main_lake, append, echo, say, repeat=repeat)
    record(interactions, "noop", noop)
    record(interactions, "incremental", incremental)

    main = results[interactions]
    figures, targets = evaluate(main, results, [n1, n2], interactions)
    report = {
        # 2: the no-op and the +1% run alternate, each from the full refresh's state (paired_seconds)
        "format": 2,
        "measured_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "duckdb": _version("duckdb"),
                    "dagster": _version("dagster"), "load_average": list(os.getloadavg())},
        "settings": {"interactions": interactions, "marginal": [n1, n2], "quick": quick, "repeat": repeat, "seed": SEED,
                     "as_of": as_of.isoformat(), "workdir": str(workdir)},
        "lakes": lake_sizes,
        "append": {"interactions": append["interactions"], "day": append["day"], "lines": append["lines"],
                   "lines_total": sum(append["lines"].values()), "bytes": applied["bytes"],
                   "files": applied["files"], "new_files": applied["new_files"],
                   "share_of_lake_lines": sum(append["lines"].values()) / lake_sizes[str(interactions)]["jsonl_lines"]},
        "phases": {str(n): {p: _phase_summary(r) for p, r in results[n].items()} for n in sizes},
        "steps": {p: _top_steps(main[p], n=1000) for p in ("noop", "incremental", "full_exports")},
        "figures": figures,
        "targets": targets,
        "bench_seconds": round(time.perf_counter() - began, 1),
    }
    _print(console, report, Table)
    if json_path is not None:
        json_path = Path(json_path)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=1, ensure_ascii=False, default=str) + "\n")
        say(f"figures written to {json_path}")
    return report


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _phase_summary(result: dict) -> dict:
    keep = ("seconds", "samples", "loads_before", "inner_seconds", "cpu_seconds", "peak_rss_mb", "io", "rows",
            "parquet_bytes",
            "run_id", "mode",
            "snapshot", "snapshot_statuses", "published", "current_before", "current_after", "paired_seconds")
    out = {k: result[k] for k in keep if k in result}
    if "steps" in result:
        out["steps_seconds"] = round(sum(result["steps"].values()), 3)
        out["steps"] = len(result["steps"])
    return out


def _print(console, report: dict, Table) -> None:
    main_n = report["settings"]["interactions"]
    size = report["lakes"][str(main_n)]
    mb, lines = size["jsonl_bytes"] / 1e6, size["jsonl_lines"]
    table = Table(title=f"Flywheel Lake benchmark: {main_n:,} interactions, {lines:,} JSONL lines, {mb:,.0f} MB "
                        f"({report['machine']['cpus']} cores, load {report['machine']['load_average'][0]:.1f})")
    for col in ("phase", "seconds", "CPU s", "MB/s", "lines/s", "peak RSS MB", "written MB"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    main = report["phases"][str(main_n)]
    for phase in MAIN_PHASES:
        r = main[phase]
        reads = phase not in ("startup", "noop", "incremental")
        cpu = f"{r['cpu_seconds']:.2f}" if r.get("cpu_seconds") is not None else ""
        table.add_row(LABELS[phase], f"{r['seconds']:.2f}", cpu, f"{mb / r['seconds']:,.0f}" if reads else "",
                      f"{lines / r['seconds']:,.0f}" if reads else "", f"{r['peak_rss_mb']:,.0f}",
                      f"{r['io']['wchar'] / 1e6:,.1f}" if r.get("io") else "")
    console.print(table)

    f = report["figures"]
    n1, n2 = report["settings"]["marginal"]
    mt = Table(title=f"Marginal cost per extra interaction ({n1:,} → {n2:,})")
    for col in ("phase", f"s at {n1:,}", f"s at {n2:,}", "µs / interaction", "CPU µs / interaction",
                f"peak RSS MB at {n2:,}"):
        mt.add_column(col, justify="left" if col == "phase" else "right")
    for phase in MARGINAL_PHASES:
        m = f["marginal"][phase]
        cpu = m.get("cpu_microseconds_per_interaction")
        mt.add_row(LABELS[phase], f"{m['seconds'][str(n1)]:.2f}", f"{m['seconds'][str(n2)]:.2f}",
                   f"{m['microseconds_per_interaction']:.1f}", "" if cpu is None else f"{cpu:.1f}",
                   f"{report['phases'][str(n2)][phase]['peak_rss_mb']:,.0f}")
    console.print(mt)

    for phase in ("full_staging", "full_exports"):
        rows = f["marginal_steps"][phase]
        total = sum(row[3] for row in rows)
        wt = Table(title=f"Where the marginal time goes: {LABELS[phase]}",
                   caption=f"{n1:,} → {n2:,} interactions: {total:+.2f} s over {len(rows)} steps, two at a time")
        for col in ("step", f"s at {n1:,}", f"s at {n2:,}", "Δ s", "share"):
            wt.add_column(col, justify="left" if col == "step" else "right")
        for step, s1, s2, delta in rows[:8]:
            wt.add_row(step, f"{s1:.2f}", f"{s2:.2f}", f"{delta:+.2f}", f"{delta / total:.0%}" if total > 0 else "")
        console.print(wt)

    inc = main["incremental"]
    snap, pub = inc.get("snapshot") or {}, inc.get("published") or {}
    console.print(f"incremental: {report['append']['lines_total']:,} lines appended "
                  f"({report['append']['share_of_lake_lines']:.2%} of the lake's lines) → snapshot "
                  f"{snap.get('status')} {snap.get('version') or ''}: {snap.get('files_written', 0):,} files / "
                  f"{(snap.get('bytes_written') or 0) / 1e6:,.2f} MB written, {snap.get('files_reused', 0):,} files / "
                  f"{(snap.get('bytes_reused') or 0) / 1e6:,.2f} MB reused; published data "
                  f"{(pub.get('parquet_bytes') or 0) / 1e6:,.2f} MB Parquet + warehouse "
                  f"{(pub.get('warehouse_bytes') or 0) / 1e6:,.2f} MB + manifest {(pub.get('manifest_bytes') or 0) / 1e3:,.1f} kB",
                  highlight=False, soft_wrap=True)

    for phase in ("noop", "incremental"):
        r = main[phase]
        st = Table(title=f"Where the time goes: {LABELS[phase]} ({r['seconds']:.2f} s wall, "
                         f"{r.get('steps_seconds', 0):.2f} s in {r.get('steps', 0)} steps)")
        st.add_column("step")
        st.add_column("seconds", justify="right")
        for step, seconds in report["steps"][phase][:8]:
            st.add_row(step, f"{seconds:.2f}")
        console.print(st)

    tt = Table(title="Issue 10 targets")
    for col in ("target", "value", "limit", "holds", "detail"):
        tt.add_column(col, justify="right" if col in ("value", "limit") else "left")
    for t in report["targets"]:
        value = t["value"]
        text = "" if value is None else (str(value) if isinstance(value, bool) else f"{value:,.3f}")
        tt.add_row(t["target"], text, str(t["limit"]), "[green]yes[/]" if t["holds"] else "[red]no[/]", t["detail"])
    console.print(tt)


if __name__ == "__main__":
    _main(sys.argv[1:])
