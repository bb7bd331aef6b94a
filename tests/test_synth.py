"""The synthetic lake generator: deterministic, in the producers' exact formats, with every planted
bad line where its manifest says (real files on tmp_path; no ingestion engine involved)."""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import unicodedata
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from dagster_project.sources import builtin_sources
from dagster_project.synth import EVENTLOG_DDL, REAL_SIGNAL_ROWS, SESSION_DDL, _uuid4, generate_lake

INTERACTION_KEYS = ["id", "timestamp", "interaction_type", "input_text", "output_text", "context", "model",
                    "tokens_used", "latency_ms", "user_feedback", "was_edited", "was_accepted", "source",
                    "session_id", "project_context"]
SIGNAL_KEYS = ["id", "timestamp", "signal", "strength", "context", "session_id", "source", "created_at",
               "target_type", "target_id", "aspect", "original_class", "suggested_class"]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    base = tmp_path_factory.mktemp("synth")
    summary = generate_lake(base / "raw", manifest_path=base / "sample_expectations.json")
    manifest = json.loads((base / "sample_expectations.json").read_text())
    summary["_files_right_after"] = sorted(p.relative_to(base / "raw").as_posix()
                                           for p in (base / "raw").rglob("*") if p.is_file())
    return base / "raw", summary, manifest


def count_rows(db: Path, table: str) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(f"select count(*) from {table}").fetchone()[0]
    finally:
        con.close()


def digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def files_of(root: Path) -> dict[str, list[Path]]:
    """Each source's files by its default globs."""
    found = {}
    for name, spec in builtin_sources().items():
        found[name] = sorted({p for g in spec.globs for p in root.glob(g)})
    return found


def split(data: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """(byte offset, line without its terminator) of every complete line, and the partial tail."""
    start = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    lines, pos = [], start
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            return lines, data[pos:]
        lines.append((pos, data[pos:end].rstrip(b"\r")))
        pos = end + 1


def strict(line: bytes):
    def pairs(items):
        keys = [k for k, _ in items]
        if len(keys) != len(set(keys)):
            raise ValueError("duplicate key")
        return dict(items)

    def constant(name):
        raise ValueError(f"non-standard {name}")

    return json.loads(line.decode("utf-8"), object_pairs_hook=pairs, parse_constant=constant)


def test_same_arguments_same_bytes(tmp_path, lake):
    root, summary, manifest = lake
    again = generate_lake(tmp_path / "raw", manifest_path=tmp_path / "m.json")
    assert digest(tmp_path / "raw") == digest(root)
    assert json.loads((tmp_path / "m.json").read_text()) == manifest
    assert {k: v for k, v in again.items() if k != "root"} == {
        k: v for k, v in summary.items() if k not in ("root", "_files_right_after")}
    other = generate_lake(tmp_path / "other", seed=8)
    assert digest(tmp_path / "other") != digest(root)
    assert other["interactions"] == summary["interactions"] == 3000
    assert not (tmp_path / "sample_expectations.json").exists()  # the manifest only when asked


def test_fast_uuid_is_uuid4():
    a, b = random.Random(3), random.Random(3)
    for _ in range(200):
        assert _uuid4(a) == str(uuid.UUID(int=b.getrandbits(128), version=4))


def test_every_line_parses_except_the_listed_ones(lake):
    root, _, manifest = lake
    listed = {(m["path"], m["line_number"]): m["reason"] for m in manifest}
    seen = set()
    for source, paths in files_of(root).items():
        for path in paths:
            rel = path.relative_to(root).as_posix()
            if path.suffix in (".db", ".sqlite3"):
                continue
            data = path.read_bytes()
            if rel == "weighted/training_queue_old.jsonl":  # the older save format: one JSON array
                items = json.loads(data)
                assert isinstance(items, list) and all(isinstance(i, dict) for i in items)
                assert {k for i in items for k in i} == {"query", "response", "feedback", "weight", "timestamp", "tags"}
                continue
            lines, tail = split(data)
            for number, (_, line) in enumerate(lines, start=1):
                reason = listed.get((rel, number))
                if reason is None:
                    if line.strip() == b"":
                        continue  # blank lines are not errors
                    assert isinstance(strict(line), dict), (rel, number)
                    continue
                seen.add((rel, number))
                _assert_bad(line, reason, rel, number)
            if tail:
                assert listed.get((rel, len(lines) + 1)) == "deferred", rel
                seen.add((rel, len(lines) + 1))
                with pytest.raises(ValueError):
                    json.loads(tail)
    sqlite_rows = {(m["path"], m["line_number"]) for m in manifest if m["byte_offset"] is None}
    assert seen | sqlite_rows == set(listed)


def _assert_bad(line: bytes, reason: str, rel: str, number: int) -> None:
    kind, _, field = reason.partition(":")
    where = (rel, number, reason)
    if kind == "invalid_utf8":
        with pytest.raises(UnicodeDecodeError):
            line.decode("utf-8")
        return
    if kind == "invalid_json":
        with pytest.raises(json.JSONDecodeError):
            json.loads(line)
        return
    if kind == "not_an_object":
        assert not isinstance(json.loads(line), dict), where
        return
    if kind in ("duplicate_key", "non_standard_json"):
        json.loads(line)  # Python is lenient here; the strict reader is not
        with pytest.raises(ValueError, match="duplicate" if kind == "duplicate_key" else "non-standard"):
            strict(line)
        return
    record = strict(line)
    assert isinstance(record, dict), where
    if kind == "missing_field":
        assert field not in record, where
    else:
        assert kind in ("bad_type", "bad_value", "bad_timestamp") and field in record, where


def test_manifest_offsets_point_at_the_listed_lines(lake):
    root, summary, manifest = lake
    kinds = Counter(m["reason"].split(":")[0] for m in manifest)
    assert summary["bad_cases"] == len(manifest) - kinds["deferred"] >= 14
    assert kinds["deferred"] == 1 and len(kinds) >= 10
    assert len({(m["path"], m["line_number"]) for m in manifest}) == len(manifest)  # one case per line
    assert len({m["source"] for m in manifest}) >= 8  # spread across sources ...
    assert len({m["path"] for m in manifest}) >= 10  # ... and files
    for m in manifest:
        assert m["path"] == m["path"].replace("\\", "/") and not m["path"].startswith("/")
        if m["byte_offset"] is None:
            continue
        data = (root / m["path"]).read_bytes()
        lines, tail = split(data)
        if m["reason"] == "deferred":
            assert m["byte_offset"] == len(data) - len(tail) and summary["deferred_bytes"] == len(tail)
            assert m["line_number"] == len(lines) + 1
        else:
            assert lines[m["line_number"] - 1][0] == m["byte_offset"], m
            assert data[m["byte_offset"] - 1:m["byte_offset"]] == b"\n"


def test_summary_counts_match_the_files(lake):
    root, summary, _ = lake
    total_files = total_lines = total_bytes = 0
    for source, paths in files_of(root).items():
        lines = 0
        for path in paths:
            if path.suffix == ".sqlite3":
                lines += count_rows(path, "session_feedback")
            elif path.suffix == ".db":
                lines += count_rows(path, "eventlog")
            elif path.name == "training_queue_old.jsonl":
                lines += len(json.loads(path.read_bytes()))
            else:
                lines += path.read_bytes().count(b"\n")
        got = summary["sources"][source]
        assert got == {"files": len(paths), "lines": lines, "bytes": sum(p.stat().st_size for p in paths)}, source
        total_files, total_lines = total_files + len(paths), total_lines + lines
        total_bytes += got["bytes"]
    assert (summary["files"], summary["lines"], summary["bytes"]) == (total_files, total_lines, total_bytes)
    # nothing outside the sources' globs, and no -wal/-shm next to the WAL-mode database
    assert len(summary["_files_right_after"]) == total_files
    assert 1_000_000 < summary["bytes"] < 6_000_000


def test_interactions_are_collector_records(lake):
    root, _, manifest = lake
    bad = {(m["path"], m["line_number"]) for m in manifest}
    by_id, prompts, raw_prompts = defaultdict(list), defaultdict(lambda: defaultdict(set)), defaultdict(set)
    edge = Counter()
    for path in sorted((root / "interactions").glob("interactions_*.jsonl")):
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        edge["bom"] += data.startswith(b"\xef\xbb\xbf")
        edge["crlf"] += b"\r\n" in data
        lines, _ = split(data)
        edge["blank"] += sum(1 for _, line in lines if not line.strip())
        day, sid8 = path.stem.split("_")[1:]
        for number, (_, line) in enumerate(lines, start=1):
            if (rel, number) in bad or not line.strip():
                continue
            text = line.decode("utf-8")
            record = json.loads(text)
            keys = list(record)
            if keys != INTERACTION_KEYS:
                assert keys[:15] == INTERACTION_KEYS and keys[15:] == ["client_version"]
                edge["extra"] += 1
            assert json.dumps(record, ensure_ascii=False) == text  # the collector's exact bytes
            assert uuid.UUID(record["id"]).version == 4 and record["session_id"][:8] == sid8
            assert isinstance(record["tokens_used"], int) and isinstance(record["latency_ms"], (int, float))
            by_id[record["id"]].append(record)
            if len(by_id[record["id"]]) == 1:
                assert record["timestamp"][:10] == day
                prompt = " ".join(unicodedata.normalize("NFC", record["input_text"]).split())
                prompts[(prompt, record["context"])][record["user_feedback"]].add(record["output_text"])
                raw_prompts[(prompt, record["context"])].add(record["input_text"])
    assert edge == {"bom": 1, "crlf": 1, "blank": 2, "extra": 1}
    assert len(by_id) == 3000
    texts = [r for rs in by_id.values() for r in rs]
    assert any(r["latency_ms"] == 0 and isinstance(r["latency_ms"], int) for r in texts)
    assert any(len(r["timestamp"]) == 19 for r in texts) and any(len(r["timestamp"]) == 26 for r in texts)
    assert any("\n" in r["input_text"] for r in texts) and any("\n" in r["output_text"] for r in texts)
    assert any(not r["input_text"].isascii() for r in texts) and any(r["context"] == "" for r in texts)
    assert len({r["model"] for r in texts}) >= 4 and Counter(r["user_feedback"] for r in texts)["none"] > 1500
    # later copies: same id, later timestamp, changed feedback (last wins downstream)
    copies = [rs for rs in by_id.values() if len(rs) > 1]
    assert copies and all(rs[1]["timestamp"] > rs[0]["timestamp"] and rs[1]["user_feedback"] != rs[0]["user_feedback"]
                          for rs in copies)
    # DPO: the same normalised prompt and context, liked with one answer and disliked with another
    pairs = [k for k, fb in prompts.items() if fb["positive"] and fb["negative"] and fb["positive"] != fb["negative"]]
    assert len(pairs) >= 20
    assert any(len(spellings) > 1 for spellings in raw_prompts.values())  # typed differently, same prompt


def test_sidecars_sessions_and_weighted(lake):
    root, _, manifest = lake
    bad = {(m["path"], m["line_number"]) for m in manifest}

    def records(pattern):
        for path in sorted(root.glob(pattern)):
            rel = path.relative_to(root).as_posix()
            for number, (_, line) in enumerate(split(path.read_bytes())[0], start=1):
                if (rel, number) not in bad and line.strip():
                    yield json.loads(line)

    inline = {(r["id"], r["timestamp"]) for r in _interaction_records(root) if r["user_feedback"] != "none"}
    ids = {r["id"] for r in _interaction_records(root) if "id" in r}
    feedback = list(records("feedback/*_feedback.jsonl"))
    assert any((f["record_id"], f["timestamp"]) in inline for f in feedback)  # a tie with the inline feedback
    assert 0.12 < len({f["record_id"] for f in feedback if f["record_id"] in ids}) / 3000 < 0.2
    assert {f.get("source") for f in feedback} == {"manual", "outcome_tracker", None}
    assert any(f["record_id"] not in ids for f in feedback)  # orphans
    timeline = defaultdict(set)
    for f in feedback:
        timeline[f["record_id"]].add(f["feedback"])
    assert sum(1 for v in timeline.values() if {"positive", "negative"} <= v) >= 10  # conflicts

    outcomes = list(records("outcomes/*_outcomes.jsonl"))
    assert 0.15 < len(outcomes) / 3000 < 0.25
    strategies = [o["strategy"] for o in outcomes]
    assert {} in strategies and any("arm_id" in s for s in strategies)
    assert any(s and "arm_id" not in s for s in strategies)
    assert all(len(o["response_summary"]) <= 200 for o in outcomes)
    assert not {o["session_id"] for o in outcomes} & {r for r in ids}

    db = root / "sessions" / "session_feedback.sqlite3"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert con.execute("select sql from sqlite_master where name = 'session_feedback'").fetchone()[0] == SESSION_DDL
        assert con.execute("pragma journal_mode").fetchone()[0] == "wal"
        rows = con.execute("select insertion_order, id, recorded_at, label, value from session_feedback").fetchall()
    finally:
        con.close()
    broken = {m["line_number"] for m in manifest if m["source"] == "session_ratings"}
    values = []
    for key, rid, recorded_at, label, value in rows:
        if key in broken:
            with pytest.raises(ValueError):
                json.loads(value)
            continue
        v = json.loads(value)
        assert v["id"] == rid and v["label"] == label and recorded_at.endswith("Z")
        values.append(v)
    assert {v["label"] for v in values} == {"positive", "negative", "skip"}
    assert any(c > 1 for c in Counter(v["id"] for v in values).values())  # a double submit
    assert any("modality" in v for v in values) and any("modality" not in v for v in values)
    sessions = {hashlib.sha256(r["session_id"].encode()).hexdigest()
                for r in _interaction_records(root)}
    assert len({v["session_id_opaque"] for v in values} & sessions) >= 20

    queue = (root / "weighted" / "training_queue.jsonl").read_text().splitlines()
    archived = set()
    for path in (root / "weighted").glob("training_queue_archive_*.jsonl"):
        archived |= set(path.read_text().splitlines())
    assert set(queue) & archived  # the same lines under two names
    good = [json.loads(x) for x in queue if '"weight":0,' not in x]
    assert {e["weight"] for e in good} <= {10.0, 3.0, 1.0}
    assert list(good[0]) == ["query", "response", "weight", "feedback"]
    assert all(", " not in x.split('"query":')[0] for x in queue)
    ratings = list(records("weighted/feedback*.jsonl"))
    assert all(isinstance(r["timestamp"], int) and r.get("note", "x") != "" for r in ratings)
    assert any("note" not in r for r in ratings) and {r["rating"] for r in ratings} == {"good", "bad"}


def _interaction_records(root: Path):
    for path in (root / "interactions").glob("interactions_*.jsonl"):
        for _, line in split(path.read_bytes())[0]:
            try:
                record = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(record, dict) and "session_id" in record:
                yield record


def test_eventlog(lake):
    root, _, manifest = lake
    con = sqlite3.connect(f"file:{root / 'eventlog' / 'patina.db'}?mode=ro", uri=True)
    try:
        assert con.execute("select sql from sqlite_master where name = 'eventlog'").fetchone()[0] == EVENTLOG_DDL
        rows = con.execute("select seq, event_type, timestamp, source_id, source_file, data from eventlog "
                           "order by seq").fetchall()
    finally:
        con.close()
    kinds = Counter(r[1] for r in rows)
    assert {"git.commit", "git.tag", "scry.query", "scry.use", "scry.feedback", "session.started",
            "session.ended"} <= set(kinds)
    commits = [(r[0], r[3], json.loads(r[5]), r[2]) for r in rows if r[1] == "git.commit"]
    shas = Counter(sha for _, sha, _, _ in commits)
    assert any(n > 1 for n in shas.values())  # re-scraped
    paths = [f["path"] for _, _, d, _ in commits for f in d["files"]]
    assert any(" => " in p and "{" not in p for p in paths) and any("{" in p and " => " in p for p in paths)
    assert any(d.get("session_id", "").endswith("-claude") for _, _, d, _ in commits)
    assert all(ts[-6] in "+-" and "T" in ts for *_, ts in commits)
    tags = [r[3] for r in rows if r[1] == "git.tag"]
    starts = {t[len("session-"):].removesuffix("-start") for t in tags if t.endswith("-start")}
    ends = {t[len("session-"):].removesuffix("-end") for t in tags if t.endswith("-end")}
    assert starts - ends  # a session with no end tag
    queries = [(r[2], r[3], json.loads(r[5])) for r in rows if r[1] == "scry.query"]
    v1 = [q for q in queries if "query_id" not in q[2]]
    v2 = [q for q in queries if "query_id" in q[2]]
    assert v1 and v2 and all(ts == sid for ts, sid, _ in v1) and all(d["query_id"] == sid for _, sid, d in v2)
    assert all(ts.endswith("+00:00") and len(ts.split(".")[1]) == 15 for ts, _, _ in queries)
    graph = [d for *_, d in v2 if d["mode"] == "graph"]
    assert graph and all("routing" in d and all("source_repo" in r and "weight" in r for r in d["results"])
                         for d in graph)
    docs = [r["doc_id"] for *_, d in queries for r in d["results"]]
    assert any(d.startswith("./") and "::" in d for d in docs) and any(d.startswith("persona:") for d in docs)
    assert any(len(d) == 15 and d[8] == "-" for d in docs) and any("_" in d and "/" in d for d in docs)
    assert all(not d["session_id"].endswith("-claude") for *_, d in queries)
    assert all(r["rank"] == i for *_, d in queries for i, r in enumerate(d["results"], start=1))
    # retrieved files that the same session committed later: precision is neither 0 nor 1
    touched = defaultdict(set)
    for _, _, d, _ in commits:
        if "session_id" in d:
            touched[d["session_id"].removesuffix("-claude")] |= {f["path"] for f in d["files"]}
    judged = [r["doc_id"] in touched[d["session_id"]] for *_, d in queries if d["session_id"] in touched
              for r in d["results"]]
    assert 0 < sum(judged) < len(judged)

    export = split((root / "eventlog" / "export.jsonl").read_bytes())[0]
    bad = {m["line_number"] for m in manifest if m["path"] == "eventlog/export.jsonl"}
    for number, (_, line) in enumerate(export, start=1):
        row = json.loads(line)
        assert list(row) == ["seq", "event_type", "timestamp", "source_id", "source_file", "data"]
        assert isinstance(row["data"], str)
        if number in bad:
            with pytest.raises(ValueError):
                json.loads(row["data"])
        else:
            assert isinstance(json.loads(row["data"]), dict)


def test_signals_start_with_the_real_rows(lake):
    root, _, manifest = lake
    data = (root / "signals" / "feedback_buffer.jsonl").read_bytes()
    assert data.startswith("\n".join(REAL_SIGNAL_ROWS).encode() + b"\n")
    shared = Path(__file__).resolve().parents[2] / "shared"
    sample = shared / "samples" / "energyflow-cosmology" / "feedback_buffer.jsonl"
    if sample.exists():
        assert data.startswith(sample.read_bytes())
    bad = {m["line_number"] for m in manifest if m["source"] == "signals"}
    rows = [json.loads(line) for n, (_, line) in enumerate(split(data)[0], start=1) if n not in bad]
    assert all(list(r) == SIGNAL_KEYS for r in rows)
    from datetime import datetime, timezone

    for r in rows:  # epoch ms one hour behind created_at (read as UTC)
        created = datetime.fromisoformat(r["created_at"]).replace(tzinfo=timezone.utc)
        assert int(created.timestamp() * 1000) - r["timestamp"] in range(3_600_000 - 1, 3_600_000 + 2)
    current, positives = {}, defaultdict(list)
    for r in sorted(rows, key=lambda r: r["created_at"]):
        current[(r["target_id"], r["aspect"])] = r["signal"]
        if r["signal"] in ("good", "correct") and r["strength"] >= 0.7:
            positives[r["target_id"]].append(r["source"])
    polarity = defaultdict(set)
    for (target, _), signal in current.items():
        polarity[target].add(signal in ("good", "correct") if signal not in ("unsure", "neutral") else None)
    assert any({True, False} <= p for p in polarity.values())  # conflicts
    assert sum(1 for s in positives.values() if len(s) >= 2 and "manual" in s) >= 3  # promotion candidates
    by_key = Counter((r["target_id"], r["aspect"]) for r in rows)
    assert any(n > 1 for n in by_key.values())  # supersession


def test_clean_lake_has_no_damage(tmp_path):
    summary = generate_lake(tmp_path / "raw", interactions=400, bad_cases=False, manifest_path=tmp_path / "m.json")
    assert json.loads((tmp_path / "m.json").read_text()) == [] and summary["bad_cases"] == 0
    assert summary["deferred_bytes"] == 0
    for path in (tmp_path / "raw").rglob("*.jsonl"):
        data = path.read_bytes()
        assert not data.startswith(b"\xef\xbb\xbf") and b"\r" not in data and data.endswith(b"\n")
        if path.name == "training_queue_old.jsonl":
            continue
        for line in data.splitlines():
            assert isinstance(strict(line), dict)
    db = tmp_path / "raw" / "sessions" / "session_feedback.sqlite3"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        for (value,) in con.execute("select value from session_feedback"):
            json.loads(value)
    finally:
        con.close()
