"""Great Expectations suites for staged tables, marts and exports, declared in code as data.

A suite is a list of :class:`Check` per table (``SUITES["exports.sft"]``). ``validation``
turns each check into a GX 1.x expectation and runs the suite on a narrow pandas frame built by
one DuckDB query; a check whose ``expr`` is set validates that derived column (what GX cannot
see directly: the last message of a conversation, how many splits a normalised prompt lands in,
whether two counts add up).

Every check has an **action** (as Lakeflow/DLT expectations do):

* ``warn`` — reported (``ingest.validations``, asset-check metadata), rows kept: e.g. the KTO
  class balance with the observed ratio;
* ``drop`` — offending rows are deleted from the table before anything downstream reads it or it
  is published, each recorded in the ledger ``ingest.excluded`` with this check's name
  (``validation.apply_drops``); *systemic* failure still blocks: when more than ``1 - mostly``
  of the candidate rows (and more than one row) offend, nothing is dropped and the check fails
  the run (a broken producer or a bug, not one odd record); staging's "not in the future" has
  no threshold (``source_suite``);
* ``fail`` — blocks the run: contract-level guarantees (schema, identity uniqueness after
  last-wins, engine-enforced types/enums/ranges, split leakage, raw ids in an export).

Where the suites come from:

* ``staging.<source>`` — generated from the source spec (the staging contract *is* the spec):
  identity columns not null and unique, required fields not null, enums in their sets,
  ``minimum``/``maximum``/``exclusive_minimum`` as ranges (signal strength in [0, 1], weights
  > 0), every time field not in the future, provenance (``path``, ``line_number`` ≥ 1), plus
  per-table extras below.
* ``staging.weighted_examples``, ``marts.*``, ``exports.*`` — declared below, with SPEC §5
  column names.

Policy: ``fail`` when a downstream guarantee depends on the whole table (keys for last-wins and
joins, enums the label mapping reads, ranges the maths reads, split hygiene, privacy);
``drop`` when one row is unusable but the rest are fine (a training row that cannot train: empty
prompt or completion, wrong roles, chosen = rejected; an event time beyond the future slack);
``warn`` for suspicious-but-processable data (class balance, an empty dataset, an opaque id that
does not look like SHA-256 hex). The README has the table.

"Not in the future" compares with the run time passed to ``validate_table`` plus
:data:`FUTURE_SLACK` (one day): a naive local time read in the default zone can legitimately be
up to +14 h ahead of UTC, and producers' clocks drift; anything later is garbage that would win
last-wins forever. It drops the version for the time that orders a source's last-wins
(``spec.order[0]``; staging then keeps the identity's latest version that passes) and is
reported for other time fields (e.g. the signals buffer's skewed
``timestamp``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from transforms.spec import SourceSpec
from transforms.text import WHITESPACE_RE2

FUTURE_SLACK = timedelta(days=1)
ACTIONS = ("warn", "drop", "fail")
DROP_MOSTLY = 0.95  # a drop check fails the run when more than 5% of the candidate rows offend
# Kinds whose offending rows are individual rows (uniqueness and table-level checks are not).
DROPPABLE_KINDS = {"not_null", "in_set", "true", "between", "not_future", "regex"}
# A derived column computed with a window function looks at other rows: not a row-level check.
_WINDOW = re.compile(r"\bover\s*\(", re.IGNORECASE)

# Macros the derived columns use (temp, registered by ``validation`` on the connection).
# ``fwq_norm`` is ``transforms.text.fw_norm`` (NFC, whitespace runs -> one space, trimmed) made
# ~4x faster: it rewrites only runs of 2+ whitespace characters and single non-space ones, so
# ordinary single spaces cost no replacement (7.2 s -> 1.5 s on 1M 300-character prompts); the
# result is identical (tests/test_validation.py compares it with ``normalize_text``).
# ``fwq_nonblank`` is true when a text holds anything but whitespace (same character set).
_WS = WHITESPACE_RE2[1:-2]  # the class body, without "[" and "]+"
_WS_NOT_SPACE = _WS.replace(r"\x{1c}-\x{20}", r"\x{1c}-\x{1f}")
assert _WS_NOT_SPACE != _WS, "transforms.text.WHITESPACE_RE2 changed shape; update fwq_norm"
MACROS = (
    f"create or replace temp macro fwq_norm(s) as trim(regexp_replace(nfc_normalize(coalesce(s, '')), "
    f"'[{_WS}]{{2,}}|[{_WS_NOT_SPACE}]', ' ', 'g'), ' ')",
    f"create or replace temp macro fwq_nonblank(s) as coalesce(regexp_matches(s, '[^{_WS}]'), false)",
)
MESSAGE_TYPE = 'STRUCT("role" VARCHAR, "content" VARCHAR)[]'
SPLITS = ("train", "eval")

# GX 1.x expectation type per kind (``native`` kinds are catalog checks evaluated in DuckDB:
# GX on a pandas frame cannot see DuckDB column types).
EXPECTATION_TYPES = {
    "not_null": "expect_column_values_to_not_be_null",
    "unique": "expect_column_values_to_be_unique",
    "compound_unique": "expect_compound_columns_to_be_unique",
    "in_set": "expect_column_values_to_be_in_set",
    "between": "expect_column_values_to_be_between",
    "not_future": "expect_column_values_to_be_between",
    "true": "expect_column_values_to_be_in_set",
    "regex": "expect_column_values_to_match_regex",
    "mean_between": "expect_column_mean_to_be_between",
    "row_count": "expect_table_row_count_to_be_between",
    "columns_present": "expect_table_columns_to_match_set",
    "column_types": "expect_column_duckdb_types",  # native
    "forbidden_columns": "expect_table_columns_to_not_include",  # native
}
NATIVE_KINDS = {"column_types", "forbidden_columns"}
SCHEMA_KINDS = {"columns_present", "column_types", "forbidden_columns"}


@dataclass(frozen=True)
class Check:
    """One expectation on one table.

    ``column`` is the column GX checks: a table column, or the name given to ``expr`` (a DuckDB
    expression over the table's columns, window functions allowed; ``fwq_norm`` /
    ``fwq_nonblank`` from :data:`MACROS` are available).
    ``needs`` lists the table columns ``expr`` reads; when one is missing the check fails
    (or is skipped when ``optional``). ``show`` adds table columns (``sample_exprs`` adds named
    expressions) to the sample offending rows, after the table's key and provenance columns.
    """

    name: str
    kind: str
    column: str | None = None
    expr: str | None = None
    needs: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()  # compound_unique, columns_present, forbidden_columns
    types: tuple[tuple[str, str], ...] = ()  # column_types: (column, DuckDB type)
    value_set: tuple[Any, ...] = ()
    min_value: float | None = None
    max_value: float | None = None
    strict_min: bool = False
    strict_max: bool = False
    regex: str | None = None
    slack: timedelta = FUTURE_SLACK  # not_future
    blocking: bool = True  # shorthand for the action when ``action`` is not given: fail / warn
    optional: bool = False
    mostly: float = 1.0  # drop: the share of candidate rows that must pass, else the run fails
    show: tuple[str, ...] = ()
    sample_exprs: tuple[tuple[str, str], ...] = ()
    sample_order: tuple[str, ...] = ()  # SQL expressions over the table ordering the samples
    action: str = ""  # warn | drop | fail (default: fail if blocking else warn)
    # ``expr`` is count(distinct counted) over (partition by group_by): (group_by, the columns it
    # reads, counted). Lets validation keep each content's group key instead of recomputing it.
    per_group: tuple[str, tuple[str, ...], str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in EXPECTATION_TYPES:
            raise ValueError(f"check {self.name!r}: unknown kind {self.kind!r}")
        action = self.action or ("fail" if self.blocking else "warn")
        if action not in ACTIONS:
            raise ValueError(f"check {self.name!r}: unknown action {action!r}; one of {', '.join(ACTIONS)}")
        if action == "drop" and self.kind not in DROPPABLE_KINDS:
            raise ValueError(f"check {self.name!r}: a {self.kind} check cannot drop rows")
        # A drop check blocks too, but only when it fails after dropping (beyond its threshold).
        object.__setattr__(self, "action", action)
        object.__setattr__(self, "blocking", action != "warn")

    @property
    def gx_mostly(self) -> float:
        """GX runs after the drops: whatever still offends then is systemic (nothing was dropped)."""
        return 1.0 if self.action == "drop" else self.mostly

    @property
    def expectation_type(self) -> str:
        return EXPECTATION_TYPES[self.kind]

    @property
    def required_columns(self) -> tuple[str, ...]:
        """Table columns this check reads."""
        if self.kind in SCHEMA_KINDS or self.kind == "row_count":
            return ()
        if self.kind == "compound_unique":
            return self.columns
        if self.expr is not None:
            return self.needs
        return (self.column,) if self.column else ()

    @property
    def row_level(self) -> bool:
        """Whether a row's outcome depends on that row alone (so a row validated once needs no
        second look while it is unchanged); uniqueness, counts, means and window expressions do not."""
        return self.kind in DROPPABLE_KINDS and not (self.expr and _WINDOW.search(self.expr))

    def reporting(self) -> "Check":
        return replace(self, action="warn")

    def dropping(self, mostly: float = DROP_MOSTLY) -> "Check":
        return replace(self, action="drop", mostly=mostly)


# ---------------------------------------------------------------------------------------------
# Constructors
# ---------------------------------------------------------------------------------------------

def not_null(column: str, **kw) -> Check:
    return Check(f"{column} is not null", "not_null", column, **kw)


def unique(column: str, **kw) -> Check:
    return Check(f"{column} is unique", "unique", column, **kw)


def compound_unique(*columns: str, **kw) -> Check:
    return Check(f"({', '.join(columns)}) is unique", "compound_unique", columns=columns, **kw)


def in_set(column: str, values: tuple, **kw) -> Check:
    shown = ", ".join(str(v) for v in values)
    return Check(f"{column} in {{{shown}}}", "in_set", column, value_set=tuple(values), **kw)


def between(column: str, low: float | None = None, high: float | None = None, *,
            strict_min: bool = False, strict_max: bool = False, name: str | None = None, **kw) -> Check:
    if name is None:
        if low is not None and high is not None and not strict_min and not strict_max:
            name = f"{column} in [{_num(low)}, {_num(high)}]"
        else:
            parts = []
            if low is not None:
                parts.append(f"{column} {'>' if strict_min else '≥'} {_num(low)}")
            if high is not None:
                parts.append(f"{column} {'<' if strict_max else '≤'} {_num(high)}")
            name = " and ".join(parts)
    return Check(name, "between", column, min_value=low, max_value=high, strict_min=strict_min,
                 strict_max=strict_max, **kw)


def positive(column: str, **kw) -> Check:
    return between(column, 0, None, strict_min=True, **kw)


def rate(column: str, **kw) -> Check:
    return between(column, 0, 1, **kw)


def not_future(column: str, **kw) -> Check:
    return Check(f"{column} not in the future", "not_future", column, **kw)


def holds(name: str, column: str, expr: str, needs: tuple[str, ...], **kw) -> Check:
    """A boolean expression that must be true on every row (NULL counts as false)."""
    return Check(name, "true", column, expr=f"coalesce(({expr}), false)", needs=needs, **kw)


def columns_present(*columns: str) -> Check:
    return Check(f"columns present: {', '.join(columns)}", "columns_present", columns=columns)


def column_types(**types: str) -> Check:
    return Check("column types: " + ", ".join(f"{c} {t}" for c, t in types.items()), "column_types",
                 types=tuple(types.items()))


def no_columns(*columns: str, why: str) -> Check:
    return Check(f"no {why} columns ({', '.join(columns)})", "forbidden_columns", columns=columns)


def row_count(low: int | None = None, high: int | None = None, *, name: str, blocking: bool) -> Check:
    return Check(name, "row_count", min_value=low, max_value=high, blocking=blocking)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


# ---------------------------------------------------------------------------------------------
# Message (TRL conversational) checks and split hygiene
# ---------------------------------------------------------------------------------------------

# The TUI writes a rating with ``"query": ""`` when the rated turn has no text before it: one
# such row is no training example, and many are the producer's habit, not a broken pipeline, so
# no share of them fails the run. First in the suite: the prompt check that they fail too judges
# its threshold on the rows it excludes itself (``validation.apply_drops``).
RATED_TURN_PROMPT = holds(
    "prompt of a TUI rating is not empty", "prompt__rated_turn",
    "origin <> 'weighted_rating' or (len(prompt) > 0 and fwq_nonblank(prompt[-1].content))",
    needs=("origin", "prompt"), sample_exprs=(("completion_last", "completion[-1].content"),)).dropping(mostly=0.0)


def conversation(column: str, *, last_role: str, roles: tuple[str, ...]) -> list[Check]:
    """``column`` is a ``list<struct<role, content>>`` ending with a non-blank ``last_role`` turn."""
    listed = ", ".join(f"'{r}'" for r in roles)
    preview = ((f"{column}_last", f"{column}[-1].content"),)
    return [
        holds(f"{column} is a non-empty conversation", f"{column}__non_empty",
              f"len({column}) > 0 and fwq_nonblank({column}[-1].content)", needs=(column,),
              sample_exprs=preview).dropping(),
        holds(f"{column} roles in {{{', '.join(roles)}}}, last is {last_role}", f"{column}__roles",
              f"len(list_filter({column}, lambda m: m.role is null or m.role not in ({listed}))) = 0 "
              f"and {column}[-1].role = '{last_role}'", needs=(column,),
              sample_exprs=((f"{column}_roles", f"list_transform({column}, lambda m: m.role)"),)).dropping(),
    ]


def distinct_per_group(name: str, column: str, counted: str, group_by: str, group_needs: tuple[str, ...],
                       **kw) -> Check:
    """How many distinct ``counted`` values a row's group (rows with the same ``group_by``) holds,
    as a ``between`` check on every row (``max_value=1``: one per group)."""
    return Check(name, "between", column, expr=f"count(distinct {counted}) over (partition by {group_by})",
                 needs=(*group_needs, counted), per_group=(group_by, tuple(group_needs), counted), **kw)


USER_TEXT = "fwq_norm(list_filter(prompt, lambda m: m.role = 'user')[-1].content)"

NO_SPLIT_LEAK = distinct_per_group(
    "no normalised prompt in both splits", "prompt__splits", "split", USER_TEXT, ("prompt",),
    max_value=1, sample_order=(USER_TEXT, "split"),
    sample_exprs=(("normalised_prompt", USER_TEXT), ("split", "split")),
)


def split_checks() -> list[Check]:
    return [not_null("split"), in_set("split", SPLITS), NO_SPLIT_LEAK]


NO_RAW_IDS = no_columns("session_id", "user_id", "user_id_or_null", "session_id_opaque",
                        why="raw session or user id")
NON_EMPTY = row_count(1, None, name="dataset is not empty", blocking=False)

KTO_BALANCE = Check(
    "KTO class balance: desirable share in [0.2, 0.8]", "mean_between", "label__desirable",
    expr="label::int", needs=("label",), min_value=0.2, max_value=0.8, blocking=False,
)
"""TRL's KTOTrainer wants desirable_weight * n_true / (undesirable_weight * n_false) within
[1, 4/3]; beyond 4:1 either way the weights must be adjusted. Reported, never blocking; the
observed value carries the counts and the true:false ratio."""


def adds_up(total: str, *parts: str, optional: bool = False) -> Check:
    return holds(f"{' + '.join(parts)} = {total}", f"{total}__adds_up",
                 f"{' + '.join(f'coalesce({p}, 0)' for p in parts)} = {total}", needs=(total, *parts),
                 optional=optional, show=(total, *parts))


def at_most(small: str, big: str, optional: bool = False) -> Check:
    return holds(f"{small} ≤ {big}", f"{small}__le_{big}", f"{small} <= {big}", needs=(small, big),
                 optional=optional, show=(small, big))


# ---------------------------------------------------------------------------------------------
# Staging suites (generated from the source specs)
# ---------------------------------------------------------------------------------------------

PROVENANCE_CHECKS = [not_null("path"), not_null("line_number"), between("line_number", 1, None)]


def source_suite(spec: SourceSpec) -> list[Check]:
    """The expectations a ``staging.<source>`` table must meet, from its source spec."""
    checks: list[Check] = []
    identity = ("content_hash",) if spec.identity == ("@content",) else tuple(spec.identity)
    for column in identity:
        checks.append(not_null(column))
    checks.append(unique(identity[0]) if len(identity) == 1 else compound_unique(*identity))
    order_time = spec.order[0] if spec.order else None
    for f in spec.fields:
        if f.name in identity:
            continue
        if f.required and not f.nullable:
            checks.append(not_null(f.name))
        if f.enum:
            checks.append(in_set(f.name, f.enum))
        low = f.exclusive_minimum if f.exclusive_minimum is not None else f.minimum
        if low is not None or f.maximum is not None:
            checks.append(between(f.name, low, f.maximum, strict_min=f.exclusive_minimum is not None))
        if f.time:
            check = not_future(f.name, show=(f"{f.name}_text",))
            # No threshold: many versions from the future mean a producer's clock is wrong, not its
            # records, and raw keeps them (the system of record), so failing the run would fail
            # every run until their date comes (two such lines of a 30-row source did, till 2031).
            # Each is excluded, named in the ledger, and wins once its time comes.
            checks.append(check.dropping(mostly=0.0) if f.name == order_time else check.reporting())
    # content_hash is only filled for sources identified by content (the engine skips the cost
    # elsewhere), so it is checked through the identity above, not on its own.
    return checks + PROVENANCE_CHECKS + STAGING_EXTRAS.get(spec.name, [])


# A latency is a wall-clock difference, negative when the clock stepped back: suspicious, not unusable.
LATENCY = between("latency_ms", 0, None, blocking=False)

STAGING_EXTRAS: dict[str, list[Check]] = {
    "interactions": [LATENCY],
    "outcomes": [LATENCY],
    "session_ratings": [
        Check("session_id_opaque is lowercase SHA-256 hex", "regex", "session_id_opaque",
              regex=r"^[0-9a-f]{64}$", blocking=False),
    ],
    "eventlog": [
        Check("scry.query result ranks ≥ 1", "between", "results__min_rank",
              expr="case when event_type = 'scry.query' "
                   "then list_min(json_extract(data, '$.results[*].rank')::bigint[]) end",
              needs=("event_type", "data"), min_value=1, blocking=False,
              show=("event_type", "source_id")),
    ],
}

WEIGHTED_EXAMPLES = [
    not_null("content_hash"), unique("content_hash"),
    not_null("origin"), in_set("origin", ("queue", "rating")),
    not_null("query"), not_null("response"),
    not_null("weight"), positive("weight"),
    not_null("label"), in_set("label", (True, False)),
    not_future("timestamp", blocking=False),
    *PROVENANCE_CHECKS,
]


# The eventlog unpacked (SPEC 4.2; built from staging.eventlog by transforms.retrieval).
EVENTLOG_DERIVED: dict[str, list[Check]] = {
    "staging.git_commits": [
        not_null("sha"), unique("sha"), not_null("committed_at"),
        not_future("committed_at", blocking=False, show=("committed_at_text",)),
        *PROVENANCE_CHECKS,
    ],
    "staging.commit_files": [
        not_null("sha"), not_null("file_path"),
        in_set("change_type", ("added", "deleted", "modified"), blocking=False),
        between("lines_added", 0, None, blocking=False), between("lines_removed", 0, None, blocking=False),
    ],
    "staging.session_windows": [
        not_null("session_id"), unique("session_id"), not_null("started_at"),
        at_most("started_at", "window_end"),
    ],
    "staging.commit_sessions": [
        not_null("sha"), unique("sha"), not_null("session_id"), not_null("linked_by"),
    ],
    "staging.session_files": [
        not_null("session_id"), not_null("file_path"), compound_unique("session_id", "file_path"),
        between("commits", 1, None),
    ],
    "staging.scry_queries": [
        not_null("query_id"), unique("query_id"), not_null("queried_at"),
        not_future("queried_at", blocking=False), in_set("version", (1, 2)),
        *PROVENANCE_CHECKS,
    ],
    # The retrieval tool's records inside the eventlog's `data` JSON: the engine checks the event,
    # not its data, so a result, a use or a feedback the tool wrote oddly (rank 0, a signal
    # "neutral", no query id) is one unusable record: dropped and named in the ledger (it failed
    # every run, and a re-scrape's corrected copy is another identity, so it failed for good).
    "staging.scry_results": [
        not_null("query_id").dropping(), not_null("rank").dropping(), between("rank", 1, None).dropping(),
        compound_unique("query_id", "rank", blocking=False),
    ],
    "staging.scry_use": [
        not_null("query_id").dropping(), between("rank", 1, None, blocking=False),
    ],
    "staging.scry_feedback": [
        not_null("query_id").dropping(), in_set("signal", ("good", "bad")).dropping(),
    ],
}


def staging_suites() -> dict[str, list[Check]]:
    from dagster_project.sources import builtin_sources

    suites = {f"staging.{name}": source_suite(spec) for name, spec in builtin_sources().items()}
    suites["staging.weighted_examples"] = WEIGHTED_EXAMPLES
    suites.update(EVENTLOG_DERIVED)
    return suites


# ---------------------------------------------------------------------------------------------
# Exports (SPEC 4.4 / 5)
# ---------------------------------------------------------------------------------------------

EXPORTS: dict[str, list[Check]] = {
    "exports.sft": [
        columns_present("prompt", "completion", "sample_weight", "split", "interaction_id"),
        column_types(prompt=MESSAGE_TYPE, completion=MESSAGE_TYPE, sample_weight="DOUBLE", split="VARCHAR"),
        NO_RAW_IDS,
        *conversation("prompt", last_role="user", roles=("system", "user", "assistant")),
        *conversation("completion", last_role="assistant", roles=("assistant",)),
        not_null("sample_weight"), positive("sample_weight"),
        not_null("interaction_id"), unique("interaction_id"),
        *split_checks(),
        NON_EMPTY,
    ],
    "exports.kto": [
        columns_present("prompt", "completion", "label", "sample_weight", "split", "origin"),
        column_types(prompt=MESSAGE_TYPE, completion=MESSAGE_TYPE, label="BOOLEAN", sample_weight="DOUBLE",
                     split="VARCHAR"),
        NO_RAW_IDS,
        RATED_TURN_PROMPT,
        *conversation("prompt", last_role="user", roles=("system", "user", "assistant")),
        *conversation("completion", last_role="assistant", roles=("assistant",)),
        not_null("label"), in_set("label", (True, False)),
        not_null("sample_weight"), positive("sample_weight"),
        not_null("origin"), in_set("origin", ("interaction", "weighted_queue", "weighted_rating")),
        compound_unique("origin", "example_id", optional=True),
        *split_checks(),
        KTO_BALANCE,
        NON_EMPTY,
    ],
    "exports.dpo": [
        columns_present("prompt", "chosen", "rejected", "chosen_id", "rejected_id", "split"),
        column_types(prompt=MESSAGE_TYPE, chosen=MESSAGE_TYPE, rejected=MESSAGE_TYPE, split="VARCHAR"),
        NO_RAW_IDS,
        *conversation("prompt", last_role="user", roles=("system", "user", "assistant")),
        *conversation("chosen", last_role="assistant", roles=("assistant",)),
        *conversation("rejected", last_role="assistant", roles=("assistant",)),
        holds("chosen differs from rejected", "chosen__differs", "chosen <> rejected", needs=("chosen", "rejected"),
              sample_exprs=(("chosen_last", "chosen[-1].content"),)).dropping(),
        not_null("chosen_id"), not_null("rejected_id"),
        compound_unique("chosen_id", "rejected_id"),
        *split_checks(),
        NON_EMPTY,
    ],
    "exports.weighted": [
        columns_present("prompt", "completion", "weight", "note", "label", "split"),
        column_types(prompt=MESSAGE_TYPE, completion=MESSAGE_TYPE, weight="DOUBLE", label="BOOLEAN",
                     split="VARCHAR"),
        NO_RAW_IDS,
        RATED_TURN_PROMPT,
        *conversation("prompt", last_role="user", roles=("system", "user", "assistant")),
        *conversation("completion", last_role="assistant", roles=("assistant",)),
        not_null("weight"), positive("weight"),
        not_null("label"), in_set("label", (True, False)),
        unique("content_hash", optional=True),
        *split_checks(),
        NON_EMPTY,
    ],
}


# ---------------------------------------------------------------------------------------------
# Marts (SPEC 4.1–4.3 / 5). Columns SPEC §5 does not name are ``optional`` (skipped if absent).
# ---------------------------------------------------------------------------------------------

def exactly_one_row() -> Check:
    return row_count(1, 1, name="exactly one row", blocking=True)


MARTS: dict[str, list[Check]] = {
    "marts.interaction_labels": [
        columns_present("interaction_id", "label", "was_edited", "label_source", "labeled_at", "n_events",
                        "conflicting"),
        not_null("interaction_id"), unique("interaction_id"),
        not_null("label"), in_set("label", ("positive", "negative", "neutral")),
        not_null("label_source"), in_set("label_source", ("inline", "manual", "outcome_tracker")),
        not_null("was_edited"), not_null("conflicting"),
        not_null("labeled_at"), not_future("labeled_at", blocking=False),
        not_null("n_events"), between("n_events", 1, None),
    ],
    "marts.orphan_feedback": [
        not_null("record_id"), unique("record_id"), between("n_events", 1, None),
        in_set("latest_feedback", ("positive", "negative", "neutral")),
    ],
    "marts.session_satisfaction": [
        between("sessions", 1, None), rate("satisfaction"),
        adds_up("sessions", "positive", "negative", "skipped"),
        at_most("matched_sessions", "sessions"),
        compound_unique("day", "source", "modality"),
    ],
    "marts.session_rating_matches": [
        exactly_one_row(),
        rate("match_rate"), rate("interaction_rating_rate"),
        at_most("matched_sessions", "rated_sessions"),
    ],
    "marts.outcome_rates": [
        not_null("day"), between("outcomes", 1, None), rate("acceptance_rate"),
        adds_up("outcomes", "accepted", "rejected", "neutral"),
        compound_unique("day", "model", "task_type", "arm_id"),
    ],
    # Retrieval (SPEC 4.2)
    "marts.retrieval_judgements": [
        not_null("query_id"), not_null("doc_path"), not_null("hit"),
        not_null("rank"), between("rank", 1, None),
        compound_unique("query_id", "doc_path"),
    ],
    "marts.retrieval_query_metrics": [
        columns_present("query_id", "session_id", "retrieved", "hits", "touched", "precision", "recall",
                        "reciprocal_rank", "ndcg"),
        not_null("query_id"), unique("query_id"), not_null("session_id"),
        at_most("hits", "retrieved"), between("touched", 0, None),  # a session may commit no files (recall is then NULL)
        rate("precision"), rate("recall"), rate("reciprocal_rank"), rate("ndcg"),
    ],
    "marts.retrieval_precision_by_rank": [
        columns_present("rank", "retrieved", "hits", "precision"),
        not_null("rank"), unique("rank"), between("rank", 1, None),
        between("retrieved", 1, None), at_most("hits", "retrieved"), rate("precision"),
    ],
    "marts.retrieval_precision_by_mode": [
        unique("mode"), between("queries", 1, None), at_most("hits", "retrieved"),
        rate("precision"), rate("mean_recall"), rate("mrr"),
    ],
    "marts.retrieval_summary": [
        columns_present("queries", "retrieved", "hits", "precision", "mean_recall", "mrr"),
        exactly_one_row(),
        at_most("hits", "retrieved"), rate("precision"), rate("mean_recall"), rate("mrr"),
        rate("mean_ndcg", optional=True),
    ],
    "marts.doc_utility": [
        columns_present("doc_path", "times_retrieved", "times_committed", "hit_rate"),
        not_null("doc_path"), unique("doc_path"), between("times_retrieved", 2, None),
        at_most("times_committed", "times_retrieved"), rate("hit_rate"),
    ],
    "marts.missed_files": [
        columns_present("file_path", "sessions_missed"),
        not_null("file_path"), unique("file_path"), between("sessions_missed", 1, None),
    ],
    "marts.scry_usage": [
        not_null("query_id"), unique("query_id"),
        between("uses", 0, None), between("rated_good", 0, None), between("rated_bad", 0, None),
    ],
    # Signals (SPEC 4.3): every signal with its decayed strength; one current opinion per (target, aspect)
    "marts.signal_opinions": [
        not_null("id"), unique("id"),
        not_null("target_id"), not_null("aspect"), not_null("is_current"),
        in_set("polarity", ("positive", "negative", "neutral")),
        rate("strength"), rate("effective_strength"), between("age_days", 0, None),
        Check("one current opinion per (target, aspect)", "between", "current_per_target_aspect",
              expr="count_if(is_current) over (partition by target_type, target_id, aspect)",
              needs=("is_current", "target_type", "target_id", "aspect"), min_value=1, max_value=1,
              show=("target_type", "target_id", "aspect", "is_current")),
    ],
    "marts.signal_conflicts": [
        not_null("target_id"), compound_unique("target_type", "target_id"),
        between("positive_opinions", 1, None), between("negative_opinions", 1, None),
    ],
    "marts.promotion_candidates": [
        not_null("target_id"), compound_unique("target_type", "target_id"),
        between("strong_positive_signals", 2, None), between("manual_signals", 1, None),
        between("max_effective_strength", 0.7, 1),
    ],
}


def _build() -> dict[str, list[Check]]:
    suites = {**staging_suites(), **MARTS, **EXPORTS}
    for table, checks in suites.items():
        names = [c.name for c in checks]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"suite {table}: duplicate check names {sorted(duplicates)}")
    return suites


SUITES: dict[str, list[Check]] = _build()

# Sort order of published Parquet rows (then every other column, so the order is total).
ORDER_KEYS: dict[str, tuple[str, ...]] = {
    "exports.sft": ("interaction_id",),
    "exports.kto": ("origin", "example_id"),
    "exports.dpo": ("prompt_group", "chosen_id", "rejected_id"),
    "exports.weighted": ("origin", "content_hash"),
}


def suite_for(table: str) -> list[Check] | None:
    return SUITES.get(table)


def order_keys(table: str) -> tuple[str, ...]:
    """Key columns to sort ``table`` by when publishing: declared, else its suite's key."""
    return ORDER_KEYS[table] if table in ORDER_KEYS else suite_key(SUITES.get(table, []))


def suite_key(suite: list[Check]) -> tuple[str, ...]:
    """A table's key as its suite declares it: the first uniqueness check."""
    for check in suite:
        if check.kind == "unique" and check.expr is None:
            return (check.column,)
        if check.kind == "compound_unique":
            return check.columns
    return ()
