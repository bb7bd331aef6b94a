"""Privacy: `flywheel forget` and retention reach every layer (bronze, raw, staging, kept snapshots)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from conftest import held_open
from dagster_project.engine.accounting import check_accounting
from dagster_project.pipeline import run_pipeline
from dagster_project.publishing.snapshot import _versions, snapshots_dir, verify_snapshot
from transforms.pseudonyms import session_pseudonym

SESSION = "cc1b8853-f096-461f-9e33-d0fd51165a08"  # in the sample's interactions, feedback and ratings
PROJECT = Path(__file__).resolve().parents[1]


def bronze_bytes(settings) -> bytes:
    """Every bronze object decompressed, and every manifest segment."""
    root = settings.state_dir / "bronze"
    out = []
    for obj in sorted((root / "objects").glob("*/*.zst")):
        blob = obj.read_bytes()
        out.append(pa.decompress(blob[8:], int.from_bytes(blob[:8], "little"), "zstd", asbytes=True))
    out.extend(seg.read_bytes() for seg in sorted(root.glob("*/*.jsonl")))
    return b"\n".join(out)


def crash() -> None:
    """A forget's rebuild, killed."""
    raise RuntimeError("killed during the rebuild")


def state_query(settings, sql: str, params=()) -> list[tuple]:
    """``sql``'s rows in the state database, read as another process would (read-only)."""
    con = duckdb.connect(str(settings.state_db), read_only=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def state_rows_naming(settings, needles: list[str]) -> dict[str, int]:
    con = duckdb.connect(str(settings.state_db), read_only=True)
    try:
        found = {}
        for schema, table in con.execute("select schema_name, table_name from duckdb_tables()").fetchall():
            cond = " or ".join(f"contains(t::varchar, '{n}')" for n in needles)
            n = con.execute(f'select count(*) from "{schema}"."{table}" t where {cond}').fetchone()[0]
            if n:
                found[f"{schema}.{table}"] = n
        return found
    finally:
        con.close()


def snapshot_rows_naming(settings, needles: list[str]) -> dict[str, int]:
    con = duckdb.connect()
    found = {}
    for f in sorted(snapshots_dir(settings.export_dir).glob("*/*/*/*.parquet")):
        cond = " or ".join(f"contains(t::varchar, '{n}')" for n in needles)
        n = con.execute(f"select count(*) from read_parquet('{f}') t where {cond}").fetchone()[0]
        if n:
            found[str(f)] = n
    return found


def assert_one_schema_per_dataset(settings) -> None:
    """The files of each dataset directory of every kept snapshot share one schema, every column
    nullable (a scrubbed file's columns holding no NULL were REQUIRED: `pa.concat_tables` of the
    dataset failed)."""
    import pyarrow.parquet as pq

    directories = {f.parent for f in snapshots_dir(settings.export_dir).glob("*/*/*/*.parquet")}
    assert directories
    for directory in sorted(directories):
        schemas = {pq.read_schema(f) for f in directory.glob("*.parquet")}
        assert len(schemas) == 1, directory
        assert all(field.nullable for field in schemas.pop()), directory


def staging_content(settings) -> dict[str, list]:
    con = duckdb.connect(str(settings.state_db), read_only=True)
    try:
        tables = con.execute("select table_name from duckdb_tables() where schema_name = 'staging' "
                             "order by 1").fetchall()
        return {t: sorted(map(str, con.execute(
            f'select * exclude (ingest_run_id, observed_seq) from staging."{t}"'
            if "observed_seq" in [c[0] for c in con.execute(f'describe staging."{t}"').fetchall()]
            else f'select * from staging."{t}"').fetchall())) for (t,) in tables}
    finally:
        con.close()


def cli(settings, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLYWHEEL_RAW_DIR": str(settings.raw_dir), "FLYWHEEL_WAREHOUSE": str(settings.warehouse),
           "FLYWHEEL_EXPORT_DIR": str(settings.export_dir), "FLYWHEEL_AS_OF": settings.as_of.isoformat(),
           "FLYWHEEL_PSEUDONYM_KEY": settings.pseudonym_key, "PYTHONPATH": str(PROJECT)}
    return subprocess.run([sys.executable, "-m", "dagster_project.cli", *args], cwd=settings.warehouse.parent,
                          env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture
def lake(tmp_path):
    """The sample lake run once in tmp_path (a private snapshot: its warehouse views name its own files)."""
    import re
    import shutil

    from dagster_project.settings import Settings

    shutil.copytree(PROJECT / "data" / "raw", tmp_path / "raw")
    as_of = re.search(r"^SAMPLE_AS_OF := (\S+)$", (PROJECT / "Makefile").read_text(), re.M).group(1)
    settings = Settings.from_env({
        "FLYWHEEL_RAW_DIR": str(tmp_path / "raw"), "FLYWHEEL_WAREHOUSE": str(tmp_path / "warehouse.duckdb"),
        "FLYWHEEL_EXPORT_DIR": str(tmp_path / "exports"), "FLYWHEEL_AS_OF": as_of,
        "FLYWHEEL_PSEUDONYM_KEY": "test-key"})
    assert run_pipeline(settings).success
    return settings


@pytest.mark.slow
def test_forget_a_session_erases_it_from_every_layer_and_every_kept_snapshot(lake):
    settings = lake
    # The retrieval tool logged a query in the same session (and one in another).
    query = json.loads((settings.raw_dir / "eventlog" / "export.jsonl").read_text().splitlines()[1])
    mine = {**query, "source_id": "q_forget_me", "data": json.dumps(
        {**json.loads(query["data"]), "query_id": "q_forget_me", "session_id": SESSION})}
    other = {**query, "source_id": "q_keep_me", "data": json.dumps(
        {**json.loads(query["data"]), "query_id": "q_keep_me"})}
    (settings.raw_dir / "eventlog" / "more.jsonl").write_text(json.dumps(mine) + "\n" + json.dumps(other) + "\n")
    assert run_pipeline(settings).success  # a second kept snapshot that holds the session
    opaque = hashlib.sha256(SESSION.encode()).hexdigest()
    needles = [SESSION, opaque, session_pseudonym(settings.pseudonym_key.encode(), SESSION)]
    assert SESSION.encode() in bronze_bytes(settings) and opaque.encode() in bronze_bytes(settings)
    before = snapshot_rows_naming(settings, needles)
    assert len({Path(p).parts[-4] for p in before}) == 2  # both kept snapshots hold it
    kept_before = _versions(snapshots_dir(settings.export_dir))
    # what a failed check and a failed run said of the session: the run log is not rebuilt
    con = duckdb.connect(str(settings.state_db))
    con.execute("insert into ingest.validations by name select 'checked' as run_id, 'staging.interactions' as "
                "table_name, 'a check' as expectation, false as success, json_array(json_object('session_id', $s)) "
                "as sample_rows, 'e.g. ' || $s as detail", {"s": SESSION})
    con.execute("insert into ingest.runs by name select 'stopped' as run_id, 'incremental' as mode, 'failed' as status, "
                "now() as started_at, 'staging.interactions: a check; e.g. ' || $s as error", {"s": SESSION})
    con.close()

    done = cli(settings, "forget", "--session", SESSION)
    assert done.returncode == 0, done.stderr + done.stdout
    output = (done.stdout + done.stderr).strip()
    assert output.splitlines()[-1].startswith("forgot one session: bronze ") and SESSION not in output

    blob = bronze_bytes(settings)
    assert SESSION.encode() not in blob and opaque.encode() not in blob
    assert b"q_keep_me" in blob  # the other session's query stays
    assert state_rows_naming(settings, needles) == {}
    assert snapshot_rows_naming(settings, needles) == {}
    assert SESSION.encode() not in settings.state_db.read_bytes()
    versions = _versions(snapshots_dir(settings.export_dir))
    assert set(kept_before) < set(versions)
    for version in versions:
        verify_snapshot(settings.export_dir, version)
    assert_one_schema_per_dataset(settings)  # the scrubbed files too
    wh = duckdb.connect(os.path.realpath(settings.warehouse), read_only=True)
    assert wh.execute("select count(*) from staging.scry_queries where query_id = 'q_keep_me'").fetchone()[0] == 1
    wh.close()

    con = duckdb.connect(str(settings.state_db), read_only=True)
    check_accounting(con)
    assert con.execute("select sample_rows::varchar, detail from ingest.validations where run_id = 'checked'").fetchall() == [
        ('[{"session_id":"<erased>"}]', "e.g. <erased>")]
    assert con.execute("select error from ingest.runs where run_id = 'stopped'").fetchall() == [
        ("staging.interactions: a check; e.g. <erased>",)]
    published = str(settings.export_dir / "current" / "internal" / "ingest.validations" / "*.parquet")
    assert con.execute("select detail from read_parquet(?) where run_id = 'checked'", [published]).fetchall() == [
        ("e.g. <erased>",)]
    audit = con.execute("select kind, source, bronze_rows, raw_rows, staging_rows from ingest.erasures "
                        "where kind <> 'retention' order by source").fetchall()
    assert {a[1] for a in audit} == {"eventlog", "feedback", "interactions", "session_ratings"}
    assert all(a[0] == "session" and a[2] > 0 and a[3] == a[2] for a in audit)
    assert dict((a[1], a[2]) for a in audit)["eventlog"] == 1
    con.close()

    # The producer rewrites the file that still holds the session: it must not come back.
    path = next(p for p in (settings.raw_dir / "interactions").glob("*.jsonl") if SESSION.encode() in p.read_bytes())
    path.write_bytes(b"\n" + path.read_bytes())  # rewritten: read again from byte 0 as a new generation
    assert run_pipeline(settings).success
    assert state_rows_naming(settings, needles) == {}
    assert SESSION.encode() not in bronze_bytes(settings)
    incremental = staging_content(settings)
    assert run_pipeline(settings, full_refresh=True).success
    assert staging_content(settings) == incremental

    again = cli(settings, "forget", "--session", SESSION)
    refused = (again.stdout + again.stderr).strip()
    assert again.returncode == 1 and len(refused.splitlines()) == 1 and "nothing erased" in refused


def test_a_forget_that_empties_a_published_dataset_publishes_it_empty(tmp_path):
    """The erased person alone filled the training sets: the guard against a dataset published
    empty refused the forget's rebuild, and every retry of it, so the person stayed in the current
    snapshot. Emptied by an erasure, a dataset is published empty."""
    from conftest import dumps, interaction
    from dagster_project.settings import Settings

    session = "5b0c2f7e-1d0a-4c9e-9a51-0c6f3d1e2a10"
    (tmp_path / "raw" / "interactions").mkdir(parents=True)
    (tmp_path / "raw" / "interactions" / "interactions_2026-02-26_5b0c2f7e.jsonl").write_text("".join(
        dumps(interaction(i, session_id=session, input_text=f"question {i}?", output_text=f"answer {i}.",
                          user_feedback="positive")) + "\n" for i in range(1, 4)))
    settings = Settings.from_env({
        "FLYWHEEL_RAW_DIR": str(tmp_path / "raw"), "FLYWHEEL_WAREHOUSE": str(tmp_path / "warehouse.duckdb"),
        "FLYWHEEL_EXPORT_DIR": str(tmp_path / "exports"), "FLYWHEEL_AS_OF": "2026-04-03",
        "FLYWHEEL_PSEUDONYM_KEY": "test-key"})
    assert run_pipeline(settings).success
    needles = [session, session_pseudonym(settings.pseudonym_key.encode(), session)]
    assert snapshot_rows_naming(settings, needles)

    done = cli(settings, "forget", "--session", session)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (done.stdout + done.stderr).strip().splitlines()[-1].startswith("forgot one session: bronze 3 records")
    wh = duckdb.connect(os.path.realpath(settings.warehouse), read_only=True)
    assert [wh.execute(f"select count(*) from exports.{t}").fetchone()[0] for t in ("sft", "kto")] == [0, 0]
    wh.close()
    assert snapshot_rows_naming(settings, needles) == {} and state_rows_naming(settings, needles) == {}
    assert state_query(settings, "select count(*) from ingest.erasures") == [(1,)]


def test_a_shorter_retention_window_is_applied_only_when_confirmed(lake):
    """Retention erases from bronze, for good, what is older than its window (the producer's
    store is read again only when it changes): a window typed 18 for 180 erased 36 of the
    sample's 62 ratings with no word. A shorter window than the lake keeps is refused until
    confirmed; a longer one is not."""
    from dagster_project.settings import SettingsError

    settings = lake

    def ratings() -> int:
        return state_query(settings, "select count(*) from raw.session_ratings")[0][0]

    before = ratings()
    with pytest.raises(SettingsError) as refused:
        run_pipeline(replace(settings, session_retention_days=18))
    assert refused.value.problems == [
        "FLYWHEEL_SESSION_RETENTION_DAYS=18 is shorter than the 180 days the lake keeps: the run would erase from "
        "it, for good, the session ratings 18 to 180 days old; if that is meant, run once with "
        "FLYWHEEL_RETENTION_CONFIRM=18"]
    assert run_pipeline(replace(settings, session_retention_days=365)).success  # longer: nothing erased
    assert ratings() == before
    with pytest.raises(SettingsError):  # 180 is now shorter than what the lake keeps
        run_pipeline(settings)
    assert run_pipeline(replace(settings, session_retention_days=18, retention_confirm=18)).success
    assert 0 < ratings() < before
    assert run_pipeline(replace(settings, session_retention_days=18)).success  # the window now kept


def test_a_rating_that_expires_twice_is_counted_once(lake):
    """A record retention removed is counted once, by its hash: one that came back (a run as of
    an earlier day, or a longer window, read the producer's store again when it changed) and
    expired again was counted again by bronze's pass, each time (262 rows for 145 records after
    a hunt's 26 runs)."""
    import sqlite3
    from datetime import date

    def add_rating(n: int) -> None:
        store = sqlite3.connect(lake.raw_dir / "sessions" / "session_feedback.sqlite3")
        record = {"id": f"r-{n}", "session_id_opaque": "0" * 64, "user_id_or_null": None,
                  "recorded_at": "2026-07-31T12:00:00Z", "recorded_date": "2026-07-31", "label": "positive",
                  "turn_count_at_end": 3, "source": "cli_end", "schema_version": 2}
        store.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, "
                      "recorded_date, label, turn_count_at_end, source, schema_version, value) "
                      "values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [*record.values(), json.dumps(record)])
        store.commit()
        store.close()

    def counted() -> tuple[int, int]:
        return state_query(lake, "select (select sum(bronze_rows) from ingest.erasures where kind = 'retention' "
                                 "and source = 'session_ratings'), (select count(*) from lineage.expired_records)")[0]

    assert run_pipeline(replace(lake, as_of=date(2026, 8, 10))).success
    first = counted()
    assert first[0] == first[1] > 0
    add_rating(1)
    assert run_pipeline(replace(lake, as_of=date(2026, 8, 1))).success  # nine days' ratings back
    assert state_query(lake, "select count(*) from staging.session_ratings where recorded_at < '2026-02-11'")[0][0]
    assert run_pipeline(replace(lake, as_of=date(2026, 8, 10))).success  # and expired again
    assert state_query(lake, "select count(*) from staging.session_ratings where recorded_at < '2026-02-11'")[0][0] == 0
    assert counted() == first


def _expired_in_snapshots(settings, cutoff) -> dict[str, int]:
    """Per kept snapshot, its staging.session_ratings rows recorded before ``cutoff``."""
    reader, out = duckdb.connect(), {}
    for version in _versions(snapshots_dir(settings.export_dir)):
        files = [str(f) for f in (snapshots_dir(settings.export_dir) / version / "internal"
                                  / "staging.session_ratings").glob("*.parquet")]
        out[version] = reader.execute("select count(*) from read_parquet(?) where recorded_at < ?",
                                      [files, cutoff]).fetchone()[0]
    return out


def test_retention_reaches_every_export_directory_the_lake_published_to(lake, tmp_path):
    """As `flywheel forget`: ratings past a shorter window stayed in the snapshots a run with
    another FLYWHEEL_EXPORT_DIR had published."""
    other = replace(lake, export_dir=tmp_path / "exports2")
    assert run_pipeline(other).success
    cutoff = datetime(lake.as_of.year, lake.as_of.month, lake.as_of.day, tzinfo=timezone.utc) - timedelta(days=30)
    assert sum(_expired_in_snapshots(other, cutoff).values()) > 0
    assert run_pipeline(replace(lake, session_retention_days=30, retention_confirm=30)).success
    assert set(_expired_in_snapshots(other, cutoff).values()) == {0}
    assert set(_expired_in_snapshots(lake, cutoff).values()) == {0}


@pytest.mark.slow
def test_the_last_rating_expiring_empties_its_marts_and_leaves_no_snapshot_holding_it(lake, monkeypatch):
    """Once every session rating had passed the window, the ratings' marts emptied and the guard
    against publishing a dataset empty refused every run from then on: nothing new was published
    again, and the expired ratings stayed in the current snapshot, as the kept snapshots were
    scrubbed only after a publish. The ratings' marts may empty now, and the kept snapshots are
    scrubbed whether the run publishes or not."""
    settings = replace(lake, session_retention_days=1, retention_confirm=1)
    cutoff = datetime(lake.as_of.year, lake.as_of.month, lake.as_of.day, tzinfo=timezone.utc) - timedelta(days=1)
    assert sum(_expired_in_snapshots(lake, cutoff).values()) > 0
    monkeypatch.setenv("FLYWHEEL_PUBLISH_FAULT", "enospc:hashed")  # a publish that fails for another reason
    assert not run_pipeline(settings).success
    assert set(_expired_in_snapshots(lake, cutoff).values()) == {0}
    monkeypatch.delenv("FLYWHEEL_PUBLISH_FAULT")
    result = run_pipeline(replace(settings, retention_confirm=None))
    assert result.success, result.failures
    con = duckdb.connect(str(lake.warehouse), read_only=True)
    assert con.execute("select count(*) from marts.session_satisfaction").fetchone()[0] == 0
    assert con.execute("select count(*) from staging.session_ratings").fetchone()[0] == 0
    assert con.execute("select count(*) from exports.sft").fetchone()[0] > 0  # the rest published as ever
    con.close()
    assert set(_expired_in_snapshots(lake, cutoff).values()) == {0}


@pytest.mark.slow
def test_retention_removes_expired_ratings_from_every_layer_and_keeps_younger_ones(lake):
    settings = lake
    con = duckdb.connect(str(settings.state_db), read_only=True)
    times = [r[0] for r in con.execute("select recorded_at from staging.session_ratings order by 1").fetchall()]
    ids_by_age = con.execute("select id, recorded_at from raw.session_ratings order by recorded_at").fetchall()
    # A quarantined version has no readable time: it is kept, as every unreadable line is.
    unreadable = "\n".join(r[0] for r in con.execute(
        "select raw_text from ingest.quarantine where source = 'session_ratings'").fetchall())
    con.close()
    middle = times[len(times) // 2]
    run_day = settings.as_of
    days = (datetime(run_day.year, run_day.month, run_day.day, tzinfo=timezone.utc) - middle).days
    cutoff = datetime(run_day.year, run_day.month, run_day.day, tzinfo=timezone.utc) - timedelta(days=days)
    expired = [i for i, at in ids_by_age if at < cutoff and i not in unreadable]
    kept = [i for i, at in ids_by_age if at >= cutoff and i not in expired]
    assert expired and kept

    passes = state_query(settings, "select count(*) from ingest.erasures")[0][0]  # (ratings expired when read)
    assert run_pipeline(replace(settings, session_retention_days=days, retention_confirm=days)).success
    blob = bronze_bytes(settings)
    assert not [i for i in expired if i.encode() in blob]
    assert all(i.encode() in blob for i in kept)
    con = duckdb.connect(str(settings.state_db), read_only=True)
    assert con.execute("select count(*) from raw.session_ratings where recorded_at < ?", [cutoff]).fetchone()[0] == 0
    assert con.execute("select count(*) from staging.session_ratings where recorded_at >= ?", [cutoff]).fetchone()[0] > 0
    check_accounting(con)
    audit = con.execute("select source, bronze_rows, raw_rows, staging_rows, snapshot_rows from ingest.erasures "
                        f"where kind = 'retention' order by erased_at offset {passes}").fetchall()
    con.close()
    # the ingest step's row counts bronze, raw and the staging rows its staging step then lost
    # (staging_rows was 0); the publish's row, the kept snapshots' copies, is the source's too
    # (it was a source named "snapshots")
    (source, bronze_rows, raw_rows, staging_rows, _), (later, *_, snapshot_rows) = audit
    assert source == later == "session_ratings"
    assert bronze_rows == raw_rows == len([i for i, at in ids_by_age if at < cutoff])
    assert staging_rows == len([at for at in times if at < cutoff]) > 0 and snapshot_rows > 0
    reader = duckdb.connect()
    for version in _versions(snapshots_dir(settings.export_dir)):
        verify_snapshot(settings.export_dir, version)
        files = list((snapshots_dir(settings.export_dir) / version / "internal" / "staging.session_ratings").glob("*"))
        assert files
        old = reader.execute("select count(*) from read_parquet(?) where recorded_at < ?",
                             [[str(f) for f in files], cutoff]).fetchone()[0]
        young = reader.execute("select count(*) from read_parquet(?) where recorded_at >= ?",
                               [[str(f) for f in files], cutoff]).fetchone()[0]
        assert old == 0 and young > 0

    # Nothing more expired: the next run rewrites nothing.
    objects = sorted(p.name for p in (settings.state_dir / "bronze" / "objects").glob("*/*"))
    assert run_pipeline(replace(settings, session_retention_days=days, retention_confirm=days)).success
    assert sorted(p.name for p in (settings.state_dir / "bronze" / "objects").glob("*/*")) == objects


@pytest.mark.parametrize("stopped_in", ["the newest snapshot", "an older snapshot"])
def test_a_snapshot_scrub_stopped_half_way_is_finished_with_a_true_manifest_and_no_old_object(lake, monkeypatch,
                                                                                              stopped_in):
    """A kept snapshot's scrub (retention, `flywheel forget`) replaced its files one by one and
    wrote its manifest after them. Stopped in between (the export disk full), the next scrub
    found the replaced file clean and skipped it: the manifest went on naming the old object,
    which kept the removed rows for good, and verify_snapshot failed on that snapshot. Two kept
    snapshots share the file: the one stopped in may be the second to be scrubbed."""
    from dagster_project import privacy
    from dagster_project.publishing import parquet

    legacy = next((lake.raw_dir / "interactions").glob("*_interactions.jsonl"))
    first = json.loads(legacy.read_text(encoding="utf-8").splitlines()[0])
    with legacy.open("a", encoding="utf-8") as fh:  # a second snapshot, sharing the ratings' files
        fh.write(json.dumps({**first, "user_input": "one more"}) + "\n")
    assert run_pipeline(lake).success
    snaps = snapshots_dir(lake.export_dir)
    newest, older = _versions(snaps)[:2]
    files = sorted((snaps / newest / "internal" / "staging.session_ratings").glob("*.parquet"))
    assert all(os.path.samefile(f, snaps / older / f.relative_to(snaps / newest)) for f in files)
    reader = duckdb.connect()
    middle = reader.execute("select quantile_disc(recorded_at, 0.5)::varchar from read_parquet(?)",
                            [[str(f) for f in files]]).fetchone()[0]
    where = f"recorded_at < '{middle}'::timestamptz"
    condition = lambda table, columns: where if table == "staging.session_ratings" else None  # noqa: E731
    fsync_dir = parquet.fsync_dir
    target = snaps / (newest if stopped_in == "the newest snapshot" else older)

    def disk_full(path):  # the scrub of ``target``'s first file, stopped
        if Path(path).is_relative_to(target):
            raise OSError(28, "No space left on device")
        fsync_dir(path)

    monkeypatch.setattr(parquet, "fsync_dir", disk_full)
    with pytest.raises(OSError, match="No space left"):
        privacy.scrub_snapshots(lake.export_dir, condition)
    monkeypatch.setattr(parquet, "fsync_dir", fsync_dir)
    privacy.scrub_snapshots(lake.export_dir, condition)
    for version in _versions(snaps):
        verify_snapshot(lake.export_dir, version)
        left = sorted((snaps / version / "internal" / "staging.session_ratings").glob("*.parquet"))
        assert reader.execute(f"select count(*) from read_parquet(?) where {where}",
                              [[str(f) for f in left]]).fetchone()[0] == 0
    for obj in (snaps / ".objects").glob("*.parquet"):
        columns = [c[0] for c in reader.execute(f"describe select * from read_parquet('{obj}')").fetchall()]
        if "recorded_at" in columns and "session_id_opaque" in columns:
            assert reader.execute(f"select count(*) from read_parquet('{obj}') where {where}").fetchone()[0] == 0


@pytest.mark.slow
def test_a_forget_on_a_full_disk_says_so_in_one_line_and_leaves_no_partial_copy(lake):
    """A write that fails (here the file-size limit: the state database's compaction copy cannot
    grow past half its size) was reported as "another process holds it", or as a traceback; and
    the compaction's partial copy, as big as what it had copied, stayed on the full disk."""
    import resource
    import signal

    limit = lake.state_db.stat().st_size // 2

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG), as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "FLYWHEEL_RAW_DIR": str(lake.raw_dir), "FLYWHEEL_WAREHOUSE": str(lake.warehouse),
           "FLYWHEEL_EXPORT_DIR": str(lake.export_dir), "FLYWHEEL_AS_OF": lake.as_of.isoformat(),
           "FLYWHEEL_PSEUDONYM_KEY": lake.pseudonym_key, "PYTHONPATH": str(PROJECT)}
    failed = subprocess.run([sys.executable, "-m", "dagster_project.cli", "forget", "--session", SESSION],
                            cwd=lake.warehouse.parent, env=env, capture_output=True, text=True, timeout=900,
                            preexec_fn=limited)
    assert failed.returncode == 1, failed.stderr
    [said] = [line for line in failed.stdout.splitlines() + failed.stderr.splitlines() if line.startswith("error:")]
    assert said.startswith("error: the erasure stopped: ") and said.endswith(
        f"fix the cause and run `flywheel forget --session ...` again with the same id to finish"), said
    assert "Traceback" not in failed.stderr
    assert not list(lake.state_dir.glob("*.compact*"))
    assert cli(lake, "forget", "--session", SESSION).returncode == 0
    assert SESSION.encode() not in lake.state_db.read_bytes()


@pytest.mark.slow
def test_forgetting_a_short_id_takes_only_the_rows_it_names(lake):
    """A user id of one character ("7") is in the text of nearly every row: the kept snapshots
    were scrubbed of every row containing it (the interactions and training sets emptied) and
    the run log likewise. An id under 8 characters is matched only where a value is the id."""
    import sqlite3

    settings = lake
    store = next((settings.raw_dir / "sessions").glob("*.sqlite3"))
    conn = sqlite3.connect(store)
    value = json.loads(conn.execute("select value from session_feedback order by recorded_at desc limit 1").fetchone()[0])
    value.update(id="rating-of-user-7", user_id_or_null="7")
    conn.execute("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, recorded_date, "
                 "label, turn_count_at_end, source, value) values (?,?,?,?,?,?,?,?,?)",
                 (value["id"], value["session_id_opaque"], "7", value["recorded_at"], value.get("recorded_date"),
                  value["label"], value.get("turn_count_at_end"), value["source"], json.dumps(value)))
    conn.commit()
    conn.close()
    assert run_pipeline(settings).success

    def counts():
        wh = duckdb.connect(os.path.realpath(settings.warehouse), read_only=True)
        try:
            return {t: wh.execute(f"select count(*) from {t}").fetchone()[0]
                    for t in ("staging.interactions", "exports.sft", "exports.kto", "staging.session_ratings")}
        finally:
            wh.close()

    before = counts()
    assert min(before.values()) > 0
    done = cli(settings, "forget", "--user", "7")
    assert done.returncode == 0, done.stderr + done.stdout
    assert counts() == {**before, "staging.session_ratings": before["staging.session_ratings"] - 1}
    for version in _versions(snapshots_dir(settings.export_dir)):  # every kept snapshot reads whole
        verify_snapshot(settings.export_dir, version)


def test_a_run_under_another_pseudonym_key_than_the_erasure_is_refused(lake):
    """Erased subjects are kept as HMACs under the pseudonym key: a run under another key (a shell
    with FLYWHEEL_PSEUDONYM_KEY set, a daemon without it) matched none of them, and an erased
    session came back with its producer's file. Such a run is refused before anything is done."""
    settings = lake
    done = cli(settings, "forget", "--session", SESSION)
    assert done.returncode == 0, done.stderr + done.stdout
    other = replace(settings, pseudonym_key="another-key")
    path = settings.state_dir / "erased_subjects.json"
    for command in (["run", "--quiet"], ["forget", "--user", "u_someone"]):
        refused = cli(other, *command)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert (refused.stdout + refused.stderr).strip().splitlines()[-1] == (
            f"error: the pseudonym key in use (FLYWHEEL_PSEUDONYM_KEY) is not the key the erased subjects in "
            f"{path} were recorded with: set FLYWHEEL_PSEUDONYM_KEY to the key they were erased under (else an "
            "erased session or user would come back)")
    unset = cli(replace(settings, pseudonym_key=""), "run", "--quiet")  # nor a key file: none is created
    assert unset.returncode == 2 and "is not the key the erased subjects" in unset.stdout + unset.stderr
    assert not settings.pseudonym_key_file.exists()
    assert cli(settings, "run", "--quiet").returncode == 0


def test_a_forget_its_run_would_refuse_erases_nothing_and_one_stopped_half_way_is_finished_again(lake):
    """What the rebuild's preflight refuses (the raw root unmounted) is refused before anything is
    erased. A forget stopped after erasing from bronze (another process had the state database
    open) says to run it again, and that finishes it: before, the retry found nothing left in
    bronze to erase ("nothing erased"), and the subject stayed in raw, staging and every snapshot."""
    settings = lake
    settings.raw_dir.rename(settings.raw_dir.with_name("raw.away"))
    refused = cli(settings, "forget", "--session", SESSION)
    assert refused.returncode == 2 and (refused.stdout + refused.stderr).strip().splitlines()[-1].startswith(
        f"error: FLYWHEEL_RAW_DIR={settings.raw_dir} does not exist")
    assert SESSION.encode() in bronze_bytes(settings)
    settings.raw_dir.with_name("raw.away").rename(settings.raw_dir)

    with held_open(settings.state_db, read_only=True):
        stopped = cli(settings, "forget", "--session", SESSION)
    [line] = (stopped.stdout + stopped.stderr).strip().splitlines()
    assert stopped.returncode == 1 and line.startswith(f"error: {settings.state_db}: another process holds it (")
    assert line.endswith("close that connection and run `flywheel forget --session ...` again with the same id to "
                         "finish")
    assert SESSION.encode() not in bronze_bytes(settings) and snapshot_rows_naming(settings, [SESSION])

    again = cli(settings, "forget", "--session", SESSION)
    assert again.returncode == 0, again.stdout + again.stderr
    assert snapshot_rows_naming(settings, [SESSION]) == {} and state_rows_naming(settings, [SESSION]) == {}
    assert " raw 0 rows" not in again.stdout  # counted before the rebuild, as on a first attempt


def test_a_source_disabled_in_the_sources_file_is_still_forgotten_and_its_lake_kept(lake, monkeypatch):
    """A source disabled in the sources file (its files not read) was skipped by `forget` and by
    retention: the erased session's feedback stayed in bronze, raw and staging, and came back in
    a published snapshot. Its rows are kept (and published) while it is disabled, and erasure
    reaches them."""
    settings = lake
    sources = settings.warehouse.parent / "sources.yml"
    sources.write_text("sources:\n  feedback:\n    enabled: false\n")
    monkeypatch.setenv("FLYWHEEL_SOURCES", str(sources))

    def linked() -> tuple[int, int]:
        return state_query(settings, "select (select count(*) from staging.feedback), (select count(*) from "
                           "staging.feedback where record_id in (select id from staging.interactions where session_id = ?))",
                           [SESSION])[0]

    total, mine = linked()
    assert mine > 0
    assert cli(settings, "run", "--quiet").returncode == 0
    assert linked() == (total, mine)  # disabled: kept as the lake holds it
    done = cli(settings, "forget", "--session", SESSION)
    assert done.returncode == 0, done.stdout + done.stderr
    assert linked() == (total - mine, 0)
    assert "across 3 source(s)" in done.stdout + done.stderr  # interactions, feedback, session ratings
    assert snapshot_rows_naming(settings, [SESSION]) == {}


def test_forget_scrubs_every_export_directory_the_lake_published_to(lake, tmp_path):
    """A run given another FLYWHEEL_EXPORT_DIR (one shell's setting) published a whole snapshot
    there, without a word; `flywheel forget`, run with the usual setting, scrubbed only its own
    directory and said the session was forgotten while the other held 62 of its rows."""
    from dagster_project import privacy
    from dagster_project.sources import builtin_sources

    other = replace(lake, export_dir=tmp_path / "exports2")
    result = run_pipeline(other)
    assert result.success
    assert any(f"FLYWHEEL_EXPORT_DIR={other.export_dir} is not the export directory this lake last published to "
               f"({lake.export_dir})" in w for w in result.step_warnings), result.step_warnings
    assert snapshot_rows_naming(other, [SESSION])
    assert not any("is not the export directory" in w for w in run_pipeline(other).step_warnings)  # said once
    (tmp_path / "link").symlink_to(tmp_path)  # one directory by two paths: one directory
    assert replace(lake, export_dir=tmp_path / "link" / "exports2").export_dirs() == [other.export_dir, lake.export_dir]
    privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: run_pipeline(lake, full_refresh=True))
    assert snapshot_rows_naming(lake, [SESSION]) == {} and snapshot_rows_naming(other, [SESSION]) == {}


def test_an_interrupted_forget_is_finished_by_running_it_again(lake):
    from dagster_project import privacy
    from dagster_project.sources import builtin_sources

    with pytest.raises(RuntimeError):
        privacy.forget(lake, "session", SESSION, builtin_sources(), crash)
    assert SESSION.encode() not in bronze_bytes(lake)
    [pending_file] = (lake.state_dir / privacy.PENDING_DIR).glob("*.json")
    pending = pending_file.read_text()
    assert SESSION not in pending
    assert snapshot_rows_naming(lake, [SESSION])  # not finished yet

    done = privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: run_pipeline(lake, full_refresh=True))
    assert done.rows["interactions"]["bronze"] > 0 and done.rows["interactions"]["raw"] > 0
    assert snapshot_rows_naming(lake, [SESSION]) == {} and state_rows_naming(lake, [SESSION]) == {}
    assert not pending_file.exists() and not privacy.unfinished_erasures(lake)
    with pytest.raises(privacy.NothingToErase):
        privacy.forget(lake, "session", SESSION, builtin_sources(), crash)


OTHER = "c29e9a50-2bbd-4713-86e6-2b9105a1294e"  # another sample session with feedback on its interactions


def _linked_feedback(settings, ids: list[str]) -> int:
    return state_query(settings, "select count(*) from staging.feedback where record_id in (select unnest(?))",
                       [ids])[0][0]


def _interaction_ids(settings, session: str) -> list[str]:
    return [r[0] for r in state_query(settings, "select id from staging.interactions where session_id = ?", [session])]


def test_a_forget_killed_between_two_sources_is_finished_by_running_it_again(lake, monkeypatch):
    """Each source's bronze erasure commits on its own. A forget killed after the interactions
    were erased and before the feedback: running it again found no interaction of the session,
    so it carried no interaction id, and the feedback on them stayed in every layer for good
    (with no pending file, nothing said the erasure was unfinished)."""
    from dagster_project import privacy
    from dagster_project.sources import builtin_sources

    ids = _interaction_ids(lake, SESSION)
    assert _linked_feedback(lake, ids) > 0
    scrub = privacy.scrub_bronze

    def killed_at_feedback(settings, spec, matcher, **hooks):
        if spec.name == "feedback":
            raise RuntimeError("killed")
        return scrub(settings, spec, matcher, **hooks)

    monkeypatch.setattr(privacy, "scrub_bronze", killed_at_feedback)
    with pytest.raises(RuntimeError):
        privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: None)
    monkeypatch.setattr(privacy, "scrub_bronze", scrub)
    assert privacy.unfinished_erasures(lake)  # said by every run and by `flywheel status`
    assert any("an erasure (`flywheel forget`) was interrupted" in w for w in run_pipeline(lake).warnings)
    done = privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: run_pipeline(lake, full_refresh=True))
    assert done.rows["interactions"]["bronze"] > 0 and done.rows["feedback"]["bronze"] > 0
    assert _linked_feedback(lake, ids) == 0
    assert snapshot_rows_naming(lake, [SESSION, *ids]) == {} and not privacy.unfinished_erasures(lake)


def test_a_forget_killed_as_it_saves_the_subjects_keys_is_said_unfinished(lake, monkeypatch):
    """The keys file was written before the pending one: a forget killed between the two left
    the subject in bronze and every layer with nothing saying the erasure was unfinished."""
    from dagster_project import privacy
    from dagster_project.sources import builtin_sources

    save = privacy._save_keys

    def killed_after(settings, keys):
        save(settings, keys)
        raise RuntimeError("killed")

    monkeypatch.setattr(privacy, "_save_keys", killed_after)
    with pytest.raises(RuntimeError):
        privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: None)
    monkeypatch.setattr(privacy, "_save_keys", save)
    assert privacy.unfinished_erasures(lake)
    done = privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: run_pipeline(lake, full_refresh=True))
    assert done.rows["interactions"]["bronze"] > 0
    assert snapshot_rows_naming(lake, [SESSION]) == {} and not privacy.unfinished_erasures(lake)


def test_two_unfinished_forgets_are_each_finished_and_counted_without_what_came_meanwhile(lake):
    """One pending file served every erasure: a second forget finishing removed the first's,
    which could then never be finished (its session stayed in the kept snapshots). And the rows
    removed from raw and staging were counted as a difference across the rebuild, which reads
    what producers appended meanwhile: ``raw -449 rows``."""
    from dagster_project import privacy
    from dagster_project.sources import builtin_sources

    mine = len(_interaction_ids(lake, SESSION))
    [(mine_raw,)] = state_query(lake, "select count(*) from raw.interactions where session_id = ?", [SESSION])
    with pytest.raises(RuntimeError):
        privacy.forget(lake, "session", SESSION, builtin_sources(), crash)
    other_ids = _interaction_ids(lake, OTHER)
    privacy.forget(lake, "session", OTHER, builtin_sources(), lambda: run_pipeline(lake, full_refresh=True))
    assert _linked_feedback(lake, other_ids) == 0 and len(privacy.unfinished_erasures(lake)) == 1

    def rebuild_with_new_lines() -> None:  # a producer appends while the rebuild runs
        day = next((lake.raw_dir / "interactions").glob("interactions_*.jsonl"))
        line = json.loads(day.read_text().splitlines()[0])
        with day.open("a") as fh:
            for i in range(50):
                fh.write(json.dumps({**line, "id": f"appended-{i:04d}"}) + "\n")
        assert run_pipeline(lake, full_refresh=True).success

    done = privacy.forget(lake, "session", SESSION, builtin_sources(), rebuild_with_new_lines)
    assert (done.rows["interactions"]["raw"], done.rows["interactions"]["staging"]) == (mine_raw, mine)  # (a version twice)
    assert snapshot_rows_naming(lake, [SESSION]) == {} and not privacy.unfinished_erasures(lake)


def test_a_forget_killed_at_any_later_point_is_finished_once_and_leaves_no_old_object(lake, monkeypatch):
    """Killed after a source's segments were rewritten but before its old objects were
    collected, the subject's old object stayed (no later scrub replaced anything, so none
    collected it); killed while the state was compacted, a retry recorded the erasure twice; a
    forget still running was reported as interrupted."""
    from dagster_project import privacy
    from dagster_project.sources import builtin_sources

    collect, scrub = privacy.collect_objects, privacy.scrub_bronze

    def killed(settings):
        raise RuntimeError("killed")

    def scrub_without_collecting(*args, **kwargs):
        monkeypatch.setattr(privacy, "collect_objects", lambda settings: 0)
        try:
            return scrub(*args, **kwargs)
        finally:
            monkeypatch.setattr(privacy, "collect_objects", collect)

    monkeypatch.setattr(privacy, "collect_objects", killed)  # the first source's collection
    with pytest.raises(RuntimeError):
        privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: None)
    monkeypatch.setattr(privacy, "collect_objects", collect)
    monkeypatch.setattr(privacy, "scrub_bronze", scrub_without_collecting)  # no later scrub collects
    compact = privacy.compact_state
    monkeypatch.setattr(privacy, "compact_state", killed)
    with pytest.raises(RuntimeError):
        privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: run_pipeline(lake, full_refresh=True))
    assert SESSION.encode() not in bronze_bytes(lake)
    monkeypatch.setattr(privacy, "compact_state", compact)
    key = privacy._key(privacy._secret(lake), "session", SESSION)
    with privacy._subject_lock(lake, key):  # a forget of it running
        assert privacy.unfinished_erasures(lake) == []
    assert len(privacy.unfinished_erasures(lake)) == 1
    privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: pytest.fail("rebuilt again"))
    assert state_query(lake, "select source, count(*) from ingest.erasures where kind = 'session' "
                             "group by all having count(*) > 1") == []
    assert not privacy.unfinished_erasures(lake)


def test_an_earlier_versions_pending_erasure_is_finished_with_its_counts(lake):
    """An earlier version kept one ``erase_pending.json`` with no phase, its raw and staging
    counts the tables' totals before the rebuild (the rows left after it to be taken away)."""
    from dagster_project import privacy
    from dagster_project.sources import builtin_sources

    con = duckdb.connect(str(lake.state_db), read_only=True)
    mine_raw = con.execute("select count(*) from raw.interactions where session_id = ?", [SESSION]).fetchone()[0]
    totals = {name: (con.execute(f"select count(*) from raw.{name}").fetchone()[0],
                     con.execute(f"select count(*) from staging.{name}").fetchone()[0])
              for name in ("interactions", "feedback", "session_ratings", "eventlog")}
    con.close()
    with pytest.raises(RuntimeError):
        privacy.forget(lake, "session", SESSION, builtin_sources(), crash)
    [new] = (lake.state_dir / privacy.PENDING_DIR).glob("*.json")
    pending = json.loads(new.read_text())
    for name, c in pending["rows"].items():
        c["raw"], c["staging"] = totals[name]
    del pending["phase"]
    (lake.state_dir / privacy.PENDING_FILE).write_text(json.dumps(pending))
    new.unlink()
    done = privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: run_pipeline(lake, full_refresh=True))
    assert done.rows["interactions"]["raw"] == mine_raw
    assert not (lake.state_dir / privacy.PENDING_FILE).exists() and not privacy.unfinished_erasures(lake)


def test_a_document_path_naming_a_retrieval_session_is_shared_under_its_pseudonym(lake):
    """The retrieval tool commits its session notes as `layer/sessions/<session id>.md`: the marts
    listing missed and retrieved files published 15 of the sample's 17 session ids so, which the
    privacy gate (values equal to an id) let through. A shared document path names the session
    by its pseudonym, as `session_pseudonym` does; `flywheel forget` still finds it in the kept
    snapshots."""
    settings = lake
    con = duckdb.connect(str(settings.state_db), read_only=True)
    sessions = [s for (s,) in con.execute("select distinct session_id from staging.session_windows order by 1").fetchall()]
    noted = [s for (s,) in con.execute("select distinct file_path from marts.missed_files").fetchall()]
    con.close()
    assert len(sessions) >= 10 and any(f"layer/sessions/{s}.md" in noted for s in sessions)  # what is at stake

    def shared_rows_naming(needles: list[str]) -> dict[str, int]:
        found = {}
        for f in snapshots_dir(settings.export_dir).glob("*/*/*/*.parquet"):
            if f.parts[-3] == "internal":
                continue
            cond = " or ".join(f"contains(t::varchar, '{n}')" for n in needles)
            if n := duckdb.connect().execute(f"select count(*) from read_parquet('{f}') t where {cond}").fetchone()[0]:
                found[f"{f.parts[-3]}/{f.parts[-2]}"] = found.get(f"{f.parts[-3]}/{f.parts[-2]}", 0) + n
        return found

    assert shared_rows_naming(sessions) == {}
    key = settings.pseudonym_key.encode()
    wh = duckdb.connect(os.path.realpath(settings.warehouse), read_only=True)
    published = {p for (p,) in wh.execute("select file_path from marts.missed_files").fetchall()}
    sid = next(s for s in sessions if f"layer/sessions/{s}.md" in noted)
    assert f"layer/sessions/{session_pseudonym(key, sid)}.md" in published
    # the same pseudonym the session's queries are published under
    assert wh.execute("select count(*) from marts.retrieval_query_metrics where session_pseudonym = ?",
                      [session_pseudonym(key, sid)]).fetchone()[0] > 0
    wh.close()
    kept = _versions(snapshots_dir(settings.export_dir))

    done = cli(settings, "forget", "--session", sid)
    assert done.returncode == 0, done.stderr + done.stdout
    assert shared_rows_naming([session_pseudonym(key, sid)]) == {}
    assert set(kept) < set(_versions(snapshots_dir(settings.export_dir)))  # the kept one scrubbed too


@pytest.mark.slow
def test_a_forget_whose_snapshot_scrub_stopped_half_way_counts_each_removed_row_once(lake, tmp_path, monkeypatch):
    """A kept snapshot's scrub stopped after its first file (the export disk full) and finished
    by running the forget again recorded only the rows the retry removed (41 of 42 in a hunt):
    what each file lost is kept with the unfinished erasure. Counted as a forget never stopped
    counts, on a copy of the same lake."""
    from conftest import copy_run
    from dagster_project import privacy
    from dagster_project.publishing import parquet
    from dagster_project.sources import builtin_sources

    whole = copy_run(lake, tmp_path / "whole")
    privacy.forget(whole, "session", SESSION, builtin_sources(), lambda: run_pipeline(whole, full_refresh=True))
    counted = "select sum(snapshot_rows), max(snapshots) from ingest.erasures where kind = 'session'"
    expected = state_query(whole, counted)
    assert expected[0][0] >= 2, expected  # rows in more than one file: a stop can fall between them

    target = snapshots_dir(lake.export_dir) / _versions(snapshots_dir(lake.export_dir))[0]
    fsync_dir, calls = parquet.fsync_dir, []

    def disk_full_at_the_second_file(path):  # a file's manifest, then its replacement; then the next's
        if Path(path).is_relative_to(target):
            calls.append(path)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
        fsync_dir(path)

    monkeypatch.setattr(parquet, "fsync_dir", disk_full_at_the_second_file)
    with pytest.raises(OSError, match="No space left"):
        privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: run_pipeline(lake, full_refresh=True))
    assert len(calls) == 3
    monkeypatch.setattr(parquet, "fsync_dir", fsync_dir)
    privacy.forget(lake, "session", SESSION, builtin_sources(), lambda: run_pipeline(lake, full_refresh=True))
    assert state_query(lake, counted) == expected
    for version in _versions(snapshots_dir(lake.export_dir)):
        verify_snapshot(lake.export_dir, version)


@pytest.mark.slow
def test_forgetting_a_retrieval_session_by_its_id_with_an_adapter_forgets_the_whole_session(lake):
    """The retrieval tool names a session `20260301-052928` in its queries and uses, and with its
    adapter (`20260301-052928-claude`) in tags and commits: forgetting the suffixed id erased only
    the records written with the suffix, and said it had forgotten the session."""
    settings = lake
    suffixed = state_query(settings, "select distinct regexp_extract(data ->> 'session_id', '^\\d{8}-\\d{6}-[A-Za-z]+$') "
                                     "from staging.eventlog where regexp_matches(data ->> 'session_id', "
                                     "'^\\d{8}-\\d{6}-[A-Za-z]+$') order by 1 limit 1")
    [(named,)] = suffixed
    base = named.rsplit("-", 1)[0]
    assert state_rows_naming(settings, [base])  # the session's records, with and without the suffix
    done = cli(settings, "forget", "--session", named)
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"forgetting session {base}, whose id {named} names it with its adapter" in done.stderr
    assert state_rows_naming(settings, [base]) == {}
    assert snapshot_rows_naming(settings, [base, session_pseudonym(settings.pseudonym_key.encode(), base)]) == {}
