"""Training sets (SPEC 4.4) as DuckDB tables in schema ``exports``; the publisher writes Parquet.

``build_training_sets(con, pseudonym_key=..., as_of=...)`` builds ``exports.sft``,
``exports.kto``, ``exports.dpo`` and ``exports.weighted`` from the same final labels
(``marts.interaction_labels``, built first when missing). Public columns come first in the
SPEC 5 order, provenance columns after. Messages are ``list<struct<role, content>>`` (TRL
conversational format); normalisation and splits are described in ``transforms.text``,
pseudonyms in ``transforms.pseudonyms``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

import duckdb

from transforms import pseudonyms, text
from transforms.labels import as_date, build_labels, check_days, run_sql, table_exists

DEFAULT_EVAL_FRACTION = 0.05
DEFAULT_DPO_MAX_PAIRS = 16
RETENTION_SOURCES = ("interactions", "weighted_queue", "weighted_ratings")
EXPORTS = ("sft", "kto", "dpo", "weighted")

# The public contract (SPEC 5), in order; extra provenance columns follow in each table.
PUBLIC_COLUMNS = {
    "sft": ["prompt", "completion", "sample_weight", "split", "interaction_id"],
    "kto": ["prompt", "completion", "label", "sample_weight", "split", "origin"],
    "dpo": ["prompt", "chosen", "rejected", "chosen_id", "rejected_id", "split"],
    "weighted": ["prompt", "completion", "weight", "note", "label", "split"],
}


def build_training_sets(
    con: duckdb.DuckDBPyConnection,
    *,
    pseudonym_key: bytes,
    as_of: date | datetime | str,
    eval_fraction: float = DEFAULT_EVAL_FRACTION,
    dpo_max_pairs: int | None = DEFAULT_DPO_MAX_PAIRS,
    retention_days: Mapping[str, int | None] | None = None,
) -> dict[str, int]:
    """Build ``exports.{sft,kto,dpo,weighted}``; row counts by table.

    ``retention_days`` maps ``interactions`` / ``weighted_queue`` / ``weighted_ratings`` to a
    number of days counted back from ``as_of`` 00:00 UTC (missing or ``None``: keep all).
    ``dpo_max_pairs``: pairs kept per prompt group (``FLYWHEEL_DPO_MAX_PAIRS``; ``None`` = all).
    """
    eval_fraction = text.check_eval_fraction(eval_fraction)
    if dpo_max_pairs is not None and (isinstance(dpo_max_pairs, bool) or int(dpo_max_pairs) != dpo_max_pairs
                                      or dpo_max_pairs < 1):
        raise ValueError(f"dpo_max_pairs must be a positive whole number or None, got {dpo_max_pairs!r}")
    retention = dict(retention_days or {})
    unknown = set(retention) - set(RETENTION_SOURCES)
    if unknown:
        raise ValueError(f"retention_days: unknown sources {sorted(unknown)}; known: {list(RETENTION_SOURCES)}")
    text.register(con)
    pseudonyms.register(con, pseudonym_key)
    if not table_exists(con, "marts.interaction_labels"):
        build_labels(con)
    params: dict[str, Any] = {
        "as_of": as_date(as_of),
        "eval_fraction": eval_fraction,
        "max_pairs": None if dpo_max_pairs is None else int(dpo_max_pairs),
        "interactions_retention_days": check_days("interactions", retention.get("interactions")),
        "queue_retention_days": check_days("weighted_queue", retention.get("weighted_queue")),
        "ratings_retention_days": check_days("weighted_ratings", retention.get("weighted_ratings")),
    }
    return {f"exports.{name}": run_sql(con, f"exports/{name}", params) for name in EXPORTS}


def kto_balance(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Class balance of ``exports.kto``: counts, weights, per origin and split.

    ``suggested_desirable_weight`` (with ``undesirable_weight = 1``) makes the weighted classes
    equal, i.e. TRL's ``desirable_weight * n_true / (undesirable_weight * n_false)`` = 1 (TRL
    recommends keeping that ratio within [1, 4/3]); ``None`` when a class is empty.
    """
    rows = con.execute(
        "select origin, split, label, count(*), sum(sample_weight) "
        "from exports.kto group by all order by all"
    ).fetchall()
    n = {True: 0, False: 0}
    w = {True: 0.0, False: 0.0}
    by_origin: dict[str, dict[str, int]] = {}
    by_split: dict[str, dict[str, int]] = {}
    for origin, split, label, count, weight in rows:
        n[label] += count
        w[label] += weight or 0.0
        key = "true" if label else "false"
        by_origin.setdefault(origin, {"true": 0, "false": 0})[key] += count
        by_split.setdefault(split, {"true": 0, "false": 0})[key] += count
    total = n[True] + n[False]
    weight_total = w[True] + w[False]
    return {
        "rows": total,
        "true": n[True],
        "false": n[False],
        "true_fraction": n[True] / total if total else None,
        "weight_true": w[True],
        "weight_false": w[False],
        "weighted_true_fraction": w[True] / weight_total if weight_total else None,
        "by_origin": by_origin,
        "by_split": by_split,
        "suggested_desirable_weight": n[False] / n[True] if n[True] and n[False] else None,
    }


def public_columns(con: duckdb.DuckDBPyConnection, name: str) -> list[str]:
    """The columns of ``exports.<name>`` (to check the SPEC 5 prefix)."""
    return [r[0] for r in con.execute(
        "select column_name from information_schema.columns where table_schema = 'exports' "
        "and table_name = ? order by ordinal_position", [name]).fetchall()]
