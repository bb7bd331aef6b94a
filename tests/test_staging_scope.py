"""The validation of an incrementally refreshed staging table hashes only the rows the step added
(a row-id range), with the same result as GX on every row; and ingest never imports pandas."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
import pyarrow as pa

from conftest import interaction
from dagster_project.engine.engine import FILE_STATE
from dagster_project.validation import validate_table
from test_staging_incremental import FILES, TIMES, Lake, append
from transforms import arrowcols
from transforms.staging import added_rows_in_scope

TABLE = "staging.interactions"


def _outcome(report) -> list[tuple]:
    return [(r.check.name, r.status, r.unexpected_count) for r in report.results]


def _staged_then_validated(settings) -> tuple[Lake, object]:
    append(settings.raw_dir, FILES[0], [interaction(i, timestamp=TIMES[1]) for i in range(40)])
    lake = Lake(settings)
    lake.run()
    assert validate_table(lake.con, TABLE, run_id="v1", now=lake.now).success  # the baseline
    return lake, lake.specs["interactions"]


def test_scoped_validation_sees_exactly_the_added_rows_and_equals_a_whole_validation(settings):
    lake, spec = _staged_then_validated(settings)
    # new ids and a newer version of an old id
    append(settings.raw_dir, FILES[1], [interaction(i, timestamp=TIMES[2]) for i in (3, 40, 41, 42)])
    staged = lake.run()["interactions"]
    assert staged.mode == "incremental" and staged.added == 4
    assert staged.scope.startswith("base.rowid >= ")
    assert added_rows_in_scope(lake.con, spec, staged)
    # the classifier quarantines what the suite checks: plant an offender among the added rows
    lake.con.execute(f"update {TABLE} set interaction_type = 'weird' where id = ?", [interaction(41)["id"]])

    scoped = validate_table(lake.con, TABLE, run_id="v2", now=lake.now, row_scope=staged.scope)
    reference = validate_table(lake.con, TABLE, run_id="ref", now=lake.now, incremental=False)
    assert scoped.rows_examined == 4  # not the 43 rows of the table
    assert _outcome(scoped) == _outcome(reference)
    assert not scoped.success
    offending = [r for r in scoped.results if r.check.kind == "in_set" and r.check.column == "interaction_type"]
    assert [r.unexpected_count for r in offending] == [1]


def test_a_scope_that_lost_rows_is_not_used(settings):
    lake, spec = _staged_then_validated(settings)
    append(settings.raw_dir, FILES[1], [interaction(i, timestamp=TIMES[2]) for i in (50, 51)])
    staged = lake.run()["interactions"]
    assert added_rows_in_scope(lake.con, spec, staged)
    # rows renumbered below the range (a vacuum) leave fewer rows in it than were added
    assert not added_rows_in_scope(lake.con, spec, dataclasses.replace(staged, added=staged.added + 1))
    assert not added_rows_in_scope(lake.con, spec, dataclasses.replace(staged, scope=None))


def test_nothing_new_scopes_nothing(settings):
    lake, spec = _staged_then_validated(settings)
    staged = lake.run()["interactions"]
    assert (staged.mode, staged.redecided, staged.scope, staged.added) == ("incremental", 0, "false", 0)
    assert added_rows_in_scope(lake.con, spec, staged)
    report = validate_table(lake.con, TABLE, run_id="v2", now=lake.now, row_scope=staged.scope)
    assert report.success and report.rows_examined == 0


# ------------------------------------------------------------------------------ arrowcols


def test_arrowcols_build_what_pyarrow_builds():
    at = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=timezone.utc)
    assert arrowcols.ints([1, None, -3]).equals(pa.array([1, None, -3], pa.int64()))
    assert arrowcols.ints(np.array([4, 5], dtype=np.int64)).equals(pa.array([4, 5], pa.int64()))
    assert arrowcols.ints(np.zeros(2, dtype=np.int32), pa.int32()).equals(pa.array([0, 0], pa.int32()))
    assert arrowcols.strings(["a", None, "é€", ""]).equals(pa.array(["a", None, "é€", ""], pa.string()))
    assert arrowcols.strings(["x"], pa.large_string()).equals(pa.array(["x"], pa.large_string()))
    assert arrowcols.bools([True, None, False]).equals(pa.array([True, None, False]))
    assert arrowcols.bools(np.array([True, False, True] * 5)).equals(pa.array([True, False, True] * 5))
    assert arrowcols.timestamps([at, None, datetime(1969, 12, 31, 23, 59, 59)]).equals(
        pa.array([at, None, datetime(1969, 12, 31, 23, 59, 59, tzinfo=timezone.utc)], pa.timestamp("us", tz="UTC")))
    rows = [{f.name: None for f in FILE_STATE},
            {"source": "s", "path": "p", "size_bytes": 7, "has_state": True, "at": at, "generation": 2}]
    assert arrowcols.from_rows(rows, FILE_STATE).equals(pa.Table.from_pylist(rows, schema=FILE_STATE))


def test_ingesting_new_lines_never_imports_pandas(settings, tmp_path):
    """Every reader (JSONL, a JSON array, a SQLite store) builds its Arrow tables without pandas."""
    from test_bronze import SESSIONS, store

    append(settings.raw_dir, FILES[0], [interaction(i, timestamp=TIMES[1]) for i in range(5)])
    (settings.raw_dir / "weighted").mkdir()
    (settings.raw_dir / "weighted" / "training_queue_old.jsonl").write_text(json.dumps([
        {"query": "q3", "response": "r3", "feedback": None, "weight": 3.0, "timestamp": "2026-01-05T10:00:00Z"}]))
    store(settings.raw_dir / SESSIONS, ["a", "b"]).close()
    script = f"""
import sys
import duckdb
from dagster_project.engine import Ingestor
from dagster_project.settings import Settings
from dagster_project.sources import load_sources
settings = Settings.from_env({{"FLYWHEEL_RAW_DIR": {str(settings.raw_dir)!r},
    "FLYWHEEL_WAREHOUSE": {str(tmp_path / "warehouse.duckdb")!r}, "FLYWHEEL_EXPORT_DIR": {str(tmp_path / "exports")!r},
    "FLYWHEEL_SESSION_RETENTION_DAYS": "3650"}})
specs = load_sources(settings.sources_file)
settings.state_dir.mkdir(parents=True, exist_ok=True)
con = duckdb.connect(str(settings.state_db))
for name, loaded in (("interactions", 5), ("weighted_queue", 1), ("session_ratings", 2)):
    report = Ingestor(con, specs[name], settings, "r1").run()
    assert report.total("loaded") == loaded, (name, report.total("loaded"))
print("pandas" in sys.modules)
"""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_arrow_text_past_2_gib_needs_the_large_type():
    """32-bit offsets would wrap silently: refused (the quarantine batch uses the large types)."""
    gib = bytes(1 << 30)
    with pytest.raises(OverflowError, match="large type"):
        arrowcols.binaries([gib, gib])
    assert arrowcols.binaries([gib, None, b"x"], pa.large_binary()).null_count == 1
