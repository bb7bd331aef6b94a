"""Atomic, versioned Parquet datasets and the atomically replaced analyst warehouse.

Datasets
--------
``exports/training/sft`` is a *symlink* to an immutable version directory
``exports/training/.versions/sft/<UTC time>-<run_id[:8]>/`` holding ``part-NNNNN.parquet`` and
``manifest.json``. ``publish_dataset`` writes a new version completely in
``.versions/sft/.incomplete-<name>`` (Parquet, zstd, rows in a total deterministic order),
hashes what it wrote, writes the manifest, fsyncs files and directory, renames it to its final
name, then swaps the link: a temporary symlink replaced onto ``exports/training/sft`` with
``os.replace`` (atomic rename). So a reader globbing ``sft/*.parquet`` sees the old version or
the new one, never a mix (a reader of a multi-file dataset that must not straddle a swap
resolves the link once with ``os.path.realpath``). A killed publish leaves the previous version
current; its leftovers are removed by the next publish. A reader holding an old version's files
open keeps reading them even after retention deletes them (POSIX unlink semantics). Retention
keeps the newest ``keep_versions`` versions, and never deletes the current one. A pre-existing
real directory at the dataset path (an older layout) is adopted as a version ``<time>-legacy``.

Manifest (``manifest.json``)::

    {"format": "flywheel-dataset/1", "dataset": "sft", "table": "exports.sft",
     "version": "20261122T131212123456Z-1a2b3c4d", "rows": 441,
     "columns": [{"name": "prompt", "type": "STRUCT(\\"role\\" VARCHAR, ...)[]"}, ...],
     "order_by": ["interaction_id", ...],
     "files": [{"name": "part-00000.parquet", "rows": 441, "bytes": 81234, "sha256": "..."}],
     "content_hash": "<sha256 hex>", "content_hash_method": "...",
     "run_id": "...", "created_at": "2026-11-22T13:12:12.123456+00:00",
     "source_watermarks": {...}, "validation": {"status": "passed", ...},
     "writer": {"duckdb": "2.0.0", "compression": "zstd", "row_group_rows": 100000}}

``content_hash`` is a hash of the *data read back from the written Parquet files*: sha256 over
the concatenated ``md5(to_json(row))`` of every row in file order. It depends only on the rows
and their (deterministic) order, not on Parquet encoding or the DuckDB version that wrote them
(the Parquet bytes are deterministic for one DuckDB version too — ``files[].sha256`` — but
change with the writer's version string).

Warehouse
---------
``publish_warehouse`` builds ``<dest>.tmp-<pid>`` beside the warehouse (a byte copy of the
checkpointed working database, or a fresh file filled with ``CREATE TABLE … AS SELECT`` through
``ATTACH`` when only some tables are published), checks it opens, fsyncs it and
``os.replace``-s it onto the warehouse. DuckDB allows one writer, and any open connection from
another process — even read-only — blocks a writer; but nobody ever writes the published file:
an analyst's open read-only connection keeps the old inode, and the next connection opens the
new file. A killed publish leaves the previous file intact and a temp file that the next
publish removes.

Nothing here imports Dagster.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict

import duckdb

from transforms.sqlfiles import table_columns

MANIFEST = "manifest.json"
FORMAT = "flywheel-dataset/1"
VERSIONS = ".versions"
INCOMPLETE = ".incomplete-"
ROW_GROUP_ROWS = 100_000
ROW_GROUP_BYTES = "128MB"
ROWS_PER_FILE = 1_000_000
CONTENT_HASH_METHOD = ("sha256 of the concatenated lowercase-hex md5(to_json(row)) of every row, "
                       "files in name order, rows in file order")

Hook = Callable[[str], None]


class Manifest(TypedDict, total=False):
    format: str
    dataset: str
    table: str
    version: str
    rows: int
    columns: list[dict[str, str]]
    order_by: list[str]
    files: list[dict[str, Any]]
    content_hash: str
    content_hash_method: str
    run_id: str
    created_at: str
    source_watermarks: dict
    validation: dict
    writer: dict


class PublishError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------
# Datasets
# ---------------------------------------------------------------------------------------------

def versions_dir(dest_dir: Path) -> Path:
    dest_dir = Path(dest_dir)
    return dest_dir.parent / VERSIONS / dest_dir.name


def publish_dataset(con: duckdb.DuckDBPyConnection, table: str, dest_dir: Path, *, run_id: str,
                    watermarks: dict | None = None, validation: Any = None, keep_versions: int = 5,
                    order_by: list[str] | tuple[str, ...] | None = None, rows_per_file: int = ROWS_PER_FILE,
                    row_group_rows: int = ROW_GROUP_ROWS, hook: Hook | None = None) -> Manifest:
    """Publish ``table`` as a new version of the dataset at ``dest_dir`` and make it current.

    ``validation``: the validation summary to record (a dict such as
    ``ValidationReport.summary()``, or a report); a failed one is refused — gate on validation
    before calling. ``order_by``: key columns to sort rows by (default: the table's keys from
    ``expectations.order_keys``); every other column follows, so the order is total and the
    content hash reproducible. ``hook(stage)`` is for tests (crash injection): it is called with
    ``"parquet_written"``, ``"manifest_written"``, ``"version_complete"``, ``"link_created"``,
    ``"swapped"``.
    """
    if keep_versions < 1:
        raise ValueError("keep_versions must be at least 1 (the current version is always kept)")
    hook = hook or (lambda stage: None)
    dest_dir = Path(os.path.abspath(dest_dir))
    validation_summary = _validation_summary(validation)
    if validation_summary.get("status") == "failed" or validation_summary.get("success") is False:
        raise PublishError(f"{table}: refusing to publish a dataset that failed validation "
                           f"({validation_summary.get('failed_blocking') or validation_summary})")
    columns = table_columns(con, table)
    if columns is None:
        raise PublishError(f"{table}: no such table, nothing to publish to {dest_dir}")
    if "file_row_number" in columns:
        raise PublishError(f"{table}: a column named file_row_number clashes with the Parquet reader's")
    if dest_dir.exists() and not dest_dir.is_dir():
        raise PublishError(f"{dest_dir} exists and is not a directory or a dataset link; move it away")

    root = versions_dir(dest_dir)
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / ".lock"):
        _remove_leftovers(dest_dir, root)
        created = datetime.now(timezone.utc)
        name = _version_name(root, created, run_id)
        work = root / f"{INCOMPLETE}{name}"
        work.mkdir()

        keys = [c for c in (order_by if order_by is not None else _default_keys(table)) if c in columns]
        order = keys + [c for c in columns if c not in keys]
        rows = int(con.execute(f"select count(*) from {_quote_table(table)}").fetchone()[0])
        files = _write_parquet(con, table, order, rows, work, rows_per_file, row_group_rows)
        hook("parquet_written")

        manifest: Manifest = {
            "format": FORMAT,
            "dataset": dest_dir.name,
            "table": table,
            "version": name,
            "rows": rows,
            "columns": [{"name": c, "type": t} for c, t in columns.items()],
            "order_by": order,
            "files": [_file_entry(con, f) for f in files],
            "content_hash": content_hash(con, files, list(columns)),
            "content_hash_method": CONTENT_HASH_METHOD,
            "run_id": run_id,
            "created_at": created.isoformat(),
            "source_watermarks": watermarks or {},
            "validation": validation_summary or {"status": "not validated"},
            "writer": {"duckdb": duckdb.__version__, "compression": "zstd", "row_group_rows": row_group_rows,
                       "rows_per_file": rows_per_file},
        }
        if sum(f["rows"] for f in manifest["files"]) != rows:
            raise PublishError(f"{table}: wrote {sum(f['rows'] for f in manifest['files'])} rows, expected {rows}")
        _write_json(work / MANIFEST, manifest)
        hook("manifest_written")
        for path in work.iterdir():
            _fsync_file(path)
        _fsync_dir(work)
        version = root / name
        os.rename(work, version)
        _fsync_dir(root)
        hook("version_complete")

        link = _temp_link(dest_dir)
        os.symlink(os.path.relpath(version, dest_dir.parent), link)
        hook("link_created")
        if dest_dir.is_dir() and not dest_dir.is_symlink():
            _adopt_legacy(dest_dir, root)  # moved aside just before the swap: the gap is one rename
        os.replace(link, dest_dir)  # the atomic swap
        _fsync_dir(dest_dir.parent)
        hook("swapped")
        prune(dest_dir, keep_versions)
    return manifest


def _write_parquet(con: duckdb.DuckDBPyConnection, table: str, order: list[str], rows: int, work: Path,
                   rows_per_file: int, row_group_rows: int) -> list[Path]:
    options = (f"format parquet, compression zstd, row_group_size {int(row_group_rows)}, "
               f"row_group_size_bytes '{ROW_GROUP_BYTES}'")
    order_sql = ", ".join(f"{_q(c)} asc nulls first" for c in order)
    if rows <= rows_per_file:
        path = work / "part-00000.parquet"
        con.execute(f"copy (select * from {_quote_table(table)} order by {order_sql}) to {_lit(path)} ({options})")
        return [path]
    # More than one file: number the rows once, then cut contiguous ranges (COPY's own
    # FILE_SIZE_BYTES splitting neither keeps the order across files nor is deterministic).
    temp = f"__fw_publish_{os.getpid()}"
    con.execute(f"create or replace temp table {temp} as select row_number() over (order by {order_sql}) as __rn, * "
                f"from {_quote_table(table)}")
    try:
        paths = []
        for i, start in enumerate(range(0, rows, rows_per_file)):
            path = work / f"part-{i:05d}.parquet"
            con.execute(f"copy (select * exclude (__rn) from {temp} where __rn > {start} and __rn <= "
                        f"{start + rows_per_file} order by __rn) to {_lit(path)} ({options})")
            paths.append(path)
        return paths
    finally:
        con.execute(f"drop table if exists {temp}")


def content_hash(con: duckdb.DuckDBPyConnection, files: list[Path], columns: list[str]) -> str:
    """sha256 over ``md5(to_json(row))`` of every row read back from ``files`` (see module doc)."""
    if not files:
        return hashlib.sha256(b"").hexdigest()
    row = "{" + ", ".join(f"{_lit(c)}: {_q(c)}" for c in columns) + "}"
    parts = " union all ".join(
        f"select {i} as __f, file_row_number as __n, md5(to_json({row})) as __h "
        f"from read_parquet({_lit(p)}, file_row_number = true)" for i, p in enumerate(sorted(files)))
    digest = con.execute(f"select sha256(coalesce(string_agg(__h, '' order by __f, __n), '')) from ({parts})"
                         ).fetchone()[0]
    return digest


def _file_entry(con: duckdb.DuckDBPyConnection, path: Path) -> dict:
    rows = con.execute(f"select sum(num_rows)::bigint from parquet_file_metadata({_lit(path)})").fetchone()[0]
    return {"name": path.name, "rows": int(rows or 0), "bytes": path.stat().st_size, "sha256": _sha256_file(path)}


def prune(dest_dir: Path, keep_versions: int) -> list[Path]:
    """Delete versions beyond the newest ``keep_versions`` (never the current one)."""
    dest_dir = Path(os.path.abspath(dest_dir))
    root = versions_dir(dest_dir)
    if not root.exists():
        return []
    current = _current_target(dest_dir)
    versions = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                      key=lambda p: p.name, reverse=True)
    removed = []
    for old in versions[max(keep_versions, 1):]:
        if current is not None and old.resolve() == current:
            continue
        shutil.rmtree(old, ignore_errors=True)
        removed.append(old)
    if removed:
        _fsync_dir(root)
    return removed


def current_version(dest_dir: Path) -> Manifest | None:
    """The manifest of the version ``dest_dir`` currently points to (None: nothing published)."""
    manifest = Path(dest_dir) / MANIFEST
    try:
        return json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def list_versions(dest_dir: Path) -> list[dict]:
    """Every kept version, newest first: its manifest plus ``version``, ``path``, ``current``."""
    dest_dir = Path(os.path.abspath(dest_dir))
    root = versions_dir(dest_dir)
    if not root.exists():
        return []
    current = _current_target(dest_dir)
    out = []
    for version in sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                          key=lambda p: p.name, reverse=True):
        try:
            manifest = json.loads((version / MANIFEST).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            manifest = {"dataset": dest_dir.name, "rows": None, "legacy": True}
        out.append({**manifest, "version": version.name, "path": str(version),
                    "current": current is not None and version.resolve() == current})
    return out


def _current_target(dest_dir: Path) -> Path | None:
    return dest_dir.resolve() if dest_dir.is_symlink() and dest_dir.exists() else None


def _version_name(root: Path, created: datetime, run_id: str) -> str:
    base = f"{created:%Y%m%dT%H%M%S%f}Z-{_safe(run_id)[:8] or 'run'}"
    name, n = base, 1
    while (root / name).exists() or (root / f"{INCOMPLETE}{name}").exists():
        name, n = f"{base}.{n}", n + 1
    return name


def _temp_link(dest_dir: Path) -> Path:
    link = dest_dir.parent / f".{dest_dir.name}.link-{os.getpid()}"
    if link.is_symlink() or link.exists():
        link.unlink()
    return link


def _remove_leftovers(dest_dir: Path, root: Path) -> None:
    """Remove what killed publishes left behind (we hold the dataset lock, so none is live)."""
    for leftover in root.glob(f"{INCOMPLETE}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for link in dest_dir.parent.glob(f".{dest_dir.name}.link-*"):
        pid = link.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid() or not _alive(int(pid)):
            link.unlink(missing_ok=True)


def _adopt_legacy(dest_dir: Path, root: Path) -> None:
    stamp = datetime.fromtimestamp(dest_dir.stat().st_mtime, timezone.utc)
    target = root / f"{stamp:%Y%m%dT%H%M%S%f}Z-legacy"
    n = 1
    while target.exists():
        target, n = root / f"{stamp:%Y%m%dT%H%M%S%f}Z-legacy.{n}", n + 1
    os.rename(dest_dir, target)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock per dataset (released by the kernel if the holder dies)."""
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _validation_summary(validation: Any) -> dict:
    if validation is None:
        return {}
    if isinstance(validation, dict):
        return validation
    summary = getattr(validation, "summary", None)
    if callable(summary):
        return summary()
    raise TypeError(f"validation must be a dict or a ValidationReport, not {type(validation).__name__}")


def _default_keys(table: str) -> tuple[str, ...]:
    from dagster_project.expectations import order_keys

    return order_keys(table)


# ---------------------------------------------------------------------------------------------
# The analyst warehouse
# ---------------------------------------------------------------------------------------------

def publish_warehouse(src: duckdb.DuckDBPyConnection | str | Path, dest: Path, tables: list[str] | None = None,
                      *, method: str | None = None, hook: Hook | None = None) -> dict:
    """Publish the working database ``src`` (a connection or a path) as the file ``dest``.

    ``tables=None`` publishes everything by copying the checkpointed file (``method="copy"``);
    a list of ``schema.table`` names builds a fresh file with only those (``method="attach"``:
    ``ATTACH`` + ``CREATE TABLE … AS SELECT``; also usable for everything, giving a compacted
    file). The new file is complete, checkpointed and fsynced before ``os.replace`` swaps it in.
    ``hook("tmp_written")`` runs just before the swap (tests). Returns what was published.
    """
    started = time.perf_counter()
    hook = hook or (lambda stage: None)
    dest = Path(os.path.abspath(dest))
    dest.parent.mkdir(parents=True, exist_ok=True)
    method = method or ("copy" if tables is None else "attach")
    if method not in ("copy", "attach"):
        raise ValueError(f"method must be 'copy' or 'attach', not {method!r}")
    if method == "copy" and tables is not None:
        raise ValueError("method='copy' publishes the whole database; use method='attach' for a table list")
    cleanup_warehouse_temps(dest)
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")

    own = None
    if isinstance(src, (str, Path)):
        src_path = Path(os.path.abspath(src))
        if src_path == dest:
            raise ValueError("the working database and the published warehouse must be different files")
        if not src_path.is_file():
            raise FileNotFoundError(f"{src_path}: no working database to publish")
        own = con = duckdb.connect(str(src_path))
    else:
        con = src
        src_path = _database_path(con)
    try:
        if method == "copy":
            if src_path is None:
                raise PublishError("method='copy' needs a file-backed working database (got in-memory)")
            con.execute("checkpoint")
            shutil.copyfile(src_path, tmp)
            published = _all_tables(con)
        else:
            published = tables if tables is not None else _all_tables(con)
            _build_by_attach(con, tmp, published)
    except BaseException:
        _unlink_db(tmp)
        raise
    finally:
        if own is not None:
            own.close()

    try:
        check = duckdb.connect(str(tmp), read_only=True)  # refuse to swap in a file that does not open
        n_tables = check.execute("select count(*) from duckdb_tables()").fetchone()[0]
        check.close()
        if Path(f"{tmp}.wal").exists():
            raise PublishError(f"{tmp}: a write-ahead log remained after checkpoint; not publishing")
        _fsync_file(tmp)
        hook("tmp_written")
        stale_wal = Path(f"{dest}.wal")
        if stale_wal.exists():
            # A WAL beside the published file can only come from someone writing it in place
            # and crashing; replayed onto the new file it would corrupt it.
            stale_wal.rename(dest.with_name(f".{dest.name}.wal.orphaned-{int(time.time())}"))
        os.replace(tmp, dest)
        _fsync_dir(dest.parent)
    except BaseException:
        _unlink_db(tmp)
        raise
    return {"path": str(dest), "bytes": dest.stat().st_size, "tables": int(n_tables), "method": method,
            "published_tables": list(published), "seconds": round(time.perf_counter() - started, 3)}


def cleanup_warehouse_temps(dest: Path) -> list[Path]:
    """Remove temp files of publishes that died (their process is gone)."""
    dest = Path(dest)
    removed = []
    for tmp in dest.parent.glob(f"{dest.name}.tmp-*"):
        match = re.fullmatch(rf"{re.escape(dest.name)}\.tmp-(\d+)(\.wal)?", tmp.name)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid == os.getpid() or not _alive(pid):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def _build_by_attach(con: duckdb.DuckDBPyConnection, tmp: Path, tables: list[str]) -> None:
    alias = f"__fw_pub_{os.getpid()}"
    _unlink_db(tmp)
    con.execute(f"attach {_lit(tmp)} as {alias}")
    try:
        for table in tables:
            schema, _, name = table.rpartition(".")
            schema = schema or "main"
            con.execute(f"create schema if not exists {alias}.{_q(schema)}")
            con.execute(f"create table {alias}.{_q(schema)}.{_q(name)} as select * from {_q(schema)}.{_q(name)}")
        con.execute(f"checkpoint {alias}")
    finally:
        con.execute(f"detach {alias}")


def _all_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute("select schema_name, table_name from duckdb_tables() where database_name = current_database() "
                       "and not temporary and not internal order by 1, 2").fetchall()
    return [f"{s}.{t}" for s, t in rows]


def _database_path(con: duckdb.DuckDBPyConnection) -> Path | None:
    row = con.execute("select path from duckdb_databases() where database_name = current_database()").fetchone()
    return Path(row[0]) if row and row[0] else None


def _unlink_db(path: Path) -> None:
    Path(path).unlink(missing_ok=True)
    Path(f"{path}.wal").unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

def _write_json(path: Path, doc: dict) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, ensure_ascii=False, default=str)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote_table(table: str) -> str:
    return ".".join(_q(p) for p in table.split("."))


def _lit(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"
