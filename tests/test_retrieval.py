"""Retrieval precision from the eventlog, on eventlogs read through the real engine."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

import pytest

from conftest import SAMPLES, ingest, rows, write_lines
from transforms import gitlog
from transforms.retrieval import build_eventlog_staging, build_retrieval_marts, feedback_report


def commit(sha, when, files, session=None):
    data = {"sha": sha, "message": "m", "author_name": "a", "author_email": "a@x", "files": [
        {"path": f, "change_type": "modified", "lines_added": 1, "lines_removed": 0} for f in files]}
    if session:
        data["session_id"] = session
    return ("git.commit", when, sha, data)


def tag(name, when):
    return ("git.tag", when, name, {"tag_name": name, "sha": "0" * 40, "tag_date": when, "tagger_name": "t",
                                    "message": ""})


def query(qid, when, session, docs, mode="hybrid", v2=True):
    data = {"query": "q", "mode": mode, "session_id": session,
            "results": [{"doc_id": d, "score": 0.5, "rank": i + 1, "event_type": "x"} for i, d in enumerate(docs)]}
    if v2:
        data["query_id"] = qid
    return ("scry.query", when, qid if v2 else when, data)


def build(settings, events):
    lines = [json.dumps({"seq": i + 1, "event_type": e, "timestamp": ts, "source_id": sid, "source_file": None,
                         "data": json.dumps(data)}) for i, (e, ts, sid, data) in enumerate(events)]
    write_lines(settings.raw_dir / "eventlog" / "events.jsonl", lines)
    con, _ = ingest(settings, sources=["eventlog"])
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    build_eventlog_staging(con)
    build_retrieval_marts(con)
    return con


def test_metrics_for_one_hand_computed_query(settings):
    con = build(settings, [
        tag("session-20251217-070135-start", "2025-12-17T07:01:35-05:00"),
        tag("session-20251217-070135-end", "2025-12-17T09:00:00-05:00"),
        query("q_1", "2025-12-17T12:10:00.123456789+00:00", "20251217-070135",
              ["src/a.rs", "src/x.rs", "./src/b.rs::fn:main", "persona:reviewer", "20251217-070135"]),
        commit("c1", "2025-12-17T08:00:00-05:00", ["src/a.rs", "src/b.rs", "src/c.rs"]),  # multi-file commit
    ])
    (row,) = rows(con, "select retrieved, hits, touched, precision, recall, reciprocal_rank, ndcg "
                       "from marts.retrieval_query_metrics")
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert row[:3] == (3, 2, 3)
    assert row[3] == pytest.approx(2 / 3) and row[4] == pytest.approx(2 / 3) and row[5] == 1.0
    assert row[6] == pytest.approx((1 + 1 / math.log2(4)) / idcg)
    assert rows(con, "select rank, retrieved, hits from marts.retrieval_precision_by_rank") == [(1, 1, 1), (2, 1, 0), (3, 1, 1)]
    assert rows(con, "select non_path_results from marts.retrieval_summary") == [(2,)]
    assert rows(con, "select file_path, sessions_missed from marts.missed_files") == [("src/c.rs", 1)]
    report = feedback_report(con)
    assert "Queries with commit data: 1" in report and "Overall precision: 66.7%" in report
    assert "src/c.rs" in report and "MRR: 1.000" in report


def test_original_tool_bugs_stay_fixed(settings):
    """_ and % are not wildcards, substrings do not match, code facts match their file."""
    con = build(settings, [
        commit("c1", "2025-12-17T08:00:00+00:00", ["src/axb.rs", "src/main.rs", "lib/util%.rs"], session="20251217-070000"),
        query("q_1", "2025-12-17T08:30:00+00:00", "20251217-070000",
              ["src/a_b.rs", "main.rs", "lib/util_.rs", "./src/main.rs::fn:main"]),
    ])
    assert rows(con, "select doc_path, hit from marts.retrieval_judgements order by rank") == [
        ("src/a_b.rs", False), ("main.rs", False), ("lib/util_.rs", False), ("src/main.rs", True)]


def test_session_linkage_rules(settings):
    con = build(settings, [
        # explicit session id with an adapter suffix
        commit("c_data", "2026-01-16T11:00:00+00:00", ["a.rs"], session="20260116-105801-claude"),
        # tag window, given in New York time; the commit is in Tokyo time near the window's end
        tag("session-20260110-090000-start", "2026-01-10T09:00:00-05:00"),
        tag("session-20260110-090000-end", "2026-01-10T10:00:00-05:00"),
        commit("c_edge_in", "2026-01-11T00:00:00+09:00", ["b.rs"]),   # = 15:00Z = 10:00 -05:00, inside
        commit("c_edge_out", "2026-01-11T00:00:01+09:00", ["c.rs"]),  # one second after the end
        # no end tag: 24 h window
        tag("session-20260120-080000-start", "2026-01-20T08:00:00+00:00"),
        commit("c_open", "2026-01-21T07:59:59+00:00", ["d.rs"]),
        commit("c_late", "2026-01-21T08:00:01+00:00", ["e.rs"]),
        # overlapping windows: the most recently started wins
        tag("session-20260125-080000-start", "2026-01-25T08:00:00+00:00"),
        tag("session-20260125-090000-claude-start", "2026-01-25T09:00:00+00:00"),
        tag("session-20260125-090000-claude-end", "2026-01-25T10:00:00+00:00"),
        commit("c_overlap", "2026-01-25T09:30:00+00:00", ["f.rs"]),
    ])
    # c_edge_out (a second after the end) and c_late (a second after the open 24 h) link to nothing
    assert dict(rows(con, "select sha, session_id from staging.commit_sessions")) == {
        "c_data": "20260116-105801", "c_edge_in": "20260110-090000", "c_open": "20260120-080000",
        "c_overlap": "20260125-090000"}
    assert dict(rows(con, "select sha, linked_by from staging.commit_sessions"))["c_data"] == "commit_data"


def _python_linkage(commits, tags):
    """An independent implementation of SPEC 4.2's linkage, for cross-checking the SQL."""
    starts, ends = {}, {}
    for t in tags:
        m = gitlog.TAG.match(t["tag_name"])
        if not m:
            continue
        at = datetime.fromisoformat(t["tag_date"])
        bucket = starts if m.group(3) == "start" else ends
        bucket.setdefault(m.group(1), []).append(at)
    windows = []
    for sid, times in starts.items():
        start = min(times)
        later_ends = [e for e in ends.get(sid, []) if e >= start]
        windows.append((sid, start, min(later_ends) if later_ends else start + timedelta(hours=24)))
    linked = {}
    for c in commits:
        at = datetime.fromisoformat(c["date"])
        holding = [w for w in windows if w[1] <= at <= w[2]]
        if holding:
            linked[c["sha"]] = max(holding, key=lambda w: (w[1], w[0]))[0]
    return windows, linked


def test_real_patina_history(settings):
    commits = gitlog.parse_numstat_log((SAMPLES / "patina" / "git_log_numstat_2025-12-17_to_23.txt").read_text())
    tags = gitlog.parse_session_tags((SAMPLES / "patina" / "session_tags.psv").read_text())
    events = [(r["event_type"], r["timestamp"], r["source_id"], json.loads(r["data"]))
              for r in gitlog.to_eventlog_rows(commits, tags)]
    con = build(settings, events)
    windows, linked = _python_linkage(commits, tags)
    assert len(commits) == 61
    assert rows(con, "select count(*) from staging.git_commits") == [(61,)]
    assert rows(con, "select count(*) from staging.session_windows") == [(len(windows),)]
    assert dict(rows(con, "select sha, session_id from staging.commit_sessions")) == linked
    assert len(linked) > 30  # most of that week's commits happened inside a session
    n_files = len({(c["sha"], gitlog.resolve_rename(f["path"])) for c in commits for f in c["files"]})
    assert rows(con, "select count(*) from staging.commit_files") == [(n_files,)]


def test_ripgrep_renames_resolve_like_the_python_parser(settings):
    commits = gitlog.parse_numstat_log((SAMPLES / "ripgrep" / "git_log_numstat_2016-09_to_2017-03.txt").read_text())
    assert len(commits) == 524  # every '%H|…' header in the file (the samples README says 420)
    events = [(r["event_type"], r["timestamp"], r["source_id"], json.loads(r["data"]))
              for r in gitlog.to_eventlog_rows(commits, [])]
    con = build(settings, events)
    sql = dict(rows(con, "select raw_path, file_path from staging.commit_files where raw_path like '%=>%'"))
    assert sql and all(gitlog.resolve_rename(raw) == resolved for raw, resolved in sql.items())
    assert sql["globset/src/{pattern.rs => glob.rs}"] == "globset/src/glob.rs"
    assert sql["{benches => globset/benches}/bench.rs"] == "globset/benches/bench.rs"
    assert sql["benchsuite => benchsuite/benchsuite"] == "benchsuite/benchsuite"


def test_resolve_rename_edge_cases():
    assert gitlog.resolve_rename("a => b") == "b"
    assert gitlog.resolve_rename("dir/{a => b}/f") == "dir/b/f"
    assert gitlog.resolve_rename("dir/{ => sub}/f") == "dir/sub/f"
    assert gitlog.resolve_rename("{old => }/f") == "f"
    assert gitlog.resolve_rename("plain/path.rs") == "plain/path.rs"
