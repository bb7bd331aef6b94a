"""Validation gates and atomic publishing, end to end on a copy of the sample lake."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace

import duckdb
import pytest

from conftest import PROJECT
from dagster_project.pipeline import run_pipeline
from dagster_project.publish import current_version, list_versions, publish_dataset


@pytest.fixture
def lake(settings, tmp_path):
    raw = tmp_path / "lake"
    shutil.copytree(PROJECT / "data" / "raw", raw)
    return replace(settings, raw_dir=raw, pseudonym_key="test-key")


def manifests(settings) -> dict[str, dict]:
    return {f"{p.parent.name}/{p.name}": current_version(p)
            for p in sorted(settings.export_dir.glob("*/*")) if not p.name.startswith(".")}


@pytest.mark.slow
def test_full_run_publishes_every_dataset_and_hf_datasets_reads_them(lake, tmp_path, monkeypatch):
    result = run_pipeline(lake)
    assert result.success, result.failures
    published = manifests(lake)
    assert {"training/sft", "training/kto", "training/dpo", "training/weighted",
            "analytics/interaction_labels", "analytics/session_satisfaction", "analytics/outcome_rates"} <= set(published)
    for name, manifest in published.items():
        assert manifest["run_id"] == result.run_id and manifest["validation"]["status"] == "passed", name
        files = [p.name for p in (lake.export_dir / name).iterdir()]
        assert sorted(files) == ["manifest.json", "part-00000.parquet"]

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    sft = datasets.load_dataset("parquet", data_files=str(lake.export_dir / "training/sft/*.parquet"), split="train")
    assert sft.num_rows == published["training/sft"]["rows"]
    conversation = datasets.List({"role": datasets.Value("string"), "content": datasets.Value("string")})
    assert sft.features["prompt"] == conversation and sft.features["completion"] == conversation
    dpo = datasets.load_dataset("parquet", data_files=str(lake.export_dir / "training/dpo/*.parquet"), split="train")
    assert dpo.features["chosen"] == conversation and dpo.num_rows > 0
    # text is published byte for byte as ingested
    row = sft[0]
    con = duckdb.connect(str(lake.warehouse), read_only=True)
    (input_text,) = con.execute("select input_text from staging.interactions where id = ?",
                                [row["interaction_id"]]).fetchall()[0]
    assert row["prompt"][-1] == {"role": "user", "content": input_text}
    validations = con.execute("select count(*), count_if(not success and blocking) from ingest.validations "
                              "where run_id = ?", [result.run_id]).fetchall()[0]
    assert validations[0] > 40 and validations[1] == 0
    con.close()


@pytest.mark.slow
def test_a_failing_blocking_expectation_keeps_the_previous_version(lake):
    first = run_pipeline(lake)
    assert first.success, first.failures
    before = manifests(lake)
    # Damage what the SFT set is built from: an accepted, positive interaction with an empty prompt.
    con = duckdb.connect(str(lake.state_db))
    (victim,) = con.execute("select interaction_id from exports.sft limit 1").fetchall()[0]
    con.execute("update raw.interactions set input_text = '' where id = ?", [victim])
    con.close()

    second = run_pipeline(lake)
    assert not second.success
    message = "\n".join(m for _, m in second.failures)
    assert "exports.sft" in message and "prompt is a non-empty conversation" in message
    assert victim in message  # sample offending rows are shown
    after = manifests(lake)
    assert after["training/sft"] == before["training/sft"]  # previous version still current
    assert after["training/weighted"]["run_id"] == second.run_id  # unaffected datasets still published
    assert after["analytics/interaction_labels"]["run_id"] == second.run_id
    con = duckdb.connect(str(lake.state_db), read_only=True)
    assert con.execute("select count(*) from ingest.validations where run_id = ? and not success "
                       "and table_name = 'exports.sft'", [second.run_id]).fetchall()[0][0] >= 1
    assert con.execute("select status from ingest.runs where run_id = ?", [second.run_id]).fetchall() == [("failed",)]
    con.close()


@pytest.mark.slow
def test_bad_staging_blocks_everything_downstream(lake):
    assert run_pipeline(lake).success
    published = lake.warehouse.stat().st_mtime_ns
    con = duckdb.connect(str(lake.state_db))
    con.execute("update raw.signals set strength = 1.5 where id = (select min(id) from raw.signals)")
    con.close()
    result = run_pipeline(lake)
    assert not result.success
    assert any("great_expectations" in step for step, _ in result.failures)
    assert lake.warehouse.stat().st_mtime_ns == published  # the analyst warehouse was not replaced


@pytest.mark.slow
def test_an_analyst_holding_the_warehouse_open_never_blocks_a_run(lake, tmp_path):
    assert run_pipeline(lake).success
    ready = tmp_path / "ready"
    reader = subprocess.Popen([sys.executable, "-c", f"""
import duckdb, time, pathlib
con = duckdb.connect({str(lake.warehouse)!r}, read_only=True)
n = con.execute("select count(*) from ingest.runs").fetchall()[0][0]
pathlib.Path({str(ready)!r}).write_text(str(n))
time.sleep(20)
print(con.execute("select count(*) from ingest.runs").fetchall()[0][0])
"""], stdout=subprocess.PIPE, text=True)
    try:
        while not ready.exists():
            time.sleep(0.05)
        second = run_pipeline(lake)
        assert second.success, second.failures
        con = duckdb.connect(str(lake.warehouse), read_only=True)
        assert con.execute("select count(*) from ingest.runs where run_id = ?", [second.run_id]).fetchall() == [(1,)]
        con.close()
    finally:
        reader.send_signal(signal.SIGTERM)
        reader.wait(timeout=30)


@pytest.mark.slow
def test_sigkill_mid_publish_leaves_the_last_version_and_rerun_hashes_match(lake, tmp_path):
    assert run_pipeline(lake).success
    before = manifests(lake)
    env = {**os.environ, "FLYWHEEL_RAW_DIR": str(lake.raw_dir), "FLYWHEEL_WAREHOUSE": str(lake.warehouse),
           "FLYWHEEL_EXPORT_DIR": str(lake.export_dir), "FLYWHEEL_PSEUDONYM_KEY": "test-key"}
    env.pop("DAGSTER_HOME", None)
    for delay in (2.5, 4.0, 5.5):
        proc = subprocess.Popen([sys.executable, "-m", "dagster_project.cli", "run", "--full-refresh", "--quiet"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # whatever the moment, every dataset has a complete current version and the warehouse opens
        for name, manifest in manifests(lake).items():
            assert manifest is not None, name
            assert (lake.export_dir / name / "part-00000.parquet").exists()
        duckdb.connect(str(lake.warehouse), read_only=True).close()
    again = run_pipeline(lake)
    assert again.success, again.failures
    after = manifests(lake)
    assert {k: v["content_hash"] for k, v in after.items()} == {k: v["content_hash"] for k, v in before.items()}


def test_publish_keeps_old_versions_until_retention(settings):
    con = duckdb.connect()
    con.execute("create table t as select range as x from range(10)")
    dest = settings.export_dir / "training" / "toy"
    hashes = [publish_dataset(con, "t", dest, run_id=f"run-{i:04d}", keep_versions=3)["content_hash"]
              for i in range(5)]
    assert len(set(hashes)) == 1
    assert len(list_versions(dest)) == 3
    assert current_version(dest)["run_id"] == "run-0004"
    assert dest.is_symlink() and dest.resolve().parent.name == "toy"


# =============================================================================================
# publish_dataset / publish_warehouse on their own: real files, real DuckDB, real subprocesses.
# =============================================================================================

import hashlib
import random
from datetime import date, datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from dagster_project.publish import (MANIFEST, PublishError, cleanup_warehouse_temps, prune, publish_warehouse,
                                     versions_dir)
from dagster_project.validation import validate_table
from staging_fixtures import Lake
from transforms.labels import build_labels
from transforms.training import build_training_sets

STAGES = ["parquet_written", "manifest_written", "version_complete", "link_created", "swapped"]
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def export_lake() -> Lake:
    """exports.* built by the real transforms, with text that must survive byte for byte."""
    lake = Lake()
    lake.interaction(1, input_text="  Wie liest man eine Datei?\r\n", output_text="Mit open() — «so».\t",
                     context="Du bist ein Assistent.", user_feedback="positive")
    lake.interaction(2, input_text="question 2", output_text="answer 2", user_feedback="positive")
    lake.interaction(3, input_text="question 2", output_text="a worse answer", user_feedback="negative")
    for i in range(4, 40):
        lake.interaction(i, input_text=f"question {i} 😀", output_text=f"answer {i}",
                         user_feedback="positive" if i % 4 else "negative")
    lake.weighted_queue("question 5 😀", "never say this", 10.0, "critical")
    lake.weighted_rating("question 7 😀", "fine", "good", 1.0)
    lake.stage()
    build_labels(lake.con)
    build_training_sets(lake.con, pseudonym_key=b"k", as_of=date(2026, 3, 1))
    return lake


def toy_db(path: Path, rows: int = 500, seed: int = 0) -> Path:
    """A file database with an ``exports.sft``-shaped table, rows inserted in a shuffled order."""
    con = duckdb.connect(str(path))
    con.execute("create schema if not exists exports")
    con.execute(f"""create or replace table exports.sft as
        select [{{'role': 'user', 'content': 'q' || i}}]::struct(role varchar, content varchar)[] as prompt,
               [{{'role': 'assistant', 'content': 'a' || i || repeat(' x', (i % 7)::int)}}]
                   ::struct(role varchar, content varchar)[] as completion,
               1.0::double as sample_weight, case when i % 20 = 0 then 'eval' else 'train' end as split,
               format('{{:06d}}', i) as interaction_id
        from range({rows}) t(i) order by hash(i + {seed})""")
    con.close()
    return path


def read_current(dest: Path) -> tuple[dict, int]:
    """What a reader sees: the manifest and the rows of every *.parquet directly in the dataset dir."""
    manifest = json.loads((dest / MANIFEST).read_text())
    files = sorted(p.name for p in dest.glob("*.parquet"))
    assert files == [f["name"] for f in manifest["files"]]
    return manifest, pads.dataset(sorted(str(p) for p in dest.glob("*.parquet")), format="parquet").count_rows()


def run_child(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True,
                          timeout=timeout)


def test_published_export_loads_unchanged_with_pyarrow_pandas_and_hf_datasets(tmp_path, monkeypatch):
    lake = export_lake()
    dest = tmp_path / "exports" / "training" / "sft"
    report = validate_table(lake.con, "exports.sft", run_id="run-1", now=NOW)
    assert report.success, report.describe()
    manifest = publish_dataset(lake.con, "exports.sft", dest, run_id="run-1", watermarks={"interactions": 1},
                               validation=report.summary())
    # layout: a symlink to .versions/sft/<time>-<run>, holding exactly the parquet files and the manifest
    assert dest.is_symlink() and dest.resolve().parent == versions_dir(dest)
    assert dest.resolve().name.endswith("-run-1") and manifest["version"] == dest.resolve().name
    assert sorted(p.name for p in dest.iterdir()) == ["manifest.json", "part-00000.parquet"]
    on_disk = json.loads((dest / MANIFEST).read_text())
    assert on_disk == json.loads(json.dumps(manifest, default=str))
    assert on_disk["rows"] == lake.con.execute("select count(*) from exports.sft").fetchone()[0] > 0
    assert [c["name"] for c in on_disk["columns"]][:5] == ["prompt", "completion", "sample_weight", "split",
                                                           "interaction_id"]
    assert on_disk["validation"]["status"] == "passed" and on_disk["source_watermarks"] == {"interactions": 1}
    assert on_disk["files"][0]["sha256"] == hashlib.sha256((dest / "part-00000.parquet").read_bytes()).hexdigest()
    meta = pq.ParquetFile(dest / "part-00000.parquet").metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"

    expected = lake.con.execute("select prompt, completion, interaction_id from exports.sft "
                                "order by interaction_id").fetchall()
    table = pads.dataset(sorted(str(p) for p in dest.glob("*.parquet")), format="parquet").to_table()  # SPEC: glob
    directory = pads.dataset(str(dest), format="parquet", exclude_invalid_files=True).to_table()  # or the dir
    assert directory.equals(table)
    assert table.schema.field("prompt").type == pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    got = [(r["prompt"], r["completion"], r["interaction_id"]) for r in table.to_pylist()]
    assert got == [([dict(m) for m in p], [dict(m) for m in c], i) for p, c, i in expected]  # byte for byte
    frame = pd.read_parquet(dest / "part-00000.parquet")
    assert list(frame["interaction_id"]) == [i for _, _, i in expected]
    first = next(p for p, _, i in got if i == "00000000-0000-4000-8000-000000000001")
    assert first == [{"role": "system", "content": "Du bist ein Assistent."},
                     {"role": "user", "content": "  Wie liest man eine Datei?\r\n"}]

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    for name in ("kto", "dpo"):
        publish_dataset(lake.con, f"exports.{name}", dest.parent / name, run_id="run-1",
                        validation=validate_table(lake.con, f"exports.{name}", run_id="run-1", now=NOW).summary())
    conversation = datasets.List({"role": datasets.Value("string"), "content": datasets.Value("string")})
    sft = datasets.load_dataset("parquet", data_files=str(dest / "*.parquet"), split="train")
    assert sft.num_rows == manifest["rows"] and sft.features["prompt"] == conversation
    assert [r["interaction_id"] for r in sft] == [i for _, _, i in expected]
    kto = datasets.load_dataset("parquet", data_files=str(dest.parent / "kto" / "*.parquet"), split="train")
    assert kto.features["label"] == datasets.Value("bool") and kto.features["completion"] == conversation
    dpo = datasets.load_dataset("parquet", data_files=str(dest.parent / "dpo" / "*.parquet"), split="train")
    assert dpo.num_rows >= 1 and dpo.features["chosen"] == conversation == dpo.features["rejected"]


def test_content_hash_is_reproducible_independent_of_insertion_order_and_file_split(tmp_path):
    hashes, file_hashes = [], []
    for seed in (1, 2):
        con = duckdb.connect(str(toy_db(tmp_path / f"db{seed}.duckdb", seed=seed)), read_only=True)
        m = publish_dataset(con, "exports.sft", tmp_path / f"out{seed}" / "sft", run_id=f"run-{seed}")
        hashes.append(m["content_hash"])
        file_hashes.append(m["files"][0]["sha256"])
        assert m["order_by"][0] == "interaction_id"
        split = publish_dataset(con, "exports.sft", tmp_path / f"split{seed}" / "sft", run_id="s", rows_per_file=120)
        assert [f["name"] for f in split["files"]] == [f"part-{i:05d}.parquet" for i in range(5)]
        assert [f["rows"] for f in split["files"]] == [120, 120, 120, 120, 20]
        assert split["content_hash"] == m["content_hash"]  # the hash is of the rows, not of the files
        ids = pads.dataset(sorted(str(p) for p in (tmp_path / f"split{seed}" / "sft").glob("*.parquet"))
                           ).to_table(columns=["interaction_id"]).column(0).to_pylist()
        assert ids == sorted(ids) and len(ids) == 500  # one total order across files
        con.close()
    assert hashes[0] == hashes[1] and file_hashes[0] == file_hashes[1]  # parquet bytes deterministic too
    con = duckdb.connect(str(tmp_path / "db1.duckdb"))
    con.execute("update exports.sft set sample_weight = 2 where interaction_id = '000007'")
    assert publish_dataset(con, "exports.sft", tmp_path / "out1" / "sft", run_id="changed")["content_hash"] != hashes[0]


def test_failed_validation_is_not_published_and_the_previous_version_stays_current(tmp_path):
    lake = export_lake()
    dest = tmp_path / "training" / "sft"
    first = publish_dataset(lake.con, "exports.sft", dest, run_id="good-run",
                            validation=validate_table(lake.con, "exports.sft", run_id="good-run", now=NOW))
    victim = lake.con.execute("select min(interaction_id) from exports.sft").fetchone()[0]
    lake.con.execute("update exports.sft set prompt = [{'role': 'user', 'content': ''}] where interaction_id = ?",
                     [victim])
    lake.con.execute("insert into exports.sft select * from exports.sft limit 1")
    report = validate_table(lake.con, "exports.sft", run_id="bad-run", now=NOW)
    assert not report.success
    # the caller's gate (what the Dagster asset does) ...
    if report.success:
        publish_dataset(lake.con, "exports.sft", dest, run_id="bad-run", validation=report)
    # ... and publish_dataset's own refusal
    with pytest.raises(PublishError, match="failed validation"):
        publish_dataset(lake.con, "exports.sft", dest, run_id="bad-run", validation=report)
    with pytest.raises(PublishError, match="failed validation"):
        publish_dataset(lake.con, "exports.sft", dest, run_id="bad-run", validation=report.summary())
    assert current_version(dest)["run_id"] == "good-run" == first["run_id"]
    manifest, rows = read_current(dest)
    assert rows == first["rows"] and len(list_versions(dest)) == 1
    assert not list(versions_dir(dest).glob(".incomplete-*"))


def test_retention_keeps_n_versions_never_the_current_and_old_open_files_keep_working(tmp_path):
    con = duckdb.connect(str(toy_db(tmp_path / "db.duckdb", rows=50)), read_only=True)
    dest = tmp_path / "training" / "sft"
    publish_dataset(con, "exports.sft", dest, run_id="run-0000", keep_versions=2)
    held = open(dest / "part-00000.parquet", "rb")  # a reader with the first version's file open
    old_dir = dest.resolve()
    for i in range(1, 6):
        publish_dataset(con, "exports.sft", dest, run_id=f"run-{i:04d}", keep_versions=2)
    versions = list_versions(dest)
    assert [v["run_id"] for v in versions] == ["run-0005", "run-0004"]
    assert [v["current"] for v in versions] == [True, False]
    assert not old_dir.exists()  # deleted by retention ...
    assert pq.ParquetFile(held).read().num_rows == 50  # ... yet the open file still reads
    held.close()
    # after a rollback to the older version, pruning to one version keeps the newest and the current
    os.replace(_symlink_to(dest, Path(versions[1]["path"])), dest)
    prune(dest, 1)
    assert [(v["run_id"], v["current"]) for v in list_versions(dest)] == [("run-0005", False), ("run-0004", True)]
    assert current_version(dest)["run_id"] == "run-0004"
    with pytest.raises(ValueError):
        publish_dataset(con, "exports.sft", dest, run_id="x", keep_versions=0)


def _symlink_to(dest: Path, target: Path) -> Path:
    link = dest.parent / ".rollback"
    os.symlink(os.path.relpath(target, dest.parent), link)
    return link


def test_a_legacy_real_directory_is_adopted_as_a_version(tmp_path):
    con = duckdb.connect(str(toy_db(tmp_path / "db.duckdb", rows=10)), read_only=True)
    dest = tmp_path / "training" / "sft"
    dest.mkdir(parents=True)
    (dest / "old.parquet").write_bytes(b"legacy bytes")
    publish_dataset(con, "exports.sft", dest, run_id="new-run")
    assert dest.is_symlink() and sorted(p.name for p in dest.iterdir()) == ["manifest.json", "part-00000.parquet"]
    versions = list_versions(dest)
    assert [v.get("legacy", False) for v in versions] == [False, True]
    assert (Path(versions[1]["path"]) / "old.parquet").read_bytes() == b"legacy bytes"
    (tmp_path / "training" / "file").write_text("x")
    with pytest.raises(PublishError, match="not a directory"):
        publish_dataset(con, "exports.sft", tmp_path / "training" / "file", run_id="x")
    with pytest.raises(PublishError, match="no such table"):
        publish_dataset(con, "exports.missing", dest, run_id="x")


CHILD_PUBLISH = """
import os, signal, sys
from pathlib import Path
import duckdb
from dagster_project.publish import publish_dataset
db, dest, stage, run_id = sys.argv[1:] if len(sys.argv) > 1 else ({db!r}, {dest!r}, {stage!r}, {run_id!r})
con = duckdb.connect(db, read_only=True)
def hook(at):
    if at == stage:
        os.kill(os.getpid(), signal.SIGKILL)
while True:
    publish_dataset(con, "exports.sft", Path(dest), run_id=run_id, validation={{"status": "passed"}}, hook=hook,
                    keep_versions=3)
    if stage != "loop":
        break
"""


@pytest.mark.parametrize("stage", STAGES)
def test_sigkill_at_each_publish_stage_leaves_a_readable_version_and_rerun_hashes_match(tmp_path, stage):
    db = str(toy_db(tmp_path / "db.duckdb", rows=300))
    dest = tmp_path / "exports" / "training" / "sft"
    con = duckdb.connect(db, read_only=True)
    first = publish_dataset(con, "exports.sft", dest, run_id="first-run")
    child = run_child(CHILD_PUBLISH.format(db=db, dest=str(dest), stage=stage, run_id="killed-run"))
    assert child.returncode == -signal.SIGKILL, child.stderr
    manifest, rows = read_current(dest)
    assert manifest["run_id"] == ("killed-run" if stage == "swapped" else "first-run")
    assert rows == manifest["rows"] == 300 and manifest["content_hash"] == first["content_hash"]
    again = publish_dataset(con, "exports.sft", dest, run_id="rerun")
    assert again["content_hash"] == first["content_hash"]
    assert read_current(dest)[0]["run_id"] == "rerun"
    assert not list(versions_dir(dest).glob(".incomplete-*"))
    assert not list(dest.parent.glob(".sft.link-*"))


def test_sigkill_at_random_moments_never_exposes_a_partial_dataset(tmp_path):
    db = str(toy_db(tmp_path / "db.duckdb", rows=2000))
    dest = tmp_path / "exports" / "training" / "sft"
    con = duckdb.connect(db, read_only=True)
    expected = publish_dataset(con, "exports.sft", dest, run_id="first-run")["content_hash"]
    rng = random.Random(7)
    code = CHILD_PUBLISH.format(db=db, dest=str(dest), stage="loop", run_id="loop-run")
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.6, 1.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        manifest, rows = read_current(dest)
        assert rows == manifest["rows"] == 2000 and manifest["content_hash"] == expected
    assert publish_dataset(con, "exports.sft", dest, run_id="final")["content_hash"] == expected
    assert len(list_versions(dest)) <= 5 and not list(versions_dir(dest).glob(".incomplete-*"))


# ------------------------------------------------------------------ the analyst warehouse


def state_db(path: Path, rows: int) -> Path:
    con = duckdb.connect(str(path))
    con.execute("create schema if not exists marts")
    con.execute(f"create or replace table marts.t as select range as x from range({rows})")
    con.execute("create or replace table main.other as select 1 as y")
    con.close()
    return path


ANALYST = """
import duckdb, json, pathlib, time, sys
wh, ready, go = sys.argv[1:4]
con = duckdb.connect(wh, read_only=True)
before = con.execute("select count(*) from marts.t").fetchone()[0]
pathlib.Path(ready).write_text(str(before))
while not pathlib.Path(go).exists():
    time.sleep(0.02)
after = con.execute("select count(*), sum(x) from marts.t").fetchone()
con.close()
fresh = duckdb.connect(wh, read_only=True).execute("select count(*) from marts.t").fetchone()[0]
print(json.dumps({"before": before, "after_on_old_connection": after[0], "fresh": fresh}))
"""


def test_publish_warehouse_while_an_analyst_holds_it_open(tmp_path):
    state, wh = tmp_path / ".flywheel" / "state.duckdb", tmp_path / "warehouse.duckdb"
    state.parent.mkdir()
    first = publish_warehouse(state_db(state, 1000), wh)
    assert first["method"] == "copy" and first["tables"] == 2
    ready, go = tmp_path / "ready", tmp_path / "go"
    analyst = subprocess.Popen([sys.executable, "-c", ANALYST, str(wh), str(ready), str(go)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert analyst.poll() is None and time.monotonic() < deadline, analyst.stderr.read()
            time.sleep(0.02)
        con = duckdb.connect(str(state))
        con.execute("insert into marts.t select range from range(1000, 2500)")
        copied = publish_warehouse(con, wh)  # copy of the checkpointed working file
        assert copied["bytes"] == wh.stat().st_size
        reader = duckdb.connect(str(wh), read_only=True)  # a new connection (other process) sees new data
        assert reader.execute("select count(*) from marts.t").fetchone() == (2500,)
        reader.close()
        con.execute("insert into marts.t select range from range(2500, 3000)")
        subset = publish_warehouse(con, wh, ["marts.t"])  # a fresh file with only these tables
        con.close()
        assert subset["method"] == "attach" and subset["tables"] == 1
        reader = duckdb.connect(str(wh), read_only=True)
        assert reader.execute("select count(*), sum(x) from marts.t").fetchone() == (3000, sum(range(3000)))
        assert [r[0] for r in reader.execute("select table_name from duckdb_tables()").fetchall()] == ["t"]
        reader.close()
        go.write_text("go")
        out, err = analyst.communicate(timeout=30)
    finally:
        if analyst.poll() is None:
            analyst.kill()
    assert analyst.returncode == 0, err
    # the analyst's old connection kept working on the old file; reconnecting sees the new one
    assert json.loads(out) == {"before": 1000, "after_on_old_connection": 1000, "fresh": 3000}
    assert not list(tmp_path.glob("warehouse.duckdb.tmp-*")) and not Path(f"{wh}.wal").exists()


def test_a_killed_warehouse_publish_leaves_the_previous_file_and_its_temp_is_cleaned(tmp_path):
    state, wh = state_db(tmp_path / "state.duckdb", 10), tmp_path / "warehouse.duckdb"
    publish_warehouse(state, wh)
    con = duckdb.connect(str(state))
    con.execute("insert into marts.t select range from range(10, 20)")
    con.close()
    child = run_child(f"""
import os, signal
from pathlib import Path
from dagster_project.publish import publish_warehouse
publish_warehouse({str(state)!r}, Path({str(wh)!r}),
                  hook=lambda stage: os.kill(os.getpid(), signal.SIGKILL) if stage == "tmp_written" else None)
""")
    assert child.returncode == -signal.SIGKILL, child.stderr
    leftovers = list(tmp_path.glob("warehouse.duckdb.tmp-*"))
    assert len(leftovers) == 1  # complete but never swapped in
    reader = duckdb.connect(str(wh), read_only=True)
    assert reader.execute("select count(*) from marts.t").fetchone() == (10,)  # the last published version
    reader.close()
    assert cleanup_warehouse_temps(wh) == leftovers  # its process is gone
    publish_warehouse(state, wh)
    reader = duckdb.connect(str(wh), read_only=True)
    assert reader.execute("select count(*) from marts.t").fetchone() == (20,)
    reader.close()
    with pytest.raises(ValueError):
        publish_warehouse(state, state)
