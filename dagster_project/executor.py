"""The run's steps on a few threads of one process: independent branches of the graph at once.

DuckDB takes one writing *process*, which is why a run executes in process (Dagster's
multiprocess executor would open the database from a process per step). Within that process
DuckDB runs transactions from many connections at once, so the steps need not wait for each
other: while ``ingest/interactions`` classifies, the small sources are read; while the training
sets are built, the retrieval marts are. Each thread has its own connection (cursor) to the
state database (``state.shared_state``), so each step keeps its own transactions, temp tables
and macros, exactly as when it ran alone.

Steps that run together write different tables; the rows they share are the run's own record
(``ingest.runs``, updated under a lock in ``state.record_run``) and the bookkeeping tables
created before the first step (``pipeline.prepare_state``), so their transactions never
conflict; on disk, a bronze object and its segment are written with no collection between them
(``bronze.OBJECTS_LOCK``).

Order: of the steps ready to start, the one with the longest path to the end of the run starts
first, each step weighted by its recent times (``StepTimes``: its last time, or 0.9 of its
weight before when that is more, kept in the Dagster instance), an ingest step no run has timed
by the bytes its source holds (``first_weights``), any other untimed step by the median time (1
before any run), and of paths that weigh the same, the step more steps wait on
(``descendants``). The chain
interactions → staging → labels → training sets → snapshot is the long pole of a daily run;
started first, the other branches fill the second thread around it. The weights only order the
steps: any order gives the same result.

It is the job's executor (``dg launch``, the schedule, the sensor) and ``flywheel run``'s: the
``flywheel`` resource (or ``flywheel run``) opens the state database once per run, before the
first step. Ctrl-C or a termination cannot stop a thread: the running steps' DuckDB statements
are interrupted (``state.interrupt_statements``), so those steps fail and no other starts.

Measured on the 1M-interaction bench lake (two cores, interleaved with the code before, four
rounds each): a +1% run 7.9–8.6 → 6.6–7.2 s, over a no-op 2.6–3.2 → 1.7–2.2 s; a no-op, whose
time is mostly Dagster's own Python, 5.2–5.5 → 4.6–5.3 s; a full refresh 54–58 → 47–53 s, with
peak RSS 2.1–2.2 → 2.4–2.7 GB. More threads than cores gained nothing (3 and 4 were measured).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial

import dagster as dg
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.execution.api import ExecuteRunWithPlanIterable
from dagster._core.execution.compute_logs import create_compute_log_file_key
from dagster._core.execution.context.system import PlanExecutionContext, PlanOrchestrationContext
from dagster._core.execution.context_creation_job import PlanExecutionContextManager
from dagster._core.execution.plan.execute_plan import (_handle_compute_log_setup_error,
                                                       _handle_compute_log_teardown_error, _trigger_hook,
                                                       dagster_event_sequence_for_step,
                                                       inner_plan_execution_iterator)
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.retries import RetryMode
from dagster._core.executor.base import Executor

from dagster_project.state import interrupt_statements

DEFAULT_THREADS = 2
MAX_THREADS = 16
POLL_SECONDS = 0.5  # how often the waiting thread looks for an interrupt (Ctrl-C, a termination)


@dg.executor(
    name="flywheel_threads",
    config_schema={"threads": dg.Field(int, is_required=False,
                                       description="Steps run at once (1: one after another); "
                                                   "default FLYWHEEL_STEP_THREADS, else 2.")},
)
def threaded_executor(init_context) -> ThreadedExecutor:
    """Run independent steps of a run at once, on threads of the run's process."""
    threads = init_context.executor_config.get("threads")
    if threads is None:
        from dagster_project.settings import Settings, SettingsError

        try:
            threads = Settings.from_env().step_threads
        except SettingsError:  # the steps fail naming the bad setting
            threads = DEFAULT_THREADS
    return ThreadedExecutor(threads=threads)


class ThreadedExecutor(Executor):
    def __init__(self, threads: int = DEFAULT_THREADS):
        if not 1 <= threads <= MAX_THREADS:  # as FLYWHEEL_STEP_THREADS; a Dagster error fails the run cleanly
            raise dg.DagsterInvariantViolationError(
                f"executor config threads={threads}: use a whole number from 1 (one step at a time) to {MAX_THREADS}")
        self.threads = threads

    @property
    def retries(self) -> RetryMode:
        return RetryMode.ENABLED  # as execute_in_process: a step's RetryRequested is honoured

    def execute(self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
        keys = execution_plan.step_keys_to_execute
        yield DagsterEvent.engine_event(
            plan_context, f"Executing steps in process (pid: {os.getpid()}) on {self.threads} threads",
            event_specific_data=EngineEventData.in_process(os.getpid(), keys))
        yield from iter(ExecuteRunWithPlanIterable(
            execution_plan=plan_context.execution_plan,
            iterator=partial(_execution_iterator, threads=self.threads),
            execution_context_manager=PlanExecutionContextManager(
                job=plan_context.job, retry_mode=plan_context.retry_mode,
                execution_plan=plan_context.execution_plan, run_config=plan_context.run_config,
                dagster_run=plan_context.dagster_run, instance=plan_context.instance,
                raise_on_error=plan_context.raise_on_error, output_capture=plan_context.output_capture),
        ))
        yield DagsterEvent.engine_event(
            plan_context, f"Finished steps in process (pid: {os.getpid()})",
            event_specific_data=EngineEventData.in_process(os.getpid(), keys))


def _execution_iterator(job_context: PlanExecutionContext, execution_plan: ExecutionPlan, *,
                        threads: int) -> Iterator[DagsterEvent]:
    with InstanceConcurrencyContext(job_context.instance, job_context.dagster_run) as concurrency:
        if threads == 1:  # one step at a time, on this thread: Dagster's in-process loop itself
            yield from inner_plan_execution_iterator(job_context, execution_plan, concurrency)
        else:
            yield from _run_steps(job_context, execution_plan, concurrency, threads)


def _run_steps(job_context: PlanExecutionContext, execution_plan: ExecutionPlan,
               concurrency: InstanceConcurrencyContext, threads: int) -> Iterator[DagsterEvent]:
    """Dagster's in-process loop (``inner_plan_execution_iterator``) with the steps' event
    sequences run on worker threads: this thread starts steps, yields their events and tells
    the plan about them, in the order they happen."""
    if "sqlalchemy" in sys.modules:
        # Dagster's SQL storage imports SQLAlchemy's ORM on its first `inspect()`, which two step
        # threads may reach at once: one saw the other's half-imported module and the step failed
        # ("partially initialized module 'sqlalchemy.orm.exc'"; 3 runs of 15 in a hunt, each fine
        # when run again). Imported here, before any step thread starts (0.14 s measured alone).
        import sqlalchemy.orm  # noqa: F401
    steps_in_order = [step.key for step in execution_plan.get_steps_to_execute_in_topo_order()]
    position = {key: i for i, key in enumerate(steps_in_order)}
    times = StepTimes(job_context.instance, job_context.dagster_run.job_name)
    rank = critical_path(execution_plan, steps_in_order, times.seconds,
                         first_weights(job_context, execution_plan, steps_in_order, times.seconds))
    waiting = descendants(execution_plan, steps_in_order)
    sort_key = lambda step: (-rank.get(step.key, 0.0), -waiting.get(step.key, 0), position[step.key])  # noqa: E731
    compute_logs = job_context.instance.compute_log_manager
    events: queue.Queue = queue.Queue()
    running: dict[str, Running] = {}

    def work(key: str, step_context) -> None:
        try:
            for event in dagster_event_sequence_for_step(step_context):
                events.put(("event", key, event))
            events.put(("done", key, None))
        except BaseException:  # a framework error: re-raised once the other steps are done
            events.put(("error", key, sys.exc_info()))

    with execution_plan.start(retry_mode=job_context.retry_mode, sort_key_fn=sort_key,
                              instance_concurrency_context=concurrency,
                              step_dependency_config=job_context.step_dependency_config) as active, \
            ExitStack() as capture, \
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="flywheel-step") as pool:
        try:
            log_key = compute_logs.build_log_key_for_run(job_context.run_id, create_compute_log_file_key())
            yield DagsterEvent.capture_logs(job_context, steps_in_order, log_key,
                                            capture.enter_context(_helpers_blocking_ctrl_c(
                                                compute_logs.capture_logs(log_key))))
        except Exception:
            yield from _handle_compute_log_setup_error(job_context, sys.exc_info())
        stopping = False  # interrupted, or a step raised: no step starts, the running ones finish
        error = None
        while running or not (active.is_complete or stopping):
            if not stopping and active.check_for_interrupts():
                stopping = True
                active.mark_interrupted()
                yield DagsterEvent.engine_event(job_context, "Interrupted: stopping the running steps",
                                                EngineEventData.interrupted(list(running)))
            if stopping and running and error is None:
                # A thread cannot be stopped from outside: its statement in DuckDB can. Each poll
                # interrupts what the running steps execute, until they fail and end.
                interrupt_statements()
            if not stopping and len(running) < threads and not active.is_complete:
                for step in active.get_steps_to_execute(limit=threads - len(running)):
                    step_context = job_context.for_step(step, active.get_known_state())
                    running[step.key] = Running(step_context, time.monotonic())
                    pool.submit(work, step.key, step_context)
                yield from active.concurrency_event_iterator(job_context)
            if not running:
                if not (active.is_complete or stopping):
                    active.sleep_til_ready()
                continue
            try:
                kind, key, payload = events.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
            step = running[key]
            if kind == "error":
                del running[key]
                error, stopping = error or payload, True
                continue
            if kind == "event":
                step.events.append(payload)
                yield payload
                if payload.is_step_up_for_retry:
                    # told once the attempt has ended: told now, the plan would start the next
                    # attempt while this one still runs (Dagster's loop tells it at that point too)
                    step.retry = payload
                else:
                    active.handle_event(payload)
                continue
            del running[key]
            times.took(key, time.monotonic() - step.started)
            if step.retry is not None:
                active.handle_event(step.retry)
            active.verify_complete(job_context, key)
            for event in active.plan_events_iterator(job_context):  # skips after a failure
                step.events.append(event)
                yield event
            yield from _trigger_hook(step.context, step.events)
        if error is not None:
            raise error[1].with_traceback(error[2])
        times.save()
        try:
            capture.close()
        except Exception:
            yield from _handle_compute_log_teardown_error(job_context, sys.exc_info())


@dataclass
class Running:
    """A step on a worker thread: its context, its events so far, when it started, and its retry
    request (``STEP_UP_FOR_RETRY``), told to the plan once the attempt has ended."""

    context: object
    started: float
    events: list = field(default_factory=list)
    retry: DagsterEvent | None = None


@contextmanager
def _helpers_blocking_ctrl_c(capture):
    """Enter ``capture`` (the compute log manager's) with SIGINT blocked, so the helper processes
    it starts (``tail`` and Dagster's ``watch_orphans.py``, which mirror the steps' output to the
    terminal) inherit the blocked signal: a terminal's Ctrl-C reaches the whole process group, and
    each helper printed a KeyboardInterrupt traceback around the run's one-line message. This
    process gets a Ctrl-C pressed meanwhile once it unblocks; the helpers end with the capture."""
    with ExitStack() as stack:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            value = stack.enter_context(capture)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
        yield value


def critical_path(execution_plan: ExecutionPlan, keys: list[str], seconds: dict[str, float],
                  first: dict[str, float] | None = None) -> dict[str, float]:
    """Step key -> its time plus the longest such path below it, for ``keys`` in topological
    order. A step without a time weighs its ``first`` weight, else 1 when no step has a time, else
    the median of those known."""
    known = sorted(seconds.values())
    default = known[len(known) // 2] if known else 1.0
    first = first or {}
    below = _dependents(execution_plan, keys)
    rank: dict[str, float] = {}
    for key in reversed(keys):
        weight = seconds.get(key, first.get(key, default))
        rank[key] = weight + max((rank[k] for k in below[key]), default=0.0)
    return rank


SOURCE_TAG = "flywheel/source"  # an ingest step's op tag: the source it reads
# An untimed ingest step's weight: its source's bytes at this rate. Alone on the 2-core machine
# the 1M bench lake's interactions (700 MB) ingest at ~60 MB/s, its outcomes (161 MB) at ~40.
FIRST_BYTES_PER_SECOND = 50e6


def first_weights(job_context: PlanExecutionContext, execution_plan: ExecutionPlan, keys: list[str],
                  timed: dict[str, float]) -> dict[str, float]:
    """Step key -> weight of each ingest step no run has timed yet (a first run, a new source):
    the bytes its source's files hold now, at ``FIRST_BYTES_PER_SECOND``. Without it a first full
    refresh weighed every step 1, so the longest path was the one of most steps, not the one of
    most work: through staging, ``ingest/interactions`` (700 MB at 1M) started after
    ``ingest/eventlog`` and ``ingest/weighted_ratings``, 2.4 s late on the run's critical path.
    Settings or a source registry that cannot be read give no weights, a file gone meanwhile 0
    bytes (the order is a hint; the steps report errors)."""
    untimed = {}
    for key in keys:
        source = (execution_plan.get_step_by_key(key).tags or {}).get(SOURCE_TAG)
        if source is not None and key not in timed:
            untimed[key] = source
    flywheel = job_context.scoped_resources_builder.resource_instance_dict.get("flywheel")
    if not untimed or not hasattr(flywheel, "source_bytes"):
        return {}
    try:
        found = flywheel.source_bytes(set(untimed.values()))
    except Exception:  # noqa: BLE001 - an order hint only
        return {}
    return {key: found[source] / FIRST_BYTES_PER_SECOND for key, source in untimed.items() if source in found}


def descendants(execution_plan: ExecutionPlan, keys: list[str]) -> dict[str, int]:
    """Step key -> how many steps wait on it, directly or not: between steps whose paths weigh
    the same (before any run has timed them, every step but an ingest step weighs 1), the one
    more of the run waits on starts first. In a first full refresh ``ingest/interactions`` (five steps below
    it) started after ``ingest/feedback`` (four), by name, and finished 20th of 26."""
    below = _dependents(execution_plan, keys)
    every: dict[str, set[str]] = {}
    for key in reversed(keys):  # topological order: a step's dependents are done first
        every[key] = set(below[key]).union(*(every[k] for k in below[key]))
    return {key: len(found) for key, found in every.items()}


def _dependents(execution_plan: ExecutionPlan, keys: list[str]) -> dict[str, list[str]]:
    """Step key -> the steps among ``keys`` that depend on it directly."""
    below: dict[str, list[str]] = {key: [] for key in keys}
    for key, upstream in execution_plan.get_executable_step_deps().items():
        for up in upstream:
            if up in below and key in below:
                below[up].append(key)
    return below


DECAY = 0.9  # a step's weight falls by a tenth a run, unless the run took longer


class StepTimes:
    """Each step's weight for the order: its time in the last run that ran it, or 0.9 of its
    weight before when that is more, in the instance's key-value store (one small read and
    write a run). Heavy steps stay heavy through a series of no-op runs: the steps a full
    refresh or a daily run spends its time in are the same (interactions, training sets,
    snapshot), and a no-op, where every step is quick, barely cares about the order."""

    def __init__(self, instance, job_name: str):
        self.instance, self.key = instance, f"flywheel/step_seconds/{job_name}"
        self.seconds: dict[str, float] = {}
        self.new: dict[str, float] = {}
        try:
            stored = instance.run_storage.get_cursor_values({self.key}).get(self.key)
            self.seconds = {k: float(v) for k, v in json.loads(stored or "{}").items()}
        except Exception:  # noqa: BLE001 - an order hint only: unreadable means no hint
            pass

    def took(self, step: str, seconds: float) -> None:
        self.new[step] = seconds

    def save(self) -> None:
        merged = dict(self.seconds)
        for step, seconds in self.new.items():
            merged[step] = round(max(seconds, DECAY * merged.get(step, 0.0)), 4)
        try:
            self.instance.run_storage.set_cursor_values({self.key: json.dumps(merged, sort_keys=True)})
        except Exception:  # noqa: BLE001 - the next run orders with the older weights
            pass
