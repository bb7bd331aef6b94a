"""SQLite tables: rows that are new or changed anywhere in the table, and rows that vanished.

When the file's signature (size, mtime, inode, header, and its -wal file) changed, a checksum
per range of 1,024 keys is computed in SQLite, inside one read transaction (a consistent
snapshot while a writer appends); only ranges whose checksum differs from the one recorded are
read and compared with the sha256 per key the lake holds: new and changed rows become new
versions, missing keys become tombstones. A store deleted and recreated by its tool (no key kept its
record) is recorded as such: its old rows stay, flagged deleted at source, the new ones are
added beside them. Cost: one checksum pass over the table in SQLite per run in which the file
changed, plus reading the changed ranges (an append touches the last one).

Records are read as bytes: a record stored as a BLOB of UTF-8 text (a tool binding
``orjson.dumps(...)``) is read as that text, and one that is not UTF-8 is quarantined as
``invalid_utf8`` under its key, where either had made the whole store unreadable or failed the
source's ingest on every run. In bronze a record is a JSON line ``[key, text]``, an undecodable
one ``[key, null, base64 of its bytes]``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import sqlite3
import zlib
from collections.abc import Callable, Iterator
from urllib.parse import quote

import pyarrow as pa

from dagster_project.engine.readers import FileView, Unit, finish, open_file, stat_signature
from dagster_project.settings import Settings
from transforms import arrowcols
from transforms.classify import q
from transforms.lines import LINES_SCHEMA, Rejected, invalid_utf8
from transforms.spec import SqliteTable
from transforms.sqlfiles import lit

LOCK_WAIT_SECONDS = 5.0
# Recorded in a corrupt store's state: one an earlier reader found corrupt is read once more (this
# one opens paths with `#`, `?` or `%` and WAL stores in directories it may not write, which the
# earlier took for corrupt, and then skipped for good while the store did not change).
CORRUPT_READER = 2
RANGE_BITS = 10  # keys are checksummed in ranges of 1,024: only changed ranges are read and compared
RANGE_KEYS = 1 << RANGE_BITS


def signature(view: FileView) -> dict:
    sig = stat_signature(view.real)
    with open_file(view.real) as fh:
        sig["header_sha"] = hashlib.sha256(fh.read(100)).hexdigest()
    real = view.real.resolve()  # SQLite opens the link's target, and writes its -wal beside it
    wal = real.with_name(real.name + "-wal")
    try:
        st = os.stat(wal)
        sig["wal"] = [st.st_size, st.st_mtime_ns]
    except FileNotFoundError:
        sig["wal"] = None
    return sig


def record_sha(raw: bytes | None) -> str:
    """The sha256 a record is compared by: of its bytes (a NULL record as ``null``)."""
    return hashlib.sha256(raw if raw is not None else b"null").hexdigest()


def text_sha(text: str | None) -> str:
    """``record_sha`` of a record's text."""
    return record_sha(text.encode("utf-8", errors="surrogatepass") if text is not None else None)


def read(view: FileView, table: SqliteTable, known_keys: Callable[[list[int]], dict[int, str]]) -> list[Unit]:
    known = view.known
    sig = signature(view)
    if known is not None and (known.get("status") == "ok" or known.get("status") == "corrupt"
                              and known.get("reader") == CORRUPT_READER) \
            and all(known.get(k) == v for k, v in sig.items()):
        return []
    # (a store seen missing keeps its ranges: one recreated smaller must flag the keys of every one)
    known_ranges = (known or {}).get("ranges")
    try:
        ranges, dirty, rows, hwm = _snapshot(view, table, known_ranges)
        after = signature(view)
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return [Unit("event", event=("locked", f"{exc} after waiting {LOCK_WAIT_SECONDS:g} s; "
                                                   "earlier rows kept, retried next run"))]
        if getattr(exc, "sqlite_errorname", "").startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")):
            # not the store but its directory: a store in WAL mode needs its -shm file, which a
            # directory we may not write refuses (a tool of another user, a read-only mount).
            # Taken for corrupt, it stayed unread after access came back (its signature unchanged)
            return [Unit("event", event=("unreadable", f"{exc} (a store in WAL mode is read only where its -shm "
                                                       "file exists or can be created); earlier rows kept, "
                                                       "retried next run"))]
        return _corrupt(view, sig, exc)
    except sqlite3.DatabaseError as exc:
        return _corrupt(view, sig, exc)

    old = known_keys(dirty)
    hashes = {key: record_sha(raw) for key, raw in rows}
    units: list[Unit] = []
    every_range = known_ranges is None or set(known_ranges) <= {str(r) for r in dirty}
    recreated = bool(old) and every_range and not any(old.get(k) == h for k, h in hashes.items())
    if recreated:
        gone = sorted(old)
        changed = rows
        units.append(Unit("event", event=("recreated", f"no row kept its record ({len(old)} before, {len(rows)} now): "
                                                       "old rows kept and flagged deleted_at_source, new rows added")))
    else:
        gone = sorted(k for k in old if k not in hashes)
        changed = [(k, t) for k, t in rows if old.get(k) != hashes[k]]
        updated = sum(1 for k, _ in changed if k in old)
        if updated:
            units.append(Unit("event", event=("rows_updated", f"{updated} row(s) changed in place: new versions added")))
        if gone:
            units.append(Unit("event", event=("rows_deleted", f"{len(gone)} row(s) deleted at the source: "
                                                              "kept, flagged deleted_at_source")))
    if gone:
        units.append(Unit("tombstones", json.dumps(gone).encode(), {"keys": len(gone)}))
    if changed:
        parsed = [(k, *_text(raw), hashes[k]) for k, raw in changed]  # (key, text, undecodable bytes, sha256)
        payload = "".join(json.dumps([k, t] if bad is None else [k, None, base64.b64encode(bad).decode("ascii")],
                                     ensure_ascii=False) + "\n" for k, t, bad, _ in parsed)
        # the rows and their hashes go to ``decode`` and ``key_hashes`` as they are: parsing the
        # payload back and hashing each record again cost 0.2 s of the 1M lake's 42,000-row eventlog
        # ingest (1.36 s)
        units.append(Unit("rows", payload.encode("utf-8", errors="surrogatepass"),
                          {"rows": len(changed), "ranges_read": len(dirty), "rows_compared": len(rows)},
                          parsed=parsed))
    # Reading may create the -wal/-shm files: keep the signature seen after reading when nothing
    # else changed meanwhile; otherwise the one before, so the next run looks again.
    state = {"format": "sqlite", "status": "ok", **(after if _same_content(sig, after) else sig), "generation": (known or {}).get("generation", 1),
             "hwm": hwm,
             "rows": sum(n for n, _ in ranges.values()), "ranges": ranges}
    return finish(units, state, known)


def _text(raw: bytes | None) -> tuple[str | None, bytes | None]:
    """A record's text, or None and its bytes when they are not UTF-8."""
    if raw is None:
        return None, None
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, raw


def _same_content(before: dict, after: dict) -> bool:
    return all(before[k] == after[k] for k in ("size", "mtime_ns", "ino", "header_sha")) \
        and (before["wal"] is None or before["wal"] == after["wal"])


def _snapshot(view: FileView, table: SqliteTable, known_ranges: dict | None):
    """In one read transaction: a checksum per range of ``RANGE_KEYS`` keys, then the rows of the
    ranges whose checksum differs from what the lake holds (all of them on first sight).
    Returns (ranges {str(range): [rows, checksum]}, dirty ranges, their rows, greatest key)."""
    # percent-encoded: a `#`, `?` or `%` in the path ended it early, and SQLite opened (and
    # created, read-write) the file the rest named, and the store was never read
    uri = f"file:{quote(os.fsencode(view.real.resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=LOCK_WAIT_SECONDS)
    conn.text_factory = bytes  # a TEXT value as its UTF-8 bytes, which need not decode
    conn.create_function("fw_crc", 2, _crc, deterministic=True)
    marked: set[int] = set()  # keys of rows with a BLOB fw_utf8 could not decode

    def fw_utf8(row_key, value: bytes) -> str:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            marked.add(row_key)
            return _MARK + base64.b64encode(value).decode("ascii") + _MARK_END

    conn.create_function("fw_utf8", 2, fw_utf8)
    key, source = q(table.key), q(table.table)
    try:
        conn.execute("begin")  # deferred: the first select fixes the snapshot
        # A function's TEXT argument must decode (or the statement fails): in a UTF-8 database the
        # record goes to the checksum as a BLOB, its very bytes; a UTF-16 one (rare) converts
        # text to UTF-8 itself.
        utf8 = conn.execute("pragma encoding").fetchone()[0] in (b"UTF-8", "UTF-8")
        record_sql = _record_sql(table, utf8, _columns(conn, table))
        record = f"cast({record_sql} as blob)" if utf8 else record_sql
        ranges = {r.decode() if isinstance(r, bytes) else str(r): [n, c] for r, n, c in conn.execute(
            f"select {key} >> {RANGE_BITS}, count(*), sum(fw_crc({key}, {record})) from {source} group by 1")}
        hwm = conn.execute(f"select max({key}) from {source}").fetchone()[0]
        known_ranges = known_ranges or {}
        dirty = sorted({int(r) for r, v in ranges.items() if known_ranges.get(r) != v}
                       | {int(r) for r in known_ranges if r not in ranges})
        rows = []
        if dirty:
            rows = [(k, _unmarked(v) if k in marked else _as_bytes(v)) for k, v in conn.execute(
                f"select {key}, {record_sql} from {source} "
                f"where {key} >> {RANGE_BITS} in (select value from json_each(?)) order by {key}",
                [json.dumps(dirty)])]
        conn.execute("commit")
        return ranges, dirty, rows, hwm
    finally:
        conn.close()


def _columns(conn: sqlite3.Connection, table: SqliteTable) -> list[str]:
    """The store's columns, in its order, after checking it has those the record is read by.

    SQLite takes a double-quoted name that is no column for a string: a store without the key
    column read every row's key as the text ``seq`` (and the ingest failed on every run), one
    without a text column loaded that column's name as each row's value (a store without
    ``source_id`` gave all its commits one identity, and staging kept one of six). A missing key
    or record column makes the store unreadable; a missing text column is left out of the record,
    which its field's rule then judges (``missing_field:<name>`` when it is required). Columns it
    does not declare are not read: a record holding them would differ from the one every lake
    read before (each store with one re-read whole, taken for recreated), and a BLOB among them
    (an embedding) would make every record invalid UTF-8."""
    columns = [name.decode() if isinstance(name, bytes) else name
               for _, name, *_ in conn.execute(f"pragma table_info({q(table.table)})")]
    if columns:  # none: no such table, which the checksum's select reports
        have = {_folded(c) for c in columns}
        for role, name in (("key", table.key), ("record column", table.record_column)):
            if name is not None and _folded(name) not in have:
                raise sqlite3.DatabaseError(f"table {table.table} has no column {name} (its {role}); "
                                            f"its columns: {', '.join(columns)}")
    return columns


def _folded(name: str) -> str:
    """A column name as SQLite compares it: case-insensitive in ASCII only (Python's ``lower``
    folds ``É`` too, and a declared ``é`` would be taken for present and read as a string)."""
    return name.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _record_sql(table: SqliteTable, utf8: bool, columns: list[str]) -> str:
    """SQLite's expression of a row's record (as :class:`SqliteTable` declares it): the key and
    the declared text columns the store has (``_columns``).

    A BLOB in a text column (a tool binding bytes) is read as its text: ``json_object`` refuses
    BLOBs, and the whole store was unreadable. SQLite casts a BLOB to text in the store's
    encoding: in a UTF-8 store that is the very bytes (not UTF-8: the record is quarantined, as
    any record that is not); in a UTF-16 one they would be read as UTF-16, so ``fw_utf8`` decodes
    them as UTF-8 instead. Bytes that are not UTF-8 cannot be text there: ``fw_utf8`` writes them
    marked (base64), so the checksum still sees every column, and :func:`_unmarked` puts them back
    in the fetched record, which is then quarantined whole, as in a UTF-8 store."""
    if table.record_column is not None:
        return q(table.record_column)
    as_text = "cast({c} as text)" if utf8 else f"fw_utf8({q(table.key)}, {{c}})"
    have = {_folded(c) for c in columns}
    return f"json_object({lit(table.key)}, {q(table.key)}" + "".join(
        f", {lit(c)}, case when typeof({q(c)}) = 'blob' then {as_text.format(c=q(c))} else {q(c)} end"
        for c in table.text_columns if _folded(c) in have) + ")"


# A BLOB that is not UTF-8, as fw_utf8 writes it in a UTF-16 store: base64 between two U+FDD0
# (a noncharacter, which no tool writes as text); in the fetched record, a JSON string:
_MARK, _MARK_END = "\ufdd0fw:", "\ufdd0"
_MARKED = re.compile(b'"' + _MARK.encode() + rb'([A-Za-z0-9+/=]*)' + _MARK_END.encode() + b'"')


def _unmarked(record: bytes) -> bytes:
    """A fetched record with each marked BLOB's own bytes in its place, quoted as SQLite quotes
    them in a UTF-8 store: the record's bytes are the ones a UTF-8 store gives."""
    utf8 = sqlite3.connect(":memory:")
    utf8.text_factory = bytes
    try:
        return _MARKED.sub(lambda m: utf8.execute("select json_quote(cast(? as text))",
                                                  [base64.b64decode(m[1])]).fetchone()[0], record)
    finally:
        utf8.close()


def _as_bytes(value) -> bytes | None:
    """A record value as bytes: TEXT (already bytes here) and BLOB as they are, a number as its text."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", errors="surrogatepass")
    return str(value).encode()


def _crc(key, value) -> int:
    """A row's checksum: of ``key:record`` (the record's bytes; for UTF-8 text, as computed before
    records were read as bytes, so no recorded range looks changed)."""
    raw = _as_bytes(value)
    return zlib.crc32(f"{key}:".encode() + (raw if raw is not None else b"null"))


def _corrupt(view: FileView, sig: dict, exc: Exception) -> list[Unit]:
    """Unreadable: reported, earlier rows kept, retried when the file changes. A file the lake
    never read is also quarantined once (one line read), so it shows in the accounting."""
    known = view.known
    state = {**(known or {"format": "sqlite", "generation": 1, "hwm": None, "rows": 0}), **sig, "status": "corrupt",
             "reader": CORRUPT_READER}
    if known is None or known.get("hwm") is None and known.get("status") != "corrupt":
        return [Unit("corrupt", None, {"detail": f"cannot read table: {exc}"}, state=state,
                     event=("corrupt", str(exc)))]
    return [Unit("event", state=state, event=("corrupt", f"{exc}; earlier rows kept, retried when the file changes"))]


def decode(data, meta: dict, settings: Settings, parsed=None) -> tuple[pa.Table, list[Rejected], int]:
    """Rows as lines: the key is the line number (SQLite rows have no byte offset); a record that
    is not UTF-8 is an ``invalid_utf8`` reject. ``parsed``: the (key, record, undecodable bytes,
    sha256) ``read`` put in ``data`` (None: parsed from it)."""
    rows = parsed if parsed is not None else [(k, t, bad, None) for k, t, bad in _payload_rows(data)]
    good = [r for r in rows if r[2] is None]
    table = arrowcols.table({"line_number": arrowcols.ints([r[0] for r in good]),
                             "byte_offset": pa.nulls(len(good), pa.int64()),
                             "text": arrowcols.strings([r[1] if r[1] is not None else "null" for r in good],
                                                       pa.large_string())}, LINES_SCHEMA)
    rejects = [invalid_utf8(k, None, bad, "record") for k, _, bad, _ in rows if bad is not None]
    return table, rejects, len(rows)


def payload_record(line: str | bytes) -> tuple[int, str | None, bytes | None]:
    """(key, text, undecodable bytes) of one line of a rows payload: ``[key, text]``, or
    ``[key, null, base64 of its bytes]`` for a record that is not UTF-8."""
    key, text, *bad = json.loads(line)
    return key, text, base64.b64decode(bad[0]) if bad else None


def _payload_rows(data) -> Iterator[tuple[int, str | None, bytes | None]]:
    """``payload_record`` of each record of a rows payload."""
    # one record a line, ended by "\n" only (JSON escapes it in strings; str.splitlines also ends
    # lines at U+2028, U+2029 and U+0085, which a record may hold unescaped)
    for line in bytes(data).decode("utf-8", errors="surrogatepass").split("\n"):
        if line:
            yield payload_record(line)


def key_hashes(table: pa.Table, rejects: list[Rejected], parsed=None) -> Iterator[tuple[int, str]]:
    """(key, sha256 of the record) of decoded rows and their ``invalid_utf8`` rejects, as ``read``
    compares them (``parsed``: as it computed them)."""
    if parsed is not None:
        yield from ((key, sha) for key, _, _, sha in parsed)
        return
    for key, text in zip(table.column("line_number").to_pylist(), table.column("text").to_pylist()):
        yield key, text_sha(text)
    for reject in rejects:
        yield reject.line_number, record_sha(reject.raw_bytes)


def tombstone_keys(data) -> list[int]:
    return json.loads(bytes(data))
