"""One reader per file format, behind one interface.

``read(view) -> list[Unit]``: given a file and what the lake knows about it (``view.known``, the
state recorded in bronze after the last observation), return what is new: byte spans, rows,
tombstones, and events. A reader never writes anything; the engine records its units in bronze
and classifies them. The last unit carries the file's new state; no units means nothing changed.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from dagster_project.settings import Settings

TAIL_CHECK_BYTES = 64 * 1024  # the last consumed block, hashed to catch same-size/mtime edits
# A status change time (ctime) this much older than the read it was recorded at is trusted: no
# write or utime can have happened since without moving it (no call sets it), and none in the
# same clock tick as the read (filesystems stamp times at a few ms granularity).
CTIME_SETTLED_SECONDS = 2.0


@dataclass
class Unit:
    kind: str  # span | array | rows | tombstones | corrupt | event | state
    data: object = None  # bytes-like payload kept in bronze
    meta: dict = field(default_factory=dict)
    state: dict | None = None
    event: tuple[str, str] | None = None
    sha256: str | None = None  # of ``data``, when the reader hashed exactly those bytes already
    # What the reader found in ``data`` on its way, handed to the format's ``decode`` so that it is
    # not found again (a span's newline positions; a rows unit's keys, records and their sha256).
    # A replayed entry has none: decode finds it in the bytes, to the same result.
    parsed: object = field(default=None, repr=False, compare=False)


@dataclass
class FileView:
    path: str  # as stored (relative to the raw root when under it)
    real: Path
    known: dict | None  # the file's state after its last observation, from bronze
    settings: Settings
    now: float  # wall-clock seconds of this run


def open_file(real: Path | str):
    """``open(real, "rb")`` of a regular file (through links), which never waits: a FIFO put where
    a file was listed made the read wait for a writer for good, the run holding the writer lock.
    Anything else raises ``OSError``, which the engine reports as ``unreadable``."""
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)", str(real))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def stat_signature(real: Path | int, *, ctime: bool = False) -> dict:
    """Size, mtime and inode of a path or an open file descriptor; with ``ctime``, also its ctime
    when settled (``CTIME_SETTLED_SECONDS`` old, else None): a line file whose settled ctime is
    the recorded one has not been written to since (``jsonl.unchanged``). Only that reader
    records it: the others compare their whole signature, which a ctime must not disturb."""
    st = os.stat(real)
    sig = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}
    if ctime:
        settled = st.st_ctime_ns <= (time.time() - CTIME_SETTLED_SECONDS) * 1e9
        sig["ctime_ns"] = st.st_ctime_ns if settled else None
    return sig


def sealed(view: FileView, changed_at: float) -> bool:
    """A partial last line is final once the lake has seen the file unchanged for the quiet
    period, measured from when the lake saw it change (a future mtime must not block it)."""
    return view.now - changed_at >= view.settings.seal_after_seconds


def finish(units: list[Unit], state: dict, known: dict | None) -> list[Unit]:
    """Attach the new state to the last unit, or record it alone when it changed."""
    if units:
        units[-1].state = state
    elif state != known:
        units.append(Unit("state", state=state))
    return units
