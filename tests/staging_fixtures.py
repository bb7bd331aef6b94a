"""Hand-built ``raw.*`` / ``staging.*`` tables with the staging contract's exact columns.

For tests of everything downstream of ingestion: no files, no engine, just rows. Columns come
from the real source specs (``transforms.classify.output_columns`` + provenance), so a change
to a spec changes the fixtures too. Typical use::

    lake = Lake()                                   # in-memory DuckDB, every raw table empty
    iid = lake.interaction(1, user_feedback="positive")
    lake.feedback(iid, "negative", "2026-02-26T15:00:00", source="manual")
    lake.stage()                                    # staging.* by the real last-wins rules
    lake.con.execute("select * from staging.interactions").fetchall()

Records are given as the producer writes them (time fields as their original text, epochs as
ints, objects as dicts); keys the spec does not know go to ``extra``. Each row gets ``path``
(a per-source default or the one given), the next 1-based ``line_number`` in that path and the
``byte_offset`` of that line as if the records were written as JSON lines (NULL for SQLite
sources, whose ``line_number`` is the table's key).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

import duckdb

from conftest import interaction as collector_record
from dagster_project.sources import builtin_sources
from transforms.classify import output_columns, q
from transforms.spec import Field, SourceSpec
from transforms.sqlfiles import materialize
from transforms.staging import PROVENANCE, build_staging

DEFAULT_PATHS = {
    "interactions": "interactions/interactions_2026-02-26_5b0c2f7e.jsonl",
    "legacy_log": "interactions/2026-02-26_interactions.jsonl",
    "feedback": "feedback/2026-02-26_feedback.jsonl",
    "outcomes": "outcomes/2026-02-26_outcomes.jsonl",
    "session_ratings": "sessions/session_feedback.sqlite3",
    "weighted_queue": "weighted/training_queue.jsonl",
    "weighted_ratings": "weighted/feedback.jsonl",
    "eventlog": "eventlog/eventlog.db",
    "signals": "signals/feedback_buffer.jsonl",
}
SQLITE_SOURCES = {"session_ratings", "eventlog"}
DEFAULT_SESSION = collector_record()["session_id"]


def interaction_id(i: int | str) -> str:
    return i if isinstance(i, str) else f"00000000-0000-4000-8000-{i:012d}"


def parse_time(f: Field, value: Any, zone: str) -> datetime | None:
    if value is None:
        return None
    if f.time == "epoch_s":
        return datetime.fromtimestamp(int(value), timezone.utc)
    if f.time == "epoch_ms":
        return datetime.fromtimestamp(int(value) / 1000, timezone.utc)
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=ZoneInfo(f.time_zone or zone))
    return parsed.astimezone(timezone.utc)


class Lake:
    """An in-process DuckDB with every ``raw.<source>`` table of the registry, filled by hand."""

    def __init__(self, con: duckdb.DuckDBPyConnection | None = None,
                 specs: dict[str, SourceSpec] | None = None, run_id: str = "fixture-run"):
        self.con = con or duckdb.connect()
        self.con.execute("set TimeZone = 'UTC'")
        self.specs = specs or builtin_sources()
        self.run_id = run_id
        self._next_line: dict[str, int] = defaultdict(lambda: 1)
        self._next_offset: dict[str, int] = defaultdict(int)
        for schema in ("raw", "staging"):
            self.con.execute(f"create schema if not exists {schema}")
        for spec in self.specs.values():
            cols = ", ".join(f"{q(n)} {t}" for n, t in self.columns(spec))
            self.con.execute(f"create table if not exists raw.{q(spec.name)} ({cols})")

    @staticmethod
    def columns(spec: SourceSpec) -> list[tuple[str, str]]:
        return output_columns(spec) + PROVENANCE

    # ------------------------------------------------------------------ generic rows

    def add(self, source: str, record: dict[str, Any], *, path: str | None = None,
            line_number: int | None = None, byte_offset: int | None = None) -> dict[str, Any]:
        """Append one loaded record to ``raw.<source>``; returns the row as inserted."""
        spec = self.specs[source]
        path = path or DEFAULT_PATHS.get(source, f"{source}/{source}.jsonl")
        line_text = json.dumps(record, ensure_ascii=False, separators=(", ", ": "))
        if line_number is None:
            line_number = self._next_line[path]
        self._next_line[path] = max(self._next_line[path], line_number + 1)
        if source in SQLITE_SOURCES:
            byte_offset = None
        elif byte_offset is None:
            byte_offset = self._next_offset[path]
            self._next_offset[path] += len(line_text.encode("utf-8")) + 1

        row: dict[str, Any] = {}
        for f in spec.fields:
            value = record.get(f.name)
            if f.time:
                row[f.name] = parse_time(f, value, spec.time_zone)
                row[f"{f.name}_text"] = None if value is None else str(value)
            elif f.type in ("object", "array", "any"):
                row[f.name] = None if value is None else json.dumps(value, ensure_ascii=False)
            elif f.type == "json_text":
                row[f.name] = value if value is None or isinstance(value, str) else json.dumps(value)
            else:
                row[f.name] = value
        canonical = [record.get(name) for name in spec.field_names]
        row["content_hash"] = hashlib.md5(
            json.dumps(canonical, ensure_ascii=False, sort_keys=True).encode("utf-8")).hexdigest()
        extra = {k: v for k, v in record.items() if k not in spec.field_names}
        row["extra"] = json.dumps(extra, ensure_ascii=False) if extra else None
        row.update(path=path, line_number=line_number, byte_offset=byte_offset,
                   ingest_run_id=self.run_id)

        names = [n for n, _ in self.columns(spec) if n in row]
        self.con.execute(
            f"insert into raw.{q(source)} ({', '.join(q(n) for n in names)}) "
            f"values ({', '.join('?' for _ in names)})",
            [row[n] for n in names],
        )
        updates = [(name, expr) for name, expr in spec.derived]
        if spec.identity_sql:
            updates.append((spec.identity[0], spec.identity_sql))
        if updates:
            self.con.execute(f"update raw.{q(source)} set "
                             + ", ".join(f"{q(n)} = {e}" for n, e in updates))
        return row

    def stage(self) -> dict[str, int]:
        """(Re)build every ``staging.<source>`` and ``staging.weighted_examples``."""
        counts = {name: build_staging(self.con, spec) for name, spec in self.specs.items()}
        if {"weighted_queue", "weighted_ratings"} <= self.specs.keys():
            counts["weighted_examples"] = materialize(self.con, "staging/weighted_examples")
        return counts

    def rows(self, sql: str, params=None) -> list[tuple]:
        return self.con.execute(sql, params or {}).fetchall()

    # ------------------------------------------------------------------ per-source helpers
    # Each takes the record's fields as keywords plus the row's position: ``path`` (default:
    # the source's usual file), ``line_number`` and ``byte_offset`` (default: the next line).

    def interaction(self, i: int | str = 1, *, path: str | None = None,
                    line_number: int | None = None, byte_offset: int | None = None,
                    **overrides) -> str:
        """An ``InteractionRecord`` line (collector defaults, ``overrides`` applied); its id."""
        record = collector_record(interaction_id(i), **overrides)
        self.add("interactions", record, path=path, line_number=line_number,
                 byte_offset=byte_offset)
        return record["id"]

    def feedback(self, record_id: int | str, feedback: str, timestamp: str, *,
                 path: str | None = None, line_number: int | None = None,
                 byte_offset: int | None = None, **fields) -> None:
        """A ``FeedbackRecord`` sidecar line; ``source`` / ``was_edited`` only when given."""
        record = {"record_id": interaction_id(record_id), "feedback": feedback,
                  "timestamp": timestamp, **fields}
        self.add("feedback", record, path=path, line_number=line_number, byte_offset=byte_offset)

    def outcome(self, outcome: str = "accepted", timestamp: str = "2026-02-26T14:05:00", *,
                path: str | None = None, line_number: int | None = None,
                byte_offset: int | None = None, **fields) -> str:
        record = {
            "query": "q", "response_summary": "r", "task_type": "coding", "model": "m1",
            "id": str(uuid.uuid4()), "timestamp": timestamp, "topic": None,
            "competence_level": "intermediate", "strategy": {}, "outcome": outcome,
            "inference_reason": "test", "latency_ms": 10.0, "session_id": "outcome-session",
        }
        record.update(fields)
        self.add("outcomes", record, path=path, line_number=line_number, byte_offset=byte_offset)
        return record["id"]

    def session_rating(self, session_id_opaque: str, label: str,
                       recorded_at: str = "2026-02-26T15:00:00Z", *, path: str | None = None,
                       line_number: int | None = None, **fields) -> str:
        """A ``session_feedback`` row (its ``value`` record); ``line_number`` = insertion_order."""
        record = {
            "id": str(uuid.uuid4()), "session_id_opaque": session_id_opaque,
            "user_id_or_null": None, "recorded_at": recorded_at,
            "recorded_date": recorded_at[:10], "label": label, "turn_count_at_end": 3,
            "source": "cli_end", "schema_version": 1,
        }
        record.update(fields)
        self.add("session_ratings", record, path=path, line_number=line_number)
        return record["id"]

    def weighted_queue(self, query: str, response: str, weight: float = 1.0,
                       feedback: str | None = None, *, path: str | None = None,
                       line_number: int | None = None, byte_offset: int | None = None,
                       **fields) -> None:
        record = {"query": query, "response": response, "weight": weight, "feedback": feedback,
                  **fields}
        self.add("weighted_queue", record, path=path, line_number=line_number,
                 byte_offset=byte_offset)

    def weighted_rating(self, query: str, response: str, rating: str = "good",
                        weight: float = 1.0, timestamp: int = 1772114400, *,
                        path: str | None = None, line_number: int | None = None,
                        byte_offset: int | None = None, **fields) -> None:
        record = {"timestamp": timestamp, "query": query, "response": response,
                  "rating": rating, "weight": weight, **fields}
        self.add("weighted_ratings", record, path=path, line_number=line_number,
                 byte_offset=byte_offset)
