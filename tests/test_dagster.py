"""The Dagster layer: definitions load, assets materialise on a real lake, checks, sensor."""

from __future__ import annotations

import json
from datetime import datetime
import os
import subprocess
import sys

import dagster as dg
import pytest

from conftest import PROJECT, dumps, interaction, write_lines
from dagster_project.definitions import load_definitions
from dagster_project.engine.discovery import listing
from dagster_project.resources import FlywheelResource
from dagster_project.sources import load_sources
from dagster_project.state import WRITER_TAGS


@pytest.fixture
def lake(settings):
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl",
                [dumps(interaction(i)) for i in range(3)] + [b"null", b'{"id": "x", "id": "y"}'])
    write_lines(settings.raw_dir / "feedback" / "2026-02-26_feedback.jsonl", [dumps(
        {"record_id": interaction(1)["id"], "feedback": "positive", "was_edited": False,
         "timestamp": "2026-02-26T15:00:00", "source": "manual"})])
    return settings


def resource_for(settings) -> FlywheelResource:
    return FlywheelResource(raw_dir=str(settings.raw_dir), warehouse=str(settings.warehouse),
                            export_dir=str(settings.export_dir))


def ingest_and_staging_assets():
    defs = load_definitions()
    graph = defs.resolve_asset_graph()
    keys = [k for k in graph.get_all_asset_keys() if k.path[0] in ("ingest", "staging")]
    return defs, keys


def test_definitions_have_a_job_schedule_sensor_and_the_threaded_executor():
    defs = load_definitions()
    job = defs.resolve_job_def("flywheel_job")
    assert job.executor_def.name == "flywheel_threads"
    assert defs.resolve_schedule_def("flywheel_daily").cron_schedule == "0 3 * * *"
    assert defs.resolve_sensor_def("flywheel_new_files") is not None
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    for source in ("interactions", "legacy_log", "feedback", "outcomes", "session_ratings",
                   "weighted_queue", "weighted_ratings", "eventlog", "signals"):
        assert f"ingest/{source}" in keys and f"staging/{source}" in keys
    assert "staging/weighted_examples" in keys


def flywheel_job():
    return load_definitions().resolve_job_def("flywheel_job")


@pytest.mark.slow
def test_a_run_dagster_launches_shares_one_state_connection_across_its_step_threads(lake, monkeypatch):
    """As the daemon runs the schedule: the job's own executor and resource, no `flywheel run`
    around it. The resource opens the state database once for the run; the steps run two at a
    time on cursors of it, and the run publishes."""
    from dagster_project.publishing.snapshot import read_manifest

    for name, value in (("FLYWHEEL_RAW_DIR", lake.raw_dir), ("FLYWHEEL_WAREHOUSE", lake.warehouse),
                        ("FLYWHEEL_EXPORT_DIR", lake.export_dir), ("FLYWHEEL_PSEUDONYM_KEY", "k"),
                        ("FLYWHEEL_SESSION_RETENTION_DAYS", "3650"), ("FLYWHEEL_STEP_THREADS", "2")):
        monkeypatch.setenv(name, str(value))
    from dagster_project.pipeline import PENDING_FAILURES

    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.execute_job(dg.reconstructable(flywheel_job), instance=instance)
        assert result.success
        # `dg launch --job` then enters the result, which sets the resources up again for the
        # finished run: that must not open the state (it would record this pending failure)
        marker = lake.state_dir / PENDING_FAILURES / "earlier.json"
        marker.parent.mkdir()
        marker.write_text(json.dumps({"run_id": "earlier", "mode": "incremental", "error": "x"}))
        with result:
            engine = [e.message for e in result.all_events if e.event_type == dg.DagsterEventType.ENGINE_EVENT]
        assert marker.exists()
    assert any("on 2 threads" in (m or "") for m in engine)
    manifest = read_manifest(lake.export_dir)
    assert manifest["run_id"] == result.run_id and manifest["datasets"]["internal/staging.interactions"]["rows"] == 3
    import duckdb

    con = duckdb.connect(str(lake.state_db), read_only=True)
    try:  # every ingest step added to the run's one row
        assert con.execute("select status, lines_read, len(sources) from ingest.runs where run_id = ?",
                           [result.run_id]).fetchone() == ("success", 6, 9)
    finally:
        con.close()


def test_assets_materialise_with_metadata_and_checks(lake):
    defs, keys = ingest_and_staging_assets()
    assets = [a for a in defs.assets if any(k in keys for k in a.keys)]
    checks = list(defs.asset_checks or [])
    result = dg.materialize([*assets, *checks], resources={"flywheel": resource_for(lake)},
                            selection=dg.AssetSelection.assets(*keys))
    assert result.success
    meta = result.asset_materializations_for_node("ingest__interactions")[0].metadata
    assert meta["lines_read"].value == 5 and meta["rows_loaded"].value == 3 and meta["rows_quarantined"].value == 2
    assert "not_an_object" in meta["quarantined_by_reason"].value
    staging = result.asset_materializations_for_node("staging__interactions")[0].metadata
    assert staging["dagster/row_count"].value == 3
    # Dagster's run history is outside erasure and retention: no row of a table is kept there
    # (a preview of each table's first rows held ids `flywheel forget` had erased)
    said = repr([e.materialization.metadata for e in result.get_asset_materialization_events()])
    assert interaction(1)["session_id"] not in said and interaction(1)["id"] not in said
    assert [c.name for c in staging["dagster/column_schema"].value.columns][:3] == ["id", "timestamp", "timestamp_text"]
    evaluations = result.get_asset_check_evaluations()
    assert evaluations and all(e.passed for e in evaluations)


def test_full_refresh_config_rebuilds_without_double_counting(lake):
    defs, keys = ingest_and_staging_assets()
    assets = [a for a in defs.assets if any(k in keys for k in a.keys)]
    resources = {"flywheel": resource_for(lake)}
    for full in (False, True, False):
        config = {"ops": {"ingest__interactions": {"config": {"full_refresh": full}}}}
        result = dg.materialize(assets, resources=resources, run_config=config,
                                selection=dg.AssetSelection.assets(*keys))
        assert result.success
    import duckdb

    con = duckdb.connect(str(lake.state_db), read_only=True)
    assert con.execute("select sum(lines_read), sum(rows_loaded) from ingest.files "
                       "where source = 'interactions'").fetchall() == [(5, 3)]
    assert con.execute("select count(*) from ingest.quarantine").fetchall() == [(2,)]
    con.close()


def _tick(cursor, resources):
    sensor = load_definitions().resolve_sensor_def("flywheel_new_files")
    with dg.build_sensor_context(cursor=cursor, resources=resources) as context:
        return sensor.evaluate_tick(context)


def test_sensor_requests_runs_only_when_files_appear_grow_or_vanish(lake):
    resources = {"flywheel": resource_for(lake)}
    first = _tick(None, resources)
    assert len(first.run_requests) == 1
    assert first.run_requests[0].tags["flywheel/changed_sources"] == "feedback,interactions"
    cursor = first.cursor
    sources = json.loads(cursor)["sources"]
    assert sources["interactions"]["files"] == 1 and sources["outcomes"]["files"] == 0
    again = _tick(cursor, resources)
    assert again.run_requests == [] and again.skip_message == "no new or changed files among 2"
    feedback = lake.raw_dir / "feedback" / "2026-02-26_feedback.jsonl"
    with feedback.open("a") as fh:
        fh.write(dumps({"record_id": "z", "feedback": "negative", "timestamp": "2026-02-26T16:00:00"}) + "\n")
    grown = _tick(cursor, resources)
    assert [r.tags["flywheel/changed_sources"] for r in grown.run_requests] == ["feedback"]
    assert grown.run_requests[0].run_key != first.run_requests[0].run_key
    feedback.unlink()
    gone = _tick(grown.cursor, resources)
    assert [r.tags["flywheel/changed_sources"] for r in gone.run_requests] == ["feedback"]
    assert _tick(gone.cursor, resources).run_requests == []
    # the file back as it was: the lake is in an earlier state again, and that is a new request
    # (Dagster launches one run per run key)
    write_lines(feedback, [dumps({"record_id": "z", "feedback": "negative"})])
    back = _tick(gone.cursor, resources)
    feedback.unlink()
    again = _tick(back.cursor, resources)
    keys = [t.run_requests[0].run_key for t in (first, grown, gone, back, again)]
    assert len(set(keys)) == 5 and json.loads(again.cursor)["sources"] == json.loads(gone.cursor)["sources"]


def test_a_sensor_or_schedule_run_that_crashed_is_retried_once_and_one_that_failed_a_step_is_not(lake, tmp_path):
    """The sensor's cursor moves on when it requests a run: a sensor run whose worker was killed
    left its files unpublished until a producer wrote again. The daemon retries such a run once
    (Dagster's own decision, on an instance with the project's dagster.yaml); not a run that
    failed in a step, nor a `flywheel run`."""
    import shutil

    from dagster._core.events import RunFailureReason
    from dagster._core.execution.retries import auto_reexecution_should_retry_run
    from dagster._core.storage.dagster_run import DagsterRun

    from dagster_project.pipeline import INSTANCE_CONFIG

    request = _tick(None, {"flywheel": resource_for(lake)}).run_requests[0]
    schedule = load_definitions().resolve_schedule_def("flywheel_daily")
    shutil.copy(INSTANCE_CONFIG, tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.run_retries_enabled  # else the daemon does not look (the decision below is its)

        def retried(tags, reason):
            run = instance.add_run(DagsterRun(job_name="flywheel_job", status=dg.DagsterRunStatus.FAILURE,
                                              tags={**WRITER_TAGS, **tags}))
            return auto_reexecution_should_retry_run(instance, run, reason)

        for tags in (request.tags, schedule.tags):
            assert retried(tags, RunFailureReason.RUN_WORKER_RESTART)
            assert retried(tags, RunFailureReason.UNKNOWN)  # failed by the dead-runs sweep
            assert not retried(tags, RunFailureReason.STEP_FAILURE)
        assert not retried({"flywheel/launched_by": "cli"}, RunFailureReason.UNEXPECTED_TERMINATION)

def test_sensor_sees_a_commit_to_a_session_store_in_wal_mode(lake):
    """SQLite in WAL mode commits into the -wal file and leaves the store's size and mtime as they
    are until a checkpoint: the sensor, which looked at the store alone, missed every rating."""
    import sqlite3

    store = lake.raw_dir / "sessions" / "session_feedback.sqlite3"
    store.parent.mkdir(parents=True, exist_ok=True)
    writer = sqlite3.connect(store)
    writer.execute("pragma journal_mode = wal")
    writer.execute("pragma wal_autocheckpoint = 0")  # a busy store's WAL outlives many commits
    writer.execute("create table session_feedback (id integer primary key, note text)")
    writer.commit()
    resources = {"flywheel": resource_for(lake)}
    cursor = _tick(None, resources).cursor
    assert _tick(cursor, resources).run_requests == []
    before = store.stat()
    writer.execute("insert into session_feedback (note) values ('good')")
    writer.commit()
    assert (store.stat().st_size, store.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    changed = _tick(cursor, resources)
    assert [r.tags["flywheel/changed_sources"] for r in changed.run_requests] == ["session_ratings"]
    writer.close()


def test_sensor_cursor_stays_small_and_an_earlier_sensors_cursor_starts_no_run(lake):
    """The cursor is a digest per source, whatever the number of files; the cursor the earlier
    sensor kept (every file's size and mtime) stands for the same lake, so upgrading starts no run."""
    for day in range(1, 29):
        write_lines(lake.raw_dir / "interactions" / f"interactions_2026-02-{day:02d}_0000aaaa.jsonl",
                    [dumps(interaction(f"d{day}-{i}")) for i in range(3)])
    resources = {"flywheel": resource_for(lake)}
    cursor = _tick(None, resources).cursor
    assert json.loads(cursor)["sources"]["interactions"]["files"] == 29 and len(cursor) < 2000
    earlier = {}
    for spec in load_sources(None).values():
        for path, real in listing(spec, lake.raw_dir):
            stat = os.stat(real)
            earlier[f"{spec.name}:{path}"] = [stat.st_size, stat.st_mtime_ns]
    assert len(earlier) == 30
    # in no particular order: the earlier sensor's JSON kept it sorted, a cursor need not be
    assert _tick(json.dumps(dict(reversed(list(earlier.items())))), resources).run_requests == []
    earlier[next(iter(earlier))][0] += 1  # one file's size differs: its source changed
    changed = _tick(json.dumps(earlier, sort_keys=True), resources)
    assert [r.tags["flywheel/changed_sources"] for r in changed.run_requests] == [next(iter(earlier)).split(":")[0]]


@pytest.mark.slow
def test_dg_check_defs_passes():
    env = {**os.environ, "DAGSTER_HOME": str(PROJECT / ".dagster_home"), "DAGSTER_DISABLE_TELEMETRY": "yes"}
    dg_bin = os.path.join(os.path.dirname(sys.executable), "dg")
    proc = subprocess.run([dg_bin, "check", "defs"], cwd=PROJECT, capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "All definitions loaded successfully" in proc.stdout + proc.stderr


def test_bad_settings_fail_an_asset_with_one_clean_message(lake, monkeypatch):
    monkeypatch.setenv("FLYWHEEL_EVAL_FRACTION", "2")
    defs, keys = ingest_and_staging_assets()
    asset = next(a for a in defs.assets if dg.AssetKey(["ingest", "interactions"]) in a.keys)
    result = dg.materialize([asset], resources={"flywheel": resource_for(lake)}, raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.step_failure_data.user_failure_data.description == (
        "bad settings: FLYWHEEL_EVAL_FRACTION='2' is not valid: use a number from 0 up to (not including) 1, "
        "e.g. FLYWHEEL_EVAL_FRACTION=0.05")
    assert not lake.state_dir.exists()


def test_an_asset_launched_before_what_it_reads_fails_saying_what_to_materialise(lake):
    # `dg launch --assets staging/interactions` on a new state: DuckDB's "Catalog Error: Table
    # with name ... does not exist!" was the step's and the run's whole error
    defs, keys = ingest_and_staging_assets()
    asset = next(a for a in defs.assets if dg.AssetKey(["staging", "interactions"]) in a.keys)
    result = dg.materialize([asset], resources={"flywheel": resource_for(lake)}, raise_on_error=False)
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    description = failure.step_failure_data.user_failure_data.description
    assert description.startswith("table ") and (
        "is not in the state database yet: an asset this one reads has not been materialised; materialise its "
        "upstream assets first, or the whole flywheel_job (`flywheel run`), which builds every asset in order "
        "(DuckDB: Catalog Error: Table with name ") in description

def test_a_bad_setting_is_named_once_in_the_runs_error_line(lake, monkeypatch):
    """Every ingest step fails alike on a bad setting: the run's error (ingest.runs.error, what
    status prints) said it once per step, nine times over."""
    from dagster_project.pipeline import step_failures

    monkeypatch.setenv("FLYWHEEL_EVAL_FRACTION", "2")
    defs, keys = ingest_and_staging_assets()
    ingest = [a for a in defs.assets if any(k.path[0] == "ingest" for k in a.keys)]
    result = dg.materialize(ingest, resources={"flywheel": resource_for(lake)}, raise_on_error=False)
    failures, _, line = step_failures(result.all_events)
    assert len(failures) == len(ingest) >= 4
    assert line == (f"bad settings: FLYWHEEL_EVAL_FRACTION='2' is not valid: use a number from 0 up to (not "
                    f"including) 1, e.g. FLYWHEEL_EVAL_FRACTION=0.05 ({len(failures)} steps: "
                    f"{', '.join([step for step, _ in failures][:3])}, …)")


def test_a_run_failed_by_a_bad_setting_is_recorded_in_the_lakes_ledger(lake, monkeypatch):
    """A Dagster run (the schedule, `dg launch`) failed by a value that cannot be read was in no
    ledger: its resource, and the failure sensor, read the same settings and gave up, so
    `flywheel status` went on showing the last success. The lake's state is found all the same."""
    import duckdb

    defs, keys = ingest_and_staging_assets()
    asset = next(a for a in defs.assets if dg.AssetKey(["ingest", "interactions"]) in a.keys)
    assert dg.materialize([asset], resources={"flywheel": resource_for(lake)}).success
    monkeypatch.setenv("FLYWHEEL_EVAL_FRACTION", "2")
    failed = dg.materialize([asset], resources={"flywheel": resource_for(lake)}, raise_on_error=False)
    assert not failed.success
    con = duckdb.connect(str(lake.state_db), read_only=True)
    [(status, error)] = con.execute("select status, error from ingest.runs where run_id = ?", [failed.run_id]).fetchall()
    con.close()
    assert status == "failed" and error.startswith("ingest__interactions: bad settings: FLYWHEEL_EVAL_FRACTION='2' is not"), error


def test_a_run_across_midnight_keeps_one_date(lake, monkeypatch):
    """Each step read "today" for itself: a run across midnight UTC applied retention as of one
    day in its ingest and built the marts (retention, signal decay) as of the next. A run's
    date is now read once, as it starts: by its resource, and by `flywheel run` for its steps."""
    from datetime import datetime, timedelta, timezone

    from dagster_project import settings as settings_module
    from dagster_project.pipeline import environment
    from dagster_project.settings import Settings

    clock = {"now": datetime(2026, 3, 1, 23, 59, 59, tzinfo=timezone.utc)}

    class Clock(datetime):
        @classmethod
        def now(cls, tz=None):
            return clock["now"]

    monkeypatch.setattr(settings_module, "datetime", Clock)

    @dg.asset
    def reads_the_date_twice(flywheel: FlywheelResource) -> dg.MaterializeResult:
        first = flywheel.settings().run_date
        clock["now"] += timedelta(seconds=2)  # midnight passes while the run goes on
        return dg.MaterializeResult(metadata={"dates": f"{first} {flywheel.settings().run_date}"})

    result = dg.materialize([reads_the_date_twice], resources={"flywheel": resource_for(lake)})
    [event] = result.get_asset_materialization_events()
    assert event.materialization.metadata["dates"].value == "2026-03-01 2026-03-01"
    assert resource_for(lake).settings().run_date.isoformat() == "2026-03-02"  # a new run: today again

    clock["now"] = datetime(2026, 3, 1, 23, 59, 59, tzinfo=timezone.utc)
    monkeypatch.delenv("FLYWHEEL_AS_OF", raising=False)
    with environment(Settings.from_env()):  # what `flywheel run` gives its steps
        clock["now"] += timedelta(seconds=2)
        assert Settings.from_env().run_date.isoformat() == "2026-03-01"


@pytest.mark.parametrize("where", ["inside the raw root", "a directory"])
def test_a_mistyped_warehouse_path_creates_nothing_there(lake, where):
    """A run's resource opened (and so created) the state database beside the warehouse before any
    step checked the setting: a path into the raw root put a `.flywheel` state, its lock and its
    run list in a producer's directory. Each step now fails naming it, having created nothing."""
    from dataclasses import replace

    target = lake.raw_dir / "feedback" / "warehouse.duckdb" if where == "inside the raw root" else lake.raw_dir.parent
    wrong = replace(lake, warehouse=target)
    before = sorted(p for p in lake.raw_dir.parent.rglob("*"))
    defs = load_definitions()
    picked = [a for a in defs.assets if {dg.AssetKey(["ingest", "interactions"]), dg.AssetKey(["staging", "feedback"])}
              & set(a.keys)]
    result = dg.materialize(picked, resources={"flywheel": resource_for(wrong)}, raise_on_error=False)
    failures = [e.step_failure_data.user_failure_data.description for e in result.all_events
                if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert len(failures) == 2 and all(f.startswith(f"bad settings: FLYWHEEL_WAREHOUSE={target} ") for f in failures)
    assert sorted(p for p in lake.raw_dir.parent.rglob("*")) == before
    assert not wrong.state_dir.exists()  # (a directory: beside it, outside what rglob compares)


def test_a_missing_raw_root_fails_the_ingest_step_and_marks_no_file_missing(lake, tmp_path):
    from dataclasses import replace

    import duckdb

    defs, keys = ingest_and_staging_assets()
    asset = next(a for a in defs.assets if dg.AssetKey(["ingest", "interactions"]) in a.keys)
    assert dg.materialize([asset], resources={"flywheel": resource_for(lake)}).success
    gone = replace(lake, raw_dir=tmp_path / "unmounted")
    result = dg.materialize([asset], resources={"flywheel": resource_for(gone)}, raise_on_error=False)
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.step_failure_data.user_failure_data.description.startswith(
        f"bad settings: FLYWHEEL_RAW_DIR={tmp_path / 'unmounted'} does not exist")
    con = duckdb.connect(str(lake.state_db), read_only=True)
    assert con.execute("select count(*), count(*) filter (where status = 'missing') from ingest.files").fetchall() == [
        (1, 0)]


def test_each_check_is_declared_on_the_asset_that_builds_its_table_and_runs_in_its_step():
    from dagster_project.expectations import SUITES

    defs = load_definitions()
    graph = defs.resolve_asset_graph()
    job = defs.resolve_job_def("flywheel_job")
    checks = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    built = {".".join(k.path) for k in graph.get_all_asset_keys()}
    assert checks == ({(t.replace(".", "/"), "great_expectations") for t in SUITES if t in built}
                      | {(k.to_user_string(), "accounting_balances") for k in graph.get_all_asset_keys()
                         if k.path[0] == "ingest"})
    # one step per asset or multi-asset, none per check (each cost ~40 ms even when reused)
    assert len(job.graph.nodes) == len({graph.get(k).assets_def for k in graph.get_all_asset_keys()}) == 26
    for key in graph.asset_check_keys:
        assets_def = graph.get(key.asset_key).assets_def  # the asset that builds the table runs its check
        assert assets_def.get_spec_for_check_key(key).blocking == (key.name == "great_expectations")


LABELS = [dg.AssetKey(["marts", "interaction_labels"]), dg.AssetKey(["marts", "orphan_feedback"])]


def through_labels(lake) -> dg.ExecuteInProcessResult:
    """Ingest, staging and the labels of ``lake`` (a failure is returned, not raised)."""
    defs, keys = ingest_and_staging_assets()
    return dg.materialize(list(defs.assets), resources={"flywheel": resource_for(lake)},
                          selection=dg.AssetSelection.assets(*keys, *LABELS), raise_on_error=False)


def gx_evaluations(result) -> dict:
    return {e.asset_key.to_user_string(): e for e in result.get_asset_check_evaluations()
            if e.check_name == "great_expectations"}


def test_the_labels_leave_out_sidecar_events_beyond_the_instant_staging_feedback_is_current_as_of(lake):
    """The labels' cutoff is staging.feedback's drop time + 1 day, also when a run reuses that
    table: taking the labels step's own clock then, an event crossing the cutoff in the seconds
    between the two steps set a label while staging.feedback still excluded it."""
    from datetime import timedelta

    import duckdb

    from transforms.delta import WATERMARKS as BUILDS
    from transforms.staging import WATERMARKS

    def cutoffs():
        con = duckdb.connect(str(lake.state_db), read_only=True)
        try:
            (drop_now,) = con.execute(f"select drop_now from {WATERMARKS} where table_name = 'staging.feedback'"
                                      ).fetchone()
            (state,) = con.execute(f"select state from {BUILDS} where builder = 'labels'").fetchone()
            return drop_now, datetime.fromisoformat(json.loads(state)["cutoff"])
        finally:
            con.close()

    # a thumbs stamped 2099: excluded by staging.feedback, left out of the labels
    write_lines(lake.raw_dir / "feedback" / "2099-01-01_feedback.jsonl", [dumps(
        {"record_id": interaction(1)["id"], "feedback": "negative", "timestamp": "2099-01-01T00:00:00"})])
    assert through_labels(lake).success
    built, cutoff = cutoffs()
    assert cutoff == built + timedelta(days=1)
    # a new interaction: the labels build again, staging.feedback is reused
    write_lines(lake.raw_dir / "interactions" / "interactions_2026-02-27_5b0c2f7e.jsonl",
                [dumps(interaction(9))], mode="ab")
    result = through_labels(lake)
    assert result.success
    assert result.asset_materializations_for_node("staging__feedback")[0].metadata["reused"].value is True
    reused, cutoff = cutoffs()
    assert reused > built and cutoff == reused + timedelta(days=1)
    con = duckdb.connect(str(lake.state_db), read_only=True)
    assert con.execute("select n_events from marts.interaction_labels where interaction_id = ?",
                       [interaction(1)["id"]]).fetchall() == [(1,)]  # its inline one: the 2099 one left out
    con.close()


def test_a_failed_warn_expectation_is_a_warning_that_blocks_nothing(lake):
    """A negative latency fails a warn expectation: the check said passed, so the UI showed
    nothing; it is a WARN check result now, and the step and everything downstream still run."""
    write_lines(lake.raw_dir / "interactions" / "interactions_2026-02-27_5b0c2f7e.jsonl",
                [dumps(interaction(9, latency_ms=-2.0))], mode="ab")
    result = through_labels(lake)
    assert result.success
    evaluations = gx_evaluations(result)
    warning = evaluations["staging/interactions"]
    assert not warning.passed and warning.severity == dg.AssetCheckSeverity.WARN
    assert warning.description.startswith("staging.interactions: published, with warnings")
    assert "latency_ms ≥ 0" in warning.description
    assert evaluations["staging/feedback"].passed
    assert {dg.AssetKey(["staging", "interactions"]), *LABELS} <= {
        e.asset_key for e in result.get_asset_materialization_events()}


def test_a_failing_check_fails_the_step_that_built_its_table_and_nothing_downstream_runs(lake):
    import duckdb

    from dagster_project import versions

    assert through_labels(lake).success
    con = duckdb.connect(str(lake.state_db))
    con.execute("update raw.interactions set tokens_used = -5 where id = ?", [interaction(1)["id"]])
    versions.bump(con, "raw.interactions", None, reset=True)  # rewritten in place: staging rebuilds
    con.close()
    result = through_labels(lake)
    assert not result.success
    failed = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert [e.step_key for e in failed] == ["staging__interactions"]
    evaluations = gx_evaluations(result)
    failure = evaluations["staging/interactions"]
    assert not failure.passed and failure.severity == dg.AssetCheckSeverity.ERROR
    assert failure.description.startswith("staging.interactions: nothing of this run is published")
    assert "tokens_used ≥ 0" in failure.description
    assert evaluations["staging/feedback"].passed  # the other steps still report their checks
    # the table was built (and its validation recorded), but nothing that reads it ran
    assert result.asset_materializations_for_node("staging__interactions")
    started = {e.step_key for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_START}
    assert {"staging__interactions", "staging__feedback"} <= started and "interaction_labels" not in started
    assert not {e.asset_key for e in result.get_asset_materialization_events()} & set(LABELS)


def test_only_a_run_of_the_whole_job_with_every_table_validated_publishes(lake):
    """The ``snapshot`` asset materialised with part of the job (the UI's "Materialize selected",
    ``dg launch --assets``) published this run's new staging rows beside marts and exports built
    without them; materialised alone after a failed run, it published the rows a blocking check
    had refused. Neither publishes now, and the current snapshot stays."""
    import duckdb

    from dagster_project import versions
    from dagster_project.publishing import PublishError, current_version, gate_state

    defs = load_definitions()
    every = list(defs.assets)
    run = lambda *keys: dg.materialize(every, resources={"flywheel": resource_for(lake)}, raise_on_error=False,  # noqa: E731
                                       selection=dg.AssetSelection.assets(*keys) if keys else None)
    assert run().success
    published = current_version(lake.export_dir)

    def refused(result, why: str) -> None:
        assert not result.success
        [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
        assert failure.step_key == "snapshot" and why in failure.step_failure_data.user_failure_data.description
        assert current_version(lake.export_dir) == published

    write_lines(lake.raw_dir / "interactions" / "interactions_2026-02-27_00000000.jsonl", [dumps(interaction(7))])
    part = [dg.AssetKey(["ingest", "interactions"]), dg.AssetKey(["staging", "interactions"]), dg.AssetKey("snapshot")]
    refused(run(*part), "this run materialised part of the job (")

    con = duckdb.connect(str(lake.state_db))
    con.execute("update raw.interactions set tokens_used = -5 where id = ?", [interaction(1)["id"]])
    versions.bump(con, "raw.interactions", None, reset=True)  # rewritten in place: staging rebuilds
    con.close()
    assert not run().success  # staging.interactions fails its blocking check: its rows stay in the state
    refused(run(dg.AssetKey("snapshot")), "this run materialised part of the job (")
    con = duckdb.connect(str(lake.state_db))
    with pytest.raises(PublishError, match=r"^staging\.interactions: failed their last validation \("):
        gate_state(con)  # what a re-execution of only the snapshot step, after a whole run, meets
    con.close()


def test_a_run_dagster_starts_records_its_outcome_whatever_it_materialises(lake):
    """Runs of part of the job never reached the snapshot step, which finishes a run's row: they
    stayed "running" in ``ingest.runs``; and a failure was recorded only by the failure sensor,
    which never sees a ``dg launch`` run (in-process) and recorded Dagster's "1 blocking asset
    check failed". The run's resource records the outcome at its teardown."""
    import duckdb

    from dagster_project import versions
    from dagster_project.state import recent_runs

    defs = load_definitions()
    run = lambda *keys: dg.materialize(list(defs.assets), resources={"flywheel": resource_for(lake)},  # noqa: E731
                                       raise_on_error=False, selection=dg.AssetSelection.assets(*keys))
    staging = [dg.AssetKey(["ingest", "interactions"]), dg.AssetKey(["staging", "interactions"])]
    done = run(*staging)
    assert done.success
    con = duckdb.connect(str(lake.state_db))
    con.execute("update raw.interactions set tokens_used = -5 where id = ?", [interaction(1)["id"]])
    versions.bump(con, "raw.interactions", None, reset=True)  # rewritten in place: staging rebuilds
    con.close()
    failed = run(*staging)
    assert not failed.success
    con = duckdb.connect(str(lake.state_db), read_only=True)
    rows = dict(con.execute("select run_id, status || ': ' || coalesce(error, '') from ingest.runs").fetchall())
    con.close()
    assert rows[done.run_id] == "success: "
    assert rows[failed.run_id].startswith("failed: staging__interactions: staging.interactions: ✗ ")
    assert "tokens_used" in rows[failed.run_id]
    assert [r["run_id"] for r in recent_runs(lake)] == [failed.run_id, done.run_id]


def test_a_run_recorded_in_a_sqlite_instance_keeps_every_event_and_leaves_no_write_ahead_log(lake, tmp_path,
                                                                                             monkeypatch):
    from dagster_project.pipeline import instance, run_pipeline

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("FLYWHEEL_DAGSTER_EPHEMERAL", "0")
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    with instance():  # the history's files exist before the run (their one-time set-up is not counted)
        pass
    opened: list[str] = []  # the SQLite file of each connection opened during the run

    def count(dbapi_connection, _record) -> None:
        opened.append(os.path.basename(dbapi_connection.execute("pragma database_list").fetchone()[2]))

    event.listen(Engine, "connect", count)
    try:
        result = run_pipeline(lake, selection=["ingest/interactions", "staging/interactions"])
    finally:
        event.remove(Engine, "connect", count)
    assert result.success, result.failures
    # The run's events (two steps, on two threads) went through one connection to its own file
    # and one to the index, plus one for each table name Dagster asked the index about; Dagster
    # alone opened a new engine and connection for each event (and each question).
    with instance() as dagster:
        assert len([r for r in dagster.all_logs(result.run_id) if r.dagster_event]) > 20
    assert opened.count(f"{result.run_id}.db") == 1 and opened.count("index.db") <= 3, opened
    with instance() as dagster:
        events = [r.dagster_event for r in dagster.all_logs(result.run_id) if r.dagster_event]
        assert sorted(e.step_key for e in events if e.event_type_value == "STEP_SUCCESS") == [
            "ingest__interactions", "staging__interactions"]
        assert {(e.asset_check_evaluation_data.asset_key.to_user_string(), e.asset_check_evaluation_data.passed)
                for e in events if e.event_type_value == "ASSET_CHECK_EVALUATION"} == {
            ("ingest/interactions", True), ("staging/interactions", True)}
        # the cross-run index (what the UI reads) has them too
        latest = dagster.get_latest_materialization_event(dg.AssetKey(["staging", "interactions"]))
        assert latest is not None and latest.run_id == result.run_id
    # the event-log files were held open for the run, then checkpointed and closed
    assert (home / "history" / "runs" / f"{result.run_id}.db").is_file()
    assert not list(home.rglob("*-wal"))


def test_the_event_log_is_held_open_during_a_run_so_no_event_checkpoints_it(tmp_path):
    from dagster_project.pipeline import event_log_held_open

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    index_wal = home / "history" / "runs" / "index.db-wal"
    with dg.DagsterInstance.from_config(str(home)) as dagster:
        dagster.report_runless_asset_event(dg.AssetMaterialization("a"))
        assert not index_wal.exists()  # Dagster alone: each event's connection checkpoints and deletes it
        with event_log_held_open(dagster, "00000000-0000-4000-8000-000000000001"):
            dagster.report_runless_asset_event(dg.AssetMaterialization("a"))
            assert index_wal.stat().st_size > 0  # appended to, not checkpointed
        assert not index_wal.exists()
        assert len(dagster.fetch_materializations(dg.AssetKey("a"), limit=10).records) == 2
        # and only while held do its connections commit without a sync (a power cut may lose the
        # run's last events, never corrupt them)
        from sqlalchemy import create_engine, text

        def synchronous() -> int:
            engine = create_engine(f"sqlite:///{index_wal.parent / 'index.db'}")
            with engine.connect() as conn:
                value = conn.execute(text("pragma synchronous")).scalar()
            engine.dispose()
            return value

        with event_log_held_open(dagster, "00000000-0000-4000-8000-000000000002"):
            assert synchronous() == 1  # NORMAL
        assert synchronous() == 2  # FULL, SQLite's default
        # the storage is Dagster's own again after the run, also after a failure in it
        storage = dagster.event_log_storage
        with pytest.raises(RuntimeError), event_log_held_open(dagster, "00000000-0000-4000-8000-000000000003"):
            assert "_connect" in vars(storage)  # the run's: one connection per file
            raise RuntimeError("a step failed")
        assert "_connect" not in vars(storage) and "has_table" not in vars(storage)
        assert len(dagster.fetch_materializations(dg.AssetKey("a"), limit=10).records) == 2


def test_one_table_of_a_group_materialises_alone(lake):
    """`dg launch --assets marts/retrieval_summary` (the UI's Materialize on one asset) failed in
    Dagster's "does not support subsetting" traceback: a group's tables come from one build. The
    group is built and validated whole; the run reports the table and check selected."""
    from dagster_project.pipeline import run_pipeline

    assert run_pipeline(lake).success  # the upstream tables
    defs = load_definitions()
    summary = dg.AssetKey(["marts", "retrieval_summary"])
    selected = dg.AssetSelection.assets(summary)
    group = [a for a in defs.assets if summary in a.keys]
    result = dg.materialize(group, selection=selected, resources={"flywheel": resource_for(lake)})
    assert result.success
    assert [e.asset_key for e in result.get_asset_materialization_events()] == [summary]
    assert [e.asset_key for e in result.get_asset_check_evaluations()] == [summary]  # with its check
    alone = dg.materialize(group, selection=selected.without_checks(), resources={"flywheel": resource_for(lake)})
    assert alone.success and alone.get_asset_check_evaluations() == []
