"""Which files a source claims, and the path each is stored under."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from transforms.spec import SourceSpec

SQLITE_SUFFIXES = {".db", ".sqlite", ".sqlite3"}


def discover(spec: SourceSpec, raw_dir: Path) -> list[tuple[str, Path]]:
    """(stored path, real path) of every file the source's globs match, sorted by stored path."""
    found: dict[str, Path] = {}
    resolved = _Resolver(raw_dir)
    for real in _matches(spec, raw_dir):
        found[resolved.stored(real)] = real
    return sorted(found.items())


def claims_any(spec: SourceSpec, raw_dir: Path) -> bool:
    """Whether the source's globs match at least one file (stops at the first)."""
    return next(_matches(spec, raw_dir), None) is not None


def claimed_bytes(spec: SourceSpec, raw_dir: Path) -> int:
    """Bytes of the files the source claims, each once (a file gone meanwhile counts 0)."""
    total = 0
    for _, real in discover(spec, raw_dir):
        try:
            total += real.stat().st_size
        except OSError:
            pass
    return total


def _matches(spec: SourceSpec, raw_dir: Path) -> Iterator[Path]:
    for pattern in spec.globs:
        pattern = os.path.expanduser(pattern)
        if os.path.isabs(pattern):
            anchor = Path(pattern).anchor
            matches = Path(anchor).glob(os.path.relpath(pattern, anchor))
        else:
            matches = raw_dir.glob(pattern)
        yield from (real for real in matches if real.is_file())


class _Resolver:
    """``stored_path`` for many files of few directories: ``Path.resolve`` lstats every component
    of every path (~0.25 ms a file, seconds on a lake of thousands of files), so each directory is
    resolved once and each file only checked for being a link."""

    def __init__(self, raw_dir: Path):
        self.root = raw_dir.resolve()
        self.dirs: dict[str, Path] = {}

    def stored(self, real: Path) -> str:
        if real.is_symlink():
            return _relative(real.resolve(), self.root)
        parent = str(real.parent)
        if parent not in self.dirs:
            self.dirs[parent] = real.parent.resolve()
        return _relative(self.dirs[parent] / real.name, self.root)


def stored_path(real: Path, raw_dir: Path) -> str:
    return _relative(real.resolve(), raw_dir.resolve())


def _relative(resolved: Path, root: Path) -> str:
    """A file under the raw root is stored relative to it, any other by its absolute path."""
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
