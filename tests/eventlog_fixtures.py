"""Hand-built ``staging.eventlog`` / ``staging.signals`` with the staging contract's columns.

Built on :class:`staging_fixtures.Lake` (real source specs, real last-wins staging), limited to
the two sources the retrieval and signal marts read. Events are given as the producers write
them (time fields as text with their offsets, ``data`` as a dict). Typical use::

    ev = EventLake()
    ev.tag("session-20251217-070135-start", "2025-12-17T07:01:35-05:00")
    ev.commit("c1", "2025-12-17T08:00:00-05:00", ["src/a.rs", "src/b.rs"])
    ev.query("q_1", "2025-12-17T13:10:00.123456789+00:00", "20251217-070135", ["src/a.rs"])
    ev.build()                       # staging.eventlog, eventlog staging tables, retrieval marts
    ev.rows("select * from marts.retrieval_summary")
"""

from __future__ import annotations

from datetime import date
from typing import Any, Iterable

from dagster_project.sources import builtin_sources
from staging_fixtures import Lake
from transforms import gitlog
from transforms.retrieval import build_eventlog_staging, build_retrieval_marts
from transforms.signals import build_signal_marts

SOURCES = ("eventlog", "signals")
ZERO_SHA = "0" * 40


class EventLake:
    """An in-memory DuckDB holding ``raw/staging.eventlog`` and ``raw/staging.signals``."""

    def __init__(self) -> None:
        specs = {name: spec for name, spec in builtin_sources().items() if name in SOURCES}
        self.lake = Lake(specs=specs)
        self.con = self.lake.con
        self._seq = 0

    # ------------------------------------------------------------------ eventlog rows

    def event(self, event_type: str, timestamp: str, source_id: str, data: dict[str, Any] | str, *,
              seq: int | None = None, source_file: str | None = None, path: str | None = None) -> int:
        """One eventlog row; ``seq`` defaults to the next one (the table's autoincrement key)."""
        if seq is None:
            self._seq += 1
            seq = self._seq
        else:
            self._seq = max(self._seq, seq)
        self.lake.add("eventlog", {"seq": seq, "event_type": event_type, "timestamp": timestamp,
                                   "source_id": source_id, "source_file": source_file, "data": data},
                      path=path, line_number=seq)
        return seq

    def commit(self, sha: str, when: str, files: Iterable[str | dict[str, Any]], session: str | None = None,
               *, message: str = "m", seq: int | None = None) -> None:
        """A ``git.commit``; files as paths (1 line added each) or full file dicts."""
        entries = [f if isinstance(f, dict) else
                   {"path": f, "change_type": "modified", "lines_added": 1, "lines_removed": 0} for f in files]
        data: dict[str, Any] = {"sha": sha, "message": message, "author_name": "a", "author_email": "a@x",
                                "files": entries}
        if session is not None:
            data["session_id"] = session
        self.event("git.commit", when, sha, data, seq=seq)

    def tag(self, name: str, when: str, sha: str = ZERO_SHA, *, seq: int | None = None) -> None:
        self.event("git.tag", when, name, {"tag_name": name, "sha": sha, "tag_date": when,
                                           "tagger_name": "t", "message": ""}, seq=seq)

    def query(self, qid: str, when: str, session: str | None, docs: Iterable[str | dict[str, Any]],
              mode: str = "hybrid", *, v2: bool = True, routing: dict | None = None) -> str:
        """A ``scry.query``: v2 (``query_id`` = ``qid`` = source_id) or v1 (source_id = ``when``).
        ``docs`` are doc ids (ranked 1..) or full result dicts. Returns the query's id."""
        results = [d if isinstance(d, dict) else {"doc_id": d, "score": 0.5, "rank": i + 1, "event_type": "x"}
                   for i, d in enumerate(docs)]
        data: dict[str, Any] = {"query": f"query {qid}", "mode": mode, "session_id": session, "results": results}
        if v2:
            data["query_id"] = qid
        if routing is not None:
            data["routing"] = routing
        source_id = qid if v2 else when
        self.event("scry.query", when, source_id, data)
        return source_id

    def use(self, query_id: str, result_used: str, rank: int, when: str, session: str | None = None) -> None:
        self.event("scry.use", when, query_id, {"query_id": query_id, "result_used": result_used, "rank": rank,
                                                "session_id": session})

    def rating(self, query_id: str, signal: str, when: str, comment: str | None = None,
               session: str | None = None) -> None:
        self.event("scry.feedback", when, query_id, {"query_id": query_id, "signal": signal, "comment": comment,
                                                     "session_id": session})

    def gitlog(self, commits: list[dict], tags: list[dict] = (), session_ids: dict[str, str] | None = None) -> int:
        """Rows of :func:`transforms.gitlog.to_eventlog_rows`, appended after the current seq."""
        rows = gitlog.to_eventlog_rows(commits, tags, session_ids=session_ids, start_seq=self._seq + 1)
        for row in rows:
            self.event(row["event_type"], row["timestamp"], row["source_id"], row["data"], seq=row["seq"],
                       source_file=row["source_file"])
        return len(rows)

    # ------------------------------------------------------------------ signals rows

    def signal(self, sid: str, target: str, signal: str, created: str, *, strength: float = 1.0,
               source: str = "manual", aspect: str = "relevance", target_type: str = "chunk",
               timestamp: int = 0, **fields) -> None:
        record = {"id": sid, "timestamp": timestamp, "signal": signal, "strength": strength, "context": "",
                  "session_id": None, "source": source, "created_at": created, "target_type": target_type,
                  "target_id": target, "aspect": aspect, "original_class": None, "suggested_class": None, **fields}
        self.lake.add("signals", record)

    def signal_record(self, record: dict[str, Any]) -> None:
        """A signal exactly as the buffer holds it (e.g. a line of the real file, parsed)."""
        self.lake.add("signals", record)

    # ------------------------------------------------------------------ building

    def build(self, as_of: date | None = None) -> dict[str, int]:
        """Stage both sources, then the eventlog staging tables and retrieval marts; with
        ``as_of`` also the signal marts. Returns every table's row count."""
        counts = {f"staging.{k}": v for k, v in self.lake.stage().items()}
        counts |= build_eventlog_staging(self.con)
        counts |= build_retrieval_marts(self.con)
        if as_of is not None:
            counts |= build_signal_marts(self.con, as_of)
        return counts

    def rows(self, sql: str, params=None) -> list[tuple]:
        return self.con.execute(sql, params or {}).fetchall()

    def one(self, sql: str, params=None) -> Any:
        (row,) = self.rows(sql, params)
        return row[0] if len(row) == 1 else row
