"""Final interaction labels (SPEC 4.1) and the analytics marts over ratings and outcomes.

``build_labels(con)`` builds ``marts.interaction_labels`` and ``marts.orphan_feedback`` from
``staging.interactions`` and every sidecar event in ``raw.feedback`` (rules in
``sql/marts/interaction_labels.sql``). ``build_marts(con, as_of=..., ...)`` builds
``marts.session_satisfaction``, ``marts.session_rating_matches`` and ``marts.outcome_rates``.
Every table is rebuilt whole from all data, so re-running is idempotent and an orphan sidecar
row joins its interaction on the first run after the interaction arrives.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any

import duckdb

from transforms import pseudonyms, text
from transforms.sqlfiles import materialize, sql_text

SESSION_RATINGS_RETENTION_DAYS = 180
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def run_sql(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None) -> int:
    """``materialize`` with only the parameters ``sql/<name>.sql`` uses (DuckDB rejects extras)."""
    params = params or {}
    code = "\n".join(line.split("--", 1)[0] for line in sql_text(name).splitlines())
    used = set(_PARAM.findall(code))
    missing = used - params.keys()
    if missing:
        raise ValueError(f"sql/{name}.sql needs parameters {sorted(missing)}")
    return materialize(con, name, {k: v for k, v in params.items() if k in used})


def as_date(value: date | datetime | str) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return date.fromisoformat(str(value))


def check_days(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or int(value) != value or value < 0:
        raise ValueError(f"{name} must be a non-negative whole number of days or None, got {value!r}")
    return int(value)


def table_exists(con: duckdb.DuckDBPyConnection, qualified: str) -> bool:
    schema, table = qualified.split(".")
    return bool(con.execute(
        "select count(*) from information_schema.tables where table_schema = ? and table_name = ?",
        [schema, table],
    ).fetchall()[0][0])


def build_labels(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Build ``marts.interaction_labels`` and ``marts.orphan_feedback``; row counts by table."""
    return {
        "marts.interaction_labels": run_sql(con, "marts/interaction_labels"),
        "marts.orphan_feedback": run_sql(con, "marts/orphan_feedback"),
    }


def build_marts(
    con: duckdb.DuckDBPyConnection,
    *,
    as_of: date | datetime | str,
    retention_days: int | None = SESSION_RATINGS_RETENTION_DAYS,
    pseudonym_key: bytes | None = None,
    outcome_retention_days: int | None = None,
) -> dict[str, int]:
    """Build the session-rating and outcome marts; row counts by table.

    ``retention_days`` applies to session ratings (default 180, ``None`` keeps all),
    ``outcome_retention_days`` to outcomes (default: keep all), both counted back from
    ``as_of`` 00:00 UTC. The marts are aggregates without ids; ``pseudonym_key`` (when given)
    registers ``fw_pseudonym``/``fw_session_pseudonym`` for any per-id mart SQL.
    """
    text.register(con)
    if pseudonym_key is not None:
        pseudonyms.register(con, pseudonym_key)
    day = as_date(as_of)
    ratings = {"as_of": day, "retention_days": check_days("retention_days", retention_days)}
    outcomes = {"as_of": day,
                "retention_days": check_days("outcome_retention_days", outcome_retention_days)}
    return {
        "marts.session_satisfaction": run_sql(con, "marts/session_satisfaction", ratings),
        "marts.session_rating_matches": run_sql(con, "marts/session_rating_matches", ratings),
        "marts.outcome_rates": run_sql(con, "marts/outcome_rates", outcomes),
    }
