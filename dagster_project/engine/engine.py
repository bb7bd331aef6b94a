"""The ingestion engine: observe producers' files, record what is new in bronze, classify it.

A run of one source:

1. replay bronze entries not yet applied to raw (all of them after ``--full-refresh`` or when
   ``state.duckdb`` is gone), in observation order;
2. ask each file's reader what is new relative to what bronze holds (``FileView.known``);
3. per batch of ~``BATCH_BYTES``: write the units to bronze (one compressed object, one manifest
   segment), then classify them (``transforms.classify``) and write raw, quarantine and
   accounting in one DuckDB transaction.

Step 3 is the same function for live reads and replays, so raw/staging are a pure function of
bronze and incremental == full refresh whatever the producers did to their files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import duckdb
import pyarrow as pa

from dagster_project.engine import bronze as bronze_mod
from dagster_project.engine import known as known_mod
from dagster_project.engine.accounting import (BronzeDamaged, FileResult, SourceReport, check_accounting,
                                               ensure_raw_table, ensure_schema, check_legacy_raw, reset_source)
from dagster_project.engine.discovery import SQLITE_SUFFIXES, listing, unlisted_covers
from dagster_project.engine.readers import FileView, Unit, open_file
from dagster_project.engine.readers import json_array, jsonl, sqlite
from dagster_project.settings import Settings
from dagster_project import versions
from transforms import arrowcols
from transforms.sqlfiles import registered, transaction
from transforms.localtime import resolve_folds
from transforms.classify import build_sql, output_columns, q, strict_verdict
from transforms.lines import BATCH_ROWS, Rejected
from transforms.staging import log_tombstones
from transforms.spec import SourceSpec

DECODERS = {"span": jsonl.decode, "array": json_array.decode, "rows": sqlite.decode}
# Classify and commit this much input at a time: memory is bounded by the batch, not the lake.
# Each batch's insert leaves partly filled row groups at its end, which the next checkpoint merges
# by rewriting them and their neighbours: on the 1M lake's 660 MB of interactions, 192 MB batches
# (3 seams) cost 2.9 s and 219 MB of checkpoint writes, 384 MB (1 seam) 1.0 s and 52 MB, for 1.9
# instead of 1.4 GB peak RSS while ingesting.
BATCH_BYTES = 384 * 1024 * 1024
RETENTION_PENDING = "retention_pending"  # under the state dir: a source whose retention pass is unfinished
QUARANTINE_COLUMNS = ["source", "path", "line_number", "byte_offset", "reason", "detail",
                      "raw_text", "raw_bytes", "raw_sha256", "raw_length", "run_id", "quarantined_at"]
FILE_STATE = pa.schema([
    ("source", pa.string()), ("path", pa.string()), ("format", pa.string()), ("size_bytes", pa.int64()),
    ("mtime_ns", pa.int64()), ("offset_bytes", pa.int64()), ("prefix_sha256", pa.string()),
    ("high_water_mark", pa.int64()), ("status", pa.string()), ("deferred_bytes", pa.int64()),
    ("generation", pa.int64()), ("has_state", pa.bool_()), ("lines_read", pa.int64()),
    ("rows_loaded", pa.int64()), ("rows_quarantined", pa.int64()), ("blank_lines", pa.int64()),
    ("first_run_id", pa.string()), ("run_id", pa.string()), ("at", pa.timestamp("us", tz="UTC"))])

Progress = Callable[[str], None]


# --------------------------------------------------------------------------- the engine


def _denied(raw_dir: Path, stored: str) -> bool:
    """Whether looking up the file stored as ``stored`` is refused (permission denied)."""
    try:
        os.stat(stored if os.path.isabs(stored) else raw_dir / stored)
    except PermissionError:
        return True
    except OSError:
        pass
    return False


def _bytes_held(unit: Unit) -> int:
    """What a unit holds until its batch is applied: its bytes, and what its reader found in them
    (``Unit.parsed``: a span's newline positions, 8 bytes a line, more than the line itself for
    lines under 8 bytes; a rows unit's records, about its payload again)."""
    data = memoryview(unit.data).nbytes if unit.data is not None else 0
    parsed = unit.parsed
    return data + (parsed.nbytes if hasattr(parsed, "nbytes") else data if parsed is not None else 0)


def declaration_key(spec: SourceSpec) -> str:
    """A fingerprint of how ``spec`` reads its records: every declaration but where its files are
    (globs) and its description."""
    return hashlib.sha256(repr(dataclasses.replace(spec, globs=(), description="")).encode("utf-8")).hexdigest()


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
        self.out_cols = [n for n, _ in output_columns(spec)]
        self.bronze = bronze_mod.Bronze(settings, spec.name)
        self._generation_starts: dict[tuple[str, int | None], int] | None = None  # read once, when needed
        self.results: dict[str, FileResult] = {}

    def run(self, full_refresh: bool = False, read_files: bool = True) -> SourceReport:
        """``read_files`` False (a source disabled in the sources file): no producer file is
        looked at, but what the lake holds still follows retention and erasure (raw replayed from
        bronze when they changed it)."""
        from dagster_project import privacy

        started = time.perf_counter()
        ensure_schema(self.con)
        legacy = check_legacy_raw(self.con, self.settings, self.spec.name, read_files)
        # The lake's own retention removes expired records from bronze; raw follows by replay. A
        # marker spans the rewrite and the reset: a run killed in between (bronze rewritten, raw
        # not reset) leaves it, and the next run, which finds nothing left to expire, replays. It
        # is written only when a record expires (a pass that rewrites nothing needs no replay).
        marker = self.settings.state_dir / RETENTION_PENDING / self.spec.name
        interrupted = marker.exists()
        counted: set[str] = set()  # the records retention removed from bronze now
        expired = privacy.enforce_retention(self.settings, self.spec,
                                            before_rewrite=lambda: bronze_mod._atomic_write(marker, b""),
                                            expired=counted)
        # what raw (replayed below) and staging (in its own step) lose: their rows expired now
        lost = {layer: privacy.expired_rows(self.con, self.settings, self.spec, layer) if expired else 0
                for layer in ("raw", "staging")}
        declared = declaration_key(self.spec)
        row = self.con.execute("select fingerprint from lineage.source_declarations where source = ?",
                               [self.spec.name]).fetchone()
        # Declared otherwise than raw was read with (a time zone set in the sources file: one
        # snapshot held the same local time as two instants, old rows and new): replayed from bronze.
        redeclared = row is not None and row[0] != declared
        full_refresh = full_refresh or expired > 0 or interrupted or redeclared or legacy
        self.matcher = privacy.ingest_matcher(self.settings, self.spec)
        if full_refresh:
            self._check_bronze()
            reset_source(self.con, self.spec.name)
        if row is None or redeclared:
            self.con.execute("insert or replace into lineage.source_declarations values (?, ?)",
                             [self.spec.name, declared])
        marker.unlink(missing_ok=True)
        ensure_raw_table(self.con, self.spec)
        report = SourceReport(self.spec.name, self.run_id)

        row = self.con.execute("select seq from ingest.bronze_applied where source = ?", [self.spec.name]).fetchone()
        applied = row[0] if row else 0
        known = known_mod.load(self.con, self.spec.name, applied)
        pending = None if known is None else self.bronze.entries_after(applied)
        if pending is None:  # no cache through ``applied``, or bronze lacks that entry: every entry, once
            entries = self.bronze.entries()
            with transaction(self.con):
                known_mod.rebuild(self.con, self.spec.name, [e for e in entries if e.seq <= applied], applied)
            pending = [e for e in entries if e.seq > applied]
            known = known_mod.States(known_mod.states(entries), settled={})  # this once, every file is looked at
        else:
            known.update(known_mod.states(pending))
        self._replay(pending)
        report.replayed_entries = len(pending)
        # each record counted once, by its hash, as those kept out at read are: one that came back
        # (a run as of an earlier day, a longer window) and expired again was counted each time
        first_time = self._note_expired(counted)
        if expired:
            report.expired = expired  # (the step's line: the rows removed now)
            privacy.record_erasure(self.con, "retention", {self.spec.name: {"bronze": first_time, **lost}})
        self.next_seq = max(applied, pending[-1].seq if pending else 0) + 1

        if not read_files:
            check_accounting(self.con, self.spec.name)
            report.seconds = time.perf_counter() - started
            return report
        unlisted = report.unlisted  # where the listing may not look (permission denied)
        files = listing(self.spec, self.settings.raw_dir, unlisted, exclude=self.settings.own_dirs)
        # line files whose stat is the one their cached state recorded: unchanged, their state unread
        settled = known.settled if self.spec.format == "jsonl" and self.settings.trust_ctime else {}
        batch: list[bronze_mod.Entry] = []
        size = 0  # bytes the batch holds (each file's new bytes read into memory: no file stays open)
        for i, (path, real) in enumerate(files, start=1):
            self.progress(f"{self.spec.name}: [{i}/{len(files)}] {path}")
            if jsonl.settled_unchanged(real, settled.get(path)):
                self.results.setdefault(path, FileResult(path, "unchanged")).event = "unchanged"
                continue
            units, event = self._observe(path, Path(real), known.get(path))
            result = self.results.setdefault(path, FileResult(path, event))
            result.event = event
            for unit in units:
                batch.append(self._entry(path, unit))
                size += _bytes_held(unit)
                if unit.kind == "span":
                    result.bytes_read += unit.meta["end"] - unit.meta["start"]
            state = next((u.state for u in reversed(units) if u.state), known.get(path))
            result.deferred_bytes = (state or {}).get("deferred", 0) or 0
            if size >= BATCH_BYTES:
                self._commit(batch)
                batch, size = [], 0
        present = {p for p, _ in files}
        for path in sorted(set(known) - present):
            if known[path].get("status") == "missing":
                continue
            if unlisted_covers(unlisted, path) or _denied(self.settings.raw_dir, path):
                # Its directory may not be listed, or the file may not be looked up (a glob through
                # Path.glob, which skips such a directory): not gone, as an unreadable file (taken
                # as missing, each came back as a new generation, read again whole).
                batch.append(self._entry(path, Unit("event", event=(
                    "unreadable", "its directory may not be listed or searched (permission denied); earlier rows kept, "
                                  "retried next run"))))
                self.results.setdefault(path, FileResult(path, "unreadable")).event = "unreadable"
            else:
                # A vanished file: its rows stay; back with the bytes the lake read, it is read on,
                # else as a new generation.
                batch.append(self._entry(path, Unit("event", state={**known[path], "status": "missing"},
                                                    event=("missing", "the file is gone; its rows are kept"))))
                self.results.setdefault(path, FileResult(path, "missing")).event = "missing"
        self._commit(batch)
        # Records already past the retention window when first read never reach bronze: counted
        # as retention's, once each (a store whose 63 ratings had all expired read as 1 line, its
        # 63 rows gone without a word; the same rows are read again when their key range changes)
        at_read = self._note_expired(self.matcher.expired if self.matcher is not None else set())
        if at_read:
            report.expired += at_read
            privacy.record_erasure(self.con, "retention", {self.spec.name: {"bronze": at_read}})
        check_accounting(self.con, self.spec.name)
        order = {p: i for i, (p, _) in enumerate(files)}
        report.files = sorted(self.results.values(), key=lambda r: (order.get(r.path, len(order)), r.path))
        report.seconds = time.perf_counter() - started
        return report

    def _note_expired(self, hashes: set[str]) -> int:
        """Note the expired records (their sha256) in ``lineage.expired_records``; returns how many
        were not noted before."""
        if not hashes:
            return 0
        with registered(self.con, "_fw_expired", pa.table({"h": sorted(hashes)})):
            new = self.con.execute(
                "select count(*) from _fw_expired where h not in "
                "(select record_sha256 from lineage.expired_records where source = ?)", [self.spec.name]).fetchone()[0]
            self.con.execute("insert or ignore into lineage.expired_records select ?, h from _fw_expired",
                             [self.spec.name])
        return int(new)

    def _check_bronze(self) -> None:
        """Before raw is reset to be rebuilt from bronze: every object bronze names is there. One
        deleted by hand emptied raw, then failed the rebuild (a bare FileNotFoundError) on every
        run after it."""
        missing = self.bronze.missing_objects(self.bronze.entries())
        if missing:
            raise BronzeDamaged(
                f"source {self.spec.name}: {len(missing)} object(s) of the lake's bronze record are missing "
                f"({missing[0]}{', …' if len(missing) > 1 else ''}): rebuilding raw from it would lose their "
                f"records, so raw.{self.spec.name} and staging are kept as they are; restore "
                f"{missing[0].parent.parent} from a backup (incremental runs read on without them)")

    # ----------------------------------------------------------------- observing files

    def _observe(self, path: str, real: Path, known: dict | None) -> tuple[list[Unit], str]:
        """The reader for this file's format; faults become events, never exceptions."""
        view = FileView(path, real, known, self.settings, self.now)
        try:
            if real.suffix in SQLITE_SUFFIXES and self.spec.sqlite is not None:
                units = sqlite.read(view, self.spec.sqlite, lambda ranges: self._sqlite_keys(path, ranges))
            elif self.spec.format == "jsonl" and jsonl.unchanged(view):
                units = []  # a jsonl_or_array file is always opened: its head picks the reader
            else:
                with open_file(real) as fh:
                    if self.spec.format == "jsonl_or_array" \
                            and json_array.is_array(os.pread(fh.fileno(), 4096, 0)):
                        units = json_array.read(view, fh)
                    else:
                        units = jsonl.read(view, fh)
        except FileNotFoundError:
            return [], "unchanged"  # vanished between listing and reading: seen as missing next run
        except OSError as exc:
            return [Unit("event", event=("unreadable", f"{exc}; earlier rows kept, retried next run"))], "unreadable"
        events = [u.event[0] for u in units if u.event]
        if known is None:
            kind = next((e for e in events if e in ("corrupt", "unreadable", "waiting")), "new")
        elif not units:
            kind = "unchanged"
        else:
            kind = next((e for e in events if e in ("locked", "unreadable", "corrupt", "shrunk", "rewritten", "recreated",
                                                    "reappeared", "new_generation", "sealed", "waiting")), None) \
                or ("appended" if any(u.kind in ("span", "rows", "array", "tombstones") for u in units) else "unchanged")
        return units, kind

    def _sqlite_keys(self, path: str, ranges: list[int]) -> dict[int, str]:
        """The sha256 per key the lake holds for these key ranges of a SQLite file."""
        return dict(self.con.execute(
            "select key, sha256 from ingest.sqlite_keys where source = ? and path = ? "
            f"and key >> {sqlite.RANGE_BITS} in (select unnest(?::bigint[]))",
            [self.spec.name, path, ranges]).fetchall())

    def _entry(self, path: str, unit: Unit) -> bronze_mod.Entry:
        entry = bronze_mod.Entry(
            seq=self.next_seq, source=self.spec.name, path=path, kind=unit.kind, run_id=self.run_id,
            observed_at=datetime.fromtimestamp(self.now, timezone.utc).isoformat(), meta=unit.meta,
            state=unit.state, event=list(unit.event) if unit.event else None, data=unit.data, sha256=unit.sha256,
            parsed=unit.parsed)
        self.next_seq += 1
        return entry

    def _commit(self, batch: list[bronze_mod.Entry]) -> None:
        """Bronze first (durable), then raw and accounting in one transaction.

        Hashing, compressing and fsyncing the bronze object runs on another thread while DuckDB
        classifies the batch; the transaction commits only once bronze is durable, so raw never
        holds a line bronze does not."""
        if batch:
            from dagster_project.privacy import scrub_batch

            scrub_batch(self.matcher, batch)  # erased subjects and expired records never reach bronze
            with ThreadPoolExecutor(1, thread_name_prefix="bronze") as pool:
                self._apply(batch, bronze_written=pool.submit(self.bronze.write, batch))

    def _replay(self, pending: list[bronze_mod.Entry]) -> None:
        batch, size = [], 0
        for entry in pending:
            entry.data = self.bronze.payload(entry)
            self.results.setdefault(entry.path, FileResult(entry.path, "unchanged"))
            batch.append(entry)
            size += entry.length
            if size >= BATCH_BYTES:
                self._apply(batch)
                batch, size = [], 0
        self._apply(batch)

    # ----------------------------------------------------------------- classification

    def _apply(self, batch: list[bronze_mod.Entry], bronze_written: Future | None = None) -> None:
        """Classify a batch of entries and write everything they imply, in one transaction.

        Entries are processed in ``seq`` order; this loop is where per-file state (``entry.state``,
        the previous entry of the same path) is available to a classifier needing a carry-over.
        ``bronze_written``: the batch's bronze write running meanwhile (``_commit``); the
        transaction commits only once it is durable (and fails with what it raised). A replayed
        batch is in bronze already.
        """
        if not batch:
            return
        with transaction(self.con):
            tables, rejects, events, tombstones = [], [], [], []
            keys: dict[tuple[str, int], str | None] = {}  # (path, key) -> sha256, None: deleted
            for i, e in enumerate(batch):
                res = self.results.setdefault(e.path, FileResult(e.path, "unchanged"))
                if e.kind in DECODERS:
                    # Per-file state (e.state, earlier entries of e.path) is at hand here, in order.
                    table, found, n = DECODERS[e.kind](e.data, e.meta, self.settings, e.parsed)
                    res.lines += n
                    rejects += [(i, r) for r in found]
                    tables.append((i, table))
                    if e.kind == "rows":
                        keys.update({(e.path, k): sha for k, sha in sqlite.key_hashes(table, found, e.parsed)})
                elif e.kind == "tombstones":
                    gone = sqlite.tombstone_keys(e.data)
                    tombstones.append((e, gone))
                    keys.update({(e.path, k): None for k in gone})
                elif e.kind == "corrupt":
                    rejects.append((i, Rejected(0, None, "corrupt_file", e.meta["detail"], None, None)))
                    res.lines += 1
                if e.event:
                    events.append((e.run_id, self.spec.name, e.path, e.event[0], e.event[1], e.observed_at))
            self._classify(batch, tables, rejects)
            for e, gone in tombstones:
                self.con.execute(
                    f"update raw.{q(self.spec.name)} set deleted_at_source = $at::timestamptz "
                    "where path = $path and line_number in (select unnest($keys::bigint[])) "
                    "and observed_seq < $seq and deleted_at_source is null",
                    {"at": e.observed_at, "path": e.path, "keys": gone, "seq": e.seq})
                log_tombstones(self.con, self.spec.name, e.seq, e.path, gone)  # flagged rows keep their seq
            keys_gone = [k for k, sha in keys.items() if sha is None]
            keys_set = [(p, k, sha) for (p, k), sha in keys.items() if sha is not None]
            if keys_gone:  # a store deleted or recreated drops every key at once: one statement
                gone = arrowcols.table({"path": arrowcols.strings([k[0] for k in keys_gone]),
                                        "key": arrowcols.ints([k[1] for k in keys_gone])})
                with registered(self.con, "_gone", gone):
                    self.con.execute("delete from ingest.sqlite_keys k using _gone g "
                                     "where k.source = $source and k.path = g.path and k.key = g.key",
                                     {"source": self.spec.name})
            if keys_set:
                current = arrowcols.table({"path": arrowcols.strings([k[0] for k in keys_set]),
                                           "key": arrowcols.ints([k[1] for k in keys_set]),
                                           "sha256": arrowcols.strings([k[2] for k in keys_set])})
                with registered(self.con, "_keys", current):
                    self.con.execute("insert or replace into ingest.sqlite_keys "
                                     "select $source, path, key, sha256 from _keys",
                                     {"source": self.spec.name})
            if events:  # one statement: executemany runs one insert per row, ~1 ms each
                table = arrowcols.table({name: arrowcols.strings([e[i] for e in events])
                                         for i, name in enumerate(("run_id", "source", "path", "event", "detail"))})
                table = table.append_column("occurred_at", arrowcols.timestamps(
                    [datetime.fromisoformat(e[5]) for e in events]))
                with registered(self.con, "_events", table):
                    self.con.execute("insert into ingest.file_events by name select * from _events")
            self._write_files(batch)
            known_mod.remember(self.con, self.spec.name, batch)  # before bronze_applied moves
            self.con.execute("insert or replace into ingest.bronze_applied values (?, ?)",
                             [self.spec.name, batch[-1].seq])
            # a batch of state and event entries alone (a file's new inode, mtime or ctime; a
            # partial last line that grew; a file missing, unreadable or locked) changes no row:
            # a file that stays unreadable rebuilt every table after it and published every run
            if any(e.kind not in ("state", "event") for e in batch):
                versions.bump(self.con, f"raw.{self.spec.name}", self.run_id)  # downstream must look again
            if bronze_written is not None:
                bronze_written.result()
        for e in batch:
            e.data = e.parsed = None

    def _quarantine_rejects(self, batch, rejects) -> None:
        """Lines refused before JSON (invalid UTF-8, over the size limit) into ingest.quarantine, as
        one Arrow table: a Latin-1 file rejects every line, and one insert per line (executemany)
        cost ~0.9 ms each, 15 minutes for a million lines."""
        def each(get):
            return [get(i, r) for i, r in rejects]
        table = arrowcols.table({
            "source": arrowcols.strings(each(lambda i, r: self.spec.name)),
            "path": arrowcols.strings(each(lambda i, r: batch[i].path)),
            "line_number": arrowcols.ints(each(lambda i, r: r.line_number)),
            "byte_offset": arrowcols.ints(each(lambda i, r: r.byte_offset)),
            "reason": arrowcols.strings(each(lambda i, r: r.reason)),
            "detail": arrowcols.strings(each(lambda i, r: r.detail)),
            # a batch of rejected lines may hold more than 2 GiB of text: 64-bit offsets
            "raw_text": arrowcols.strings(each(lambda i, r: r.raw_text), pa.large_string()),
            "raw_bytes": arrowcols.binaries(each(lambda i, r: r.raw_bytes), pa.large_binary()),
            "raw_sha256": arrowcols.strings(each(lambda i, r: r.raw_sha256)),
            "raw_length": arrowcols.ints(each(lambda i, r: r.raw_length)),
            "run_id": arrowcols.strings(each(lambda i, r: batch[i].run_id)),
            "quarantined_at": arrowcols.timestamps(each(lambda i, r: datetime.fromisoformat(batch[i].observed_at))),
        })
        names = ", ".join(QUARANTINE_COLUMNS)
        with registered(self.con, "_rejects", table):
            self.con.execute(f"insert into ingest.quarantine ({names}) select {names} from _rejects")

    def _generation_start(self, batch, path: str, generation: int) -> int | None:
        """The seq of the first unit of ``generation`` of the file ``path`` (this batch's or
        bronze's): its rows in raw are those observed from there on. Read from the manifest, only
        for a unit continuing a generation with a naive time in a repeated hour (``resolve_folds``)."""
        firsts = [e.seq for e in batch if e.path == path and e.meta.get("generation") == generation]
        if self._generation_starts is None:
            self._generation_starts = {}
            for e in self.bronze.entries():  # in seq order: the first of each generation stays
                if e.kind == "span":
                    self._generation_starts.setdefault((e.path, e.meta.get("generation")), e.seq)
        found = self._generation_starts.get((path, generation))
        return min([*firsts, *([found] if found is not None else [])], default=None)

    def _classify(self, batch, tables, rejects) -> None:
        """Classify every candidate line of the batch in one DuckDB pass. Each unit is keyed by
        its index in the batch (the classifier's ``path``), mapped back to path and seq after."""
        self.counts: dict[str, list[int]] = {}
        units = arrowcols.table({
            "k": arrowcols.strings([str(i) for i in range(len(batch))]),
            "_u_path": arrowcols.strings([e.path for e in batch]),
            "_u_seq": arrowcols.ints([e.seq for e in batch]),
            "_u_first_line": arrowcols.ints([int(e.meta.get("first_line", 1)) for e in batch]),
            "_u_generation": arrowcols.ints([e.meta.get("generation") for e in batch]),
            "_u_run": arrowcols.strings([e.run_id for e in batch]),
            "_u_at": arrowcols.timestamps([datetime.fromisoformat(e.observed_at) for e in batch])})
        with registered(self.con, "_units", units):
            if rejects:
                self._quarantine_rejects(batch, rejects)
                for i, _ in rejects:
                    self.counts.setdefault(batch[i].path, [0, 0, 0])[1] += 1
                    self.results[batch[i].path].quarantined += 1
            parts = []
            for i, t in tables:
                if t.num_rows:
                    parts.append(t.append_column("path", arrowcols.repeated(str(i), t.num_rows)))
            if not parts:
                return
            lines = pa.concat_tables(parts)
            chunks, rows = lines.column("text").num_chunks, lines.num_rows
            threads = max(1, int(self.con.execute("select current_setting('threads')").fetchall()[0][0]))
            # DuckDB scans an Arrow batch on one thread: a day's append (10,000 lines) in one batch
            # left the other core idle (105 ms where two batches take 78)
            size = max(1, min(BATCH_ROWS, -(-rows // threads)))
            if (chunks > 1 and rows < chunks * (BATCH_ROWS // 4)) or (chunks < threads and rows > size):
                # Thousands of small files are thousands of small Arrow chunks, and DuckDB pays the
                # classification's per-chunk cost on each: one copy into full batches costs less.
                lines = pa.Table.from_batches(lines.combine_chunks().to_batches(max_chunksize=size))
            with registered(self.con, "_lines", lines):
                self.con.execute(f"create or replace temp table _classified as {self.sql.sql}", self.sql.params)
            del lines, parts
            self._settle_strict()
            # DST fold: second passes through a repeated local hour, from each file's write order
            self.con.execute("create or replace temp view _fold_units as select k, _u_path as path, _u_seq as seq, "
                             "_u_first_line as first_line, _u_generation as generation from _units")
            resolve_folds(self.con, self.spec, "_classified", f"raw.{q(self.spec.name)}", "_fold_units",
                          partial(self._generation_start, batch))
            for k, outcome, n in self.con.execute(
                    "select path, coalesce(reason, 'loaded'), count(*) from _classified group by all").fetchall():
                path = batch[int(k)].path
                c = self.counts.setdefault(path, [0, 0, 0])
                res = self.results[path]
                if outcome == "loaded":
                    c[0] += n
                    res.loaded += n
                elif outcome == "blank":
                    c[2] += n
                    res.blank += n
                else:
                    c[1] += n
                    res.quarantined += n
            cols = ", ".join(q(n) for n in self.out_cols)
            ccols = ", ".join(f"c.{q(n)}" for n in self.out_cols)
            self.con.execute(
                f"insert into raw.{q(self.spec.name)} ({cols}, path, line_number, byte_offset, ingest_run_id, "
                f"observed_seq, deleted_at_source) "
                f"select {ccols}, u._u_path, c.line_number, c.byte_offset, u._u_run, u._u_seq, null "
                "from _classified c join _units u on c.path = u.k where c.reason is null")
            self.con.execute(
                "insert into ingest.quarantine by name "
                "select $source as source, u._u_path as path, c.line_number, c.byte_offset, c.reason, c.detail, "
                "rtrim(c.text, e'\\r\\n') as raw_text, u._u_run as run_id, u._u_at as quarantined_at "
                "from _classified c join _units u on c.path = u.k "
                "where c.reason is not null and c.reason <> 'blank'",
                {"source": self.spec.name})
            self.con.execute("drop table _classified")

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
        if verdicts:  # one statement: a file of broken JSON has a verdict per line
            found = arrowcols.table({"reason": arrowcols.strings([v[0] for v in verdicts]),
                                     "detail": arrowcols.strings([v[1] for v in verdicts]),
                                     "path": arrowcols.strings([v[2] for v in verdicts]),
                                     "line_number": arrowcols.ints([v[3] for v in verdicts])})
            with registered(self.con, "_verdicts", found):
                self.con.execute("update _classified c set reason = v.reason, detail = v.detail from _verdicts v "
                                 "where c.path = v.path and c.line_number = v.line_number")
        if again:
            table = arrowcols.table({"line_number": arrowcols.ints([a[0] for a in again]),
                                     "byte_offset": arrowcols.ints([a[1] for a in again]),
                                     "text": arrowcols.strings([a[2] for a in again], pa.large_string()),
                                     "path": arrowcols.strings([a[3] for a in again])})
            with registered(self.con, "_lines", table):
                self.con.execute("delete from _classified where reason = 'strict_check'")
                self.con.execute(f"insert into _classified {self.sql_lenient.sql}", self.sql_lenient.params)

    def _write_files(self, batch: list[bronze_mod.Entry]) -> None:
        """Per-file accounting: counts add up across generations and versions; the watermark
        columns mirror the latest state recorded in bronze."""
        latest: dict[str, bronze_mod.Entry] = {}
        first_run: dict[str, str] = {}
        for e in batch:
            first_run.setdefault(e.path, e.run_id)
            latest[e.path] = e if e.state is not None or e.path not in latest else latest[e.path]
        counts = getattr(self, "counts", {})
        rows = []
        for path, e in latest.items():
            s = e.state or {}
            loaded, quarantined, blank = counts.get(path, [0, 0, 0])
            lines = loaded + quarantined + blank
            rows.append({
                "source": self.spec.name, "path": path, "format": s.get("format"), "size_bytes": s.get("size"),
                "mtime_ns": s.get("mtime_ns"), "offset_bytes": s.get("offset"),
                "prefix_sha256": s.get("prefix_sha"), "high_water_mark": s.get("hwm"), "status": s.get("status"),
                "deferred_bytes": s.get("deferred"), "generation": s.get("generation"),
                "has_state": e.state is not None, "lines_read": lines, "rows_loaded": loaded,
                "rows_quarantined": quarantined, "blank_lines": blank, "first_run_id": first_run[path],
                "run_id": e.run_id,
                "at": datetime.fromisoformat(e.observed_at)})
        self.counts = {}
        with registered(self.con, "_file_updates", arrowcols.from_rows(rows, FILE_STATE)):
            self.con.execute(
                """
                insert into ingest.files as f (source, path, format, size_bytes, mtime_ns, lines_read,
                    rows_loaded, rows_quarantined, blank_lines, deferred_bytes, offset_bytes,
                    prefix_sha256, high_water_mark, status, generation, first_run_id, last_run_id,
                    last_ingested_at)
                select u.source, u.path,
                    coalesce(case when u.has_state then u.format else old.format end, 'unknown'),
                    coalesce(case when u.has_state then u.size_bytes else old.size_bytes end, 0),
                    case when u.has_state then u.mtime_ns else old.mtime_ns end,
                    coalesce(old.lines_read, 0) + u.lines_read, coalesce(old.rows_loaded, 0) + u.rows_loaded,
                    coalesce(old.rows_quarantined, 0) + u.rows_quarantined,
                    coalesce(old.blank_lines, 0) + u.blank_lines,
                    coalesce(case when u.has_state then u.deferred_bytes else old.deferred_bytes end, 0),
                    coalesce(case when u.has_state then u.offset_bytes else old.offset_bytes end, 0),
                    case when u.has_state then u.prefix_sha256 else old.prefix_sha256 end,
                    case when u.has_state then u.high_water_mark else old.high_water_mark end,
                    coalesce(case when u.has_state then u.status else old.status end, 'ok'),
                    case when u.has_state then u.generation else old.generation end,
                    coalesce(old.first_run_id, u.first_run_id), u.run_id, u.at
                from _file_updates u left join ingest.files old using (source, path)
                on conflict (source, path) do update set
                    lines_read = excluded.lines_read, rows_loaded = excluded.rows_loaded,
                    rows_quarantined = excluded.rows_quarantined, blank_lines = excluded.blank_lines,
                    format = excluded.format, size_bytes = excluded.size_bytes, mtime_ns = excluded.mtime_ns,
                    deferred_bytes = excluded.deferred_bytes, offset_bytes = excluded.offset_bytes,
                    prefix_sha256 = excluded.prefix_sha256, high_water_mark = excluded.high_water_mark,
                    status = excluded.status, generation = excluded.generation,
                    last_run_id = excluded.last_run_id, last_ingested_at = excluded.last_ingested_at
                """)
