"""Which files a source claims, and the path each is stored under."""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from transforms.spec import SourceSpec

SQLITE_SUFFIXES = {".db", ".sqlite", ".sqlite3"}


def discover(spec: SourceSpec, raw_dir: Path) -> list[tuple[str, Path]]:
    """(stored path, real path) of every file the source's globs match, sorted by stored path."""
    return [(stored, Path(real)) for stored, real in listing(spec, raw_dir)]


def listing(spec: SourceSpec, raw_dir: Path, unlisted: list[tuple[str, str]] | None = None,
            exclude: tuple[Path, ...] = ()) -> list[tuple[str, str]]:
    """``discover``'s files, each real path a string: the engine makes a ``Path`` only of the few
    files it reads (~5 µs each). ``unlisted``: where each directory a glob's last part may not
    be listed (permission denied) is added, as (stored prefix, name pattern): the files the lake
    knows there are neither present nor gone. (``Path.glob``, which the other globs go through,
    skips a directory it may not list: the engine finds such a file refused when it looks it up.)

    Every run lists every file of the lake, so the cost per file is the floor of a run's cost as
    the lake ages (a year of the bench lake's producers is ~23,000 interaction files). A glob
    whose wildcards are all in its last part (every source's default) is matched on one
    ``os.scandir`` of its directory: the entry's type comes with the listing, so a regular file
    costs no system call (19 -> 7 µs a file with a ``Path`` each, ``Path.glob`` + ``is_file`` +
    ``is_symlink`` made two calls and several ``Path`` objects). Other globs (``**``, wildcards
    in directories) go through ``Path.glob`` as before.

    ``exclude``: the lake's own directories (its state and exports). A glob reaching them (an
    absolute ``/data/**/signals/*.jsonl`` over the whole lake) read its bronze segments as a
    source's files: every run quarantined the last one and published again, for ever."""
    found: dict[str, str] = {}
    resolved = _Resolver(raw_dir)
    for pattern in spec.globs:
        pattern = os.path.expanduser(pattern)
        directory, name = os.path.split(pattern)
        if _MAGIC.search(directory) is None and name and name != "**":
            base = Path(directory) if os.path.isabs(directory) else raw_dir / directory
            prefix = os.path.join(base, "")
            try:
                scanned = _scan(base, name)
            except PermissionError:
                if unlisted is not None:
                    unlisted.append((resolved.in_dir(base, ""), name))
                continue
            for entry, link in scanned:
                real = prefix + entry
                found[resolved.stored(Path(real)) if link else resolved.in_dir(base, entry)] = real
        else:
            for real in _glob(pattern, raw_dir):
                found[resolved.stored(real)] = str(real)
    if exclude and found:
        own = tuple({os.path.join(form, "") for d in exclude for form in (os.path.abspath(d), os.path.realpath(d))})
        # (by the path as listed: resolving each file's costs a system call per file and run)
        found = {stored: real for stored, real in found.items() if not real.startswith(own)}
    if all(stored.isascii() for stored in found):
        return sorted(found.items())
    return _escaped(found)


class StoredPathClash(ValueError):
    """Two files of a source would be stored under one path (``_escaped``)."""


def _escaped(found: dict[str, str]) -> list[tuple[str, str]]:
    """``found`` with every stored path as text (``_text``). A name whose bytes are not UTF-8
    could then read as another file's real name (``x_\\xff.jsonl``, backslash and all): the two
    were one path, read in turn as each other's rewrites on every run. Refused, naming the file."""
    out: dict[str, str] = {}
    for stored, real in found.items():
        text = _text(stored)
        if text in out:
            named = real if text == stored else out[text]  # the file really named so
            raise StoredPathClash(f"{named} and a file whose name is not UTF-8 would both be stored as {text} (bytes "
                                  "that are not UTF-8 are stored escaped as \\xNN): rename one of them")
        out[text] = real
    return sorted(out.items())


def _text(name: str) -> str:
    """A stored path as text: bytes of a file name that are not UTF-8 (which Python holds as lone
    surrogates, and DuckDB refuses: the source's whole ingest failed on every run) as ``\\xff``.
    The real path still opens the file; only the stored name shows the escape."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


_MAGIC = re.compile(r"[*?[]")
# What Path.is_file takes for "not a file" rather than an error (pathlib's _ignore_error): a
# missing target, a path through a file, a bad descriptor, a link loop.
_NOT_A_FILE = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def _scan(directory: Path, name: str) -> list[tuple[str, bool]]:
    """(name, is a link) of the files (or links to files) in ``directory`` that ``name`` matches
    as ``Path.glob`` matches a last part: case-sensitive, hidden files included; a directory that
    is missing matches nothing, one that may not be listed raises PermissionError, another error
    is raised too; an entry that is a broken link or a link loop is not a file. A name without
    wildcards is looked up, not listed."""
    if _MAGIC.search(name) is None:
        path = os.path.join(directory, name)
        return [(name, os.path.islink(path))] if _is_file(path) else []
    match = re.compile(fnmatch.translate(name)).fullmatch
    try:
        with os.scandir(directory) as entries:
            return [(e.name, e.is_symlink()) for e in entries if match(e.name) and _is_file(e)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def no_files_warning(name: str, globs, raw_dir: Path, unlisted: list[tuple[str, str]]) -> str:
    """The warning for a source that ``listing`` found no file of: none match, or a directory
    its globs name may not be listed (it said "no files match" of a directory it could not read)."""
    if unlisted:
        where = ", ".join(sorted({prefix or "." for prefix, _ in unlisted}))
        return f"source {name}: {where} under {raw_dir} may not be listed (permission denied): none of its files read"
    return f"source {name}: no files match {', '.join(globs)} under {raw_dir}"


def unlisted_covers(unlisted: list[tuple[str, str]], path: str) -> bool:
    """Whether a stored path lies where ``listing`` could not look (``unlisted``)."""
    return any(path.startswith(prefix) and "/" not in path[len(prefix):]
               and fnmatch.fnmatchcase(path[len(prefix):], name) for prefix, name in unlisted)


def _is_file(path: str | os.DirEntry) -> bool:
    """``Path.is_file``: a regular file, through links (a listed entry's type costs no call). A
    path that may not be looked up (permission denied: a link into a directory that may not be
    searched, a named file in one) counts as a file: its reader reports it ``unreadable`` and the
    rows it had stay (else one such link hid its whole directory, one such name failed the step)."""
    try:
        return path.is_file() if isinstance(path, os.DirEntry) else stat.S_ISREG(os.stat(path).st_mode)
    except PermissionError:
        return True
    except OSError as exc:
        if exc.errno in _NOT_A_FILE:
            return False
        raise


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
        yield from _glob(os.path.expanduser(pattern), raw_dir)


def _glob(pattern: str, raw_dir: Path) -> Iterator[Path]:
    if os.path.isabs(pattern):
        anchor = Path(pattern).anchor
        matches = Path(anchor).glob(os.path.relpath(pattern, anchor))
    else:
        matches = raw_dir.glob(pattern)
    return (real for real in matches if _is_file(str(real)))


class _Resolver:
    """``stored_path`` for many files of few directories: ``Path.resolve`` lstats every component
    of every path (~0.25 ms a file, seconds on a lake of thousands of files), so each directory is
    resolved once and each file only checked for being a link."""

    def __init__(self, raw_dir: Path):
        self.root = raw_dir.resolve()
        self.prefixes: dict[str, str] = {}  # directory as given -> its stored path and "/"

    def stored(self, real: Path) -> str:
        if real.is_symlink():
            return _relative(real.resolve(), self.root)
        return self.in_dir(real.parent, real.name)

    def in_dir(self, directory: Path, name: str) -> str:
        """The stored path of ``directory``/``name``, a file that is not a link."""
        key = str(directory)
        prefix = self.prefixes.get(key)
        if prefix is None:
            stored = _relative(directory.resolve(), self.root)
            prefix = self.prefixes[key] = "" if stored == "." else stored.rstrip("/") + "/"
        return prefix + name


def stored_path(real: Path, raw_dir: Path) -> str:
    return _text(_relative(real.resolve(), raw_dir.resolve()))


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
