"""Shared fixtures: real lakes on tmp_path, a real state database, the real samples."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest

os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "yes")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
# Test runs go to a throwaway Dagster instance, never the project's .dagster_home (the UI's
# history), even under `make test`, which exports DAGSTER_HOME for the other targets.
_DAGSTER_HOME = tempfile.mkdtemp(prefix="flywheel-test-dagster-")
Path(_DAGSTER_HOME, "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
os.environ["DAGSTER_HOME"] = _DAGSTER_HOME
os.environ["FLYWHEEL_DAGSTER_EPHEMERAL"] = "1"  # and `flywheel run` keeps its runs in memory (faster)
atexit.register(shutil.rmtree, _DAGSTER_HOME, True)

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
        # Fixture ratings are dated 2026 and runs are as of today: retention (every layer) must
        # not expire them (tests/test_privacy.py tests the window).
        "FLYWHEEL_SESSION_RETENTION_DAYS": "3650",
    })


@contextmanager
def held_open(path, read_only: bool = False):
    """Another process holding a DuckDB connection to ``path`` (an analyst's, a notebook's) while
    the block runs: DuckDB then refuses any other process a writer, or any reader if it writes."""
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb, sys; c = duckdb.connect({str(path)!r}, "
                               f"read_only={read_only}); print('ready', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        yield
    finally:
        holder.kill()
        holder.wait()


def unprivileged() -> tuple[str, ...]:
    """The command a child runs under so that file modes bind it: when the tests run as root,
    ``setpriv`` without the two capabilities that let root past any mode; else nothing."""
    caps = "-dac_override,-dac_read_search"
    return ("setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}") if os.geteuid() == 0 else ()


@pytest.fixture
def open_tmp():
    """A directory another process may enter (pytest's own are 0700), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="flywheel-modes-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def run_dying(settings, patch: str, run_id: str = "crashed", sources=("interactions",),
              env: dict[str, str] | None = None, wrapper: tuple[str, ...] = (),
              timeout: float | None = None) -> subprocess.CompletedProcess:
    """Ingest ``sources`` as ``run_id`` in a child process with ``patch`` (Python run after
    importing ``bronze`` and ``engine``) applied first: it may kill -9 the child. ``env``: more
    settings (``FLYWHEEL_*``); ``wrapper``: a command the child runs under (e.g. ``setpriv …``);
    ``timeout``: seconds after which the child is killed (``subprocess.TimeoutExpired``)."""
    tests = os.path.dirname(os.path.abspath(__file__))
    return subprocess.run([*wrapper, sys.executable, "-c", f"""
import os, sys
sys.path.insert(0, {os.getcwd()!r}); sys.path.insert(0, {tests!r})
from conftest import ingest
from dagster_project.engine import bronze, engine
from dagster_project.settings import Settings
{patch}
ingest(Settings.from_env({{"FLYWHEEL_RAW_DIR": {str(settings.raw_dir)!r},
                           "FLYWHEEL_WAREHOUSE": {str(settings.warehouse)!r}, **{dict(env or {})!r}}}), {run_id!r},
       sources={list(sources)!r})
"""], capture_output=True, text=True, timeout=timeout)


def ingest(settings, run_id: str = "run-1", *, sources=None, full_refresh: bool = False,
           con: duckdb.DuckDBPyConnection | None = None, now: float | None = None, progress=None):
    """Ingest and stage every (or the named) source; return (connection, reports by source).
    ``progress``: called with each progress line (as the run prints them: one per file looked at)."""
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
        reports[name] = Ingestor(con, spec, settings, run_id, progress=progress, now=now).run(full_refresh=full_refresh)
        build_staging(con, spec)
    return con, reports


def rows(con: duckdb.DuckDBPyConnection, sql: str, params=None) -> list[tuple]:
    return con.execute(sql, params or {}).fetchall()


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory):
    """`flywheel run` once per session on a copy of the bundled sample lake, as `make run` does it
    (its as-of date, output piped): (settings, stderr). Read it; copy it (``sample_run_copy``) to change it."""
    import re
    import shutil
    import subprocess
    import sys

    from dagster_project.settings import Settings

    root = tmp_path_factory.mktemp("sample-run")
    # New mtimes, as a fresh checkout has: the sample's partial last line is then not yet sealed
    # (FLYWHEEL_SEAL_AFTER, 24 h), whatever the age of the checkout the tests run in.
    shutil.copytree(PROJECT / "data" / "raw", root / "raw", copy_function=shutil.copy)
    as_of = re.search(r"^SAMPLE_AS_OF := (\S+)$", (PROJECT / "Makefile").read_text(), re.M).group(1)
    env = {"FLYWHEEL_RAW_DIR": str(root / "raw"), "FLYWHEEL_WAREHOUSE": str(root / "warehouse.duckdb"),
           "FLYWHEEL_EXPORT_DIR": str(root / "exports"), "FLYWHEEL_AS_OF": as_of,
           "FLYWHEEL_PSEUDONYM_KEY": "test-key"}
    proc = subprocess.run([sys.executable, "-m", "dagster_project.cli", "run"], cwd=root,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return Settings.from_env(env), proc.stderr


def copy_run(settings, dest: Path, *, link_raw: bool = False):
    """A copy of a finished run (raw lake, state, warehouse link, exports) under ``dest``/run.

    A copied raw file is a new inode, which the engine records as a state change on the next
    run; ``link_raw`` hard-links the raw files instead, so that run sees an unchanged lake (the
    files are then shared with the original: never write to them)."""
    from dataclasses import replace

    root = settings.warehouse.parent
    raw = os.path.abspath(settings.raw_dir) + os.sep

    def copy(src, dst):
        return os.link(src, dst) if link_raw and os.path.abspath(src).startswith(raw) else shutil.copy2(src, dst)

    shutil.copytree(root, dest / "run", symlinks=True, copy_function=copy)
    copied = replace(settings, **{name: dest / "run" / getattr(settings, name).relative_to(root)
                                  for name in ("raw_dir", "warehouse", "export_dir")})
    # the copy's lake is its own raw root (the original's is recorded: a run would refuse another)
    (copied.state_dir / settings.RAW_ROOT).unlink(missing_ok=True)
    return copied


@pytest.fixture
def sample_run_copy(sample_run, tmp_path):
    """A private copy of the session's sample run (raw lake, state, warehouse, exports)."""
    return copy_run(sample_run[0], tmp_path)
