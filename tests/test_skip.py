"""A run costs what is new: tables whose inputs did not change are not rebuilt, validated or hashed.

Asserted through the lineage (``lineage.table_versions``: which run built each table's current
version; ``lineage.validated``: which run validated it) and the publisher's result, not timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from datetime import date, timedelta

import dagster as dg
import duckdb
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings as hsettings, strategies as st

from conftest import copy_run, dumps, interaction, write_lines
from dagster_project.definitions import load_definitions
from dagster_project.engine.readers import sqlite as sqlite_reader
from dagster_project.pipeline import run_pipeline
from dagster_project.publishing import SNAPSHOTS, publish_snapshot, read_manifest
from dagster_project.publishing.snapshot import RUN_LOG

KEY = "test-key"


def query(settings, sql: str, params=None) -> list[tuple]:
    con = duckdb.connect(str(settings.state_db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def built_by(settings) -> dict[str, str]:
    """Built table -> the run that built its current version."""
    return dict(query(settings, "select table_name, run_id from lineage.table_versions where input_key is not null"))


def validated_by(settings) -> dict[str, str]:
    return dict(query(settings, "select table_name, run_id from lineage.validated"))


def rebuilt(settings, run_id: str) -> set[str]:
    return {t for t, r in built_by(settings).items() if r == run_id}


def snapshot_status(settings, run_id: str) -> str:
    return query(settings, "select snapshot_status from ingest.runs where run_id = ?", [run_id])[0][0]


def hashed_by_a_publish(settings) -> list[str]:
    """Publish now (what the snapshot step does) and say which datasets had to be read."""
    con = duckdb.connect(str(settings.state_db))
    con.execute("set TimeZone = 'UTC'")
    try:
        result = publish_snapshot(con, export_dir=settings.export_dir, warehouse=settings.warehouse,
                                  run_id="probe", pseudonym_key=KEY.encode())
    finally:
        con.close()
    assert result.status == "unchanged"
    return result.hashed


def unversioned(settings) -> set[str]:
    """Datasets of tables without a version (the ingest bookkeeping): hashed every run."""
    manifest = read_manifest(settings.export_dir)
    return {p for p, d in manifest["datasets"].items() if d["table"].startswith("ingest.")}


def downstream(*assets: str) -> set[str]:
    """Every table the job builds downstream of these assets (from the asset graph itself)."""
    graph = load_definitions().resolve_asset_graph()
    todo, seen = [dg.AssetKey.from_user_string(a) for a in assets], set()
    while todo:
        for child in graph.get(todo.pop()).child_keys:
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return {".".join(k.path) for k in seen if k.path[0] in ("staging", "marts", "exports")}


@pytest.fixture
def lake(sample_run, tmp_path):
    """A copy of the session's sample run whose raw files are the same inodes (an unchanged lake)."""
    settings = copy_run(sample_run[0], tmp_path, link_raw=True)
    # A copy breaks the hard links between snapshot files and their objects, and an object no
    # snapshot links is deleted (then every dataset is hashed again: right, but not what is tested).
    snaps = settings.export_dir / SNAPSHOTS
    for manifest in snaps.glob("*/manifest.json"):
        for path, entry in json.loads(manifest.read_text()).get("datasets", {}).items():
            for f in entry["files"]:
                obj = snaps / ".objects" / f"{f['object']}.parquet"
                obj.unlink(missing_ok=True)
                os.link(manifest.parent / path / f["name"], obj)
    return settings


def test_a_no_op_run_rebuilds_validates_and_hashes_nothing(lake):
    (first,) = query(lake, "select run_id from ingest.runs where status = 'success' order by started_at desc limit 1")[0]
    built, checked = built_by(lake), validated_by(lake)
    assert set(built.values()) == {first} and len(built) > 30  # every built table, by the first run
    assert set(checked.values()) == {first}

    result = run_pipeline(lake)
    assert result.success, result.failures
    assert built_by(lake) == built and validated_by(lake) == checked  # nothing rebuilt or validated again
    assert snapshot_status(lake, result.run_id) == "unchanged"
    # the reused results are this run's too: the publish gate, the manifest and status read them
    per_table = "select table_name, expectation, success from ingest.validations where run_id = ? order by all"
    assert query(lake, per_table, [result.run_id]) == query(lake, per_table, [first])
    assert set(hashed_by_a_publish(lake)) <= unversioned(lake)


def test_a_file_whose_status_alone_changed_is_recorded_once_and_nothing_is_rebuilt_or_published(
        sample_run_copy, monkeypatch):
    """Copied raw files are new inodes (read before their ctime settled: none recorded); then
    the ctime settles; then a chmod moves it. A state entry in bronze for each new inode, one
    for each ctime recorded the first time (so later runs need not read the file), none for the
    chmod (a recorded ctime that moved is not recorded again: it could move every run). None
    of these changes a row: nothing is rebuilt, validated again or published
    (``ingest.bronze_applied`` is bookkeeping), and raw keeps its version (a new one would send
    every step downstream to look again)."""
    from dagster_project.engine import readers
    from dagster_project.engine.bronze import Bronze

    settings = sample_run_copy
    built, checked = built_by(settings), validated_by(settings)
    raw_versions = query(settings, "select table_name, version from lineage.table_versions "
                                   "where table_name like 'raw.%' order by all")
    entries = len(Bronze(settings, "interactions").entries())
    files = None
    for n, (settled, chmod, recorded) in enumerate([(1e9, False, "every file"), (0.0, False, "every file"),
                                                    (0.0, False, "none"), (0.0, True, "none")]):
        monkeypatch.setattr(readers, "CTIME_SETTLED_SECONDS", settled)
        if chmod:
            os.chmod(settings.raw_dir / sorted(files)[0], 0o600)
        result = run_pipeline(settings)
        assert result.success, result.failures
        added = Bronze(settings, "interactions").entries()[entries:]
        entries += len(added)
        assert {e.kind for e in added} == ({"state"} if recorded == "every file" else set()), n
        if recorded == "every file":
            assert files is None or {e.path for e in added} == files, n
            files = {e.path for e in added}
            assert files and all((e.state["ctime_ns"] is None) == (settled > 1) for e in added), n
        assert built_by(settings) == built and validated_by(settings) == checked, n
        assert snapshot_status(settings, result.run_id) == "unchanged", n
        assert query(settings, "select table_name, version from lineage.table_versions "
                               "where table_name like 'raw.%' order by all") == raw_versions, n


def test_a_file_gone_or_unreadable_changes_no_row_so_nothing_is_rebuilt_or_published(sample_run_copy, monkeypatch):
    """A file that vanished, or that cannot be opened (a mode, a lock), is an event in the run log,
    its rows kept: no row changes. Its event bumped raw's version, so every table after the source
    was built again and the run published a snapshot; a file that stays unreadable did that every
    run. Its events are the run log's (``ingest.file_events``): published with the next change."""
    settings = sample_run_copy
    built, checked = built_by(settings), validated_by(settings)
    raw_versions = query(settings, "select table_name, version from lineage.table_versions "
                                   "where table_name like 'raw.%' order by all")
    gone = sorted((settings.raw_dir / "interactions").glob("*.jsonl"))[0]
    gone.rename(settings.raw_dir / "elsewhere.jsonl")
    store = settings.raw_dir / "eventlog" / "patina.db"  # a rollback journal: a writer locks readers out
    monkeypatch.setattr(sqlite_reader, "LOCK_WAIT_SECONDS", 0.3)
    holder = subprocess.Popen([sys.executable, "-c", f"import sqlite3, sys; c = sqlite3.connect({str(store)!r}, "
                               "isolation_level=None); c.execute('begin exclusive'); print('locked', flush=True); "
                               "sys.stdin.readline()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    runs = []
    try:
        assert holder.stdout.readline().strip() == "locked"
        os.utime(store, (time.time() + 5, time.time() + 5))  # the lake looks into it every run
        for _ in range(2):
            result = run_pipeline(settings)
            assert result.success, result.failures
            runs.append(result.run_id)
            assert built_by(settings) == built and validated_by(settings) == checked
            assert snapshot_status(settings, result.run_id) == "unchanged"
            assert query(settings, "select table_name, version from lineage.table_versions "
                                   "where table_name like 'raw.%' order by all") == raw_versions
    finally:
        holder.communicate("\n", timeout=30)
    assert query(settings, "select run_id, event from ingest.file_events order by occurred_at, event") == [
        (runs[0], "locked"), (runs[0], "missing"), (runs[1], "locked")]


def test_appending_to_one_source_rebuilds_exactly_the_tables_downstream_of_it(lake):
    line = json.loads((lake.raw_dir / "signals").glob("*.jsonl").__next__().read_text().splitlines()[0])
    write_lines(lake.raw_dir / "signals" / "more.jsonl", [dumps({**line, "id": "00000000-0000-4000-8000-5161a1000001"})])
    result = run_pipeline(lake)
    assert result.success, result.failures
    expected = downstream("ingest/signals")
    assert expected and "marts.interaction_labels" not in expected
    assert rebuilt(lake, result.run_id) == expected
    assert {t for t, r in validated_by(lake).items() if r == result.run_id} <= expected
    assert snapshot_status(lake, result.run_id) == "published"
    manifest = read_manifest(lake.export_dir)
    assert manifest["datasets"]["analytics/signal_opinions"]["rows"] >= 1
    assert set(hashed_by_a_publish(lake)) <= unversioned(lake)


def test_a_setting_a_table_reads_rebuilds_it_and_what_reads_it(lake):
    fraction = run_pipeline(replace(lake, eval_fraction=0.3))
    assert fraction.success, fraction.failures
    assert rebuilt(lake, fraction.run_id) == {"exports.sft", "exports.kto", "exports.dpo", "exports.weighted"}
    assert snapshot_status(lake, fraction.run_id) == "published"

    later = run_pipeline(replace(lake, eval_fraction=0.3, as_of=lake.as_of + timedelta(days=1)))
    assert later.success, later.failures
    # the run date reaches only signal decay and rating retention: staging (whose "not in the
    # future" reads the clock, not the run date) and the training sets stay
    from dagster_project.defs.marts import RATINGS_AND_OUTCOMES, SIGNALS
    assert rebuilt(lake, later.run_id) == {*RATINGS_AND_OUTCOMES.tables, *SIGNALS.tables}


def test_a_full_refresh_of_identical_data_publishes_nothing_and_the_next_run_reads_nothing(lake):
    before = dict(query(lake, "select table_name, version from lineage.table_versions where input_key is not null"))
    result = run_pipeline(lake, full_refresh=True)
    assert result.success, result.failures
    # raw was replayed (a new epoch): staging and everything built on it is built again; a table
    # rebuilt whole to the content it had keeps its version, so what reads only such tables is
    # not rebuilt at all (the retrieval marts: the eventlog's staging came out the same)
    after = dict(query(lake, "select table_name, version from lineage.table_versions where input_key is not null"))
    kept = set(built_by(lake)) - rebuilt(lake, result.run_id)
    staged = {t for t in after if t.startswith("staging.")}
    assert "staging.interactions" in staged and staged <= rebuilt(lake, result.run_id)
    assert "marts.retrieval_summary" in kept and all(after[t] == before[t] for t in kept)
    assert snapshot_status(lake, result.run_id) == "unchanged"
    # the manifest now names the rebuilt versions: the next no-op reads no table
    assert set(hashed_by_a_publish(lake)) <= unversioned(lake)
    again = run_pipeline(lake)
    assert again.success and rebuilt(lake, again.run_id) == set()


def test_a_reused_table_keeps_the_exclusions_of_the_run_that_built_it(sample_run_copy):
    lake = sample_run_copy
    from dagster_project import versions

    con = duckdb.connect(str(lake.state_db))
    (victim,) = con.execute("select interaction_id from exports.sft order by 1 limit 1").fetchone()
    con.execute("update raw.interactions set input_text = '' where id = ?", [victim])
    versions.bump(con, "raw.interactions", None, reset=True)  # rewritten in place: not an append
    con.close()
    dropped = run_pipeline(lake)
    assert dropped.success, dropped.failures
    assert read_manifest(lake.export_dir)["datasets"]["training/sft"]["excluded_rows"] == 1
    # a new signal: a new snapshot, while exports.sft is reused from the run that dropped the row
    line = json.loads((lake.raw_dir / "signals").glob("*.jsonl").__next__().read_text().splitlines()[0])
    write_lines(lake.raw_dir / "signals" / "more.jsonl", [dumps({**line, "id": "00000000-0000-4000-8000-5161a1000002"})])
    later = run_pipeline(lake)
    assert later.success, later.failures
    assert built_by(lake)["exports.sft"] == dropped.run_id
    manifest = read_manifest(lake.export_dir)
    assert manifest["run_id"] == later.run_id
    assert manifest["datasets"]["training/sft"]["excluded_rows"] == 1


def test_an_incremental_build_still_counts_the_rows_excluded_before(sample_run_copy):
    """exports.sft is rebuilt incrementally for a new interaction version: the row a drop
    expectation excluded in an earlier run stays out, and the ledger of the run that built the
    table (what the manifest counts) still names it."""
    lake = sample_run_copy
    con = duckdb.connect(str(lake.state_db))
    victim, other = [r for r in con.execute(
        "select interaction_id, path, line_number from exports.sft order by 1 limit 2").fetchall()]
    con.close()

    def again(row, **changes):  # the collector writes the interaction again, later, in a new file
        record = json.loads((lake.raw_dir / row[1]).read_text(encoding="utf-8").splitlines()[row[2] - 1])
        return dumps({**record, **changes})

    write_lines(lake.raw_dir / "interactions" / "interactions_2026-04-02_zz000001.jsonl", [again(victim, input_text="")])
    dropped = run_pipeline(lake)
    assert dropped.success, dropped.failures
    assert read_manifest(lake.export_dir)["datasets"]["training/sft"]["excluded_rows"] == 1

    write_lines(lake.raw_dir / "interactions" / "interactions_2026-04-02_zz000002.jsonl", [again(other)])
    later = run_pipeline(lake)
    assert later.success, later.failures
    assert built_by(lake)["exports.sft"] == later.run_id  # rebuilt (incrementally) by the later run
    assert query(lake, "select count(*) from exports.sft where interaction_id = ?", [victim[0]]) == [(0,)]
    assert query(lake, "select row_key like ? from ingest.excluded where run_id = ? and table_name = 'exports.sft'",
                 [f"%{victim[0]}%", later.run_id]) == [(True,)]
    assert read_manifest(lake.export_dir)["datasets"]["training/sft"]["excluded_rows"] == 1


@pytest.mark.parametrize("full_refresh", [False, True])
def test_an_exclusion_that_no_longer_holds_is_not_carried(sample_run_copy, full_refresh):
    """The excluded interaction is relabelled neutral: no longer a training row at all. The next
    build, incremental or whole, recomputed it: its earlier exclusion was carried forward for good
    (the ledger, the manifest and ``flywheel status`` counted a row that no longer exists)."""
    lake = sample_run_copy
    con = duckdb.connect(str(lake.state_db))
    (victim,) = con.execute("select interaction_id, path, line_number from exports.sft order by 1 limit 1").fetchall()
    con.close()
    record = json.loads((lake.raw_dir / victim[1]).read_text(encoding="utf-8").splitlines()[victim[2] - 1])
    write_lines(lake.raw_dir / "interactions" / "interactions_2026-04-02_zz000001.jsonl",
                [dumps({**record, "input_text": ""})])
    dropped = run_pipeline(lake)
    assert dropped.success, dropped.failures
    excluded = "select table_name from ingest.excluded where run_id = ? and row_key like ? order by 1"
    assert query(lake, excluded, [dropped.run_id, f"%{victim[0]}%"]) == [("exports.kto",), ("exports.sft",)]

    write_lines(lake.raw_dir / "feedback" / "2026-04-02_feedback.jsonl", [dumps({
        "record_id": victim[0], "feedback": "neutral", "was_edited": False, "timestamp": "2026-04-02T23:00:00",
        "source": "manual"})], mode="ab")
    relabelled = run_pipeline(lake, full_refresh=full_refresh)
    assert relabelled.success, relabelled.failures
    assert built_by(lake)["exports.sft"] == relabelled.run_id
    assert query(lake, "select label from marts.interaction_labels where interaction_id = ?", [victim[0]]) == [
        ("neutral",)]
    assert query(lake, excluded, [relabelled.run_id, f"%{victim[0]}%"]) == []
    datasets = read_manifest(lake.export_dir)["datasets"]
    assert datasets["training/sft"]["excluded_rows"] == datasets["training/kto"]["excluded_rows"] == 0


# ---------------------------------------------------------------------------------------------
# incremental == one full refresh of the final lake (hypothesis)
# ---------------------------------------------------------------------------------------------

SOURCES = ("interactions", "feedback", "signals")


def append(raw, source: str, n: int, serial: int) -> None:
    """``n`` new records of ``source`` in a file of its own (as the producers do: one file per day)."""
    if source == "interactions":
        lines = [dumps(interaction(serial * 10 + k, input_text=f"question {serial}-{k}",
                                   output_text=f"answer {serial}-{k}", user_feedback=("positive", "negative")[k % 2]))
                 for k in range(n)]
        write_lines(raw / "interactions" / f"interactions_2026-02-26_{serial:08d}.jsonl", lines)
    elif source == "blank_prompts":  # accepted and liked, but no prompt: the exports' drop checks exclude them
        lines = [dumps(interaction(serial * 10 + k, input_text="", output_text=f"answer {serial}-{k}",
                                   user_feedback="positive")) for k in range(n)]
        write_lines(raw / "interactions" / f"interactions_2026-02-27_{serial:08d}.jsonl", lines)
    elif source == "feedback":
        lines = [dumps({"record_id": interaction(k)["id"], "feedback": ("positive", "negative")[(serial + k) % 2],
                        "was_edited": False, "timestamp": f"2026-02-26T15:{serial % 60:02d}:{k % 60:02d}",
                        "source": "manual"}) for k in range(n)]
        write_lines(raw / "feedback" / f"2026-02-{10 + serial % 18:02d}_feedback.jsonl", lines, mode="ab")
    else:
        lines = [dumps({"id": f"00000000-0000-4000-9000-{serial * 10 + k:012d}", "timestamp": 1765369657929 + k,
                        "signal": ("good", "bad")[k % 2], "strength": 1.0, "context": f"signal {serial}",
                        "session_id": None, "source": "manual", "created_at": "2026-02-20T13:27:37.929481",
                        "target_type": "chunk", "target_id": f"t{k % 3}", "aspect": "classification",
                        "original_class": None, "suggested_class": None}) for k in range(n)]
        write_lines(raw / "signals" / "buffer.jsonl", lines, mode="ab")


def published_tables(settings) -> dict[str, list]:
    """Every staged, mart and export table, without the columns that say when this lake saw a row."""
    con = duckdb.connect(str(settings.state_db), read_only=True)
    try:
        out = {}
        for schema, table in con.execute("select schema_name, table_name from duckdb_tables() "
                                         "where schema_name in ('staging', 'marts', 'exports') order by all").fetchall():
            columns = [c for (c,) in con.execute("select column_name from duckdb_columns() where schema_name = ? "
                                                 "and table_name = ? order by column_index", [schema, table]).fetchall()
                       if c not in ("observed_seq", "ingest_run_id")]
            out[f"{schema}.{table}"] = sorted(map(repr, con.execute(
                f'select {", ".join(chr(34) + c + chr(34) for c in columns)} from "{schema}"."{table}"').fetchall()))
        return out
    finally:
        con.close()


def verdicts(settings) -> dict[str, list]:
    """Per table: the results its latest validation recorded and the rows the ledger of the run
    that built it excludes (the time "not in the future" compared with left out)."""
    con = duckdb.connect(str(settings.state_db), read_only=True)
    try:
        out: dict[str, list] = {}
        for table, expectation, status, unexpected, rows, observed in con.execute(
                "select x.table_name, x.expectation, x.status, x.unexpected_count, x.rows_validated, x.observed "
                "from lineage.validated v join ingest.validations x on x.run_id = v.run_id "
                "and x.table_name = v.table_name order by all").fetchall():
            observed = json.loads(observed) if observed else None
            if isinstance(observed, dict):
                observed.pop("latest_allowed", None)
            out.setdefault(table, []).append((expectation, status, unexpected, rows, observed))
        for table, row_key, expectation, detail, path, line in con.execute(
                "select e.table_name, e.row_key, e.expectation, e.detail, e.path, e.line_number "
                "from ingest.excluded e join lineage.table_versions t on t.table_name = e.table_name "
                "and t.run_id = e.run_id order by all").fetchall():
            out.setdefault(f"excluded {table}", []).append((row_key, expectation, detail, path, line))
        return out
    finally:
        con.close()


def shared_hashes(settings) -> dict[str, str]:
    manifest = read_manifest(settings.export_dir)
    return {p: d["content_hash"] for p, d in manifest["datasets"].items()
            if d["kind"] != "internal" and d["table"] not in RUN_LOG}


@pytest.mark.slow
# A pipeline run costs seconds: few examples, one of them every source, and no shrinking.
@hsettings(max_examples=2, deadline=None, phases=[Phase.explicit, Phase.generate],
           suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.lists(st.tuples(st.sampled_from(SOURCES), st.integers(1, 4)), min_size=1, max_size=3),
                      min_size=1, max_size=2))
@example(steps=[[("signals", 2), ("feedback", 1)], [("interactions", 3), ("feedback", 2)]])
@example(steps=[[("feedback", 1), ("signals", 2)], [("signals", 1)]])  # sft empties: once found by hypothesis
# a row the drop checks exclude (one: two of a few rows would be systemic, failing the run)
@example(steps=[[("blank_prompts", 1), ("interactions", 2)], [("interactions", 3), ("feedback", 3)]])
def test_runs_between_appends_leave_what_one_full_refresh_of_the_final_lake_does(tmp_path_factory, steps):
    from dagster_project.settings import Settings

    base = tmp_path_factory.mktemp("skip")

    def fresh(name):
        root = base / name
        (root / "raw").mkdir(parents=True)
        return Settings.from_env({"FLYWHEEL_RAW_DIR": str(root / "raw"),
                                  "FLYWHEEL_WAREHOUSE": str(root / "warehouse.duckdb"),
                                  "FLYWHEEL_EXPORT_DIR": str(root / "exports"), "FLYWHEEL_AS_OF": "2026-03-01",
                                  "FLYWHEEL_PSEUDONYM_KEY": KEY, "FLYWHEEL_SESSION_RETENTION_DAYS": "3650",
                                  # a sidecar may flip the only positive to negative, emptying sft:
                                  # the empty-publish guard would stop that run, which is not what
                                  # this property is about
                                  "FLYWHEEL_ALLOW_EMPTY": "1"})

    inc = fresh("inc")
    append(inc.raw_dir, "interactions", 2, 0)
    serial = 1
    for batch in [[], *steps]:
        for source, n in batch:
            append(inc.raw_dir, source, n, serial)
            serial += 1
        result = run_pipeline(inc)
        assert result.success, result.failures

    once = fresh("once")
    import shutil

    shutil.rmtree(once.raw_dir)
    shutil.copytree(inc.raw_dir, once.raw_dir)
    assert run_pipeline(once).success
    assert published_tables(inc) == published_tables(once)
    assert shared_hashes(inc) == shared_hashes(once)
    # validated and dropped on what each build changed, the verdicts are the full refresh's
    assert verdicts(inc) == verdicts(once)


# ---------------------------------------------------------------------------------------------
# the lineage rules themselves (no pipeline)
# ---------------------------------------------------------------------------------------------

def test_a_build_that_fails_half_way_or_a_dropped_table_is_never_reused(tmp_path):
    from dagster_project import versions

    con = duckdb.connect(str(tmp_path / "state.duckdb"))
    con.execute("create schema staging; create table staging.t as select 1 as x")
    versions.bump(con, "raw.x", "run-0")
    key = versions.input_key(con, ["raw.x"], {"eval_fraction": 0.05})
    versions.record_build(con, "staging.t", key, "run-1")
    assert versions.reusable(con, ["staging.t"], key)
    assert not versions.reusable(con, ["staging.t"], versions.input_key(con, ["raw.x"], {"eval_fraction": 0.1}))
    validated = versions.validation_key_of(versions.get(con, "staging.t"))

    versions.invalidate(con, "staging.t")  # what a build does first
    assert not versions.reusable(con, ["staging.t"], key)
    assert versions.validation_key_of(versions.get(con, "staging.t")) != validated
    versions.record_build(con, "staging.t", key, "run-2")
    assert versions.reusable(con, ["staging.t"], key)
    assert versions.validation_key_of(versions.get(con, "staging.t")) == validated  # same inputs, same rows

    versions.bump(con, "raw.x", "run-3")  # new raw rows: a new key
    assert versions.input_key(con, ["raw.x"], {"eval_fraction": 0.05}) != key
    con.execute("drop table staging.t")
    assert not versions.reusable(con, ["staging.t"], key)


def test_a_reused_validation_is_recorded_for_the_run_that_reuses_it_failures_included(tmp_path):
    from dagster_project import versions
    from dagster_project.publishing.snapshot import _gate_validations, validation_summary
    from dagster_project.validation import ensure_validations_table

    con = duckdb.connect(str(tmp_path / "state.duckdb"))
    ensure_validations_table(con)
    con.execute("insert into ingest.validations (run_id, table_name, expectation, blocking, success, status) values "
                "('run-1', 'marts.m', 'id is unique', true, false, 'failed'), "
                "('run-1', 'marts.m', 'id not null', true, true, 'passed')")
    versions.record_validation(con, "marts.m", "k1", "run-1", False, {
        "description": "id is unique failed", "failed": "- id is unique", "validated_on": "2026-03-01"})
    assert versions.reuse_validations(con, {"marts.m": "k2"}, "run-2", date(2026, 3, 1)) == {}  # another version
    assert versions.reuse_validations(con, {"marts.m": None}, "run-2", date(2026, 3, 1)) == {}  # no version
    # a result with unexpected rows may change as the clock moves ("not in the future"): not reused next day
    assert versions.reuse_validations(con, {"marts.m": "k1"}, "run-2", date(2026, 3, 2)) == {}
    passed, result, by = versions.reuse_validations(con, {"marts.m": "k1"}, "run-2", date(2026, 3, 1))["marts.m"]
    assert (passed, result["description"], by) == (False, "id is unique failed", "run-1")
    assert con.execute("select expectation, success from ingest.validations where run_id = 'run-2' order by 1"
                       ).fetchall() == [("id is unique", False), ("id not null", True)]
    assert validation_summary(con, "run-2")["status"] == "failed"
    with pytest.raises(Exception, match="marts.m"):
        _gate_validations(con, "run-2")  # a reused failure still blocks the publish


def test_the_run_log_records_when_a_row_was_written_and_an_older_table_is_stamped_once(tmp_path):
    """A reused result is recorded again on the day the run records it (the day the publisher cuts
    the run log's files by, so earlier days' files never change) and keeps when its check ran; the
    rows of a table from before ``recorded_at`` are stamped with that time."""
    from datetime import datetime, timedelta, timezone

    from dagster_project import versions
    from dagster_project.validation import ensure_excluded_table, ensure_validations_table

    con = duckdb.connect(str(tmp_path / "state.duckdb"))
    con.execute("set TimeZone = 'UTC'")
    con.execute("create schema ingest")
    con.execute("create table ingest.validations (run_id varchar, table_name varchar, expectation varchar, "
                "validated_at timestamptz)")  # as an older version left it
    con.execute("create table ingest.excluded (run_id varchar, table_name varchar, row_key varchar, "
                "excluded_at timestamptz)")
    con.execute("insert into ingest.validations values ('run-1', 'marts.m', 'id not null', '2026-01-05 10:00:00+00')")
    con.execute("insert into ingest.excluded values ('run-1', 'marts.m', 'k', '2026-01-06 11:00:00+00')")
    ensure_validations_table(con)
    ensure_excluded_table(con)
    assert con.execute("select count(*) from ingest.validations where recorded_at = validated_at").fetchone() == (1,)
    assert con.execute("select count(*) from ingest.excluded where recorded_at = excluded_at").fetchone() == (1,)
    versions.record_validation(con, "marts.m", "k1", "run-1", True, {"failed": "none", "validated_on": "2026-01-05"})
    before = datetime.now(timezone.utc) - timedelta(seconds=5)
    assert versions.reuse_validations(con, {"marts.m": "k1"}, "run-2", date(2026, 3, 1)).keys() == {"marts.m"}
    validated, recorded = con.execute(
        "select validated_at, recorded_at from ingest.validations where run_id = 'run-2'").fetchone()
    assert validated == datetime(2026, 1, 5, 10, tzinfo=timezone.utc) and recorded >= before


def test_reusing_the_validations_of_many_tables_at_once_decides_each_as_alone(tmp_path):
    """A no-op reuses ~40 tables' results in one step: each table is still decided on its own
    (its key, the run that validated it, its result's day, its rows in the run log), and only the
    reused tables' rows, of the run that validated each, are copied."""
    from dagster_project import versions
    from dagster_project.validation import ensure_validations_table

    con = duckdb.connect(str(tmp_path / "state.duckdb"))
    ensure_validations_table(con)
    validated_by = {"marts.a": "run-1", "marts.b": "run-1", "marts.c": "run-1", "marts.d": "run-0",
                    "marts.g": "run-0", "marts.h": "run-0"}
    for table, run in validated_by.items():
        for other in ("run-0", "run-1"):  # every table has rows of both runs: only its own are copied
            con.execute("insert into ingest.validations (run_id, table_name, expectation, blocking, success, status) "
                        "values (?, ?, ?, true, true, 'passed')", [other, table, f"{table} by {other}"])
        failed = table in ("marts.g", "marts.h")
        versions.record_validation(con, table, f"key-{table}", run, not failed, {
            "rows_validated": 3, "failed": "- x" if failed else "none",
            "validated_on": "2026-03-01" if table == "marts.g" else "2026-02-28"})
    con.execute("delete from ingest.validations where table_name = 'marts.c'")  # a scrubbed run log
    keys = {table: f"key-{table}" for table in validated_by}
    keys |= {"marts.b": "another version", "marts.e": "never validated", "marts.f": None}
    reused = versions.reuse_validations(con, keys, "run-2", date(2026, 3, 1))
    assert {t: (passed, by) for t, (passed, _, by) in reused.items()} == {
        "marts.a": (True, "run-1"), "marts.d": (True, "run-0"),
        "marts.g": (False, "run-0")}  # a failure is reused on the day it was found only (not marts.h)
    assert con.execute("select table_name, expectation from ingest.validations where run_id = 'run-2' order by all"
                       ).fetchall() == [("marts.a", "marts.a by run-1"), ("marts.d", "marts.d by run-0"),
                                        ("marts.g", "marts.g by run-0")]
    assert versions.reuse_validations(con, keys, "run-1", date(2026, 3, 1)).keys() == {"marts.d", "marts.g"}


def test_reused_tables_report_their_own_rows_and_exclusions(tmp_path):
    from dagster_project import versions
    from dagster_project.tables import reused_metadata
    from dagster_project.validation import ensure_excluded_table

    con = duckdb.connect(str(tmp_path / "state.duckdb"))
    con.execute("create schema marts; create table marts.a as select range as x from range(3); "
                "create table marts.b as select range as x from range(5)")
    ensure_excluded_table(con)
    versions.record_build(con, "marts.a", "ka", "run-1")
    versions.record_build(con, "marts.b", "kb", "run-2")
    con.execute("insert into ingest.excluded (run_id, table_name, row_key, expectation) values "
                "('run-1', 'marts.a', '7', 'x is positive'), ('run-1', 'marts.a', '8', 'x is positive'), "
                "('run-1', 'marts.b', '9', 'x is positive'), ('run-2', 'marts.b', '6', 'x is small')")
    meta = reused_metadata(con, ["marts.b", "marts.a"], "run-3")
    assert {t: (m["dagster/row_count"], m["built_by_run"], m["excluded_rows"], m["excluded"].value)
            for t, m in meta.items()} == {
        "marts.a": (3, "run-1", 2, {"excluded_by_expectation": {"x is positive": 2}}),
        "marts.b": (5, "run-2", 1, {"excluded_by_expectation": {"x is small": 1}})}  # run-1's row is not its version's


def test_the_code_key_covers_what_builds_tables_and_not_the_schedule_or_sensors():
    from dagster_project.versions import code_paths

    names = {p.name for p in code_paths()}
    # an edit to the job's schedule or sensors must not make every table be validated again
    assert "automation.py" not in names
    assert {"ingest.py", "marts.py", "publish.py", "transforms", "sql", "tables.py", "validation.py",
            "expectations.py", "sources"} <= names
