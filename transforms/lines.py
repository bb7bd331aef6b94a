"""Split raw bytes into numbered lines without losing a byte.

The split is vectorised (NumPy over a memory map) and zero-copy: each line becomes one value of
an Arrow ``large_string`` array whose offsets point into the original buffer. A value keeps its
line terminator (``\\n`` or ``\\r\\n``): JSON ignores trailing white space, and keeping it means the
offsets of consecutive lines are contiguous, so no byte is copied. Lines that cannot go to the
JSON engine (invalid UTF-8, over the size limit) are taken out here and returned as quarantine
records with their raw bytes, or a pointer and sha256 for oversized ones.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import pyarrow as pa

from transforms import arrowcols

BOM = b"\xef\xbb\xbf"
BATCH_ROWS = 16_384
SCAN_BYTES = 64 * 1024 * 1024
LINES_SCHEMA = pa.schema(
    [("line_number", pa.int64()), ("byte_offset", pa.int64()), ("text", pa.large_string())]
)


@dataclass
class Rejected:
    """A line rejected before JSON parsing."""

    line_number: int
    byte_offset: int
    reason: str
    detail: str
    raw_text: str | None
    raw_bytes: bytes | None
    raw_sha256: str | None = None
    raw_length: int | None = None


def too_large(line_number: int, byte_offset: int, raw: bytes, max_line_bytes: int, what: str = "line") -> Rejected:
    """A ``line_too_large`` reject: where the line is and its sha256, not its text."""
    return Rejected(line_number, byte_offset, "line_too_large",
                    f"{what} of {len(raw):,} bytes exceeds the {max_line_bytes:,}-byte limit; "
                    f"read it at byte offset {byte_offset}, length {len(raw)}",
                    None, None, hashlib.sha256(raw).hexdigest(), len(raw))


@dataclass
class Split:
    lines: pa.Table  # LINES_SCHEMA: candidate lines for the JSON engine
    rejected: list[Rejected] = field(default_factory=list)
    n_lines: int = 0  # complete lines in the buffer (candidates + rejected)
    consumed: int = 0  # bytes of complete lines (the new watermark is start_offset + consumed)
    tail: int = 0  # bytes after the last newline: a partial line, deferred


def split_lines(
    buf,
    *,
    start_offset: int,
    first_line_number: int,
    max_line_bytes: int,
    newlines: np.ndarray | None = None,
) -> Split:
    """Split ``buf`` (bytes-like, starting at file offset ``start_offset``) into lines.

    Only complete lines (ending in ``\\n``) are returned; the bytes after the last newline are
    reported as ``tail`` for the caller to defer or seal. A UTF-8 BOM at file offset 0 is skipped.
    ``newlines``: ``find_newlines`` of ``buf``, when the caller has it already.
    """
    data = np.frombuffer(buf, dtype=np.uint8)
    if newlines is None:
        newlines = find_newlines(data)
    n = len(newlines)
    consumed = int(newlines[-1]) + 1 if n else 0
    tail = len(data) - consumed
    if n == 0:
        return Split(lines=LINES_SCHEMA.empty_table(), n_lines=0, consumed=0, tail=tail)

    starts = np.empty(n + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = newlines + 1
    line_numbers = np.arange(first_line_number, first_line_number + n, dtype=np.int64)
    byte_offsets = starts[:-1] + start_offset
    if start_offset == 0 and bytes(data[:3]) == BOM:
        starts[0] = 3  # line 1 still starts at byte 0; its text starts after the BOM

    offsets_buf = pa.py_buffer(starts)
    texts = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, offsets_buf, pa.py_buffer(buf)]
    )
    keep = np.ones(n, dtype=bool)
    rejected: list[Rejected] = []

    lengths = np.diff(starts)  # with the line's "\n" (and "\r"): over the limit from limit + 2 on
    for i in np.flatnonzero(lengths > max_line_bytes + 1):
        raw = bytes(data[starts[i] : starts[i + 1]]).rstrip(b"\r\n")
        if len(raw) <= max_line_bytes:
            continue
        keep[i] = False
        rejected.append(too_large(int(line_numbers[i]), int(byte_offsets[i]), raw, max_line_bytes))

    # The string column, zero-copy over the same buffers: one full validation checks every
    # line's UTF-8 (SIMD), and only when it fails are the invalid lines looked for. (A cast
    # would do the same but imports pyarrow.compute, ~25 ms of a run that reads a few lines.)
    strings = pa.LargeStringArray.from_buffers(n, offsets_buf, pa.py_buffer(buf))
    try:
        strings.validate(full=True)
        invalid = []
    except pa.ArrowInvalid:
        strings, invalid = None, _invalid_utf8(texts, keep)
    for i in invalid:
        keep[i] = False
        rejected.append(invalid_utf8(int(line_numbers[i]), int(byte_offsets[i]),
                                     bytes(data[starts[i] : starts[i + 1]]).rstrip(b"\r\n")))

    numbers, offsets = arrowcols.ints(line_numbers), arrowcols.ints(byte_offsets)
    if keep.all():
        table = pa.Table.from_arrays([numbers, offsets, strings], schema=LINES_SCHEMA)
    else:
        mask = arrowcols.bools(keep)
        kept = strings.filter(mask) if strings is not None else texts.filter(mask).cast(pa.large_string())
        table = pa.Table.from_arrays([numbers.filter(mask), offsets.filter(mask), kept], schema=LINES_SCHEMA)
    # Record batches let DuckDB's Arrow scan spread the JSON work over every core.
    table = pa.Table.from_batches(table.to_batches(max_chunksize=BATCH_ROWS), schema=LINES_SCHEMA)
    return Split(lines=table, rejected=rejected, n_lines=n, consumed=consumed, tail=tail)


UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def invalid_utf8(line_number: int, byte_offset: int | None, raw: bytes, what: str = "line") -> Rejected:
    """The ``invalid_utf8`` reject of ``raw`` (a line, or a SQLite record): where its first bad
    byte is, its text with the bad bytes escaped, and the bytes themselves."""
    try:
        raw.decode("utf-8")
        detail = "invalid UTF-8"
    except UnicodeDecodeError as exc:
        detail = f"invalid UTF-8 at byte {exc.start} of the {what}: {exc.reason}"
    if byte_offset == 0 and raw[:2] in UTF16_BOMS:  # PowerShell's `>`, Python's encoding="utf-16"
        detail += f"; the file starts with the byte-order mark {raw[:2].hex(' ').upper()}: it is UTF-16, not UTF-8"
    return Rejected(line_number, byte_offset, "invalid_utf8", detail, raw.decode("utf-8", errors="backslashreplace"),
                    raw)


def find_newlines(data: np.ndarray) -> np.ndarray:
    """Positions of every ``\\n`` byte.

    Scanning in 64 MiB pieces on two threads (NumPy releases the GIL) is ~6x faster than one
    ``data == 10`` over the whole buffer, whose cost is mostly allocating a boolean array the size
    of the file.
    """
    if len(data) <= SCAN_BYTES:
        return np.flatnonzero(data == 10)
    starts = range(0, len(data), SCAN_BYTES)
    parts = list(_scan_pool().map(lambda lo: np.flatnonzero(data[lo:lo + SCAN_BYTES] == 10) + lo, starts))
    return np.concatenate(parts)


@cache
def _scan_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)), thread_name_prefix="scan")


def _invalid_utf8(texts: pa.LargeBinaryArray, keep: np.ndarray) -> list[int]:
    """Indices of values that are not valid UTF-8, found by bisecting failed casts.

    One cast of the whole array validates it with SIMD; only when it fails do we bisect, so the
    cost is O(bad lines × log n) casts instead of a Python loop over every line.
    """
    bad: list[int] = []
    stack = [(0, len(texts))]
    while stack:
        lo, hi = stack.pop()
        if hi <= lo:
            continue
        try:
            texts.slice(lo, hi - lo).cast(pa.large_string())
            continue
        except pa.ArrowInvalid:
            pass
        if hi - lo == 1:
            if keep[lo]:
                bad.append(lo)
            continue
        mid = (lo + hi) // 2
        stack.append((mid, hi))
        stack.append((lo, mid))
    return sorted(bad)
