"""The run's steps on threads (dagster_project/executor.py) and what sharing a process asks of the
rest: the writer lock, the run's record, the state connection and the pseudonym key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import dagster as dg
import duckdb
import pytest

from conftest import dumps, interaction, write_lines
from dagster_project import executor
from dagster_project.executor import SOURCE_TAG, StepTimes
from dagster_project.pipeline import execute, prepare_state
from dagster_project.publishing.snapshot import read_manifest
from dagster_project.resources import FlywheelResource
from dagster_project.state import record_run, shared_state, state_connection, writer_lock
from transforms.pseudonyms import load_or_create_key

# --------------------------------------------------------------------------- a job of its own

SPANS: dict[str, tuple[float, float]] = {}  # step -> (start, end), written by the assets below
BARRIER: list[threading.Barrier] = []


def _span(name: str, seconds: float = 0.0, meet: bool = False) -> None:
    start = time.monotonic()
    if meet:  # passes only when the other step waits here at the same time
        BARRIER[0].wait()
    time.sleep(seconds)
    SPANS[name] = (start, time.monotonic())


@dg.asset
def left() -> None:
    _span("left", meet=True)


@dg.asset
def right() -> None:
    _span("right", meet=True)


@dg.asset(deps=[left, right])
def after() -> None:
    _span("after")


@dg.asset
def broken() -> None:
    raise RuntimeError("this step fails")


@dg.asset(deps=[broken])
def below_broken() -> None:
    _span("below_broken")


@dg.asset
def a_short() -> None:
    _span("a_short", 0.05)


@dg.asset
def b_short() -> None:
    _span("b_short", 0.05)


@dg.asset
def z_long() -> None:
    _span("z_long", 0.05)


@dg.asset(deps=[z_long])
def z_next() -> None:
    _span("z_next", 0.05)


def _timed(name: str, seconds: float = 0.0, deps=()) -> dg.AssetsDefinition:
    @dg.asset(name=name, deps=list(deps))
    def _step() -> None:
        _span(name, seconds)

    return _step


# two narrow roots (one step below each) and a wide one (two below): all paths two steps long
c_narrow, d_narrow, w_wide = (_timed(name, 0.2) for name in ("c_narrow", "d_narrow", "w_wide"))
c_next, d_next = _timed("c_next", deps=[c_narrow]), _timed("d_next", deps=[d_narrow])
w_next_1, w_next_2 = _timed("w_next_1", deps=[w_wide]), _timed("w_next_2", deps=[w_wide])


ATTEMPTS: list[int] = []


@dg.asset
def flaky(context) -> None:
    ATTEMPTS.append(context.retry_number)
    if context.retry_number == 0:
        raise dg.RetryRequested(max_retries=1)


@dg.asset(deps=[flaky])
def below_flaky() -> None:
    _span("below_flaky")


def job(*assets) -> dg.JobDefinition:
    return dg.Definitions(assets=list(assets), jobs=[dg.define_asset_job("test_job")]).resolve_job_def("test_job")


def run(job_def: dg.JobDefinition, threads: int, instance: dg.DagsterInstance | None = None):
    SPANS.clear()
    BARRIER[:] = [threading.Barrier(2, timeout=3)]
    return execute(job_def, threads, instance or dg.DagsterInstance.ephemeral(), str(uuid.uuid4()),
                   run_config={}, tags={})


def test_independent_steps_run_at_once_and_their_dependents_after():
    result = run(job(left, right, after), threads=2)
    assert result.success  # left and right met at the barrier: they ran at the same time
    assert SPANS["after"][0] >= max(SPANS["left"][1], SPANS["right"][1])


def test_one_thread_runs_one_step_at_a_time():
    result = run(job(a_short, b_short, z_long, z_next), threads=1)
    assert result.success
    spans = sorted(SPANS.values())
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))


def test_a_failed_step_skips_what_depends_on_it_and_the_other_branch_completes():
    result = run(job(broken, below_broken, a_short, b_short), threads=2)
    assert not result.success
    failed = {e.step_key for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE}
    succeeded = {e.step_key for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_SUCCESS}
    assert failed == {"broken"} and succeeded == {"a_short", "b_short"}
    assert "below_broken" not in SPANS


def test_a_step_that_asks_to_be_retried_runs_again_and_then_its_dependents():
    ATTEMPTS.clear()
    result = run(job(flaky, below_flaky), threads=2)
    assert result.success
    assert ATTEMPTS == [0, 1] and "below_flaky" in SPANS


def test_the_step_on_the_longest_path_starts_first_and_the_times_are_kept():
    instance = dg.DagsterInstance.ephemeral()
    # as the last runs left them: the z chain is slow, the short ones quick
    instance.run_storage.set_cursor_values({"flywheel/step_seconds/test_job": json.dumps(
        {"a_short": 0.1, "b_short": 0.1, "z_long": 2.0, "z_next": 2.0})})
    result = run(job(a_short, b_short, z_long, z_next), threads=2, instance=instance)
    assert result.success
    first = min(SPANS, key=lambda name: SPANS[name][0])
    assert first == "z_long"  # by name order it would be a_short
    kept = StepTimes(instance, "test_job").seconds
    # a weight is this run's time (the step's sleep and Dagster's overhead: ~0.05 s and more, a
    # second under load) or 0.9 of the one before, the more: never the long chain's
    slept = SPANS["a_short"][1] - SPANS["a_short"][0]
    assert kept["z_long"] == 1.8 and max(slept, 0.09) <= kept["a_short"] < 1.8


def test_before_any_times_the_step_more_steps_wait_on_starts_first():
    """Untimed, every path of two steps weighs the same: the root two steps wait on starts with
    the first thread, the narrow roots share the other (by name order: the two narrow ones)."""
    result = run(job(c_narrow, d_narrow, c_next, d_next, w_wide, w_next_1, w_next_2), threads=2)
    assert result.success
    first_end = min(SPANS[name][1] for name in ("c_narrow", "d_narrow", "w_wide"))
    started_first = {name for name in ("c_narrow", "d_narrow", "w_wide") if SPANS[name][0] < first_end}
    assert started_first == {"w_wide", "c_narrow"}


def _reading(name: str, source: str) -> dg.AssetsDefinition:
    """An ingest-like root step: it reads ``source`` (its op tag) through the flywheel resource."""
    @dg.asset(name=name, op_tags={SOURCE_TAG: source})
    def _step(flywheel: FlywheelResource) -> None:
        _span(name, 0.2)

    return _step


def _with_sources(settings) -> dg.JobDefinition:
    """A root reading interactions (a big file), and two roots reading small sources, each two
    steps above the end: counted in steps, the small ones' paths are the longer."""
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26.jsonl",
                [dumps(interaction(i)) for i in range(2000)])
    write_lines(settings.raw_dir / "feedback" / "x_feedback.jsonl", ["{}"])
    write_lines(settings.raw_dir / "signals" / "s.jsonl", ["{}"])
    assets = [_reading("big", "interactions"), _reading("small_a", "feedback"), _reading("small_b", "signals")]
    for root in ("small_a", "small_b"):
        assets += [_timed(f"{root}_1", deps=[root]), _timed(f"{root}_2", deps=[f"{root}_1"])]
    flywheel = FlywheelResource(raw_dir=str(settings.raw_dir), warehouse=str(settings.warehouse),
                                export_dir=str(settings.export_dir))
    return dg.Definitions(assets=assets, resources={"flywheel": flywheel},
                          jobs=[dg.define_asset_job("test_job")]).resolve_job_def("test_job")


def _started_first() -> set[str]:
    first_end = min(SPANS[name][1] for name in ("big", "small_a", "small_b"))
    return {name for name in ("big", "small_a", "small_b") if SPANS[name][0] < first_end}


def test_an_untimed_ingest_step_weighs_the_bytes_of_its_source(settings):
    """The other steps are timed (a source added to a lake that has run): the ingest steps weigh
    their bytes, ~1 MB of interactions more than the small sources' whole paths."""
    instance = dg.DagsterInstance.ephemeral()
    instance.run_storage.set_cursor_values({"flywheel/step_seconds/test_job": json.dumps(
        {f"{root}_{i}": 0.001 for root in ("small_a", "small_b") for i in (1, 2)})})
    assert run(_with_sources(settings), threads=2, instance=instance).success
    assert _started_first() == {"big", "small_a"}


def test_in_a_first_run_the_biggest_source_starts_first(settings, monkeypatch):
    """No step timed: the others weigh 1 each; at 10 kB a second the interactions' ~1 MB outweigh
    both small paths (as the 1M bench lake's 700 MB do at the real rate)."""
    monkeypatch.setattr(executor, "FIRST_BYTES_PER_SECOND", 1e4)
    assert run(_with_sources(settings), threads=2).success
    assert _started_first() == {"big", "small_a"}


# --------------------------------------------------------------------------- shared state


def test_the_writer_lock_is_held_until_the_last_thread_leaves(settings):
    lock_file = settings.state_dir / "writer.lock"
    probe = ("import fcntl, sys; f = open(sys.argv[1], 'a+')\n"
             "try: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "except OSError: sys.exit(3)")

    def other_process_can_lock() -> bool:
        code = subprocess.run([sys.executable, "-c", probe, str(lock_file)]).returncode
        assert code in (0, 3)
        return code == 0

    entered, release = threading.Event(), threading.Event()

    def second_holder():
        with writer_lock(settings):
            entered.set()
            release.wait(10)

    with ThreadPoolExecutor(1) as pool:
        with writer_lock(settings):
            held = pool.submit(second_holder)
            assert entered.wait(10)
        # the first holder left; the second still holds it
        assert not other_process_can_lock()
        release.set()
        held.result()
    assert other_process_can_lock()


def test_each_thread_gets_its_own_connection_to_the_one_state_database(settings):
    with shared_state(settings):
        with state_connection(settings) as main:
            main.execute("create table t as select 1 as x")
            main.execute("create temp table mine as select 'main' as who")

        def in_thread():
            with state_connection(settings) as con:
                assert con is not main
                con.execute("create temp table mine as select 'thread' as who")  # no clash: its own
                return con.execute("select (select x from t), (select who from mine)").fetchone()

        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(in_thread).result() == (1, "thread")
        with state_connection(settings) as again:
            assert again is main and again.execute("select who from mine").fetchone() == ("main",)


def test_side_cursors_of_a_step_are_interrupted_with_the_run_and_closed_after(settings):
    """The publisher's extra connections: the run's interrupt reaches their statements, and they
    are gone from the run's list once the step leaves them."""
    import os

    from dagster_project import state

    with shared_state(settings):
        with state_connection(settings) as con:
            con.execute("set TimeZone = 'America/New_York'")  # a side cursor prints times as con does
            with state.side_cursors(con, 1) as (side,):
                assert side is not con
                assert side.execute("select current_setting('TimeZone')").fetchone() == ("America/New_York",)
                with ThreadPoolExecutor(1) as pool:
                    running = pool.submit(side.execute, "select count(*) from range(100000000000) a(i) "
                                                        "where hash(i) = 0")
                    deadline = time.monotonic() + 60
                    while not running.done() and time.monotonic() < deadline:
                        state.interrupt_statements()  # dropped while the statement has not started
                        time.sleep(0.05)
                    with pytest.raises(duckdb.Error, match="(?i)interrupt"):
                        running.result(timeout=1)
            shared = state._shared[os.path.abspath(settings.state_db)]
            assert all(c is not side for c in shared.cursors)


def test_steps_recording_the_run_at_once_add_up(settings):
    """Each step adds its counts to the run's one row; at once, they must not conflict."""
    with shared_state(settings):
        with state_connection(settings) as con:
            prepare_state(con, settings)
            record_run(con, "r", mode="incremental")

        def step(source: str) -> None:
            with state_connection(settings) as con:
                for _ in range(40):
                    record_run(con, "r", mode="incremental", source=source, counts={"lines": 1, "loaded": 1})

        with ThreadPoolExecutor(2) as pool:
            for done in [pool.submit(step, s) for s in ("feedback", "outcomes")]:
                done.result()
        with state_connection(settings) as con:
            assert con.execute("select lines_read, rows_loaded, list_sort(sources) from ingest.runs").fetchone() \
                == (80, 80, ["feedback", "outcomes"])


def test_prepared_state_holds_every_shared_table_before_the_steps(settings):
    """Two steps creating one table at once conflict: prepare_state creates the shared ones, and a
    whole run afterwards creates no other table in the bookkeeping schemas than the per-step ones."""
    from dagster_project.pipeline import run_pipeline

    write_lines(settings.raw_dir / "interactions" / "2026-02-26.jsonl", [dumps(interaction(i)) for i in range(1, 6)])
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(settings.state_db))
    prepare_state(con, settings)
    listed = "select schema_name || '.' || table_name from duckdb_tables() where schema_name in ('ingest', 'lineage')"
    before = {r[0] for r in con.execute(listed).fetchall()}
    con.close()
    assert run_pipeline(replace(settings, pseudonym_key="k")).success
    con = duckdb.connect(str(settings.state_db), read_only=True)
    created = {r[0] for r in con.execute(listed).fetchall()} - before
    con.close()
    # each of these is written by one step only (its source's staging, the labels, the training sets)
    per_step = {t for t in created if t.startswith("lineage.staging_excluded_")
                or t in ("lineage.label_builds", "lineage.label_changes", "lineage.label_inputs",
                         "lineage.prompt_keys", "lineage.training_weighted_inputs")}
    assert created == per_step, created - per_step


def test_threads_racing_for_the_pseudonym_key_get_one_key(tmp_path):
    path = tmp_path / "state" / "pseudonym.key"
    start = threading.Barrier(8)

    def get():
        start.wait()
        return load_or_create_key(None, path)

    with ThreadPoolExecutor(8) as pool:
        got = [f.result() for f in [pool.submit(get) for _ in range(8)]]
    assert len({key for key, _ in got}) == 1
    assert sum(created for _, created in got) == 1
    assert list(path.parent.iterdir()) == [path]  # no temp file left


@pytest.mark.slow
def test_one_thread_or_two_publish_the_same_snapshot(sample_run, tmp_path):
    """The sample lake run with steps one at a time publishes the very datasets `flywheel run` did
    with two at once (same rows, hashed per file)."""
    import os
    import shutil

    settings, _ = sample_run
    root = tmp_path / "one-thread"
    shutil.copytree(settings.raw_dir, root / "raw")
    env = {"FLYWHEEL_RAW_DIR": str(root / "raw"), "FLYWHEEL_WAREHOUSE": str(root / "warehouse.duckdb"),
           "FLYWHEEL_EXPORT_DIR": str(root / "exports"), "FLYWHEEL_AS_OF": str(settings.as_of),
           "FLYWHEEL_PSEUDONYM_KEY": "test-key", "FLYWHEEL_STEP_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "dagster_project.cli", "run"], cwd=root,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    two = read_manifest(settings.export_dir)["datasets"]
    one = read_manifest(root / "exports")["datasets"]
    assert set(one) == set(two)
    con = duckdb.connect()
    for path, entry in one.items():
        if entry["table"].startswith("ingest."):
            continue  # the run log: run ids and times differ
        columns = [c["name"] for c in entry["columns"]]
        if not any(c.endswith("run_id") for c in columns):
            assert (entry["rows"], entry["content_hash"]) == (two[path]["rows"], two[path]["content_hash"]), path
            continue
        # staging keeps the id of the run that ingested each row: every other column is the same
        kept = ", ".join(f'"{c}"' for c in columns if not c.endswith("run_id"))
        a, b = (f"select {kept} from read_parquet('{d / 'current' / path}/*.parquet')"
                for d in (settings.export_dir, root / "exports"))
        differing = con.execute(f"select count(*) from (({a} except all {b}) union all ({b} except all {a}))").fetchone()
        assert (entry["rows"], differing) == (two[path]["rows"], (0,)), path


def test_collecting_bronze_objects_waits_for_a_write_between_its_object_and_segment(settings, monkeypatch):
    """The session ratings' retention collects unnamed bronze objects while another source's step
    may be writing a batch: that batch's object, written before its segment, must survive."""
    from dagster_project import privacy
    from dagster_project.engine import bronze

    store = bronze.Bronze(settings, "interactions")
    object_written, collected = threading.Event(), threading.Event()
    write = bronze._atomic_write

    def pausing(target, data):  # the object is on disk, its segment not yet
        write(target, data)
        if target.suffix == ".zst":
            object_written.set()
            collected.wait(1)  # with the lock, collection waits for this write to finish

    monkeypatch.setattr(bronze, "_atomic_write", pausing)
    entry = bronze.Entry(seq=1, source="interactions", path="x.jsonl", kind="span", run_id="r",
                         observed_at="2026-01-01T00:00:00+00:00", data=b'{"id": "1"}\n')
    with ThreadPoolExecutor(2) as pool:
        writing = pool.submit(store.write, [entry])
        assert object_written.wait(10)
        collecting = pool.submit(privacy.collect_objects, settings)
        time.sleep(0.2)
        collected.set()
        writing.result()
        assert collecting.result() == 0
    reread = bronze.Bronze(settings, "interactions")
    assert bytes(reread.payload(reread.entries()[0])) == b'{"id": "1"}\n'


def test_a_collection_leaves_a_scrubbed_object_alone_until_its_segments_name_it(settings, monkeypatch):
    """Retention of one source rewrites a bronze object (its expired records blanked) while
    another source's retention may collect unnamed objects: between the new object and the
    segment naming it, that collection must leave it (``bronze.PENDING``), or it deletes the
    scrubbed batch."""
    from dagster_project import privacy
    from dagster_project.engine import bronze
    from dagster_project.sources import builtin_sources

    kept, gone = b'{"id": "kept"}\n', b'{"id": "gone", "note": "subject-0042"}\n'
    bronze.Bronze(settings, "interactions").write([bronze.Entry(
        seq=1, source="interactions", path="x.jsonl", kind="span", run_id="r",
        observed_at="2026-01-01T00:00:00+00:00", data=kept + gone)])
    object_written, collected = threading.Event(), threading.Event()
    write = bronze._atomic_write

    def pausing(target, data):  # the scrubbed object is on disk, the segment still names the old one
        write(target, data)
        if target.suffix == ".zst":
            object_written.set()
            collected.wait(1)  # the other source's collection runs now

    monkeypatch.setattr(bronze, "_atomic_write", pausing)
    matcher = privacy.Matcher(builtin_sources()["interactions"], b"-", set(), mention="subject-0042")
    with ThreadPoolExecutor(2) as pool:
        scrubbing = pool.submit(privacy.scrub_bronze, settings, builtin_sources()["interactions"], matcher)
        assert object_written.wait(10)
        collecting = pool.submit(privacy.collect_objects, settings)
        assert collecting.result(10) == 0  # the new object is pending, the old one still named
        collected.set()
        assert scrubbing.result() == 1
    assert not bronze.PENDING
    reread = bronze.Bronze(settings, "interactions")
    assert bytes(reread.payload(reread.entries()[0])) == kept + b" " * (len(gone) - 1) + b"\n"
    assert len(list((settings.state_dir / "bronze" / "objects").glob("*/*.zst"))) == 1  # the old one collected


INTERRUPTED_RUN = """
import os, sys, time, uuid
sys.path.insert(0, {root!r})
import dagster as dg
from dagster_project.pipeline import execute
from dagster_project.settings import Settings
from dagster_project.state import shared_state, state_connection

settings = Settings.from_env({{"FLYWHEEL_RAW_DIR": {raw!r}, "FLYWHEEL_WAREHOUSE": {warehouse!r}}})

@dg.asset
def endless() -> None:
    with state_connection(settings) as con:
        print("started", flush=True)
        con.execute("select count(*) from range(1000000000000) a where hash(a.range) = 42").fetchall()

@dg.asset
def quick() -> None:
    pass

job = dg.Definitions(assets=[endless, quick], jobs=[dg.define_asset_job("j")]).resolve_job_def("j")
with shared_state(settings):
    # a real instance: its compute log manager mirrors the steps' output through helper processes
    os.makedirs({home!r}, exist_ok=True)
    result = execute(job, 2, dg.DagsterInstance.local_temp({home!r}), str(uuid.uuid4()), run_config={{}}, tags={{}})
failures = [e.step_failure_data.error.cause.cls_name if e.step_failure_data.error.cause else e.step_failure_data.error.cls_name
            for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
print("success", result.success, "failures", failures, flush=True)
"""


@pytest.mark.slow
def test_an_interrupted_run_stops_the_statements_of_its_running_steps(settings):
    """Ctrl-C cannot stop a thread: the executor interrupts the running steps' DuckDB statements,
    so the run ends within seconds and the step says why. A terminal sends it to the whole process
    group: Dagster's helper processes (mirroring the steps' output) each printed a traceback."""
    import os
    import signal

    from conftest import PROJECT

    code = INTERRUPTED_RUN.format(root=str(PROJECT), raw=str(settings.raw_dir), warehouse=str(settings.warehouse),
                                  home=str(settings.raw_dir.parent / "dagster_home"))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(PROJECT)}, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        time.sleep(0.5)
        interrupted = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C
        out, err = proc.communicate(timeout=60)
    finally:
        try:  # never left running: its statement would run for hours
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert time.monotonic() - interrupted < 15, err[-2000:]
    assert "success False failures ['RunInterrupted']" in out, (out, err[-2000:])
    assert "Traceback" not in out + err, (out, err[-2000:])


BETWEEN_STEPS = """
import os, signal, sys, uuid
sys.path.insert(0, {root!r})
import dagster as dg
from dagster_project.pipeline import execute, run_failure, step_failures

@dg.asset
def first() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arrives as the only running step ends

@dg.asset(deps=[first])
def second() -> None:
    print("second ran", flush=True)

job = dg.Definitions(assets=[first, second], jobs=[dg.define_asset_job("j")]).resolve_job_def("j")
result = execute(job, 2, dg.DagsterInstance.ephemeral(), str(uuid.uuid4()), run_config={{}}, tags={{}})
print("success", result.success, "failures", step_failures(result.all_events)[0], flush=True)
print("why", run_failure(result.all_events), flush=True)
"""


def test_a_run_interrupted_while_no_step_runs_says_so():
    """Interrupted between two steps (or before the first), the run failed with no failed step:
    `flywheel run` said "failed" and no line why."""
    from conftest import PROJECT

    proc = subprocess.run([sys.executable, "-c", BETWEEN_STEPS.format(root=str(PROJECT))], capture_output=True,
                          text=True, timeout=120)
    assert "success False failures []" in proc.stdout and "second ran" not in proc.stdout, proc.stderr[-2000:]
    assert "why interrupted (Ctrl-C or a termination signal) between steps: the steps not started did not run" \
        in proc.stdout


@pytest.mark.parametrize("holder", ["writer lock", "duckdb connection", "a failing write"])
def test_a_failure_the_sensor_cannot_record_while_a_run_holds_the_database_is_recorded_next(settings, holder):
    """The next run may hold the writer lock for its whole length: the failure sensor waits a
    little, leaves the failure in a file, and the next run to open the state records it. So too
    when another process has the state database open (even read-only: DuckDB refuses a writer),
    where the sensor raised and the failure was lost; and when the write itself fails (a full
    disk raised DuckDB's TransactionException, and the run stayed "running" for good)."""
    from dagster_project.pipeline import PENDING_FAILURES, mark_failed

    with state_connection(settings) as con:  # an earlier run made the state
        prepare_state(con, settings)
        record_run(con, "failed-run", mode="incremental")
    if holder == "a failing write":  # ingest.runs cannot be written while it is a view
        with state_connection(settings) as con:
            con.execute("alter table ingest.runs rename to runs_aside")
            con.execute("create view ingest.runs as select * from ingest.runs_aside")
        mark_failed(settings, "failed-run", "step x failed", wait_seconds=0.5)
        with state_connection(settings) as con:
            con.execute("drop view ingest.runs")
            con.execute("alter table ingest.runs_aside rename to runs")
        holder = None
    hold = ("import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(30)") if holder == "writer lock" else (
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1], read_only=True); "
            "print('held', flush=True); time.sleep(30)")
    if holder is not None:
        holder = subprocess.Popen([sys.executable, "-c", hold, str(settings.state_dir / (
            "writer.lock" if holder == "writer lock" else "state.duckdb"))], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            mark_failed(settings, "failed-run", "step x failed", wait_seconds=0.5)
        finally:
            holder.kill()
            holder.wait()
    assert [p.name for p in (settings.state_dir / PENDING_FAILURES).iterdir()] == ["failed-run.json"]
    with state_connection(settings) as con:  # the next run
        prepare_state(con, settings)
        assert con.execute("select status, error from ingest.runs where run_id = 'failed-run'").fetchone() \
            == ("failed", "step x failed")
    assert not any((settings.state_dir / PENDING_FAILURES).iterdir())


def test_a_run_killed_while_it_published_is_recorded_as_having_published_nothing(settings):
    """A run records its snapshot as published before writing it: killed then, its row named a
    snapshot the next run removed as a leftover (failed, yet ``published``). Failing it clears
    that, unless the snapshot is the current one (killed after the commit)."""
    from dagster_project.pipeline import mark_failed

    runs = {"killed-before": "20261128T000003Z-aaaa",  # never committed: newer than the current one
            "killed-after": "20261128T000002Z-bbbb",  # committed: the current one
            "failed-after": "20261128T000001Z-cccc",  # committed, then another run published: kept
            "killed-leftover": "20261128T000000Z-dddd"}  # never committed, removed by a later publish
    with state_connection(settings) as con:
        prepare_state(con, settings)
        for run_id, version in runs.items():
            record_run(con, run_id, mode="incremental")
            con.execute("update ingest.runs set snapshot = ?, snapshot_status = 'published' where run_id = ?",
                        [version, run_id])
    for version in ("20261128T000003Z-aaaa", "20261128T000002Z-bbbb", "20261128T000001Z-cccc"):
        (settings.export_dir / ".snapshots" / version).mkdir(parents=True)
        (settings.export_dir / ".snapshots" / version / "manifest.json").write_text("{}")
    os.symlink(".snapshots/20261128T000002Z-bbbb", settings.export_dir / "current")
    for run_id in runs:
        mark_failed(settings, run_id, "killed while it ran")
    with state_connection(settings) as con:
        assert con.execute("select run_id, status, snapshot, snapshot_status from ingest.runs order by run_id"
                           ).fetchall() == [("failed-after", "failed", "20261128T000001Z-cccc", "published"),
                                            ("killed-after", "failed", "20261128T000002Z-bbbb", "published"),
                                            ("killed-before", "failed", None, "not published"),
                                            ("killed-leftover", "failed", None, "not published")]
