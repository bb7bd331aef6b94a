"""``flywheel bench``: every figure of issue 10 in one JSON, a realistic 1% append that is undone,
lakes cached by their marker, and the targets computed exactly from the phases' figures."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from dagster_project import bench

PROJECT = Path(__file__).resolve().parents[1]


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def say(_text: str) -> None:
    pass


@pytest.fixture(scope="module")
def small_lake(tmp_path_factory) -> bench.Lake:
    return bench.prepare_lake(tmp_path_factory.mktemp("bench"), 300, say)


def test_lake_is_cached_by_its_marker(small_lake):
    marker = small_lake.root / "lake.json"
    assert json.loads(marker.read_text()) == {"interactions": 300, "seed": bench.SEED,
                                              "generator": bench.generator_version(), "bad_cases": False}
    before = {p: p.stat().st_mtime_ns for p in small_lake.raw.rglob("*") if p.is_file()}
    again = bench.prepare_lake(small_lake.root.parents[1], 300, say)
    assert again.raw == small_lake.raw
    assert {p: p.stat().st_mtime_ns for p in again.raw.rglob("*") if p.is_file()} == before


def test_a_stale_marker_regenerates_the_lake(tmp_path):
    lake = bench.prepare_lake(tmp_path, 100, say)
    stray = lake.raw / "interactions" / "interactions_2026-01-01_stray.jsonl"
    stray.write_text("{}\n")
    marker = lake.root / "lake.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "generator": "older"}))
    messages = []
    bench.prepare_lake(tmp_path, 100, messages.append)
    assert not stray.exists()
    assert any("generating" in m for m in messages)
    assert json.loads(marker.read_text())["generator"] == bench.generator_version()


def test_append_is_one_percent_of_new_interactions_with_sidecars_on_the_next_day(small_lake):
    append = bench.prepare_append(small_lake, say)
    end = bench.lake_end(small_lake.raw)
    day = append["day"]
    assert day == (end + timedelta(days=1)).isoformat()
    assert append["interactions"] == 3 and append["lines"]["interactions"] == 3
    lake_ids = {json.loads(line)["id"] for f in (small_lake.raw / "interactions").glob("interactions_*.jsonl")
                for line in f.read_text(encoding="utf-8").splitlines() if line.strip()}
    counted = {"interactions": 0, "feedback": 0, "outcomes": 0}
    new_ids = set()
    for rel in append["files"]:
        source = rel.split("/")[0]
        assert day in rel
        assert not (small_lake.raw / rel).exists()  # the day after the lake ends: new files
        for line in (append["ready"] / rel).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            assert record["timestamp"].startswith(day)
            assert json.dumps(record, ensure_ascii=False) == line  # as the producers serialise
            counted[source] += 1
            if source == "interactions":
                new_ids.add(record["id"])
    assert counted == append["lines"]
    assert new_ids and not new_ids & lake_ids


def test_apply_then_restore_gives_the_same_bytes_and_an_interrupted_append_is_undone(small_lake):
    append = bench.prepare_append(small_lake, say)
    # One target that already exists: appended to, then truncated back (the realistic case of a
    # collector file still growing).
    existing = sorted((small_lake.raw / "feedback").glob("*_feedback.jsonl"))[-1]
    rel = str(existing.relative_to(small_lake.raw))
    (append["ready"] / rel).parent.mkdir(parents=True, exist_ok=True)
    (append["ready"] / rel).write_text('{"record_id": "x", "feedback": "positive", "timestamp": "2026-04-04T00:00:00"}\n')
    append = {**append, "files": [*append["files"], rel]}
    before = tree_digest(small_lake.raw)
    applied = bench.apply_append(small_lake, append)
    assert applied["files"] == len(append["files"]) and applied["new_files"] == len(append["files"]) - 1
    assert tree_digest(small_lake.raw) != before
    assert small_lake.journal.exists()
    # a bench killed during the incremental run: the next one finds the journal and undoes it
    bench.prepare_lake(small_lake.root.parents[1], 300, say)
    assert tree_digest(small_lake.raw) == before
    assert not small_lake.journal.exists()
    (append["ready"] / rel).unlink()


def phase(seconds: float, rss: float = 500.0, **extra) -> dict:
    return {"seconds": seconds, "peak_rss_mb": rss, **extra}


def test_targets_are_computed_from_the_phases():
    main = {
        "startup": phase(2.0), "bare": phase(10.0), "bare_copy": phase(12.0),
        "full_staging": phase(30.0), "full_exports": phase(62.0, rss=1800.0),
        "noop": phase(6.0, snapshot={"status": "unchanged"}, current_before="v1", current_after="v1"),
        "incremental": phase(8.0, snapshot={"status": "published", "bytes_written": 40, "files_written": 2},
                             published={"parquet_bytes": 1000, "warehouse_bytes": 300, "manifest_bytes": 50},
                             current_before="v1", current_after="v2"),
    }
    runs = {
        100: {"bare": phase(3.0, cpu_seconds=4.0), "bare_copy": phase(4.0), "full_staging": phase(10.0, cpu_seconds=15.0),
              "full_exports": phase(20.0, rss=1000.0, steps={"ingest__interactions": 5.0, "snapshot": 4.0,
                                                             "ingest__signals": 0.5})},
        200: {"bare": phase(4.0, cpu_seconds=6.0), "bare_copy": phase(5.0), "full_staging": phase(11.4, cpu_seconds=19.0),
              "full_exports": phase(23.0, rss=1200.0, steps={"ingest__interactions": 6.5, "snapshot": 6.0,
                                                             "ingest__signals": 0.4, "training_sets": 0.2})},
        1000: main,
    }
    figures, targets = bench.evaluate(main, runs, [100, 200], 1000)
    holds = {t["target"].split(":")[0].split(" (")[0]: t["holds"] for t in targets}
    assert figures["incremental_share"] == pytest.approx(2 / 56)
    assert figures["bytes_share"] == pytest.approx(0.04)
    assert figures["bytes_written_total"] == 390 and figures["bytes_constant"] == 350
    assert figures["noop_beyond_startup"] == pytest.approx(4.0)
    assert figures["noop_published_nothing"] is True and figures["incremental_published"] is True
    assert figures["marginal"]["bare"]["seconds_per_interaction"] == pytest.approx(0.01)
    assert figures["marginal_full_staging_vs_bare"] == pytest.approx(1.4)
    assert figures["marginal_full_exports_vs_bare_copy"] == pytest.approx(3.0)
    # CPU per extra interaction where both sizes measured it, and in the target's detail
    assert figures["marginal"]["full_staging"]["cpu_microseconds_per_interaction"] == pytest.approx(40_000)
    assert figures["marginal"]["bare"]["cpu_microseconds_per_interaction"] == pytest.approx(20_000)
    assert "cpu_microseconds_per_interaction" not in figures["marginal"]["bare_copy"]
    details = {t["target"]: t["detail"] for t in targets}
    assert details["marginal full refresh → staging / bare read_json (lossy lower bound)"].endswith(
        "; CPU 40000.0 vs 20000.0 µs")
    assert "CPU" not in details["marginal full refresh → exports (whole pipeline) / bare read_json + COPY TO parquet"]
    # where the marginal time goes: each step at both sizes, the largest difference first
    assert figures["marginal_steps"]["full_exports"] == [
        ["snapshot", 4.0, 6.0, 2.0], ["ingest/interactions", 5.0, 6.5, 1.5], ["training_sets", 0.0, 0.2, 0.2],
        ["ingest/signals", 0.5, 0.4, -0.1]]
    assert figures["marginal_steps"]["full_staging"] == []
    assert figures["peak_rss_mb"] == 1800.0
    assert figures["rss_growth_exponents"][0] == pytest.approx(0.263, abs=1e-3)
    assert len(targets) == 8
    assert [t["holds"] for t in targets] == [True, True, True, True, True, True, False, True]
    assert holds  # every target is named

    main["noop"]["snapshot"] = {"status": "published"}
    main["noop"]["current_after"] = "v2"
    main["noop"]["seconds"] = 9.0
    _, targets = bench.evaluate(main, runs, [100, 200], 1000)
    assert {t["target"]: t["holds"] for t in targets}["no-op publishes nothing"] is False
    assert {t["target"]: t["holds"] for t in targets}["no-op ≤ 5 s beyond start-up"] is False
    # a no-op slower than the full refresh (noise on a tiny lake): a number, and the target fails
    main["noop"]["seconds"] = 70.0
    figures, targets = bench.evaluate(main, runs, [100, 200], 1000)
    assert figures["incremental_share"] == pytest.approx((8 - 70) / (62 - 70))
    assert targets[0]["holds"] is False


def test_the_old_single_lake_layout_is_removed(tmp_path):
    for name in ("raw/interactions", ".flywheel/bronze", "exports", "bare_parquet"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "raw/interactions/interactions_2026-02-02_a.jsonl").write_text("{}\n")
    (tmp_path / "lake.json").write_text('{"interactions": 1000000, "seed": 7}')
    (tmp_path / "warehouse.duckdb").write_bytes(b"x")
    (tmp_path / "lakes").mkdir()
    bench.remove_old_layout(tmp_path, say)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lakes"]
    bench.remove_old_layout(tmp_path, say)  # nothing of the old layout left: nothing to do
    assert (tmp_path / "lakes").is_dir()


def test_each_phase_is_its_own_process_and_repeats_keep_the_fastest(small_lake, tmp_path):
    run_dir = tmp_path / "run"
    env = bench._env(run_dir, small_lake, bench.lake_end(small_lake.raw) + timedelta(days=2))
    lines = []
    startup = bench.measure_phase("startup", env, run_dir, lines.append, fresh=True, repeat=2)
    assert len(startup["samples"]) == 2 and startup["seconds"] == min(startup["samples"])
    assert len(startup["loads_before"]) == 2 and 0 < startup["inner_seconds"] < startup["seconds"]
    assert startup["peak_rss_mb"] > 20
    bare = bench.measure_phase("bare_copy", env, run_dir, lines.append, fresh=True)
    expected = sum(1 for name in ("interactions", "feedback", "outcomes", "signals")
                   for f in small_lake.raw.glob(f"{name}/*.jsonl") for line in f.read_bytes().splitlines()
                   if line.strip())
    assert bare["rows"] >= expected and bare["parquet_bytes"] > 0 and bare["samples"] == [bare["seconds"]]
    # the bare phases clean up after themselves; nothing of the lake changes
    assert sorted(p.name for p in run_dir.iterdir()) == ["dagster_home"]
    with pytest.raises(bench.BenchError, match="bench phase nosuch failed"):
        bench.measure_phase("nosuch", env, run_dir, lines.append, fresh=False)
    assert any("unknown bench phase" in line for line in lines)


def test_no_op_and_incremental_alternate_from_the_same_state_with_the_append_only_in_the_incremental(
        small_lake, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    env = bench._env(run_dir, small_lake, bench.lake_end(small_lake.raw) + timedelta(days=2))
    run_dir.mkdir()
    (run_dir / "mark").write_text("start")
    append = bench.prepare_append(small_lake, lambda text: None)
    appended = small_lake.raw / append["files"][0]
    sizes = {"before": appended.stat().st_size if appended.exists() else None}
    seen = []
    real = bench.run_phase

    def recording(phase, env_, run_dir_, echo):  # what each sample found, then a change of state
        seen.append((phase, (run_dir_ / "mark").read_text(), small_lake.journal.exists()))
        (run_dir_ / "mark").write_text(f"after {phase} {len(seen)}")
        return real("startup", env_, run_dir_, echo)

    monkeypatch.setattr(bench, "run_phase", recording)
    noop, incremental, applied = bench.measure_noop_and_incremental(
        env, run_dir, small_lake, append, lambda line: None, lambda text: None, repeat=3)
    monkeypatch.undo()
    assert seen == [("noop", "start", False), ("incremental", "start", True)] * 3
    assert len(noop["samples"]) == len(incremental["samples"]) == 3
    assert incremental["paired_seconds"] == [round(b - a, 6) for a, b in zip(noop["samples"], incremental["samples"])]
    assert applied["bytes"] > 0 and (run_dir / "mark").read_text() == "after incremental 6"
    assert not small_lake.journal.exists() and not run_dir.with_name("run.start").exists()
    assert (appended.stat().st_size if appended.exists() else None) == sizes["before"]  # the append undone
    # one round copies nothing: the +1% run starts from the state the no-op left
    seen.clear()
    monkeypatch.setattr(bench, "run_phase", recording)
    bench.measure_noop_and_incremental(env, run_dir, small_lake, append, lambda line: None, lambda text: None)
    monkeypatch.undo()
    assert seen == [("noop", "after incremental 6", False), ("incremental", "after noop 1", True)]
    assert not small_lake.journal.exists()


def test_bad_marginal_sizes_are_one_line_with_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dagster_project.cli", "bench", "--marginal", "400000",
                           "--workdir", str(tmp_path)], capture_output=True, text=True, cwd=PROJECT,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2
    assert "--marginal 400000: give two different sizes" in proc.stderr
    assert not any(tmp_path.iterdir())
    proc = subprocess.run([sys.executable, "-m", "dagster_project.cli", "bench", "--repeat", "0",
                           "--workdir", str(tmp_path)], capture_output=True, text=True, cwd=PROJECT,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2 and "--repeat 0: give 1 or more" in proc.stderr


@pytest.mark.slow
def test_bench_end_to_end_on_a_tiny_lake(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dagster_project.cli", "bench", "--quick", "--marginal", "2000,4000",
         "--workdir", str(tmp_path / "work"), "--json", str(out)],
        capture_output=True, text=True, cwd=PROJECT, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[4,000] full refresh → staging …" in proc.stdout  # progress while it runs
    assert "✓ staging/interactions" in proc.stdout  # each step of the runs
    report = json.loads(out.read_text())
    assert report["settings"]["interactions"] == 4000 and report["settings"]["marginal"] == [2000, 4000]
    assert set(report["phases"]) == {"2000", "4000"}
    assert set(report["phases"]["4000"]) == set(bench.MAIN_PHASES)
    assert set(report["phases"]["2000"]) == set(bench.MARGINAL_PHASES)
    for size, phases in report["phases"].items():
        for name, figures in phases.items():
            assert figures["seconds"] > 0 and figures["peak_rss_mb"] > 0, (size, name)
    main = report["phases"]["4000"]
    assert main["bare"]["rows"] > 4000 and main["bare_copy"]["parquet_bytes"] > 0

    noop = main["noop"]
    assert noop["snapshot"]["status"] == "unchanged" and noop["snapshot"]["bytes_written"] == 0
    assert noop["current_before"] == noop["current_after"] == main["full_exports"]["current_after"]
    inc = main["incremental"]
    assert inc["snapshot"]["status"] == "published" and inc["snapshot"]["bytes_written"] > 0
    assert inc["current_after"] not in (None, inc["current_before"])
    assert inc["published"]["parquet_bytes"] > inc["snapshot"]["bytes_written"]

    figures = report["figures"]
    # On a lake this small the timings are noise (a no-op can take longer than a full refresh),
    # but every figure is there and is a number.
    for key in ("incremental_share", "incremental_minus_noop_seconds", "full_minus_noop_seconds", "bytes_written",
                "bytes_written_total", "published_bytes", "bytes_share", "noop_beyond_startup", "peak_rss_mb",
                "marginal_full_staging_vs_bare", "marginal_full_exports_vs_bare_copy"):
        base = {"marginal_full_staging_vs_bare": "bare", "marginal_full_exports_vs_bare_copy": "bare_copy"}.get(key)
        # a ratio has no value only over a baseline whose marginal cost is exactly 0 (a tie)
        tie = base is not None and figures["marginal"][base]["seconds_per_interaction"] == 0
        assert isinstance(figures[key], (int, float)) or (tie and figures[key] is None), key
    assert len(figures["rss_full_exports_mb"]) == 2 and len(figures["rss_growth_exponents"]) == 1
    for name in bench.MAIN_PHASES:  # the process's CPU (every thread's), beside its wall seconds
        assert main[name]["cpu_seconds"] > 0, name
    for name in bench.MARGINAL_PHASES:
        assert isinstance(figures["marginal"][name]["cpu_microseconds_per_interaction"], float), name
    for name in ("full_staging", "full_exports"):
        rows = figures["marginal_steps"][name]
        assert {"ingest/interactions", "staging/interactions"} <= {r[0] for r in rows}
        assert len(rows) == main[name]["steps"] and [r[3] for r in rows] == sorted((r[3] for r in rows), reverse=True)
    assert proc.stdout.count("Where the marginal time goes: full refresh → ") == 2
    assert figures["noop_published_nothing"] is True and figures["incremental_published"] is True
    assert len(report["targets"]) == 8 and all(isinstance(t["holds"], bool) for t in report["targets"])
    assert report["append"]["lines"]["interactions"] == 40 and report["append"]["bytes"] > 0
    for phase_name in ("noop", "incremental"):
        steps = report["steps"][phase_name]
        assert len(steps) == main[phase_name]["steps"] > 8
        assert {"snapshot", "ingest/interactions"} <= {s for s, _ in steps}
        assert [s for _, s in steps] == sorted((s for _, s in steps), reverse=True)
    # the 1% append is undone: a re-run measures the same lake
    lake = tmp_path / "work" / "lakes" / "4000"
    assert not (lake / "append-journal.json").exists()
    assert not list((lake / "raw").rglob(f"*{report['append']['day']}*"))


def test_a_run_whose_events_cannot_be_read_is_one_line_naming_the_run(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {"DAGSTER_HOME": str(home), "FLYWHEEL_EXPORT_DIR": str(tmp_path / "exports")}
    with pytest.raises(bench.BenchError, match=r"^run no-such-run left no events in DAGSTER_HOME="):
        bench.describe_run({"run_id": "no-such-run"}, env)
    (home / "dagster.yaml").write_text("storage: [not, a, mapping]\n")
    with pytest.raises(bench.BenchError, match=r"^cannot read run no-such-run's events in DAGSTER_HOME="):
        bench.describe_run({"run_id": "no-such-run"}, env)


def test_a_state_copy_keeps_hard_links_and_symlinks(tmp_path):
    from dagster_project.bench import copy_state

    src = tmp_path / "run"
    (src / "exports" / ".snapshots" / ".objects").mkdir(parents=True)
    (src / "exports" / ".snapshots" / "v1").mkdir()
    obj = src / "exports" / ".snapshots" / ".objects" / "abc.parquet"
    obj.write_bytes(b"PAR1 data")
    os.link(obj, src / "exports" / ".snapshots" / "v1" / "part.parquet")
    (src / "exports" / "current").symlink_to(".snapshots/v1")
    (src / "state.duckdb").write_bytes(b"db")
    copy_state(src, tmp_path / "copy")
    copied = tmp_path / "copy" / "exports" / ".snapshots"
    assert (copied / ".objects" / "abc.parquet").stat().st_ino == (copied / "v1" / "part.parquet").stat().st_ino
    assert (copied / ".objects" / "abc.parquet").stat().st_nlink == 2
    assert (copied / ".objects" / "abc.parquet").stat().st_ino != obj.stat().st_ino  # a copy, not the original
    assert os.readlink(tmp_path / "copy" / "exports" / "current") == ".snapshots/v1"
    assert (tmp_path / "copy" / "state.duckdb").read_bytes() == b"db"
