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

