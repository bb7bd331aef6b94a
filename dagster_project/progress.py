"""Progress messages from long work, to the Dagster log and to whoever else listens (the CLI)."""

from __future__ import annotations

import time
from collections.abc import Callable

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
