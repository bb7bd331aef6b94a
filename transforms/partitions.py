"""How published files are cut by event time, as far as builders need to know it.

The publisher (``dagster_project/publishing/parquet.py``) cuts each table into files by the day
(month, for small tables) of one event-time column. A builder that re-decides a few rows can say
which of those days its change touched (``day_sql``), so the publisher hashes only those days'
rows instead of the whole table (``versions.record_changes``).
"""

from __future__ import annotations

from transforms.classify import q

# Event-time columns, most meaningful first; a table without one is a single partition.
TIME_COLUMNS = ("interaction_timestamp", "example_timestamp", "timestamp", "queried_at", "created_at",
                "recorded_at", "committed_at", "first_labeled_at", "first_seen", "day", "started_at",
                "validated_at", "quarantined_at", "observed_at")
DAY = "%Y-%m-%d"
MONTH = "%Y-%m"
UNDATED = "undated"


def partition_column(columns: dict[str, str]) -> str | None:
    """The event-time column of a table with these {column: type}, None without one."""
    def is_time(name: str) -> bool:
        return columns[name].upper().startswith(("TIMESTAMP", "DATE"))

    preferred = [c for c in TIME_COLUMNS if c in columns and is_time(c)]
    if preferred:
        return preferred[0]
    return next((c for c in columns if is_time(c)), None)


def time_sql(column: str, fmt: str = DAY, alias: str | None = None) -> str:
    """A row's day (or month) of ``column`` as the publisher names its file; ``undated`` for NULL.
    (``strftime`` of a TIMESTAMPTZ reads the connection's time zone: the state connection's, UTC.)"""
    ref = f"{alias}.{q(column)}" if alias else q(column)
    return f"coalesce(strftime({ref}, '{fmt}'), '{UNDATED}')"


def span_sql(column: str, kind: str, names: list[str]) -> str:
    """A predicate on ``column`` itself (of DuckDB type ``kind``) true of every row whose
    ``time_sql`` is one of ``names`` (days, months or ``undated``): one range from the first to
    the last, which DuckDB checks against each row group's min/max and skips the rest, where
    ``time_sql`` alone would read every row. A superset: AND it with the exact test. Literals
    without an offset are read in the connection's time zone, as ``strftime`` is."""
    dated = sorted(n for n in names if n != UNDATED)
    spans = []
    if dated:
        literal = "date" if kind.upper() == "DATE" else (
            "timestamptz" if "TIME ZONE" in kind.upper() else "timestamp")
        first, last = dated[0], dated[-1]
        lo = first if len(first) == 10 else f"{first}-01"
        hi = (f"({literal} '{last}' + interval 1 day)" if len(last) == 10
              else f"({literal} '{last}-01' + interval 1 month)")
        spans.append(f"({q(column)} >= {literal} '{lo}' and {q(column)} < {hi})")
    if UNDATED in names:
        spans.append(f"{q(column)} is null")
    return " or ".join(spans) or "false"
