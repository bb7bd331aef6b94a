"""Signal opinions, conflicts and promotion candidates (SPEC 2.9, 4.3) from ``staging.signals``.

* ``marts.signal_opinions``: every signal, its polarity, ``effective_strength = strength ×
  0.8^floor(age_days / 30)`` as of ``as_of`` (age from ``created_at``, the trustworthy time),
  ``is_current`` (latest per target + aspect by ``created_at``, then ``id``) and ``superseded_by``.
* ``marts.signal_conflicts``: targets whose current opinions are both positive and negative.
* ``marts.promotion_candidates``: ≥ 2 positive signals with effective strength ≥ 0.7 whose
  aspect's current opinion is still positive, at least one from ``manual``. "A single source
  never promotes" is read with the seed design's Rule 1: a single feedback signal never
  promotes and automated sources need a manual confirmation; two manual signals do promote
  (see the comment in ``sql/marts/promotion_candidates.sql``).
"""

from __future__ import annotations

from datetime import date

import duckdb

from transforms.sqlfiles import materialize

SIGNAL_MARTS = ["signal_opinions", "signal_conflicts", "promotion_candidates"]
DECAY = 0.8
DECAY_PERIOD_DAYS = 30
PROMOTION_MIN_STRENGTH = 0.7


def effective_strength(strength: float, created: date, as_of: date) -> float:
    """The Python twin of ``marts.signal_opinions.effective_strength`` (ages below 0 count as 0)."""
    age_days = max((as_of - created).days, 0)
    return strength * DECAY ** (age_days // DECAY_PERIOD_DAYS)


def build_signal_marts(con: duckdb.DuckDBPyConnection, as_of: date) -> dict[str, int]:
    """Decay is computed as of ``as_of`` (the run date, or a fixed date for reproducible runs)."""
    if not isinstance(as_of, date):
        raise TypeError(f"as_of must be a date, got {type(as_of).__name__}")
    return {
        "marts.signal_opinions": materialize(con, "marts/signal_opinions", {"as_of": as_of}),
        "marts.signal_conflicts": materialize(con, "marts/signal_conflicts"),
        "marts.promotion_candidates": materialize(con, "marts/promotion_candidates"),
    }
