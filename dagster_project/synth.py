"""A deterministic synthetic raw lake: every source in the formats the real producers write.

``generate_lake(root, interactions=N)`` writes the same bytes for the same arguments (a seeded
RNG, fixed dates, no wall clock). The default size is the bundled sample lake (``data/raw``); the
benchmark asks for a million interactions with the other sources in proportion. With
``bad_cases`` the lake also holds one instance of every quarantine reason at a known line, listed
in a manifest for the tests.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

BASE = datetime(2026, 2, 2, 8, 0, 0)
SAMPLE_SIGNALS = Path(__file__).resolve().parents[2] / "shared" / "samples" / "energyflow-cosmology" / "feedback_buffer.jsonl"
# The four real rows of the energyflow-cosmology buffer (byte for byte), kept here so the sample
# lake can be rebuilt without ../shared.
REAL_SIGNAL_ROWS = [
    '{"id": "18be509a-2b82-4f4b-970a-6ea497ad12a2", "timestamp": 1765369657929, "signal": "good", "strength": 1.0, "context": "Correctly identified as STM - this is ephemeral test data", "session_id": null, "source": "manual", "created_at": "2025-12-10T13:27:37.929481", "target_type": "chunk", "target_id": "82f873c7-4a60-4797-8491-6cc78934085e", "aspect": "classification", "original_class": null, "suggested_class": null}',
    '{"id": "07459a6d-b489-4997-8cdd-cb6d0affdfba", "timestamp": 1765369671189, "signal": "correct", "strength": 1.0, "context": "Good test case for private knowledge", "session_id": null, "source": "manual", "created_at": "2025-12-10T13:27:51.189324", "target_type": "chunk", "target_id": "82f873c7-4a60-4797-8491-6cc78934085e", "aspect": "relevance", "original_class": null, "suggested_class": null}',
    '{"id": "a24dfc10-8fa0-4f52-9229-8196c107f729", "timestamp": 1765370818531, "signal": "good", "strength": 1.0, "context": "Bootstrap validation test", "session_id": null, "source": "manual", "created_at": "2025-12-10T13:46:58.531628", "target_type": "chunk", "target_id": "6056a8f7-61af-4f88-8c07-eed1d7f3c6aa", "aspect": "classification", "original_class": null, "suggested_class": null}',
    '{"id": "30a31765-bfe0-43ad-a50e-0e96f31afe68", "timestamp": 1765370864623, "signal": "correct", "strength": 1.0, "context": "Good bootstrap example", "session_id": null, "source": "manual", "created_at": "2025-12-10T13:47:44.623389", "target_type": "chunk", "target_id": "6056a8f7-61af-4f88-8c07-eed1d7f3c6aa", "aspect": "relevance", "original_class": null, "suggested_class": null}',
]

TOPICS = ["read a file", "parse JSON", "handle errors", "spawn a thread", "write a test", "sort a list",
          "open a socket", "format a date", "retry a request", "profile a loop", "merge two dicts",
          "stream a CSV", "hash a password", "cache a result", "paginate an API", "rename a branch"]
LANGS = ["Rust", "Python", "Go", "TypeScript", "SQL"]
PHRASES = ["Use the standard library", "Prefer an iterator here", "Wrap it in a context manager",
           "Return a Result instead of panicking", "Avoid the global lock", "Add a unit test first",
           "Measure before optimising", "Keep the function pure", "Handle the empty case explicitly",
           "Close the handle in a finally block", "Stream it instead of loading it all"]
MODELS = ["claude-sonnet-4", "claude-haiku-4", "local-qwen-7b"]
TYPES = ["prompt_response", "code_generation", "code_review", "refactor", "search", "decision",
         "error_fix", "documentation", "test", "other"]
REPO_FILES = ["src/main.rs", "src/lib.rs", "src/commands/scry/mod.rs", "src/retrieval/mod.rs",
              "src/commands/scrape/mod.rs", "src/commands/init/mod.rs", "src/eval/feedback_loop.rs",
              "src/db/event_log.rs", "src/mcp/server.rs", "src/paths.rs", "layer/core/build.md",
              "README.md", "src/secrets/mod.rs", "src/commands/mod.rs", "Cargo.toml"]

Progress = Callable[[str], None]


class _Lake:
    def __init__(self, root: Path, rng: random.Random, bad: bool):
        self.root = root
        self.rng = rng
        self.bad = bad
        self.files: dict[str, int] = {}  # relative path -> lines written
        self.manifest: list[dict] = []

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def write(self, rel: str, lines: list[bytes], *, bad_at: dict[int, tuple[bytes, str]] | None = None,
              crlf: bool = False, bom: bool = False, tail: bytes | None = None, source: str) -> None:
        """Write lines with bad lines inserted at 1-based positions (or at the end of a short file),
        and record each bad line's real line number and byte offset in the manifest."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        sequence: list[tuple[bytes, str | None]] = [(line, None) for line in lines]
        for position, (raw, reason) in sorted((bad_at or {}).items()):
            sequence.insert(min(position - 1, len(sequence)), (raw, reason))
        eol = b"\r\n" if crlf else b"\n"
        out = bytearray(b"\xef\xbb\xbf" if bom else b"")
        for number, (raw, reason) in enumerate(sequence, start=1):
            if reason is not None:
                self.manifest.append({"source": source, "path": rel, "line_number": number,
                                      "byte_offset": 0 if number == 1 else len(out), "reason": reason})
            out += raw + eol
        if tail is not None:
            self.manifest.append({"source": source, "path": rel, "line_number": len(sequence) + 1,
                                  "byte_offset": len(out), "reason": "deferred"})
            out += tail
        path.write_bytes(bytes(out))
        self.files[rel] = len(sequence)


def _dumps(record: dict) -> bytes:
    return json.dumps(record, ensure_ascii=False).encode("utf-8")


def _iso(ts: datetime) -> str:
    return ts.isoformat()


def generate_lake(root: Path, interactions: int = 3000, seed: int = 7, bad_cases: bool = True,
                  progress: Progress | None = None, manifest_path: Path | None = None) -> dict:
    """Write a synthetic raw lake under ``root``; return a summary (files, lines, bytes)."""
    say = progress or (lambda _m: None)
    rng = random.Random(seed)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    lake = _Lake(root, rng, bad_cases)

    say(f"interactions: {interactions:,}")
    records = _interactions(lake, interactions)
    say("legacy log, feedback, outcomes")
    _legacy(lake, max(20, interactions // 100))
    _feedback(lake, records)
    _outcomes(lake, records)
    say("session ratings (SQLite)")
    _sessions(lake, records)
    say("weighted queue and ratings")
    _weighted(lake, max(30, interactions // 100))
    say("eventlog (SQLite + JSONL)")
    _eventlog(lake, max(12, interactions // 250))
    say("signals")
    _signals(lake, max(40, interactions // 100))

    if manifest_path is not None:
        manifest_path.parent.mkdir(parents=True, exist_ok=True)
        manifest_path.write_text(json.dumps(sorted(lake.manifest, key=lambda m: (m["path"], m["line_number"])),
                                            indent=2) + "\n")
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return {
        "root": str(root),
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "interactions": interactions,
        "bad_cases": len([m for m in lake.manifest if m["reason"] != "deferred"]),
    }


# ----------------------------------------------------------------------------------- sources


def _interactions(lake: _Lake, n: int) -> list[dict]:
    rng = lake.rng
    per_session = 40 if n <= 100_000 else 400  # one collector process writes a session's file
    sessions = [lake.uuid() for _ in range(max(3, -(-n // per_session)))]
    spacing = 60 * 86400 / max(n, 1)  # the lake spans about two months
    by_file: dict[str, list[bytes]] = {}
    records: list[dict] = []
    for i in range(n):
        session = sessions[i // per_session]
        ts = BASE + timedelta(seconds=int(i * spacing) + rng.randrange(30),
                              microseconds=rng.choice([0, rng.randrange(1, 999999)]))
        # A small pool of prompts repeats, so the same question gets different answers (DPO pairs).
        topic = TOPICS[rng.randrange(len(TOPICS))] if rng.random() < 0.6 else f"{TOPICS[i % len(TOPICS)]} #{i}"
        lang = rng.choice(LANGS)
        prompt = f"How do I {topic} in {lang}?"
        if rng.random() < 0.05:
            prompt = "  " + prompt.replace(" ", "  ", 1) + "\n"  # normalises to the same prompt
        answer = " ".join(rng.sample(PHRASES, k=rng.randint(2, 5))) + "."
        if rng.random() < 0.1:
            answer += "\n\n```\nfn main() {\n    println!(\"héllo ✓\");\n}\n```"
        feedback = rng.choices(["none", "positive", "negative", "neutral"], [70, 15, 10, 5])[0]
        record = {
            "id": lake.uuid(), "timestamp": _iso(ts), "interaction_type": rng.choice(TYPES),
            "input_text": prompt, "output_text": answer,
            "context": "" if rng.random() < 0.7 else f"Project uses {lang} 2024 edition.",
            "model": rng.choice(MODELS), "tokens_used": rng.randint(40, 4000),
            "latency_ms": 0 if rng.random() < 0.05 else round(rng.uniform(80, 9000), 3),
            "user_feedback": feedback, "was_edited": rng.random() < 0.1,
            "was_accepted": feedback != "negative" and rng.random() < 0.8,
            "source": rng.choice(["cli", "api", "mcp"]), "session_id": session,
            "project_context": None if rng.random() < 0.8 else {"repo": "patina", "branch": "main"},
        }
        records.append(record)
        rel = f"interactions/interactions_{ts.date().isoformat()}_{session[:8]}.jsonl"
        by_file.setdefault(rel, []).append(_dumps(record))
        if rng.random() < 0.01:  # a later copy of the record after feedback arrived in the buffer
            later = dict(record, timestamp=_iso(ts + timedelta(seconds=5)),
                         user_feedback=rng.choice(["positive", "negative"]), was_edited=True)
            by_file[rel].append(_dumps(later))

    names = sorted(by_file)
    bad = _interaction_bad_lines(lake, records[0]) if lake.bad else {}
    for k, rel in enumerate(names):
        lines = by_file[rel]
        kwargs: dict = {"source": "interactions"}
        if lake.bad and k == 0:
            kwargs["bad_at"] = {2 + 2 * j: case for j, case in enumerate(bad)}
            lines = lines + [b"", b"   "] if len(lines) > 3 else lines
        if lake.bad and k == 1:
            kwargs["bom"] = True
        if lake.bad and k == 2:
            kwargs["crlf"] = True
        if lake.bad and k == len(names) - 1:
            kwargs["tail"] = _dumps(records[-1])[:30]  # a collector still writing
        if lake.bad and k == 3 and lines:
            extra = json.loads(lines[0])
            extra["client_version"] = "2.4.1"  # an unknown key: kept in `extra`
            lines = [_dumps(extra)] + lines[1:]
        lake.write(rel, lines, **kwargs)
    return records


def _interaction_bad_lines(lake: _Lake, template: dict) -> list[tuple[bytes, str]]:
    def variant(**changes) -> bytes:
        record = dict(template, id=lake.uuid())
        for key, value in changes.items():
            if value is _DROP:
                record.pop(key)
            else:
                record[key] = value
        return _dumps(record)

    return [
        (variant(input_text="café ZZZZ").replace(b"ZZZZ", b"\xff\xfe"), "invalid_utf8"),
        (variant()[:57], "invalid_json"),
        (b"null", "not_an_object"),
        (b"[1, 2, 3]", "not_an_object"),
        (variant().replace(b'"id": ', b'"id": "dup", "id": ', 1), "duplicate_key"),
        (variant().replace(b'"latency_ms": ', b'"latency_ms": NaN, "x": ', 1), "non_standard_json"),
        (variant(id=_DROP), "missing_field:id"),
        (variant(was_accepted="yes"), "bad_type:was_accepted"),
        (variant(tokens_used="12"), "bad_type:tokens_used"),
        (variant(interaction_type="chitchat"), "bad_value:interaction_type"),
        (variant(timestamp="yesterday"), "bad_timestamp:timestamp"),
    ]


class _Drop:
    pass


_DROP = _Drop()


def _legacy(lake: _Lake, n: int) -> None:
    rng = lake.rng
    lines = []
    for i in range(n):
        ts = BASE - timedelta(days=30) + timedelta(minutes=7 * i)
        kind = rng.choice(["interaction", "interaction", "pipeline_event", "api_call"])
        row = {"timestamp": _iso(ts), "type": kind, "session_id": f"legacy-{i // 10}", "project": "fabrik"}
        if kind == "interaction":
            row.update({"interaction_type": "prompt_response", "user_input": f"How do I {rng.choice(TOPICS)}?",
                        "assistant_output": rng.choice(PHRASES), "context": "", "reasoning": "recalled a pattern",
                        "lesson_learned": None, "model": rng.choice(MODELS), "tokens_used": rng.randint(10, 900),
                        "latency_ms": round(rng.uniform(10, 900), 1), "feedback": None, "tags": ["legacy"]})
        elif kind == "api_call":
            row.update({"model": rng.choice(MODELS), "tokens_used": rng.randint(10, 900), "latency_ms": 12.5})
        else:
            row.update({"tags": ["ingest", "nightly"]})
        lines.append(_dumps(row))
    lake.write(f"interactions/{(BASE - timedelta(days=30)).date().isoformat()}_interactions.jsonl", lines,
               source="legacy_log")


def _feedback(lake: _Lake, records: list[dict]) -> None:
    rng = lake.rng
    by_day: dict[str, list[bytes]] = {}
    for record in records:
        if rng.random() >= 0.15:
            continue
        ts = datetime.fromisoformat(record["timestamp"]) + timedelta(minutes=rng.randint(1, 120))
        source = rng.choice(["manual", "outcome_tracker"])
        first = rng.choice(["positive", "negative", "neutral"])
        rows = [{"record_id": record["id"], "feedback": first, "was_edited": rng.random() < 0.2,
                 "timestamp": _iso(ts), "source": source}]
        if rng.random() < 0.2:  # the user changes their mind: a conflicting later event
            rows.append({"record_id": record["id"], "feedback": "negative" if first == "positive" else "positive",
                         "was_edited": False, "timestamp": _iso(ts + timedelta(minutes=3)), "source": "manual"})
        for row in rows:
            by_day.setdefault(ts.date().isoformat(), []).append(_dumps(row))
    for i in range(max(2, len(records) // 500)):  # orphans: their interaction has not arrived yet
        ts = BASE + timedelta(days=40, minutes=i)
        by_day.setdefault(ts.date().isoformat(), []).append(_dumps(
            {"record_id": lake.uuid(), "feedback": "positive", "was_edited": False,
             "timestamp": _iso(ts), "source": "manual"}))
    for k, (day, lines) in enumerate(sorted(by_day.items())):
        bad = {}
        if lake.bad and k == 0:
            bad = {3: (b'{"record_id": "r-x", "feedback": "meh", "was_edited": false, '
                       b'"timestamp": "2026-02-02T09:00:00", "source": "manual"}', "bad_value:feedback")}
        lake.write(f"feedback/{day}_feedback.jsonl", lines, bad_at=bad, source="feedback")


def _outcomes(lake: _Lake, records: list[dict]) -> None:
    rng = lake.rng
    by_day: dict[str, list[bytes]] = {}
    for record in records:
        if rng.random() >= 0.2:
            continue
        ts = datetime.fromisoformat(record["timestamp"]) + timedelta(seconds=30)
        strategy = rng.choice([{}, {"use_rag": True, "use_graph": False, "graph_depth": 0, "vector_weight": 0.7,
                                     "graph_weight": 0.0, "fulltext_weight": 0.3, "confidence_threshold": 0.5,
                                     "min_k": 3, "max_k": 8, "max_tokens": 2048},
                                    {"use_rag": True, "use_graph": True, "graph_depth": 2, "vector_weight": 0.5,
                                     "graph_weight": 0.3, "fulltext_weight": 0.2, "confidence_threshold": 0.6,
                                     "min_k": 3, "max_k": 10, "max_tokens": 4096,
                                     "arm_id": rng.choice(["arm-a", "arm-b", "arm-c"])}])
        row = {"query": record["input_text"], "response_summary": record["output_text"][:200],
               "task_type": record["interaction_type"], "model": record["model"], "id": lake.uuid(),
               "timestamp": _iso(ts), "topic": rng.choice([None, "rust", "python", "sql"]),
               "competence_level": rng.choice(["novice", "intermediate", "expert"]), "strategy": strategy,
               "outcome": rng.choices(["accepted", "rejected", "neutral"], [60, 25, 15])[0],
               "inference_reason": rng.choice(["user moved on", "user asked again", "user said thanks"]),
               "latency_ms": round(rng.uniform(100, 5000), 1), "session_id": f"outcome-session-{rng.randrange(50)}"}
        by_day.setdefault(ts.date().isoformat(), []).append(_dumps(row))
    for k, (day, lines) in enumerate(sorted(by_day.items())):
        bad = {}
        if lake.bad and k == 0:
            bad = {2: (b'{"id": "o-1", "timestamp": "2026-02-02T09:00:00", "outcome": "accepted", '
                       b'"latency_ms": -5.0}', "bad_value:latency_ms")}
        lake.write(f"outcomes/{day}_outcomes.jsonl", lines, bad_at=bad, source="outcomes")


SESSION_DDL = """CREATE TABLE session_feedback (
  insertion_order INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL,
  session_id_opaque TEXT NOT NULL, user_id_or_null TEXT, recorded_at TEXT NOT NULL,
  recorded_date TEXT NOT NULL,
  label TEXT NOT NULL CHECK (label IN ('positive','negative','skip')),
  turn_count_at_end INTEGER NOT NULL,
  source TEXT NOT NULL CHECK (source IN ('cli_end','cli_exit','api_end')),
  schema_version INTEGER NOT NULL DEFAULT 1, value TEXT NOT NULL)"""


def _sessions(lake: _Lake, records: list[dict]) -> None:
    rng = lake.rng
    path = lake.root / "sessions" / "session_feedback.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    sessions = sorted({r["session_id"] for r in records})
    last_seen = {}
    for r in records:
        last_seen[r["session_id"]] = r["timestamp"]
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(SESSION_DDL)
    rows = []
    for k, session in enumerate(sessions):
        if rng.random() < 0.4:
            continue
        at = datetime.fromisoformat(last_seen[session]).replace(tzinfo=timezone.utc) + timedelta(minutes=5)
        value = {"id": lake.uuid(), "session_id_opaque": hashlib.sha256(session.encode()).hexdigest(),
                 "user_id_or_null": None if rng.random() < 0.3 else f"user-{rng.randrange(20)}",
                 "recorded_at": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "recorded_date": at.date().isoformat(),
                 "label": rng.choices(["positive", "negative", "skip"], [55, 25, 20])[0],
                 "turn_count_at_end": rng.randint(1, 40), "source": rng.choice(["cli_end", "cli_exit", "api_end"]),
                 "schema_version": 1}
        if k % 2 == 0:
            value["modality"] = rng.choice(["text", "voice"])
        rows.append(value)
        if rng.random() < 0.05:  # a double submit: same id, twice
            rows.append(dict(value))
    for i in range(max(2, len(rows) // 20)):  # ratings of sessions with no interactions here
        at = BASE + timedelta(days=3, minutes=i)
        rows.append({"id": lake.uuid(), "session_id_opaque": hashlib.sha256(f"other-{i}".encode()).hexdigest(),
                     "user_id_or_null": None, "recorded_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "recorded_date": at.date().isoformat(), "label": "positive", "turn_count_at_end": 3,
                     "source": "api_end", "schema_version": 1})
    for value in rows:
        conn.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, "
                     "recorded_date, label, turn_count_at_end, source, schema_version, value) "
                     "values (?,?,?,?,?,?,?,?,?,?)",
                     (value["id"], value["session_id_opaque"], value["user_id_or_null"], value["recorded_at"],
                      value["recorded_date"], value["label"], value["turn_count_at_end"], value["source"],
                      value["schema_version"], json.dumps(value)))
    if lake.bad:
        conn.execute("insert into session_feedback (id, session_id_opaque, recorded_at, recorded_date, label, "
                     "turn_count_at_end, source, value) values ('bad', 'x', 'x', 'x', 'skip', 1, 'api_end', "
                     "'{\"id\": \"bad\", truncated')")
        (key,) = conn.execute("select max(insertion_order) from session_feedback").fetchone()
        lake.manifest.append({"source": "session_ratings", "path": "sessions/session_feedback.sqlite3",
                              "line_number": key, "byte_offset": None, "reason": "invalid_json"})
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    lake.files["sessions/session_feedback.sqlite3"] = len(rows)


def _weighted(lake: _Lake, n: int) -> None:
    rng = lake.rng
    examples = []
    for i in range(n):
        weight = rng.choice([10.0, 3.0, 1.0])
        note = rng.choice([None, "Never use .unwrap() in production code", "Prefer iterator chains",
                           "This is exactly the right approach"])
        examples.append(json.dumps({"query": f"How do I {rng.choice(TOPICS)} in {rng.choice(LANGS)}? ({i})",
                                    "response": rng.choice(PHRASES), "weight": weight, "feedback": note},
                                   separators=(",", ":"), ensure_ascii=False).encode())
    split = len(examples) * 2 // 3
    lake.write("weighted/training_queue_archive_20260201_101500.jsonl", examples[:split], source="weighted_queue")
    # the live queue starts with lines that were also archived (one history under two names)
    bad = {}
    if lake.bad:
        bad = {2: (b'{"query":"q","response":"r","weight":0,"feedback":null}', "bad_value:weight")}
    lake.write("weighted/training_queue.jsonl", examples[split - 3:], bad_at=bad, source="weighted_queue")
    old = [{"query": f"Explain {t}", "response": rng.choice(PHRASES), "feedback": None,
            "weight": rng.choice([10.0, 3.0, 1.0]), "timestamp": f"2026-01-{10 + i:02d}T12:00:00Z",
            "tags": [rng.choice(["critical", "improvement", "good"])]} for i, t in enumerate(TOPICS[:5])]
    (lake.root / "weighted" / "training_queue_old.jsonl").write_text(json.dumps(old, indent=2) + "\n")
    lake.files["weighted/training_queue_old.jsonl"] = len(old)
    ratings = []
    for i in range(max(10, n // 2)):
        row = {"timestamp": int((BASE + timedelta(hours=i)).replace(tzinfo=timezone.utc).timestamp()),
               "query": f"Review my {rng.choice(LANGS)} code ({i})", "response": rng.choice(PHRASES),
               "rating": rng.choice(["good", "bad"]), "weight": rng.choice([1.0, 10.0])}
        if rng.random() < 0.5:
            row["note"] = rng.choice(["too verbose", "spot on", "wrong API"])
        ratings.append(_dumps(row))
    lake.write("weighted/feedback.jsonl", ratings, source="weighted_ratings")


EVENTLOG_DDL = """CREATE TABLE eventlog (seq INTEGER PRIMARY KEY AUTOINCREMENT, event_type TEXT NOT NULL,
  timestamp TEXT NOT NULL, source_id TEXT NOT NULL, source_file TEXT, data TEXT NOT NULL,
  CHECK(json_valid(data)))"""


def _eventlog(lake: _Lake, n_sessions: int) -> None:
    rng = lake.rng
    events: list[tuple[str, str, str, str | None, str]] = []
    est = timezone(timedelta(hours=-5))
    commits = []
    # sessions every 9 hours, squeezed so that a large lake still spans about two months
    gap = min(timedelta(hours=9), timedelta(days=60) / n_sessions)
    for s in range(n_sessions):
        start = (BASE + gap * s).replace(tzinfo=est)
        sid = start.strftime("%Y%m%d-%H%M%S")
        adapter = "-claude" if s % 3 == 0 else ""
        events.append(("git.tag", start.isoformat(), f"session-{sid}{adapter}-start", None, json.dumps(
            {"tag_name": f"session-{sid}{adapter}-start", "sha": f"{s:040x}", "tag_date": start.isoformat(),
             "tagger_name": "dev", "message": f"Session start: task {s}"})))
        end = start + timedelta(hours=rng.randint(1, 4))
        if s % 5 != 4:  # some sessions never get an end tag (24 h window)
            events.append(("git.tag", end.isoformat(), f"session-{sid}{adapter}-end", None, json.dumps(
                {"tag_name": f"session-{sid}{adapter}-end", "sha": f"{s:040x}", "tag_date": end.isoformat(),
                 "tagger_name": "dev", "message": f"Session end: task {s}"})))
        touched = rng.sample(REPO_FILES, k=rng.randint(2, 5))
        for q in range(rng.randint(1, 3)):  # queries during the session
            at = (start + timedelta(minutes=5 + 10 * q)).astimezone(timezone.utc)
            retrieved = rng.sample(REPO_FILES, k=4)
            if rng.random() < 0.6:
                retrieved[rng.randrange(4)] = touched[0]
            results = [{"doc_id": ("./" + d + "::fn:main") if r == 2 and d.endswith(".rs") else d,
                        "score": round(rng.uniform(0.3, 0.95), 6), "rank": r + 1, "event_type": "code.symbol"}
                       for r, d in enumerate(retrieved)]
            results.append({"doc_id": sid, "score": 0.2, "rank": 5, "event_type": "session"})
            stamp = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{rng.randrange(10**9):09d}+00:00"
            data = {"query": f"where is {rng.choice(TOPICS)} handled", "mode": rng.choice(["semantic", "hybrid"]),
                    "session_id": sid, "results": results}
            if q % 2 == 1:
                qid = f"q_{at.strftime('%Y%m%d_%H%M%S')}_{rng.randrange(1000):03d}"
                data["query_id"] = qid
                events.append(("scry.query", stamp, qid, None, json.dumps(data)))
                events.append(("scry.use", stamp, qid, None, json.dumps(
                    {"query_id": qid, "result_used": retrieved[0], "rank": 1, "session_id": sid})))
                events.append(("scry.feedback", stamp, qid, None, json.dumps(
                    {"query_id": qid, "signal": rng.choice(["good", "bad"]), "comment": None, "session_id": sid})))
            else:
                events.append(("scry.query", stamp, stamp, None, json.dumps(data)))
        for c in range(rng.randint(1, 3)):
            at = start + timedelta(minutes=30 + 20 * c)
            sha = hashlib.sha1(f"{sid}-{c}".encode()).hexdigest()
            files = [{"path": f, "change_type": "modified", "lines_added": rng.randint(1, 80),
                      "lines_removed": rng.randint(0, 30)} for f in touched]
            if c == 0 and s % 4 == 1:
                files.append({"path": "src/{old_name.rs => new_name.rs}", "change_type": "modified",
                              "lines_added": 3, "lines_removed": 3})
            data = {"sha": sha, "message": f"feat: task {s} part {c}", "author_name": "dev",
                    "author_email": "dev@example.invalid", "files": files}
            if s % 2 == 0:
                data["session_id"] = sid + adapter
            commits.append(("git.commit", at.isoformat(), sha, None, json.dumps(data)))
    events += commits
    events += commits[: max(1, len(commits) // 10)]  # a re-scrape appends duplicates
    path = lake.root / "eventlog" / "patina.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    conn.execute(EVENTLOG_DDL)
    conn.executemany("insert into eventlog (event_type, timestamp, source_id, source_file, data) "
                     "values (?,?,?,?,?)", events)
    conn.commit()
    conn.close()
    lake.files["eventlog/patina.db"] = len(events)
    exported = [json.dumps({"seq": 1000 + i, "event_type": e[0], "timestamp": e[1], "source_id": e[2],
                            "source_file": e[3], "data": e[4]}).encode() for i, e in enumerate(events[:5])]
    lake.write("eventlog/export.jsonl", exported, source="eventlog")


def _signals(lake: _Lake, n: int) -> None:
    rng = lake.rng
    lines = [row.encode() for row in REAL_SIGNAL_ROWS]
    targets = [lake.uuid() for _ in range(max(5, n // 4))] + ["entropy", "information theory"]
    for i in range(n):
        created = BASE - timedelta(days=rng.randint(0, 120), minutes=i)
        target = rng.choice(targets)
        row = {"id": lake.uuid(), "timestamp": int((created - timedelta(hours=1)).replace(tzinfo=timezone.utc).timestamp() * 1000),
               "signal": rng.choice(["correct", "incorrect", "good", "bad", "unsure", "neutral"]),
               "strength": round(rng.choice([1.0, 0.9, 0.8, 0.7, 0.5, 0.3]), 2),
               "context": rng.choice(["", "Key insight about information theory", "Needs more time"]),
               "session_id": None, "source": rng.choice(["manual", "heuristic", "llm_agreement"]),
               "created_at": created.isoformat(), "target_type": "concept" if " " in target or target == "entropy" else "chunk",
               "target_id": target,
               "aspect": rng.choice(["classification", "content", "relevance", "extraction", "accuracy"]),
               "original_class": rng.choice([None, "STM"]), "suggested_class": rng.choice([None, "LONGTERM", "DISCARD"])}
        lines.append(_dumps(row))
    bad = {}
    if lake.bad:
        bad = {7: (b'{"id": "s-1", "timestamp": 1765369657929, "signal": "good", "strength": 1.5, "context": "", '
                   b'"session_id": null, "source": "manual", "created_at": "2025-12-10T13:27:37.929481", '
                   b'"target_type": "chunk", "target_id": "t", "aspect": "content", "original_class": null, '
                   b'"suggested_class": null}', "bad_value:strength")}
    lake.write("signals/feedback_buffer.jsonl", lines, bad_at=bad, source="signals")
