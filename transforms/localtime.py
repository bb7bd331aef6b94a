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

Known limit: a writer silent from before the first pass until inside the second pass (more than
an hour) leaves no step back; its lines stay ``fold_first``. Times in a *skipped* hour (spring)
are quarantined by the classifier as ``bad_timestamp``: no correct clock writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

import duckdb

from transforms.classify import q
from transforms.spec import SourceSpec

FOLD_FIRST = "fold_first"
FOLD_SECOND = "fold_second"
NAIVE_TIMES = ("iso_naive", "iso_any")


@dataclass
class PassState:
    """One file's progress through one repeated hour."""

    latest_first: datetime | None = None  # greatest wall time seen in the first pass
    second: bool = False


def assign_passes(states: dict[date, PassState], wall_times: list[datetime]) -> list[str]:
    """The pass of each ambiguous wall time of one file, in write order; updates ``states``."""
    out = []
    for wall in wall_times:
        st = states.setdefault(wall.date(), PassState())
        if not st.second and st.latest_first is not None and wall < st.latest_first:
            st.second = True
        if st.second:
            out.append(FOLD_SECOND)
        else:
            st.latest_first = wall if st.latest_first is None else max(st.latest_first, wall)
            out.append(FOLD_FIRST)
    return out


def instant(wall: datetime, zone: str, fold: str) -> datetime:
    """The UTC instant of an ambiguous wall time in its pass."""
    local = wall.replace(tzinfo=ZoneInfo(zone), fold=1 if fold == FOLD_SECOND else 0)
    return local.astimezone(timezone.utc)


def parse_wall(text: str) -> datetime:
    return datetime.fromisoformat(text.strip()).replace(tzinfo=None)


def resolve_folds(con: duckdb.DuckDBPyConnection, spec: SourceSpec, candidates: str, raw_table: str) -> int:
    """Move second-pass lines of ``candidates`` (the classifier's output, not yet in raw) to the
    later offset, with each file's earlier lines in ``raw_table`` as context. Returns lines moved.
    """
    moved = 0
    for f in spec.fields:
        if f.time not in NAIVE_TIMES:
            continue
        zone = f.time_zone or spec.time_zone
        col, text_col, fold_col = q(f.name), q(f.name + "_text"), q(f.name + "_fold")
        rows = con.execute(
            f"select path, line_number, {text_col} from {candidates} "
            f"where reason is null and {fold_col} = ? order by path, line_number", [FOLD_FIRST]).fetchall()
        if not rows:
            continue
        paths = sorted({r[0] for r in rows})
        states: dict[str, dict[date, PassState]] = {p: {} for p in paths}
        earlier = con.execute(
            f"select path, {text_col}, {fold_col} from {raw_table} "
            f"where path in (select unnest(?::varchar[])) and {fold_col} in (?, ?)",
            [paths, FOLD_FIRST, FOLD_SECOND]).fetchall()
        for path, text, fold in earlier:
            wall = parse_wall(text)
            st = states[path].setdefault(wall.date(), PassState())
            if fold == FOLD_SECOND:
                st.second = True
            else:
                st.latest_first = wall if st.latest_first is None else max(st.latest_first, wall)
        updates = []
        by_path: dict[str, list[tuple[int, datetime]]] = {}
        for path, line_number, text in rows:
            by_path.setdefault(path, []).append((line_number, parse_wall(text)))
        for path, lines in by_path.items():
            passes = assign_passes(states[path], [wall for _, wall in lines])
            updates += [(instant(wall, zone, FOLD_SECOND), FOLD_SECOND, path, line_number)
                        for (line_number, wall), fold in zip(lines, passes) if fold == FOLD_SECOND]
        if updates:
            con.executemany(f"update {candidates} set {col} = ?, {fold_col} = ? "
                            "where path = ? and line_number = ?", updates)
            moved += len(updates)
    return moved
