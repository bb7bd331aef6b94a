"""The bundled sample lake: what `make run` ingests, checked against its manifest."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace

import pytest

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
    # the planted partial last line stays deferred however old the checkout's files are
    settings = replace(settings, raw_dir=RAW, seal_after_seconds=100 * 365 * 86400.0)
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


@pytest.mark.slow
def test_piped_progress_has_a_line_per_step_with_counts(sample_run):
    import re

    _, stderr = sample_run
    steps = re.findall(r"^\[\s*(\d+)/(\d+)\] ✓ (\S+) \d+\.\d s", stderr, re.M)
    total = int(steps[0][1])
    assert [int(n) for n, _, _ in steps] == list(range(1, total + 1)) and total == 26  # checks run in their assets' steps
    assert re.search(r"^\[\s*\d+/\d+\] ✓ ingest/interactions \d+\.\d s  files 110, lines 3,032, loaded 3,021, "
                     r"quarantined 9$", stderr, re.M)
    assert re.search(r"✓ staging/interactions \d+\.\d s  rows 3,000$", stderr, re.M)
    assert "as-of=2026-04-03" in stderr and "(incremental) succeeded" in stderr
    assert "warning" not in stderr  # every source has files; the pseudonym key is set


@pytest.mark.slow
def test_make_run_as_of_populates_every_mart(sample_run):
    import duckdb

    settings, _ = sample_run
    con = duckdb.connect(str(settings.warehouse), read_only=True)
    marts = [t for (t,) in con.execute("select view_name from duckdb_views() where schema_name = 'marts'").fetchall()]
    assert {"session_satisfaction", "promotion_candidates"} <= set(marts)
    empty = [t for t in marts if con.execute(f"select count(*) from marts.{t}").fetchone()[0] == 0]
    assert empty == []


def test_every_training_set_is_partitioned_by_event_time(sample_run):
    """A day's append to a large lake becomes new files, not a rewrite of a whole training set
    (kto and dpo were one file per split: 13% of the published bytes rewritten per 1% append)."""
    from dagster_project.publishing import read_manifest

    settings, _ = sample_run
    datasets = read_manifest(settings.export_dir)["datasets"]
    training = {p: d for p, d in datasets.items() if d["kind"] == "training"}
    assert set(training) == {"training/sft", "training/kto", "training/dpo", "training/weighted"}
    for path, dataset in training.items():
        names = [f["name"] for f in dataset["files"]]
        assert len(names) > 2 and not any(n.endswith("-all.parquet") for n in names), (path, names)


@pytest.mark.slow
def test_every_table_and_column_has_a_comment(sample_run):
    import duckdb

    settings, stderr = sample_run
    assert "no description in dagster_project/catalog.py" not in stderr
    for db in (settings.state_db, settings.warehouse):
        con = duckdb.connect(str(db), read_only=True)
        undescribed_tables = con.execute("select schema_name || '.' || table_name from duckdb_tables() "
                                         "where not internal and (comment is null or comment = '') union all "
                                         "select schema_name || '.' || view_name from duckdb_views() "
                                         "where not internal and (comment is null or comment = '')").fetchall()
        undescribed_columns = con.execute("select schema_name || '.' || table_name || '.' || column_name "
                                          "from duckdb_columns() where not internal and (comment is null or comment = '')"
                                          ).fetchall()
        assert (undescribed_tables, undescribed_columns) == ([], []), db
        assert con.execute("select comment from duckdb_columns() where schema_name = 'exports' and table_name = 'sft' "
                           "and column_name = 'line_number'").fetchall() == [
            ("Provenance: 1-based line in the raw file (SQLite: the row's insertion order).",)]
        # raw.* (every version, raw ids) stays private in the state database
        raw_tables = con.execute("select count(*) from duckdb_tables() where schema_name = 'raw'").fetchone()[0]
        assert raw_tables == (9 if db == settings.state_db else 0)
        con.close()


@pytest.mark.slow
def test_a_comment_that_lists_a_columns_values_names_every_value_the_sample_has(sample_run):
    """Comments an analyst reads instead of the code: `exports.kto.origin` listed `queue` and
    `rating`, which only staging holds (the exports say `weighted_queue`, `weighted_rating`)."""
    import duckdb

    settings, _ = sample_run
    con = duckdb.connect(str(settings.warehouse), read_only=True)
    listed = [("exports.kto", "origin"), ("exports.weighted", "origin"), ("staging.weighted_examples", "origin"),
              ("ingest.files", "status")]
    for table, column in listed:
        schema, name = table.split(".")
        [(comment,)] = con.execute("select comment from duckdb_columns() where schema_name = ? and table_name = ? "
                                   "and column_name = ?", [schema, name, column]).fetchall()
        words = set(comment.replace(",", " ").replace("|", " ").replace("(", " ").replace(")", " ").split())
        values = {v for (v,) in con.execute(f"select distinct {column} from {table}").fetchall()}
        assert values and values <= words, (table, column, values, comment)
    con.close()


@pytest.mark.slow
def test_a_missing_raw_root_over_the_sample_warehouse_is_refused_and_marks_nothing_missing(sample_run_copy, tmp_path):
    import subprocess
    import sys

    import duckdb

    settings = sample_run_copy
    published = settings.warehouse.stat().st_mtime_ns
    env = {**os.environ, "FLYWHEEL_RAW_DIR": str(tmp_path / "unmounted"), "FLYWHEEL_WAREHOUSE": str(settings.warehouse),
           "FLYWHEEL_EXPORT_DIR": str(settings.export_dir)}
    proc = subprocess.run([sys.executable, "-m", "dagster_project.cli", "run"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: FLYWHEEL_RAW_DIR={tmp_path / 'unmounted'} does not exist: point it at the root of the raw lake, "
        f"e.g. FLYWHEEL_RAW_DIR={PROJECT / 'data' / 'raw'}")
    assert settings.warehouse.stat().st_mtime_ns == published
    con = duckdb.connect(str(settings.warehouse), read_only=True)
    assert con.execute("select count(*), count(*) filter (where status = 'missing') from ingest.files").fetchall() == [
        (227, 0)]


@pytest.mark.slow
def test_an_odd_retrieval_record_in_the_eventlog_is_dropped_and_named_not_a_failed_run(sample_run_copy):
    """The engine checks an eventlog event, not the retrieval tool's record inside its `data`: a
    feedback with signal "neutral" or a result ranked 0 failed every run (`fail` expectations on
    staging.scry_feedback and scry_results), and a re-scrape's corrected copy is another identity,
    so for good. Each is now one unusable record: dropped, named in ingest.excluded."""
    import duckdb

    from dagster_project.pipeline import run_pipeline

    settings = sample_run_copy
    feedback = {"query_id": "q_20260403_140400_x7k", "signal": "neutral", "comment": None,
                "session_id": "20260403-100000"}
    query = {"query_id": "q_odd", "query": "odd ranks", "mode": "hybrid", "session_id": "20260403-100000",
             "results": [{"doc_id": "src/db/schema.sql", "score": 0.5, "rank": 0, "event_type": "code.file"},
                         {"doc_id": "src/lib.rs", "score": 0.4, "rank": 1, "event_type": "code.file"}]}
    with open(settings.raw_dir / "eventlog" / "export.jsonl", "a", encoding="utf-8") as fh:
        for seq, kind, source_id, data in ((101, "scry.feedback", feedback["query_id"], feedback),
                                           (102, "scry.query", "q_odd", query)):
            fh.write(json.dumps({"seq": seq, "event_type": kind, "timestamp": "2026-04-03T15:00:00+00:00",
                                 "source_id": source_id, "source_file": None, "data": json.dumps(data)}) + "\n")
    result = run_pipeline(settings)
    assert result.success, result.failures
    con = duckdb.connect(str(settings.state_db), read_only=True)
    excluded = con.execute("select table_name, expectation, detail from ingest.excluded where run_id = ? "
                           "and table_name like 'staging.scry%' order by 1", [result.run_id]).fetchall()
    assert excluded == [("staging.scry_feedback", "signal in {good, bad}", 'signal = "neutral"'),
                        ("staging.scry_results", "rank ≥ 1", "rank = 0")]
    assert con.execute("select count(*) from staging.scry_results where query_id = 'q_odd'").fetchone()[0] == 1
    con.close()
