"""Turn ``git log --numstat`` text and session tags into eventlog rows (the retrieval tool's
scraper output), so real repositories' history can be a test fixture.

Input formats: ``git log --pretty=format:'%H|%s|%an|%ae|%aI' --numstat --no-merges`` and a tag
listing ``name|object type|creator date (ISO)|target sha|subject``.
"""

from __future__ import annotations

import json
import re

RENAME_BRACES = re.compile(r"\{([^{}]*) => ([^{}]*)\}")
TAG = re.compile(r"^session-(\d{8}-\d{6})(?:-([A-Za-z0-9_]+))?-(start|end)$")


def resolve_rename(path: str) -> str:
    """``a => b`` → ``b``; ``dir/{a => b}/f`` → ``dir/b/f``; ``dir/{ => sub}/f`` → ``dir/sub/f``."""
    if "{" in path and " => " in path:
        path = RENAME_BRACES.sub(lambda m: m.group(2), path)
        path = re.sub(r"/{2,}", "/", path).strip("/")
        return path
    if " => " in path:
        return path.split(" => ", 1)[1]
    return path


def parse_numstat_log(text: str) -> list[dict]:
    commits: list[dict] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) == 3 and commits:
            added, removed, path = parts
            commits[-1]["files"].append({
                "path": path,
                "change_type": "modified",  # numstat has no status letter
                "lines_added": None if added == "-" else int(added),
                "lines_removed": None if removed == "-" else int(removed),
            })
            continue
        sha, rest = line.split("|", 1)
        message, author, email, date = rest.rsplit("|", 3)
        commits.append({"sha": sha, "message": message, "author_name": author, "author_email": email,
                        "date": date, "files": []})
    return commits


def parse_session_tags(text: str) -> list[dict]:
    tags = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _kind, date, sha, subject = line.split("|", 4)
        tags.append({"tag_name": name, "tag_date": date, "sha": sha, "message": subject})
    return tags


def to_eventlog_rows(commits: list[dict], tags: list[dict]) -> list[dict]:
    """Eventlog rows (``event_type, timestamp, source_id, source_file, data``) in scrape order."""
    rows = []
    for tag in tags:
        if TAG.match(tag["tag_name"]):
            rows.append({"event_type": "git.tag", "timestamp": tag["tag_date"], "source_id": tag["tag_name"],
                         "source_file": None, "data": json.dumps({**tag, "tagger_name": None})})
    for commit in reversed(commits):  # git log is newest first; the scraper appends oldest first
        data = {k: commit[k] for k in ("sha", "message", "author_name", "author_email", "files")}
        rows.append({"event_type": "git.commit", "timestamp": commit["date"], "source_id": commit["sha"],
                     "source_file": None, "data": json.dumps(data)})
    return rows
