"""Progress of a run: fine-grained messages from long work, and one line per Dagster step.

Long work (the ingest engine) calls a ``reporter``; its messages go to the Dagster log and to
whoever listens (the CLI). ``StepProgress`` listens to the run's Dagster events, so every stage
is visible, not just ingestion: a live bar in a terminal, one plain line per finished step when
the output is a file or a pipe (CI logs, ``make run 2> log``), each with rows and seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from rich.markup import escape

_listeners: list[Callable[[str], None]] = []


def listen(callback: Callable[[str], None]) -> Callable[[], None]:
    """Register a listener (e.g. the CLI's progress bar); returns a function that removes it."""
    _listeners.append(callback)
    return lambda: _listeners.remove(callback)


def reporter(context, every_seconds: float = 5.0) -> Callable[[str], None]:
    """A progress callback: every message goes to listeners; the log gets one every few seconds."""
    last = [0.0]

    def report(message: str) -> None:
        for listener in list(_listeners):
            listener(message)
        now = time.monotonic()
        if now - last[0] >= every_seconds:
            last[0] = now
            context.log.info(message)

    return report


# Materialisation metadata worth a place on a step's line, in this order, with short labels.
COUNTS = [("files", "files"), ("lines_read", "lines"), ("rows_loaded", "loaded"),
          ("rows_quarantined", "quarantined"), ("records_expired", "expired by retention"),
          ("dagster/row_count", "rows")]


def summarize(metadata: dict) -> str:
    """``lines 3,204, loaded 3,190, quarantined 14`` from an asset's materialisation metadata."""
    parts = []
    for key, label in COUNTS:
        entry = metadata.get(key)
        value = getattr(entry, "value", entry)
        if isinstance(value, int) and not isinstance(value, bool):
            parts.append(f"{label} {value:,}")
    return ", ".join(parts)


def user_warning(record, said: list[str]) -> bool:
    """A warning a step logged for the user (a generated pseudonym key, a source whose globs
    match nothing), unless the run's preflight already printed it (each source's "no files
    match" was printed twice) or it is Dagster's "Dependencies for step X failed" of a step
    skipped after a failure (the failure is printed)."""
    return (record.dagster_event is None and record.level >= logging.WARNING and bool(record.user_message)
            and record.user_message not in said and not record.user_message.startswith("Dependencies for step "))


class StepProgress:
    """Turns a run's Dagster event stream into progress on a rich console."""

    def __init__(self, console, total_steps: int, said: list[str] = ()):
        self.console = console
        self.said = list(said)  # warnings the run printed before its steps
        self.total = total_steps
        self.done = 0
        self.started: dict[str, float] = {}
        self.counts: dict[str, list[str]] = {}
        self.live = None
        self.task = None
        self.lock = threading.Lock()  # steps on two threads report at once (executor)
        if console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.live = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True)
            self.task = self.live.add_task("starting…", total=total_steps)

    def __enter__(self) -> "StepProgress":
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.stop()

    def message(self, text: str) -> None:
        """A fine-grained message from inside a step (e.g. the file being read)."""
        if self.live is not None:
            self.live.update(self.task, description=escape(text))  # a file named `a[/]b` is no markup

    def event(self, record) -> None:
        """An ``EventLogEntry`` of the run (registered with ``instance.add_event_listener``)."""
        with self.lock:
            self._event(record)

    def _event(self, record) -> None:
        event = record.dagster_event
        if event is None:
            # Warnings the steps log for the user; Dagster's own console logger is silenced.
            if user_warning(record, self.said):
                self._print(f"[yellow]warning[/] {record.step_key or ''}: {escape(record.user_message)}")
            return
        step = record.step_key or ""
        kind = event.event_type_value
        if kind == "STEP_START":
            self.started[step] = time.monotonic()
            self.message(f"{step_label(step)}")
        elif kind == "ASSET_MATERIALIZATION":
            materialization = event.event_specific_data.materialization
            counts = summarize(materialization.metadata)
            if counts:
                name = materialization.asset_key.to_user_string()
                self.counts.setdefault(step, []).append(
                    counts if name == step_label(step) else f"{name}: {counts}")
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE"):
            self.done += 1
            seconds = time.monotonic() - self.started.get(step, time.monotonic())
            ok = kind == "STEP_SUCCESS"
            mark = "[green]✓[/]" if ok else "[red]✗[/]"
            detail = "; ".join(self.counts.pop(step, [])) if ok else "failed"
            self._print(f"[{self.done:>{len(str(self.total))}}/{self.total}] {mark} {step_label(step)} "
                        f"{seconds:.1f} s{'  ' + detail if detail else ''}")
            if self.live is not None:
                self.live.update(self.task, completed=self.done)

    def _print(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True)


def step_label(step_key: str) -> str:
    """``ingest__interactions`` → ``ingest/interactions``."""
    return step_key.replace("__", "/")
