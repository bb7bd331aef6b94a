"""Run-history retention (``dagster_project.history``): real SQLite Dagster instances on tmp_path,
real runs (a one-asset job materialized, and the pipeline itself)."""

from __future__ import annotations

import os

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import DagsterRun

from conftest import dumps, interaction, write_lines
from dagster_project import history
from dagster_project.history import prune_runs
from dagster_project.state import WRITER_TAGS


@dg.asset(check_specs=[dg.AssetCheckSpec("ok", asset="tiny")])
def tiny():
    return dg.MaterializeResult(check_results=[dg.AssetCheckResult(passed=True)])


def check_rows(home) -> dict[str, int]:
    """Asset check evaluations per run in the instance's index."""
    import sqlite3

    con = sqlite3.connect(home / "history" / "runs" / "index.db")
    try:
        return dict(con.execute("select run_id, count(*) from asset_check_executions group by run_id").fetchall())
    finally:
        con.close()


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return home


def runs_in(dagster: dg.DagsterInstance, n: int, tags=WRITER_TAGS) -> list[str]:
    """``n`` real finished runs, oldest first."""
    return [dg.materialize([tiny], instance=dagster, tags=tags).run_id for _ in range(n)]


def shard(home, run_id: str):
    return home / "history" / "runs" / f"{run_id}.db"


def test_the_newest_finished_runs_are_kept_and_the_others_deleted_with_their_files(home):
    with dg.DagsterInstance.from_config(str(home)) as dagster:
        other = runs_in(dagster, 1, tags={"team": "someone else"})[0]  # another job sharing the instance
        # the oldest run, which failed a moment ago: the failure sensor has yet to record its error
        failed = "00000000-0000-4000-8000-00000000f00d"
        dagster.add_run(DagsterRun(job_name="flywheel_job", run_id=failed, status=dg.DagsterRunStatus.FAILURE,
                                   tags=WRITER_TAGS))
        ours = runs_in(dagster, 5)
        running = "00000000-0000-4000-8000-00000000beef"
        dagster.add_run(DagsterRun(job_name="flywheel_job", run_id=running, status=dg.DagsterRunStatus.STARTED,
                                   tags=WRITER_TAGS))
        assert all(shard(home, r).is_file() for r in ours)

        pruned = prune_runs(dagster, keep=2)

        assert pruned.runs == 3 and pruned.bytes >= 3 * 4096
        assert set(check_rows(home)) == {other, *ours[3:]}  # the deleted runs' check evaluations went too
        assert set(dagster.get_run_ids()) == {other, running, failed, *ours[3:]}
        for run_id in ours[:3]:
            assert not shard(home, run_id).exists() and not list(home.rglob(f"{run_id}*"))
            assert not dagster.all_logs(run_id)
        for run_id in ours[3:]:  # the kept runs read as before
            assert shard(home, run_id).is_file()
            assert dagster.get_run_by_id(run_id).is_success
            assert any(r.dagster_event and r.dagster_event.is_step_materialization for r in dagster.all_logs(run_id))
        latest = dagster.get_latest_materialization_event(dg.AssetKey("tiny"))
        assert latest is not None and latest.run_id == ours[-1]
        assert prune_runs(dagster, keep=2) == history.Pruned(0, 0)  # nothing more to delete


def test_keep_zero_keeps_every_run(home):
    with dg.DagsterInstance.from_config(str(home)) as dagster:
        ours = runs_in(dagster, 3)
        assert prune_runs(dagster, keep=0) == history.Pruned(0, 0)
        assert set(dagster.get_run_ids()) == set(ours)


def test_a_long_backlog_goes_oldest_first_a_batch_per_call(home, monkeypatch):
    monkeypatch.setattr(history, "MAX_PER_CALL", 2)
    with dg.DagsterInstance.from_config(str(home)) as dagster:
        ours = runs_in(dagster, 6)
        assert prune_runs(dagster, keep=1).runs == 2
        assert set(dagster.get_run_ids()) == set(ours[2:])  # the two oldest went first
        assert prune_runs(dagster, keep=1).runs == 2
        assert prune_runs(dagster, keep=1).runs == 1
        assert dagster.get_run_ids() == [ours[-1]]


def test_the_sensor_prunes_after_a_successful_run(home, settings, monkeypatch):
    from dagster_project.defs.automation import prune_history
    from dagster_project.resources import FlywheelResource

    monkeypatch.setenv("FLYWHEEL_KEEP_RUNS", "2")
    with dg.DagsterInstance.from_config(str(home)) as dagster:
        ours = runs_in(dagster, 4)
        success = dagster.all_logs(ours[-1], of_type=dg.DagsterEventType.RUN_SUCCESS)[0].dagster_event
        with dg.build_run_status_sensor_context(
            sensor_name="flywheel_prune_history", dagster_instance=dagster,
            dagster_run=dagster.get_run_by_id(ours[-1]), dagster_event=success,
            resources={"flywheel": FlywheelResource(raw_dir=str(settings.raw_dir), warehouse=str(settings.warehouse),
                                                    export_dir=str(settings.export_dir))}) as context:
            prune_history(context)
        assert set(dagster.get_run_ids()) == set(ours[2:])


def test_a_run_launched_in_process_prunes_the_history_itself(home, settings, monkeypatch):
    """`dg launch` (from cron, no daemon) runs in-process, where the prune sensor never sees it:
    Dagster's history grew by every such run for good. Its resource prunes as the run ends."""
    from dagster_project.definitions import load_definitions
    from dagster_project.resources import FlywheelResource

    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl",
                [dumps(interaction(i)) for i in range(3)])
    monkeypatch.setenv("FLYWHEEL_KEEP_RUNS", "1")
    asset = next(a for a in load_definitions().assets if dg.AssetKey(["ingest", "interactions"]) in a.keys)
    with dg.DagsterInstance.from_config(str(home)) as dagster:
        earlier = runs_in(dagster, 3)
        launched = dg.materialize([asset], instance=dagster, resources={"flywheel": FlywheelResource(
            raw_dir=str(settings.raw_dir), warehouse=str(settings.warehouse), export_dir=str(settings.export_dir))})
        assert launched.success
        assert set(dagster.get_run_ids()) == {earlier[-1], launched.run_id}


def test_the_failure_sensor_records_a_run_whose_process_is_gone_as_killed(home, settings, monkeypatch):
    """A daemon run whose worker was killed (-9) is failed by Dagster's run monitor before the
    dead-runs sweep sees it: the failure sensor recorded Dagster's words, "This run has been
    marked as failed from outside the execution context", where the sweep says what happened."""
    import duckdb

    from dagster_project.defs.automation import mark_failed_runs
    from dagster_project.engine import ensure_schema
    from dagster_project.history import HOLDER_RUN_TAG, HOLDER_TAG, host
    from dagster_project.resources import FlywheelResource
    from dagster_project.state import state_connection

    with state_connection(settings) as con:  # a lake that has run
        ensure_schema(con)
    run_id = "00000000-0000-4000-8000-0000000dead1"
    process = f"{host()}:{os.getpid()}@1"  # this pid, another start: the process that had it is gone
    with dg.DagsterInstance.from_config(str(home)) as dagster:
        dagster.add_run(DagsterRun(job_name="flywheel_job", run_id=run_id, status=dg.DagsterRunStatus.STARTED,
                                   tags={**WRITER_TAGS, HOLDER_TAG: process, HOLDER_RUN_TAG: run_id}))
        dagster.report_run_failed(dagster.get_run_by_id(run_id),
                                  "This run has been marked as failed from outside the execution context")
        [failure] = dagster.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        with dg.build_run_status_sensor_context(
            sensor_name="flywheel_mark_failed_runs", dagster_instance=dagster,
            dagster_run=dagster.get_run_by_id(run_id), dagster_event=failure.dagster_event,
            resources={"flywheel": FlywheelResource(raw_dir=str(settings.raw_dir), warehouse=str(settings.warehouse),
                                                    export_dir=str(settings.export_dir))}) as context:
            mark_failed_runs(context.for_run_failure())
    con = duckdb.connect(str(settings.state_db), read_only=True)
    assert con.execute("select status, error from ingest.runs where run_id = ?", [run_id]).fetchall() == [
        ("failed", f"killed while it ran (its process {host()}:{os.getpid()} is gone)")]
    con.close()


@pytest.mark.slow
def test_flywheel_run_deletes_the_history_beyond_keep_runs_after_each_run(settings, home, monkeypatch):
    from dataclasses import replace

    from dagster_project.pipeline import instance, run_pipeline

    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl",
                [dumps(interaction(i)) for i in range(3)])
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("FLYWHEEL_DAGSTER_EPHEMERAL", "0")
    keep_one = replace(settings, keep_runs=1)
    first = run_pipeline(keep_one, selection=["ingest/interactions"])
    assert first.success and first.pruned == history.Pruned(0, 0)
    second = run_pipeline(keep_one, selection=["ingest/interactions"])
    assert second.success and second.pruned.runs == 1 and second.prune_error is None
    with instance() as dagster:
        assert dagster.get_run_ids() == [second.run_id]
    assert not shard(home, first.run_id).exists() and shard(home, second.run_id).is_file()
    third = run_pipeline(replace(settings, keep_runs=0), selection=["ingest/interactions"])
    assert third.pruned == history.Pruned(0, 0)
    with instance() as dagster:
        assert set(dagster.get_run_ids()) == {second.run_id, third.run_id}


@pytest.mark.slow
def test_a_run_killed_while_it_ran_is_failed_by_the_next_run_to_hold_the_writer_lock(settings, home, monkeypatch):
    """``kill -9`` (the OOM killer, a reboot) left the run STARTED in Dagster for good: the
    one-run-at-a-time limit then queued every scheduled and sensor run behind it, silently, and
    ``ingest.runs`` showed it running. The next run to hold the writer lock fails it in both."""
    import os
    import subprocess
    import sys

    import duckdb

    from dagster_project.pipeline import instance, run_pipeline
    from dagster_project.publishing.snapshot import FAULT_ENV, current_version

    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl",
                [dumps(interaction(i)) for i in range(3)])
    env = {**os.environ, "DAGSTER_HOME": str(home), "FLYWHEEL_DAGSTER_EPHEMERAL": "0", FAULT_ENV: "kill:hashed",
           "FLYWHEEL_RAW_DIR": str(settings.raw_dir), "FLYWHEEL_WAREHOUSE": str(settings.warehouse),
           "FLYWHEEL_EXPORT_DIR": str(settings.export_dir)}
    killed = subprocess.run([sys.executable, "-m", "dagster_project.cli", "run", "--quiet"], env=env,
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr
    with dg.DagsterInstance.from_config(str(home)) as dagster:
        [dead] = dagster.get_runs(filters=dg.RunsFilter(tags=WRITER_TAGS))
        assert dead.status == dg.DagsterRunStatus.STARTED and history.HOLDER_TAG in dead.tags

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("FLYWHEEL_DAGSTER_EPHEMERAL", "0")
    assert run_pipeline(settings).success
    with instance() as dagster:
        assert dagster.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert not dagster.get_runs(filters=dg.RunsFilter(tags=WRITER_TAGS, statuses=history.IN_PROGRESS))
        [failure] = dagster.all_logs(dead.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert "is gone: killed while it ran" in failure.dagster_event.message
    con = duckdb.connect(str(settings.state_db), read_only=True)
    assert con.execute("select status, error from ingest.runs where run_id = ?", [dead.run_id]).fetchone() == (
        "failed", f"killed while it ran (its process {history.shown(dead.tags[history.HOLDER_TAG])} is gone)")
    con.close()

    # killed right after its commit: its snapshot is current, and its error says so ("failed"
    # alone read as nothing published)
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-27_5b0c2f7e.jsonl", [dumps(interaction(9))])
    env.update({FAULT_ENV: "kill:committed", "FLYWHEEL_SESSION_RETENTION_DAYS": "3650"})  # (as ``settings``)
    killed = subprocess.run([sys.executable, "-m", "dagster_project.cli", "run", "--quiet"], env=env,
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr
    current = current_version(settings.export_dir)
    assert run_pipeline(settings).success
    con = duckdb.connect(str(settings.state_db), read_only=True)
    (error,) = con.execute("select error from ingest.runs where snapshot = ? and status = 'failed'", [current]).fetchone()
    con.close()
    assert error.endswith(f"is gone); its snapshot {current} had been published whole and stays"), error


@pytest.mark.slow
def test_a_first_publish_killed_after_its_manifest_is_kept_as_it_cannot_be_told_from_a_committed_one(
        settings, home, monkeypatch):
    """Killed between writing its manifest and its ``current`` link, the lake's first publish left a
    whole snapshot that no run committed. With no ``current`` it looks like a committed snapshot
    whose link was removed: deleting it could delete one that was published. It is kept (retention
    prunes it in time), complete, and its run's row still names it (it said "not published" while
    the snapshot stayed listed)."""
    import subprocess
    import sys

    import duckdb

    from dagster_project.pipeline import run_pipeline
    from dagster_project.publishing import verify_snapshot
    from dagster_project.publishing.snapshot import FAULT_ENV, current_version, snapshots_dir

    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl",
                [dumps(interaction(i)) for i in range(3)])
    env = {**os.environ, "DAGSTER_HOME": str(home), "FLYWHEEL_DAGSTER_EPHEMERAL": "0",
           FAULT_ENV: "kill:manifest_written", "FLYWHEEL_RAW_DIR": str(settings.raw_dir),
           "FLYWHEEL_WAREHOUSE": str(settings.warehouse), "FLYWHEEL_EXPORT_DIR": str(settings.export_dir)}
    killed = subprocess.run([sys.executable, "-m", "dagster_project.cli", "run", "--quiet"], env=env,
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr
    [left] = [p.name for p in snapshots_dir(settings.export_dir).iterdir() if not p.name.startswith(".")]
    assert current_version(settings.export_dir) is None

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("FLYWHEEL_DAGSTER_EPHEMERAL", "0")
    for _ in range(2):
        assert run_pipeline(settings).success
    kept = sorted(p.name for p in snapshots_dir(settings.export_dir).iterdir() if not p.name.startswith("."))
    assert kept == [left, current_version(settings.export_dir)]
    verify_snapshot(settings.export_dir, left)
    con = duckdb.connect(str(settings.state_db), read_only=True)
    assert con.execute("select status, snapshot, snapshot_status from ingest.runs where snapshot = ?",
                       [left]).fetchall() == [("failed", left, "published")]
    (error,) = con.execute("select error from ingest.runs where snapshot = ?", [left]).fetchone()
    assert error.endswith(f"is gone); its snapshot {left} was written whole and is kept (with no current snapshot, "
                          "whether it was committed cannot be told)"), error
    con.close()


def test_a_run_killed_before_its_dagster_run_existed_is_failed_by_the_next(settings):
    """`flywheel run` writes its ingest.runs row, then loads the Dagster instance (~1 s) and creates
    the run the dead-runs sweep goes by: killed in between, it stayed "running" in ingest.runs,
    `flywheel status` and the published run log for good. Its process is noted with the row: the
    next run fails it when that process is gone, and leaves a live one alone."""
    import subprocess
    import sys

    import duckdb

    from conftest import PROJECT
    from dagster_project.pipeline import run_pipeline

    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl", [dumps(interaction(1))])
    started = ("import sys\n"
               "from dagster_project.pipeline import note_holder, prepare_state\n"
               "from dagster_project.settings import Settings\n"
               "from dagster_project.state import record_run, state_connection\n"
               f"settings = Settings.from_env({{'FLYWHEEL_RAW_DIR': {str(settings.raw_dir)!r}, "
               f"'FLYWHEEL_WAREHOUSE': {str(settings.warehouse)!r}, 'FLYWHEEL_EXPORT_DIR': {str(settings.export_dir)!r}}})\n"
               "with state_connection(settings) as con:\n"
               "    prepare_state(con, settings)\n"
               "    record_run(con, sys.argv[1], mode='incremental')\n"
               "    note_holder(con, sys.argv[1])\n"
               "print('noted', flush=True)\n"
               "if sys.argv[2] == 'stay':\n"
               "    sys.stdin.read()\n")
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    subprocess.run([sys.executable, "-c", started, "gone-run", "exit"], env=env, check=True, capture_output=True)
    alive = subprocess.Popen([sys.executable, "-c", started, "live-run", "stay"], env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert alive.stdout.readline().strip() == "noted"
        later = run_pipeline(settings)
        assert later.success, later.failures
        con = duckdb.connect(str(settings.state_db), read_only=True)
        rows = dict(con.execute("select run_id, status from ingest.runs").fetchall())
        (error,) = con.execute("select error from ingest.runs where run_id = 'gone-run'").fetchone()
        con.close()
    finally:
        alive.communicate("")
    assert rows == {"gone-run": "failed", "live-run": "running", later.run_id: "success"}
    assert error.startswith("killed while it ran (its process ") and error.endswith(" is gone)")


def test_a_noted_process_that_is_this_one_or_from_before_a_boot_is_gone_and_a_bad_pending_failure_is_kept(
        settings, capfd):
    """The next run notes its own process after looking: a note naming this process is a run of
    it that ended (pid reuse in a container where flywheel is always pid 1 left it "running"), as
    is one noted before the machine's last boot. A pending failure file that cannot be recorded
    (it failed every run's first step) is kept, with a warning, for the next run."""
    import duckdb

    from dagster_project.pipeline import PENDING_FAILURES, RUN_PROCESSES, _boot_id, dead_rows, prepare_state
    from dagster_project.state import record_run, state_connection

    host = history.holder().rpartition(":")[0]
    with state_connection(settings) as con:
        prepare_state(con, settings)
        # this process; pid 1 (alive) noted in another boot; pid 1 of another host (never gone)
        # and this process as a note written before processes were noted with their start
        for run_id, process, boot in (("mine", history.holder(), _boot_id()), ("rebooted", f"{host}:1", "another boot"),
                                      ("elsewhere", "another-host:1", "another boot"),
                                      ("older note", f"{host}:{os.getpid()}", _boot_id())):
            record_run(con, run_id, mode="incremental")
            con.execute(f"insert into {RUN_PROCESSES} values (?, ?, ?)", [run_id, process, boot])
    (settings.state_dir / PENDING_FAILURES).mkdir()
    bad = settings.state_dir / PENDING_FAILURES / "broken.json"
    bad.write_text("{not json")
    with state_connection(settings) as con:
        prepare_state(con, settings)  # records the dead ones
        assert dict(con.execute("select run_id, status from ingest.runs").fetchall()) == {
            "mine": "failed", "rebooted": "failed", "elsewhere": "running", "older note": "failed"}
        assert dead_rows(con) == []
    assert bad.exists() and f"warning: {bad}: a failed run's record could not be written" in capfd.readouterr().err


def test_a_run_of_part_of_the_job_is_recorded_as_succeeded_not_killed(settings):
    """No snapshot step records its outcome: its row stayed "running", and its process note made
    the next run record it "killed while it ran" (the bench's run through staging)."""
    import duckdb

    from dagster_project.pipeline import RUN_PROCESSES, run_pipeline

    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl", [dumps(interaction(1))])
    part = run_pipeline(settings, selection=["ingest/interactions", "staging/interactions"])
    whole = run_pipeline(settings)
    assert part.success and whole.success, whole.failures
    con = duckdb.connect(str(settings.state_db), read_only=True)
    assert dict(con.execute("select run_id, status from ingest.runs").fetchall()) == {
        part.run_id: "success", whole.run_id: "success"}
    assert con.execute(f"select count(*) from {RUN_PROCESSES}").fetchone() == (0,)
    con.close()


@pytest.mark.parametrize("by", ["a run", "the sensor"])
def test_the_runs_whose_writer_process_is_gone_are_failed_by_a_run_dagster_launches_or_the_sensor(settings, home, by):
    """The same from a run the daemon or `dg launch` starts (its resource takes the writer lock);
    and from the `flywheel_dead_runs` sensor: a scheduled or sensor run never starts while the
    dead one holds the one-run limit, so only the daemon frees the queue by itself. A run whose
    process lives, and a re-execution still carrying its parent's tags, are left alone."""
    import subprocess
    import sys

    import duckdb

    from dagster_project.definitions import load_definitions
    from dagster_project.resources import FlywheelResource

    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl", [dumps(interaction(1))])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    here = history.holder().rpartition(":")[0]
    killed, alive, copied = ("00000000-0000-4000-8000-0000000000de", "00000000-0000-4000-8000-00000000a11e",
                             "00000000-0000-4000-8000-00000000c0de")
    # its pid now another process's (a container or machine restarted): it started at another time
    reused, started = "00000000-0000-4000-8000-0000000000ed", history.process_start(os.getpid())
    resource = FlywheelResource(raw_dir=str(settings.raw_dir), warehouse=str(settings.warehouse),
                                export_dir=str(settings.export_dir))
    defs = load_definitions()
    with dg.DagsterInstance.from_config(str(home)) as dagster:
        assert dg.materialize(list(defs.assets), instance=dagster, selection=["ingest/interactions"],
                              resources={"flywheel": resource}).success  # the state exists
        for run_id, pid, tagged in ((killed, gone.pid, killed), (alive, f"{os.getpid()}@{started}", alive),
                                    (copied, gone.pid, killed), (reused, f"{os.getpid()}@{int(started) - 1}", reused)):
            dagster.add_run(DagsterRun(job_name="flywheel_job", run_id=run_id, status=dg.DagsterRunStatus.STARTED,
                                       tags={**WRITER_TAGS, history.HOLDER_TAG: f"{here}:{pid}",
                                             history.HOLDER_RUN_TAG: tagged}))
        if by == "a run":
            assert dg.materialize(list(defs.assets), instance=dagster, selection=["ingest/interactions"],
                                  resources={"flywheel": resource}).success
        else:
            sensor = defs.resolve_sensor_def("flywheel_dead_runs")
            with dg.build_sensor_context(instance=dagster, resources={"flywheel": resource}) as context:
                assert "failed 2 run(s) whose process is gone" in sensor(context).skip_message
        assert [dagster.get_run_by_id(r).status for r in (killed, alive, copied, reused)] == [
            dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTED,
            dg.DagsterRunStatus.FAILURE]
    if by == "the sensor":
        con = duckdb.connect(str(settings.state_db), read_only=True)
        assert con.execute("select status from ingest.runs where run_id = ?", [killed]).fetchone() == ("failed",)
        con.close()


def test_a_run_killed_while_it_waited_for_the_writer_lock_is_failed_by_the_next(settings, home):
    """A run `dg launch` or the daemon starts waits in its resource for the writer lock while
    another writer holds it. Killed there, it stayed STARTED for good and held the one-run limit:
    it was tagged with its process only once it held the lock, and only runs so tagged are swept."""
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    from dagster_project.definitions import load_definitions
    from dagster_project.resources import FlywheelResource
    from dagster_project.state import writer_lock

    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl", [dumps(interaction(1))])
    resource = dict(raw_dir=str(settings.raw_dir), warehouse=str(settings.warehouse),
                    export_dir=str(settings.export_dir))
    with writer_lock(settings):  # another writer (`flywheel run`, a forget) holds the lake
        waiting = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import dagster as dg
            from dagster_project.definitions import load_definitions
            from dagster_project.resources import FlywheelResource
            with dg.DagsterInstance.from_config({str(home)!r}) as dagster:
                dg.materialize(list(load_definitions().assets), instance=dagster, selection=["ingest/interactions"],
                               resources={{"flywheel": FlywheelResource(**{resource!r})}}, raise_on_error=False)
            """)], env={**os.environ, "FLYWHEEL_DAGSTER_EPHEMERAL": "0"})
        with dg.DagsterInstance.from_config(str(home)) as dagster:
            deadline = time.monotonic() + 120
            started = None  # the run, tagged with its process, waiting for the lock
            while started is None:
                assert time.monotonic() < deadline and waiting.poll() is None
                runs = [r for r in dagster.get_runs() if r.status == dg.DagsterRunStatus.STARTED]
                started = runs[0] if runs and history.HOLDER_TAG in runs[0].tags else None
                time.sleep(0.2)
        waiting.send_signal(signal.SIGKILL)
        waiting.wait()
    with dg.DagsterInstance.from_config(str(home)) as dagster:
        assert dagster.get_run_by_id(started.run_id).status == dg.DagsterRunStatus.STARTED
        assert dg.materialize(list(load_definitions().assets), instance=dagster, selection=["ingest/interactions"],
                              resources={"flywheel": FlywheelResource(**resource)}).success
        assert dagster.get_run_by_id(started.run_id).status == dg.DagsterRunStatus.FAILURE
