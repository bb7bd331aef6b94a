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
