"""Marts and training-set tables: labels, ratings and outcomes, TRL training sets."""

from datetime import datetime, timezone

import dagster as dg

from dagster_project.expectations import FUTURE_SLACK
from dagster_project.metadata import markdown_table
from dagster_project.tables import TableGroup, table_assets
from transforms import labels, retrieval, signals, training
from transforms.delta import table_exists
from transforms.staging import WATERMARKS


def _labels(con, flywheel, context):
    # A sidecar event staging.feedback's drop step excluded (stamped beyond its run time + slack)
    # is left out of the timelines too, at the same instant, so that both agree on every event:
    # the time that step ran as of, or, reused, the time this run found it still current (now
    # could be seconds later: an event crossing in between was in the labels, not in staging).
    row = (con.execute(f"select drop_now from {WATERMARKS} where table_name = 'staging.feedback'").fetchone()
           if table_exists(con, WATERMARKS) else None)
    now = row[0] if row and row[0] is not None else datetime.now(timezone.utc)
    return labels.build_labels(con, cutoff=now + FUTURE_SLACK)


LABELS = TableGroup(
    name="interaction_labels",
    group="marts",
    tables=["marts.interaction_labels", "marts.orphan_feedback"],
    deps=["staging/interactions", "staging/feedback"],
    build=_labels,
    description="final label per interaction from its inline feedback and every sidecar event not "
    "stamped beyond the run time + 1 day (last event wins); sidecar rows whose interaction has not "
    "arrived yet wait in orphan_feedback.",
    headline=lambda con: {"marts.interaction_labels": {"by_label": dg.MetadataValue.md(markdown_table(
        con, "select label, label_source, count(*) as interactions, count_if(conflicting) as conflicting "
             "from marts.interaction_labels group by all order by all"))}},
)


def _ratings_and_outcomes(con, flywheel, context):
    settings = flywheel.settings()
    return labels.build_marts(con, as_of=settings.run_date, retention_days=settings.session_retention_days,
                              pseudonym_key=flywheel.pseudonym_key(context.log))


RATINGS_AND_OUTCOMES = TableGroup(
    name="ratings_and_outcomes",
    group="marts",
    tables=["marts.session_satisfaction", "marts.session_rating_matches", "marts.outcome_rates"],
    deps=["staging/session_ratings", "staging/interactions", "staging/outcomes"],
    build=_ratings_and_outcomes,
    reads=("run_date", "session_retention_days", "pseudonym_key"),
    description="latest end-of-session rating per session by day, source and modality (retention "
    "applied) and how many rated sessions match interactions; outcome acceptance by day, model, "
    "task type and strategy arm.",
    headline=lambda con: {"marts.session_rating_matches": {"matches": dg.MetadataValue.md(
        markdown_table(con, "select * from marts.session_rating_matches"))}},
)


def _training_sets(con, flywheel, context):
    settings = flywheel.settings()
    return training.build_training_sets(
        con, pseudonym_key=flywheel.pseudonym_key(context.log), as_of=settings.run_date,
        eval_fraction=settings.eval_fraction, dpo_max_pairs=settings.dpo_max_pairs)


# The ledger's row keys (validation: ORDER_KEYS joined by '|') of what an incremental training build
# recomputed, from its temp tables (transforms.training.RECOMPUTED): sft by interaction, kto and
# weighted by interaction or weighted example, dpo by prompt group (a sha256: no '|' in it).
_TRAINING_RECOMPUTED = {
    "exports.sft": "p.row_key in (select key from fw_touched_interactions)",
    "exports.kto": "p.row_key in (select 'interaction|' || key from fw_touched_interactions) "
                   "or (p.row_key not like 'interaction|%' "
                   "and split_part(p.row_key, '|', 2) in (select key from fw_touched_weighted))",
    "exports.dpo": "split_part(p.row_key, '|', 1) in (select key from fw_touched_groups)",
    "exports.weighted": "split_part(p.row_key, '|', 2) in (select key from fw_touched_weighted)",
}

TRAINING_SETS = TableGroup(
    name="training_sets",
    group="exports",
    tables=["exports.sft", "exports.kto", "exports.dpo", "exports.weighted"],
    deps=["marts/interaction_labels", "staging/interactions", "staging/weighted_examples"],
    build=_training_sets,
    # no run_date: as_of reaches the training sets only through retention, which is off here
    reads=("eval_fraction", "dpo_max_pairs", "pseudonym_key"),
    recomputed_exclusions=_TRAINING_RECOMPUTED,
    description="TRL conversational training set built from the final labels (split by a hash of "
    "the normalised prompt; ids pseudonymised).",
    headline=lambda con: {"exports.kto": {"class_balance": dg.MetadataValue.json(
        training.kto_balance(con))}},
)

EVENTLOG_STAGING = TableGroup(
    name="eventlog_staging",
    group="staging",
    tables=[f"staging.{name}" for name in retrieval.EVENTLOG_STAGING],
    deps=["staging/eventlog"],
    build=lambda con, flywheel, context: retrieval.build_eventlog_staging(con),
    description="the retrieval eventlog unpacked: commits and every file of each (renames resolved), "
    "session windows from tags, commit→session links, queries, results with normalised doc paths.",
)

RETRIEVAL = TableGroup(
    name="retrieval_marts",
    group="marts",
    tables=[f"marts.{name}" for name in retrieval.RETRIEVAL_MARTS],
    deps=[f"staging/{name}" for name in retrieval.EVENTLOG_STAGING],
    build=lambda con, flywheel, context: retrieval.build_retrieval_marts(con),
    description="retrieval utility and precision: a retrieved file is a hit when its session "
    "committed it (exact path match).",
    headline=lambda con: {"marts.retrieval_summary": {"summary": dg.MetadataValue.md(
        markdown_table(con, "select * from marts.retrieval_summary"))}},
)

SIGNALS = TableGroup(
    name="signal_marts",
    group="marts",
    tables=[f"marts.{name}" for name in signals.SIGNAL_MARTS],
    deps=["staging/signals"],
    build=lambda con, flywheel, context: signals.build_signal_marts(con, flywheel.settings().run_date),
    reads=("run_date",),
    description="signal opinions decayed x0.8 per 30 days as of the run date (FLYWHEEL_AS_OF), "
    "conflicts, and promotion candidates (>= 2 strong positives, one manual).",
)

GROUPS = [LABELS, RATINGS_AND_OUTCOMES, TRAINING_SETS, EVENTLOG_STAGING, RETRIEVAL, SIGNALS]
TABLE_KEYS = [group.key(table) for group in GROUPS for table in group.tables]

defs = dg.Definitions(assets=[table_assets(group) for group in GROUPS])
