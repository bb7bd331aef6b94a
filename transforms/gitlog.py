"""Turn ``git log --numstat`` text and session tag listings into eventlog rows.

This is what the retrieval tool's git scraper does, as pure functions, so real repositories'
history can be loaded as ``git.commit`` / ``git.tag`` events (test fixtures, backfills).

Input formats
* commits: ``git log --pretty=format:'%H|%s|%an|%ae|%aI' --numstat --no-merges`` — a header
  line per commit, then one ``added<TAB>removed<TAB>path`` line per file (``-`` counts for
  binary files), commits separated by blank lines. ``%s`` may itself contain ``|``: the sha is
  the text before the first ``|`` and name, e-mail and date are the last three fields.
* tags: ``name|object type|creator date (ISO)|target sha|subject`` (``git for-each-ref
  --format='%(refname:short)|%(objecttype)|%(creatordate:iso-strict)|%(*objectname)|%(subject)'``).

``--numstat`` has no status letter, so ``change_type`` is always ``modified``: added and deleted
files cannot be told apart from modified ones by their counts (a new empty file is ``0 0``, a
rewrite can remove every line). Paths stay as git prints them (rename text such as
``src/{a => b}/x.rs`` included); :func:`resolve_rename` gives the new path. C-quoted paths
(``"caf\\303\\251.rs"``, git's ``core.quotePath``) are unquoted.

Session ids: ``YYYYMMDD-HHMMSS``, optionally followed by an adapter suffix (``-claude``) that
:func:`normalize_session_id` strips. Session tags are ``session-<id>[-<adapter>]-start|end``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable


def lines(text: str) -> list[str]:
    """``text``'s lines: ended by ``\\n`` (git's), ``\\r\\n`` or ``\\r`` (a file saved on another
    system), not at U+2028, U+2029 or U+0085, where ``str.splitlines`` also ends one (a commit
    subject may hold them)."""
    return re.split(r"\r\n|[\r\n]", text.removesuffix("\n").removesuffix("\r"))


HEADER = re.compile(r"^(?P<sha>[0-9a-f]{40}(?:[0-9a-f]{24})?)\|(?P<rest>.*)$")
NUMSTAT = re.compile(r"^(?P<added>\d+|-)\t(?P<removed>\d+|-)\t(?P<path>.+)$")
# "pfx{old => new}sfx": git prints at most one brace group; either side may be empty.
RENAME_BRACES = re.compile(r"\{([^{}]*) => ([^{}]*)\}")
TAG = re.compile(r"^session-(\d{8}-\d{6})(?:-([A-Za-z][A-Za-z0-9_]*))?-(start|end)$")
SESSION_ID = re.compile(r"^(\d{8}-\d{6})(?:-[A-Za-z][A-Za-z0-9_]*)?$")
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def resolve_rename(path: str) -> str:
    """The new path named by numstat rename text.

    ``a => b`` → ``b``; ``dir/{a => b}/f`` → ``dir/b/f``; ``dir/{ => sub}/f`` → ``dir/sub/f``;
    ``dir/{sub => }/f`` → ``dir/f``; ``{a => }/f`` → ``f``. Other paths are returned unchanged.
    The SQL twin is in ``sql/staging/eventlog_commit_files.sql`` (tests check they agree).
    """
    if RENAME_BRACES.search(path):
        resolved = RENAME_BRACES.sub(lambda m: m.group(2), path, count=1)
        # an empty side leaves "dir//f" or a leading "/": git paths never contain either
        return re.sub(r"/{2,}", "/", resolved).lstrip("/")
    if " => " in path:
        return path.split(" => ", 1)[1]
    return path


def normalize_session_id(raw: str | None) -> str | None:
    """``20260116-105801-claude`` → ``20260116-105801`` (the adapter suffix is stripped).

    An id of another shape is kept, trimmed (so both sides of a join normalise alike); empty →
    None. The SQL twin is in ``sql/staging/eventlog_git_commits.sql`` and the scry tables.
    """
    if raw is None:
        return None
    text = raw.strip(" ")  # like SQL trim(): spaces only
    m = SESSION_ID.match(text)
    return m.group(1) if m else (text or None)


def parse_session_tag(name: str) -> tuple[str, str | None, str] | None:
    """``session-<id>[-<adapter>]-start|end`` → ``(session_id, adapter, edge)``, else None."""
    m = TAG.match(name)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def _unquote_c(path: str) -> str:
    """Undo git's C-style quoting of unusual paths (octal escapes are UTF-8 bytes)."""
    if len(path) < 2 or not (path.startswith('"') and path.endswith('"')):
        return path
    body, out, i = path[1:-1], bytearray(), 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567" and re.match(r"[0-7]{3}", body[i + 1:i + 4]):
                out.append(int(body[i + 1:i + 4], 8))
                i += 4
                continue
            if nxt in _C_ESCAPES:
                out.append(_C_ESCAPES[nxt])
                i += 2
                continue
        out += ch.encode("utf-8")
        i += 1
    return out.decode("utf-8", errors="surrogateescape")


def parse_numstat_log(text: str) -> list[dict[str, Any]]:
    """Commits in log order (newest first, as git prints them).

    Each: ``{sha, message, author_name, author_email, date (the %aI text), files: [{path,
    change_type, lines_added, lines_removed}]}``; counts are ``None`` for binary files (``-``).
    A line that is neither a header, a numstat line nor blank raises ``ValueError`` (with its
    1-based line number): nothing is dropped silently.
    """
    commits: list[dict[str, Any]] = []
    for number, line in enumerate(lines(text), start=1):
        if not line.strip():
            continue
        stat = NUMSTAT.match(line)
        if stat and commits:
            added, removed = stat["added"], stat["removed"]
            commits[-1]["files"].append({
                "path": _unquote_c(stat["path"]),
                "change_type": "modified",  # numstat has no status letter (see module doc)
                "lines_added": None if added == "-" else int(added),
                "lines_removed": None if removed == "-" else int(removed),
            })
            continue
        header = HEADER.match(line)
        if header and header["rest"].count("|") >= 3:
            message, author, email, date = header["rest"].rsplit("|", 3)
            commits.append({"sha": header["sha"], "message": message, "author_name": author,
                            "author_email": email, "date": date, "files": []})
            continue
        raise ValueError(f"line {number}: neither a commit header nor a numstat line: {line[:120]!r}")
    return commits


def parse_session_tags(text: str) -> list[dict[str, Any]]:
    """Tags in listing order: ``{tag_name, object_type, tag_date, sha, message}`` plus, for
    session tags, ``session_id`` (suffix stripped), ``adapter`` and ``edge`` (start|end);
    these three are None for other tags. A line without five fields raises ``ValueError``."""
    tags = []
    for number, line in enumerate(lines(text), start=1):
        if not line.strip():
            continue
        parts = line.split("|", 4)
        if len(parts) != 5:
            raise ValueError(f"line {number}: expected name|type|date|sha|subject: {line[:120]!r}")
        name, kind, date, sha, subject = parts
        session = parse_session_tag(name)
        tags.append({"tag_name": name, "object_type": kind, "tag_date": date, "sha": sha,
                     "message": subject,
                     "session_id": session[0] if session else None,
                     "adapter": session[1] if session else None,
                     "edge": session[2] if session else None})
    return tags


def to_eventlog_rows(
    commits: Iterable[dict[str, Any]],
    tags: Iterable[dict[str, Any]] = (),
    *,
    session_ids: dict[str, str] | None = None,
    start_seq: int = 1,
    source_file: str | None = None,
    tagger_name: str | None = None,
) -> list[dict[str, Any]]:
    """Eventlog rows ``{seq, event_type, timestamp, source_id, source_file, data}`` (``data`` a
    JSON string), as the scraper appends them: commits oldest first (``commits`` is in git log
    order, newest first), then tags in listing order; ``seq`` counts up from ``start_seq``.

    * ``git.commit``: ``timestamp`` = the author date with its offset, ``source_id`` = sha,
      ``data`` = ``{sha, message, author_name, author_email, files}`` plus ``session_id`` when
      ``session_ids`` names one for that sha (as given: adapter suffixes are kept).
    * ``git.tag``: ``timestamp`` = the creator date, ``source_id`` = the tag name, ``data`` =
      ``{tag_name, sha, tag_date, tagger_name, message}``.
    """
    session_ids = session_ids or {}
    rows: list[dict[str, Any]] = []
    seq = start_seq

    def emit(event_type: str, timestamp: str, source_id: str, data: dict[str, Any]) -> None:
        nonlocal seq
        rows.append({"seq": seq, "event_type": event_type, "timestamp": timestamp,
                     "source_id": source_id, "source_file": source_file,
                     "data": json.dumps(data, ensure_ascii=False)})
        seq += 1

    for commit in reversed(list(commits)):
        data = {k: commit[k] for k in ("sha", "message", "author_name", "author_email")}
        data["files"] = [{k: f[k] for k in ("path", "change_type", "lines_added", "lines_removed")}
                         for f in commit["files"]]
        if commit["sha"] in session_ids:
            data["session_id"] = session_ids[commit["sha"]]
        emit("git.commit", commit["date"], commit["sha"], data)
    for tag in tags:
        emit("git.tag", tag["tag_date"], tag["tag_name"],
             {"tag_name": tag["tag_name"], "sha": tag["sha"], "tag_date": tag["tag_date"],
              "tagger_name": tag.get("tagger_name", tagger_name), "message": tag["message"]})
    return rows
