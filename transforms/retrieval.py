"""Retrieval utility and precision from the eventlog (SPEC 4.2).

``build_eventlog_staging`` turns ``staging.eventlog`` into commits, commit files, session
windows, commit→session links and queries/results; ``build_retrieval_marts`` computes the
metrics; ``feedback_report`` renders them as the seed design's "Expected Output".
"""

from __future__ import annotations

import duckdb

from transforms.sqlfiles import materialize

EVENTLOG_STAGING = ["git_commits", "commit_files", "session_windows", "commit_sessions", "session_files",
                    "scry_queries", "scry_results", "scry_use", "scry_feedback"]
RETRIEVAL_MARTS = ["retrieval_judgements", "retrieval_query_metrics", "retrieval_precision_by_rank",
                   "retrieval_precision_by_mode", "retrieval_summary", "doc_utility", "missed_files", "scry_usage"]


def build_eventlog_staging(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return {f"staging.{name}": materialize(con, f"staging/{name}") for name in EVENTLOG_STAGING}


def build_retrieval_marts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    return {f"marts.{name}": materialize(con, f"marts/{name}") for name in RETRIEVAL_MARTS}


def _pct(value) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def feedback_report(con: duckdb.DuckDBPyConnection, top: int = 10) -> str:
    (queries, retrieved, hits, precision, mean_recall, mrr, mean_ndcg, all_queries, non_path) = con.execute(
        "select queries, retrieved, hits, precision, mean_recall, mrr, mean_ndcg, all_queries, non_path_results "
        "from marts.retrieval_summary").fetchall()[0]
    lines = ["", "━━━ Real-World Feedback ━━━", "",
             f"Queries with commit data: {queries} (of {all_queries} logged)",
             f"Files retrieved: {retrieved}",
             f"Files subsequently committed: {hits}",
             "", f"Overall precision: {_pct(precision)}",
             f"Mean recall: {_pct(mean_recall)}",
             f"MRR: {'n/a' if mrr is None else f'{mrr:.3f}'}",
             f"Mean nDCG: {'n/a' if mean_ndcg is None else f'{mean_ndcg:.3f}'}",
             "", "Precision by rank:"]
    ranks = con.execute("select rank, precision from marts.retrieval_precision_by_rank order by rank limit 10").fetchall()
    lines.append("  " + "  ".join(f"#{rank}: {precision * 100:.0f}%" for rank, precision in ranks) if ranks else "  (none)")
    lines += ["", "High utility files (retrieved → committed):"]
    utility = con.execute("select doc_path, times_committed, times_retrieved, hit_rate from marts.doc_utility "
                          "where times_committed > 0 order by hit_rate desc, times_retrieved desc, doc_path "
                          "limit ?", [top]).fetchall()
    width = max([len(p) for p, *_ in utility] + [10])
    lines += [f"  {p:<{width}}  ({c}/{r} = {rate * 100:.0f}%)" for p, c, r, rate in utility] or ["  (none)"]
    lines += ["", "Missed files (committed but not retrieved):"]
    missed = con.execute("select file_path, sessions_missed from marts.missed_files "
                         "order by sessions_missed desc, file_path limit ?", [top]).fetchall()
    width = max([len(p) for p, _ in missed] + [10])
    lines += [f"  {p:<{width}}  (missed {n} time{'s' if n != 1 else ''})" for p, n in missed] or ["  (none)"]
    lines += ["", f"Results that are not files (session ids, personas), counted apart: {non_path}"]
    return "\n".join(lines) + "\n"
