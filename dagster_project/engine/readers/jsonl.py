"""Line files (JSONL): new complete lines after the watermark, as byte spans.

A file is a sequence of *generations*: while it only grows, its consumed prefix keeps its sha256
and new bytes extend the current generation (also when it comes back after vanishing with those
bytes). If it shrank, or its consumed bytes changed, the lake starts a new generation and reads
it from byte 0; what the old generations held stays in raw (identical records collapse in
staging). New bytes are read into the run's memory (``read_at``), never mapped.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from dagster_project.settings import Settings
from transforms.lines import Rejected, find_newlines, split_lines, too_large
from dagster_project.engine.readers import TAIL_CHECK_BYTES, FileView, Unit, finish, open_file, sealed, stat_signature

CHUNK_BYTES = 256 * 1024 * 1024  # new bytes are read this much at a time, a span per read (longer lines: more)
HASH_BLOCK = 16 * 1024 * 1024  # the consumed prefix is hashed in reads of this much (not kept)
READ_MAX = 1 << 30  # one read's most (Linux returns at most ~2 GiB)


def read_at(fd: int, start: int, length: int) -> bytes:
    """The file's bytes ``[start, start + length)``, copied into memory: fewer when it is shorter
    now. A run holds what it read in its own memory until the batch is applied: a file it had
    mapped instead could be rewritten by its producer meanwhile (the lake kept bytes it never read,
    lost the lines it had, or died of SIGBUS reading a truncated map)."""
    parts = []
    while length > 0:
        part = os.pread(fd, min(length, READ_MAX), start)  # one copy (a bytearray is zeroed first)
        if not part:
            break
        parts.append(part)
        start, length = start + len(part), length - len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _tail_hash(fd: int, offset: int) -> str | None:
    """The sha256 of the ``TAIL_CHECK_BYTES`` before ``offset``; None when the file is shorter."""
    start = max(0, offset - TAIL_CHECK_BYTES)
    tail = os.pread(fd, offset - start, start)
    return hashlib.sha256(tail).hexdigest() if len(tail) == offset - start else None


def hash_prefix(hasher, fd: int, length: int) -> bool:
    """Feed the file's first ``length`` bytes to ``hasher``; False when it is shorter now."""
    done = 0
    while done < length:
        block = os.pread(fd, min(HASH_BLOCK, length - done), done)
        if not block:
            return False
        hasher.update(block)
        done += len(block)
    return True


def _live(known: dict | None) -> bool:
    return known is not None and known.get("status") == "ok" and known.get("format") == "jsonl"


def _same(known: dict | None, sig: dict, tail_hash: Callable[[int], str | None]) -> bool:
    """The file is the one ``known`` recorded, up to its watermark: same size, mtime and inode,
    and the same last consumed block (``tail_hash(offset)``: the sha256 of the
    ``TAIL_CHECK_BYTES`` before ``offset``, None when the file is shorter)."""
    return (_live(known) and all(known[k] == sig[k] for k in ("size", "mtime_ns", "ino"))
            and tail_hash(known["offset"]) == known["tail_sha"])


def _nothing_due(view: FileView, known: dict) -> bool:
    """No partial last line is waiting to be sealed."""
    return known["deferred"] == 0 or not sealed(view, known["changed_at"])


def _back_as_it_was(known: dict | None, fd: int, size: int, hasher) -> bool:
    """A line file the lake had seen gone whose consumed bytes are the ones it read (their
    sha256, fed to ``hasher``, is the recorded ``prefix_sha``)."""
    if known is None or known.get("status") != "missing" or known.get("format") != "jsonl" \
            or not known.get("offset") or size < known["offset"]:
        return False
    return hash_prefix(hasher, fd, known["offset"]) and hasher.hexdigest() == known["prefix_sha"]


def _should_record_ctime(view: FileView, sig: dict) -> bool:
    """No ctime was recorded for the file (it was read within ``CTIME_SETTLED_SECONDS`` of a
    write, as a day's file just after its last append, or before the lake kept ctimes) and it
    has one now. Recorded once the file is found unchanged by its last block, so that later runs
    skip reading that block; else the block would be read on every run for as long as the lake
    keeps the file. What that check cannot see (an edit before the last block with the mtime put
    back) it could not see before either; the next append still finds it (``prefix_sha``). A
    recorded ctime that moved (a chmod, a link, a backup's hard links: possibly every run) is not
    recorded again: such a file has its last block read each run, as before, and adds no entry."""
    return (view.settings.trust_ctime and sig.get("ctime_ns") is not None
            and (view.known or {}).get("ctime_ns") is None)


def settled_unchanged(real: str, signature: tuple[int, int, int, int] | None) -> bool:
    """``unchanged``'s first test alone, with no ``FileView`` and no parsed state: the file's size,
    mtime, inode and ctime are ``signature``, the ones its cached state recorded for a live line
    file with nothing deferred (``known.States.settled``; None otherwise). A file that cannot be
    stat-ed is not settled: ``read`` says why."""
    if signature is None:
        return False
    try:
        st = os.stat(real)
    except OSError:
        return False
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns) == signature


def unchanged(view: FileView) -> bool:
    """``read`` would find nothing to do. Nearly every file of a lake is unchanged on a given
    run: one whose size, mtime, inode and settled ctime are the recorded ones is not read at
    all (a write or a utime moves the ctime, and nothing sets it back); else one small read of
    its last consumed block, instead of reading the file. Reading that block of each of the
    1M bench lake's 3,932 interaction files cost a no-op run 0.26 s (250 MB hashed).
    ``FLYWHEEL_TRUST_CTIME=0`` always reads that block (a mount whose ctime does not follow
    writes: sshfs reports the mtime). A file found unchanged by that block whose ctime is to be
    recorded (``_should_record_ctime``) goes to ``read``, which records it."""
    if not _live(view.known):
        return False
    known = view.known
    if view.settings.trust_ctime and known.get("ctime_ns") is not None:
        sig = stat_signature(view.real, ctime=True)
        if all(known[k] == sig[k] for k in ("size", "mtime_ns", "ino", "ctime_ns")):
            return _nothing_due(view, known)
    with open_file(view.real) as fh:
        sig = stat_signature(fh.fileno(), ctime=True)
        same = _same(view.known, sig, lambda offset: _tail_hash(fh.fileno(), offset))
    return same and _nothing_due(view, view.known) and not _should_record_ctime(view, sig)


def read(view: FileView, fh=None) -> list[Unit]:
    """What is new in the file (``fh``: it open for reading; None: opened here). Its stat is
    taken first and nothing past the size it gave is read: lines appended meanwhile make the
    next run see the file changed."""
    if fh is None:
        with open_file(view.real) as fh:
            return read(view, fh)
    fd = fh.fileno()
    known = view.known
    sig = stat_signature(fd, ctime=True)
    size = sig["size"]
    live = _live(known)
    offset = known["offset"] if live else 0
    same = _same(known, sig, lambda at: _tail_hash(fd, at) if size >= at else None)
    if same:
        changed_at = known["changed_at"]
        if _nothing_due(view, known):
            # nothing new: a state entry only when there is a ctime to record
            return finish([], {**known, "ctime_ns": sig["ctime_ns"]}, known) if _should_record_ctime(view, sig) else []
    else:
        changed_at = min(sig["mtime_ns"] / 1e9, view.now)
        if live and changed_at <= known["changed_at"]:
            # Its stat moved, yet its mtime is not after the change recorded when the lake last
            # looked (set back: `touch -d`, a copy keeping times; from the mtime, a partial last
            # line was sealed at once and its record lost in two halves): if its bytes are the ones
            # the lake read (only the inode or the times moved: a restore, a mount without stable
            # inodes), its quiet period goes on; if they changed, the lake saw that now.
            unmoved = size == known["size"] and _tail_hash(fd, known["offset"]) == known["tail_sha"]
            changed_at = known["changed_at"] if unmoved else view.now

    units: list[Unit] = []
    generation = known.get("generation", 0) if known else 0
    lines_done = known["lines"] if live else 0
    hasher = hashlib.sha256()
    if not live and _back_as_it_was(known, fd, size, hasher):
        # Gone for a while (a mount point unmounted, a glob narrowed, a directory not listable),
        # back with what the lake read of it: read on, not again (that doubled its rows in raw).
        offset, lines_done = known["offset"], known["lines"]
        units.append(Unit("event", event=("reappeared", f"back with its {offset:,} consumed bytes unchanged; "
                                                        "read on from there")))
    elif not live:
        hasher = hashlib.sha256()
        generation += 1
        if known is not None:
            units.append(Unit("event", event=("reappeared" if known.get("status") == "missing" else "new_generation",
                                               f"read again from byte 0 as generation {generation}")))
    elif size < offset or not hash_prefix(hasher, fd, offset):  # (shorter than the stat said: shrunk since)
        generation, offset, lines_done, hasher = generation + 1, 0, 0, hashlib.sha256()
        now = f"{size:,}" if size < known["offset"] else "fewer (since its stat)"
        units.append(Unit("event", event=("shrunk", f"was {known['size']:,} bytes with {known['offset']:,} consumed, "
                                                    f"now {now}; earlier rows kept, re-read as generation {generation}")))
    elif not same and offset and hasher.hexdigest() != known["prefix_sha"]:
        generation, offset, lines_done, hasher = generation + 1, 0, 0, hashlib.sha256()
        units.append(Unit("event", event=("rewritten", f"the first {known['offset']:,} consumed bytes changed; "
                                                       f"earlier rows kept, re-read as generation {generation}")))

    # The new bytes, read into memory a window at a time (``read_at``): each span holds its own
    # window, so what a file's read holds is its new bytes, once.
    position = read_to = offset  # the end of the last span, and of what was read
    rest = b""  # bytes read past the last complete line
    spans: list[memoryview] = []
    while read_to < size:
        want = min(CHUNK_BYTES, size - read_to)
        block = read_at(fd, read_to, want)
        read_to += len(block)
        if len(block) < want:
            size = read_to  # shorter than its stat said: shrunk since
        window = rest + block if rest else block
        nl = window.rfind(b"\n")
        if nl < 0:
            rest = window  # one line longer than the window: read on
            continue
        span, rest = memoryview(window)[:nl + 1], window[nl + 1:]
        end = position + len(span)
        # where its lines end, found once: ``decode`` splits the span there (counting them apart
        # cost 0.7 s of the 1M lake's interaction ingest, 0.45 s of it copying blocks to count)
        newlines = find_newlines(np.frombuffer(span, dtype=np.uint8))
        n = len(newlines)
        hasher.update(span)
        # a span from byte 0 is all the hasher has seen: its digest is the span's, which bronze
        # records for the entry (a file's first read then hashes its bytes once, not twice)
        units.append(Unit("span", span, {"generation": generation, "start": position, "end": end,
                                         "first_line": lines_done + 1, "lines": n, "sealed": False},
                          sha256=hasher.hexdigest() if position == 0 else None, parsed=newlines))
        spans.append(span)
        position, lines_done = end, lines_done + n

    deferred = size - position  # ``rest`` holds those bytes
    if deferred and sealed(view, changed_at):
        span = memoryview(rest)
        units.append(Unit("span", span, {"generation": generation, "start": position, "end": size,
                                         "first_line": lines_done + 1, "lines": 1, "sealed": True},
                          event=("sealed", f"partial last line of {deferred} bytes quarantined")))
        hasher.update(span)
        spans.append(span)
        position, lines_done, deferred = size, lines_done + 1, 0
    # hasher holds bytes [0, position): for a file within one tail block that is the tail too
    prefix = hasher.hexdigest()
    state = {"format": "jsonl", "status": "ok", **sig, "size": size, "generation": generation, "offset": position,
             "lines": lines_done, "prefix_sha": prefix if position else None,
             "tail_sha": prefix if position <= TAIL_CHECK_BYTES else _read_tail_sha(fd, spans, offset, position),
             "changed_at": changed_at, "deferred": deferred}
    return finish(units, state, known)


def _read_tail_sha(fd: int, spans: list[memoryview], offset: int, position: int) -> str | None:
    """The sha256 of the ``TAIL_CHECK_BYTES`` before ``position`` as read: from ``spans`` (the
    bytes read from ``offset`` to ``position``), and from the file for the part before ``offset``."""
    start = max(0, position - TAIL_CHECK_BYTES)
    before = os.pread(fd, offset - start, start) if start < offset else b""
    if len(before) != max(0, offset - start):
        return None  # shorter now: the next run reads the file again
    pieces, need = [], position - max(start, offset)
    for span in reversed(spans):
        if need <= 0:
            break
        pieces.append(span[max(0, len(span) - need):])
        need -= len(pieces[-1])
    tail = hashlib.sha256(before)
    for piece in reversed(pieces):
        tail.update(piece)
    return tail.hexdigest()


def decode(data, meta: dict, settings: Settings, newlines=None) -> tuple[pa.Table, list[Rejected], int]:
    """A span's candidate lines, its pre-JSON rejects, and how many lines it holds; a sealed
    span's partial last line is quarantined as ``unterminated_last_line``. ``newlines``: where
    ``read`` found the span's lines end (``Unit.parsed``; None: found here)."""
    split = split_lines(data, start_offset=meta["start"], first_line_number=meta["first_line"],
                        max_line_bytes=settings.max_line_bytes, newlines=newlines)
    found, n = list(split.rejected), split.n_lines
    if meta["sealed"] and split.tail:
        raw = bytes(memoryview(data)[split.consumed:])
        line, offset = meta["first_line"] + split.n_lines, meta["start"] + split.consumed
        if len(raw) > settings.max_line_bytes:  # as a terminated one: its place and sha256, not its text
            found.append(too_large(line, offset, raw, settings.max_line_bytes, what="unterminated last line"))
        else:
            found.append(Rejected(
                line, offset, "unterminated_last_line",
                f"the last line has no newline and the file has not changed for "
                f"{settings.seal_after_seconds / 3600:g} h (FLYWHEEL_SEAL_AFTER)",
                raw.decode("utf-8", errors="backslashreplace"), raw if _invalid_utf8(raw) else None))
        n += 1
    return split.lines, found, n


def _invalid_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True
