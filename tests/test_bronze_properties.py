"""Whatever producers do to their files between runs, incremental == full refresh (hypothesis),
and no row ever ingested leaves raw."""

from __future__ import annotations

import sqlite3

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from conftest import dumps, ingest, interaction, rows
from dagster_project.engine import readers
from dagster_project.engine.readers import sqlite as sqlite_reader
from test_bronze import SESSIONS, add, assert_known_is_bronzes, everything, rating, store

FILES = ["interactions/interactions_2026-02-26_0000000{}.jsonl".format(i) for i in (1, 2)]
SOURCES = ["interactions", "session_ratings"]

actions = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 1), st.integers(1, 3)),
    st.tuples(st.just("partial"), st.integers(0, 1)),
    st.tuples(st.just("truncate"), st.integers(0, 1), st.integers(0, 2)),
    st.tuples(st.just("rewrite"), st.integers(0, 1)),
    st.tuples(st.just("rotate"), st.integers(0, 1)),
    st.tuples(st.just("delete"), st.integers(0, 1)),
    st.tuples(st.just("sqlite_add"), st.integers(1, 3)),
    st.tuples(st.just("sqlite_update"), st.integers(1, 4)),
    st.tuples(st.just("sqlite_delete"), st.integers(1, 4)),
    st.tuples(st.just("recreate")),
    st.tuples(st.just("run"), st.booleans()),
)


class Producers:
    def __init__(self, raw):
        self.raw, self.n, self.rotations = raw, 0, 0
        self.db = raw / SESSIONS
        store(self.db, [], journal="DELETE").close()

    def line(self) -> bytes:
        self.n += 1
        ident = self.n % 5  # ids repeat: later lines are new versions
        return dumps(interaction(ident, timestamp=f"2026-02-26T10:{self.n // 60 % 60:02d}:{self.n % 60:02d}",
                                 output_text=f"answer {self.n}")).encode()

    def do(self, action):
        kind, *args = action
        if kind in ("append", "partial", "truncate", "rewrite", "rotate", "delete"):
            path = self.raw / FILES[args[0]]
            path.parent.mkdir(parents=True, exist_ok=True)
            lines = path.read_bytes().split(b"\n") if path.exists() else []
            if kind == "append":
                with path.open("ab") as fh:
                    fh.write(b"".join(self.line() + b"\n" for _ in range(args[1])))
            elif kind == "partial":
                with path.open("ab") as fh:
                    fh.write(self.line()[:30])
            elif kind == "truncate":
                path.write_bytes(b"".join(l + b"\n" for l in lines[:args[1]] if l))
            elif kind == "rewrite":
                path.write_bytes(self.line() + b"\n" + b"".join(l + b"\n" for l in lines[1:] if l))
            elif kind == "rotate" and path.exists():
                self.rotations += 1
                path.rename(path.with_name(f"interactions_2026-02-25_{self.rotations:08d}.jsonl"))
                path.write_bytes(self.line() + b"\n")
            elif kind == "delete" and path.exists():
                path.unlink()
            return
        conn = sqlite3.connect(self.db)
        try:
            if kind == "sqlite_add":
                for _ in range(args[0]):
                    self.n += 1
                    add(conn, f"s{self.n}")
            elif kind == "sqlite_update":
                self.n += 1
                conn.execute("update session_feedback set value = ? where rowid = ?",
                             [rating(f"s{args[0]}", "negative", f"2026-02-26T11:00:{self.n % 60:02d}Z"), args[0]])
            elif kind == "sqlite_delete":
                conn.execute("delete from session_feedback where rowid = ?", [args[0]])
            conn.commit()
        finally:
            conn.close()
        if kind == "recreate":
            self.db.unlink()
            store(self.db, [f"r{self.n}-{i}" for i in range(2)], journal="DELETE").close()


def raw_rows(con) -> set:
    out = set()
    for table in ("raw.interactions", "raw.session_ratings"):
        out |= {(table, *r) for r in rows(con, f"select * exclude (deleted_at_source) from {table}")}
    return out


@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(actions, min_size=1, max_size=14))
def test_any_producer_history_gives_incremental_equal_to_full_refresh(tmp_path_factory, monkeypatch, script):
    monkeypatch.setattr(sqlite_reader, "LOCK_WAIT_SECONDS", 0.05)
    # every ctime counts as settled: else whether a run records one (a bronze entry) depended on
    # how long after the producer's last write it ran, and the rebuild, later, recorded one more
    monkeypatch.setattr(readers, "CTIME_SETTLED_SECONDS", 0.0)
    from dagster_project.settings import Settings

    base = tmp_path_factory.mktemp("history")
    settings = Settings.from_env({"FLYWHEEL_RAW_DIR": str(base / "raw"),
                                  "FLYWHEEL_WAREHOUSE": str(base / "warehouse.duckdb")})
    producers = Producers(settings.raw_dir)
    con, seen, runs = None, set(), 0
    # Start from an ingested lake, so every action changes something the lake already holds.
    seed = [("sqlite_add", 3), ("append", 0, 2), ("append", 1, 2), ("run", False)]
    for action in [*seed, *script, ("run", False)]:
        if action[0] != "run":
            producers.do(action)
            continue
        locker = None
        if action[1]:  # the store's writer holds an exclusive lock during this run
            locker = sqlite3.connect(producers.db, isolation_level=None)
            locker.execute("begin exclusive")
        try:
            runs += 1
            con, _ = ingest(settings, f"run-{runs}", sources=SOURCES, con=con)
        finally:
            if locker is not None:
                locker.execute("rollback")
                locker.close()
        now = raw_rows(con)
        assert seen <= now, "a row once ingested left raw"
        seen = now
        assert_known_is_bronzes(settings, con, SOURCES)
    incremental = everything(con)
    con, _ = ingest(settings, "refresh", sources=SOURCES, con=con, full_refresh=True)
    assert everything(con) == incremental
    con.close()
    settings.state_db.unlink()
    con, _ = ingest(settings, "rebuild", sources=SOURCES)
    assert everything(con) == incremental
    con.close()
