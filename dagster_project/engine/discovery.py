"""Which files a source claims, and the path each is stored under."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from transforms.spec import SourceSpec

SQLITE_SUFFIXES = {".db", ".sqlite", ".sqlite3"}


def discover(spec: SourceSpec, raw_dir: Path) -> list[tuple[str, Path]]:
    """(stored path, real path) of every file the source's globs match, sorted by stored path."""
    found: dict[str, Path] = {}
    root = raw_dir.resolve()
    dirs: dict[Path, Path] = {}  # a lake has thousands of files in a few directories
    for pattern in spec.globs:
        pattern = os.path.expanduser(pattern)
        if os.path.isabs(pattern):
            anchor = Path(pattern).anchor
            matches = Path(anchor).glob(os.path.relpath(pattern, anchor))
        else:
            matches = raw_dir.glob(pattern)
        for real in matches:
            try:
                mode = os.lstat(real).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode):  # not a link: only its directory can resolve elsewhere
                parent = dirs.get(real.parent)
                if parent is None:
                    parent = dirs[real.parent] = real.parent.resolve()
                found[_relative(parent / real.name, root)] = real
            elif stat.S_ISLNK(mode) and real.is_file():
                found[_relative(real.resolve(), root)] = real
    return sorted(found.items())


def stored_path(real: Path, raw_dir: Path) -> str:
    return _relative(real.resolve(), raw_dir.resolve())


def _relative(resolved: Path, root: Path) -> str:
    try:
        return resolved.relative_to(root).as_posix()
    except ValueError:
        return resolved.as_posix()


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
