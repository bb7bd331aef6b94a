"""SQLite tables: rows that are new or changed anywhere in the table, and rows that vanished.

When the file's signature (size, mtime, inode, header, and its -wal file) changed, every
(key, record) is read in one read transaction (a consistent snapshot while a writer appends)
and compared with the sha256 per key the lake holds: new and changed rows become new versions,
missing keys become tombstones. A store deleted and recreated by its tool (no key kept its
record) is recorded as such: its old rows stay, flagged deleted at source, the new ones are
added beside them. Cost: one scan of the table per run in which the file changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Callable

from dagster_project.engine.readers import FileView, Unit, finish, stat_signature
from transforms.classify import q
from transforms.spec import SqliteTable

LOCK_WAIT_SECONDS = 5.0


def signature(view: FileView) -> dict:
    sig = stat_signature(view.real)
    with open(view.real, "rb") as fh:
        sig["header_sha"] = hashlib.sha256(fh.read(100)).hexdigest()
    wal = view.real.with_name(view.real.name + "-wal")
    try:
        st = os.stat(wal)
        sig["wal"] = [st.st_size, st.st_mtime_ns]
    except FileNotFoundError:
        sig["wal"] = None
    return sig


def text_sha(text: str | None) -> str:
    return hashlib.sha256((text if text is not None else "null").encode("utf-8", errors="surrogatepass")).hexdigest()


def read(view: FileView, table: SqliteTable, known_keys: Callable[[], dict[int, str]]) -> list[Unit]:
    known = view.known
    sig = signature(view)
    if known is not None and known.get("status") in ("ok", "corrupt") \
            and all(known.get(k) == v for k, v in sig.items()):
        return []
    try:
        rows = _snapshot(view, table)
        after = signature(view)
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return [Unit("event", event=("locked", f"{exc} after waiting {LOCK_WAIT_SECONDS:g} s; "
                                                   "earlier rows kept, retried next run"))]
        return _corrupt(view, sig, exc)
    except sqlite3.DatabaseError as exc:
        return _corrupt(view, sig, exc)

    old = known_keys()
    hashes = {key: text_sha(text) for key, text in rows}
    units: list[Unit] = []
    recreated = bool(old) and not any(old.get(k) == h for k, h in hashes.items())
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
        payload = "".join(json.dumps([k, t], ensure_ascii=False) + "\n" for k, t in changed)
        units.append(Unit("rows", payload.encode("utf-8", errors="surrogatepass"), {"rows": len(changed)}))
    # Reading may create the -wal/-shm files: keep the signature seen after reading when nothing
    # else changed meanwhile; otherwise the one before, so the next run looks again.
    state = {"format": "sqlite", "status": "ok", **(after if _same_content(sig, after) else sig), "generation": (known or {}).get("generation", 1),
             "hwm": max(hashes) if hashes else None, "rows": len(rows)}
    return finish(units, state, known)


def _same_content(before: dict, after: dict) -> bool:
    return all(before[k] == after[k] for k in ("size", "mtime_ns", "ino", "header_sha")) \
        and (before["wal"] is None or before["wal"] == after["wal"])


def _snapshot(view: FileView, table: SqliteTable) -> list[tuple[int, str | None]]:
    uri = f"file:{view.real.resolve().as_posix()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=LOCK_WAIT_SECONDS)
    try:
        conn.execute("begin")  # deferred: the first select fixes the snapshot
        rows = conn.execute(f"select {q(table.key)}, {table.record_sql} from {q(table.table)} "
                            f"order by {q(table.key)}").fetchall()
        conn.execute("commit")
        return rows
    finally:
        conn.close()


def _corrupt(view: FileView, sig: dict, exc: Exception) -> list[Unit]:
    """Unreadable: reported, earlier rows kept, retried when the file changes. A file the lake
    never read is also quarantined once (one line read), so it shows in the accounting."""
    known = view.known
    state = {**(known or {"format": "sqlite", "generation": 1, "hwm": None, "rows": 0}), **sig, "status": "corrupt"}
    if known is None or known.get("hwm") is None and known.get("status") != "corrupt":
        return [Unit("corrupt", None, {"detail": f"cannot read table: {exc}"}, state=state,
                     event=("corrupt", str(exc)))]
    return [Unit("event", state=state, event=("corrupt", f"{exc}; earlier rows kept, retried when the file changes"))]
