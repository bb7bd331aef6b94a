"""Training sets (SPEC 4.4) as DuckDB tables in schema ``exports``; the publisher writes Parquet.

``build_training_sets(con, pseudonym_key=..., as_of=...)`` builds ``exports.sft``,
``exports.kto``, ``exports.dpo`` and ``exports.weighted`` from the same final labels
(``marts.interaction_labels``, built first when missing). Public columns come first in the
SPEC 5 order, provenance columns after. Messages are ``list<struct<role, content>>`` (TRL
conversational format); normalisation and splits are described in ``transforms.text``,
pseudonyms in ``transforms.pseudonyms``.

Incremental (``transforms.delta``): the interactions the labels builds since this builder's
last build re-decided (``lineage.label_changes``) are the touched ones: their sft/kto rows are
deleted and recomputed, and so are the DPO groups they were or are in (except capped groups
that only gained answers later than their kept pairs: ``sql/exports/dpo_settled_groups.sql``
proves those unchanged); weighted examples whose
staging row changed are recomputed in kto and weighted. The costly per-interaction values
(normalised-prompt hashes, pseudonym, the hash of the answer) live in ``lineage.prompt_keys`` and
are computed once per interaction version: a touched DPO group is paired again from its
members' keys, and only the members of pairs it did not hold before are read from staging. A
change of settings (split fraction, pair cap, key, retention with the run date), of the code,
or a labels build this builder cannot follow rebuilds whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

import duckdb

from transforms import delta, pseudonyms, text
from transforms.classify import q
from transforms.labels import (as_date, build_labels, check_days, insert_sql, label_changes_since,
                               latest_label_build, run_sql, sql_params, table_exists)
from transforms.sqlfiles import sql_text, table_columns, transaction

DEFAULT_EVAL_FRACTION = 0.05
DEFAULT_DPO_MAX_PAIRS = 16
RETENTION_SOURCES = ("interactions", "weighted_queue", "weighted_ratings")
EXPORTS = ("sft", "kto", "dpo", "weighted")
PROMPT_KEYS = "lineage.prompt_keys"
# What the last build consumed of staging.weighted_examples: a hash of each whole row.
WEIGHTED_INPUTS = "lineage.training_weighted_inputs"
WEIGHTED_HASH = "hash(w)"  # w: the row, as a struct
# What sql/exports/dpo.sql reads of an interaction (fw_interactions, aliases p and n): all an
# incremental build fetches of an untouched member of a new pair (scattered rows: every column costs).
DPO_MEMBER_COLUMNS = ("id", "input_text", "context", "output_text", "path", "line_number")
# The pairs of the groups being built, by id (sql/exports/dpo_pairs.sql): what dpo.sql gives texts.
DPO_PAIRS = "fw_dpo_pairs"

# What _build_incremental deletes and inserts again, table by table.
RECOMPUTED = {
    "exports.sft": "base.interaction_id in (select key from fw_touched_interactions)",
    "exports.kto": "(base.origin = 'interaction' and base.example_id in (select key from fw_touched_interactions)) "
                   "or (base.origin <> 'interaction' and base.example_id in (select key from fw_touched_weighted))",
    # a touched group's pairs that it still holds as they were (fw_dpo_kept) stay
    "exports.dpo": "base.prompt_group in (select key from fw_touched_groups) and not exists (select 1 from "
                   "fw_dpo_kept k where k.chosen_id = base.chosen_id and k.rejected_id = base.rejected_id)",
    "exports.weighted": "base.content_hash in (select key from fw_touched_weighted)",
}

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
    incremental: bool = True,
) -> delta.Built:
    """Build ``exports.{sft,kto,dpo,weighted}``: row counts by table and, when incremental, the
    rows it appended to each (``delta.Built``: all it wrote).

    ``retention_days`` maps ``interactions`` / ``weighted_queue`` / ``weighted_ratings`` to a
    number of days counted back from ``as_of`` 00:00 UTC (missing or ``None``: keep all).
    ``dpo_max_pairs``: pairs kept per prompt group (``FLYWHEEL_DPO_MAX_PAIRS``; ``None`` = all).
    ``incremental``: recompute only what changed since the last build when that can be told
    (same result as a whole build; ``False`` forces a whole build).
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
    # as_of matters only through retention; a daily run with retention off stays incremental
    dated = any(params[k] is not None for k in params if k.endswith("_retention_days"))
    key = delta.settings_key(
        "training", {k: v for k, v in params.items() if k != "as_of"}, params["as_of"] if dated else None,
        con.execute("select fw_pseudonym('flywheel-watermark')").fetchone()[0],
        sql=("exports/prompt_keys", "exports/dpo_settled_groups", "exports/dpo_pairs",
             *(f"exports/{name}" for name in EXPORTS)))
    state = delta.load(con, "training", key) if incremental else None
    labels_now = latest_label_build(con)
    changes = label_changes_since(con, state and state.get("labels"))
    usable = (changes is not None and labels_now is not None
              and all(table_exists(con, t) for t in (PROMPT_KEYS, WEIGHTED_INPUTS,
                                                      *(f"exports.{name}" for name in EXPORTS)))
              # the labels were built from the staging rows these exports will read (so
              # lineage.label_inputs holds every staging id: delta.staging_interactions)
              and con.execute(f"select count(*), coalesce(sum({delta.FINGERPRINT}), 0)::varchar "
                              "from staging.interactions").fetchone()
              == (labels_now["inputs_rows"], labels_now["inputs_sum"]))
    appended: dict[str, tuple[int, int]] = {}
    deleted: dict[str, set[str] | None] = {}
    with transaction(con):
        # staging's rows observed after this are those appended since this build read it
        watermark = delta.staging_watermark(con)
        if usable:
            appended, deleted = _build_incremental(con, params, changes, state.get("staging_seq"))
        else:
            _build_whole(con, params)
        delta.save(con, "training", key, {"labels": labels_now, "staging_seq": watermark})
        counts = {f"exports.{name}": con.execute(f"select count(*) from exports.{name}").fetchone()[0]
                  for name in EXPORTS}
    return delta.Built(counts, appended, deleted)



def _build_whole(con: duckdb.DuckDBPyConnection, params: dict[str, Any]) -> None:
    _drop_fw_interactions(con)
    con.execute("create temp view fw_interactions as select * from staging.interactions")
    delta.temp_keys(con, "fw_touched_interactions")
    delta.temp_keys(con, "fw_touched_weighted")
    delta.temp_keys(con, "fw_touched_groups")
    whole = {**params, "all": True, "new_keys": 0}
    run_sql(con, "exports/prompt_keys", whole, table=PROMPT_KEYS)
    _dpo_pairs(con, whole)
    for name in EXPORTS:
        run_sql(con, f"exports/{name}", whole)
    con.execute(f"drop table {DPO_PAIRS}")
    con.execute(f"create or replace table {WEIGHTED_INPUTS} as "
                f"select content_hash, {WEIGHTED_HASH} as h from staging.weighted_examples as w")


def _drop_fw_interactions(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the temp view or table ``fw_interactions`` of an earlier build on this connection."""
    if con.execute("select count(*) from duckdb_views() where temporary and view_name = 'fw_interactions'").fetchone()[0]:
        con.execute("drop view temp.main.fw_interactions")
    con.execute("drop table if exists temp.main.fw_interactions")


def _build_incremental(con: duckdb.DuckDBPyConnection, params: dict[str, Any], changes: str,
                       staging_seq: int | None) -> tuple[dict[str, tuple[int, int]], dict[str, set[str] | None]]:
    """Delete and recompute the touched interactions, weighted examples and DPO groups; per table,
    the first rowid and the number of the rows inserted (``delta.Built.appended``), and the event
    days of the rows deleted (``delta.Built.deleted_days``). ``staging_seq``: staging's largest
    ``observed_seq`` when the last build read it (None: not known)."""
    delta.temp_keys(con, "fw_touched_interactions", changes)
    delta.temp_keys(con, "fw_touched_weighted", f"""
        (select content_hash as key, {WEIGHTED_HASH} as h from staging.weighted_examples as w
         except select content_hash, h from {WEIGHTED_INPUTS})
        union all
        (select content_hash, h from {WEIGHTED_INPUTS}
         except select content_hash as key, {WEIGHTED_HASH} as h from staging.weighted_examples as w)""")
    weighted = "in (select key from fw_touched_weighted)"
    # Staging is read twice, not once per table: the touched rows, then the other members of
    # the DPO pairs that are new (the SQL reads fw_interactions).
    _drop_fw_interactions(con)
    con.execute("create temp table fw_interactions as select * from staging.interactions limit 0")
    # the labels vouch for lineage.label_inputs: it holds every staging id (checked in ``usable``)
    delta.staging_interactions(con, "fw_interactions", "*", "select key from fw_touched_interactions", staging_seq)
    # a touched interaction's DPO groups: the one it was in and the one it is in now (its old keys
    # row found by the id's hash, then deleted by rowid; its new keys where they were appended)
    delta.rows_with_ids(con, "fw_old_keys", PROMPT_KEYS, "prompt_group", "id_key",
                        "select key from fw_touched_interactions")
    delta.temp_keys(con, "fw_left_groups", "select prompt_group as key from fw_old_keys")
    con.execute(f"delete from {PROMPT_KEYS} where rowid in (select rid from fw_old_keys)")
    # the touched interactions' keys are appended from row new_keys on: sft, kto and the settled
    # groups read them by that range
    new_keys = int(delta.next_rowid(con, PROMPT_KEYS))
    part = {**params, "all": False, "new_keys": new_keys}
    insert_sql(con, "exports/prompt_keys", part, table=PROMPT_KEYS)
    delta.temp_keys(con, "fw_touched_groups", f"select key from fw_left_groups union all "
                                              f"select prompt_group as key from {PROMPT_KEYS} where rowid >= {new_keys}")
    if params["max_pairs"] is not None:
        # capped groups that only gained later answers keep their pairs: not read, not rewritten
        con.execute(f"delete from fw_touched_groups where key in ({sql_text('exports/dpo_settled_groups')}\n)",
                    sql_params("exports/dpo_settled_groups", part))
    _diff_dpo(con, part)
    # the other members of the new pairs (fw_interactions holds the touched ones): only dpo.sql
    # reads them (the other tables read touched ids alone), so its columns only; old rows, so
    # the whole id column (no watermark)
    delta.staging_interactions(con, "fw_interactions", ", ".join(q(c) for c in DPO_MEMBER_COLUMNS),
                               f"select chosen_id as key from {DPO_PAIRS} union select rejected_id from {DPO_PAIRS}",
                               None)
    deleted = delta.delete_recomputed(con, RECOMPUTED)
    appended = {}
    for name in EXPORTS:
        start = delta.next_rowid(con, f"exports.{name}")
        # dpo: the pairs that changed (_diff_dpo), not the touched groups' whole
        appended[f"exports.{name}"] = (start, insert_sql(con, f"exports/{name}", part))
    con.execute(f"delete from {WEIGHTED_INPUTS} where content_hash {weighted}")
    con.execute(f"insert into {WEIGHTED_INPUTS} select content_hash, {WEIGHTED_HASH} "
                f"from staging.weighted_examples as w where content_hash {weighted}")
    return appended, deleted


def _dpo_pairs(con: duckdb.DuckDBPyConnection, params: dict[str, Any]) -> None:
    """``fw_dpo_pairs``: the pairs of the groups being built (all, or fw_touched_groups), by id."""
    con.execute(f"create or replace temp table {DPO_PAIRS} as {sql_text('exports/dpo_pairs')}",
                sql_params("exports/dpo_pairs", params))


def _diff_dpo(con: duckdb.DuckDBPyConnection, params: dict[str, Any]) -> None:
    """``fw_dpo_pairs``: the touched groups' pairs that exports.dpo does not hold as they are;
    ``fw_dpo_kept``: those it holds, which the build neither deletes nor inserts.

    A pair row is made of its two interactions' staging rows, prompt keys and labels (and the
    split setting, part of the build's key): a pair whose chosen and rejected interactions are
    both untouched is the same row as before when the group still pairs them. So only the pairs
    that changed are rewritten, and their days are the only ones the snapshot hashes again: a
    touched group's pairs lie on all its days (on the 1M lake, a +1% run touched pairs on 59 of
    the 61 days, of which 1 changed). The pairs are decided from the members' keys, so only the
    members of the pairs left are read from staging (their texts)."""
    _dpo_pairs(con, params)
    touched = "(select key from fw_touched_interactions)"
    con.execute(f"create or replace temp table fw_dpo_kept as select e.chosen_id, e.rejected_id from exports.dpo e "
                f"semi join {DPO_PAIRS} d on d.chosen_id = e.chosen_id and d.rejected_id = e.rejected_id "
                f"where e.prompt_group in (select key from fw_touched_groups) and e.chosen_id not in {touched} "
                f"and e.rejected_id not in {touched}")
    con.execute(f"delete from {DPO_PAIRS} d where exists (select 1 from fw_dpo_kept k "
                "where k.chosen_id = d.chosen_id and k.rejected_id = d.rejected_id)")


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
    return list(table_columns(con, f"exports.{name}") or {})
