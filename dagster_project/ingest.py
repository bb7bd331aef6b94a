"""The lossless ingestion engine: one reader for every source in the registry.

For each file a source's globs match, the engine reads only what is new since its watermark
(bytes after the last complete line for line files, rows after the high-water mark for SQLite),
classifies every line or row (``transforms.classify``), appends loaded rows to ``raw.<source>``,
quarantines the rest with reason, line and offset, and updates the per-file accounting in
``ingest.files`` — all in one transaction per file, so a crash never leaves data without its
watermark or the other way round. A file whose consumed prefix changed (rewritten) or that
shrank is reported in ``ingest.file_events`` and re-read from the start after its earlier rows
are removed, so nothing is double counted.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from dagster_project.settings import Settings
from transforms.classify import build_sql, output_columns, q, strict_verdict
from transforms.localtime import resolve_folds
from transforms.lines import LINES_SCHEMA, Rejected, Split, split_lines
from transforms.spec import SourceSpec
from transforms.sqlfiles import SQL_DIR
from transforms.staging import PROVENANCE

SQLITE_SUFFIXES = {".db", ".sqlite", ".sqlite3"}
CHUNK_BYTES = 256 * 1024 * 1024  # split huge files in windows so memory stays bounded
BATCH_BYTES = 192 * 1024 * 1024  # classify and commit this much input at a time
QUARANTINE_COLUMNS = ["source", "path", "line_number", "byte_offset", "reason", "detail",
                      "raw_text", "raw_bytes", "raw_sha256", "raw_length", "run_id", "quarantined_at"]

Progress = Callable[[str], None]


class AccountingError(RuntimeError):
    """``lines_read ≠ rows_loaded + rows_quarantined + blank_lines`` for some file."""


class SchemaChangedError(RuntimeError):
    """The source's declared fields no longer match its raw table."""


@dataclass
class FileResult:
    path: str
    event: str  # new | appended | unchanged | rewritten | shrunk | sealed | corrupt
    lines: int = 0
    loaded: int = 0
    quarantined: int = 0
    blank: int = 0
    deferred_bytes: int = 0
    bytes_read: int = 0


@dataclass
class SourceReport:
    source: str
    run_id: str
    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0

    def total(self, attr: str) -> int:
        return sum(getattr(f, attr) for f in self.files)

    @property
    def changed_files(self) -> list[FileResult]:
        return [f for f in self.files if f.event != "unchanged"]


# --------------------------------------------------------------------------- setup


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("set TimeZone = 'UTC'")
    con.execute((SQL_DIR / "ingest" / "schema.sql").read_text(encoding="utf-8"))


def raw_columns(spec: SourceSpec) -> list[tuple[str, str]]:
    return output_columns(spec) + PROVENANCE


def ensure_raw_table(con: duckdb.DuckDBPyConnection, spec: SourceSpec) -> None:
    wanted = raw_columns(spec)
    table = f"raw.{q(spec.name)}"
    cols = ", ".join(f"{q(n)} {t}" for n, t in wanted)
    con.execute(f"create table if not exists {table} ({cols})")
    have = con.execute(
        "select column_name from information_schema.columns "
        "where table_schema = 'raw' and table_name = ? order by ordinal_position",
        [spec.name],
    ).fetchall()
    if [c for (c,) in have] != [n for n, _ in wanted]:
        raise SchemaChangedError(
            f"source {spec.name!r}: its declared fields changed since raw.{spec.name} was built; "
            "run `flywheel run --full-refresh` to rebuild it"
        )


def reset_source(con: duckdb.DuckDBPyConnection, spec: SourceSpec) -> None:
    """Forget everything ingested for ``spec`` (full refresh)."""
    con.execute(f"drop table if exists raw.{q(spec.name)}")
    con.execute(f"drop table if exists staging.{q(spec.name)}")
    for table in ("ingest.quarantine", "ingest.files", "ingest.file_events"):
        con.execute(f"delete from {table} where source = ?", [spec.name])


# --------------------------------------------------------------------------- discovery


def discover(spec: SourceSpec, raw_dir: Path) -> list[tuple[str, Path]]:
    """(stored path, real path) of every file the source's globs match, sorted by stored path."""
    found: dict[str, Path] = {}
    for pattern in spec.globs:
        pattern = os.path.expanduser(pattern)
        if os.path.isabs(pattern):
            anchor = Path(pattern).anchor
            matches = Path(anchor).glob(os.path.relpath(pattern, anchor))
        else:
            matches = raw_dir.glob(pattern)
        for real in matches:
            if real.is_file():
                found[stored_path(real, raw_dir)] = real
    return sorted(found.items())


def stored_path(real: Path, raw_dir: Path) -> str:
    try:
        return real.resolve().relative_to(raw_dir.resolve()).as_posix()
    except ValueError:
        return real.resolve().as_posix()


def unclaimed_files(specs: dict[str, SourceSpec], raw_dir: Path) -> list[str]:
    """Files under the raw root that no source claims (worth a warning, never silently ignored)."""
    claimed = {p for spec in specs.values() for p, _ in discover(spec, raw_dir)}
    ignored_suffixes = ("-wal", "-shm", "-journal")
    out = []
    if raw_dir.exists():
        for real in sorted(raw_dir.rglob("*")):
            if real.is_file() and not real.name.startswith(".") and not real.name.endswith(ignored_suffixes):
                rel = stored_path(real, raw_dir)
                if rel not in claimed:
                    out.append(rel)
    return out


# --------------------------------------------------------------------------- the engine


class Ingestor:
    """Ingest one source into an open DuckDB connection (the writer's state database)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, spec: SourceSpec, settings: Settings,
                 run_id: str, progress: Progress | None = None, now: float | None = None):
        self.con = con
        self.spec = spec
        self.settings = settings
        self.run_id = run_id
        self.progress = progress or (lambda _msg: None)
        self.now = time.time() if now is None else now
        self.sql = build_sql(spec, "_lines")
        self.sql_lenient = build_sql(spec, "_lines", check_nonstandard=False)
        self.insert_cols = ", ".join(q(n) for n, _ in output_columns(spec))
        self._batch: list[tuple[str, pa.Table, FileResult]] = []
        self._batch_bytes = 0
        self._saves: list[tuple[dict, FileResult]] = []

    def run(self, full_refresh: bool = False) -> SourceReport:
        started = time.perf_counter()
        ensure_schema(self.con)
        if full_refresh:
            reset_source(self.con, self.spec)
        ensure_raw_table(self.con, self.spec)
        report = SourceReport(self.spec.name, self.run_id)
        files = discover(self.spec, self.settings.raw_dir)
        known = {
            row[0]: row for row in self.con.execute(
                "select path, size_bytes, mtime_ns, offset_bytes, prefix_sha256, lines_read, "
                "high_water_mark, high_water_sha256, deferred_bytes, status, format "
                "from ingest.files where source = ?", [self.spec.name]).fetchall()
        }
        # Files are read one by one but classified and written in batches: one DuckDB pass and
        # one transaction per ~BATCH_BYTES of input, so a lake of thousands of small files costs
        # about what one large file does. Data and watermarks of a batch commit together.
        self.con.execute("begin transaction")
        try:
            for i, (path, real) in enumerate(files, start=1):
                self.progress(f"{self.spec.name}: [{i}/{len(files)}] {path}")
                if real.suffix in SQLITE_SUFFIXES and self.spec.sqlite is not None:
                    result = self._ingest_sqlite(path, real, known.get(path))
                else:
                    result = self._ingest_lines(path, real, known.get(path))
                report.files.append(result)
                if self._batch_bytes >= BATCH_BYTES:
                    self._flush()
                    self.con.execute("commit")
                    self.con.execute("begin transaction")
            self._flush()
            self.con.execute("commit")
        except BaseException:
            self.con.execute("rollback")
            raise
        for path in sorted(set(known) - {p for p, _ in files}):
            if known[path][9] != "missing":
                self._event(path, "missing", "the file is gone; its rows are kept")
                self.con.execute("update ingest.files set status = 'missing' where source = ? and path = ?",
                                 [self.spec.name, path])
        check_accounting(self.con, self.spec.name)
        report.seconds = time.perf_counter() - started
        return report

    # ----------------------------------------------------------------- line files

    def _ingest_lines(self, path: str, real: Path, known) -> FileResult:
        stat = real.stat()
        size, mtime_ns = stat.st_size, stat.st_mtime_ns
        sealed = (self.now - stat.st_mtime) >= self.settings.seal_after_seconds
        if known is not None:
            _, k_size, k_mtime, offset, prefix, lines_done, _, _, deferred, status, fmt = known
            unchanged = k_size == size and k_mtime == mtime_ns
            if unchanged and (deferred == 0 or not sealed) and status != "missing":
                return FileResult(path, "unchanged", deferred_bytes=deferred)
        else:
            offset, prefix, lines_done, fmt = 0, None, 0, None

        with open(real, "rb") as fh:
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
            try:
                event = "new" if known is None else "appended"
                # The hash of the consumed prefix proves the file was only appended to; the same
                # hasher then continues over the new bytes, so each byte is hashed once per run.
                hasher = hashlib.sha256()
                if known is not None and size < offset:
                    event = "shrunk"
                elif known is not None:
                    hasher.update(memoryview(buf)[:offset])
                    if hasher.hexdigest() != prefix or fmt == "json_array":
                        event = "rewritten"
                if event in ("shrunk", "rewritten"):
                    self._forget_file(path, f"{event}: was {known[1]:,} bytes with {offset:,} consumed, "
                                            f"now {size:,} bytes; re-reading it from the start")
                    offset, lines_done, hasher = 0, 0, hashlib.sha256()
                if self.spec.format == "jsonl_or_array" and _first_byte(buf) == b"[":
                    return self._ingest_array(path, buf, size, mtime_ns, event)
                return self._ingest_buffer(path, buf, size, mtime_ns, offset, lines_done, sealed,
                                           event, hasher)
            finally:
                # Arrow arrays may still reference the map (zero-copy); it is unmapped when the
                # last reference goes, so closing it here explicitly would fail.
                del buf

    def _ingest_buffer(self, path, buf, size, mtime_ns, offset, lines_done, sealed, event,
                       hasher) -> FileResult:
        result = FileResult(path, event)
        position = offset
        while True:
            window_end = min(size, position + CHUNK_BYTES)
            view = memoryview(buf)[position:window_end] if size else b""
            split = split_lines(view, start_offset=position, first_line_number=lines_done + 1,
                                max_line_bytes=self.settings.max_line_bytes)
            if split.n_lines == 0 and window_end < size:
                # One line longer than the window: take it whole.
                nl = buf.find(b"\n", position)
                window_end = size if nl < 0 else nl + 1
                view = memoryview(buf)[position:window_end]
                split = split_lines(view, start_offset=position, first_line_number=lines_done + 1,
                                    max_line_bytes=self.settings.max_line_bytes)
            self._load_split(path, split, result)
            hasher.update(view[: split.consumed])
            position += split.consumed
            lines_done += split.n_lines
            del view
            if window_end >= size or split.consumed == 0:
                break

        tail = size - position
        if tail and sealed:
            raw = bytes(buf[position:size])
            self._quarantine([Rejected(
                lines_done + 1, position, "unterminated_last_line",
                f"the last line has no newline and the file has not changed for "
                f"{self.settings.seal_after_seconds / 3600:g} h (FLYWHEEL_SEAL_AFTER)",
                raw.decode("utf-8", errors="backslashreplace"),
                raw if _invalid_utf8(raw) else None)], path)
            hasher.update(raw)
            position, lines_done, tail = size, lines_done + 1, 0
            result.lines += 1
            result.quarantined += 1
            self._event(path, "sealed", f"partial last line of {len(raw)} bytes quarantined")
        result.deferred_bytes = tail
        result.bytes_read = position - (offset if event == "appended" else 0)
        self._save_file(path, "jsonl", size, mtime_ns, result, offset=position,
                        prefix=hasher.hexdigest(), reset=event in ("new", "shrunk", "rewritten"))
        if event in ("shrunk", "rewritten"):
            self._event(path, event, f"re-read: {result.lines} lines")
        return result

    def _ingest_array(self, path, buf, size, mtime_ns, event) -> FileResult:
        """The older save format: one JSON array of objects; each element is a record."""
        result = FileResult(path, event)
        text_bytes = bytes(buf[:size])
        try:
            elements = list(_array_elements(text_bytes))
        except ValueError as exc:
            self._quarantine([Rejected(1, 0, "corrupt_file", f"not a readable JSON array: {exc}",
                                       text_bytes[:65536].decode("utf-8", errors="backslashreplace"),
                                       None, hashlib.sha256(text_bytes).hexdigest(), size)], path)
            result.lines, result.quarantined = 1, 1
        else:
            table = pa.table({
                "line_number": pa.array([e[0] for e in elements], pa.int64()),
                "byte_offset": pa.array([e[1] for e in elements], pa.int64()),
                "text": pa.array([e[2] for e in elements], pa.large_string()),
            }, schema=LINES_SCHEMA)
            self._load_split(path, Split(lines=table, n_lines=len(elements)), result)
        self._save_file(path, "json_array", size, mtime_ns, result, offset=size,
                        prefix=hashlib.sha256(text_bytes).hexdigest(), reset=True)
        return result

    # ----------------------------------------------------------------- SQLite

    def _ingest_sqlite(self, path: str, real: Path, known) -> FileResult:
        sq = self.spec.sqlite
        stat = real.stat()
        hwm = known[6] if known is not None and known[6] is not None else 0
        event = "new" if known is None else "appended"
        try:
            rows, rewritten = self._read_sqlite(real, hwm, known[7] if known else None)
        except sqlite3.DatabaseError as exc:
            if known is not None and known[9] == "corrupt" and known[1] == stat.st_size \
                    and known[2] == stat.st_mtime_ns:
                return FileResult(path, "unchanged")
            result = FileResult(path, "corrupt", lines=1, quarantined=1)
            self._forget_file(path, None)
            self._quarantine([Rejected(0, None, "corrupt_file",
                                       f"cannot read table {sq.table!r}: {exc}", None, None)], path)
            self._save_file(path, "sqlite", stat.st_size, stat.st_mtime_ns, result, status="corrupt",
                            reset=True)
            self._event(path, "corrupt", str(exc))
            return result
        if rewritten:
            event = "rewritten"
            self._forget_file(path, f"rewritten: the row at {sq.key} = {hwm} changed or vanished; "
                                    "re-reading every row")
            rows, _ = self._read_sqlite(real, 0, None)
        result = FileResult(path, event if rows else ("unchanged" if known else "new"))
        if rows:
            table = pa.table({
                "line_number": pa.array([r[0] for r in rows], pa.int64()),
                "byte_offset": pa.nulls(len(rows), pa.int64()),
                "text": pa.array([r[1] if r[1] is not None else "null" for r in rows], pa.large_string()),
            }, schema=LINES_SCHEMA)
            self._load_split(path, Split(lines=table, n_lines=len(rows)), result)
            last_key, last_text = rows[-1]
            hwm_sha = _text_sha(last_text)
            hwm = last_key
        else:
            hwm_sha = known[7] if known is not None and not rewritten else None
        self._save_file(path, "sqlite", stat.st_size, stat.st_mtime_ns, result, hwm=hwm if rows or known else None,
                        hwm_sha=hwm_sha, reset=event in ("new", "rewritten"))
        return result

    def _read_sqlite(self, real: Path, hwm: int, hwm_sha: str | None):
        """Rows after the high-water mark, read inside one read transaction (a consistent
        snapshot even while a writer appends in WAL mode); also whether the file was rewritten."""
        sq = self.spec.sqlite
        uri = f"file:{real.resolve().as_posix()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=30)
        try:
            conn.execute("begin")  # deferred: the first select fixes the snapshot
            key, record = q(sq.key), sq.record_sql
            rewritten = False
            if hwm:
                at = conn.execute(f"select {record} from {q(sq.table)} where {key} = ?", [hwm]).fetchone()
                rewritten = at is None or _text_sha(at[0]) != hwm_sha
            rows = conn.execute(
                f"select {key}, {record} from {q(sq.table)} where {key} > ? order by {key}",
                [0 if rewritten else hwm]).fetchall()
            conn.execute("commit")
            return rows, rewritten
        finally:
            conn.close()

    # ----------------------------------------------------------------- classification

    def _load_split(self, path: str, split, result: FileResult) -> None:
        """Queue a file's candidate lines for the next batch; quarantine pre-JSON rejects now."""
        result.lines += split.n_lines
        if split.rejected:
            self._quarantine(split.rejected, path)
            result.quarantined += len(split.rejected)
        if split.lines.num_rows:
            self._batch.append((path, split.lines, result))
            self._batch_bytes += split.lines.nbytes

    def _flush(self) -> None:
        """Classify every queued line in one DuckDB pass, write rows, quarantine and accounting."""
        if self._batch:
            results = {path: result for path, _, result in self._batch}
            tables = []
            for path, table, _ in self._batch:
                ids = pa.DictionaryArray.from_arrays(pa.array(np.zeros(table.num_rows, dtype=np.int32)),
                                                     pa.array([path]))
                tables.append(table.append_column("path", ids.cast(pa.string())))
            lines = pa.concat_tables(tables)
            self._batch, self._batch_bytes = [], 0
            self.con.register("_lines", lines)
            try:
                self.con.execute(f"create or replace temp table _classified as {self.sql.sql}", self.sql.params)
            finally:
                self.con.unregister("_lines")
            del lines, tables
            self._settle_strict()
            # DST fold: second passes through a repeated local hour, from each file's write order
            resolve_folds(self.con, self.spec, "_classified", f"raw.{q(self.spec.name)}")
            counts = self.con.execute(
                "select path, coalesce(reason, 'loaded') as outcome, count(*) from _classified "
                "group by all").fetchall()
            for path, outcome, n in counts:
                result = results[path]
                if outcome == "loaded":
                    result.loaded += n
                elif outcome == "blank":
                    result.blank += n
                else:
                    result.quarantined += n
            self.con.execute(
                f"insert into raw.{q(self.spec.name)} ({self.insert_cols}, path, line_number, byte_offset, ingest_run_id) "
                f"select {self.insert_cols}, path, line_number, byte_offset, $run from _classified "
                "where reason is null order by path, line_number",
                {"run": self.run_id})
            self.con.execute(
                "insert into ingest.quarantine by name "
                "select $source as source, path, line_number, byte_offset, reason, detail, "
                "rtrim(text, e'\\r\\n') as raw_text, $run as run_id, now() as quarantined_at "
                "from _classified where reason is not null and reason <> 'blank'",
                {"source": self.spec.name, "run": self.run_id})
            self.con.execute("drop table _classified")
        self._write_saves()

    def _settle_strict(self) -> None:
        """Give flagged rows their final verdict with Python's strict JSON parser."""
        flagged = self.con.execute(
            "select path, line_number, byte_offset, text, reason from _classified "
            "where reason in ('strict_check', 'invalid_json', 'duplicate_key')").fetchall()
        if not flagged:
            return
        verdicts, again = [], []
        for path, line_number, byte_offset, text, reason in flagged:
            new_reason, detail = strict_verdict(text, reason)
            if new_reason is None:
                again.append((line_number, byte_offset, text, path))
            else:
                verdicts.append((new_reason, detail, path, line_number))
        if verdicts:
            self.con.executemany(
                "update _classified set reason = ?, detail = ? where path = ? and line_number = ?", verdicts)
        if again:
            table = pa.table({"line_number": pa.array([a[0] for a in again], pa.int64()),
                              "byte_offset": pa.array([a[1] for a in again], pa.int64()),
                              "text": pa.array([a[2] for a in again], pa.large_string()),
                              "path": pa.array([a[3] for a in again], pa.string())})
            self.con.register("_lines", table)
            try:
                self.con.execute("delete from _classified where reason = 'strict_check'")
                self.con.execute(f"insert into _classified {self.sql_lenient.sql}", self.sql_lenient.params)
            finally:
                self.con.unregister("_lines")

    # ----------------------------------------------------------------- bookkeeping

    def _quarantine(self, rejected: list[Rejected], path: str) -> None:
        now = datetime.now(timezone.utc)
        self.con.executemany(
            f"insert into ingest.quarantine ({', '.join(QUARANTINE_COLUMNS)}) "
            f"values ({', '.join('?' * len(QUARANTINE_COLUMNS))})",
            [(self.spec.name, path, r.line_number, r.byte_offset, r.reason, r.detail, r.raw_text,
              r.raw_bytes, r.raw_sha256, r.raw_length, self.run_id, now) for r in rejected])

    def _forget_file(self, path: str, why: str | None) -> None:
        self.con.execute(f"delete from raw.{q(self.spec.name)} where path = ?", [path])
        self.con.execute("delete from ingest.quarantine where source = ? and path = ?", [self.spec.name, path])
        if why:
            self._event(path, why.split(":")[0], why)

    def _event(self, path: str, event: str, detail: str) -> None:
        self.con.execute(
            "insert into ingest.file_events values (?, ?, ?, ?, ?, now())",
            [self.run_id, self.spec.name, path, event, detail])

    def _save_file(self, path, fmt, size, mtime_ns, result: FileResult, *, offset=0, prefix=None,
                   hwm=None, hwm_sha=None, status="ok", reset=False) -> None:
        """Queue the file's accounting; written with its batch, once its lines are classified."""
        self._saves.append(({
            "source": self.spec.name, "path": path, "format": fmt, "size_bytes": size, "mtime_ns": mtime_ns,
            "offset_bytes": offset, "prefix_sha256": prefix, "high_water_mark": hwm,
            "high_water_sha256": hwm_sha, "status": status, "reset": reset}, result))

    def _write_saves(self) -> None:
        """Upsert every queued file's accounting in one statement; counts accumulate unless the
        file was re-read whole (``reset``)."""
        if not self._saves:
            return
        rows = [{**row, "lines_read": r.lines, "rows_loaded": r.loaded, "rows_quarantined": r.quarantined,
                 "blank_lines": r.blank, "deferred_bytes": r.deferred_bytes} for row, r in self._saves]
        self._saves = []
        updates = pa.Table.from_pylist(rows, schema=pa.schema([
            ("source", pa.string()), ("path", pa.string()), ("format", pa.string()),
            ("size_bytes", pa.int64()), ("mtime_ns", pa.int64()), ("offset_bytes", pa.int64()),
            ("prefix_sha256", pa.string()), ("high_water_mark", pa.int64()),
            ("high_water_sha256", pa.string()), ("status", pa.string()), ("reset", pa.bool_()),
            ("lines_read", pa.int64()), ("rows_loaded", pa.int64()), ("rows_quarantined", pa.int64()),
            ("blank_lines", pa.int64()), ("deferred_bytes", pa.int64())]))
        self.con.register("_file_updates", updates)
        try:
            self.con.execute(
                """
                insert into ingest.files as f (source, path, format, size_bytes, mtime_ns, lines_read,
                    rows_loaded, rows_quarantined, blank_lines, deferred_bytes, offset_bytes,
                    prefix_sha256, high_water_mark, high_water_sha256, status, first_run_id,
                    last_run_id, last_ingested_at)
                select u.source, u.path, u.format, u.size_bytes, u.mtime_ns,
                    u.lines_read + case when u.reset then 0 else coalesce(old.lines_read, 0) end,
                    u.rows_loaded + case when u.reset then 0 else coalesce(old.rows_loaded, 0) end,
                    u.rows_quarantined + case when u.reset then 0 else coalesce(old.rows_quarantined, 0) end,
                    u.blank_lines + case when u.reset then 0 else coalesce(old.blank_lines, 0) end,
                    u.deferred_bytes, u.offset_bytes, u.prefix_sha256, u.high_water_mark,
                    u.high_water_sha256, u.status, $run, $run, now()
                from _file_updates u
                left join ingest.files old using (source, path)
                on conflict (source, path) do update set
                    format = excluded.format, size_bytes = excluded.size_bytes,
                    mtime_ns = excluded.mtime_ns, lines_read = excluded.lines_read,
                    rows_loaded = excluded.rows_loaded, rows_quarantined = excluded.rows_quarantined,
                    blank_lines = excluded.blank_lines, deferred_bytes = excluded.deferred_bytes,
                    offset_bytes = excluded.offset_bytes, prefix_sha256 = excluded.prefix_sha256,
                    high_water_mark = excluded.high_water_mark,
                    high_water_sha256 = excluded.high_water_sha256, status = excluded.status,
                    last_run_id = excluded.last_run_id, last_ingested_at = excluded.last_ingested_at
                """,
                {"run": self.run_id})
        finally:
            self.con.unregister("_file_updates")


def check_accounting(con: duckdb.DuckDBPyConnection, source: str | None = None) -> None:
    """Fail loudly when any file's lines are not all accounted for."""
    bad = con.execute(
        "select source, path, lines_read, rows_loaded, rows_quarantined, blank_lines from ingest.files "
        "where ($source is null or source = $source) "
        "and lines_read <> rows_loaded + rows_quarantined + blank_lines",
        {"source": source}).fetchall()
    if bad:
        lines = [f"  {s}: {p}: read {r} ≠ loaded {l} + quarantined {qq} + blank {b}"
                 for s, p, r, l, qq, b in bad]
        raise AccountingError("ingestion accounting does not balance:\n" + "\n".join(lines))
    # The stored rows must match the counters too: nothing inserted twice, nothing missing.
    mismatch = con.execute(
        "with stored as (select source, path, count(*) as n from ingest.quarantine "
        "where ($source is null or source = $source) group by all) "
        "select f.source, f.path, f.rows_quarantined, coalesce(s.n, 0) from ingest.files f "
        "left join stored s using (source, path) "
        "where ($source is null or f.source = $source) and f.rows_quarantined <> coalesce(s.n, 0)",
        {"source": source}).fetchall()
    if mismatch:
        raise AccountingError("quarantine rows do not match the counters: " + "; ".join(
            f"{s}: {p}: counted {c}, stored {n}" for s, p, c, n in mismatch))


# --------------------------------------------------------------------------- small helpers


def _text_sha(text: str | None) -> str:
    return hashlib.sha256((text or "").encode("utf-8", errors="surrogatepass")).hexdigest()


def _first_byte(buf) -> bytes:
    for i in range(min(len(buf), 4096)):
        b = bytes(buf[i:i + 1])
        if b not in (b" ", b"\t", b"\r", b"\n", b"\xef", b"\xbb", b"\xbf"):
            return b
    return b""


def _invalid_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def _array_elements(data: bytes) -> Iterator[tuple[int, int, str]]:
    """(1-based element number, byte offset, JSON text) of each element of a JSON array.

    Elements are re-serialised verbatim from their own span of the file, so every element is
    classified by the same engine as a line.
    """
    text = data.decode("utf-8-sig")
    bom = len(data) - len(text.encode("utf-8"))
    decoder = json.JSONDecoder()
    i = len(text) - len(text.lstrip())
    if not text.startswith("[", i):
        raise ValueError("does not start with '['")
    i += 1
    n = 0
    # Byte offsets: track the character index and convert once per element.
    while True:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        if i < len(text) and text[i] == "]":
            rest = text[i + 1:].strip()
            if rest:
                raise ValueError(f"content after the closing ']' at character {i + 1}")
            return
        try:
            _, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise ValueError(f"element {n + 1}: {exc.msg} at character {exc.pos}") from exc
        n += 1
        yield n, bom + len(text[:i].encode("utf-8")), text[i:end]
        i = end
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        if i < len(text) and text[i] == ",":
            i += 1
        elif i < len(text) and text[i] == "]":
            continue
        else:
            raise ValueError(f"expected ',' or ']' at character {i}")
