"""Great Expectations suites for staged tables and exports, declared as data.

Each ``Check`` names a column of the frame handed to GX; ``expr`` computes it in DuckDB first
(for what GX cannot see directly: the last message of a conversation, a prompt's split count,
a timestamp compared with the run time). ``blocking`` checks stop a publish when they fail;
the others are reported (e.g. the KTO class balance).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Check:
    name: str
    column: str
    kind: str  # not_null | unique | in_set | between | true
    expr: str | None = None  # DuckDB expression for the column (default: the column itself)
    value_set: tuple = ()
    min_value: float | None = None
    max_value: float | None = None
    blocking: bool = True
    mostly: float = 1.0
    options: dict = field(default_factory=dict)


def not_null(column: str) -> Check:
    return Check(f"{column} is not null", column, "not_null")


def unique(column: str, expr: str | None = None) -> Check:
    return Check(f"{column} is unique", column, "unique", expr=expr)


def in_set(column: str, values: tuple) -> Check:
    return Check(f"{column} in {{{', '.join(map(str, values))}}}", column, "in_set", value_set=values)


def between(column: str, low: float | None, high: float | None, *, expr: str | None = None,
            name: str | None = None) -> Check:
    return Check(name or f"{column} in [{low}, {high}]", column, "between", expr=expr,
                 min_value=low, max_value=high)


def holds(name: str, column: str, expr: str, *, blocking: bool = True) -> Check:
    """A boolean expression that must be true on every row."""
    return Check(name, column, "true", expr=expr, blocking=blocking)


def not_future(column: str) -> Check:
    """Present and not after the run time ($now, bound when validating)."""
    return holds(f"{column} present and not in the future", f"{column}_not_future",
                 f"{column} is not null and {column} <= $now")


def messages_ok(column: str) -> Check:
    return holds(f"{column} is a non-empty conversation", f"{column}_non_empty",
                 f"len({column}) > 0 and length({column}[len({column})].content) > 0")


NO_SPLIT_LEAK = holds(
    "no normalised prompt in both splits", "prompt_in_one_split",
    "count(distinct split) over (partition by fw_norm(list_filter(prompt, lambda m: m.role = 'user')[1].content)) = 1")
SPLIT = in_set("split", ("train", "eval"))

SUITES: dict[str, list[Check]] = {
    "staging.interactions": [
        not_null("id"), unique("id"), not_future("timestamp"),
        in_set("interaction_type", ("prompt_response", "code_generation", "code_review", "refactor", "search",
                                    "decision", "error_fix", "documentation", "test", "other")),
        in_set("user_feedback", ("positive", "negative", "neutral", "none")),
        not_null("session_id"), between("tokens_used", 0, None),
    ],
    "staging.feedback": [not_null("record_id"), unique("record_id"), not_future("timestamp"),
                         in_set("feedback", ("positive", "negative", "neutral"))],
    "staging.outcomes": [not_null("id"), unique("id"), not_future("timestamp"),
                         in_set("outcome", ("accepted", "rejected", "neutral"))],
    "staging.session_ratings": [not_null("id"), unique("id"), not_future("recorded_at"),
                                in_set("label", ("positive", "negative", "skip")),
                                in_set("source", ("cli_end", "cli_exit", "api_end"))],
    "staging.weighted_examples": [unique("content_hash"), between("weight", 0, None, name="weight > 0",
                                                                 expr="weight"),
                                  holds("weight > 0", "weight_positive", "weight > 0"),
                                  in_set("label", (True, False)), in_set("origin", ("queue", "rating"))],
    "staging.signals": [not_null("id"), unique("id"), not_future("created_at"),
                        between("strength", 0, 1),
                        in_set("signal", ("correct", "incorrect", "good", "bad", "unsure", "neutral"))],
    "staging.eventlog": [unique("event_key"), not_future("timestamp"), not_null("event_type")],
    "staging.legacy_log": [unique("content_hash"), in_set("type", ("interaction", "pipeline_event", "api_call"))],
    "marts.interaction_labels": [not_null("interaction_id"), unique("interaction_id"),
                                 in_set("label", ("positive", "negative", "neutral")),
                                 in_set("label_source", ("inline", "manual", "outcome_tracker")),
                                 between("n_events", 1, None), not_future("labeled_at")],
    "marts.session_satisfaction": [between("satisfaction", 0, 1), between("sessions", 1, None)],
    "marts.session_rating_matches": [between("match_rate", 0, 1)],
    "marts.outcome_rates": [between("acceptance_rate", 0, 1), between("outcomes", 1, None)],
    "marts.orphan_feedback": [unique("record_id"), between("n_events", 1, None)],
    "exports.sft": [messages_ok("prompt"), messages_ok("completion"), unique("interaction_id"), SPLIT,
                    NO_SPLIT_LEAK, holds("sample_weight > 0", "weight_positive", "sample_weight > 0")],
    "exports.kto": [messages_ok("prompt"), messages_ok("completion"), in_set("label", (True, False)), SPLIT,
                    NO_SPLIT_LEAK, holds("sample_weight > 0", "weight_positive", "sample_weight > 0"),
                    Check("KTO class balance (share of desirable examples)", "label_share", "between",
                          expr="avg(label::int) over ()", min_value=0.05, max_value=0.95, blocking=False)],
    "exports.dpo": [messages_ok("prompt"), messages_ok("chosen"), messages_ok("rejected"), SPLIT, NO_SPLIT_LEAK,
                    holds("chosen differs from rejected", "chosen_differs", "chosen <> rejected"),
                    unique("pair", expr="chosen_id || '>' || rejected_id")],
    "exports.weighted": [messages_ok("prompt"), messages_ok("completion"), in_set("label", (True, False)), SPLIT,
                         NO_SPLIT_LEAK, holds("weight > 0", "weight_positive", "weight > 0")],
}
