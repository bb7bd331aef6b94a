"""The ``flywheel`` command line on a real lake: run, status, quarantine list/export/replay, and
every message a wrong setting or a typo gets (exit code and the one line)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import textwrap

import duckdb
import pytest
from typer.testing import CliRunner

from conftest import PROJECT, dumps, held_open, interaction, unprivileged, write_lines
from dagster_project.cli import app
from dagster_project.publishing.snapshot import read_manifest
from dagster_project.settings import Settings

KNOWN = ("eventlog, feedback, interactions, legacy_log, outcomes, session_ratings, signals, "
         "weighted_queue, weighted_ratings")


def make_lake(root) -> Settings:
    raw = root / "raw"
    write_lines(raw / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl",
                [dumps(interaction(1)), dumps(interaction(2, was_accepted="yes")), b"", b"[1]"])
    write_lines(raw / "interactions" / "interactions_2026-03-01_00000000.jsonl",
                [dumps(interaction(9, timestamp="2026-03-01T10:00:00+01:00"))])
    return Settings.from_env({"FLYWHEEL_RAW_DIR": str(raw), "FLYWHEEL_WAREHOUSE": str(root / "warehouse.duckdb"),
                              "FLYWHEEL_EXPORT_DIR": str(root / "exports")})


def use(settings: Settings, monkeypatch) -> Settings:
    for name, value in {"FLYWHEEL_RAW_DIR": settings.raw_dir, "FLYWHEEL_WAREHOUSE": settings.warehouse,
                        "FLYWHEEL_EXPORT_DIR": settings.export_dir}.items():
        monkeypatch.setenv(name, str(value))
    return settings


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One real `flywheel run` shared by the tests that only read its results (or copy it)."""
    settings = make_lake(tmp_path_factory.mktemp("cli"))
    with pytest.MonkeyPatch.context() as mp:
        use(settings, mp)
        result = invoke("run")
    return settings, result


@pytest.fixture
def ran(first_run, monkeypatch):
    settings, _ = first_run
    return use(settings, monkeypatch)


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A fresh lake nothing has run on."""
    return use(make_lake(tmp_path), monkeypatch)


def invoke(*args):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_run_prints_a_line_per_step_warnings_and_the_result(first_run):
    settings, result = first_run
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "(incremental) succeeded" in result.output and "interactions" in result.output
    assert any(line.startswith("[") and "✓ ingest/interactions" in line and "files 2, lines 5, loaded 2, quarantined 2" in line
               for line in lines), result.output
    # every source without files is named once on the console and in ingest.runs
    warning = f"source outcomes: no files match outcomes/*_outcomes.jsonl under {settings.raw_dir}"
    assert f"warning {warning}" in lines
    assert len([line for line in lines if line.startswith("warning source ")]) == 8
    # once: not again as the step's own warning ("warning ingest__outcomes: source outcomes: ...")
    assert len([line for line in lines if "no files match" in line]) == 8, result.output
    con = duckdb.connect(str(settings.warehouse), read_only=True)
    [(warnings,)] = con.execute("select warnings from ingest.runs").fetchall()
    assert warning in warnings and len(warnings) == 8
    con.close()


def test_a_quiet_run_says_each_warning_once(env):
    """Without progress, the run's warnings are printed after it: each source without files once,
    although its ingest step logs it again (a step's own warnings: the disabled-source test)."""
    quiet = invoke("run", "--quiet").output.splitlines()
    warning = f"source outcomes: no files match outcomes/*_outcomes.jsonl under {env.raw_dir}"
    assert len([line for line in quiet if "no files match" in line]) == 8 and f"warning {warning}" in quiet


def test_quarantined_text_and_file_names_are_printed_as_they_are_not_as_markup(env, tmp_path):
    """A quarantined line is whatever a producer wrote: `quarantine list` printed it as rich markup,
    so `[/]` failed the command (MarkupError) and `[bold]` vanished; a UTF-16 file's NUL bytes
    went to the terminal raw, and its lines read as JSON typos."""
    write_lines(env.raw_dir / "interactions" / "interactions_2026-02-27_[x].jsonl",
                [b'{"x": "[/]"}', b'{"y": "[bold]b[/bold]"}'])
    (env.raw_dir / "interactions" / "interactions_2026-02-28_utf16.jsonl").write_text(
        dumps(interaction(30)) + "\n" + dumps(interaction(31)) + "\n", encoding="utf-16")
    assert invoke("run", "--quiet").exit_code == 0
    listing = invoke("quarantine", "list", "--limit", "20")
    assert listing.exit_code == 0, listing.output
    assert '{"x": "[/]"}' in listing.output and '"[bold]b[/bold]"' in listing.output
    assert "interactions_2026-02-27_[x].jsonl:1" in listing.output
    assert "\x00" not in listing.output and "\\x00" in listing.output  # escaped, visible
    assert invoke("status").exit_code == 0

    exported = tmp_path / "q.jsonl"
    assert invoke("quarantine", "export", str(exported)).exit_code == 0
    utf16 = [json.loads(line) for line in exported.read_text().splitlines() if "utf16" in line]
    assert [(r["line_number"], r["reason"]) for r in utf16] == [(1, "invalid_utf8"), (2, "invalid_json")]
    assert utf16[0]["detail"].endswith("; the file starts with the byte-order mark FF FE: it is UTF-16, not UTF-8")
    assert utf16[1]["detail"].endswith("; the line holds NUL bytes: UTF-16 text or binary data, not UTF-8")


def test_status_and_quarantine_list_and_export(ran, tmp_path):
    status = invoke("status")
    assert status.exit_code == 0 and "interactions" in status.output
    assert "Excluded rows" in status.output and "none" in status.output

    listing = invoke("quarantine", "list", "--reason", "bad_type")
    assert "bad_type:was_accepted" in listing.output and "interactions_2026-02-26_5b0c2f7e.jsonl:2" in listing.output
    assert "not_an_object" not in listing.output.split("by reason")[0]
    assert listing.output.split("by reason")[1].strip() == ": bad_type:was_accepted 1"  # the summary is filtered too
    everything = invoke("quarantine", "list")
    assert everything.output.split("by reason")[1].strip() == ": bad_type:was_accepted 1, not_an_object 1"

    jsonl = tmp_path / "q.jsonl"
    assert invoke("quarantine", "export", str(jsonl)).exit_code == 0
    exported = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["line_number"], r["reason"]) for r in exported] == [(2, "bad_type:was_accepted"), (4, "not_an_object")]
    assert exported[1]["raw_text"] == "[1]" and exported[1]["byte_offset"] > 0

    csv_path = tmp_path / "q.csv"
    assert invoke("quarantine", "export", str(csv_path), "--source", "interactions").exit_code == 0
    assert len(list(csv.DictReader(csv_path.open()))) == 2


def test_a_run_whose_only_new_record_is_excluded_publishes_its_ledger_row(env):
    """A re-flush stamped years ahead is excluded and the interaction keeps its row: the tables
    hash as before, and the run published nothing, so the warehouse (and the run's summary:
    "Excluded rows: none") did not say why that record is missing."""
    assert invoke("run", "--quiet").exit_code == 0
    path = next((env.raw_dir / "interactions").glob("*.jsonl"))
    first = next(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                 if line.startswith("{") and '"id"' in line)
    write_lines(env.raw_dir / "interactions" / "interactions_2031-01-01_5b0c2f7e.jsonl",
                [dumps({**first, "timestamp": "2031-01-01T00:00:00", "output_text": "from 2031"})])
    result = invoke("run", "--quiet")
    assert result.exit_code == 0, result.output
    assert "Nothing changed" not in result.output
    excluded = result.output.split("Excluded rows")[1]
    assert "staging.interactions" in excluded and "timestamp not in the future" in excluded
    con = duckdb.connect(str(env.warehouse), read_only=True)
    assert con.execute("select row_key, path from ingest.excluded").fetchall() == [
        (first["id"], "interactions/interactions_2031-01-01_5b0c2f7e.jsonl")]
    assert con.execute("select output_text from staging.interactions where id = ?", [first["id"]]).fetchall() == [
        (first["output_text"],)]
    con.close()
    assert "Nothing changed" in invoke("run", "--quiet").output  # and once only


def test_future_dated_lines_in_a_small_source_do_not_fail_every_run_until_their_date(env):
    """Three lines stamped 2099 beside two good ones were more than 5% of the table: the run
    failed, and so did every run after it, a full refresh too, as raw keeps them (the producer
    cannot take them back). A clock, not the records, is wrong: each is excluded and named."""
    write_lines(env.raw_dir / "interactions" / "interactions_2099-01-01_00000000.jsonl",
                [dumps(interaction(100 + i, timestamp="2099-01-01T10:00:00")) for i in range(3)])
    for args in (("run", "--quiet"), ("run", "--full-refresh", "--quiet")):
        result = invoke(*args)
        assert result.exit_code == 0, result.output
    con = duckdb.connect(str(env.warehouse), read_only=True)
    assert con.execute("select count(*) from ingest.excluded where table_name = 'staging.interactions' "
                       "and expectation = 'timestamp not in the future'").fetchall() == [(3,)]
    assert con.execute("select count(*) from staging.interactions").fetchall() == [(2,)]
    con.close()


def test_status_reports_a_warn_expectation_as_a_warning(env):
    """A negative latency is kept and reported by a warn expectation: the run published, and
    status said "validation failed" of it, as of a check that stopped the publish."""
    write_lines(env.raw_dir / "interactions" / "interactions_2026-02-27_5b0c2f7e.jsonl",
                [dumps(interaction(3, latency_ms=-1.5))])
    result = invoke("run", "--quiet")
    assert result.exit_code == 0, result.output
    out = " ".join(invoke("status").output.split())
    assert "validation warning staging.interactions: latency_ms ≥ 0; observed" in out, out
    assert "validation failed" not in out


def test_status_counts_rows_a_drop_expectation_excluded(env):
    write_lines(env.raw_dir / "interactions" / "interactions_2026-02-27_5b0c2f7e.jsonl",
                [dumps(interaction(3, timestamp="2031-01-01T00:00:00"))])
    result = invoke("run", "--quiet")
    assert result.exit_code == 0, result.output
    excluded = result.output.split("Excluded rows")[1]
    assert "staging.interactions" in excluded and "timestamp not in the future" in excluded
    # A full refresh that changes nothing publishes nothing: the current snapshot's manifest named
    # the refresh as the tables' builder, whose ledger rows the published warehouse does not
    # hold, and status said "none".
    refreshed = invoke("run", "--full-refresh", "--quiet")
    assert refreshed.exit_code == 0 and "Nothing changed" in refreshed.output, refreshed.output
    excluded = invoke("status").output.split("Excluded rows")[1]
    assert "staging.interactions" in excluded and "timestamp not in the future" in excluded


def test_a_source_typo_and_a_missing_export_directory_are_one_line_errors(ran, tmp_path):
    for command in (["quarantine", "list"], ["quarantine", "export", str(tmp_path / "x.csv")], ["quarantine", "replay"]):
        typo = invoke(*command, "--source", "nosuch")
        assert (typo.exit_code, typo.output.strip()) == (2, f"error: --source nosuch: no such source; known: {KNOWN}")
    missing_dir = invoke("quarantine", "export", str(tmp_path / "no" / "such" / "q.jsonl"))
    assert (missing_dir.exit_code, missing_dir.output.strip()) == (2, (
        f"error: {tmp_path / 'no' / 'such' / 'q.jsonl'}: directory {tmp_path / 'no' / 'such'} does not exist; "
        "create it or choose another path"))
    wrong_suffix = invoke("quarantine", "export", str(tmp_path / "q.parquet"))
    assert (wrong_suffix.exit_code, wrong_suffix.output.strip()) == (
        2, f"error: {tmp_path / 'q.parquet'}: use a .jsonl or .csv file name")
    (tmp_path / "taken.jsonl").mkdir()  # a directory of that name: a traceback before
    taken = invoke("quarantine", "export", str(tmp_path / "taken.jsonl"))
    assert (taken.exit_code, taken.output.strip()) == (
        2, f"error: {tmp_path / 'taken.jsonl'}: cannot write it: Is a directory")


def test_replay_is_recorded_as_replay_and_counts_nothing_twice(first_run, tmp_path, monkeypatch):
    settings, _ = first_run
    shutil.copytree(settings.warehouse.parent, tmp_path / "lake", symlinks=True)
    env = use(make_lake(tmp_path / "lake"), monkeypatch)  # same files, same bytes, in the copy
    monkeypatch.setenv("FLYWHEEL_RAW_DIR_CONFIRM", str(env.raw_dir))  # a lake that moved
    con = duckdb.connect(str(env.warehouse), read_only=True)
    before = con.execute("select sum(lines_read), sum(rows_loaded), sum(rows_quarantined) from ingest.files").fetchall()
    con.close()
    replay = invoke("quarantine", "replay")
    assert replay.exit_code == 0, replay.output
    assert ("replaying 1 source(s) with quarantined lines in 1 file(s), each whole from the bronze record: "
            "interactions") in replay.output and "(replay) succeeded" in replay.output
    # the state's own accounting (the same rows again change no table: nothing is published)
    con = duckdb.connect(str(env.state_db), read_only=True)
    after = con.execute("select sum(lines_read), sum(rows_loaded), sum(rows_quarantined) from ingest.files").fetchall()
    assert before == after
    assert con.execute("select mode, status, snapshot_status from ingest.runs order by started_at").fetchall() == [
        ("incremental", "success", "published"), ("replay", "success", "unchanged")]


def test_replaying_a_source_switched_off_is_refused_and_a_warehouse_directory_is_a_bad_setting(ran, tmp_path,
                                                                                               monkeypatch):
    """`quarantine replay` of a source the sources file switches off said it replayed it, warned
    that it is off, and succeeded having replayed nothing; `status` given a directory for the
    warehouse exited 1 on DuckDB's "Is a directory" read error, where `run` names the setting."""
    off = tmp_path / "sources.yaml"
    off.write_text("sources:\n  interactions: {enabled: false}\n")
    monkeypatch.setenv("FLYWHEEL_SOURCES", str(off))
    replay = invoke("quarantine", "replay")
    assert (replay.exit_code, replay.output.strip()) == (
        2, f"error: interactions: switched off in FLYWHEEL_SOURCES={off} (enabled: false), so not replayed; switch "
           "it on to replay it, or replay the others with --source"), replay.output
    off.write_text("sources:\n  interactions: {enabled: false}\n  interactions: {enabled: true}\n")
    broken = invoke("quarantine", "replay")  # (the command is for after a sources-file fix: review)
    assert (broken.exit_code, broken.output.strip()) == (
        2, f"error: FLYWHEEL_SOURCES: {off}: not valid YAML at line 3, column 3: 'interactions' is given twice")
    monkeypatch.delenv("FLYWHEEL_SOURCES")
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE", str(tmp_path))
    for command in (["status"], ["quarantine", "list"]):
        said = invoke(*command)
        assert (said.exit_code, said.output.strip()) == (
            2, f"error: FLYWHEEL_WAREHOUSE={tmp_path} is a directory: name the database file, "
               f"e.g. FLYWHEEL_WAREHOUSE={tmp_path / 'warehouse.duckdb'}"), said.output


def test_wrong_settings_are_refused_before_anything_is_touched(ran, tmp_path, monkeypatch):
    published = ran.warehouse.stat().st_mtime_ns
    bad = tmp_path / "sources.yaml"
    bad.write_text("sources:\n  interactions:\n    time_zone: Mars/Olympus\n")
    monkeypatch.setenv("FLYWHEEL_SOURCES", str(bad))
    result = invoke("run", "--quiet")
    assert result.exit_code == 2
    assert result.output.splitlines()[1:] == [
        f"error: FLYWHEEL_SOURCES: {bad}: sources.interactions.time_zone: unknown time zone 'Mars/Olympus'"]
    # text in brackets is printed as it is (not taken for console markup)
    bad.write_text("sources:\n  interactions: {globs: [x], colour: red}\n")
    result = invoke("run", "--quiet")
    assert result.exit_code == 2 and result.output.splitlines()[1:] == [
        f"error: FLYWHEEL_SOURCES: {bad}: sources.interactions: unknown keys ['colour']; "
        "allowed: ['enabled', 'globs', 'time_zone']"]
    # a value of the wrong type is named, not a traceback
    for text, message in [("interactions: 5", "sources.interactions: expected a mapping of enabled, globs, "
                                              "time_zone, got 5"),
                          ("interactions: {globs: }", "sources.interactions.globs: expected a path or a list of "
                                                      "paths, got None"),
                          ("interactions: {enabled: 'no'}", "sources.interactions.enabled: expected true or false, "
                                                            "got 'no'")]:
        bad.write_text(f"sources:\n  {text}\n")
        result = invoke("run", "--quiet")
        assert result.exit_code == 2 and result.output.splitlines()[1:] == [f"error: FLYWHEEL_SOURCES: {bad}: {message}"]
    # two sources claiming one file (a glob widened by mistake) each read it: its lines counted twice
    bad.write_text("sources:\n  legacy_log: {globs: ['interactions/*.jsonl']}\n")
    result = invoke("run", "--quiet")
    assert result.exit_code == 2 and result.output.splitlines()[1:] == [
        "error: sources interactions and legacy_log both claim interactions/interactions_2026-02-26_5b0c2f7e.jsonl "
        f"(and 1 more files): a file is read by one source; narrow their globs in {bad}"]
    # a missing raw root is refused (no file is marked missing)
    monkeypatch.delenv("FLYWHEEL_SOURCES")
    monkeypatch.setenv("FLYWHEEL_RAW_DIR", str(tmp_path / "gone"))
    result = invoke("run", "--quiet")
    assert result.exit_code == 2 and result.output.splitlines()[1:] == [
        f"error: FLYWHEEL_RAW_DIR={tmp_path / 'gone'} does not exist: point it at the root of the raw lake, "
        f"e.g. FLYWHEEL_RAW_DIR={PROJECT / 'data' / 'raw'}"]
    assert ran.warehouse.stat().st_mtime_ns == published
    con = duckdb.connect(str(ran.state_db), read_only=True)
    assert con.execute("select count(*) from ingest.files where status = 'missing'").fetchall() == [(0,)]
    con.close()


@pytest.mark.parametrize("name, value", [("FLYWHEEL_AS_OF", "2026-13-45"), ("FLYWHEEL_MAX_LINE_BYTES", "16 megs"),
                                         ("FLYWHEEL_EVAL_FRACTION", "2"), ("FLYWHEEL_SEAL_AFTER", "1day")])
def test_a_bad_setting_is_one_line_and_exit_2_before_any_work(env, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    for command in (["run"], ["status"], ["quarantine", "list"]):
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


def test_a_warehouse_locked_by_another_process_is_one_line(ran, tmp_path):
    with held_open(ran.state_db):
        result = invoke("run", "--quiet")
    assert result.exit_code == 1
    [line] = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: {ran.state_db}: ") and "another process" in line
    assert "Traceback" not in result.output


def test_a_warehouse_an_analyst_opened_read_write_fails_status_in_one_line_not_the_run(ran):
    """DuckDB opens read-write by default: an analyst's connection to the published warehouse
    locks it. The run still publishes (and here finds nothing new); only the status after it
    cannot be shown, which made a run that succeeded exit 1 with a traceback."""
    import os

    assert invoke("run", "--quiet").exit_code == 0  # whatever earlier tests left is published
    path = os.path.realpath(ran.warehouse)
    with held_open(path):
        run = invoke("run", "--quiet")
        status = invoke("status")
    assert run.exit_code == 0 and "succeeded" in run.output and "Nothing changed" in run.output, run.output
    assert status.exit_code == 1
    for result in (run, status):
        [line] = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert line.startswith(f"error: {path}: cannot open the published warehouse, another process holds it "
                               "read-write") and "Traceback" not in result.output


def test_a_source_disabled_before_it_ever_ran_does_not_block_the_run(env, monkeypatch, tmp_path):
    """Its ingest step returned before its raw table existed: every run failed in its staging
    step (a DuckDB catalog error). Disabling says so in one warning."""
    sources = tmp_path / "sources.yml"
    sources.write_text("sources:\n  signals:\n    enabled: false\n")
    monkeypatch.setenv("FLYWHEEL_SOURCES", str(sources))
    said = f"source signals: disabled in {sources}: its files are not read; its rows are kept"
    result = invoke("run")
    assert result.exit_code == 0, result.output
    assert said in result.output
    # without progress too: a step's warning was in its log only
    quiet = invoke("run", "--quiet")
    assert quiet.exit_code == 0 and f"warning ingest__signals: {said}" in quiet.output.splitlines()


def test_a_seal_period_of_seconds_is_warned_about(env, monkeypatch):
    """``FLYWHEEL_SEAL_AFTER=24`` (meant as hours) seals a line still being written after 24 s: it
    is quarantined as unterminated and its rest read as another line, for good."""
    monkeypatch.setenv("FLYWHEEL_SEAL_AFTER", "24")
    result = invoke("run", "--quiet")
    assert result.exit_code == 0
    assert ("warning FLYWHEEL_SEAL_AFTER=24s: a last line a writer is still writing for longer than that is "
            "quarantined as unterminated and its rest read as another line, for good (a bare number is seconds: "
            "24h is a day)") in result.output


def test_a_file_gone_is_said_by_the_run_that_publishes_nothing_for_it(env):
    """A vanished file changes no row, so its run publishes nothing: the run's events, read from
    the published warehouse, were not printed at all."""
    assert invoke("run", "--quiet").exit_code == 0
    (env.raw_dir / "interactions" / "interactions_2026-03-01_00000000.jsonl").unlink()
    result = invoke("run", "--quiet")
    assert result.exit_code == 0 and "Nothing changed" in result.output, result.output
    assert ("missing interactions: interactions/interactions_2026-03-01_00000000.jsonl: the file is gone; "
            "its rows are kept") in result.output


def test_status_lists_runs_that_published_nothing_failed_ones_with_their_error(env):
    """Status reads the published warehouse, whose run log stops at its last publish: a run that
    changed nothing, or failed, was not listed (a nightly failure did not show). The newest runs
    are kept beside the state database when each run ends."""
    assert invoke("run", "--quiet").exit_code == 0
    unchanged = invoke("run", "--quiet")
    assert unchanged.exit_code == 0 and "Nothing changed" in unchanged.output
    # accepted thumbs-up answers to blank prompts, too many of sft's rows to drop: systemic
    write_lines(env.raw_dir / "interactions" / "interactions_2026-02-28_00000000.jsonl",
                [dumps(interaction(100 + i, input_text="", user_feedback="positive")) for i in range(5)])
    failed = invoke("run", "--quiet")
    assert failed.exit_code == 1
    status = invoke("status")
    assert status.exit_code == 0, status.output
    table = status.output.split("Recent runs")[1].split("Excluded rows")[0]
    statuses = [line.split("│")[3].strip() for line in table.splitlines() if line.startswith("│")]
    snapshots = [line.split("│")[8].strip() for line in table.splitlines() if line.startswith("│")]
    assert statuses == ["failed", "success", "success"] and snapshots == ["", "unchanged", "published"]
    [error] = [line for line in status.output.splitlines() if line.startswith("run ")]
    assert " failed: " in error and "prompt is a non-empty conversation" in error


def test_status_before_any_publish_lists_the_runs_that_failed(env):
    # a first run (or a Dagster-only operator's first launches) that failed: status said only
    # "No warehouse ...: run `flywheel run` first", their errors in recent_runs.json unread
    write_lines(env.raw_dir / "interactions" / "interactions_2026-02-28_00000000.jsonl",
                [dumps(interaction(100 + i, input_text="", user_feedback="positive")) for i in range(5)])
    assert invoke("run", "--quiet").exit_code == 1
    status = invoke("status")
    assert status.exit_code == 1 and "No warehouse at" in status.output, status.output
    [error] = [line for line in status.output.splitlines() if line.startswith("run ") and " failed: " in line]
    assert " failed: " in error and "prompt is a non-empty conversation" in error

def test_status_names_a_writer_at_work_and_one_killed_while_it_held_the_lake(env):
    """A run killed by `kill -9` never ends, so it is in neither of status' tables until the next
    run fails it: status said nothing at all. The writer lock's file says who took it, and a
    release empties it: held, someone writes now; free but not empty, its holder was killed."""
    def writers():
        output = invoke("status").output
        return [line for line in output.splitlines() if "writer lock" in line]

    assert invoke("run", "--quiet").exit_code == 0 and writers() == []
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(PROJECT)!r})
        from dagster_project.settings import Settings
        from dagster_project.state import writer_lock
        with writer_lock(Settings.from_env({{"FLYWHEEL_WAREHOUSE": {str(env.warehouse)!r}}})):
            print("held", flush=True)
            time.sleep(600)""")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        [line] = writers()
        assert line.startswith(f"writing now: pid {holder.pid} since ") and "as of the last publish" in line
    finally:
        holder.kill()
        holder.wait()
    [line] = writers()
    assert line.startswith(f"the last writer did not finish: pid {holder.pid} since ")
    assert "the next run records it as failed" in line
    assert invoke("run", "--quiet").exit_code == 0  # takes the lock and lets go of it cleanly
    assert writers() == []


@pytest.mark.slow
def test_step_failures_are_printed_once_short_and_with_the_trace_only_when_verbose(env, monkeypatch):
    from dagster_project.publishing.snapshot import FAULT_ENV

    monkeypatch.setenv(FAULT_ENV, "enospc:objects_written")  # the disk fills up while publishing
    result = invoke("run", "--quiet")
    assert result.exit_code == 1
    failed = [line for line in result.output.splitlines() if line.startswith("✗ ")]
    assert failed and len(failed) == len(set(failed)) and all(line.startswith("✗ snapshot") for line in failed)
    assert "No space left on device" in result.output, result.output
    assert "Traceback" not in result.output and "(run with -v for the full traceback)" in result.output
    assert "the current snapshot (warehouse and exports) is unchanged" in result.output
    verbose = invoke("-v", "run", "--quiet")
    assert verbose.exit_code == 1 and 'File "' in verbose.output


def test_a_run_failing_after_its_commit_says_its_snapshot_is_current(env, monkeypatch):
    """A signal or error after the commit (a SIGTERM as ``current`` moved) failed a run whose
    snapshot had been published whole: its line said the current snapshot was unchanged."""
    from dagster_project.publishing import current_version
    from dagster_project.publishing.snapshot import FAULT_ENV

    monkeypatch.setenv(FAULT_ENV, "enospc:committed")
    result = invoke("run", "--quiet")
    assert result.exit_code == 1
    version = current_version(env.export_dir)
    assert version and f"its snapshot {version} had been published whole and is the current one" in result.output
    assert "is unchanged" not in result.output, result.output


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
    # `synth --force data` (meant: data/raw) deleted the lake's bronze, state and snapshots
    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    (data / ".flywheel" / "bronze").mkdir(parents=True)
    (data / ".flywheel" / "bronze" / "segment.jsonl").write_text("{}\n")
    refused = invoke("synth", str(data), "--interactions", "20", "--force")
    assert (refused.exit_code, refused.output.strip()) == (2, (
        f"error: {data} holds a lake's own record ({data / '.flywheel'}): --force would delete it; "
        "name the raw directory (e.g. data/raw) or an empty one"))
    assert (data / ".flywheel" / "bronze" / "segment.jsonl").exists()
    # `synth --force $DAGSTER_HOME` deleted the instance's run history and its settings
    home = tmp_path / "dagster_home"
    (home / "history").mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    refused = invoke("synth", str(home), "--interactions", "20", "--force")
    assert (refused.exit_code, refused.output.strip()) == (2, (
        f"error: {home} holds a lake's own record ({home / 'dagster.yaml'}): --force would delete it; "
        "name the raw directory (e.g. data/raw) or an empty one"))
    assert (home / "dagster.yaml").exists()


def test_dagster_home_defaults_to_the_projects_and_tests_use_a_throwaway_one(monkeypatch):
    from dagster_project.pipeline import dagster_home

    assert dagster_home() is not None and PROJECT not in dagster_home().parents  # set by conftest
    monkeypatch.delenv("DAGSTER_HOME")
    assert dagster_home() == PROJECT / ".dagster_home"


def test_a_dagster_home_without_a_config_gets_the_projects_and_one_with_its_own_keeps_it(tmp_path, monkeypatch):
    """A DAGSTER_HOME of the user's choosing had no dagster.yaml: Dagster kept a telemetry log
    there (~35 KB a run) and runs had no one-at-a-time limit on the warehouse."""
    import yaml

    from dagster_project.pipeline import instance

    monkeypatch.delenv("FLYWHEEL_DAGSTER_EPHEMERAL", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "fresh"))
    with instance():
        pass
    config = yaml.safe_load((tmp_path / "fresh" / "dagster.yaml").read_text())
    assert config["telemetry"] == {"enabled": False}
    assert config["concurrency"]["runs"]["tag_concurrency_limits"] == [{"key": "flywheel/warehouse", "limit": 1}]
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "own"))
    with instance():
        pass
    assert (tmp_path / "own" / "dagster.yaml").read_text() == "telemetry:\n  enabled: true\n"


def test_flywheel_entry_point_is_installed():
    exe = subprocess.run([sys.executable, "-m", "dagster_project.cli", "--help"], capture_output=True, text=True)
    assert exe.returncode == 0 and "quarantine" in exe.stdout


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    """``code`` run by a Python process of its own (the garbage collector is process-wide)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)


def test_a_run_imports_the_pipeline_uncollected_once_and_exits_clean():
    """``flywheel run`` (``cli._run``) imports Dagster with the garbage collector off
    (``uncollected``): what that created is frozen, the collector is back on for the run (also
    when the block raises), a second use freezes nothing, and at exit the frozen objects are
    finalised (nanobind names DuckDB's objects as leaked on stderr otherwise)."""
    done = _fresh_python("""
        import contextlib, gc, sys
        import duckdb
        from dagster_project import uncollected
        import dagster_project.cli as cli
        with contextlib.suppress(Exception):
            cli._run(None)  # imports the pipeline, then fails on the missing settings
        assert "dagster" in sys.modules
        assert gc.isenabled(), "the collector was left off"
        frozen = gc.get_freeze_count()
        assert frozen > 100_000, frozen
        with uncollected():
            made = [[] for _ in range(1000)]
        assert gc.get_freeze_count() == frozen, "froze again"
        duckdb.connect().execute("select 1").fetchall()
    """)
    assert done.returncode == 0, done.stderr
    assert "leaked" not in done.stderr, done.stderr[:300]
    raised = _fresh_python("""
        import contextlib, gc
        from dagster_project import uncollected
        with contextlib.suppress(ImportError), uncollected():
            import dagster_project.no_such_module
        assert gc.isenabled(), "the collector was left off"
    """)
    assert raised.returncode == 0, raised.stderr


def test_a_generated_pseudonym_key_is_warned_about_once(env):
    """Without FLYWHEEL_PSEUDONYM_KEY a key is generated beside the warehouse, and the run says
    so (pseudonyms change with the key). Ingesting a session store (its retention pseudonymises)
    created the key silently first, so no run ever warned."""
    shutil.copytree(PROJECT / "data" / "raw" / "sessions", env.raw_dir / "sessions")
    warned = "FLYWHEEL_PSEUDONYM_KEY is not set: generated a key in"
    first = invoke("run")
    assert first.exit_code == 0, first.output
    assert len([line for line in first.output.splitlines() if warned in line]) == 1, first.output
    assert env.pseudonym_key_file.is_file()
    again = invoke("run")
    assert again.exit_code == 0 and warned not in again.output


def test_a_run_with_another_pseudonym_key_says_every_pseudonym_changed(env, monkeypatch):
    """Setting FLYWHEEL_PSEUDONYM_KEY on a lake that ran with a generated key (or changing it)
    republished every pseudonym of the shared datasets without a word: an analyst's joins with
    earlier snapshots stopped matching. The run says which snapshot had the other key, once."""
    shutil.copytree(PROJECT / "data" / "raw", env.raw_dir, dirs_exist_ok=True)  # the sample's sessions
    monkeypatch.setenv("FLYWHEEL_AS_OF", "2026-04-03")
    said = "is not the one snapshot"
    assert invoke("run").exit_code == 0
    first = read_manifest(env.export_dir)["version"]
    monkeypatch.setenv("FLYWHEEL_PSEUDONYM_KEY", "a-new-key")
    rekeyed = invoke("run")
    assert rekeyed.exit_code == 0, rekeyed.output
    [line] = [line for line in rekeyed.output.splitlines() if said in line]
    assert f"pseudonym key (FLYWHEEL_PSEUDONYM_KEY) is not the one snapshot {first} was published with" in line
    con = duckdb.connect(str(env.warehouse), read_only=True)
    assert said in con.execute("select warnings from ingest.runs order by started_at desc limit 1").fetchone()[0][-1]
    con.close()
    again = invoke("run")
    assert again.exit_code == 0 and said not in again.output
    monkeypatch.delenv("FLYWHEEL_PSEUDONYM_KEY")  # the generated key again
    back = invoke("run")
    assert f"pseudonym key (the key in {env.pseudonym_key_file}, FLYWHEEL_PSEUDONYM_KEY unset)" in back.output


def test_status_lists_a_failed_run_not_yet_in_the_ledger(env):
    """A failure that could not be written to ingest.runs (another run held it; a full disk) waits
    in the state directory for the next run: meanwhile `flywheel status` showed the last success,
    run after failing run."""
    from dagster_project.state import PENDING_FAILURES

    assert invoke("run", "--quiet").exit_code == 0
    pending = env.state_dir / PENDING_FAILURES
    pending.mkdir()
    (pending / "0f00ba11-run.json").write_text(json.dumps(
        {"run_id": "0f00ba11-run", "mode": "incremental", "error": "the run stopped: [Errno 28] No space left"}))
    out = " ".join(invoke("status").output.split())
    assert "run 0f00ba11 failed: the run stopped: [Errno 28] No space left" in out, out
    assert invoke("run", "--quiet").exit_code == 0  # the next run records it: listed once
    assert " ".join(invoke("status").output.split()).count("run 0f00ba11 failed:") == 1


def test_a_damaged_dagster_history_stops_the_run_in_one_line(env, monkeypatch, tmp_path):
    """Dagster's own storage failing (a full or damaged DAGSTER_HOME: sqlite's "database or disk
    is full", "file is not a database") ended `flywheel run` in a traceback of 120 lines."""
    home = tmp_path / "dagster_home"
    (home / "history" / "runs").mkdir(parents=True)
    for name in ("history/runs.db", "history/runs/index.db"):
        (home / name).write_bytes(b"not a database " * 500)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("FLYWHEEL_DAGSTER_EPHEMERAL", "0")
    result = CliRunner().invoke(app, ["run", "--quiet"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert (f"error: the run stopped: Dagster's run history in DAGSTER_HOME={home} could not be read or written: "
            "(sqlite3.DatabaseError) file is not a database;") in " ".join(result.output.split()), result.output


@pytest.mark.parametrize("args, said", [
    (("quarantine", "list", "--limit", "-1"), "Invalid value for '--limit'"),  # a DuckDB traceback
    (("synth", "lake", "--interactions", "-5"), "Invalid value for '--interactions'"),  # an empty lake, exit 0
    (("forget", "--session", " "), "error: --session: give the id to erase, not an empty one"),  # exit 1
])
def test_a_bad_argument_is_refused_with_exit_2_and_no_traceback(env, args, said):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_the_run_summary_says_the_files_gone_alike_in_one_line(env):
    """Each file event of the run was a line of its own: a directory that may not be listed made
    one per file it held (53 for one directory). Files of one source with one event and one reason
    are one line, counting the others."""
    for day in range(1, 5):
        write_lines(env.raw_dir / "interactions" / f"interactions_2026-03-0{day}_5b0c2f7e.jsonl",
                    [dumps(interaction(100 + day))])
    assert invoke("run", "--quiet").exit_code == 0
    for day in range(1, 5):
        (env.raw_dir / "interactions" / f"interactions_2026-03-0{day}_5b0c2f7e.jsonl").unlink()
    lines = invoke("run", "--quiet").output.splitlines()
    gone = [line for line in lines if line.startswith("missing interactions: ")]
    assert gone == ["missing interactions: interactions/interactions_2026-03-01_5b0c2f7e.jsonl: the file is gone; "
                    "its rows are kept (and 3 more interactions files, the same)"], lines


def _status_after_a_run_that_could_not_read(path, record: dict) -> str:
    """`flywheel status`'s words (white space folded) after a nightly run that found ``path``
    appended to (``record``) and could not read it (its mode 0, the run without root's override)."""
    write_lines(path, [dumps(record)], mode="ab")
    path.chmod(0)
    nightly = subprocess.run([*unprivileged(), sys.executable, "-m", "dagster_project.cli", "run", "--quiet"],
                             capture_output=True, text=True, timeout=300, cwd=PROJECT)
    path.chmod(0o644)
    assert nightly.returncode == 0, nightly.stdout + nightly.stderr
    status = invoke("status")
    assert status.exit_code == 0, status.output
    return " ".join(status.output.split())


def test_status_alone_names_the_files_the_newest_run_could_not_read(env):
    """A file unread on every run (a producer's mode, a lock never released) was said only in
    each run's own output: `flywheel status` the next morning showed nothing."""
    assert invoke("run", "--quiet").exit_code == 0
    said = _status_after_a_run_that_could_not_read(
        env.raw_dir / "interactions" / "interactions_2026-03-01_00000000.jsonl", interaction(10))
    assert "could not read these files: unreadable interactions: interactions/interactions_2026-03-01_00000000.jsonl: " \
           "[Errno 13] Permission denied" in said, said
    assert invoke("run", "--quiet").exit_code == 0
    status = invoke("status")
    assert status.exit_code == 0 and "could not read" not in status.output and "unreadable" not in status.output


def test_status_alone_names_an_unread_file_among_more_file_events_than_it_keeps(env):
    """The newest runs' first 100 file events are kept for status, in the order they came: a
    share unmounted (every file of a source `missing`) pushed another source's unreadable file
    out of them, and status alone said nothing of it."""
    from dagster_project.state import EVENTS_KEPT

    gone = [env.raw_dir / "interactions" / f"interactions_2026-02-27_{i:08d}.jsonl" for i in range(EVENTS_KEPT + 5)]
    for i, path in enumerate(gone):
        write_lines(path, [dumps(interaction(1000 + i))])
    stuck = env.raw_dir / "interactions" / "interactions_2026-03-09_00000000.jsonl"  # named after them
    write_lines(stuck, [dumps(interaction(2000))])
    assert invoke("run", "--quiet").exit_code == 0
    for path in gone:  # each file "missing" in the next run
        path.unlink()
    said = _status_after_a_run_that_could_not_read(stuck, interaction(2001))
    assert ("unreadable interactions: interactions/interactions_2026-03-09_00000000.jsonl: [Errno 13] "
            "Permission denied") in said, said


def test_status_counts_the_staging_tables_of_a_warehouse_an_older_version_wrote(ran, tmp_path, monkeypatch):
    """A warehouse from before snapshots holds staging as tables, not views: status counted
    views only, and said 0 staged rows for every source until the first run of this version."""
    older = tmp_path / "older.duckdb"
    shutil.copyfile(os.path.realpath(ran.warehouse), older)
    con = duckdb.connect(str(older))
    con.execute("create table staging.interactions_t as select * from staging.interactions")
    con.execute("drop view staging.interactions")
    con.execute("alter table staging.interactions_t rename to interactions")
    con.close()
    monkeypatch.setenv("FLYWHEEL_WAREHOUSE", str(older))
    status = invoke("status")
    assert status.exit_code == 0, status.output
    [row] = [line for line in status.output.splitlines() if line.startswith("│ interactions ")]
    assert row.split("│")[8].strip() == "2", row


def test_status_cuts_a_failed_runs_error_line_that_runs_on(env):
    """Every ingest step refused alike but each naming its source (an older version's state):
    status printed the run's error as one line of ~5,000 characters."""
    assert invoke("run", "--quiet").exit_code == 0
    cache = env.state_dir / "recent_runs.json"
    runs = json.loads(cache.read_text())
    refusal = "; ".join(f"ingest__{s}_{i}: source {s}: refused, as its rows of files since deleted would be lost"
                        for i in range(5) for s in KNOWN.split(", "))  # no part said twice
    runs[0].update(status="failed", error=refusal + "\nTraceback …")
    cache.write_text(json.dumps(runs))
    status = invoke("status")
    assert status.exit_code == 0, status.output
    said = " ".join(status.output.split())
    shown = said.split(f"run {runs[0]['run_id'][:8]} failed: ")[1]
    assert shown.startswith(refusal[:100])
    assert f"… ({len(refusal) - 600:,} more characters)" in said
    assert refusal[600:700] not in said


def test_a_run_lets_go_of_the_state_when_it_lets_go_of_the_writer_lock(env, monkeypatch):
    """`flywheel run` opened the state database once more, after the writer lock was released,
    to say what it published: the next run (or forget), waiting on the lock, took it at that
    moment and failed at once, "another process holds it" (PID: the first run's own); or it
    got there first and the first run printed no "Published" line."""
    from dagster_project import cli

    said = cli._print_pruned
    waiting = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(PROJECT)!r})
        from dagster_project.settings import Settings
        from dagster_project.state import state_connection, writer_activity, writer_lock
        settings = Settings.from_env({{"FLYWHEEL_RAW_DIR": {str(env.raw_dir)!r},
                                      "FLYWHEEL_WAREHOUSE": {str(env.warehouse)!r}}})
        print("waiting", flush=True)
        while (writer_activity(settings) or ("",))[0] != "writing":  # the run holds the lock
            time.sleep(0.05)
        with writer_lock(settings), state_connection(settings, lock=False):
            print("holding", flush=True)
            time.sleep(3)
    """)], stdout=subprocess.PIPE, text=True)

    def once_the_next_writer_holds_the_state(result, settings):
        # the run has let go of the lock: the writer waiting on it has the state open before
        # the run says what it published
        assert waiting.stdout.readline().strip() == "holding"
        said(result, settings)

    monkeypatch.setattr(cli, "_print_pruned", once_the_next_writer_holds_the_state)
    try:
        assert waiting.stdout.readline().strip() == "waiting"
        result = invoke("run", "--quiet")
    finally:
        assert waiting.wait(timeout=60) == 0
    assert result.exit_code == 0, result.output
    assert "Published snapshot " in result.output, result.output
