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

from conftest import PROJECT, dumps, interaction, write_lines
from dagster_project.cli import app


@pytest.fixture
def env(settings, monkeypatch):
    for name, value in {"FLYWHEEL_RAW_DIR": settings.raw_dir, "FLYWHEEL_WAREHOUSE": settings.warehouse,
                        "FLYWHEEL_EXPORT_DIR": settings.export_dir}.items():
        monkeypatch.setenv(name, str(value))
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

    listing = invoke("quarantine", "list", "--reason", "bad_type")
    assert "bad_type:was_accepted" in listing.output and "interactions_2026-02-26_5b0c2f7e.jsonl:2" in listing.output
    assert "not_an_object" not in listing.output.split("by reason")[0]
    assert listing.output.split("by reason")[1].strip() == ": bad_type:was_accepted 1"  # the summary is filtered too
    everything = invoke("quarantine", "list")
    assert everything.output.split("by reason")[1].strip() == ": bad_type:was_accepted 1, not_an_object 1"

    for command in (["quarantine", "list"], ["quarantine", "export", str(tmp_path / "x.csv")], ["quarantine", "replay"]):
        typo = invoke(*command, "--source", "nosuch")
        assert typo.exit_code == 2, command
        assert typo.output.strip().splitlines() == [
            "error: --source nosuch: no such source; known: eventlog, feedback, interactions, legacy_log, "
            "outcomes, session_ratings, signals, weighted_queue, weighted_ratings"]
    missing_dir = invoke("quarantine", "export", str(tmp_path / "no" / "such" / "q.jsonl"))
    assert (missing_dir.exit_code, missing_dir.output.strip()) == (2, (
        f"error: {tmp_path / 'no' / 'such' / 'q.jsonl'}: directory {tmp_path / 'no' / 'such'} does not exist; "
        "create it or choose another path"))

    jsonl = tmp_path / "q.jsonl"
    assert invoke("quarantine", "export", str(jsonl)).exit_code == 0
    exported = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["line_number"], r["reason"]) for r in exported] == [(2, "bad_type:was_accepted"), (4, "not_an_object")]
    assert exported[1]["raw_text"] == "[1]" and exported[1]["byte_offset"] > 0

    csv_path = tmp_path / "q.csv"
    assert invoke("quarantine", "export", str(csv_path), "--source", "interactions").exit_code == 0
    assert len(list(csv.DictReader(csv_path.open()))) == 2


def test_replay_after_fixing_the_sources_file_loads_the_lines(env, tmp_path, monkeypatch):
    path = env.raw_dir / "interactions" / "interactions_2026-03-01_00000000.jsonl"
    write_lines(path, [dumps(interaction(9, timestamp="2026-03-01T10:00:00+01:00"))])
    assert invoke("run", "--quiet").exit_code == 0
    # quarantined nothing new (offset timestamps are read), now replay everything: counts stay equal
    before = duckdb.connect(str(env.warehouse), read_only=True).execute(
        "select sum(lines_read), sum(rows_loaded), sum(rows_quarantined) from ingest.files").fetchall()
    replay = invoke("quarantine", "replay")
    assert replay.exit_code == 0
    assert "replaying 1 files with quarantined lines" in replay.output and "(replay) succeeded" in replay.output
    con = duckdb.connect(str(env.warehouse), read_only=True)
    after = con.execute(
        "select sum(lines_read), sum(rows_loaded), sum(rows_quarantined) from ingest.files").fetchall()
    assert before == after
    assert con.execute("select mode, status from ingest.runs order by started_at").fetchall() == [
        ("incremental", "success"), ("replay", "success")]


def test_a_failed_run_exits_non_zero_names_the_problem_and_keeps_the_warehouse(env, tmp_path, monkeypatch):
    assert invoke("run", "--quiet").exit_code == 0
    published = env.warehouse.stat().st_mtime_ns
    bad = tmp_path / "sources.yaml"
    bad.write_text("sources:\n  interactions:\n    time_zone: Mars/Olympus\n")
    monkeypatch.setenv("FLYWHEEL_SOURCES", str(bad))
    result = invoke("run", "--quiet")
    assert result.exit_code == 2
    assert result.output.splitlines()[1:] == [
        f"error: FLYWHEEL_SOURCES: {bad}: sources.interactions.time_zone: unknown time zone 'Mars/Olympus'"]
    assert env.warehouse.stat().st_mtime_ns == published
    # a missing raw root is refused before anything is touched (no file is marked missing)
    monkeypatch.delenv("FLYWHEEL_SOURCES")
    monkeypatch.setenv("FLYWHEEL_RAW_DIR", str(tmp_path / "gone"))
    result = invoke("run", "--quiet")
    assert result.exit_code == 2 and result.output.splitlines()[1:] == [
        f"error: FLYWHEEL_RAW_DIR={tmp_path / 'gone'} does not exist: point it at the root of the raw lake, "
        f"e.g. FLYWHEEL_RAW_DIR={PROJECT / 'data' / 'raw'}"]
    assert env.warehouse.stat().st_mtime_ns == published
    con = duckdb.connect(str(env.state_db), read_only=True)
    assert con.execute("select count(*) from ingest.files where status = 'missing'").fetchall() == [(0,)]
    con.close()


@pytest.mark.parametrize("name, value", [("FLYWHEEL_AS_OF", "2026-13-45"), ("FLYWHEEL_MAX_LINE_BYTES", "16 megs"),
                                         ("FLYWHEEL_EVAL_FRACTION", "2"), ("FLYWHEEL_SEAL_AFTER", "1day")])
def test_a_bad_setting_is_one_line_and_exit_2_before_any_work(env, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    for command in (["run"], ["status"]):
        result = invoke(*command)
        assert result.exit_code == 2
        [line] = result.output.strip().splitlines()
        assert line.startswith(f"error: {name}={value!r} is not valid: use ") and f"e.g. {name}=" in line
    assert not env.state_dir.exists()


def test_a_warehouse_path_that_is_a_directory_fails_first(env, monkeypatch, tmp_path):
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE", str(tmp_path))
    result = invoke("run", "--quiet")
    assert result.exit_code == 2 and result.output.splitlines()[1:] == [
        f"error: FLYWHEEL_WAREHOUSE={tmp_path} is a directory: name the database file, "
        f"e.g. FLYWHEEL_WAREHOUSE={tmp_path / 'warehouse.duckdb'}"]
    assert not (tmp_path / ".flywheel").exists()


def test_a_source_matching_no_files_is_a_warning_on_the_console_and_in_ingest_runs(env, tmp_path, monkeypatch):
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  outcomes:\n    globs: [nowhere/*.jsonl]\n")
    monkeypatch.setenv("FLYWHEEL_SOURCES", str(sources))
    result = invoke("run")
    assert result.exit_code == 0, result.output
    warning = f"source outcomes: no files match nowhere/*.jsonl under {env.raw_dir}"
    assert f"warning {warning}" in result.output.splitlines()
    con = duckdb.connect(str(env.warehouse), read_only=True)
    [(warnings,)] = con.execute("select warnings from ingest.runs").fetchall()
    assert warning in warnings and len([w for w in warnings if "outcomes" in w]) == 1
    # the run printed one progress line per step, with counts
    assert any(line.startswith("[") and "✓ ingest/interactions" in line and "loaded 1" in line
               for line in result.output.splitlines())


def test_step_failures_are_printed_once_short_and_with_the_trace_only_when_verbose(env, monkeypatch):
    (env.export_dir).mkdir(parents=True)
    (env.export_dir / "training").write_text("not a directory")
    result = invoke("run", "--quiet")
    assert result.exit_code == 1
    failed = [line for line in result.output.splitlines() if line.startswith("✗ ")]
    assert failed and len(failed) == len(set(failed)) and all(line.startswith("✗ training__") for line in failed)
    assert "Traceback" not in result.output and "(run with -v for the full traceback)" in result.output
    assert "the published warehouse is unchanged" in result.output
    verbose = invoke("-v", "run", "--quiet")
    assert verbose.exit_code == 1 and 'File "' in verbose.output


def test_synth_refuses_a_non_empty_directory_unless_forced(tmp_path):
    lake = tmp_path / "lake"
    lake.mkdir()
    (lake / "old.jsonl").write_text("{}\n")
    refused = invoke("synth", str(lake), "--interactions", "20")
    assert (refused.exit_code, refused.output.strip()) == (2, (
        f"error: {lake} is not empty: old and new files would mix; choose an empty directory "
        "or pass --force to delete its contents first"))
    assert [p.name for p in lake.iterdir()] == ["old.jsonl"]
    forced = invoke("synth", str(lake), "--interactions", "20", "--force")
    assert forced.exit_code == 0, forced.output
    assert not (lake / "old.jsonl").exists() and (lake / "interactions").is_dir()


def test_dagster_home_defaults_to_the_projects_and_tests_use_a_throwaway_one(monkeypatch):
    from dagster_project.pipeline import dagster_home

    assert dagster_home() is not None and PROJECT not in dagster_home().parents  # set by conftest
    monkeypatch.delenv("DAGSTER_HOME")
    assert dagster_home() == PROJECT / ".dagster_home"


def test_flywheel_entry_point_is_installed():
    exe = subprocess.run([sys.executable, "-m", "dagster_project.cli", "--help"], capture_output=True, text=True)
    assert exe.returncode == 0 and "quarantine" in exe.stdout
