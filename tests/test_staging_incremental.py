"""Incremental staging: re-deciding only touched identities equals a rebuild, row for row, and so
does the drop step's ledger (hypothesis over producer histories, plus direct cases)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import duckdb
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from conftest import dumps, interaction, rows, write_lines
from dagster_project.engine import Ingestor
from dagster_project.engine.readers import sqlite as sqlite_reader
from dagster_project.expectations import FUTURE_SLACK, SUITES
from dagster_project.sources import load_sources
from dagster_project.validation import apply_drops
from test_bronze import SESSIONS, add, rating, store
from transforms.staging import WATERMARKS, last_wins_sql, refresh_staging

FILES = ["interactions/interactions_2026-02-26_0000000{}.jsonl".format(i) for i in (1, 2)]
START = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
# Order times: equal ones collide on purpose; the last two are beyond START + 1 day (dropped),
# the first of them only until the run date has moved two days.
TIMES = ["2026-02-26T10:00:00", "2026-02-26T11:00:00", "2026-02-27T09:30:00", "2026-03-03T08:00:00",
         "2031-01-01T00:00:00"]


class Lake:
    """A real lake on disk, its state database, and one ingest + incremental staging per run."""

    def __init__(self, settings, sources=("interactions",), specs=None):
        self.settings = settings
        self.specs = specs or {n: s for n, s in load_sources(settings.sources_file).items() if n in sources}
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        self.con = duckdb.connect(str(settings.state_db))
        self.con.execute("set TimeZone = 'UTC'")
        self.runs = 0
        self.now = START

    def run(self, full_refresh: bool = False) -> dict:
        self.runs += 1
        run_id = f"run-{self.runs}"
        out = {}
        for name, spec in self.specs.items():
            Ingestor(self.con, spec, self.settings, run_id).run(full_refresh=full_refresh)
            out[name] = refresh_staging(self.con, spec, run_id=run_id, now=self.now, drop=apply_drops)
        return out

    def staged(self, name: str) -> tuple[list, list]:
        table = f"staging.{name}"
        return (rows(self.con, f"select * from {table} order by all"),
                rows(self.con, "select row_key, expectation, detail, path, line_number from ingest.excluded "
                               "where run_id = ? and table_name = ? order by all", [f"run-{self.runs}", table]))

    def rebuilt(self, name: str) -> tuple[list, list]:
        """What the rule gives, in the same database: per identity, the greatest version whose
        order time is not beyond the run time + slack; in the ledger, the versions beyond it that
        last-wins over every version would have picked (a whole-table drop step over those).
        Unless they are too many (systemic): then they stay, and the run's validation fails."""
        spec = self.specs[name]
        cutoff = (self.now + FUTURE_SLACK).isoformat()
        self.con.execute(f"create or replace table main.would_win as {last_wins_sql(spec)}")
        report = apply_drops(self.con, "main.would_win", run_id="expected", now=self.now,
                             checks=SUITES[f"staging.{name}"])
        where = f"not coalesce({spec.order[0]} > {cutoff!r}::timestamptz, false)"
        expected = "main.would_win" if report.systemic else f"({last_wins_sql(spec, where=where)})"
        return (rows(self.con, f"select * from {expected} order by all"),
                rows(self.con, "select row_key, expectation, detail, path, line_number from ingest.excluded "
                               "where run_id = 'expected' and table_name = 'main.would_win' order by all"))


def append(raw, file: str, records: list[dict]) -> None:
    path = raw / file
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as fh:
        fh.write(b"".join(dumps(r).encode() + b"\n" for r in records))


# ------------------------------------------------------------------------------ direct cases


def test_an_append_touching_three_identities_redecides_exactly_those(settings):
    append(settings.raw_dir, FILES[0], [interaction(i, timestamp=TIMES[1]) for i in range(50)])
    lake = Lake(settings)
    first = lake.run()["interactions"]
    assert (first.mode, first.reason, first.rows) == ("full", "staging is missing", 50)
    assert lake.run()["interactions"].redecided == 0  # nothing new: nothing re-decided
    # a new id, a later version of id 3, an earlier version of id 7 (loses: its winner stays)
    append(settings.raw_dir, FILES[1], [interaction(50, timestamp=TIMES[0]),
                                        interaction(3, timestamp=TIMES[2], output_text="newer"),
                                        interaction(7, timestamp=TIMES[0], output_text="older")])
    result = lake.run()["interactions"]
    assert (result.mode, result.redecided, result.rows) == ("incremental", 3, 51)
    assert rows(lake.con, "select redecided, mode from " + WATERMARKS) == [(3, "incremental")]
    assert lake.staged("interactions") == lake.rebuilt("interactions")
    assert rows(lake.con, "select output_text from staging.interactions where id like '%0003' or id like '%0007' "
                          "order by id") == [("newer",), ("Use open().",)]


def test_a_future_dated_winner_is_excluded_until_its_time_comes_and_the_good_version_stays(settings):
    """A version dated beyond the run time + slack is excluded and named in the ledger; its
    identity keeps its greatest version that is not (it used to vanish from staging, and so from
    the labels and training sets, until the future date passed)."""
    append(settings.raw_dir, FILES[0], [interaction(i, timestamp=TIMES[1]) for i in range(100)])  # 3 of 100 stay under the 5% threshold
    append(settings.raw_dir, FILES[0], [interaction(101, timestamp=TIMES[4], output_text="only in 2031")])
    lake = Lake(settings)
    result = lake.run()["interactions"]
    assert (result.mode, result.rows, result.drops.total) == ("full", 100, 1)  # 101 has no other version
    assert lake.staged("interactions") == lake.rebuilt("interactions")

    def output(i):
        return rows(lake.con, f"select output_text from staging.interactions where id like '%{i:04d}'")

    append(settings.raw_dir, FILES[0], [interaction(4, timestamp=TIMES[3], output_text="from the future"),
                                        interaction(5, timestamp=TIMES[3], output_text="from the future"),
                                        interaction(5, timestamp=TIMES[4], output_text="further still")])
    result = lake.run()["interactions"]
    assert (result.mode, result.rows, result.drops.total) == ("incremental", 100, 3)
    assert output(4) == output(5) == [("Use open().",)]  # the good versions stay
    staged = lake.staged("interactions")
    assert staged == lake.rebuilt("interactions")
    assert sorted(detail for _, _, detail, _, _ in staged[1]) == [
        'timestamp = "2026-03-03 08:00:00+00"', 'timestamp = "2031-01-01 00:00:00+00"',
        'timestamp = "2031-01-01 00:00:00+00"']
    # The ledger keeps one row per exclusion per run, though nothing new arrived.
    lake.now += timedelta(hours=1)
    result = lake.run()["interactions"]
    assert (result.mode, result.redecided, result.drops.total) == ("incremental", 3, 3)
    staged = lake.staged("interactions")
    assert staged == lake.rebuilt("interactions") and len(staged[1]) == 3
    lake.now += timedelta(days=2)  # 2026-03-03T08:00 is no longer beyond the run time + 1 day
    result = lake.run()["interactions"]
    assert (result.mode, result.rows, result.drops.total) == ("incremental", 100, 2)
    assert output(4) == output(5) == [("from the future",)]
    assert lake.staged("interactions") == lake.rebuilt("interactions")
    lake.now -= timedelta(days=2)  # a run date going back: rebuilt, so it is excluded again
    result = lake.run()["interactions"]
    assert (result.mode, result.reason, result.drops.total) == ("full", "the drop step's clock went backwards", 3)
    assert output(4) == [("Use open().",)]
    assert lake.staged("interactions") == lake.rebuilt("interactions")


def test_a_sqlite_delete_flags_an_old_winner_incrementally(settings):
    db = settings.raw_dir / SESSIONS
    store(db, [f"s{i}" for i in range(5)], journal="DELETE").close()
    lake = Lake(settings, sources=("session_ratings",))
    lake.run()
    conn = sqlite3.connect(db)
    conn.execute("delete from session_feedback where id = 's2'")
    conn.commit()
    conn.close()
    result = lake.run()["session_ratings"]
    assert (result.mode, result.redecided) == ("incremental", 1)
    assert rows(lake.con, "select id from staging.session_ratings where deleted_at_source is not null") == [("s2",)]
    assert lake.staged("session_ratings") == lake.rebuilt("session_ratings")
    assert rows(lake.con, "select count(*) from lineage.raw_tombstones") == [(0,)]  # consumed


def test_content_identity_and_nullable_identity_columns(settings):
    specs = load_sources(settings.sources_file)
    # interactions identified by (id, model): model is nullable, so null identities must match
    by_model = replace(specs["interactions"], identity=("id", "model"))
    lake = Lake(settings, specs={"interactions": by_model, "weighted_ratings": specs["weighted_ratings"]})
    ratings = [{"timestamp": 1772100000 + i, "query": "q", "response": f"r{i % 3}", "rating": "good", "weight": 1.0}
               for i in range(6)]
    write_lines(settings.raw_dir / "weighted" / "feedback.jsonl", [json.dumps(r) for r in ratings])
    append(settings.raw_dir, FILES[0], [interaction(i, model=None if i % 2 else "m", timestamp=TIMES[0])
                                        for i in range(6)])
    lake.run()
    write_lines(settings.raw_dir / "weighted" / "feedback.jsonl", [json.dumps(ratings[0]), json.dumps(ratings[4])],
                mode="ab")  # the same content again (a re-scrape)
    append(settings.raw_dir, FILES[0], [interaction(1, model=None, timestamp=TIMES[2], output_text="v2"),
                                        interaction(1, model="m", timestamp=TIMES[2], output_text="other")])
    result = lake.run()
    assert (result["interactions"].mode, result["interactions"].redecided, result["interactions"].rows) == \
        ("incremental", 2, 7)
    assert (result["weighted_ratings"].mode, result["weighted_ratings"].redecided) == ("incremental", 2)
    for name in ("interactions", "weighted_ratings"):
        assert lake.staged(name) == lake.rebuilt(name)
    assert rows(lake.con, "select output_text from staging.interactions where id like '%0001' order by all") == \
        [("other",), ("v2",)]


def test_raw_replayed_or_code_changed_rebuilds(settings):
    append(settings.raw_dir, FILES[0], [interaction(i) for i in range(3)])
    lake = Lake(settings)
    lake.run()
    assert lake.run(full_refresh=True)["interactions"].reason == "staging is missing"  # reset_source drops it
    assert lake.run()["interactions"].mode == "incremental"
    from dagster_project import versions

    versions.bump(lake.con, "raw.interactions", None, reset=True)  # a replay that kept staging
    assert lake.run()["interactions"].reason == "raw was rebuilt"
    lake.con.execute(f"update {WATERMARKS} set code_key = 'old'")
    assert lake.run()["interactions"].reason == "code, drop suite or raw columns changed"
    lake.con.execute("drop table staging.interactions")
    assert lake.run()["interactions"].reason == "staging is missing"
    assert lake.staged("interactions") == lake.rebuilt("interactions")


def test_the_staging_asset_is_incremental_in_a_dagster_run(settings):
    import dagster as dg

    from dagster_project.definitions import load_definitions
    from test_dagster import resource_for

    append(settings.raw_dir, FILES[0], [interaction(i, timestamp=TIMES[0]) for i in range(4)])
    defs = load_definitions()
    keys = [dg.AssetKey(["ingest", "interactions"]), dg.AssetKey(["staging", "interactions"])]
    assets = [a for a in defs.assets if any(k in keys for k in a.keys)]

    def staging_metadata():
        result = dg.materialize(assets, resources={"flywheel": resource_for(settings)},
                                selection=dg.AssetSelection.assets(*keys))
        meta = result.asset_materializations_for_node("staging__interactions")[0].metadata
        return {k: meta[k].value for k in ("staging_mode", "identities_redecided", "dagster/row_count",
                                           "excluded_rows")}

    assert staging_metadata() == {"staging_mode": "full", "identities_redecided": 4, "dagster/row_count": 4,
                                  "excluded_rows": 0}
    append(settings.raw_dir, FILES[0], [interaction(9, timestamp=TIMES[4])])  # a new id, dated 2031
    assert staging_metadata() == {"staging_mode": "incremental", "identities_redecided": 1,
                                  "dagster/row_count": 4, "excluded_rows": 1}


# ------------------------------------------------------------------------------ property

actions = st.one_of(
    st.tuples(st.just("new"), st.integers(0, 1), st.integers(1, 3), st.integers(0, len(TIMES) - 1)),
    st.tuples(st.just("version"), st.integers(0, 1), st.integers(0, 7), st.integers(0, len(TIMES) - 1)),
    st.tuples(st.just("duplicate"), st.integers(0, 1)),
    st.tuples(st.just("sqlite_add"), st.integers(1, 2), st.integers(0, len(TIMES) - 1)),
    st.tuples(st.just("sqlite_update"), st.integers(1, 4), st.integers(0, len(TIMES) - 1)),
    st.tuples(st.just("sqlite_delete"), st.integers(1, 4)),
    st.tuples(st.just("recreate")),
    st.tuples(st.just("advance"), st.integers(1, 2)),
    st.tuples(st.just("run")),
    st.tuples(st.just("full_refresh")),
)


class Producers:
    def __init__(self, raw):
        self.raw, self.n, self.written = raw, 0, []
        self.db = raw / SESSIONS
        store(self.db, [], journal="DELETE").close()

    def write(self, file: int, record: dict) -> None:
        append(self.raw, FILES[file], [record])
        self.written.append((file, record))

    def do(self, action) -> None:
        kind, *args = action
        if kind == "new":
            for _ in range(args[1]):
                self.n += 1
                self.write(args[0], interaction(100 + self.n, timestamp=TIMES[args[2]]))
        elif kind == "version":
            self.n += 1
            self.write(args[0], interaction(args[1], timestamp=TIMES[args[2]], output_text=f"v{self.n}"))
        elif kind == "duplicate" and self.written:
            self.write(args[0], self.written[self.n % len(self.written)][1])
        elif kind in ("sqlite_add", "sqlite_update", "sqlite_delete"):
            conn = sqlite3.connect(self.db)
            try:
                if kind == "sqlite_add":
                    self.n += 1
                    add(conn, f"s{self.n}")
                    conn.execute("update session_feedback set value = ? where id = ?",
                                 [rating(f"s{self.n}", at=TIMES[args[1]] + "Z"), f"s{self.n}"])
                elif kind == "sqlite_update":
                    conn.execute("update session_feedback set value = ? where rowid = ?",
                                 [rating(f"s{args[0]}", "negative", TIMES[args[1]] + "Z"), args[0]])
                else:
                    conn.execute("delete from session_feedback where rowid = ?", [args[0]])
                conn.commit()
            finally:
                conn.close()
        elif kind == "recreate":
            self.db.unlink()
            store(self.db, [f"r{self.n}-{i}" for i in range(2)], journal="DELETE").close()


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(actions, min_size=1, max_size=14))
def test_any_history_leaves_staging_and_ledger_equal_to_a_rebuild(tmp_path_factory, monkeypatch, script):
    monkeypatch.setattr(sqlite_reader, "LOCK_WAIT_SECONDS", 0.05)
    from dagster_project.settings import Settings

    base = tmp_path_factory.mktemp("staging-history")
    settings = Settings.from_env({"FLYWHEEL_RAW_DIR": str(base / "raw"),
                                  "FLYWHEEL_WAREHOUSE": str(base / "warehouse.duckdb"),
                                  "FLYWHEEL_SESSION_RETENTION_DAYS": "3650"})
    producers = Producers(settings.raw_dir)
    seed = [("new", 0, 3, 1), ("version", 1, 0, 2), ("sqlite_add", 2, 0), ("sqlite_add", 1, 1), ("run",)]
    lake = None
    for action in [*seed, *script, ("run",)]:
        if action[0] not in ("run", "full_refresh", "advance"):
            producers.do(action)
            continue
        if action[0] == "advance":
            if lake is not None:
                lake.now += timedelta(days=action[1])
            continue
        lake = lake or Lake(settings, sources=("interactions", "session_ratings"))
        results = lake.run(full_refresh=action[0] == "full_refresh")
        for name, result in results.items():
            assert lake.staged(name) == lake.rebuilt(name), (name, result)
            if action[0] == "full_refresh":
                assert result.mode == "full"
    lake.con.close()
