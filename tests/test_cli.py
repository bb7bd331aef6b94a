"""The ``flywheel`` command line on a real lake: run, status, quarantine list/export/replay."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap

import duckdb
import pytest
from typer.testing import CliRunner

from conftest import dumps, interaction, write_lines
from dagster_project.cli import app


@pytest.fixture
def env(settings, monkeypatch):
    for name, value in {"FLYWHEEL_RAW_DIR": settings.raw_dir, "FLYWHEEL_WAREHOUSE": settings.warehouse,
                        "FLYWHEEL_EXPORT_DIR": settings.export_dir}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # runs work without DAGSTER_HOME
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl",
                [dumps(interaction(1)), dumps(interaction(2, was_accepted="yes")), b"", b"[1]"])
    return settings


def invoke(*args):
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return result


def test_run_then_status_and_quarantine(env, tmp_path):
    result = invoke("run", "--quiet")
    assert result.exit_code == 0, result.output
    assert "succeeded" in result.output and "interactions" in result.output
    assert env.warehouse.exists()

    status = invoke("status")
    assert status.exit_code == 0 and "interactions" in status.output
    assert "Excluded rows" in status.output and "none" in status.output

    listing = invoke("quarantine", "list", "--reason", "bad_type")
    assert "bad_type:was_accepted" in listing.output and "interactions_2026-02-26_5b0c2f7e.jsonl:2" in listing.output
    assert "not_an_object" not in listing.output.split("by reason")[0]

    jsonl = tmp_path / "q.jsonl"
    assert invoke("quarantine", "export", str(jsonl)).exit_code == 0
    exported = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["line_number"], r["reason"]) for r in exported] == [(2, "bad_type:was_accepted"), (4, "not_an_object")]
    assert exported[1]["raw_text"] == "[1]" and exported[1]["byte_offset"] > 0

    csv_path = tmp_path / "q.csv"
    assert invoke("quarantine", "export", str(csv_path), "--source", "interactions").exit_code == 0
    assert len(list(csv.DictReader(csv_path.open()))) == 2


def test_status_counts_rows_a_drop_expectation_excluded(env):
    write_lines(env.raw_dir / "interactions" / "interactions_2026-02-27_5b0c2f7e.jsonl",
                [dumps(interaction(3, timestamp="2031-01-01T00:00:00"))])
    result = invoke("run", "--quiet")
    assert result.exit_code == 0, result.output
    excluded = result.output.split("Excluded rows")[1]
    assert "staging.interactions" in excluded and "timestamp not in the future" in excluded


def test_replay_after_fixing_the_sources_file_loads_the_lines(env, tmp_path, monkeypatch):
    path = env.raw_dir / "interactions" / "interactions_2026-03-01_00000000.jsonl"
    write_lines(path, [dumps(interaction(9, timestamp="2026-03-01T10:00:00+01:00"))])
    assert invoke("run", "--quiet").exit_code == 0
    # quarantined nothing new (offset timestamps are read), now replay everything: counts stay equal
    before = duckdb.connect(str(env.warehouse), read_only=True).execute(
        "select sum(lines_read), sum(rows_loaded), sum(rows_quarantined) from ingest.files").fetchall()
    assert invoke("quarantine", "replay").exit_code == 0
    after = duckdb.connect(str(env.warehouse), read_only=True).execute(
        "select sum(lines_read), sum(rows_loaded), sum(rows_quarantined) from ingest.files").fetchall()
    assert before == after


def test_a_failed_run_exits_non_zero_names_the_problem_and_keeps_the_warehouse(env, tmp_path, monkeypatch):
    assert invoke("run", "--quiet").exit_code == 0
    published = env.warehouse.stat().st_mtime_ns
    bad = tmp_path / "sources.yaml"
    bad.write_text("sources:\n  interactions:\n    time_zone: Mars/Olympus\n")
    monkeypatch.setenv("FLYWHEEL_SOURCES", str(bad))
    result = invoke("run", "--quiet")
    assert result.exit_code == 1
    assert "Mars/Olympus" in result.output and "sources.yaml" in result.output
    assert env.warehouse.stat().st_mtime_ns == published


def test_flywheel_entry_point_is_installed():
    exe = subprocess.run([sys.executable, "-m", "dagster_project.cli", "--help"], capture_output=True, text=True)
    assert exe.returncode == 0 and "quarantine" in exe.stdout
