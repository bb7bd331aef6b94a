"""Shared fixtures: real lakes on tmp_path, a real state database, the real samples."""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest

os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "yes")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

SHARED = Path(__file__).resolve().parents[2] / "shared"
SAMPLES = SHARED / "samples"
PROJECT = Path(__file__).resolve().parents[1]


def interaction(i: int | str = 1, **overrides) -> dict:
    """A valid InteractionRecord as the collector writes it."""
    record = {
        "id": i if isinstance(i, str) else f"00000000-0000-4000-8000-{i:012d}",
        "timestamp": "2026-02-26T14:03:12.123456",
        "interaction_type": "code_review",
        "input_text": "How do I read a file?",
        "output_text": "Use open().",
        "context": "",
        "model": "claude-sonnet",
        "tokens_used": 120,
        "latency_ms": 812.5,
        "user_feedback": "none",
        "was_edited": False,
        "was_accepted": True,
        "source": "cli",
        "session_id": "5b0c2f7e-1d0a-4c9e-9a51-0c6f3d1e2a10",
        "project_context": None,
    }
    record.update(overrides)
    return record


def dumps(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False)


def write_lines(path: Path, lines: list[str | bytes], newline_at_end: bool = True, mode: str = "wb") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"\n".join(l if isinstance(l, bytes) else l.encode("utf-8") for l in lines)
    if newline_at_end and lines:
        data += b"\n"
    with path.open(mode) as fh:
        fh.write(data)
    return path


@pytest.fixture
def settings(tmp_path):
    from dagster_project.settings import Settings

    raw = tmp_path / "raw"
    raw.mkdir()
    return Settings.from_env({
        "FLYWHEEL_RAW_DIR": str(raw),
        "FLYWHEEL_WAREHOUSE": str(tmp_path / "warehouse.duckdb"),
        "FLYWHEEL_EXPORT_DIR": str(tmp_path / "exports"),
    })


def ingest(settings, run_id: str = "run-1", *, sources=None, full_refresh: bool = False,
           con: duckdb.DuckDBPyConnection | None = None, now: float | None = None):
    """Ingest and stage every (or the named) source; return (connection, reports by source)."""
    from dagster_project.engine import Ingestor
    from dagster_project.sources import load_sources
    from transforms.staging import build_staging

    specs = load_sources(settings.sources_file)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    con = con or duckdb.connect(str(settings.state_db))
    con.execute("set TimeZone = 'UTC'")
    reports = {}
    for name, spec in specs.items():
        if sources and name not in sources:
            continue
        reports[name] = Ingestor(con, spec, settings, run_id, now=now).run(full_refresh=full_refresh)
        build_staging(con, spec)
    return con, reports


def rows(con: duckdb.DuckDBPyConnection, sql: str, params=None) -> list[tuple]:
    return con.execute(sql, params or {}).fetchall()
