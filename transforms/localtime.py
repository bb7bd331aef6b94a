"""Naive local times in a repeated hour: which pass through the hour a line was written in.

When the clocks go back (Europe/Madrid, last Sunday of October: 03:00 CEST -> 02:00 CET) the
wall times 02:00-02:59:59 happen twice, and a writer that logs ``datetime.now().isoformat()``
writes them without an offset. The classifier gives every such time the *earlier* offset
(``<col>_fold = 'fold_first'``); this module finds the second pass from the file itself: one
writer appends in time order, so inside one file a step back in wall time within the repeated
hour means the clocks went back, and every later line of that hour in the file is the second
pass (``fold_second``, the later offset).

State is per (file, field, day of the transition): the greatest first-pass wall time seen and
whether the second pass has begun. Lines ingested by an earlier run are part of that state
(looked up in ``raw``), so incremental runs resolve exactly as one full refresh does.

A line written again (a collector re-flushing what it wrote: the same identity, as staging keys
it, and the same wall time, to the microsecond) is no step back: it takes the pass of its first
writing and moves nothing. (Read as the clocks going back, it was an hour late, won last-wins by
that hour, and took every later first-pass line of the file with it.)

Known limit: a writer silent from before the first pass until inside the second pass (more than
an hour) leaves no step back; its lines stay ``fold_first``. Times in a *skipped* hour (spring)
are quarantined by the classifier as ``bad_timestamp``: no correct clock writes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

import duckdb

from transforms import arrowcols
from transforms.classify import q
from transforms.spec import SourceSpec
from transforms.staging import identity_columns
from transforms.sqlfiles import registered

FOLD_FIRST = "fold_first"
FOLD_SECOND = "fold_second"
NAIVE_TIMES = ("iso_naive", "iso_any")


@dataclass
class PassState:
    """One file's progress through one repeated hour."""

    latest_first: datetime | None = None  # greatest wall time seen in the first pass
    second: bool = False
    written: dict[tuple[str | None, datetime], str] = field(default_factory=dict)  # (identity, wall) -> pass

    def note(self, identity: str | None, wall: datetime, fold: str) -> None:
        """A line of the file in ``fold``: one assigned, or one before them (context from raw)."""
        self.written.setdefault((identity, wall), fold)
        if fold == FOLD_SECOND:
            self.second = True
        else:
            self.latest_first = wall if self.latest_first is None else max(self.latest_first, wall)


def assign_passes(states: dict[date, PassState], wall_times: list[datetime],
                  identities: list[str | None] | None = None) -> list[str]:
    """The pass of each ambiguous wall time of one file, in write order (``identities``: each
    line's identity, to tell a line written again); updates ``states``."""
    out = []
    for i, wall in enumerate(wall_times):
        st = states.setdefault(wall.date(), PassState())
        identity = identities[i] if identities else None
        again = st.written.get((identity, wall))
        if again is not None:  # written again: its first writing's pass
            out.append(again)
            continue
        second = st.second or (st.latest_first is not None and wall < st.latest_first)
        out.append(FOLD_SECOND if second else FOLD_FIRST)
        st.note(identity, wall, out[-1])
    return out


def instant(wall: datetime, zone: str, fold: str) -> datetime:
    """The UTC instant of an ambiguous wall time in its pass."""
    local = wall.replace(tzinfo=ZoneInfo(zone), fold=1 if fold == FOLD_SECOND else 0)
    return local.astimezone(timezone.utc)


def wall_time(at: datetime, zone: str) -> datetime:
    """The naive wall time of an instant the classifier computed: the line's time as its writer's
    clock showed it, however the text spelled it (the classifier reads '2026-10-25 2:10:00',
    which ``datetime.fromisoformat`` refused, failing the source's ingest on every run)."""
    return at.astimezone(ZoneInfo(zone)).replace(tzinfo=None)


def _identity_sql(spec: SourceSpec) -> str:
    """A line's identity as text (``{t}``: the table's alias): its identity columns as the
    classifier wrote them (a content hash for ``@content``, the ``identity_sql`` column), as a
    JSON list (NULL and '' differ, and no separator can make two identities one)."""
    return "to_json([" + ", ".join(f"{{t}}.{q(name)}::varchar" for name in identity_columns(spec)) + "])::varchar"


def resolve_folds(con: duckdb.DuckDBPyConnection, spec: SourceSpec, candidates: str, raw_table: str,
                  units: str, generation_start: Callable[[str, int], int | None] = lambda path, g: None) -> int:
    """Move second-pass lines of ``candidates`` (the classifier's output, not yet in raw) to the
    later offset. Returns lines moved.

    ``candidates.path`` is a unit key; ``units`` maps it (column ``k``) to the real ``path``, the
    unit's observation ``seq``, ``first_line`` (1: the unit starts a generation of the file, so
    nothing before it counts) and ``generation``. A unit that continues a generation takes the
    file's earlier lines of that generation from ``raw_table`` as context: for each line number
    below ``first_line``, its row observed since the generation began (``generation_start(path,
    generation)``: the seq of its first unit; None: unknown, the most recently observed row).
    Without that bound, a line of the generation that raw lacks (quarantined, blank) took an
    earlier generation's line of that number as context, which a full refresh never sees.
    """
    moved = 0
    ident = _identity_sql(spec)
    for f in spec.fields:
        if f.time not in NAIVE_TIMES:
            continue
        zone = f.time_zone or spec.time_zone
        col, fold_col = q(f.name), q(f.name + "_fold")
        rows = con.execute(
            f"select u.path, u.seq, u.first_line, c.path as k, c.line_number, c.{col}, u.generation, "
            f"{ident.format(t='c')} from {candidates} c join {units} u on c.path = u.k "
            f"where c.reason is null and c.{fold_col} = ? order by u.path, u.seq, c.line_number",
            [FOLD_FIRST]).fetchall()
        if not rows:
            continue
        updates = []
        by_path: dict[str, list[tuple]] = {}
        for row in rows:
            by_path.setdefault(row[0], []).append(row)
        for path, lines in by_path.items():
            states: dict[date, PassState] = {}
            first_seq, first_line, generation = lines[0][1], lines[0][2], lines[0][6]
            if first_line > 1:  # the generation began before this batch: its earlier lines count
                began = generation_start(path, generation) if generation is not None else None
                earlier = con.execute(
                    f"select {col}, {fold_col}, {ident.format(t='r')} from {raw_table} r where path = ? "
                    f"and line_number < ? and observed_seq < ? and observed_seq >= ? and {fold_col} in (?, ?) "
                    "qualify row_number() over (partition by line_number order by observed_seq desc) = 1 "
                    "order by line_number",
                    [path, first_line, first_seq, -1 if began is None else began, FOLD_FIRST, FOLD_SECOND]).fetchall()
                for at, fold, identity in earlier:
                    wall = wall_time(at, zone)
                    states.setdefault(wall.date(), PassState()).note(identity, wall, fold)
            seq = None
            for _, unit_seq, unit_first, k, line_number, at, unit_generation, identity in lines:
                if unit_seq != seq:
                    seq = unit_seq
                    # a new generation of the file starts over: told by its number (a replay's
                    # batch holds several, and a generation whose first unit has no line in the
                    # hour starts with a later unit), by its first line where none is recorded
                    if (unit_generation != generation if unit_generation is not None and generation is not None
                            else unit_first == 1 and unit_seq != first_seq):
                        states = {}
                        generation = unit_generation
                wall = wall_time(at, zone)
                if assign_passes(states, [wall], [identity])[0] == FOLD_SECOND:
                    updates.append((instant(wall, zone, FOLD_SECOND), FOLD_SECOND, k, line_number))
        if updates:  # one statement: executemany runs one update per line, ~0.5 ms each
            moves = arrowcols.table({"instant": arrowcols.timestamps([u[0] for u in updates]),
                                     "fold": arrowcols.strings([u[1] for u in updates]),
                                     "k": arrowcols.strings([u[2] for u in updates]),
                                     "line_number": arrowcols.ints([u[3] for u in updates])})
            with registered(con, "_fold_moves", moves):
                con.execute(f"update {candidates} as c set {col} = m.instant, {fold_col} = m.fold "
                            "from _fold_moves as m where c.path = m.k and c.line_number = m.line_number")
            moved += len(updates)
    return moved
