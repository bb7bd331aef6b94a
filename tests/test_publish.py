"""One snapshot per run: atomic, content-addressed, private. Real DuckDB, real files, real processes."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from conftest import PROJECT, copy_run
from dagster_project.engine import ensure_schema
from dagster_project import versions
from dagster_project.pipeline import run_pipeline
from dagster_project.publishing import (CURRENT, SNAPSHOTS, PublishError, current_version, list_snapshots,
                                        publish_snapshot, read_manifest, status, verify_snapshot)
from dagster_project.publishing.snapshot import APPEND_ONLY, FAULT_ENV, ID_COLUMN, RUN_LOG
from dagster_project.state import record_run
from transforms.pseudonyms import session_pseudonym

KEY = "test-key"


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

def publish(state: Path, root: Path, run_id: str, **kw):
    con = duckdb.connect(str(state))
    con.execute("set TimeZone = 'UTC'")
    try:
        return publish_snapshot(con, export_dir=root / "exports", warehouse=root / "warehouse.duckdb", run_id=run_id,
                                pseudonym_key=KEY.encode(), **kw)
    finally:
        con.close()


def data_hashes(manifest: dict) -> dict[str, str]:
    """Content hash of every dataset except the run log (which records the run itself)."""
    return {p: d["content_hash"] for p, d in manifest["datasets"].items() if d["table"] not in RUN_LOG}


def toy_state(path: Path, months: int = 12, per_month: int = 100) -> Path:
    """A state database shaped like the real one: ingest.*, staging.interactions, exports.sft, a mart."""
    con = duckdb.connect(str(path))
    con.execute("set TimeZone = 'UTC'")
    ensure_schema(con)
    con.execute("create schema if not exists staging; create schema if not exists exports; "
                "create schema if not exists marts")
    con.execute(f"""create table staging.interactions as
        select format('i{{:06d}}', i) as id, 'sess-raw-' || (i % 7) as session_id,
               timestamptz '2025-01-15 12:00:00+00' + to_months((i % {months})::int) as "timestamp"
        from range({months * per_month}) t(i)""")
    con.execute("""create table exports.sft as
        select [{'role': 'user', 'content': 'question ' || id}]::struct(role varchar, content varchar)[] as prompt,
               [{'role': 'assistant', 'content': 'answer ' || id || repeat(' lorem ipsum', 20)}]
                   ::struct(role varchar, content varchar)[] as completion,
               case when hash(id) % 20 = 0 then 'eval' else 'train' end as split, id as interaction_id,
               "timestamp" as interaction_timestamp
        from staging.interactions""")
    con.execute("create table marts.sessions as select session_id, count(*) as n from staging.interactions "
                "group by 1")
    con.close()
    return path


def append_month(path: Path, rows: int, start: int = 10_000_000) -> None:
    con = duckdb.connect(str(path))
    con.execute("set TimeZone = 'UTC'")
    con.execute(f"""insert into exports.sft
        select [{{'role': 'user', 'content': 'new ' || i}}]::struct(role varchar, content varchar)[],
               [{{'role': 'assistant', 'content': 'new answer ' || i}}]::struct(role varchar, content varchar)[],
               'train', format('n{{:09d}}', i), timestamptz '2026-01-20 00:00:00+00'
        from range({start}, {start + rows}) t(i)""")
    con.close()


def shared_files(root: Path, version: str) -> dict[str, os.stat_result]:
    snap = root / "exports" / SNAPSHOTS / version
    return {str(p.relative_to(snap)): p.stat() for p in snap.glob("*/*/*.parquet")
            if not p.relative_to(snap).parts[0] == "internal"}


# ---------------------------------------------------------------------------------------------
# the whole pipeline on the sample lake
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sample(sample_run, tmp_path_factory):
    """This module's copy of the session's sample run (``conftest.sample_run``, same key):
    (settings, the run's id). One test runs again on it; the others only read it."""
    settings = copy_run(sample_run[0], tmp_path_factory.mktemp("sample"), link_raw=True)
    assert settings.pseudonym_key == KEY
    con = duckdb.connect(str(settings.state_db), read_only=True)
    (run_id,) = con.execute("select run_id from ingest.runs where status = 'success' "
                            "order by started_at desc limit 1").fetchone()
    con.close()
    return settings, run_id


def copy_state(sample_settings, tmp_path: Path) -> Path:
    state = tmp_path / "state.duckdb"
    shutil.copyfile(sample_settings.state_db, state)
    return state


def test_a_run_publishes_one_complete_snapshot_with_the_fixed_paths(sample, tmp_path, monkeypatch):
    settings, run_id = sample
    export = settings.export_dir
    manifest = verify_snapshot(export)  # every file matches its hash, every warehouse view reads
    assert manifest["run_id"] == run_id and manifest["validation"]["status"] == "passed"
    assert (export / CURRENT).is_symlink() and os.readlink(export / CURRENT) == f"{SNAPSHOTS}/{manifest['version']}"
    assert os.readlink(export / "training") == "current/training" and os.readlink(export / "analytics") == "current/analytics"
    assert os.path.realpath(settings.warehouse) == str((export / SNAPSHOTS / manifest["version"] / "warehouse.duckdb"))
    shared = {p for p, d in manifest["datasets"].items() if d["kind"] != "internal"}
    assert {f"training/{n}" for n in ("sft", "kto", "dpo", "weighted")} <= shared
    marts = {r[0] for r in duckdb.connect(str(settings.state_db), read_only=True).execute(
        "select table_name from duckdb_tables() where schema_name = 'marts'").fetchall()}
    assert {f"analytics/{m}" for m in marts} <= shared
    sft = manifest["datasets"]["training/sft"]
    assert sft["excluded_rows"] == 0 and sft["validation"]["status"] == "passed"
    assert sorted(p.name for p in (export / "training" / "sft").iterdir()) == sorted(f["name"] for f in sft["files"])
    assert {f["name"].split("-")[0] for f in sft["files"]} == {"train", "test"}

    # the warehouse: views over this snapshot for ingest, staging, marts, exports; raw stays private
    con = duckdb.connect(str(settings.warehouse), read_only=True)
    schemas = {r[0] for r in con.execute("select distinct schema_name from duckdb_views() where not internal").fetchall()}
    assert schemas == {"ingest", "staging", "marts", "exports"}
    assert con.execute("select count(*) from exports.sft").fetchone()[0] == sft["rows"]
    assert con.execute("select snapshot_status from ingest.runs where run_id = ?", [run_id]).fetchone() == (
        "published",)
    # every ingest table the README lists is there from the first run
    # (ingest.erasures was created by the first `flywheel forget`: a query failed until then)
    ingest = {r[0] for r in con.execute("select view_name from duckdb_views() where schema_name = 'ingest'").fetchall()}
    assert {"runs", "files", "file_events", "quarantine", "validations", "excluded", "erasures"} <= ingest
    # the sample's two ratings already past the 180-day window when first read: kept out, and said
    assert con.execute("select kind, source, bronze_rows, raw_rows, staging_rows from ingest.erasures").fetchall() \
        == [("retention", "session_ratings", 2, 0, 0)]
    con.close()

    # Hugging Face: the directory alone yields train and test (our eval split)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset(str(export / "training" / "sft"))
    assert set(loaded) == {"train", "test"}
    assert loaded["train"].num_rows + loaded["test"].num_rows == sft["rows"]
    assert set(loaded["test"]["split"]) == {"eval"} and set(loaded["train"]["split"]) == {"train"}
    conversation = datasets.List({"role": datasets.Value("string"), "content": datasets.Value("string")})
    assert loaded["train"].features["prompt"] == conversation
    kto = datasets.load_dataset(str(export / "training" / "kto"))
    assert kto["train"].features["label"] == datasets.Value("bool")


def test_no_published_dataset_holds_a_raw_session_or_user_id(sample):
    settings, _ = sample
    con = duckdb.connect()
    con.execute(f"attach {str(settings.state_db)!r} as state (read_only)")
    id_columns = con.execute("select table_name, column_name from duckdb_columns() where database_name = 'state' "
                             "and schema_name = 'staging' and data_type = 'VARCHAR' and regexp_matches(column_name, ?)",
                             [ID_COLUMN]).fetchall()
    assert ("scry_queries", "session_id") in id_columns and ("session_ratings", "user_id_or_null") in id_columns
    ids = {r[0] for t, c in id_columns for r in con.execute(f'select "{c}" from state.staging."{t}"').fetchall() if r[0]}
    assert len(ids) > 50
    manifest = read_manifest(settings.export_dir)
    checked = 0
    for path, entry in manifest["datasets"].items():
        if entry["kind"] == "internal":
            continue
        files = [str(settings.export_dir / path / f["name"]) for f in entry["files"]]
        for column in (c["name"] for c in entry["columns"] if c["type"] == "VARCHAR"):
            values = {r[0] for r in con.execute(f'select distinct "{column}" from read_parquet(?)', [files]).fetchall()}
            assert not values & ids, f"{path}.{column}"
            checked += 1
    assert checked > 40
    # Provenance: the collector names each file by its session (interactions_{date}_{sid8}.jsonl),
    # and the shared datasets published those 8 characters, a handle on the session as linkable as
    # its id. They are keyed now: the file keeps its directory and date, one name in every dataset.
    sid8 = {r[0] for r in con.execute(r"select distinct regexp_extract(path, '_([^_/]+)\.jsonl$', 1) "
                                      "from state.staging.interactions").fetchall()}
    assert len(sid8) > 20 and {s[:8] for s in ids} >= sid8  # each one the start of a session id
    published = {}
    for path in ("training/sft", "training/kto", "training/dpo", "analytics/interaction_labels"):
        entry = manifest["datasets"][path]
        files = [str(settings.export_dir / path / f["name"]) for f in entry["files"]]
        for column in (c["name"] for c in entry["columns"] if c["name"].endswith("path")):
            values = {r[0] for r in con.execute(f'select distinct "{column}" from read_parquet(?)', [files]).fetchall()}
            published[f"{path}.{column}"] = values
            named = {v for v in values if v and v.startswith("interactions/interactions_")}
            assert named and not any(s in v for v in named for s in sid8), f"{path}.{column}"
    # exactly: the part keyed as the README says, the same file named alike in every dataset
    sft = str(settings.export_dir / "training" / "sft" / "*.parquet")
    pairs = con.execute("select s.path, i.path from read_parquet(?) s join state.staging.interactions i "
                        "on i.id = s.interaction_id", [sft]).fetchall()
    assert len(pairs) > 100
    for shared, raw in pairs:
        head, _, part = raw.removesuffix(".jsonl").rpartition("_")
        keyed = hmac.new(KEY.encode(), f"file-name:{part}".encode(), hashlib.sha256).hexdigest()[:len(part)]
        assert shared == f"{head}_{keyed}.jsonl", (shared, raw)
    assert published["training/sft.path"] <= published["training/dpo.chosen_path"] | published["training/dpo.rejected_path"] \
        | published["training/kto.path"]
    # the retrieval marts carry the same keyed pseudonym as the training sets, under a new name
    raw = con.execute("select session_id, query_id from state.marts.retrieval_query_metrics "
                      "where session_id is not null order by query_id limit 1").fetchone()
    published = con.execute("select session_pseudonym from read_parquet(?) where query_id = ?", [
        str(settings.export_dir / "analytics" / "retrieval_query_metrics" / "*.parquet"), raw[1]]).fetchone()
    assert published == (session_pseudonym(KEY.encode(), raw[0]),)
    for mart in ("retrieval_judgements", "scry_usage", "signal_opinions"):
        columns = {c["name"] for c in manifest["datasets"][f"analytics/{mart}"]["columns"]}
        assert "session_pseudonym" in columns and "session_id" not in columns, mart


def test_a_moved_lake_or_a_snapshot_damaged_by_hand_is_published_again(tmp_path):
    """The warehouse's views read files by absolute path: in a lake moved elsewhere every view
    failed, and a run with nothing new said "nothing changed" (status then failed on a traceback).
    A Parquet file or the warehouse file removed from the current snapshot was never put back.
    Each is published again by the next run, and the run after it publishes nothing."""
    from conftest import dumps, interaction
    from dagster_project.publishing.snapshot import WAREHOUSE_FILE
    from dagster_project.settings import Settings

    old_root = tmp_path / "lake"
    (old_root / "raw" / "interactions").mkdir(parents=True)
    (old_root / "raw" / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl").write_text("".join(
        dumps(interaction(i, input_text=f"question {i}?", output_text=f"answer {i}.", user_feedback="positive"))
        + "\n" for i in range(1, 4)))
    copied = Settings.from_env({
        "FLYWHEEL_RAW_DIR": str(old_root / "raw"), "FLYWHEEL_WAREHOUSE": str(old_root / "warehouse.duckdb"),
        "FLYWHEEL_EXPORT_DIR": str(old_root / "exports"), "FLYWHEEL_AS_OF": "2026-04-03",
        "FLYWHEEL_PSEUDONYM_KEY": KEY})
    assert run_pipeline(copied).success
    new_root = old_root.rename(tmp_path / "moved")
    moved = replace(copied, raw_dir_confirm=new_root / "raw", **{
        name: new_root / getattr(copied, name).relative_to(old_root)
        for name in ("raw_dir", "warehouse", "export_dir")})
    before = read_manifest(moved.export_dir)

    def sft_rows() -> int:
        con = duckdb.connect(os.path.realpath(moved.warehouse), read_only=True)
        try:
            return con.execute("select count(*) from exports.sft").fetchone()[0]
        finally:
            con.close()

    with pytest.raises(duckdb.IOException):  # the views name the directory the lake left
        sft_rows()
    from typer.testing import CliRunner

    from dagster_project.cli import app

    env = {"FLYWHEEL_RAW_DIR": str(moved.raw_dir), "FLYWHEEL_WAREHOUSE": str(moved.warehouse),
           "FLYWHEEL_EXPORT_DIR": str(moved.export_dir)}
    status = CliRunner().invoke(app, ["status"], env=env, catch_exceptions=False)
    assert status.exit_code == 1 and status.output.strip().splitlines()[-1].startswith(
        f"error: {os.path.realpath(moved.warehouse)}: the published warehouse's views cannot read their files (IO "
        "Error: No files found"), status.output
    assert "Traceback" not in status.output and "the next `flywheel run` publishes it again" in status.output
    for damage in ("moved", "a file removed", "the warehouse removed", "a view replaced"):
        current = moved.export_dir / CURRENT
        if damage == "a file removed":
            next((current / "training" / "sft").glob("*.parquet")).unlink()
        elif damage == "the warehouse removed":
            (current / WAREHOUSE_FILE).unlink()
        elif damage == "a view replaced":  # an analyst's duckdb.connect(path): read-write
            size = (current / WAREHOUSE_FILE).stat().st_size
            analyst = duckdb.connect(str(current / WAREHOUSE_FILE))
            analyst.execute("create or replace view exports.sft as select 1 as x")
            analyst.execute("create or replace view marts.retrieval_summary as select 1 as x")
            analyst.close()
            assert (current / WAREHOUSE_FILE).stat().st_size == size and sft_rows() == 1
            report = CliRunner().invoke(app, ["eval", "--feedback"], env=env, catch_exceptions=False)
            assert report.exit_code == 1 and "Traceback" not in report.output, report.output
            assert report.output.strip().splitlines()[-1].startswith(
                f"error: {os.path.realpath(moved.warehouse)}: the published warehouse was changed after it was "
                "published (Binder Error: "), report.output
        result = run_pipeline(moved)
        assert result.success, result.failures
        manifest = verify_snapshot(moved.export_dir)
        assert manifest["run_id"] == result.run_id, damage  # published again
        assert data_hashes(manifest) == data_hashes(before) and sft_rows() == before["datasets"]["training/sft"]["rows"]
    again = run_pipeline(moved)
    assert again.success and read_manifest(moved.export_dir)["run_id"] != again.run_id  # whole: nothing published
    # an older version's manifest does not say where its views read: published once again (review)
    manifest_file = moved.export_dir / CURRENT / "manifest.json"
    older = json.loads(manifest_file.read_text())
    del older["warehouse"]["root"]
    manifest_file.write_text(json.dumps(older))
    upgraded = run_pipeline(moved)
    assert upgraded.success and read_manifest(moved.export_dir)["run_id"] == upgraded.run_id
    assert read_manifest(moved.export_dir)["warehouse"]["root"] == str((moved.export_dir / CURRENT).resolve())


def test_a_run_with_nothing_new_publishes_nothing_and_status_lists_the_snapshots(sample, monkeypatch):
    from typer.testing import CliRunner

    from dagster_project.cli import app

    settings, first_run_id = sample
    for name, value in {"FLYWHEEL_RAW_DIR": settings.raw_dir, "FLYWHEEL_WAREHOUSE": settings.warehouse,
                        "FLYWHEEL_EXPORT_DIR": settings.export_dir, "FLYWHEEL_PSEUDONYM_KEY": KEY,
                        "FLYWHEEL_AS_OF": settings.as_of}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    before = current_version(settings.export_dir)
    result = CliRunner().invoke(app, ["run", "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"Nothing changed since snapshot {before}: nothing published." in " ".join(result.output.split())
    assert current_version(settings.export_dir) == before
    assert [s["version"] for s in list_snapshots(settings.export_dir)] == [before]
    con = duckdb.connect(str(settings.state_db), read_only=True)
    again = con.execute("select run_id from ingest.runs where run_id <> ? order by started_at desc limit 1",
                        [first_run_id]).fetchone()[0]
    assert con.execute("select snapshot, snapshot_status from ingest.runs where run_id = ?",
                       [again]).fetchone() == (before, "unchanged")
    con.close()
    status_output = CliRunner().invoke(app, ["status"], catch_exceptions=False).output
    assert "Snapshots" in status_output and before in status_output
    # the snapshots' directory and each version whole, to copy (the path column was cut with "…")
    snapshots_line = f"Snapshots in {settings.export_dir.resolve() / SNAPSHOTS}/ (* current):"
    assert snapshots_line in status_output.splitlines() and f"{before} *" in status_output


@pytest.mark.slow
def test_a_bad_setting_or_a_failing_validation_publishes_nothing_and_the_next_run_is_the_reference(sample_run_copy,
                                                                                                 tmp_path):
    lake = sample_run_copy  # a successful run of the sample lake
    reference = read_manifest(lake.export_dir)
    new_line = (lake.raw_dir / "interactions").glob("interactions_*.jsonl").__next__().read_text().splitlines()[0]
    record = json.loads(new_line)
    record["id"] = "00000000-0000-4000-8000-00000000feed"
    (lake.raw_dir / "interactions" / "interactions_2026-04-01_feed0000.jsonl").write_text(json.dumps(record) + "\n")

    bad = run_pipeline(replace(lake, eval_fraction=2.0))
    assert not bad.success
    assert current_version(lake.export_dir) == reference["version"]
    verify_snapshot(lake.export_dir)

    # one bad row is dropped (next test); a systemic failure (> 5% of sft's rows) fails the run and
    # no dataset of the run is published
    con = duckdb.connect(str(lake.state_db))
    victims = [r[0] for r in con.execute("select interaction_id from exports.sft order by 1 "
                                         "limit (select count(*) // 10 + 2 from exports.sft)").fetchall()]
    con.execute("update raw.interactions set input_text = '' where id in (select unnest(?::varchar[]))", [victims])
    versions.bump(con, "raw.interactions", None, reset=True)  # rewritten in place: downstream rebuilds
    con.close()
    failed = run_pipeline(lake)
    assert not failed.success
    message = "\n".join(m for _, m in failed.failures)
    assert "exports.sft: nothing of this run is published" in message and "systemic" in message
    # the line the console prints after "✗ training_sets:": which expectation, not Dagster's wrapper
    first = dict(failed.failures)["training_sets"].splitlines()[0]
    assert first.startswith("exports.sft: ✗ prompt is a non-empty conversation [") and "Dagster" not in message
    # the snapshot step it skipped is not a warning of its own ("Dependencies for step snapshot failed")
    assert not [w for w in failed.step_warnings if "Dependencies for step" in w], failed.step_warnings
    assert "prompt is a non-empty conversation" in message and victims[0] in message  # expectation, sample rows
    assert current_version(lake.export_dir) == reference["version"]
    verify_snapshot(lake.export_dir)
    con = duckdb.connect(str(lake.state_db), read_only=True)
    assert con.execute("select status, snapshot_status from ingest.runs where run_id = ?",
                       [failed.run_id]).fetchone()[0] == "failed"
    assert con.execute("select count(*) from ingest.validations where run_id = ? and not success and blocking "
                       "and table_name = 'exports.sft'", [failed.run_id]).fetchone()[0] >= 1
    con.close()

    # rebuilt from the raw files: the next run publishes what a fresh lake publishes (a new lake:
    # the export directory's record of the old one removed, as its refusal says)
    shutil.rmtree(lake.state_dir)
    (lake.export_dir / ".snapshots" / ".owner.json").unlink()
    fixed = run_pipeline(lake)
    assert fixed.success, fixed.failures
    after = verify_snapshot(lake.export_dir)
    assert after["run_id"] == fixed.run_id
    fresh = replace(lake, warehouse=tmp_path / "fresh" / "warehouse.duckdb", export_dir=tmp_path / "fresh" / "exports")
    assert run_pipeline(fresh).success
    shared = lambda m: {p: h for p, h in data_hashes(m).items() if not p.startswith("internal/")}  # noqa: E731
    assert shared(after) == shared(read_manifest(fresh.export_dir))
    assert after["datasets"]["training/sft"]["rows"] >= reference["datasets"]["training/sft"]["rows"]


def rewritten_in_place(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Rows edited in place are a rewritten table (a new epoch): incremental marts start again."""
    from dagster_project import versions

    versions.bump(con, table, None, reset=True)


@pytest.mark.slow
def test_one_bad_training_row_is_dropped_named_in_the_ledger_and_counted_in_the_manifest(sample_run_copy):
    lake = sample_run_copy  # a successful run of the sample lake
    before = read_manifest(lake.export_dir)["datasets"]["training/sft"]
    # an accepted, positive interaction whose prompt became empty: it cannot train
    con = duckdb.connect(str(lake.state_db))
    (victim,) = con.execute("select interaction_id from exports.sft order by 1 limit 1").fetchone()
    con.execute("update raw.interactions set input_text = '' where id = ?", [victim])
    versions.bump(con, "raw.interactions", None, reset=True)  # rewritten in place
    con.close()

    second = run_pipeline(lake)
    assert second.success, second.failures
    sft = verify_snapshot(lake.export_dir)["datasets"]["training/sft"]
    assert sft["rows"] == before["rows"] - 1 and sft["excluded_rows"] == 1
    con = duckdb.connect(str(lake.warehouse), read_only=True)
    assert con.execute("select count(*) from exports.sft where interaction_id = ?", [victim]).fetchone() == (0,)
    ledger = con.execute("select row_key, expectation, detail, path, line_number from ingest.excluded "
                         "where run_id = ? and table_name = 'exports.sft'", [second.run_id]).fetchall()
    assert [(k, e) for k, e, *_ in ledger] == [(victim, "prompt is a non-empty conversation")]
    _, _, detail, path, line = ledger[0]
    assert detail == 'prompt_last = ""' and path.startswith("interactions/") and line >= 1
    con.close()


# ---------------------------------------------------------------------------------------------
# faults: kill -9 and ENOSPC at every stage of a publish
# ---------------------------------------------------------------------------------------------

CHILD = """
import sys
from pathlib import Path
import duckdb
from dagster_project.publishing import publish_snapshot
state, root, run_id = sys.argv[1:4]
con = duckdb.connect(state)
con.execute("set TimeZone = 'UTC'")
print(publish_snapshot(con, export_dir=Path(root) / "exports", warehouse=Path(root) / "warehouse.duckdb",
                       run_id=run_id, pseudonym_key=b"test-key").status)
"""


def change(state: Path) -> None:
    con = duckdb.connect(str(state))
    con.execute("delete from marts.interaction_labels where interaction_id = "
                "(select min(interaction_id) from marts.interaction_labels)")
    versions.bump(con, "marts.interaction_labels", None)  # what every writer of a table does
    con.close()


@pytest.mark.parametrize("stage", ["hashed", "objects_staged", "objects_written", "files_linked", "warehouse_built", "manifest_written", "committed",
                                   "linked"])
def test_kill_9_at_any_stage_leaves_a_complete_current_snapshot(sample, tmp_path, stage):
    state = copy_state(sample[0], tmp_path)
    first = publish(state, tmp_path, "first-run")
    change(state)
    child = subprocess.run([sys.executable, "-c", CHILD, str(state), str(tmp_path), "killed-run"], cwd=PROJECT,
                           env={**os.environ, FAULT_ENV: f"kill:{stage}"}, capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    if stage == "objects_staged":  # killed with the new objects written but neither fsynced nor named
        assert list((tmp_path / "exports" / SNAPSHOTS / ".objects").glob(".tmp-*"))
    committed = stage in ("committed", "linked")
    # a snapshot directory the kill left uncommitted is no kept snapshot (`flywheel status`
    # listed it, with no run and no rows, until the next publish removed it)
    assert [s["run_id"] for s in list_snapshots(tmp_path / "exports")] == (
        ["killed-run", "first-run"] if committed else ["first-run"])
    manifest = verify_snapshot(tmp_path / "exports")
    assert manifest["run_id"] == ("killed-run" if committed else "first-run")
    con = duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True)
    assert con.execute("select count(*) from marts.interaction_labels").fetchone()[0] == (
        first.manifest["datasets"]["analytics/interaction_labels"]["rows"] - committed)
    con.close()
    # the next publish gives the reference result: what a fresh lake publishes from the same state
    again = publish(state, tmp_path, "rerun")
    expected = publish(state, tmp_path / "fresh", "rerun")
    if committed:
        assert again.status == "unchanged"
    else:
        assert again.status == "published" and data_hashes(again.manifest) == data_hashes(expected.manifest)
    verify_snapshot(tmp_path / "exports")
    assert not list((tmp_path / "exports" / SNAPSHOTS / ".objects").glob(".tmp-*"))
    assert len(list_snapshots(tmp_path / "exports")) == 2


@pytest.mark.parametrize("stage", ["objects_staged", "objects_written", "warehouse_built", "manifest_written"])
def test_disk_full_at_any_stage_publishes_nothing(sample, tmp_path, monkeypatch, stage):
    state = copy_state(sample[0], tmp_path)
    first = publish(state, tmp_path, "first-run")
    change(state)
    monkeypatch.setenv(FAULT_ENV, f"enospc:{stage}")
    with pytest.raises(OSError, match="No space left"):
        publish(state, tmp_path, "full-disk")
    assert current_version(tmp_path / "exports") == first.version
    assert [s["version"] for s in list_snapshots(tmp_path / "exports")] == [first.version]
    verify_snapshot(tmp_path / "exports")
    assert not list((tmp_path / "exports" / SNAPSHOTS / ".objects").glob(".tmp-*"))  # no temp object left
    monkeypatch.delenv(FAULT_ENV)
    assert publish(state, tmp_path, "after").status == "published"


def test_an_error_right_after_the_commit_keeps_the_committed_snapshot(sample, tmp_path, monkeypatch):
    """The directory's fsync after the ``current`` link (an I/O error, a signal) failed the publish,
    which then removed the snapshot ``current`` had just been switched to: no snapshot readable."""
    state = copy_state(sample[0], tmp_path)
    publish(state, tmp_path, "first-run")
    change(state)
    monkeypatch.setenv(FAULT_ENV, "enospc:committed")
    with pytest.raises(OSError, match="No space left"):
        publish(state, tmp_path, "late-fault")
    monkeypatch.delenv(FAULT_ENV)
    [now] = [s["version"] for s in list_snapshots(tmp_path / "exports") if s["run_id"] == "late-fault"]
    assert current_version(tmp_path / "exports") == now
    verify_snapshot(tmp_path / "exports")
    con = duckdb.connect(str(state), read_only=True)
    assert con.execute("select snapshot_status from ingest.runs where run_id = 'late-fault'").fetchone() == (
        "published",)
    con.close()


# ---------------------------------------------------------------------------------------------
# readers, cost, retention, guards
# ---------------------------------------------------------------------------------------------

ANALYST = """
import duckdb, json, pathlib, time, sys
wh, ready, go = sys.argv[1:4]
con = duckdb.connect(wh, read_only=True)
before = con.execute("select count(*) from exports.sft").fetchone()[0]
pathlib.Path(ready).write_text(str(before))
while not pathlib.Path(go).exists():
    time.sleep(0.02)
after = con.execute("select count(*) from exports.sft").fetchone()[0]
con.close()
fresh = duckdb.connect(wh, read_only=True).execute("select count(*) from exports.sft").fetchone()[0]
print(json.dumps({"before": before, "after_on_old_connection": after, "fresh": fresh}))
"""


def test_an_open_analyst_connection_keeps_its_snapshot_a_new_one_sees_the_next(tmp_path):
    state = toy_state(tmp_path / "state.duckdb", months=3, per_month=100)
    publish(state, tmp_path, "first")
    ready, go = tmp_path / "ready", tmp_path / "go"
    analyst = subprocess.Popen([sys.executable, "-c", ANALYST, str(tmp_path / "warehouse.duckdb"), str(ready), str(go)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert analyst.poll() is None and time.monotonic() < deadline, analyst.stderr.read()
            time.sleep(0.02)
        append_month(state, 50)
        assert publish(state, tmp_path, "second").status == "published"  # never blocked by the reader
        go.write_text("go")
        out, err = analyst.communicate(timeout=60)
    finally:
        if analyst.poll() is None:
            analyst.kill()
    assert analyst.returncode == 0, err
    assert json.loads(out) == {"before": 300, "after_on_old_connection": 300, "fresh": 350}


def test_a_small_append_rewrites_only_the_partitions_it_touches(tmp_path):
    state = toy_state(tmp_path / "state.duckdb", months=12, per_month=400)
    first = publish(state, tmp_path, "first")
    append_month(state, 48)  # 1% new rows, in a new month
    second = publish(state, tmp_path, "second")
    old, new = shared_files(tmp_path, first.version), shared_files(tmp_path, second.version)
    rewritten = {name for name, st in new.items() if name not in old or old[name].st_ino != st.st_ino}
    assert rewritten == {"training/sft/train-2026-01.parquet"}
    assert second.files_written == 1 + 1  # that partition and the run log's ingest.runs
    sft_bytes = sum(st.st_size for name, st in new.items() if name.startswith("training/sft/"))
    assert second.bytes_written < 0.1 * sft_bytes
    assert data_hashes(second.manifest)["training/sft"] != data_hashes(first.manifest)["training/sft"]
    # the same state published into an empty directory gives the same datasets
    assert data_hashes(publish(state, tmp_path / "fresh", "second").manifest) == data_hashes(second.manifest)


def test_an_exported_file_overwritten_in_place_is_not_reused_and_new_objects_are_read_only(tmp_path):
    """Every snapshot holding a partition links one object file: an ML engineer's
    `df.head(3).to_parquet(path)` over an exported file changed every snapshot, and the next
    publish reused the object, recording the old row count and sha256 for the new bytes (and a
    full refresh changed nothing). Objects are read-only now, and one not the size its manifest
    recorded is written again."""
    state = toy_state(tmp_path / "state.duckdb", months=6, per_month=50)
    first = publish(state, tmp_path, "first")
    files = shared_files(tmp_path, first.version)
    assert files and {st.st_mode & 0o777 for st in files.values()} == {0o444}
    snap = tmp_path / "exports" / SNAPSHOTS / first.version
    name = "training/sft/train-2025-03.parquet"  # a month the next run does not change
    overwritten = snap / name
    import pyarrow.parquet as pq
    original = pq.read_table(overwritten)
    rows = original.slice(0, 3)
    overwritten.chmod(0o644)  # what the mode stops (root, or a user who chmods first)
    pq.write_table(rows, overwritten)
    append_month(state, 10)
    second = publish(state, tmp_path, "second")
    verify_snapshot(tmp_path / "exports", second.version)  # the rows and sha256 its manifest records
    fresh = snap.parent / second.version / name
    assert pq.read_table(fresh).equals(original)
    assert fresh.stat().st_ino != overwritten.stat().st_ino and fresh.stat().st_mode & 0o777 == 0o444
    [entry] = [f for d in second.manifest["datasets"].values() for f in d["files"]
               if d["table"] == "exports.sft" and f["name"] == "train-2025-03.parquet"]
    assert not entry.get("reused") and entry["rows"] == original.num_rows


@pytest.mark.parametrize("keep_insertion_order", [True, False])
def test_each_file_holds_its_rows_in_the_declared_order_whatever_order_the_table_has(tmp_path, keep_insertion_order):
    state = toy_state(tmp_path / "state.duckdb", months=12, per_month=100)
    con = duckdb.connect(str(state))
    con.execute("create or replace table exports.sft as select * from exports.sft order by hash(interaction_id)")
    con.execute("set TimeZone = 'UTC'")
    con.execute(f"set preserve_insertion_order = {str(keep_insertion_order).lower()}")
    result = publish_snapshot(con, export_dir=tmp_path / "exports", warehouse=tmp_path / "warehouse.duckdb",
                              run_id="first", pseudonym_key=KEY.encode())
    con.close()
    files = sorted((result.path / "training" / "sft").glob("*.parquet"))
    assert len(files) == 24 and result.files_written >= 24  # many partitions: one partitioned COPY
    reader = duckdb.connect()
    for file in files:
        ids = [r[0] for r in reader.execute("select interaction_id from read_parquet(?, file_row_number = true) "
                                            "order by file_row_number", [str(file)]).fetchall()]
        assert ids and ids == sorted(ids), file.name
    reader.close()
    verify_snapshot(tmp_path / "exports")


def test_identical_partitions_of_two_datasets_are_written_once_and_linked_twice(tmp_path):
    state = toy_state(tmp_path / "state.duckdb", months=1, per_month=10)
    con = duckdb.connect(str(state))
    con.execute("create table marts.twin_a as select range as n, 'x' || range as label from range(5)")
    con.execute("create table marts.twin_b as select * from marts.twin_a")
    con.close()
    result = publish(state, tmp_path, "first")
    a, b = (result.manifest["datasets"][f"analytics/twin_{x}"]["files"] for x in "ab")
    assert [f["object"] for f in a] == [f["object"] for f in b] and len(a) == 1
    assert [f["reused"] for f in a + b] == [False, True]  # written by the first, linked by the second
    assert a[0]["sha256"] == b[0]["sha256"] and a[0]["bytes"] == b[0]["bytes"] > 0
    assert (result.path / "analytics" / "twin_a" / a[0]["name"]).stat().st_ino == \
        (result.path / "analytics" / "twin_b" / b[0]["name"]).stat().st_ino
    assert result.files_written == sum(not f["reused"] for d in result.manifest["datasets"].values() for f in d["files"])
    verify_snapshot(tmp_path / "exports")
    assert not list((tmp_path / "exports" / SNAPSHOTS / ".objects").glob(".tmp-*"))


def published_files(state: Path, where: Path, **kw) -> dict:
    """Publish a copy of ``state`` under ``where``: each dataset's files (name, object, sha256,
    rows, reused), the run log left out."""
    where.mkdir()
    shutil.copyfile(state, where / "state.duckdb")
    manifest = publish(where / "state.duckdb", where, "run", **kw).manifest
    return {path: [(f["name"], f["object"], f["sha256"], f["rows"], f["reused"]) for f in entry["files"]]
            for path, entry in manifest["datasets"].items() if entry["table"] not in RUN_LOG}


def test_partitions_sorted_a_few_at_a_time_are_the_files_one_sort_writes(tmp_path, monkeypatch):
    """A dataset's new partitions are sorted ``COPY_ROWS`` rows at a time (a sort holds its rows in
    memory): the files are the same, byte for byte, however many sorts wrote them."""
    from dagster_project.publishing import parquet
    from dagster_project.publishing.parquet import Part, copy_chunks

    sizes = [[p.rows for p in chunk] for chunk in copy_chunks(
        [Part(f"p{i}.parquet", rows, f"k{i}") for i, rows in enumerate([100, 200, 300, 50, 600, 10])], limit=400)]
    assert sizes == [[100, 200], [300, 50], [600], [10]]
    state = toy_state(tmp_path / "state.duckdb", months=12, per_month=200)
    whole = published_files(state, tmp_path / "whole")
    monkeypatch.setattr(parquet, "COPY_ROWS", 450)  # staging.interactions' 12 months: six sorts
    sorts, copy = [], parquet._copy_sorted

    def counted(con, planned, parts, *args):
        sorts.append((planned.dataset.table, len(parts)))
        return copy(con, planned, parts, *args)

    monkeypatch.setattr(parquet, "_copy_sorted", counted)
    assert published_files(state, tmp_path / "chunked") == whole
    assert [n for table, n in sorts if table == "staging.interactions"] == [2] * 6
    verify_snapshot(tmp_path / "chunked" / "exports")


def test_a_partition_file_is_what_a_partitioned_copy_writes_and_every_column_is_optional(tmp_path):
    """Each partition is written by a COPY of its rows from one sorted temp table: byte for byte
    the file a ``COPY … PARTITION_BY … ORDER_BY`` writes. And every column is OPTIONAL in every
    file, as that COPY writes them: DuckDB marks a column it knows holds no NULL as REQUIRED, which
    gave a day's file written alone another schema than its dataset's other files."""
    from dagster_project.publishing import parquet

    con = duckdb.connect(str(tmp_path / "state.duckdb"))
    con.execute("set TimeZone = 'UTC'")
    # a NOT NULL column, a column NULL on one day only, and ties on the first sort column
    con.execute("create table t (id varchar not null, day date, note varchar, n int)")
    con.execute("insert into t select 'id' || (i % 37), date '2026-01-15' + to_months((i % 3)::int), "
                "case when i % 3 = 0 then null else 'note ' || i end, i from range(300) r(i)")
    dataset = parquet.Dataset("main.t", "internal/t", "internal", "select * from main.t", ("id",))
    planned = parquet.plan(con, dataset, tmp_path / "objects")
    assert [p.name for p in planned.parts] == ["part-2026-01.parquet", "part-2026-02.parquet", "part-2026-03.parquet"]
    options = parquet.PARQUET_OPTIONS
    order_sql = ", ".join(f'"{c}" asc nulls first' for c in parquet.sort_columns(con, planned, planned.parts))
    written = parquet._copy_sorted(con, planned, planned.parts, tmp_path, order_sql, options)
    (tmp_path / "alone").mkdir()
    alone = parquet._copy_sorted(con, planned, planned.parts[1:2], tmp_path / "alone", order_sql, options)
    con.execute(f"copy (select *, {planned.part_sql} as __part from main.t) to '{tmp_path / 'reference'}' "
                f"({options}, partition_by (__part), order_by ({order_sql}), write_partition_columns false)")
    for part in planned.parts:
        [reference] = (tmp_path / "reference" / f"__part={part.stem}").glob("*.parquet")
        assert written[part.name].read_bytes() == reference.read_bytes(), part.name
    assert alone["part-2026-02.parquet"].read_bytes() == written["part-2026-02.parquet"].read_bytes()
    repetition = con.execute("select distinct repetition_type from parquet_schema(?) where num_children is null",
                             [[str(f) for f in written.values()]]).fetchall()
    assert repetition == [("OPTIONAL",)]
    assert con.execute("select count(*) from duckdb_tables() where table_name = '_fw_sorted'").fetchone()[0] == 0


def test_a_partition_larger_than_a_row_group_keeps_its_order_whatever_the_insertion_order_setting(tmp_path):
    """The per-partition COPY reads the sorted temp table: without preserve_insertion_order (a
    database-wide setting someone may turn off) a scan of a partition over several row groups
    came out of order on four threads; such a COPY sorts again, and the files are the same. A
    failing COPY leaves no temp table behind on the connection."""
    from dagster_project.publishing import parquet

    files = {}
    for kept in (True, False):
        con = duckdb.connect()
        con.execute(f"set TimeZone = 'UTC'; set threads = 4; set preserve_insertion_order = {str(kept).lower()}")
        con.execute("create table t as select hash(i)::varchar as id, timestamptz '2026-01-01' + to_minutes((i % 1000)::int) "
                    "as ts from range(300000) r(i)")
        dataset = parquet.Dataset("main.t", "internal/t", "internal", "select * from main.t", ("id",))
        planned = parquet.plan(con, dataset, tmp_path / "objects")
        order_sql = ", ".join(f'"{c}" asc nulls first' for c in parquet.sort_columns(con, planned, planned.parts))
        (tmp_path / str(kept)).mkdir()
        written = parquet._copy_sorted(con, planned, planned.parts, tmp_path / str(kept), order_sql,
                                       f"format parquet, row_group_size {parquet.ROW_GROUP_ROWS}")
        [(name, path)] = written.items()
        ids = [r[0] for r in con.execute("select id from read_parquet(?, file_row_number = true) "
                                         "order by file_row_number", [str(path)]).fetchall()]
        assert len(ids) == 300000 and ids == sorted(ids), kept
        files[kept] = path.read_bytes()
        with pytest.raises(duckdb.Error):
            parquet._copy_sorted(con, planned, planned.parts, tmp_path / "no such directory", order_sql, "format parquet")
        assert con.execute("select count(*) from duckdb_tables() where table_name = '_fw_sorted'").fetchone()[0] == 0
        con.close()
    assert files[True] == files[False]


def test_two_writers_publish_what_one_writes(tmp_path):
    """Tables are hashed and written on two connections at once: the files, their objects, which
    dataset writes a partition two datasets share, and the pseudonymised ids are those of one
    writer, every time."""
    state = toy_state(tmp_path / "state.duckdb", months=6, per_month=300)
    con = duckdb.connect(str(state))
    # the two largest tables, so the two writers take them at once
    con.execute("create table marts.twin_a as select range as n, 'x' || range as label from range(5000)")
    con.execute("create table marts.twin_b as select * from marts.twin_a")
    con.execute("create table marts.by_session as select session_id, count(*) as n, min(\"timestamp\") as first_at "
                "from staging.interactions group by all")
    con.close()

    one = published_files(state, tmp_path / "one", writers=1)
    assert one["analytics/twin_b"][0][-1] is True and one["analytics/twin_a"][0][-1] is False
    assert len(one["internal/staging.interactions"]) == 6 and "analytics/by_session" in one
    for attempt in range(3):
        assert published_files(state, tmp_path / f"two-{attempt}", writers=2) == one
        verify_snapshot(tmp_path / f"two-{attempt}" / "exports")
        assert not list((tmp_path / f"two-{attempt}" / "exports" / SNAPSHOTS / ".objects").glob(".tmp-*"))


def test_the_first_error_on_any_connection_stops_the_others_and_is_raised():
    """``on_connections``: results in the items' order; when one item fails, the statement
    running on the other connection is interrupted and the failure (not the interrupt) raised."""
    from dagster_project.publishing.parquet import on_connections

    con = duckdb.connect()
    cons = [con, con.cursor()]
    assert on_connections(cons, list(range(7)), lambda c, x: c.execute("select ? * 2", [x]).fetchone()[0]) == \
        [0, 2, 4, 6, 8, 10, 12]
    forever = "select count(*) from range(100000000000) a(i) where hash(i) = 0"  # minutes, if not stopped

    def item(c, what):
        if what == "fail":
            time.sleep(0.3)  # the other is inside its statement by then
            raise ValueError("this item failed")
        if what == "late":  # between two statements when the other fails: an interrupt then is lost
            time.sleep(0.6)
        return c.execute(forever).fetchone()

    # the failing item taken second, then first; then the other starts its statement after the failure
    for items in (["slow", "fail"], ["fail", "slow"], ["late", "fail"]):
        started = time.monotonic()
        with pytest.raises(ValueError, match="this item failed"):
            on_connections(cons, items, item)
        assert time.monotonic() - started < 60, items
    assert con.execute("select 1").fetchone() == (1,)  # an interrupt leaves no mark on the next statement


def test_run_bookkeeping_written_after_a_publish_does_not_make_the_next_run_publish(tmp_path):
    state = toy_state(tmp_path / "state.duckdb")
    first = publish(state, tmp_path, "first")
    con = duckdb.connect(str(state))  # retention on kept snapshots audits itself after the publish
    con.execute("create table ingest.erasures as select now() as erased_at, 'retention' as kind, 3 as rows")
    con.execute("insert into ingest.runs (run_id, started_at, mode, status) values ('x', now(), 'incremental', 'success')")
    con.close()
    second = publish(state, tmp_path, "second")
    assert (second.status, second.version) == ("unchanged", first.version)
    append_month(state, 10)  # new data: the bookkeeping is published with it
    third = publish(state, tmp_path, "third")
    assert third.status == "published" and "internal/ingest.erasures" in third.manifest["datasets"]


def log_validations(state: Path, day: str, rows: int, run: str, validated_on: str = "2026-01-01") -> None:
    """``rows`` validation results of run ``run``, recorded on ``day`` (results of a validation on
    ``validated_on``, as a run that reuses them records them again)."""
    from dagster_project.validation import ensure_validations_table

    con = duckdb.connect(str(state))
    con.execute("set TimeZone = 'UTC'")
    ensure_validations_table(con)
    con.execute("insert into ingest.validations (run_id, table_name, expectation, success, validated_at, recorded_at) "
                "select $run, 'staging.interactions', 'check ' || i, true, $validated::timestamptz, "
                "$day::timestamptz + to_seconds(i % 80000) from range($rows) t(i)",
                {"run": run, "day": day, "rows": rows, "validated": validated_on})
    con.close()


def compact(state: Path) -> None:
    """Compact the state database as an erasure does (``privacy.compact_state``, which reads only
    the settings' ``state_db``): the rows after a deleted one are numbered one lower."""
    from types import SimpleNamespace

    from dagster_project.privacy import compact_state

    compact_state(SimpleNamespace(state_db=state))


def test_the_run_log_hashes_only_the_days_of_its_new_rows_until_a_row_is_deleted(tmp_path, monkeypatch):
    """ingest.validations grows by every run's results: a publish hashes the days of the rows
    appended since the last one, and publishes what hashing it whole would. After a deletion and
    a compaction that leaves as many rows up to the last publish's mark (one deleted, one
    appended, the rows after it renumbered), it is hashed whole."""
    from dagster_project.publishing import snapshot as publisher

    whole: list[str] = []  # the tables hashed whole
    plan = publisher.plan
    monkeypatch.setattr(publisher, "plan", lambda con, d, objects: whole.append(d.table) or plan(con, d, objects))

    def files(result) -> list[tuple]:
        entry = result.manifest["datasets"]["internal/ingest.validations"]
        return [(f["name"], f["rows"], f["object"]) for f in entry["files"]]

    def as_if_whole(name: str) -> list[tuple]:
        return files(publish(state, tmp_path / name, name))

    state = toy_state(tmp_path / "state.duckdb", months=3, per_month=50)
    for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
        log_validations(state, day, 2_000, run=day)  # 6,000 rows: files by day
    publish(state, tmp_path, "first")
    assert "ingest.validations" in whole  # nothing to start from

    whole.clear()
    log_validations(state, "2026-01-05", 300, run="second")
    append_month(state, 5)
    second = publish(state, tmp_path, "second")
    assert "ingest.validations" not in whole
    assert {f[0] for f in files(second)} >= {"part-2026-01-01.parquet", "part-2026-01-05.parquet"}
    assert files(second) == as_if_whole("fresh-second")

    whole.clear()
    con = duckdb.connect(str(state))
    con.execute("delete from ingest.validations where run_id = '2026-01-01' and expectation = 'check 0'")
    con.close()
    log_validations(state, "2026-01-06", 1, run="third")
    compact(state)
    append_month(state, 5, start=20_000_000)
    third = publish(state, tmp_path, "third")
    assert "ingest.validations" in whole
    assert files(third) == as_if_whole("fresh-third") != files(second)

    whole.clear()  # a deletion alone: one row fewer up to the mark, the others where they were
    con = duckdb.connect(str(state))
    con.execute("delete from ingest.validations where run_id = '2026-01-02' and expectation = 'check 7'")
    con.close()
    append_month(state, 5, start=30_000_000)
    fourth = publish(state, tmp_path, "fourth")
    assert "ingest.validations" in whole
    assert files(fourth) == as_if_whole("fresh-fourth") != files(third)


def test_retention_keeps_n_snapshots_and_drops_unreferenced_objects(tmp_path):
    state = toy_state(tmp_path / "state.duckdb", months=2, per_month=50)
    versions = []
    for i in range(6):
        append_month(state, 1, start=i)
        versions.append(publish(state, tmp_path, f"run-{i}", keep=3).version)
    kept = list_snapshots(tmp_path / "exports")
    assert [s["version"] for s in kept] == versions[::-1][:3]
    assert [s["current"] for s in kept] == [True, False, False]
    objects = {p.stem for p in (tmp_path / "exports" / SNAPSHOTS / ".objects").glob("*.parquet")}
    referenced = {f["object"] for s in kept for d in read_manifest(tmp_path / "exports", s["version"])["datasets"].values()
                  for f in d["files"]}
    assert objects == referenced
    for s in kept:
        verify_snapshot(tmp_path / "exports", s["version"])  # time travel: older snapshots still read
    info = status(tmp_path / "exports")
    assert info["current"] == versions[-1] and len(info["snapshots"]) == 3
    assert {d["dataset"] for d in info["datasets"]} == {"training/sft", "analytics/sessions"}
    with pytest.raises(PublishError, match="FLYWHEEL_KEEP_SNAPSHOTS"):
        publish(state, tmp_path, "x", keep=0)


def test_a_clock_set_back_keeps_every_snapshot_and_names_the_new_one_newest(tmp_path, monkeypatch):
    """Snapshots are ordered by their names, which are creation times: with the clock set back an
    hour (NTP, a VM restored), the next publish took every older snapshot for a leftover of a
    publish that never committed and deleted them all, the current one's predecessors included."""
    from datetime import datetime, timedelta

    from dagster_project.publishing import snapshot

    state = toy_state(tmp_path / "state.duckdb", months=2, per_month=50)
    names = []
    for i in range(3):
        append_month(state, 1, start=i)
        names.append(publish(state, tmp_path, f"run-{i}", keep=5).version)

    class Behind(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) - timedelta(hours=1)

    monkeypatch.setattr(snapshot, "datetime", Behind)
    for i in range(3, 5):
        append_month(state, 1, start=i)
        names.append(publish(state, tmp_path, f"run-{i}", keep=5).version)
    assert [s["version"] for s in list_snapshots(tmp_path / "exports")] == names[::-1]
    assert current_version(tmp_path / "exports") == names[-1] and names == sorted(set(names))
    for name in names:
        verify_snapshot(tmp_path / "exports", name)
    created = datetime.fromisoformat(read_manifest(tmp_path / "exports", names[-1])["created_at"])
    assert created < datetime.fromisoformat(read_manifest(tmp_path / "exports", names[2])["created_at"])


def as_copies(snapshot: Path) -> None:
    """Every file of ``snapshot`` a copy, not a hard link (a file system without hard links, or a
    backup restored without them)."""
    for file in snapshot.rglob("*.parquet"):
        copy = file.with_name(file.name + ".copy")
        shutil.copyfile(file, copy)
        os.replace(copy, file)


def test_objects_a_snapshot_names_survive_when_its_files_are_copies_and_are_reused(tmp_path):
    from dagster_project import privacy

    state = toy_state(tmp_path / "state.duckdb", months=6, per_month=50)
    first = publish(state, tmp_path, "first")
    objects = tmp_path / "exports" / SNAPSHOTS / ".objects"
    named = {f["object"] for d in first.manifest["datasets"].values() for f in d["files"]}
    as_copies(first.path)
    assert {p.stat().st_nlink for p in objects.glob("*.parquet")} == {1}
    # what every run does after publishing, and what a run that publishes nothing new does
    privacy.scrub_snapshots(tmp_path / "exports", lambda table, columns: None)
    assert publish(state, tmp_path, "noop").status == "unchanged"
    assert {p.stem for p in objects.glob("*.parquet")} == named
    append_month(state, 10)
    second = publish(state, tmp_path, "second")
    # only the month that changed (and the run log) is written; the rest is reused from the objects
    assert second.status == "published" and second.files_reused >= second.files_written
    written = {f["name"] for d in second.manifest["datasets"].values() if d["table"] not in RUN_LOG
               for f in d["files"] if not f.get("reused")}
    assert written and all("2026-01" in name for name in written), written
    verify_snapshot(tmp_path / "exports", second.version)


def test_an_object_no_snapshot_names_is_collected_and_an_unreadable_manifest_keeps_them_all(tmp_path):
    from dagster_project.publishing.snapshot import collect_objects

    state = toy_state(tmp_path / "state.duckdb", months=2, per_month=20)
    first = publish(state, tmp_path, "first")
    snaps = tmp_path / "exports" / SNAPSHOTS
    stray = snaps / ".objects" / "0123abcd.parquet"
    stray.write_bytes(b"PAR1")
    as_copies(first.path)
    before = {p.stem for p in (snaps / ".objects").glob("*.parquet")}
    (first.path / "manifest.json").write_text("{not json")
    assert collect_objects(snaps) == 0  # cannot tell what is used: nothing deleted
    assert {p.stem for p in (snaps / ".objects").glob("*.parquet")} == before
    (first.path / "manifest.json").write_text(json.dumps(first.manifest))
    assert collect_objects(snaps) == 1 and not stray.exists()
    assert {p.stem for p in (snaps / ".objects").glob("*.parquet")} == before - {"0123abcd"}


def test_an_empty_dataset_over_a_non_empty_one_needs_the_flag(tmp_path):
    state = toy_state(tmp_path / "state.duckdb", months=1, per_month=20)
    first = publish(state, tmp_path, "first")
    con = duckdb.connect(str(state))
    con.execute("delete from exports.sft")
    record_run(con, "second", mode="incremental")
    con.close()
    with pytest.raises(PublishError, match=r"training/sft \(exports.sft\) would be published empty over 20 rows.*"
                                           r"--allow-empty.*FLYWHEEL_ALLOW_EMPTY=1"):
        publish(state, tmp_path, "second")
    assert current_version(tmp_path / "exports") == first.version
    con = duckdb.connect(str(state), read_only=True)  # refused by the publish itself: not published
    assert con.execute("select snapshot, snapshot_status from ingest.runs where run_id = 'second'"
                       ).fetchall() == [(None, "not published")]
    con.close()
    allowed = publish(state, tmp_path, "third", allow_empty=True)
    assert allowed.manifest["datasets"]["training/sft"]["rows"] == 0
    verify_snapshot(tmp_path / "exports")


def test_a_mart_listing_exceptions_may_empty(tmp_path):
    """Promotion candidates, orphan feedback, signal conflicts and missed files are empty in the
    normal course (a signal decays, an interaction arrives): emptied, they failed every run."""
    state = toy_state(tmp_path / "state.duckdb", months=1, per_month=20)
    con = duckdb.connect(str(state))
    con.execute("create table marts.promotion_candidates as select 'use ripgrep' as signal, 0.9 as strength")
    con.close()
    publish(state, tmp_path, "first")
    con = duckdb.connect(str(state))
    con.execute("delete from marts.promotion_candidates")  # decayed below the threshold
    con.close()
    emptied = publish(state, tmp_path, "second")
    assert emptied.status == "published" and emptied.manifest["datasets"]["analytics/promotion_candidates"]["rows"] == 0


def test_raw_ids_are_pseudonymised_and_a_leak_blocks_the_publish(tmp_path):
    state = toy_state(tmp_path / "state.duckdb", months=1, per_month=20)
    published = publish(state, tmp_path, "first")
    rows = duckdb.connect().execute("select session_pseudonym, n from read_parquet(?) order by n, session_pseudonym", [
        str(tmp_path / "exports" / "analytics" / "sessions" / "*.parquet")]).fetchall()
    assert {r[0] for r in rows} == {session_pseudonym(KEY.encode(), f"sess-raw-{i}") for i in range(7)}
    assert published.manifest["datasets"]["internal/staging.interactions"]["kind"] == "internal"
    con = duckdb.connect(str(state))
    con.execute("create table marts.leaky as select 'note' as kind, 'sess-raw-3' as note")
    con.close()
    with pytest.raises(PublishError, match=r"analytics/leaky.note: 1 rows.*nothing was published"):
        publish(state, tmp_path, "second")
    assert current_version(tmp_path / "exports") == published.version


def test_comments_carry_over_and_a_view_that_does_not_read_fails_verification(tmp_path):
    state = toy_state(tmp_path / "state.duckdb", months=1, per_month=10)
    con = duckdb.connect(str(state))
    con.execute("comment on table exports.sft is 'accepted positive interactions'")
    con.execute("comment on column exports.sft.split is 'train or eval (HF: test)'")
    con.execute("comment on column marts.sessions.session_id is 'renamed when shared'")
    con.close()
    result = publish(state, tmp_path, "first")
    wh = duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True)
    assert wh.execute("select comment from duckdb_views() where view_name = 'sft'").fetchone() == (
        "accepted positive interactions",)
    assert wh.execute("select comment from duckdb_columns() where table_name = 'sft' and column_name = 'split'"
                      ).fetchone() == ("train or eval (HF: test)",)
    wh.close()
    victim = next((result.path / "training" / "sft").glob("*.parquet"))
    victim.unlink()
    with pytest.raises(PublishError):
        verify_snapshot(tmp_path / "exports")


def _lose(path):
    path.unlink()


def _truncate(path):
    with open(path, "r+b") as fh:
        fh.truncate(100)


@pytest.mark.parametrize("fault, error", [
    (_lose, r"view exports.sft does not read.*not publishing"),
    (_truncate, r"view exports.sft does not read \(.*train-2026-01.parquet has 100 bytes"),
], ids=["missing", "truncated"])
def test_a_linked_file_that_does_not_read_fails_the_publish_not_the_analyst(tmp_path, fault, error):
    """A file linked into the new snapshot that is gone or not the manifest's size (checked by
    binding every view over files of the recorded sizes) stops the publish before the switch."""
    state = toy_state(tmp_path / "state.duckdb", months=2, per_month=10)
    first = publish(state, tmp_path, "first")
    append_month(state, 5)

    def damage(stage):
        if stage == "files_linked":
            snapshot = next(p for p in (tmp_path / "exports" / SNAPSHOTS).iterdir()
                            if not p.name.startswith(".") and p.name != first.version)
            fault(snapshot / "training" / "sft" / "train-2026-01.parquet")

    with pytest.raises(RuntimeError, match=error):
        publish(state, tmp_path, "second", hook=damage)
    assert current_version(tmp_path / "exports") == first.version
    verify_snapshot(tmp_path / "exports")


def test_a_legacy_layout_is_migrated_once(tmp_path):
    exports = tmp_path / "exports"
    (exports / "training" / ".versions" / "sft" / "v1").mkdir(parents=True)
    (exports / "training" / ".versions" / "sft" / "v1" / "part-00000.parquet").write_bytes(b"old")
    os.symlink(".versions/sft/v1", exports / "training" / "sft")
    (exports / "analytics").mkdir()
    duckdb.connect(str(tmp_path / "warehouse.duckdb")).execute("create table old as select 1").close()
    state = toy_state(tmp_path / "state.duckdb", months=1, per_month=10)
    result = publish(state, tmp_path, "first")
    assert os.readlink(exports / "training") == "current/training" and (exports / "training" / "sft").is_dir()
    assert os.readlink(tmp_path / "warehouse.duckdb") == "exports/current/warehouse.duckdb"
    legacy = list((exports / SNAPSHOTS).glob(".legacy-*-training"))
    assert len(legacy) == 1 and (legacy[0] / ".versions" / "sft" / "v1" / "part-00000.parquet").read_bytes() == b"old"
    wh = duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True)
    assert wh.execute("select count(*) from exports.sft").fetchone() == (10,)
    wh.close()
    assert publish(state, tmp_path, "again").status == "unchanged" and result.status == "published"


def test_forget_reaches_a_legacy_layouts_exports_moved_aside(tmp_path):
    """An older layout's exports are moved aside into ``.snapshots/.legacy-*`` by the first
    snapshot; with no manifest, erasure walked past them: a forgotten session's training rows
    stayed there, in each dataset and its ``.versions`` copy."""
    from dagster_project.privacy import scrub_snapshots, subject_condition

    exports = tmp_path / "exports"
    rows_sql = "select * from (values ('i1', 'sess-gone'), ('i2', 'sess-kept'), ('i3', 'sess-gone')) t(interaction_id, session_id)"
    for dataset in ("sft", ".versions/sft/v1"):
        (exports / "training" / dataset).mkdir(parents=True)
        duckdb.connect().execute(f"copy ({rows_sql}) to '{exports / 'training' / dataset / 'part-00000.parquet'}'")
    state = toy_state(tmp_path / "state.duckdb", months=1, per_month=10)
    publish(state, tmp_path, "first")
    [legacy] = list((exports / SNAPSHOTS).glob(".legacy-*-training"))
    (legacy / "notes.parquet").write_bytes(b"not parquet")  # skipped, not a failure
    assert scrub_snapshots(exports, subject_condition("sess-gone", {"sess-gone"})) == (0, 0)  # retention's call
    assert scrub_snapshots(exports, subject_condition("sess-gone", {"sess-gone"}), legacy=True) == (4, 1)
    for dataset in ("sft", ".versions/sft/v1"):
        assert duckdb.connect().execute("select interaction_id from read_parquet(?)",
                                        [str(legacy / dataset / "part-00000.parquet")]).fetchall() == [("i2",)]


from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st  # noqa: E402

ACTIONS = st.lists(st.tuples(st.sampled_from(["append", "delete", "update", "log", "erase", "publish"]),
                             st.integers(0, 10_000)), min_size=1, max_size=6)


@hsettings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS)
@example(actions=[("update", 0), ("update", 0), ("log", 0)])  # an unchanged publish keeps its run log
@example(actions=[("log", 1), ("append", 3), ("erase", 0), ("log", 2), ("append", 7)])
def test_publishing_incrementally_equals_publishing_once(tmp_path_factory, actions):
    """Whatever rows change between publishes, the last snapshot holds the files one publish of
    the final state writes; the run log's validations included when that publish had new data
    (results logged on any day, or a row erased and the state compacted), its other tables
    recording the publishes themselves."""
    root = tmp_path_factory.mktemp("prop")
    state = toy_state(root / "state.duckdb", months=3, per_month=30)
    log_validations(state, "2026-01-01", 10, run="run-0")
    publish(state, root, "run-0")
    for i, (action, n) in enumerate(actions, start=1):
        con = duckdb.connect(str(state))
        if action == "append":
            con.close()
            append_month(state, 1 + n % 5, start=n * 10)
            con = duckdb.connect(str(state))
        elif action == "delete":
            con.execute("delete from exports.sft where interaction_id in (select interaction_id from exports.sft "
                        "order by hash(interaction_id || ?) limit 3)", [str(n)])
        elif action == "update":
            con.execute("update exports.sft set split = case when split = 'eval' then 'train' else 'eval' end "
                        "where interaction_id = (select min(interaction_id) from exports.sft where hash(interaction_id) % 7 = ?)",
                        [n % 7])
        elif action == "erase":
            con.execute("delete from ingest.validations where expectation = (select min(expectation) "
                        "from ingest.validations)")
            con.close()
            compact(state)
            con = duckdb.connect(str(state))
        con.close()
        if action == "log":  # a few results, or thousands (the run log then cut by day)
            log_validations(state, f"2026-0{1 + n % 3}-{1 + n % 28:02d}", 1 + n % 4 * 1_500, run=f"log-{i}")
        if action == "publish" or i == len(actions):
            last = publish(state, root, f"run-{i}", keep=2)
    incremental = verify_snapshot(root / "exports")
    once = publish(state, root / "once", "once").manifest
    assert data_hashes(incremental) == data_hashes(once)
    # the run log goes out with the next snapshot that has new data: after an unchanged one, the
    # current snapshot holds the run log of its own publish
    skipped = RUN_LOG - APPEND_ONLY if last.status == "published" else RUN_LOG
    for path, entry in once["datasets"].items():
        if entry["table"] in skipped:
            continue
        assert [(f["name"], f["rows"], f["object"]) for f in incremental["datasets"][path]["files"]] == \
               [(f["name"], f["rows"], f["object"]) for f in entry["files"]], path


def test_a_written_object_is_verified_from_the_bytes_it_is_hashed_from(tmp_path):
    from dagster_project.publishing.parquet import verify_written

    good = tmp_path / "good.parquet"
    duckdb.connect().execute(f"copy (select range as n from range(7)) to '{good}' (format parquet)").close()
    sha, size = verify_written(good, 7, "t: good.parquet")
    assert (sha, size) == (__import__("hashlib").sha256(good.read_bytes()).hexdigest(), good.stat().st_size)
    with pytest.raises(RuntimeError, match=r"^t: good.parquet: wrote 7 rows, expected 8; nothing was published$"):
        verify_written(good, 8, "t: good.parquet")
    assert not good.exists()  # a wrong file is removed, never named as an object
    torn = tmp_path / "torn.parquet"
    duckdb.connect().execute(f"copy (select range as n from range(7)) to '{torn}' (format parquet)").close()
    torn.write_bytes(torn.read_bytes()[:-20])
    with pytest.raises(RuntimeError, match=r"t: torn.parquet: wrote a file that does not read as Parquet"):
        verify_written(torn, 7, "t: torn.parquet")
    assert not torn.exists()


def test_partitions_larger_than_a_row_group_keep_the_declared_order(tmp_path):
    """The partition-sorted temp table is scanned in parallel (several row groups per partition):
    insertion order must still hold inside every file."""
    state = toy_state(tmp_path / "state.duckdb", months=1, per_month=10)
    con = duckdb.connect(str(state))
    con.execute("""create table marts.big as select format('b{:07d}', i) as id,
                   timestamptz '2025-03-01 00:00:00+00' + to_days((i % 2)::int) as "timestamp", repeat('p', 40) as pad
                   from range(400000) t(i) order by hash(i)""")
    con.close()
    result = publish(state, tmp_path, "first")
    files = sorted((result.path / "analytics" / "big").glob("*.parquet"))
    assert [f.name for f in files] == ["part-2025-03-01.parquet", "part-2025-03-02.parquet"]
    reader = duckdb.connect()
    for file in files:
        rows, disorder = reader.execute(
            "select count(*), count(*) filter (where prev > id) from (select id, lag(id) over (order by file_row_number) "
            "as prev from read_parquet(?, file_row_number = true))", [str(file)]).fetchone()
        assert (rows, disorder) == (200_000, 0), file.name
    reader.close()


def test_partitions_written_by_one_copy_hold_their_rows_in_the_total_order_nulls_first(tmp_path):
    """Many partitions are cut, sorted and written by one ``COPY … PARTITION_BY … ORDER_BY``: each
    file holds exactly its partition's rows, ordered by the declared order then every other
    column, NULLs first (what a COPY per partition wrote). A directory such a COPY left when its
    publish was killed is removed by the next publish."""
    state = toy_state(tmp_path / "state.duckdb", months=1, per_month=10)
    con = duckdb.connect(str(state))
    con.execute("""create table marts.ordered as select (i % 5)::varchar as "group", case when i % 4 = 0 then null
                   else (i * 7919) % 1000 end as score, i as n,
                   timestamptz '2025-03-01 00:00:00+00' + to_days((i % 9)::int) as "timestamp"
                   from range(60000) t(i) order by hash(i)""")
    con.close()
    objects = tmp_path / "exports" / SNAPSHOTS / ".objects"
    leftover = objects / ".tmp-1-0123456789abcdef" / "__part=part-2025-03-01"
    leftover.mkdir(parents=True)
    (leftover / "data_0.parquet").write_bytes(b"half a file")
    result = publish(state, tmp_path, "first")
    assert not list(objects.glob(".tmp-*"))
    entry = result.manifest["datasets"]["analytics/ordered"]
    assert [f["name"] for f in entry["files"]] == [f"part-2025-03-0{d}.parquet" for d in range(1, 10)]
    reader = duckdb.connect()
    reader.execute("set TimeZone = 'UTC'")
    for f in entry["files"]:
        file = str(result.path / "analytics" / "ordered" / f["name"])
        got = reader.execute("select * from read_parquet(?, file_row_number = true) order by file_row_number",
                             [file]).fetchall()
        rows = [r[:4] for r in got]
        assert len(rows) == f["rows"] and f["rows"] > 0
        # no declared key: every column in table order ("group", score, n, "timestamp")
        key = lambda r: (r[0], (r[1] is not None, r[1] if r[1] is not None else 0), r[2], r[3])
        assert rows == sorted(rows, key=key), f["name"]
        assert rows[0][:2] == ("0", None)  # NULLs first
        assert {str(r[3].date()) for r in rows} == {f["name"][len("part-"):-len(".parquet")]}
    reader.close()
    verify_snapshot(tmp_path / "exports")


@pytest.mark.parametrize("repeated", ["no", "'k-dup'", "null"])
def test_rows_whose_key_no_other_shares_are_sorted_by_it_alone_into_the_same_bytes(tmp_path, monkeypatch, repeated):
    """Files hold their rows by the dataset's key (NULLs first), then every other column. When
    no two rows written share a key, the key alone is sorted by (no text compared) and every file
    is byte for byte what sorting by every column writes; a key two rows share (two NULLs too)
    sorts by every column."""
    from dagster_project import expectations
    from dagster_project.publishing import parquet

    monkeypatch.setitem(expectations.ORDER_KEYS, "marts.keyed", ("k",))
    monkeypatch.setattr(parquet, "KEY_SORT_ROWS", 20_000)  # fewer rows to write: every column, unchecked
    state = toy_state(tmp_path / "state.duckdb", months=1, per_month=10)
    con = duckdb.connect(str(state))
    con.execute(f"""create table marts.keyed as select
                   case when {repeated != "no"} and i % 10 = 0 then {"null" if repeated == "no" else repeated}
                        else format('k{{:06d}}', (i * 7919) % 100003) end as k,
                   repeat('t', (i % 13)::int) || i as txt, i % 3 as n,
                   timestamptz '2025-03-01 00:00:00+00' + to_days((i % 4)::int) as "timestamp"
                   from range(20000) t(i) order by hash(i)""")
    con.close()
    reference_state = tmp_path / "reference.duckdb"
    shutil.copyfile(state, reference_state)
    chosen = {}

    def spy(con, planned, parts):
        chosen[planned.dataset.table] = parquet.sort_columns.__wrapped__(con, planned, parts)
        return chosen[planned.dataset.table]

    spy.__wrapped__ = parquet.sort_columns
    monkeypatch.setattr(parquet, "sort_columns", spy)
    result = publish(state, tmp_path / "keyed", "first")
    every = ["k", "txt", "n", "timestamp"]
    assert chosen["marts.keyed"] == (every if repeated != "no" else ["k"])
    assert chosen["exports.sft"] == ["interaction_id", "prompt", "completion", "split", "interaction_timestamp"]

    def by_every_column(con, planned, parts):
        names = [c["name"] for c in planned.columns]
        keys = [c for c in planned.dataset.order if c in names]
        return keys + [c for c in names if c not in keys]

    monkeypatch.setattr(parquet, "sort_columns", by_every_column)
    reference = publish(reference_state, tmp_path / "reference", "first")
    files = result.manifest["datasets"]["analytics/keyed"]["files"]
    assert len(files) == 4
    assert ([(f["name"], f["sha256"]) for f in files]
            == [(f["name"], f["sha256"]) for f in reference.manifest["datasets"]["analytics/keyed"]["files"]])
    reader = duckdb.connect()
    ties = 0
    for f in files:
        rows = reader.execute("select k, txt, n from read_parquet(?, file_row_number = true) order by file_row_number",
                              [str(result.path / "analytics" / "keyed" / f["name"])]).fetchall()
        assert rows == sorted(rows, key=lambda r: (r[0] is not None, r[0] or "", r[1], r[2])), f["name"]
        assert len(rows) == 5000
        ties += sum(r[0] in ("k-dup", None) for r in rows)
    assert ties == (0 if repeated == "no" else 2000)
    reader.close()


def test_only_new_partitions_are_checked_for_raw_ids_and_a_leak_in_one_is_named(tmp_path):
    state = toy_state(tmp_path / "state.duckdb", months=2, per_month=10)
    con = duckdb.connect(str(state))
    # a raw id published in an old partition passed an earlier check (or was made so by hand):
    # it is not read again; the same raw id in a NEW partition blocks the publish and is named
    con.execute("create table marts.notes as select timestamptz '2025-01-15 00:00:00+00' as created_at, "
                "'fine' as note, 'ok' as other")
    con.close()
    first = publish(state, tmp_path, "first")
    con = duckdb.connect(str(state))
    con.execute("update marts.notes set note = 'sess-raw-2'")  # rewrites the only (old) partition
    con.close()
    with pytest.raises(PublishError, match=r"^raw session/user ids in shared datasets \(analytics/notes.note: 1 rows\)"):
        publish(state, tmp_path, "second")
    con = duckdb.connect(str(state))
    con.execute("update marts.notes set note = 'fine'")
    con.execute("insert into marts.notes values (timestamptz '2026-02-01 00:00:00+00', 'new', 'sess-raw-5'), "
                "(timestamptz '2026-02-02 00:00:00+00', 'sess-raw-x', 'not an id')")
    con.close()
    with pytest.raises(PublishError, match=r"\(analytics/notes.other: 1 rows\); nothing was published"):
        publish(state, tmp_path, "third")
    assert current_version(tmp_path / "exports") == first.version
    con = duckdb.connect(str(state))
    con.execute("update marts.notes set other = 'sess-raw-' where other = 'sess-raw-5'")  # a prefix is no id
    con.close()
    assert publish(state, tmp_path, "fourth").status == "published"


def test_a_short_raw_id_that_equals_an_ordinary_value_is_published_with_a_warning(tmp_path):
    # a user "2" and a strategy arm "2" (both valid): the gate stopped every publish on them; such
    # a value is published and its column named (an id this short cannot be told from a value)
    state = toy_state(tmp_path / "state.duckdb", months=1, per_month=10)
    con = duckdb.connect(str(state))
    con.execute("create table staging.session_ratings as select 'r1' as id, '2' as user_id_or_null, "
                "'a' || repeat('0', 63) as session_id_opaque")
    con.execute("create table marts.outcome_rates as select timestamptz '2025-01-15 00:00:00+00' as day, "
                "'2' as arm_id, 3 as accepted")
    con.close()
    first = publish(state, tmp_path, "first")
    assert first.status == "published" and [w.split(":")[0] for w in first.warnings] == [
        "analytics/outcome_rates.arm_id"] and "1 new rows hold a value equal to a raw session/user id" in first.warnings[0]
    con = duckdb.connect(str(state))  # an id of eight characters or more still blocks
    con.execute("update staging.session_ratings set user_id_or_null = 'user-0002'")
    con.execute("update marts.outcome_rates set arm_id = 'user-0002'")
    con.close()
    with pytest.raises(PublishError, match=r"\(analytics/outcome_rates.arm_id: 1 rows\)"):
        publish(state, tmp_path, "second")


def test_scrubbing_kept_snapshots_reaches_every_snapshot_linking_a_shared_object(tmp_path):
    from dagster_project.privacy import scrub_snapshots

    state = toy_state(tmp_path / "state.duckdb", months=3, per_month=20)
    first = publish(state, tmp_path, "first")
    append_month(state, 5)
    second = publish(state, tmp_path, "second")
    exports = tmp_path / "exports"
    shared = {f["object"] for f in first.manifest["datasets"]["training/sft"]["files"]} & \
        {f["object"] for f in second.manifest["datasets"]["training/sft"]["files"]}
    assert len(shared) >= 2  # the old months are linked by both snapshots

    def only_sft(where):
        return lambda table, columns: where if table == "exports.sft" else None

    assert scrub_snapshots(exports, only_sft("interaction_id = 'nobody'")) == (0, 0)
    assert scrub_snapshots(exports, only_sft("interaction_id in ('i000000', 'i000001')")) == (4, 2)
    for version in (first.version, second.version):
        manifest = verify_snapshot(exports, version)
        assert manifest["datasets"]["training/sft"]["rows"] == {first.version: 58, second.version: 63}[version]
        ids = duckdb.connect().execute("select count(*) from read_parquet(?) where interaction_id like 'i00000_'",
                                       [str(exports / SNAPSHOTS / version / "training" / "sft" / "*.parquet")]).fetchone()
        assert ids == (8,)  # i000002..i000009 stay


def test_a_folder_the_rule_newly_keys_is_republished_though_no_row_changed(settings, tmp_path):
    """A shared dataset's files were reused while its table was unchanged, whatever the rule
    that publishes raw paths: a folder the globs stopped spelling out (or that an upgrade
    keyed: per-user folders were published by name before the thirty-second session) stayed by
    name in every such dataset, a full refresh included, each run saying nothing changed."""
    from conftest import dumps, interaction, write_lines

    write_lines(settings.raw_dir / "interactions" / "alice" / "interactions_2026-02-26_5b0c2f7e.jsonl",
                [dumps(interaction(i, user_feedback="positive")) for i in (1, 2)])
    sources = tmp_path / "sources.yaml"
    sources.write_text('sources:\n  interactions:\n    globs: ["interactions/alice/interactions_*.jsonl"]\n')
    lake = replace(settings, sources_file=sources, pseudonym_key=KEY)
    assert run_pipeline(lake).success
    first = current_version(lake.export_dir)
    con = duckdb.connect()
    sft = str(lake.export_dir / "training" / "sft" / "*.parquet")
    assert {r[0].split("/")[1] for r in con.execute("select path from read_parquet(?)", [sft]).fetchall()} == {"alice"}
    sources.write_text('sources:\n  interactions:\n    globs: ["interactions/*/interactions_*.jsonl"]\n')
    assert run_pipeline(lake).success
    assert current_version(lake.export_dir) != first
    folder = hmac.new(KEY.encode(), b"directory:alice", hashlib.sha256).hexdigest()[:8]
    assert {r[0].split("/")[1] for r in con.execute("select path from read_parquet(?)", [sft]).fetchall()} == {folder}
    for f in (lake.export_dir / "current").glob("[ta]*/*/*.parquet"):  # training and analytics
        assert not con.execute(f"select count(*) from read_parquet('{f}') t where contains(t::varchar, 'alice')"
                               ).fetchone()[0], f
    second = current_version(lake.export_dir)
    assert run_pipeline(lake).success and current_version(lake.export_dir) == second


def test_a_folder_no_glob_names_is_shared_keyed(settings, tmp_path):
    """Files kept per user (`interactions/alice/…`, a glob's `*/`) published the folder's name in
    every shared path column: the keyed file name beside it said nothing, the folder everything.
    A folder the sources' globs spell out is shared by name, any other as 8 hex digits of its
    keyed HMAC, wherever it stands (`*/feedback/…`; outside the raw root, the file's folder)."""
    from conftest import dumps, interaction, write_lines

    for user, ids in (("alice", (1, 2)), ("bob", (3,))):
        write_lines(settings.raw_dir / "interactions" / user / "interactions_2026-02-26_5b0c2f7e.jsonl",
                    [dumps(interaction(i, user_feedback="positive")) for i in ids])
        write_lines(settings.raw_dir / user / "feedback" / "2026-02-26_feedback.jsonl", [dumps(
            {"record_id": interaction(ids[0])["id"], "feedback": "positive", "was_edited": False,
             "timestamp": "2026-02-26T15:00:00", "source": "manual"})])
    elsewhere = tmp_path / "srv" / "outcomes"
    write_lines(elsewhere / "carol" / "2026-02-26_outcomes.jsonl", [dumps(
        {"id": "o1", "timestamp": "2026-02-26T10:00:00", "outcome": "accepted",
         "strategy": {"arm_id": "arm-a", "weights": {"v": 1}}})])
    sources = tmp_path / "sources.yaml"
    sources.write_text('sources:\n  interactions:\n    globs: ["interactions/*/interactions_*.jsonl"]\n'
                       '  feedback:\n    globs: ["*/feedback/*_feedback.jsonl"]\n'
                       f'  outcomes:\n    globs: ["{elsewhere}/*/*_outcomes.jsonl"]\n')
    lake = replace(settings, sources_file=sources, pseudonym_key=KEY)
    assert run_pipeline(lake).success
    con = duckdb.connect()

    def keyed(text: str, digits: int) -> str:
        return hmac.new(KEY.encode(), text.encode(), hashlib.sha256).hexdigest()[:digits]

    def paths(dataset: str) -> list[str]:
        files = str(lake.export_dir / dataset / "*.parquet")
        return sorted(r[0] for r in con.execute("select distinct path from read_parquet(?)", [files]).fetchall())

    name = f"interactions_2026-02-26_{keyed('file-name:5b0c2f7e', 8)}.jsonl"
    assert paths("training/sft") == sorted(f"interactions/{keyed(f'directory:{u}', 8)}/{name}" for u in ("alice", "bob"))
    state = duckdb.connect(str(lake.state_db), read_only=True)
    shared = dict(state.execute("select path, shared from lineage.shared_paths").fetchall())
    state.close()
    assert shared["alice/feedback/2026-02-26_feedback.jsonl"] == f"{keyed('directory:alice', 8)}/feedback/2026-02-26_feedback.jsonl"
    [(outcome, published)] = [(p, v) for p, v in shared.items() if "outcomes" in p]
    assert published == f"…/{keyed('directory:carol', 8)}/2026-02-26_outcomes.jsonl", (outcome, published)
    for f in (lake.export_dir / "current").glob("[ta]*/*/*.parquet"):  # training and analytics
        assert not con.execute(f"select count(*) from read_parquet('{f}') t where contains(t::varchar, 'alice') "
                               "or contains(t::varchar, 'bob') or contains(t::varchar, 'carol')").fetchone()[0], f
