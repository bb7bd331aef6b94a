"""The older save format: one JSON array of objects. Each change of the file is read whole as a
new generation; elements identical to earlier ones collapse by identity in staging."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator

import pyarrow as pa

from dagster_project.engine.readers import FileView, Unit, finish, sealed, stat_signature
from dagster_project.engine.readers.jsonl import hash_prefix, read_at
from dagster_project.settings import Settings
from transforms import arrowcols
from transforms.jsontext import CUT, scan_value
from transforms.lines import LINES_SCHEMA, Rejected, invalid_utf8


class Cut(ValueError):
    """The array's text ends before the array does: a file caught while its writer is still
    writing it (``json.dump`` to the path truncates it, then writes it in blocks)."""


def read(view: FileView, fh) -> list[Unit]:
    """The whole array (``fh``: the file, open for reading), when its sha256 changed: then read
    into memory (``jsonl.read_at``) up to the size its stat gave, and hashed as read.

    An array whose text ends before the array does (``Cut``) is waited for, as a line file's
    partial last line is: its bytes are deferred, the generation the lake holds stays, and it is
    read again when it changes; still cut after ``FLYWHEEL_SEAL_AFTER``, it is read as it is, one
    ``corrupt_file`` line. A file caught mid-write was quarantined at once, and stayed in the
    quarantine after the next run read it whole."""
    known = view.known
    sig = stat_signature(fh.fileno())
    back = [Unit("event", event=("reappeared", "back unchanged; not read again"))] \
        if known is not None and known.get("status") == "missing" else []
    if known is not None and known.get("format") == "json_array" and known.get("status") in ("ok", "missing"):
        current = hashlib.sha256()
        if hash_prefix(current, fh.fileno(), sig["size"]):
            if known["prefix_sha"] == current.hexdigest():
                # hashed in blocks, not held; back unchanged after it was gone, or as it was
                # before a write that was cut: not read again
                return finish(back, {**known, **sig, "status": "ok", **NOT_WAITING}, known)
            if known.get("pending_sha") == current.hexdigest() and not sealed(view, known["changed_at"]):
                # the same cut text, still waited for (said on every run: status names the file)
                return finish([*back, _waiting(known.get("pending_cut"), known["deferred"])],
                              {**known, **sig, "status": "ok"}, known)
    data = read_at(fh.fileno(), 0, sig["size"])  # bytes: parsed, hashed and kept without a copy
    sha = hashlib.sha256(data).hexdigest()
    changed_at = min(sig["mtime_ns"] / 1e9, view.now)
    units = []
    try:
        parsed = list(elements(data))
    except Cut as cut:
        # The wait counts from when these bytes were first seen, as a partial line's: a writer
        # caught mid-write on two runs a day apart is not sealed. Text that ends as an array
        # does (a stray quote keeps it open) waits from when the file was first found cut,
        # however often it is rewritten: each text restarted the wait, and such a file was
        # neither loaded nor quarantined for as long as it was rewritten.
        if (known or {}).get("pending_sha") and (
                known["pending_sha"] == sha or data.rstrip(b" \t\r\n").endswith(b"]")):
            changed_at = known["changed_at"]
        if not sealed(view, changed_at):
            # the known state stays (its format, watermark and generation: the file is the one
            # the lake holds until the array is whole), with what waits
            waiting = {"format": "json_array", "generation": 0, "offset": 0, "lines": 0, "prefix_sha": None,
                       "tail_sha": None, **(known or {}), **sig, "status": "ok", "changed_at": changed_at,
                       "deferred": len(data), "pending_sha": sha, "pending_cut": str(cut)}
            return finish([_waiting(str(cut), len(data))], waiting, known)
        parsed = None
        units.append(Unit("event", event=("sealed", f"the JSON array is still cut short ({cut}): quarantined "
                                                    "whole as corrupt_file")))
    except ValueError:
        parsed = None
    generation = (known or {}).get("generation", 0) + 1
    if (known or {}).get("generation"):
        units.append(Unit("event", event=("rewritten", f"the array changed; earlier rows kept, "
                                                       f"re-read whole as generation {generation}")))
    units.append(Unit("array", data, {"generation": generation}, sha256=sha, parsed=parsed))
    state = {"format": "json_array", "status": "ok", **sig, "generation": generation, "offset": len(data),
             "lines": 0, "prefix_sha": sha, "tail_sha": None, "changed_at": changed_at, **NOT_WAITING}
    return finish(units, state, known)


NOT_WAITING = {"deferred": 0, "pending_sha": None, "pending_cut": None}


def _waiting(cut: str | None, deferred: int) -> Unit:
    return Unit("event", event=("waiting", f"the JSON array is cut short ({cut}): its {deferred:,} bytes "
                                           "deferred, read again when it changes (FLYWHEEL_SEAL_AFTER)"))


def decode(data, meta: dict, settings: Settings, parsed=None) -> tuple[pa.Table, list[Rejected], int]:
    """Each element as a line (its 1-based number and byte offset); an unreadable array is one
    ``corrupt_file`` line. ``parsed``: the elements ``read`` found (``Unit.parsed``; None: found
    here)."""
    data = bytes(data)
    try:
        found = parsed if parsed is not None else list(elements(data))
    except ValueError as exc:
        return LINES_SCHEMA.empty_table(), [Rejected(
            1, 0, "corrupt_file", f"not a readable JSON array: {exc}",
            data[:65536].decode("utf-8", errors="backslashreplace"), None,
            hashlib.sha256(data).hexdigest(), len(data))], 1
    # An element holding bytes that are not UTF-8 (decoded as lone surrogates) is quarantined
    # alone, with its bytes, as a line file's line is: the whole file was corrupt_file.
    rejected = []
    for n, offset, text in found:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            rejected.append(invalid_utf8(n, offset, text.encode("utf-8", "surrogateescape"), what="element"))
    if rejected:
        bad = {r.line_number for r in rejected}
        found = [x for x in found if x[0] not in bad]
    table = arrowcols.table({"line_number": arrowcols.ints([x[0] for x in found]),
                             "byte_offset": arrowcols.ints([x[1] for x in found]),
                             "text": arrowcols.strings([x[2] for x in found], pa.large_string())}, LINES_SCHEMA)
    return table, rejected, len(found) + len(rejected)


# what follows an element: white space, then ',' or ']' (matched where the element ends: slicing
# the rest of the text at each element made a large array quadratic again)
_NEXT = re.compile(r"[ \t\r\n]*[,\]]")


def is_array(head: bytes) -> bool:
    """A file of a source in either format whose first 4 KiB are ``head`` is the older JSON array
    format: its first byte that is not white space or a BOM is ``[``, and its first line is not
    a whole JSON value followed by more lines. A line file whose first line is an array (a stray
    ``["x"]``) was read as one array, "content after the closing ']'": the file was
    ``corrupt_file`` and its lines never loaded; they are lines, that one ``not_an_object``."""
    body = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if body[:1] != b"[":
        return False
    newline = body.find(b"\n")
    if newline < 0 or not body[newline + 1:].strip():
        return True  # one line (so far, or longer than the head)
    try:
        json.loads(body[:newline])
    except ValueError:  # (UnicodeDecodeError too) the array goes on past its first line
        return True
    return False


def elements(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(1-based element number, byte offset, JSON text) of each element of a JSON array.

    Elements are re-serialised verbatim from their own span of the file, so every element is
    classified by the same engine as a line.
    """
    # bytes that are not UTF-8 become lone surrogates (``surrogateescape``), each in its element:
    # ``decode`` quarantines that element alone
    text = data.decode("utf-8-sig", errors="surrogateescape")
    bom = len(data) - len(text.encode("utf-8", "surrogateescape"))
    # the elements' texts are taken from the file, not re-serialised: no value is needed, and an
    # integer of more than 4,300 digits (valid JSON) would not convert
    decoder = json.JSONDecoder(parse_int=lambda digits: 0)
    i = len(text) - len(text.lstrip())
    if not text.startswith("[", i):
        raise ValueError("does not start with '['")
    i += 1
    n = 0
    # the byte offset of character ``i``, advanced as ``i`` moves: measuring the whole prefix at
    # each element made a large array quadratic (8,000 elements of ~250 bytes took 5.1 s, 0.02 s now)
    at_char, at_byte = 0, bom
    while True:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        if i == len(text):
            raise Cut(f"it ends before element {n + 1}")
        if text[i] == "]":
            if text[i + 1:].strip():
                raise ValueError(f"content after the closing ']' at character {i + 1}")
            return
        try:
            _, end = decoder.raw_decode(text, i)
            if not _NEXT.match(text, end):  # a valid start, then more (``01``)
                raise json.JSONDecodeError("unexpected text after a value", text, end)
        except (json.JSONDecodeError, RecursionError) as exc:
            # an element Python cannot read (not JSON, or nested deeper than its recursion limit)
            # is still one element when its brackets and quotes (single quotes too) close: the
            # classifier reads it (DuckDB has no depth limit) or quarantines it alone, and the
            # others load
            end = scan_value(text, i, quotes="\"'")
            if end == CUT:
                raise Cut(f"it ends inside element {n + 1}") from None
            if end < 0:
                detail = f"{exc.msg} at character {exc.pos}" if isinstance(exc, json.JSONDecodeError) \
                    else f"nested too deep to read, at character {i}"
                raise ValueError(f"element {n + 1}: {detail}") from None
        n += 1
        at_byte += len(text[at_char:i].encode("utf-8", "surrogateescape"))
        at_char = i
        yield n, at_byte, text[i:end]
        i = end
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        if i < len(text) and text[i] == ",":
            i += 1
        elif i < len(text) and text[i] == "]":
            continue
        elif i == len(text):
            raise Cut(f"it ends after element {n}")
        else:
            raise ValueError(f"expected ',' or ']' at character {i}")
