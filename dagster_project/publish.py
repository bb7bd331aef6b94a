"""Atomic, versioned Parquet datasets.

A dataset directory such as ``exports/training/sft`` is a symlink to an immutable version
directory (``exports/training/.versions/sft/<utc time>-<run>``) holding ``*.parquet`` and
``manifest.json``. Publishing writes a new version completely (files fsynced), then swaps the
symlink with ``os.replace`` — readers see the old version or the new one, never a mix, and a
killed publish leaves the previous version current. Old versions are kept until retention.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

import duckdb

MANIFEST = "manifest.json"


def versions_dir(dest_dir: Path) -> Path:
    return dest_dir.parent / ".versions" / dest_dir.name


def content_hash(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """A hash of the table's rows independent of their physical order (reproducible across runs)."""
    return con.execute(
        f"select sha256(coalesce(string_agg(h, '' order by h), '')) from "
        f"(select md5(t::varchar) as h from {table} t)").fetchall()[0][0]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_dataset(con: duckdb.DuckDBPyConnection, table: str, dest_dir: Path, *, run_id: str,
                    watermarks: dict | None = None, validation: dict | None = None,
                    keep_versions: int = 5) -> dict:
    """Write ``table`` as a new version of ``dest_dir`` and make it current atomically."""
    dest_dir = Path(dest_dir)
    if dest_dir.exists() and not dest_dir.is_symlink():
        raise RuntimeError(f"{dest_dir} is a real directory, not a published dataset link; move it away")
    root = versions_dir(dest_dir)
    root.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc)
    version = root / f"{stamp:%Y%m%dT%H%M%S%fZ}-{run_id[:8]}"
    staging = root / f".incomplete-{version.name}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    columns = con.execute(f"select column_name, data_type from information_schema.columns "
                          f"where table_schema || '.' || table_name = ? order by ordinal_position",
                          [table]).fetchall()
    rows = con.execute(f"select count(*) from {table}").fetchall()[0][0]
    parquet = staging / "part-00000.parquet"
    con.execute(f"copy (select * from {table} order by all) to '{parquet}' "
                "(format parquet, compression zstd, row_group_size 122880)")
    manifest = {
        "dataset": dest_dir.name,
        "table": table,
        "rows": int(rows),
        "columns": [{"name": n, "type": t} for n, t in columns],
        "content_hash": content_hash(con, table),
        "files": [parquet.name],
        "run_id": run_id,
        "created_at": stamp.isoformat(),
        "source_watermarks": watermarks or {},
        "validation": validation or {"status": "not validated"},
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    for path in staging.iterdir():
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())
    os.rename(staging, version)
    _fsync_dir(root)
    link = dest_dir.parent / f".{dest_dir.name}.link-{os.getpid()}"
    link.unlink(missing_ok=True)
    os.symlink(os.path.relpath(version, dest_dir.parent), link)
    os.replace(link, dest_dir)  # the atomic swap
    _fsync_dir(dest_dir.parent)
    prune(dest_dir, keep_versions)
    return manifest


def prune(dest_dir: Path, keep_versions: int) -> list[Path]:
    """Remove versions beyond the newest ``keep_versions`` (never the current one) and leftovers
    of killed publishes."""
    root = versions_dir(dest_dir)
    current = dest_dir.resolve() if dest_dir.is_symlink() else None
    removed = []
    for leftover in root.glob(".incomplete-*"):
        shutil.rmtree(leftover, ignore_errors=True)
        removed.append(leftover)
    versions = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), reverse=True)
    for old in versions[keep_versions:]:
        if old.resolve() != current:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
    return removed


def current_version(dest_dir: Path) -> dict | None:
    manifest = Path(dest_dir) / MANIFEST
    if not manifest.exists():
        return None
    return json.loads(manifest.read_text())


def list_versions(dest_dir: Path) -> list[dict]:
    root = versions_dir(Path(dest_dir))
    if not root.exists():
        return []
    out = []
    for version in sorted(root.iterdir(), reverse=True):
        if (version / MANIFEST).exists():
            out.append(json.loads((version / MANIFEST).read_text()))
    return out
