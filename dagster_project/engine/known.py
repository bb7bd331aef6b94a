"""What the lake knows about each file, kept beside raw so that a run does not reread bronze's
whole history.

Every run needs each file's latest state (``Entry.state``: watermark, size, mtime, ctime...) and
the bronze entries raw has not applied yet. Both are in bronze's manifest, whose segments grow by
one per batch for as long as the lake lives: reading all of them every run made a run's cost grow
with the lake's age, not with what is new (the 1M bench lake's interactions: 3,796 entries after
its first run, 66 ms to read; every run that sees a file change adds one).

``lineage.bronze_known`` holds the latest state of every path among the entries applied to raw,
written in the transaction that applies them (``remember``), and ``lineage.bronze_known_through``
the seq it is complete through. A run whose ``ingest.bronze_applied`` is that seq loads one state
per file (3,796 in 28 ms) and reads only the segments from the one holding that seq on
(``Bronze.entries_after``); any other (a state database from before this cache, a source
reset for a full refresh or replay, a manifest that lacks that entry: restored from an older
copy) reads every segment once and rebuilds it (``rebuild``). It is a cache of bronze: losing
it, or the whole state database, loses nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, MutableMapping

import duckdb

from dagster_project.engine.bronze import Entry
from transforms import arrowcols
from transforms.sqlfiles import registered

TABLE = "lineage.bronze_known"
THROUGH = "lineage.bronze_known_through"


class States(MutableMapping):
    """path -> state, each parsed from the cache's JSON the first time it is read, and
    ``settled``: path -> (size, mtime_ns, inode, ctime_ns) of each line file whose cached state
    says it is unchanged while its ``stat`` still shows these (``jsonl.unchanged``'s first test:
    read, nothing deferred, a ctime recorded). A run parses only the states of the files it has
    to look at: on a lake that grows for years nearly every file is settled, and parsing each
    state cost ~5 µs a file a run."""

    def __init__(self, raw: dict[str, str | dict], settled: dict[str, tuple[int, int, int, int]]):
        self._raw, self.settled = raw, settled

    def __getitem__(self, path: str) -> dict:
        state = self._raw[path]
        if isinstance(state, str):
            state = self._raw[path] = json.loads(state)
        return state

    def __setitem__(self, path: str, state: dict) -> None:
        self._raw[path] = state
        self.settled.pop(path, None)  # a newer state than the cache's: its files are looked at

    def __delitem__(self, path: str) -> None:
        del self._raw[path]
        self.settled.pop(path, None)

    def __contains__(self, path: object) -> bool:
        return path in self._raw

    def __iter__(self):
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


def load(con: duckdb.DuckDBPyConnection, source: str, applied: int) -> States | None:
    """Each path's latest state among the entries up to ``applied`` (the source's
    ``ingest.bronze_applied``), or None when the cache is not complete through exactly that."""
    row = con.execute(f"select seq from {THROUGH} where source = ?", [source]).fetchone()
    if row is None or row[0] != applied:
        return None
    raw, settled = {}, {}
    # one json_transform a row in DuckDB: 15 ms for 9,919 states, where json.loads of each took 80
    for path, state, is_settled, *signature in con.execute(
            "select path, state, s.format = 'jsonl' and s.status = 'ok' and s.deferred = 0 and s.ctime_ns is not null, "
            "s.size, s.mtime_ns, s.ino, s.ctime_ns from (select path, state, json_transform(state, "
            "'{\"format\": \"VARCHAR\", \"status\": \"VARCHAR\", \"deferred\": \"BIGINT\", \"size\": \"BIGINT\", "
            "\"mtime_ns\": \"BIGINT\", \"ino\": \"BIGINT\", \"ctime_ns\": \"BIGINT\"}') as s "
            f"from {TABLE} where source = ?)", [source]).fetchall():
        raw[path] = state
        if is_settled:
            settled[path] = tuple(signature)
    return States(raw, settled)


def states(entries: Iterable[Entry]) -> dict[str, dict]:
    """path -> the state of its last entry carrying one, entries in seq order (what the cache holds)."""
    return {path: state for path, (_, state) in _latest(entries).items()}


def _latest(entries: Iterable[Entry]) -> dict[str, tuple[int, dict]]:
    """path -> (seq, state) of its last entry carrying a state, entries in seq order."""
    return {e.path: (e.seq, e.state) for e in entries if e.state is not None}


def rebuild(con: duckdb.DuckDBPyConnection, source: str, entries: list[Entry], through: int) -> None:
    """The cache of ``source`` from ``entries`` (every entry up to ``through``, in seq order)."""
    con.execute(f"delete from {TABLE} where source = ?", [source])
    _upsert(con, source, _latest(entries))
    con.execute(f"insert or replace into {THROUGH} values (?, ?)", [source, through])


def remember(con: duckdb.DuckDBPyConnection, source: str, batch: list[Entry]) -> None:
    """Called by the transaction that applies ``batch`` to raw, before it moves
    ``ingest.bronze_applied``: the batch's states, and the cache complete through its last entry
    if it was complete up to the batch (else it stays incomplete: the next run rebuilds it)."""
    _upsert(con, source, _latest(batch))
    con.execute(f"update {THROUGH} set seq = $seq where source = $source and seq = coalesce("
                "(select seq from ingest.bronze_applied where source = $source), 0)",
                {"seq": batch[-1].seq, "source": source})


def _upsert(con: duckdb.DuckDBPyConnection, source: str, states: dict[str, tuple[int, dict]]) -> None:
    if not states:
        return
    table = arrowcols.table({
        "path": arrowcols.strings(list(states)),
        "seq": arrowcols.ints([seq for seq, _ in states.values()]),
        "state": arrowcols.strings([json.dumps(state, separators=(",", ":")) for _, state in states.values()])})
    with registered(con, "_known", table):
        con.execute(f"insert or replace into {TABLE} select $source, path, seq, state from _known",
                    {"source": source})
