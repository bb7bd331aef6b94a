"""Signal opinions, conflicts and promotion candidates (SPEC 4.3) from ``staging.signals``."""

from __future__ import annotations

from datetime import date

import duckdb

from transforms.sqlfiles import materialize

SIGNAL_MARTS = ["signal_opinions", "signal_conflicts", "promotion_candidates"]


def build_signal_marts(con: duckdb.DuckDBPyConnection, as_of: date) -> dict[str, int]:
    """Decay is computed as of ``as_of`` (the run date, or a fixed date for reproducible runs)."""
    return {
        "marts.signal_opinions": materialize(con, "marts/signal_opinions", {"as_of": as_of}),
        "marts.signal_conflicts": materialize(con, "marts/signal_conflicts"),
        "marts.promotion_candidates": materialize(con, "marts/promotion_candidates"),
    }
