"""Retrieval utility and precision from the eventlog (SPEC 4.2) on hand-built staging.eventlog
tables: hand-computed metrics, every session linkage rule, the original tool's bugs, the real
patina history (git log + session tags) and the feedback report."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from conftest import SAMPLES
from eventlog_fixtures import EventLake
from transforms import gitlog
from transforms.retrieval import feedback_report, normalize_doc_id


def log2(x: float) -> float:
    return math.log2(x)


def idcg(n: int) -> float:
    return sum(1 / log2(i + 1) for i in range(1, n + 1))


# ---------------------------------------------------------------------------- metrics


def test_one_hand_computed_query():
    ev = EventLake()
    ev.tag("session-20251217-070135-start", "2025-12-17T07:01:35-05:00")
    ev.tag("session-20251217-070135-end", "2025-12-17T09:00:00-05:00")
    ev.commit("c1", "2025-12-17T08:00:00-05:00", ["src/a.rs", "src/b.rs", "src/c.rs"])  # one multi-file commit
    ev.query("q_1", "2025-12-17T12:10:00.123456789+00:00", "20251217-070135", [
        "src/a.rs",              # 1 hit
        "src/x.rs",              # 2 miss
        "./src/b.rs::fn:main",   # 3 hit (code fact of src/b.rs)
        "persona:reviewer",      # 4 not a path: counted apart
        "20251217-070135",       # 5 a session id: counted apart
        "./src/b.rs::fn:other",  # 6 the same file again: one retrieved file, at its best rank (3)
        "src/a_rs",              # 7 miss ('_' is not a wildcard)
    ])
    ev.build()
    assert ev.rows("select query_id, session_id, mode, retrieved, hits, touched from marts.retrieval_query_metrics") \
        == [("q_1", "20251217-070135", "hybrid", 4, 2, 3)]
    precision, recall, rr, ndcg = ev.one(
        "select precision, recall, reciprocal_rank, ndcg from marts.retrieval_query_metrics")
    assert precision == 0.5 and recall == pytest.approx(2 / 3) and rr == 1.0
    assert ndcg == pytest.approx((1 / log2(2) + 1 / log2(4)) / idcg(3))  # k = 4, ideal: 3 touched files
    assert ndcg == pytest.approx(0.703918, abs=1e-6)
    assert ev.rows("select doc_path, rank, results, hit from marts.retrieval_judgements order by rank") == [
        ("src/a.rs", 1, 1, True), ("src/x.rs", 2, 1, False), ("src/b.rs", 3, 2, True), ("src/a_rs", 7, 1, False)]
    assert ev.rows("select rank, retrieved, hits, precision from marts.retrieval_precision_by_rank") == [
        (1, 1, 1, 1.0), (2, 1, 0, 0.0), (3, 1, 1, 1.0), (7, 1, 0, 0.0)]
    assert ev.rows("select queries, retrieved, hits, precision, mean_recall, mrr, non_path_results, "
                   "session_results, persona_results from marts.retrieval_summary") == [
        (1, 4, 2, 0.5, pytest.approx(2 / 3), 1.0, 2, 1, 1)]
    assert ev.rows("select file_path, sessions_missed from marts.missed_files") == [("src/c.rs", 1)]


def scenario() -> EventLake:
    """Three sessions, six queries (four counted), uses and ratings."""
    ev = EventLake()
    s1, s2, s3 = "20260105-090000", "20260106-090000", "20260107-090000"
    ev.commit("k1", "2026-01-05T10:00:00+00:00", ["src/lib.rs", "src/main.rs"], session=f"{s1}-claude")
    ev.commit("k2", "2026-01-05T11:00:00+00:00", ["src/lib.rs", "docs/guide.md"], session=s1)
    ev.commit("k3", "2026-01-06T10:00:00+00:00", ["src/util.rs", "docs/guide.md"], session=s2)
    ev.query("q1", "2026-01-05T09:10:00+00:00", s1, ["src/lib.rs", "src/util.rs", "README.md"])
    ev.query("q2", "2026-01-05T09:20:00+00:00", s1, ["README.md", "src/main.rs", "./src/lib.rs::fn:run"], mode="graph",
             routing={"strategy": "graph"})
    ev.query("q3", "2026-01-06T09:10:00+00:00", s2, ["src/lib.rs", "src/util.rs"])
    q4 = ev.query("q4", "2026-01-06T09:20:00.5+00:00", s2, ["persona:architect"], v2=False)
    ev.query("q5", "2026-01-07T09:10:00+00:00", s3, ["src/lib.rs"])  # a session without commits
    ev.query("q6", "2026-01-07T09:20:00+00:00", None, ["src/lib.rs"])  # no session
    ev.use("q1", "src/lib.rs", 1, "2026-01-05T09:11:00+00:00", s1)
    ev.use("q1", "./src/util.rs::fn:x", 2, "2026-01-05T09:12:00+00:00", s1)
    ev.use("q_unknown", "src/lib.rs", 1, "2026-01-05T09:13:00+00:00")
    ev.rating("q1", "good", "2026-01-05T09:14:00+00:00")
    ev.rating("q2", "bad", "2026-01-05T09:21:00+00:00", comment="off topic")
    ev.rating("q2", "good", "2026-01-05T09:25:00+00:00")
    ev.build()
    assert q4 == "2026-01-06T09:20:00.5+00:00"
    return ev


def test_scenario_query_metrics():
    ev = scenario()
    rows = ev.rows("select query_id, mode, retrieved, hits, touched, precision, recall, reciprocal_rank, ndcg "
                   "from marts.retrieval_query_metrics order by queried_at")
    expected = [
        ("q1", "hybrid", 3, 1, 3, 1 / 3, 1 / 3, 1.0, 1 / idcg(3)),
        ("q2", "graph", 3, 2, 3, 2 / 3, 2 / 3, 0.5, (1 / log2(3) + 1 / log2(4)) / idcg(3)),
        ("q3", "hybrid", 2, 1, 2, 0.5, 0.5, 0.5, (1 / log2(3)) / idcg(2)),
        ("2026-01-06T09:20:00.5+00:00", "hybrid", 0, 0, 2, None, 0.0, 0.0, None),
    ]
    assert rows == [tuple(pytest.approx(v) if isinstance(v, float) else v for v in row) for row in expected]
    # the seed's "Files subsequently committed": only the four counted queries count
    assert ev.rows("select queries, sessions, retrieved, hits, all_queries, queries_without_session, "
                   "non_path_results from marts.retrieval_summary") == [(4, 2, 8, 4, 6, 1, 1)]
    precision, mean_recall, mrr, mean_ndcg = ev.one(
        "select precision, mean_recall, mrr, mean_ndcg from marts.retrieval_summary")
    assert precision == 0.5
    assert mean_recall == pytest.approx((1 / 3 + 2 / 3 + 1 / 2 + 0) / 4) == 0.375
    assert mrr == pytest.approx(0.5)
    assert mean_ndcg == pytest.approx((1 / idcg(3) + (1 / log2(3) + 1 / log2(4)) / idcg(3) + (1 / log2(3)) / idcg(2)) / 3)


def test_scenario_rank_mode_utility_missed_usage():
    ev = scenario()
    assert ev.rows("select rank, retrieved, hits from marts.retrieval_precision_by_rank") == [
        (1, 3, 1), (2, 3, 2), (3, 2, 1)]
    assert ev.rows("select mode, queries, retrieved, hits, precision, mean_recall, mrr "
                   "from marts.retrieval_precision_by_mode") == [
        ("graph", 1, 3, 2, pytest.approx(2 / 3), pytest.approx(2 / 3), 0.5),
        ("hybrid", 3, 5, 2, pytest.approx(0.4), pytest.approx((1 / 3 + 1 / 2 + 0) / 3), pytest.approx(0.5))]
    assert ev.rows("select doc_path, times_retrieved, times_committed, hit_rate from marts.doc_utility") == [
        ("src/lib.rs", 3, 2, pytest.approx(2 / 3)), ("src/util.rs", 2, 1, 0.5), ("README.md", 2, 0, 0.0)]
    assert ev.rows("select file_path, sessions_missed from marts.missed_files") == [("docs/guide.md", 2)]
    assert ev.rows("select query_id, query_logged, uses, results_used, rated_good, rated_bad, last_rating "
                   "from marts.scry_usage order by query_id") == [
        ("2026-01-06T09:20:00.5+00:00", True, 0, 0, 0, 0, None),
        ("q1", True, 2, 2, 1, 0, "good"), ("q2", True, 0, 0, 1, 1, "good"), ("q3", True, 0, 0, 0, 0, None),
        ("q5", True, 0, 0, 0, 0, None), ("q6", True, 0, 0, 0, 0, None), ("q_unknown", False, 1, 1, 0, 0, None)]
    assert ev.rows("select used_doc_path from staging.scry_use order by used_at") == [
        ("src/lib.rs",), ("src/util.rs",), ("src/lib.rs",)]


def test_a_rank_that_is_not_an_integer_is_not_rounded():
    # try_cast('1.5' as bigint) is 2: a result logged at rank 1.5 counted as rank 2
    ev = EventLake()
    ev.query("q1", "2026-01-06T09:00:00Z", None, [
        {"doc_id": "a.rs", "score": 0.5, "rank": 1.5, "event_type": "x"},
        {"doc_id": "b.rs", "score": 0.4, "rank": 2.0, "event_type": "x"},
        {"doc_id": "c.rs", "score": 0.3, "rank": "7", "event_type": "x"}])
    ev.use("q1", "a.rs", 1.5, "2026-01-06T09:01:00Z")
    ev.use("q1", "b.rs", 2, "2026-01-06T09:02:00Z")
    ev.build()
    assert ev.rows("select doc_id, rank from staging.scry_results order by result_index") == [
        ("a.rs", 1), ("b.rs", 2), ("c.rs", 7)]  # not an integer: its position
    assert ev.rows("select used_doc_path, rank from staging.scry_use order by used_at") == [("a.rs", None), ("b.rs", 2)]

def test_feedback_report_says_how_many_ranks_it_leaves_out():
    con = scenario().con
    assert "more ranks" not in feedback_report(con)
    assert "  … 2 more ranks in marts.retrieval_precision_by_rank\n" in feedback_report(con, ranks=1)


def test_feedback_report_layout():
    report = feedback_report(scenario().con)
    assert report == """
━━━ Real-World Feedback ━━━

Queries with commit data: 4
Files retrieved: 8
Files subsequently committed: 4

Overall precision: 50.0%
Mean recall: 37.5%
MRR: 0.500
Mean nDCG: 0.462

Precision by rank:
  #1: 33%  #2: 67%  #3: 50%

High utility files (retrieved → committed):
  src/lib.rs                    (2/3 = 67%)
  src/util.rs                   (1/2 = 50%)

Missed files (committed but not retrieved):
  docs/guide.md                 (missed 2 times)

Logged queries: 6 (2 without commit data)
Results that are not files (session ids, personas), counted apart: 1
"""


def test_empty_eventlog_builds_and_reports():
    ev = EventLake()
    counts = ev.build()
    assert counts["marts.retrieval_summary"] == 1
    assert all(n == 0 for table, n in counts.items() if table != "marts.retrieval_summary")
    assert ev.rows("select queries, retrieved, hits, precision, mean_recall, mrr from marts.retrieval_summary") == [
        (0, 0, 0, None, None, None)]
    report = feedback_report(ev.con)
    assert "Queries with commit data: 0" in report and "Overall precision: n/a" in report
    assert report.count("(none)") == 3


def test_a_session_whose_commits_touch_no_file_still_counts():
    ev = EventLake()
    ev.commit("c1", "2026-01-05T10:00:00Z", [], session="20260105-090000")
    ev.query("q1", "2026-01-05T09:00:00Z", "20260105-090000", ["src/a.rs"])
    ev.build()
    assert ev.rows("select retrieved, hits, touched, precision, recall, reciprocal_rank, ndcg "
                   "from marts.retrieval_query_metrics") == [(1, 0, 0, 0.0, None, 0.0, 0.0)]


# ---------------------------------------------------------------------------- the original tool's bugs


def test_original_tool_bugs_stay_fixed():
    """Every file of every commit counts (not only commits carrying a session id, not only the
    first file); ids match exactly ('_' and '%' are not wildcards, substrings do not match);
    a code fact './src/x.rs::fn:main' matches 'src/x.rs'."""
    ev = EventLake()
    s = "20251217-070000"
    ev.tag(f"session-{s}-start", "2025-12-17T07:00:00+00:00")
    ev.tag(f"session-{s}-end", "2025-12-17T12:00:00+00:00")
    ev.commit("c1", "2025-12-17T08:00:00+00:00", ["src/axb.rs", "src/main.rs", "lib/util%.rs", "src/x.rs"], session=s)
    ev.commit("c2", "2025-12-17T09:00:00+00:00", ["src/y.rs"])  # no session id in its data: the tag window
    ev.query("q_1", "2025-12-17T07:30:00+00:00", s, [
        "src/a_b.rs", "main.rs", "lib/util_.rs", "lib/util%.rs", "./src/main.rs::fn:main", "src/x.rs", "%", "src",
        "src/y.rs"])
    ev.build()
    assert ev.rows("select doc_path, hit from marts.retrieval_judgements order by rank") == [
        ("src/a_b.rs", False), ("main.rs", False), ("lib/util_.rs", False), ("lib/util%.rs", True),
        ("src/main.rs", True), ("src/x.rs", True), ("%", False), ("src", False), ("src/y.rs", True)]
    assert ev.rows("select retrieved, hits, touched from marts.retrieval_query_metrics") == [(9, 4, 5)]
    assert ev.rows("select file_path, sessions_missed from marts.missed_files") == [("src/axb.rs", 1)]


@pytest.mark.parametrize("doc_id, kind, path", [
    ("src/x.rs", "path", "src/x.rs"),
    ("./src/main.rs::fn:main", "path", "src/main.rs"),
    ("././src/x.rs", "path", "src/x.rs"),
    ("src/x.rs::", "path", "src/x.rs"),
    ("Cargo.toml::dependencies", "path", "Cargo.toml"),
    ("layer/core/build.md", "path", "layer/core/build.md"),
    ("20251217-124012", "session", None),
    ("20260116-105801-claude", "session", None),
    ("persona:reviewer", "persona", None),
    ("https://example.com/x.rs", "other", None),
    ("::fn:main", "other", None),
    ("0123456789abcdef0123456789abcdef01234567", "other", None),
    ("", "other", None),
    ("  ", "other", None),
    (None, "other", None),
])
def test_doc_id_normalisation_alike_in_python_and_sql(doc_id, kind, path):
    assert normalize_doc_id(doc_id) == (kind, path)
    ev = EventLake()
    ev.query("q_1", "2025-12-17T07:30:00Z", "20251217-070000",
             [{"doc_id": doc_id, "score": 0.25, "rank": 1, "event_type": "code.function"}])
    ev.build()
    assert ev.rows("select doc_id, doc_kind, doc_path, rank, score, result_type from staging.scry_results") == [
        (doc_id, kind, path, 1, 0.25, "code.function")]


# ---------------------------------------------------------------------------- staging details


def test_query_staging_v1_v2_graph_fields():
    ev = EventLake()
    ev.query("q_20251223_101500_abc", "2025-12-23T15:15:00.123456789+00:00", "20251223-081330-claude",
             [{"doc_id": "src/a.rs", "score": 0.8999999761581421, "rank": 1, "event_type": "x",
               "source_repo": "patina", "weight": 0.7},
              {"doc_id": "src/b.rs", "score": 0.5}],  # no rank: its position
             mode="graph", routing={"repos": ["patina", "dojo"]})
    ev.query("ignored", "2025-12-23T15:16:00+00:00", "20251223-081330", ["src/c.rs"], mode="semantic", v2=False)
    ev.build()
    assert ev.rows("select query_id, version, queried_at, queried_at_text, mode, session_id_raw, session_id, "
                   "routing::varchar, n_results from staging.scry_queries order by queried_at") == [
        ("q_20251223_101500_abc", 2, datetime(2025, 12, 23, 15, 15, 0, 123456, tzinfo=timezone.utc),
         "2025-12-23T15:15:00.123456789+00:00", "graph", "20251223-081330-claude", "20251223-081330",
         '{"repos":["patina","dojo"]}', 2),
        ("2025-12-23T15:16:00+00:00", 1, datetime(2025, 12, 23, 15, 16, tzinfo=timezone.utc),
         "2025-12-23T15:16:00+00:00", "semantic", "20251223-081330", "20251223-081330", None, 1)]
    assert ev.rows("select query_id, rank, score, doc_path, source_repo, weight from staging.scry_results "
                   "order by query_id, rank") == [
        ("2025-12-23T15:16:00+00:00", 1, 0.5, "src/c.rs", None, None),
        ("q_20251223_101500_abc", 1, 0.8999999761581421, "src/a.rs", "patina", 0.7),
        ("q_20251223_101500_abc", 2, 0.5, "src/b.rs", None, None)]


def test_rescraped_commit_latest_seq_wins():
    ev = EventLake()
    ev.commit("c1", "2026-01-05T10:00:00+00:00", ["a.rs"], session="20260105-090000", seq=1)
    ev.commit("c1", "2026-01-05T10:00:00+00:00", ["a.rs", "b.rs"], session="20260105-090000", seq=5)
    ev.build()
    assert ev.rows("select sha, seq, n_files from staging.git_commits") == [("c1", 5, 2)]
    assert ev.rows("select file_path from staging.commit_files order by 1") == [("a.rs",), ("b.rs",)]


def test_commit_files_keep_counts_and_binary_entries():
    ev = EventLake()
    ev.commit("c1", "2026-01-05T10:00:00+00:00", [
        {"path": "src/{old => new}/x.rs", "change_type": "modified", "lines_added": 3, "lines_removed": 2},
        {"path": "logo.png", "change_type": "added", "lines_added": None, "lines_removed": None}])
    ev.build()
    assert ev.rows("select file_path, raw_path, old_path, change_type, lines_added, lines_removed, file_index "
                   "from staging.commit_files order by file_index") == [
        ("src/new/x.rs", "src/{old => new}/x.rs", "src/old/x.rs", "modified", 3, 2, 1),
        ("logo.png", "logo.png", None, "added", None, None, 2)]


# ---------------------------------------------------------------------------- session linkage


def linkage() -> EventLake:
    ev = EventLake()
    # 1. the commit's own session id (adapter suffix stripped), even inside another window
    ev.tag("session-20260116-100000-start", "2026-01-16T10:00:00+00:00")
    ev.commit("c_data", "2026-01-16T11:00:00+00:00", ["a.rs"], session="20260116-105801-claude")
    ev.commit("c_data_plain", "2026-01-16T11:30:00+00:00", ["a.rs"], session="20260116-105801")
    # 2. a tag window given in New York time; commits in other zones near its edges, where
    #    comparing the texts would give the opposite answer
    ev.tag("session-20260110-090000-start", "2026-01-10T09:00:00-05:00")  # 14:00Z
    ev.tag("session-20260110-090000-end", "2026-01-10T10:00:00-05:00")    # 15:00Z
    ev.commit("c_at_start", "2026-01-10T06:00:00-08:00", ["b.rs"])        # 14:00Z: the start itself
    ev.commit("c_tokyo_in", "2026-01-10T23:30:00+09:00", ["b.rs"])        # 14:30Z
    ev.commit("c_at_end", "2026-01-11T00:00:00+09:00", ["b.rs"])          # 15:00Z: the end itself
    ev.commit("c_after_end", "2026-01-11T00:00:01+09:00", ["c.rs"])       # 15:00:01Z
    ev.commit("c_utc_before", "2026-01-10T09:30:00+00:00", ["c.rs"])      # 09:30Z, hours before the start
    # 3. no end tag: 24 h, both bounds inclusive
    ev.tag("session-20260120-080000-start", "2026-01-20T08:00:00+00:00")
    ev.commit("c_open_last", "2026-01-21T08:00:00+00:00", ["d.rs"])
    ev.commit("c_open_after", "2026-01-21T08:00:01+00:00", ["d.rs"])
    # 4. overlapping windows: the most recently started session wins
    ev.tag("session-20260125-080000-start", "2026-01-25T08:00:00+00:00")
    ev.tag("session-20260125-090000-claude-start", "2026-01-25T09:00:00+00:00")
    ev.tag("session-20260125-090000-claude-end", "2026-01-25T10:00:00+00:00")
    ev.commit("c_overlap_before", "2026-01-25T08:30:00+00:00", ["e.rs"])
    ev.commit("c_overlap", "2026-01-25T09:30:00+00:00", ["e.rs"])
    ev.commit("c_overlap_after", "2026-01-25T10:30:00+00:00", ["e.rs"])
    # 5. an orphan end tag opens no window
    ev.tag("session-20260201-100000-end", "2026-02-01T12:00:00+00:00")
    ev.commit("c_orphan", "2026-02-01T11:00:00+00:00", ["f.rs"])
    # 6. duplicate start tags (with and without adapter): the earliest starts the session
    ev.tag("session-20260205-100000-start", "2026-02-05T10:00:00+00:00")
    ev.tag("session-20260205-100000-claude-start", "2026-02-05T10:05:00+00:00")
    ev.tag("session-20260205-100000-end", "2026-02-05T11:00:00+00:00")
    ev.commit("c_dup", "2026-02-05T10:02:00+00:00", ["g.rs"])
    # 7. a tag scraped twice after it was moved: its latest scrape counts
    ev.tag("session-20260210-100000-start", "2026-02-10T10:00:00+00:00")
    ev.tag("session-20260210-100000-end", "2026-02-10T11:00:00+00:00")
    ev.tag("session-20260210-100000-end", "2026-02-10T12:00:00+00:00")
    ev.commit("c_moved", "2026-02-10T11:30:00+00:00", ["h.rs"])
    # 8. start == end: a zero-length window holding exactly that instant
    ev.tag("session-20260215-100000-start", "2026-02-15T10:00:00+00:00")
    ev.tag("session-20260215-100000-end", "2026-02-15T10:00:00+00:00")
    ev.commit("c_zero", "2026-02-15T05:00:00-05:00", ["i.rs"])
    ev.commit("c_zero_after", "2026-02-15T10:00:01+00:00", ["i.rs"])
    # 9. an end tag before the start is ignored: the session is open for 24 h
    ev.tag("session-20260220-100000-end", "2026-02-20T09:00:00+00:00")
    ev.tag("session-20260220-100000-start", "2026-02-20T10:00:00+00:00")
    ev.commit("c_late_in", "2026-02-21T09:00:00+00:00", ["j.rs"])
    ev.build()
    return ev


def test_session_linkage_rules():
    ev = linkage()
    shas = [sha for (sha,) in ev.rows("select sha from staging.git_commits")]
    linked = dict(ev.rows("select sha, session_id from staging.commit_sessions"))
    assert {sha: linked.get(sha) for sha in shas} == {
        "c_data": "20260116-105801", "c_data_plain": "20260116-105801",
        "c_at_start": "20260110-090000", "c_tokyo_in": "20260110-090000", "c_at_end": "20260110-090000",
        "c_after_end": None, "c_utc_before": None,
        "c_open_last": "20260120-080000", "c_open_after": None,
        "c_overlap_before": "20260125-080000", "c_overlap": "20260125-090000", "c_overlap_after": "20260125-080000",
        "c_orphan": None, "c_dup": "20260205-100000", "c_moved": "20260210-100000",
        "c_zero": "20260215-100000", "c_zero_after": None, "c_late_in": "20260220-100000",
    }
    assert ev.rows("select commits, linked_commits from marts.retrieval_summary") == [(18, 13)]
    linked_by = dict(ev.rows("select sha, linked_by from staging.commit_sessions"))
    assert linked_by["c_data"] == linked_by["c_data_plain"] == "commit_data"
    assert linked_by["c_tokyo_in"] == linked_by["c_overlap"] == "tag_window"
    # c_data sits in the open window of 20260116-100000 too: its own session id wins
    assert ev.rows("select windows_holding, window_started_at from staging.commit_sessions where sha = 'c_data'") \
        == [(1, None)]
    assert dict(ev.rows("select sha, windows_holding from staging.commit_sessions where windows_holding > 1")) == {
        "c_overlap": 2}
    # compared as text, the four commits near the New York window's edges get the opposite answer
    texts = dict(ev.rows("select sha, committed_at_text from staging.git_commits"))
    start, end = "2026-01-10T09:00:00-05:00", "2026-01-10T10:00:00-05:00"
    assert {sha: start <= texts[sha] <= end for sha in ("c_at_start", "c_tokyo_in", "c_at_end", "c_utc_before")} \
        == {"c_at_start": False, "c_tokyo_in": False, "c_at_end": False, "c_utc_before": True}


def test_session_windows_table():
    ev = linkage()
    utc = timezone.utc
    assert ev.rows("select session_id, adapter, started_at, ended_at, window_end, is_open, start_tags, end_tags, "
                   "end_tags_ignored from staging.session_windows order by started_at") == [
        ("20260110-090000", None, datetime(2026, 1, 10, 14, tzinfo=utc), datetime(2026, 1, 10, 15, tzinfo=utc),
         datetime(2026, 1, 10, 15, tzinfo=utc), False, 1, 1, 0),
        ("20260116-100000", None, datetime(2026, 1, 16, 10, tzinfo=utc), None,
         datetime(2026, 1, 17, 10, tzinfo=utc), True, 1, 0, 0),
        ("20260120-080000", None, datetime(2026, 1, 20, 8, tzinfo=utc), None,
         datetime(2026, 1, 21, 8, tzinfo=utc), True, 1, 0, 0),
        ("20260125-080000", None, datetime(2026, 1, 25, 8, tzinfo=utc), None,
         datetime(2026, 1, 26, 8, tzinfo=utc), True, 1, 0, 0),
        ("20260125-090000", "claude", datetime(2026, 1, 25, 9, tzinfo=utc), datetime(2026, 1, 25, 10, tzinfo=utc),
         datetime(2026, 1, 25, 10, tzinfo=utc), False, 1, 1, 0),
        ("20260205-100000", None, datetime(2026, 2, 5, 10, tzinfo=utc), datetime(2026, 2, 5, 11, tzinfo=utc),
         datetime(2026, 2, 5, 11, tzinfo=utc), False, 2, 1, 0),
        ("20260210-100000", None, datetime(2026, 2, 10, 10, tzinfo=utc), datetime(2026, 2, 10, 12, tzinfo=utc),
         datetime(2026, 2, 10, 12, tzinfo=utc), False, 1, 1, 0),
        ("20260215-100000", None, datetime(2026, 2, 15, 10, tzinfo=utc), datetime(2026, 2, 15, 10, tzinfo=utc),
         datetime(2026, 2, 15, 10, tzinfo=utc), False, 1, 1, 0),
        ("20260220-100000", None, datetime(2026, 2, 20, 10, tzinfo=utc), None,
         datetime(2026, 2, 21, 10, tzinfo=utc), True, 1, 1, 1),
    ]
    assert ev.one("select started_at_text from staging.session_windows where session_id = '20260110-090000'") \
        == "2026-01-10T09:00:00-05:00"


def test_window_linked_commits_feed_the_metrics_with_suffixed_query_ids():
    ev = EventLake()
    ev.tag("session-20260125-090000-claude-start", "2026-01-25T09:00:00+00:00")
    ev.tag("session-20260125-090000-claude-end", "2026-01-25T10:00:00+00:00")
    ev.commit("c1", "2026-01-25T11:00:00+02:00", ["e.rs"])  # 09:00Z
    ev.query("q1", "2026-01-25T09:05:00+00:00", "20260125-090000-claude", ["e.rs", "z.rs"])
    ev.build()
    assert ev.rows("select session_id, retrieved, hits, touched from marts.retrieval_query_metrics") == [
        ("20260125-090000", 2, 1, 1)]


# ---------------------------------------------------------------------------- real history


def python_linkage(commits: list[dict], tags: list[dict]) -> tuple[list[tuple], dict[str, str | None]]:
    """An independent implementation of SPEC 4.2's tag-window linkage, to cross-check the SQL."""
    starts: dict[str, list[datetime]] = {}
    ends: dict[str, list[datetime]] = {}
    for t in tags:
        if t["session_id"]:
            bucket = starts if t["edge"] == "start" else ends
            bucket.setdefault(t["session_id"], []).append(datetime.fromisoformat(t["tag_date"]))
    windows = []
    for sid, times in starts.items():
        start = min(times)
        later = [e for e in ends.get(sid, []) if e >= start]
        windows.append((sid, start, min(later) if later else start + timedelta(hours=24)))
    linked: dict[str, str | None] = {}
    for c in commits:
        at = datetime.fromisoformat(c["date"])
        holding = [w for w in windows if w[1] <= at <= w[2]]
        linked[c["sha"]] = max(holding, key=lambda w: (w[1], w[0]))[0] if holding else None
    return windows, linked


@pytest.fixture(scope="module")
def patina():
    commits = gitlog.parse_numstat_log((SAMPLES / "patina" / "git_log_numstat_2025-12-17_to_23.txt").read_text())
    tags = gitlog.parse_session_tags((SAMPLES / "patina" / "session_tags.psv").read_text())
    ev = EventLake()
    ev.gitlog(commits, tags)
    # queries as the instrumented scry would log them, in two real sessions
    ev.query("q_20251223_151000_aaa", "2025-12-23T15:10:00.000000001+00:00", "20251223-081330", [
        "src/commands/scry/mod.rs", "./src/commands/scrape/database.rs::fn:initialize", "src/lib.rs",
        "20251217-124012", "layer/core/build.md"])
    # 20251217-124012 is a real archived session (sessions/20251217-124012.md) without commits
    ev.query("q_20251217_180000_bbb", "2025-12-17T18:00:00+00:00", "20251217-124012", ["src/main.rs"])
    ev.build()
    return commits, tags, ev


def test_real_patina_history(patina):
    commits, tags, ev = patina
    windows, linked = python_linkage(commits, tags)
    assert ev.one("select count(*) from staging.eventlog") == 61 + 880 + 2  # + two queries
    assert ev.one("select count(*) from staging.git_commits") == 61
    assert ev.one("select count(*) from staging.commit_files") == 139
    assert len(windows) == 440
    assert ev.rows("select count(*), count(*) filter (where is_open), count(*) filter (where started_at = ended_at) "
                   "from staging.session_windows") == [(440, 2, 1)]
    assert ev.rows("select session_id from staging.session_windows where is_open order by 1") == [
        ("20250819-155119",), ("20260131-093100",)]
    sql = dict(ev.rows("select sha, session_id from staging.commit_sessions"))
    assert sql == {sha: sid for sha, sid in linked.items() if sid is not None}
    assert ev.rows("select linked_by, count(*), count(distinct session_id) from staging.commit_sessions "
                   "group by all") == [("tag_window", 50, 13)]
    assert ev.rows("select commits, linked_commits from marts.retrieval_summary") == [(61, 50)]
    # the commit that implemented the feedback loop belongs to the session that wrote it
    feedback_loop = next(c["sha"] for c in commits if c["message"] == "feat(feedback): implement Phase 3 feedback loop")
    assert sql[feedback_loop] == "20251217-145932"
    # archiving a session right after its end tag is outside it: no window holds it
    archive = next(c["sha"] for c in commits if c["message"] == "session-end: archive session 20251223-134455")
    assert archive not in sql and linked[archive] is None


def test_real_patina_metrics(patina):
    _, _, ev = patina
    assert ev.rows("select query_id, session_id, retrieved, hits, touched, precision, recall, reciprocal_rank "
                   "from marts.retrieval_query_metrics") == [
        ("q_20251223_151000_aaa", "20251223-081330", 4, 2, 4, 0.5, 0.5, 1.0)]
    assert ev.one("select ndcg from marts.retrieval_query_metrics") == pytest.approx((1 + 1 / log2(3)) / idcg(4))
    assert ev.rows("select file_path, sessions_missed from marts.missed_files") == [
        ("src/main.rs", 1), ("src/mcp/server.rs", 1)]
    assert ev.rows("select all_queries, queries, non_path_results from marts.retrieval_summary") == [(2, 1, 1)]
