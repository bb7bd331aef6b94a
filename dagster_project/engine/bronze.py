"""The bronze record: every byte and row the lake ever read, as it was read.

Layout under ``<state_dir>/bronze/``::

    objects/<name[:2]>/<name>.zst      one zstd object per batch (the concatenated unit payloads),
                                       named by its parts (``object_name``: the sha256 of
                                       each part's sha256 and length)
    <source>/<first seq:012d>.jsonl    one manifest segment per batch: one JSON entry per unit

An entry says what was observed (``kind``), where (``path``, byte span or SQLite keys), when
(``seq``, ``run_id``, ``observed_at``), where its bytes are (``object``, ``offset``, ``length``,
``sha256``) and what the lake knew about the file afterwards (``state``: watermark, generation,
size, mtime...). Objects are written before the segment that names them, and a segment appears
by an atomic rename, so a crash leaves at worst an unreferenced object. Raw, quarantine and the
accounting are a pure function of the segments replayed in ``seq`` order; the watermarks used to
read producers' files come from here too, so losing ``state.duckdb`` loses nothing.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from dagster_project.settings import Settings


FRAME_BYTES = 4 * 1024 * 1024  # an object's payload is compressed this much at a time (``_blob``)
# Held while a batch writes its object and then the segment that names it, and while a
# collection (``privacy.collect_objects``) lists segments and deletes the objects none names: two
# sources' steps run at once (executor), and a collection between another step's object and its
# segment would delete bytes that step then records.
OBJECTS_LOCK = threading.Lock()
# Objects a privacy rewrite (``privacy.scrub_bronze``) has written or will reuse whose segments do
# not name them yet, with how many rewrites wait on each: a collection leaves them alone. The
# rewrite reads and scrubs a whole source, too long to hold OBJECTS_LOCK while other sources'
# batches wait; changed under OBJECTS_LOCK.
PENDING: Counter[str] = Counter()


@dataclass
class Entry:
    """One manifest entry; ``data`` and ``parsed`` are attached in memory only (never serialised)."""

    seq: int
    source: str
    path: str
    kind: str  # span | array | rows | tombstones | corrupt | event
    run_id: str
    observed_at: str
    meta: dict = field(default_factory=dict)
    state: dict | None = None
    event: list | None = None  # [name, detail]
    object: str | None = None
    offset: int = 0
    length: int = 0
    sha256: str | None = None
    data: object = None
    # what the reader found in ``data`` (``Unit.parsed``)
    parsed: object = field(default=None, repr=False, compare=False)

    def to_json(self) -> str:
        d = {k: v for k, v in self.__dict__.items() if k not in ("data", "parsed")}
        return json.dumps(d, separators=(",", ":"), ensure_ascii=False)


def bronze_dir(settings: Settings) -> Path:
    return settings.state_dir / "bronze"


class Bronze:
    """The record of one source: read its manifest, append batches, fetch payloads."""

    def __init__(self, settings: Settings, source: str):
        self.root = bronze_dir(settings)
        self.source = source
        self.dir = self.root / source
        self._objects: dict[str, bytes] = {}

    def entries(self) -> list[Entry]:
        """Every entry of the source, in observation order."""
        return self._read([self.dir / name for name in self._segment_names()])

    def missing_objects(self, entries: list[Entry]) -> list[Path]:
        """The objects ``entries`` name that are not on disk (deleted by hand, a restore that
        missed them)."""
        names = sorted({e.object for e in entries if e.object is not None})
        return [path for path in (object_path(self.root, name) for name in names) if not path.exists()]

    def entries_after(self, seq: int) -> list[Entry] | None:
        """The entries after ``seq`` (``ingest.bronze_applied``: what raw lacks), reading only the
        segments that can hold one; None when bronze does not hold entry ``seq`` itself (its
        manifest lost, or restored from an older copy), so the caller reads every entry.

        A segment holds one batch, the consecutive seqs from the one it is named by, and
        segments follow each other; a replay may apply a segment in two transactions, so the
        last segment starting at or before ``seq`` is read too."""
        names = self._segment_names()
        if seq > 0:
            # the last segment named by a seq at or before ``seq`` (names sort as their seqs)
            holding = bisect.bisect_right(names, f"{seq:012d}.jsonl") - 1
            if holding < 0:
                return None
            names = names[holding:]
        found = self._read([self.dir / name for name in names])
        if seq > 0 and not any(e.seq == seq for e in found):
            return None
        return [e for e in found if e.seq > seq]

    def _segment_names(self) -> list[str]:
        """Every segment's file name, in seq order (names are zero-padded seqs). Each run lists
        them for each source, and a segment is added per batch for as long as the lake lives: a
        lake a sensor runs every minute holds 100,000 after ten weeks, which took 0.84 s to glob
        and sort as paths, and takes 0.08 s to list and sort as names (paths are made only for
        the segments read)."""
        try:
            return sorted(name for name in os.listdir(self.dir) if name.endswith(".jsonl"))
        except (FileNotFoundError, NotADirectoryError):
            return []

    @staticmethod
    def _read(segments: list[Path]) -> list[Entry]:
        out: list[Entry] = []
        for segment in segments:
            with open(segment, encoding="utf-8") as fh:
                out.extend(Entry(**json.loads(line)) for line in fh if line.strip())
        out.sort(key=lambda e: e.seq)
        return out

    def write(self, entries: list[Entry]) -> None:
        """Persist a batch: one compressed object for all payloads, then the segment."""
        if not entries:
            return
        parts, pos = [], 0
        for e in entries:
            if e.data is None:
                continue
            view = memoryview(e.data)
            e.offset, e.length = pos, view.nbytes
            e.sha256 = e.sha256 or hashlib.sha256(view).hexdigest()  # the reader's, when it hashed these bytes
            parts.append(view)
            pos += view.nbytes
        target = blob = None
        if parts:
            sha = name_for(self.root, parts, [(e.sha256, e.length) for e in entries if e.data is not None])
            target = object_path(self.root, sha)
            if not target.exists():  # compressed before the lock: other sources' writes go on
                blob = _blob(parts)
            for e in entries:
                if e.data is not None:
                    e.object = sha
        text = "".join(e.to_json() + "\n" for e in entries)
        with OBJECTS_LOCK:  # the object and the segment naming it, with no collection in between
            if target is not None and not target.exists():
                _atomic_write(target, blob if blob is not None else _blob(parts))
            _atomic_write(self.dir / f"{entries[0].seq:012d}.jsonl", text.encode("utf-8"))
        del parts, blob

    def payload(self, entry: Entry) -> memoryview | None:
        if entry.object is None:
            return None
        data = self._objects.get(entry.object)
        if data is None:
            data = _read(object_path(self.root, entry.object))
            self._objects = {entry.object: data}  # keep one object: replay walks them in order
        return memoryview(data)[entry.offset:entry.offset + entry.length]  # no copy


def object_name(parts: list[tuple[str, int]]) -> str:
    """The name of the object concatenating ``parts`` (each its sha256 and length), in order.

    No byte is hashed twice: every part's sha256 is known already (the reader's digest of a span
    from byte 0, else bronze's), and hashing the 1M bench lake's 700 MB of interactions a second
    time cost 0.6 s of CPU in a full refresh. The same parts name the same bytes, so an object
    that exists is not written again (``name_for`` compares its bytes first, on that rare
    path: a digest is taken when its part is read). Objects written under the old names (the
    sha256 of the whole content) keep them: a name is only looked up."""
    listing = "".join(f"{sha} {length}\n" for sha, length in parts)
    return hashlib.sha256(("flywheel-bronze-object/2\n" + listing).encode()).hexdigest()


def name_for(root: Path, payload: list, parts: list[tuple[str, int]]) -> str:
    """The name under which ``payload`` (byte strings, each a part of ``parts``) is stored in ``root``.

    ``object_name``, unless an object of that name holds other bytes: the parts' digests were
    taken as they were read, and a file rewritten in place since leaves bytes unlike them, here
    or in the object found. Then (rarely: only an existing name is compared) the payload takes
    the sha256 of its own content, a name no listing gives."""
    name = object_name(parts)
    found = object_path(root, name)
    if found.exists() and _read(found) != b"".join(payload):
        content = hashlib.sha256()
        for part in payload:
            content.update(part)
        name = content.hexdigest()
    return name


def object_path(root: Path, name: str) -> Path:
    return root / "objects" / name[:2] / f"{name}.zst"


def _read(path: Path) -> bytes:
    """An object's uncompressed bytes."""
    blob = path.read_bytes()
    return pa.decompress(blob[8:], int.from_bytes(blob[:8], "little"), "zstd", asbytes=True)


def _blob(payload: list) -> bytes:
    """An object file: the length of ``payload`` (byte strings, concatenated; 8 bytes,
    little-endian), then the payload in zstd, as frames of about ``FRAME_BYTES`` (a zstd stream
    may hold several frames, and one decompression reads them all).

    Joining a batch's 384 MB into one buffer held the GIL for ~0.2 s, and the thread that
    classifies the batch, starting this one, waited for it to let go: 0.45 s of each 1M-lake
    full refresh's interaction ingest. Small parts are gathered into a frame (joined in ~1 ms),
    large ones cut into frames compressed where they lie; compression runs without the GIL."""
    frames, group, size, total = [], [], 0, 0
    for part in payload:
        view = memoryview(part)
        total += view.nbytes
        for at in range(0, view.nbytes, FRAME_BYTES):  # a span of a large file is cut
            piece = view[at:at + FRAME_BYTES]
            group.append(piece)
            size += piece.nbytes
            if size >= FRAME_BYTES:
                frames.append(_frame(group))
                group, size = [], 0
    if group or not frames:
        frames.append(_frame(group))
    return b"".join([total.to_bytes(8, "little"), *frames])


def _frame(pieces: list[memoryview]) -> bytes:
    """One zstd frame of ``pieces``: a single piece is compressed where it lies, several are
    joined first (a few megabytes)."""
    return pa.compress(pieces[0] if len(pieces) == 1 else b"".join(pieces), "zstd", asbytes=True)


def _durable_temp(directory: Path, data: bytes) -> str:
    """A temp file in ``directory`` holding ``data``, fsynced; its path."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        os.unlink(tmp)
        if exc.filename is not None:
            raise
        # a write to an open file names none: a full disk was a bare "[Errno 28] No space left on device"
        raise OSError(exc.errno, exc.strerror, tmp) from exc
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def create_once(target: Path, data: bytes) -> None:
    """``target`` holding ``data``, unless a file is there already: one another process made
    first is never replaced (a link fails where a rename would overwrite)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _durable_temp(target.parent, data)
    try:
        os.link(tmp, target)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def _atomic_write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _durable_temp(target.parent, data)
    try:
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def bronze_usage(settings: Settings) -> dict:
    """What the record costs: objects, compressed bytes on disk, raw bytes they represent."""
    root = bronze_dir(settings)
    objects = compressed = represented = 0
    for obj in (root / "objects").glob("*/*.zst") if root.exists() else []:
        objects += 1
        compressed += obj.stat().st_size
        with open(obj, "rb") as fh:
            represented += int.from_bytes(fh.read(8), "little")
    segments = sum(1 for _ in root.glob("*/*.jsonl")) if root.exists() else 0
    return {"objects": objects, "segments": segments, "compressed_bytes": compressed,
            "raw_bytes": represented}
