"""The one resource every asset uses: where the lake, the warehouse and the exports live."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from datetime import date
from pathlib import Path

import dagster as dg
import duckdb
from pydantic import PrivateAttr

from dagster_project.engine import BronzeDamaged, LegacyStateError
from dagster_project.settings import Settings, SettingsError
from dagster_project.sources import load_sources
from dagster_project.state import WRITER_TAGS, is_shared, shared_state, state_connection
from transforms.spec import SourceSpec

_MISSING_TABLE = re.compile(r"Table with name (\S+) does not exist")


def planned_steps(instance: dg.DagsterInstance, run: dg.DagsterRun) -> set[str]:
    """The steps ``run`` was to execute."""
    if run.step_keys_to_execute:
        return set(run.step_keys_to_execute)
    plan = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id) if run.execution_plan_snapshot_id \
        else None
    return set(plan.step_keys_to_execute or [s.key for s in plan.steps]) if plan is not None else set()


class FlywheelResource(dg.ConfigurableResource):
    """Paths of the raw lake, warehouse and exports.

    Unset fields fall back to the ``FLYWHEEL_*`` environment variables, read when a run starts
    (not when definitions load), so a schedule picks up a changed environment without a redeploy.
    """

    raw_dir: str | None = None
    warehouse: str | None = None
    export_dir: str | None = None
    sources_file: str | None = None
    _run_state: ExitStack | None = PrivateAttr(default=None)
    _unread: Settings | None = PrivateAttr(default=None)  # a run's settings with a bad value (``ledger_settings``)
    _run_date: date | None = PrivateAttr(default=None)  # today when the run started (``settings``)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """A run (not a sensor's or schedule's evaluation, nor a finished run's result) opens the
        state database once, for all its steps, as ``flywheel run`` does: one connection, a
        cursor of it for each step thread (``executor``), the shared bookkeeping tables created
        before the first step. Settings that cannot even be read are left to the steps, which
        each fail naming them; the run is still recorded failed at its teardown, in the lake's
        state if it has one. Nothing is created where the warehouse may not be (a mistyped path
        made a run write a state database into a producer's directory before its steps refused it)."""
        run = context.dagster_run
        if run is None or run.is_finished:
            return
        try:
            settings = self.settings()
            # One run, one date: each step read "today" for itself, so a run across midnight UTC
            # applied retention as of one day in its ingest and built the marts as of the next
            self._run_date = settings.run_date
        except dg.Failure:
            self._unread = self.ledger_settings()
            return
        if is_shared(settings):  # flywheel run holds it already
            return
        if not settings.state_dir.exists() and settings.location_problems():
            return
        from dagster_project.history import holder_tags
        from dagster_project.pipeline import prepare_state, sweep_dead_runs

        # Tagged with its process before it waits for the writer lock: a run killed while it
        # waited (behind `flywheel run`, another launch) stayed STARTED for good, holding the
        # one-run limit, as only runs tagged so are failed by the next run or the dead-runs sensor.
        # And a run of the UI's asset job (not flywheel_job) is the pipeline's too: history
        # retention counts the runs with the writer tag.
        context.instance.add_run_tags(run.run_id, {**WRITER_TAGS, **holder_tags(run.run_id)})
        with ExitStack() as stack:  # a failure here leaves nothing open, and is what is raised
            stack.enter_context(shared_state(settings))
            with state_connection(settings) as con:
                prepare_state(con, settings)
            sweep_dead_runs(context.instance, settings, exclude=run.run_id)
            self._run_state = stack.pop_all()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        try:
            self._teardown(context)
        finally:
            self._run_date = None

    def _teardown(self, context: dg.InitResourceContext) -> None:
        if self._unread is not None:
            # The flywheel_mark_failed_runs sensor could not record it either: it reads the same
            # settings (and never sees a `dg launch` run).
            from dagster_project.pipeline import mark_failed, run_events, step_failures

            _, _, error = step_failures(run_events(context.instance, context.dagster_run.run_id))
            mark_failed(self._unread, context.dagster_run.run_id, error or "bad settings", wait_seconds=30)
            self._unread = None
        if self._run_state is None:
            return
        try:
            self._record_outcome(context)
        finally:
            self._run_state.close()
            self._run_state = None
        # Dagster's history beyond FLYWHEEL_KEEP_RUNS, as `flywheel run` does after each run, once
        # the lock is free: the flywheel_prune_history sensor never sees a `dg launch` run
        # (in-process), so a launch from cron without the daemon grew the instance for good
        from dagster_project.pipeline import prune_history

        _, problem = prune_history(context.instance, self.settings().keep_runs)
        if problem:
            context.log.warning(problem)

    def _record_outcome(self, context: dg.InitResourceContext) -> None:
        """The run's row in ``ingest.runs``, finished here: a run the daemon or ``dg launch`` starts
        is recorded failed by nothing else when the failure sensor does not see it (``dg launch``
        runs in-process: the sensor never matches them), and one that never reaches the snapshot
        step (part of the job, cancelled) stayed "running" for good. ``flywheel run`` records its
        own (``run_pipeline``)."""
        from dagster_project.pipeline import run_events, step_failures
        from dagster_project.state import record_run, save_recent_runs

        run = context.dagster_run
        _, _, error = step_failures(run_events(context.instance, run.run_id))
        if not error:  # interrupted (Ctrl-C, the UI's Terminate) between steps: no step failed
            unfinished = planned_steps(context.instance, run) - {
                r.dagster_event.step_key for r in context.instance.all_logs(
                    run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS) if r.dagster_event}
            if unfinished:
                error = (f"interrupted: {len(unfinished)} step(s) did not finish (e.g. {min(unfinished)}); "
                         "nothing of this run is published")
        settings = self.settings()
        with state_connection(settings) as con:
            row = con.execute("select status from ingest.runs where run_id = ?", [run.run_id]).fetchone()
            if error or row is None or row[0] == "running":
                record_run(con, run.run_id, mode=run.tags.get("flywheel/mode", "incremental"),
                           status="failed" if error else "success", error=error or None)
            if problem := save_recent_runs(con, settings):
                context.log.warning(problem)

    def settings(self) -> Settings:
        try:
            base = Settings.from_env()
        except SettingsError as exc:
            # A clean step failure naming each bad variable, not a traceback into settings.py.
            raise dg.Failure(description=f"bad settings: {exc}", allow_retries=False) from None
        return self._configured(base)

    def ledger_settings(self) -> Settings:
        """Where the lake's state is, whatever the other settings' values (one that cannot be read
        is left at its default): what records a run failed by a bad value, and fails the runs
        killed meanwhile (the sensors read the same settings, and failed on every tick)."""
        return self._configured(Settings.from_env(lenient=True))

    def _configured(self, base: Settings) -> Settings:
        changes = {
            name: Path(value).expanduser()
            for name, value in (("raw_dir", self.raw_dir), ("warehouse", self.warehouse),
                                ("export_dir", self.export_dir), ("sources_file", self.sources_file))
            if value
        }
        if base.as_of is None and self._run_date is not None:
            changes["as_of"] = self._run_date
        return replace(base, **changes)

    def checked_settings(self) -> Settings:
        """``settings()`` after the pre-run checks (a missing raw root fails the step, rather than
        marking every known file missing)."""
        settings = self.settings()
        try:
            settings.preflight()
        except SettingsError as exc:
            raise dg.Failure(description=f"bad settings: {exc}", allow_retries=False) from None
        return settings

    def sources(self) -> dict[str, SourceSpec]:
        return load_sources(self.settings().sources_file)

    def source_bytes(self, names: set[str]) -> dict[str, int]:
        """Source name -> bytes its files hold now, for the enabled ``names`` (the executor's
        weight of an ingest step no run has timed)."""
        from dagster_project.engine.discovery import claimed_bytes

        settings = self.settings()
        return {name: claimed_bytes(spec, settings.raw_dir)
                for name, spec in load_sources(settings.sources_file).items() if name in names}

    def pseudonym_key(self, log=None) -> bytes:
        """FLYWHEEL_PSEUDONYM_KEY, or a key generated once and kept beside the warehouse."""
        from transforms.pseudonyms import load_or_create_key

        settings = self.settings()
        key, created = load_or_create_key(settings.pseudonym_key, settings.pseudonym_key_file)
        if created and log is not None:
            log.warning(f"FLYWHEEL_PSEUDONYM_KEY is not set: generated a key in {settings.pseudonym_key_file}; "
                        "keep it (pseudonyms change with the key) and set the variable in production")
        return key

    @contextmanager
    def state(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The writer's state database, under the single-writer lock. A table missing from it
        fails the step in words that say what to do: `dg launch --assets staging/interactions`
        on a new state said only DuckDB's "Table with name feedback does not exist!". What the
        engine refuses to do to the lake's record (a rebuild with a bronze object gone, an older
        version's raw) fails it in its own one line, not a class name and a traceback's last words."""
        settings = self.settings()
        if not settings.state_dir.exists() and (problems := settings.location_problems()):
            raise dg.Failure(description=f"bad settings: {SettingsError(problems)}", allow_retries=False)
        with state_connection(settings) as con:
            try:
                yield con
            except (BronzeDamaged, LegacyStateError) as exc:
                raise dg.Failure(description=str(exc), allow_retries=False) from None
            except duckdb.CatalogException as exc:
                missing = _MISSING_TABLE.search(str(exc))
                if missing is None:
                    raise
                raise dg.Failure(
                    description=f"table {missing.group(1)} is not in the state database yet: an asset this one reads "
                    "has not been materialised; materialise its upstream assets first, or the whole flywheel_job "
                    f"(`flywheel run`), which builds every asset in order (DuckDB: {str(exc).splitlines()[0]})",
                    allow_retries=False) from exc
