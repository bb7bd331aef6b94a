"""Retrieval utility and precision from the eventlog (SPEC 2.8, 4.2).

``build_eventlog_staging`` unpacks ``staging.eventlog`` into commits, every file of every commit
(renames resolved), session windows from tags, commit→session links, each session's touched
files, and queries/results with normalised doc paths, uses and ratings.
``build_retrieval_marts`` computes the metrics; ``feedback_report`` renders them in the layout
of the seed design's "Expected Output" (``patina eval --feedback``).

Staging SQL lives in ``sql/staging/eventlog_<table>.sql`` and builds ``staging.<table>``;
mart SQL in ``sql/marts/<table>.sql``.

Linkage (SPEC 4.2): a commit belongs to the session in its own ``session_id`` (adapter suffix
stripped), else to the session whose tag window holds its author instant — compared as UTC
instants, bounds inclusive (``started_at <= t <= window_end``), a window without an end tag
lasting 24 h — and where several windows hold it the most recently started one wins.
"""

from __future__ import annotations

import re

import duckdb

from transforms.sqlfiles import materialize

# Tables, in build order (each reads only staging.eventlog and the tables before it).
EVENTLOG_STAGING = ["git_commits", "commit_files", "session_windows", "commit_sessions", "session_files",
                    "scry_queries", "scry_results", "scry_use", "scry_feedback"]
RETRIEVAL_MARTS = ["retrieval_judgements", "retrieval_query_metrics", "retrieval_precision_by_rank",
                   "retrieval_precision_by_mode", "retrieval_summary", "doc_utility", "missed_files", "scry_usage"]

_SESSION = re.compile(r"^\d{8}-\d{6}(-[A-Za-z][A-Za-z0-9_]*)?$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[^:]")
_SHA = re.compile(r"^[0-9a-f]{40}$")


def normalize_doc_id(doc_id: str | None) -> tuple[str, str | None]:
    """``(doc_kind, doc_path)`` of a result id, like ``sql/staging/eventlog_scry_results.sql``.

    ``./src/x.rs::fn:main`` → ``("path", "src/x.rs")``; ``20251217-124012`` → ``("session",
    None)``; ``persona:reviewer`` → ``("persona", None)``; empty ids, ``scheme:...`` ids and bare
    commit shas → ``("other", None)``.
    """
    d = None if doc_id is None else doc_id.strip(" ")
    if not d:
        return "other", None
    if _SESSION.match(d) and "\n" not in d:
        return "session", None
    if d.startswith("persona:"):
        return "persona", None
    if _SCHEME.match(d) or (_SHA.match(d) and "\n" not in d):
        return "other", None
    stripped = re.sub(r"^(\./)+", "", d.split("::", 1)[0])
    return ("path", stripped) if stripped else ("other", None)


def build_eventlog_staging(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """(Re)build the ``staging.*`` eventlog tables; row counts by table."""
    return {f"staging.{name}": materialize(con, f"staging/eventlog_{name}", table=f"staging.{name}")
            for name in EVENTLOG_STAGING}


def build_retrieval_marts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """(Re)build the retrieval marts from the eventlog staging tables; row counts by table."""
    return {f"marts.{name}": materialize(con, f"marts/{name}") for name in RETRIEVAL_MARTS}


def _pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value * 100:.{digits}f}%"


def feedback_report(con: duckdb.DuckDBPyConnection, top: int = 10, ranks: int = 5) -> str:
    """The ``eval --feedback`` report (the seed's "Expected Output", plus recall, MRR, nDCG)."""
    summary = con.execute(
        "select queries, retrieved, hits, precision, mean_recall, mrr, mean_ndcg, all_queries, "
        "non_path_results from marts.retrieval_summary").fetchone()
    queries, retrieved, hits, precision, mean_recall, mrr, mean_ndcg, all_queries, non_path = summary
    lines = ["", "━━━ Real-World Feedback ━━━", "",
             f"Queries with commit data: {queries}",
             f"Files retrieved: {retrieved}",
             f"Files subsequently committed: {hits}",
             "",
             f"Overall precision: {_pct(precision)}",
             f"Mean recall: {_pct(mean_recall)}",
             f"MRR: {'n/a' if mrr is None else f'{mrr:.3f}'}",
             f"Mean nDCG: {'n/a' if mean_ndcg is None else f'{mean_ndcg:.3f}'}",
             "", "Precision by rank:"]
    by_rank = con.execute("select rank, precision, count(*) over () from marts.retrieval_precision_by_rank "
                          "order by rank limit ?", [ranks]).fetchall()
    lines.append("  " + "  ".join(f"#{r}: {_pct(p, 0)}" for r, p, _ in by_rank) if by_rank else "  (none)")
    if by_rank and by_rank[0][2] > len(by_rank):  # (the others were left out without a word)
        lines.append(f"  … {by_rank[0][2] - len(by_rank)} more ranks in marts.retrieval_precision_by_rank")

    lines += ["", "High utility files (retrieved → committed):"]
    utility = con.execute(
        "select doc_path, times_committed, times_retrieved, hit_rate from marts.doc_utility "
        "where times_committed > 0 order by hit_rate desc, times_committed desc, doc_path limit ?",
        [top]).fetchall()
    width = max([len(p) for p, *_ in utility] + [28])
    lines += [f"  {p:<{width}}  ({c}/{n} = {_pct(rate, 0)})" for p, c, n, rate in utility] or ["  (none)"]

    lines += ["", "Missed files (committed but not retrieved):"]
    missed = con.execute("select file_path, sessions_missed from marts.missed_files "
                         "order by sessions_missed desc, file_path limit ?", [top]).fetchall()
    width = max([len(p) for p, _ in missed] + [28])
    lines += [f"  {p:<{width}}  (missed {n} time{'' if n == 1 else 's'})" for p, n in missed] or ["  (none)"]

    lines += ["", f"Logged queries: {all_queries} ({all_queries - queries} without commit data)",
              f"Results that are not files (session ids, personas), counted apart: {non_path}"]
    return "\n".join(lines) + "\n"
