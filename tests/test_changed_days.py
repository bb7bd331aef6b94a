"""The snapshot re-hashes only the event days a run's builds changed (``versions.record_changes``,
``parquet.replan``), and publishes exactly what hashing every row would."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from conftest import dumps, interaction, write_lines
from dagster_project import versions
from dagster_project.pipeline import run_pipeline
from dagster_project.publishing import SNAPSHOTS, read_manifest
from dagster_project.publishing.parquet import plan, replan
from dagster_project.publishing.snapshot import RUN_LOG, datasets

KEY = "test-key"
DAYS = ("2026-02-24", "2026-02-25", "2026-02-26")


@pytest.fixture
def settings(tmp_path):
    from dagster_project.settings import Settings

    (tmp_path / "raw").mkdir()
    return Settings.from_env({"FLYWHEEL_RAW_DIR": str(tmp_path / "raw"),
                              "FLYWHEEL_WAREHOUSE": str(tmp_path / "warehouse.duckdb"),
                              "FLYWHEEL_EXPORT_DIR": str(tmp_path / "exports"), "FLYWHEEL_AS_OF": "2026-03-01",
                              "FLYWHEEL_PSEUDONYM_KEY": KEY, "FLYWHEEL_SESSION_RETENTION_DAYS": "3650"})


def day_file(settings, day: str, ids: range, **overrides) -> None:
    write_lines(settings.raw_dir / "interactions" / f"interactions_{day}_{ids.start:08d}.jsonl",
                [dumps(interaction(i, **{"timestamp": f"{day}T10:{i % 60:02d}:00", "input_text": f"question {i}",
                                         "output_text": f"answer {i}",
                                         "user_feedback": ("positive", "negative")[i % 2], **overrides}))
                 for i in ids])


def assert_published_as_hashing_all_would(settings) -> None:
    """Every dataset of the current snapshot has the files a plan of every row gives."""
    from transforms.pseudonyms import register

    manifest = read_manifest(settings.export_dir)
    objects = settings.export_dir / SNAPSHOTS / ".objects"
    con = duckdb.connect(str(settings.state_db), read_only=True)
    try:
        con.execute("set TimeZone = 'UTC'")
        register(con, KEY.encode())
        for d in datasets(con):
            if d.table in RUN_LOG:
                continue
            fresh = plan(con, d, objects)
            files = manifest["datasets"][d.path]["files"]
            assert [(f["name"], f["object"], f["rows"]) for f in files] == \
                [(p.name, p.key, p.rows) for p in fresh.parts], d.path
    finally:
        con.close()


def recorded_days(settings, table: str) -> list[str] | None:
    con = duckdb.connect(str(settings.state_db), read_only=True)
    try:
        row = con.execute("select c.days from lineage.table_changes c join lineage.table_versions v "
                          "on v.table_name = c.table_name and v.version = c.version where c.table_name = ?",
                          [table]).fetchone()
        return row and list(row[0])
    except duckdb.CatalogException:  # no build has recorded any yet
        return None
    finally:
        con.close()


@pytest.mark.slow
def test_a_run_rehashes_only_the_days_staging_changed_and_publishes_what_hashing_all_would(settings):
    # over 5,000 rows: staging.interactions is cut by day
    for n, day in enumerate(DAYS):
        day_file(settings, day, range(n * 2000, (n + 1) * 2000))
    assert run_pipeline(settings).success
    assert recorded_days(settings, "staging.interactions") is None  # a rebuild says nothing
    before = read_manifest(settings.export_dir)["datasets"]["internal/staging.interactions"]

    # a new day, and a later version of one interaction of the 24th that moves it to the 27th
    day_file(settings, "2026-02-27", range(9000, 9010))
    day_file(settings, "2026-02-27", range(17, 18), output_text="a better answer")
    result = run_pipeline(settings)
    assert result.success, result.failures
    assert recorded_days(settings, "staging.interactions") == ["2026-02-24", "2026-02-27"]
    # the marts and training sets built from it incrementally say so too
    for table in ("marts.interaction_labels", "exports.kto"):
        assert recorded_days(settings, table) == ["2026-02-24", "2026-02-27"], table
    assert recorded_days(settings, "exports.sft") == ["2026-02-27"]  # 17 is a negative: never in sft
    after = read_manifest(settings.export_dir)["datasets"]["internal/staging.interactions"]
    assert after["table_version"] != before["table_version"]
    old = {f["name"]: f["object"] for f in before["files"]}
    new = {f["name"]: f["object"] for f in after["files"]}
    assert new["part-2026-02-25.parquet"] == old["part-2026-02-25.parquet"]  # never read again
    assert new["part-2026-02-24.parquet"] != old["part-2026-02-24.parquet"]  # lost interaction 17
    assert "part-2026-02-27.parquet" in new and "part-2026-02-27.parquet" not in old
    assert_published_as_hashing_all_would(settings)


def test_the_days_of_builds_in_between_add_up_and_a_build_that_did_not_say_breaks_the_chain(tmp_path):
    con = duckdb.connect(str(tmp_path / "state.duckdb"))
    table = "staging.t"

    def build(days):
        before = versions.get(con, table)
        version = versions.bump(con, table, "run")
        versions.record_changes(con, table, version, before, days)
        return version

    first = build(None)
    assert versions.changed_days(con, table, since=first) == set()  # nothing since
    build(["2026-01-02"])
    build(["2026-01-05", "undated"])
    assert versions.changed_days(con, table, since=first) == {"2026-01-02", "2026-01-05", "undated"}
    build(None)  # a rebuild: anything may have changed since any earlier version
    assert versions.changed_days(con, table, since=first) is None
    assert versions.changed_days(con, table, since=None) is None
    # only the latest builds' day lists are kept: a snapshot further behind hashes the table whole
    since = build(["2026-01-06"])
    for day in ("2026-01-07", "2026-01-08", "2026-01-09"):
        build([day])
    versions.record_changes(con, "staging.other", versions.bump(con, "staging.other", "run"),
                            versions.get(con, "staging.other"), ["2026-01-01"])
    assert versions.prune_changes(con, keep=2) == 4  # staging.t's four oldest lists
    assert versions.changed_days(con, table, since=since) is None
    assert versions.changed_days(con, table, since=versions.get(con, table).version) == set()
    assert con.execute("select count(*) from lineage.table_changes where table_name = 'staging.other'").fetchone()[0] == 1


def publish_state(tmp_path):
    """A state database with schema ``s`` (UTC) and an objects directory."""
    con = duckdb.connect(str(tmp_path / "state.duckdb"))
    con.execute("set TimeZone = 'UTC'")
    objects = tmp_path / "objects"
    objects.mkdir()
    con.execute("create schema s")
    return con, objects


def published(con, objects, planned) -> dict:
    """Write ``planned``'s files; the manifest entry they make."""
    from dagster_project.publishing.parquet import commit_objects, write_all

    pending = {}
    write_all([con], [planned], objects, {}, pending)
    commit_objects(pending, objects)
    return {"order_by": list(planned.dataset.order), "columns": planned.columns, "partition_sql": planned.part_sql,
            "partition_rule": planned.rule, "content_hash": planned.content_hash,
            "files": [{"name": p.name, "rows": p.rows, "object": p.key, "bytes": p.bytes, "sha256": p.sha256}
                      for p in planned.parts]}


def test_replan_refuses_what_it_cannot_tell(tmp_path):
    """Another cut (a table crossing the day-grain threshold) or no event time: hash every row."""
    from dagster_project.publishing.parquet import Dataset

    con, objects = publish_state(tmp_path)
    con.execute("create table s.t as select i, timestamp '2026-01-01' + to_days(i % 40) as timestamp "
                "from range(4990) r(i)")
    con.execute("create table s.u as select i from range(10) r(i)")

    def entry_of(table: str) -> dict:
        d = Dataset(table, f"internal/{table}", "internal", f"select * from {table}", ("i",))
        return d, published(con, objects, plan(con, d, objects))

    d, entry = entry_of("s.t")
    con.execute("insert into s.t values (5000, timestamp '2026-01-03 12:00')")
    got = replan(con, d, objects, entry, {"2026-01-03"})  # month grain: January hashed again
    assert [(p.name, p.key, p.rows) for p in got.parts] == [(p.name, p.key, p.rows) for p in plan(con, d, objects).parts]
    con.execute("insert into s.t select 6000 + i, timestamp '2026-03-01' from range(20) r(i)")  # over 5,000 rows
    assert replan(con, d, objects, entry, {"2026-03-01"}) is None  # cut by day now: not the entry's cut
    d, entry = entry_of("s.t")
    assert replan(con, d, objects, entry, {"2026-03-01"}) is not None
    entry.pop("partition_rule")  # cut before months were grouped (or under another limit): hash every row
    assert replan(con, d, objects, entry, {"2026-03-01"}) is None
    d, entry = entry_of("s.u")
    assert replan(con, d, objects, entry, set()) is None  # no event time: one file, always hashed
    # a day strftime does not print as YYYY-MM-DD has no month in its first 7 characters
    con.execute("create table s.v as select i, timestamp '2026-01-01' + to_days(i) as timestamp from range(20) r(i)")
    d, entry = entry_of("s.v")
    for odd in ("-infinity", "12345-06-07"):
        con.execute(f"insert into s.v values (99, timestamp '{odd}')")
        day = con.execute("select strftime(timestamp, '%Y-%m-%d') from s.v where i = 99").fetchone()[0]
        assert replan(con, d, objects, entry, {day}) is None, odd
        con.execute("delete from s.v where i = 99")



def test_old_days_are_grouped_by_month_and_replanned_as_hashing_every_row_would(tmp_path):
    """A day-cut table keeps day files from the month before its latest event on, one file per
    month before; a change on a grouped month or a recent day replans to the files hashing every
    row gives; a latest event in a new month is another cut (every row hashed)."""
    from dagster_project.publishing import parquet
    from dagster_project.publishing.parquet import Dataset, compaction_cutoff, grouping, partition_of

    assert [compaction_cutoff(d) for d in ("2026-04-30", "2026-01-01", "0001-01-05", "12345-06-07", None)] == [
        "2026-03-01", "2025-12-01", None, None, None]
    assert grouping({"2026-01": 10, "2026-02": 10, "2026-03": 10, "2025-12": parquet.MONTH_FILE_ROWS + 1},
                    "2026-04-30") == {"2026-01", "2026-02"}  # not March (recent), not a busy month
    assert [partition_of(d, "%Y-%m-%d", {"2026-02"}) for d in ("2026-02-28", "2026-03-01", "undated")] == [
        "2026-02", "2026-03-01", "undated"]
    con, objects = publish_state(tmp_path)
    con.execute("create table s.t as select i, timestamp '2026-01-01' + to_hours(i % (24 * 120)) as timestamp "
                "from range(6000) r(i)")  # Jan 1 to Apr 30, over 5,000 rows: cut by day
    d = Dataset("s.t", "internal/s.t", "internal", "select * from s.t", ("i",))
    planned = plan(con, d, objects)
    entry = published(con, objects, planned)
    names = [p.name for p in planned.parts]
    assert names[:2] == ["part-2026-01.parquet", "part-2026-02.parquet"] and len(names) == 2 + 31 + 30
    assert names[2] == "part-2026-03-01.parquet" and names[-1] == "part-2026-04-30.parquet"
    con.execute("update s.t set timestamp = timestamp '2026-04-02 08:00' where i = 5")  # Jan 1 -> Apr 2
    con.execute("insert into s.t values (7000, timestamp '2026-02-14 09:00')")
    got = replan(con, d, objects, entry, {"2026-01-01", "2026-04-02", "2026-02-14"})
    assert [(p.name, p.key, p.rows) for p in got.parts] == [(p.name, p.key, p.rows) for p in plan(con, d, objects).parts]
    assert sum(not p.reused for p in got.parts) == 3  # January, February and April 2 only
    # a latest event in May: March's days become one file, hashed with the changed days only
    con.execute("insert into s.t values (7001, timestamp '2026-05-01 00:00')")
    got = replan(con, d, objects, entry, {"2026-01-01", "2026-04-02", "2026-02-14", "2026-05-01"})
    whole = plan(con, d, objects)
    assert [(p.name, p.key, p.rows) for p in got.parts] == [(p.name, p.key, p.rows) for p in whole.parts]
    assert [p.name for p in whole.parts][:4] == [
        "part-2026-01.parquet", "part-2026-02.parquet", "part-2026-03.parquet", "part-2026-04-01.parquet"]
    # a latest event the cut cannot order ('infinity'): the entry's cutoff is unknown, every row hashed
    con.execute("insert into s.t values (99999, 'infinity'::timestamp)")
    infinite = published(con, objects, plan(con, d, objects))
    assert not any(p.name.startswith("part-2026-03.") for p in plan(con, d, objects).parts)  # no cutoff
    con.execute("delete from s.t where i = 99999")
    assert replan(con, d, objects, infinite, {"infinity"}) is None
    # an earlier latest event (its rows deleted) splits a month again: every row hashed
    entry = published(con, objects, got)
    assert replan(con, d, objects, entry, {"2026-04-30"}) is not None
    con.execute("delete from s.t where i = 7001")
    assert replan(con, d, objects, entry, {"2026-05-01"}) is None


def test_a_busy_month_stays_cut_by_day_and_a_month_crossing_the_limit_changes_form(tmp_path, monkeypatch):
    """A month over MONTH_FILE_ROWS keeps its day files (one big file costs its sort's memory);
    a change that takes a month across the limit rewrites it in its other form, as hashing every
    row would."""
    from dagster_project.publishing import parquet
    from dagster_project.publishing.parquet import Dataset

    monkeypatch.setattr(parquet, "MONTH_FILE_ROWS", 1500)
    con, objects = publish_state(tmp_path)
    con.execute("create table s.t as select i, timestamp '2026-01-01' + to_hours(i % (24 * 120)) as timestamp "
                "from range(6000) r(i)")  # January 1,728 rows, February 1,344
    d = Dataset("s.t", "internal/s.t", "internal", "select * from s.t", ("i",))
    planned = plan(con, d, objects)
    entry = published(con, objects, planned)
    names = [p.name for p in planned.parts]
    assert "part-2026-01-31.parquet" in names and "part-2026-02.parquet" in names
    con.execute("delete from s.t where timestamp < timestamp '2026-01-05'")  # January: 1,440 rows
    con.execute("insert into s.t select 9000 + i, timestamp '2026-02-10 12:00' from range(200) r(i)")  # 1,544
    got = replan(con, d, objects, entry, {"2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04", "2026-02-10"})
    whole = plan(con, d, objects)
    assert [(p.name, p.key, p.rows) for p in got.parts] == [(p.name, p.key, p.rows) for p in whole.parts]
    names = [p.name for p in whole.parts]
    assert names[0] == "part-2026-01.parquet" and "part-2026-02-10.parquet" in names


SPECIAL_TIMES = (None, "infinity", "-infinity", "10000-01-02 00:00", "0001-01-03 (BC)")


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["TIMESTAMP", "TIMESTAMPTZ", "DATE"]),
       zone=st.sampled_from(["UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago"]),
       training=st.booleans(), special=st.booleans(), rnd=st.randoms(use_true_random=False))
def test_a_replan_is_the_whole_plan_through_any_history(kind, zone, training, special, rnd):
    """Through inserts, deletes, moved rows, a latest event jumping months ahead or deleted, NULL
    and unorderable times ('infinity', year 10000, BC), splits and zones, with small limits (a
    day cut over 20 rows, months of at most 12 grouped): a replan from the days that changed
    is None or exactly the files hashing every row gives (the review's fuzz, kept as a test)."""
    import datetime as dt
    import tempfile

    from dagster_project.publishing import parquet
    from dagster_project.publishing.parquet import Dataset
    from transforms.partitions import time_sql

    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as tmp:
        patch.setattr(parquet, "DAY_GRAIN_ROWS", 20)
        patch.setattr(parquet, "MONTH_FILE_ROWS", 12)
        objects = Path(tmp) / "objects"
        objects.mkdir()
        con = duckdb.connect()
        con.execute(f"set TimeZone = '{zone}'")
        con.execute("create schema s")
        con.execute(f"create table s.t (i int, timestamp {kind}, split varchar)")
        ids = [0]

        def at():
            if special and rnd.random() < 0.08:
                return rnd.choice(SPECIAL_TIMES)
            start = dt.datetime(2025, rnd.choice([1, 6, 9]), 1)
            return (start + dt.timedelta(hours=rnd.randrange(24 * rnd.choice([60, 150, 300])))).isoformat(sep=" ")

        def insert(n, when=None):
            for _ in range(n):
                ids[0] += 1
                con.execute(f"insert into s.t values (?, ?::{kind}, ?)",
                            [ids[0], when or at(), rnd.choice(["train", "eval"])])

        def days_of(where):
            return {r[0] for r in con.execute(f"select distinct {time_sql('timestamp', alias='base')} "
                                              f"from s.t base where {where}").fetchall()}

        insert(rnd.randrange(25, 90))
        d = Dataset("s.t", "x/t", "training" if training else "internal", "select * from s.t", ("i",))
        entry = published(con, objects, plan(con, d, objects))
        for _ in range(5):
            op = rnd.choice(["insert", "delete", "move", "jump", "delete latest"])
            first = ids[0]
            if op in ("insert", "jump"):
                if op == "jump":
                    insert(1, (dt.datetime(2026, 1, 1) + dt.timedelta(days=rnd.randrange(400))).isoformat(sep=" "))
                insert(rnd.randrange(1, 15))
                days = days_of(f"i > {first}")
            elif op in ("delete", "delete latest"):
                chosen = (f"random() < {rnd.choice([0.05, 0.3])}" if op == "delete" else
                          "timestamp >= (select max(timestamp) from s.t) - interval 40 day")
                con.execute(f"create or replace temp table gone as select i from s.t where {chosen}")
                days = days_of("i in (select i from gone)")
                con.execute("delete from s.t where i in (select i from gone)")
            else:
                moved = [r[0] for r in con.execute("select i from s.t using sample 3 rows").fetchall()]
                days = days_of(f"i in ({', '.join(map(str, moved)) or 'null'})")
                for i in moved:
                    con.execute(f"update s.t set timestamp = ?::{kind} where i = ?", [at(), i])
                days |= days_of(f"i in ({', '.join(map(str, moved)) or 'null'})")
            got, whole = replan(con, d, objects, entry, days), plan(con, d, objects)
            if got is not None:
                assert [(p.name, p.key, p.rows) for p in got.parts] == [(p.name, p.key, p.rows) for p in whole.parts], op
            entry = published(con, objects, got or whole)


def table_state(settings, table: str) -> tuple[str, str, str]:
    """(version, input key, the run whose validation its check reports) of ``table``."""
    con = duckdb.connect(str(settings.state_db), read_only=True)
    try:
        version = versions.get(con, table)
        validated = con.execute("select run_id from lineage.validated where table_name = ?", [table]).fetchone()
        return version.version, version.input_key, validated[0]
    finally:
        con.close()


@pytest.mark.slow
def test_a_table_a_build_left_as_it_was_keeps_its_version_validation_and_files(settings):
    day_file(settings, DAYS[0], range(0, 40))
    assert run_pipeline(settings).success
    first = {t: table_state(settings, t) for t in ("exports.weighted", "marts.orphan_feedback", "exports.kto",
                                                    "marts.session_satisfaction", "marts.session_rating_matches")}
    weighted = read_manifest(settings.export_dir)["datasets"]["training/weighted"]

    # new interactions in a new session: no weighted example, no orphan, one more interaction session
    day_file(settings, DAYS[1], range(40, 60), session_id="a-new-session")
    result = run_pipeline(settings)
    assert result.success, result.failures
    # built incrementally and left as it was; and rebuilt whole to the same content (no ratings)
    for table in ("exports.weighted", "marts.orphan_feedback", "marts.session_satisfaction"):
        version, input_key, validated_by = table_state(settings, table)
        assert version == first[table][0], table  # the rows it holds are those of that version
        assert input_key != first[table][1], table  # built from the new inputs: reusable next run
        assert validated_by == first[table][2], table  # its validation was reused, not redone
    for table in ("exports.kto", "marts.session_rating_matches"):  # changed: incrementally, and whole
        assert table_state(settings, table)[0] != first[table][0], table
    now = read_manifest(settings.export_dir)["datasets"]["training/weighted"]
    assert now["table_version"] == weighted["table_version"]  # its files were not planned again
    assert [f["object"] for f in now["files"]] == [f["object"] for f in weighted["files"]]
    assert_published_as_hashing_all_would(settings)

    # the next run with nothing new reuses it as any table it built
    before = table_state(settings, "exports.weighted")
    assert run_pipeline(settings).success
    assert table_state(settings, "exports.weighted") == before


def test_a_content_fingerprint_sees_rows_and_columns_not_their_order(monkeypatch):
    con = duckdb.connect()
    con.execute("create schema m; create table m.t as select * from (values (1, 'a'), (2, 'b')) v(n, s)")
    fingerprint = versions.content_fingerprint(con, "m.t")
    con.execute("create or replace table m.t as select * from (values (2, 'b'), (1, 'a')) v(n, s)")
    assert versions.content_fingerprint(con, "m.t") == fingerprint  # the same rows in another order
    con.execute("create or replace table m.t as select * from (values (1, 'a'), (2, 'c')) v(n, s)")
    assert versions.content_fingerprint(con, "m.t") != fingerprint
    con.execute("create or replace table m.t as select * from (values (1, 'a'), (2, 'b')) v(n, label)")
    assert versions.content_fingerprint(con, "m.t") != fingerprint  # same values, a column renamed
    con.execute("create or replace table m.t as select * from (values (1, 'a'), (2, 'b'), (2, 'b')) v(n, s)")
    assert versions.content_fingerprint(con, "m.t") != fingerprint  # a duplicate row counts
    con.execute("create or replace table m.t as select * from (values ('a', 1), ('b', 2)) v(s, n)")
    assert versions.content_fingerprint(con, "m.t") != fingerprint  # the columns' order counts
    # what hash() of the values alone confuses
    for first, second in (("null::int[]", "[]::int[]"), ("null::struct(x int)", "{'x': null::int}"),
                          ("[[1], [2]]", "[[1, 2]]"), ("0.0::double", "-0.0::double")):
        digests = set()
        for value in (first, second):
            con.execute(f"create or replace table m.u as select {value} as v")
            digests.add(versions.content_fingerprint(con, "m.u"))
        assert len(digests) == 2, (first, second)
    monkeypatch.setattr(versions, "FINGERPRINT_MAX_ROWS", 1)
    assert versions.content_fingerprint(con, "m.t") is None  # too big to read whole for this
