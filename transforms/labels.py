"""Final interaction labels (SPEC 4.1) and the analytics marts over ratings and outcomes.

``build_labels(con)`` builds ``marts.interaction_labels`` and ``marts.orphan_feedback`` from
``staging.interactions`` and every sidecar event in ``raw.feedback`` not stamped beyond the
cutoff (rules in ``sql/marts/interaction_labels.sql``). ``build_marts(con, as_of=..., ...)`` builds
``marts.session_satisfaction``, ``marts.session_rating_matches`` and ``marts.outcome_rates``.
The labels are maintained incrementally (``transforms.delta``): a build re-decides only the
interactions it *touches* (their staging row is new, changed or gone, or a sidecar event for
them arrived or a later cutoff admitted one) and logs them in ``lineage.label_changes`` for the training sets; anything it
cannot vouch for rebuilds whole. The session and outcome marts are small aggregates, rebuilt
whole.
"""

from __future__ import annotations

import re
import uuid
from datetime import date, datetime, timezone
from typing import Any

import duckdb

from transforms import delta, pseudonyms, text
from transforms.sqlfiles import materialize, sql_text, table_columns, transaction

SESSION_RATINGS_RETENTION_DAYS = 180
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")

LABEL_SQL = ("marts/interaction_labels", "marts/orphan_feedback")
# What the last labels build consumed: each staging interaction's fingerprint.
LABEL_INPUTS = delta.LABEL_INPUTS
# One row per labels build (seq increasing); ``whole`` builds have no change list.
LABEL_BUILDS = "lineage.label_builds"
# The interactions each incremental build re-decided: the training sets' delta.
LABEL_CHANGES = "lineage.label_changes"
KEEP_BUILDS = 64  # change lists kept; a consumer further behind rebuilds whole
# What the labels read of staging.interactions (sql/marts/*.sql read it as fw_label_interactions:
# a view of the table, or the touched interactions' rows).
INTERACTIONS = "fw_label_interactions"
LABEL_COLUMNS = 'id, "timestamp", user_feedback, was_edited, path, byte_offset, line_number'
# What an incremental build deletes and inserts again, table by table.
TOUCHED = "in (select key from fw_touched_interactions)"
RECOMPUTED = {"marts.interaction_labels": f"base.interaction_id {TOUCHED}",
          "marts.orphan_feedback": f"base.record_id {TOUCHED}"}


def sql_params(name: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """Only the parameters ``sql/<name>.sql`` uses (DuckDB rejects extras)."""
    params = params or {}
    code = "\n".join(line.split("--", 1)[0] for line in sql_text(name).splitlines())
    used = set(_PARAM.findall(code))
    missing = used - params.keys()
    if missing:
        raise ValueError(f"sql/{name}.sql needs parameters {sorted(missing)}")
    return {k: v for k, v in params.items() if k in used}


def run_sql(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None,
            table: str | None = None) -> int:
    """``materialize`` ``sql/<name>.sql`` (into ``table``, default from the name)."""
    return materialize(con, name, sql_params(name, params), table=table)


def insert_sql(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None,
               table: str | None = None) -> int:
    """Append the rows of ``sql/<name>.sql`` to its existing table (by column name); rows added."""
    target = table or name.replace("/", ".")
    return con.execute(f"insert into {target} by name {sql_text(name)}", sql_params(name, params)).fetchone()[0]


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


table_exists = delta.table_exists


def build_labels(con: duckdb.DuckDBPyConnection, *, incremental: bool = True,
                 cutoff: datetime | None = None) -> delta.Built:
    """Build ``marts.interaction_labels`` and ``marts.orphan_feedback``: row counts by table and,
    when incremental, the rows it appended to each (``delta.Built``: all it wrote).

    ``incremental``: re-decide only the touched interactions when the last build's watermark
    allows it (the result is the same as a whole build; ``False`` forces a whole build).
    ``cutoff``: sidecar events stamped later are left out of every timeline (the instant beyond
    which staging.feedback's drop step excludes them: its run time + slack), so a thumbs dated
    years ahead neither sets a label now nor wins for good; None keeps every event. A later
    cutoff than the last build's touches the records of the events it admits; an earlier one
    rebuilds whole.
    """
    cutoff = None if cutoff is None else cutoff.astimezone(timezone.utc)
    key = delta.settings_key("labels", delta.raw_epoch(con, "raw.interactions"),
                             delta.raw_epoch(con, "raw.feedback"), cutoff is None, sql=LABEL_SQL)
    state = delta.load(con, "labels", key) if incremental else None
    since = None if state is None or state.get("cutoff") is None else datetime.fromisoformat(state["cutoff"])
    if since is not None and cutoff is not None and cutoff < since:
        state = None  # events this build must leave out may be in the labels
    fingerprinted = (delta.has_fingerprints(con, "staging.interactions")
                     and delta.has_fingerprints(con, "raw.feedback"))
    feedback_seq, feedback_rows = con.execute(
        "select coalesce(max(observed_seq), -1), count(*) from raw.feedback").fetchone()
    interactions_seq = con.execute("select coalesce(max(observed_seq), -1) from raw.interactions").fetchone()[0]
    usable = (state is not None and fingerprinted
              and all(table_exists(con, t) for t in ("marts.interaction_labels", "marts.orphan_feedback",
                                                     LABEL_INPUTS, LABEL_BUILDS))
              # (an earlier layout of the inputs, without the id hash: rebuilt whole once)
              and "h" in (table_columns(con, LABEL_INPUTS) or {})
              # raw is append-only within an epoch: what the last build read is still all there
              and con.execute("select count(*) from raw.feedback where observed_seq <= ?",
                              [state["feedback_seq"]]).fetchone()[0] == state["feedback_rows"])
    appended: dict[str, tuple[int, int]] = {}
    deleted: dict[str, set[str] | None] = {}
    with transaction(con):
        if usable:
            fast = _touched_interactions(con, state)
            # the records of new events, and of events a later cutoff admits (two scans, each
            # skipping row groups by its column's statistics, not one scan of both columns)
            admitted = (' union select record_id from raw.feedback where "timestamp" > $since '
                        'and "timestamp" <= $cutoff' if since is not None and cutoff > since else "")
            con.execute("insert into fw_touched_interactions select distinct record_id from ("
                        f"select record_id from raw.feedback where observed_seq > $seq{admitted}) "
                        "where record_id not in (select key from fw_touched_interactions where key is not null)",
                        {"seq": state["feedback_seq"], **({"since": since, "cutoff": cutoff} if admitted else {})})
            # the touched interactions' staging rows, read once for both tables. On the fast path
            # staging's count and fingerprint sum proved it is the last build's inputs with the
            # replaced rows swapped for the new ones (observed after the watermark): so every row
            # observed up to the watermark has its id in lineage.label_inputs
            # (delta.staging_interactions); otherwise the whole id column is read
            con.execute(f"create or replace temp table {INTERACTIONS} as "
                        f"select {LABEL_COLUMNS} from staging.interactions limit 0")
            delta.staging_interactions(con, INTERACTIONS, LABEL_COLUMNS, "select key from fw_touched_interactions",
                                       state.get("interactions_seq", -1) if fast else None)
            deleted = delta.delete_recomputed(con, RECOMPUTED)
            for name in LABEL_SQL:
                table = name.replace("/", ".")
                start = delta.next_rowid(con, table)
                appended[table] = (start, insert_sql(con, name, {"all": False, "cutoff": cutoff}))
            if fast:  # only the new versions' fingerprints changed: no scan of either 1M-row table
                con.execute(f"delete from {LABEL_INPUTS} where rowid in (select rid from fw_replaced)")
                con.execute(f"insert into {LABEL_INPUTS} select id, fp, hash(id) from fw_new_rows")
            else:
                con.execute(f"delete from {LABEL_INPUTS} where id {TOUCHED}")
                con.execute(f"insert into {LABEL_INPUTS} select id, {delta.FINGERPRINT}, hash(id) from staging.interactions "
                            f"where id {TOUCHED}")
        else:
            delta.temp_keys(con, "fw_touched_interactions")
            con.execute(f"create or replace temp view {INTERACTIONS} as select {LABEL_COLUMNS} from staging.interactions")
            for name in LABEL_SQL:
                run_sql(con, name, {"all": True, "cutoff": cutoff})
            con.execute(f"create or replace table {LABEL_INPUTS} as "
                        f"select id, {delta.FINGERPRINT} as fp, hash(id) as h from staging.interactions")
        con.execute(f"drop {'table' if usable else 'view'} {INTERACTIONS}")  # made in this transaction
        _log_build(con, full=not usable)
        delta.save(con, "labels", key, {"feedback_seq": feedback_seq, "feedback_rows": feedback_rows,
                                        "interactions_seq": interactions_seq,
                                        "cutoff": None if cutoff is None else cutoff.isoformat()})
        counts = {t: con.execute(f"select count(*) from {t}").fetchone()[0]
                  for t in ("marts.interaction_labels", "marts.orphan_feedback")}
    return delta.Built(counts, appended, deleted)


def _touched_interactions(con: duckdb.DuckDBPyConnection, state: dict[str, Any]) -> bool:
    """``fw_touched_interactions``: the interactions whose staging row is new, changed or gone;
    whether the fast path told them (then ``fw_new_rows`` holds every changed fingerprint and
    ``fw_replaced`` the rows of ``lineage.label_inputs`` they replace).

    Fast path: the rows loaded since the last build (``observed_seq`` above its watermark) are
    the new versions; when the count and fingerprint sum of staging equal what the last build
    read with exactly those rows replaced, nothing else changed. Otherwise (an identity dropped
    from staging by a drop expectation, or back) every fingerprint is compared.
    """
    con.execute(f"create or replace temp table fw_new_rows as select id, {delta.FINGERPRINT} as fp "
                "from staging.interactions where observed_seq > ?", [state.get("interactions_seq", -1)])
    before = latest_label_build(con)
    delta.rows_with_ids(con, "fw_replaced", LABEL_INPUTS, "fp", "h", "select id from fw_new_rows")
    replaced = con.execute("select count(*), coalesce(sum(fp), 0) from fw_replaced").fetchone()
    new = con.execute("select count(*), coalesce(sum(fp), 0) from fw_new_rows").fetchone()
    now = con.execute(f"select count(*), coalesce(sum({delta.FINGERPRINT}), 0) from staging.interactions").fetchone()
    if (before is not None and before.get("inputs_rows") is not None
            and now[0] == before["inputs_rows"] - replaced[0] + new[0]
            and int(now[1]) == int(before["inputs_sum"]) - int(replaced[1]) + int(new[1])):
        delta.temp_keys(con, "fw_touched_interactions", "select id as key from fw_new_rows")
        return True
    delta.temp_keys(con, "fw_touched_interactions", f"""
        (select id as key, {delta.FINGERPRINT} as fp from staging.interactions
         except select id, fp from {LABEL_INPUTS})
        union all
        (select id, fp from {LABEL_INPUTS}
         except select id as key, {delta.FINGERPRINT} as fp from staging.interactions)""")
    return False


def _log_build(con: duckdb.DuckDBPyConnection, *, full: bool) -> None:
    """Append this build to ``lineage.label_builds`` (and its touched ids to ``label_changes``)."""
    seq = (con.execute(f"select coalesce(max(seq), 0) + 1 from {LABEL_BUILDS}").fetchone()[0]
           if table_exists(con, LABEL_BUILDS) else 1)
    if full or not table_exists(con, LABEL_BUILDS):  # a whole build starts the log afresh
        con.execute(f"create or replace table {LABEL_BUILDS} (seq bigint, build varchar, whole boolean, "
                    "inputs_sum varchar, inputs_rows bigint)")
        con.execute(f"create or replace table {LABEL_CHANGES} (seq bigint, interaction_id varchar)")
    inputs_sum, inputs_rows = con.execute(
        f"select coalesce(sum(fp), 0)::varchar, count(*) from {LABEL_INPUTS}").fetchone()
    con.execute(f"insert into {LABEL_BUILDS} values (?, ?, ?, ?, ?)",
                [seq, uuid.uuid4().hex, full, inputs_sum, inputs_rows])
    if not full:
        con.execute(f"insert into {LABEL_CHANGES} select ?, key from fw_touched_interactions", [seq])
    con.execute(f"delete from {LABEL_CHANGES} where seq <= ?", [seq - KEEP_BUILDS])
    con.execute(f"delete from {LABEL_BUILDS} where seq <= ?", [seq - KEEP_BUILDS])


def label_changes_since(con: duckdb.DuckDBPyConnection, since: dict[str, Any] | None) -> str | None:
    """SQL selecting the interaction ids re-decided by every labels build after ``since`` (a
    ``latest_label_build`` value), or None when that cannot be told (a whole build since, the log
    pruned, the labels rebuilt from scratch): the caller then rebuilds whole."""
    if since is None or not table_exists(con, LABEL_BUILDS):
        return None
    row = con.execute(f"select build from {LABEL_BUILDS} where seq = ?", [since["seq"]]).fetchone()
    if row is None or row[0] != since["build"]:
        return None
    if con.execute(f"select count(*) from {LABEL_BUILDS} where seq > ? and whole", [since["seq"]]).fetchone()[0]:
        return None
    return f"select interaction_id as key from {LABEL_CHANGES} where seq > {int(since['seq'])}"


def latest_label_build(con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    """The newest labels build: ``{seq, build, inputs_sum}`` (None before the first)."""
    if not table_exists(con, LABEL_BUILDS):
        return None
    row = con.execute(f"select seq, build, inputs_sum, inputs_rows from {LABEL_BUILDS} "
                      "order by seq desc limit 1").fetchone()
    return None if row is None else {"seq": row[0], "build": row[1], "inputs_sum": row[2], "inputs_rows": row[3]}


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
