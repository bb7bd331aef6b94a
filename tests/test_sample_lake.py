"""The bundled sample lake: what `make run` ingests, checked against its manifest."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from conftest import PROJECT, ingest, rows
from dagster_project.engine import check_accounting
from dagster_project.synth import REAL_SIGNAL_ROWS, generate_lake

RAW = PROJECT / "data" / "raw"
EXPECTED = json.loads((PROJECT / "data" / "sample_expectations.json").read_text())


def digest(root):
    # SQLite readers may leave empty -wal/-shm files beside a WAL database: not lake content.
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


def test_generator_is_deterministic_and_reproduces_the_bundled_lake(tmp_path):
    generate_lake(tmp_path / "a", manifest_path=tmp_path / "a.json")
    generate_lake(tmp_path / "b")
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert digest(tmp_path / "a") == digest(RAW), "data/raw is `flywheel synth data/raw`"
    assert json.loads((tmp_path / "a.json").read_text()) == EXPECTED


def test_sample_lake_quarantines_exactly_the_planted_cases(settings):
    settings = replace(settings, raw_dir=RAW)
    con, _ = ingest(settings)
    got = rows(con, "select source, path, line_number, byte_offset, reason from ingest.quarantine "
                    "order by path, line_number")
    expected = [(e["source"], e["path"], e["line_number"], e["byte_offset"], e["reason"])
                for e in EXPECTED if e["reason"] != "deferred"]
    assert got == sorted(expected, key=lambda e: (e[1], e[2]))
    assert len({reason.split(":")[0] for *_, reason in got}) >= 9  # many different kinds of damage
    deferred = [e for e in EXPECTED if e["reason"] == "deferred"]
    assert rows(con, "select path, offset_bytes from ingest.files where deferred_bytes > 0") == [
        (d["path"], d["byte_offset"]) for d in deferred]
    check_accounting(con)
    # every source has rows, and the real signal rows are there byte for byte
    for table in ("interactions", "legacy_log", "feedback", "outcomes", "session_ratings", "weighted_queue",
                  "weighted_ratings", "eventlog", "signals"):
        assert rows(con, f"select count(*) > 0 from staging.{table}") == [(True,)], table
    assert (RAW / "signals" / "feedback_buffer.jsonl").read_bytes().startswith(
        "\n".join(REAL_SIGNAL_ROWS).encode() + b"\n")
    # bad-input lines are at exactly the listed byte offsets
    for e in EXPECTED:
        if e["byte_offset"] is not None and e["reason"] != "deferred":
            data = (RAW / e["path"]).read_bytes()
            assert e["byte_offset"] == 0 or data[e["byte_offset"] - 1:e["byte_offset"]] == b"\n"


def test_real_signal_rows_match_the_shared_sample():
    from conftest import SAMPLES

    sample = SAMPLES / "energyflow-cosmology" / "feedback_buffer.jsonl"
    assert sample.read_text().splitlines() == REAL_SIGNAL_ROWS
