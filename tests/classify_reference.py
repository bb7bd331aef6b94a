"""Classify JSON lines against a ``SourceSpec`` in one vectorised DuckDB pass.

Every candidate line gets exactly one outcome: loaded (``reason`` is NULL), ``blank``, or a
quarantine reason. The query is generated from the spec because each source has different
fields; identifiers come from the (code-reviewed) spec and are quoted, while every value a user
can override (enums, bounds, time zones, key lists) is a bound parameter.

Why not ``read_json``/``json_transform``: they coerce (``"yes"`` → true, ``1.5`` → 2) or drop bad
lines silently. Here each field's raw JSON text is extracted once, its JSON kind is read from its
first character (the document is already known to be valid JSON), and only values of the right
kind are cast. DuckDB's ``json_valid`` is lenient (NaN, Infinity, trailing commas), so lines that
might use those extensions are flagged by a regular expression and settled by Python's strict
parser afterwards (``strict_verdict``); they are rare, so that stays off the hot path.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from transforms.spec import STORAGE_TYPE, Field, SourceSpec

# json_valid accepts what strict JSON rejects: trailing commas (found in the raw text; the
# leading literal keeps RE2 fast) and NaN/Infinity (found in the extracted values, where they
# stand at the start of a value; scanning whole lines case-insensitively costs 10x more).
TRAILING_COMMA_RE = r",\s*[}\]]"
NESTED_NONSTANDARD_RE = r"(?i)(^|[:\[,])\s*[-+]?(nan|inf)"
NAIVE_FORMATS = ["%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"]
EXTRA_FRACTION_RE = r"(\.\d{6})\d{1,3}$"
OFFSET_RE = r"(Z|z|[+-]\d\d:?\d\d)$"
OFFSET_HM_RE = r"[+-](\d\d):?(\d\d)$"
MAX_OFFSET_MINUTES = 18 * 60  # ISO 8601 / RFC 3339 offsets stop at ±18:00
KIND_NAMES = {"s": "a string", "o": "an object", "a": "an array", "b": "a boolean", "n": "null", "num": "a number", "x": "a non-standard literal"}
EXPECTED = {
    "string": "a string", "int": "an integer", "float": "a number", "bool": "a boolean",
    "date": "a date string YYYY-MM-DD",
    "object": "an object", "array": "an array", "any": "any JSON value",
    "json_text": "a JSON document (object, array or string holding JSON)",
}


def q(name: str) -> str:
    """Quote an identifier."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class ClassifySql:
    sql: str
    params: dict[str, Any]
    columns: list[tuple[str, str]]  # typed output columns (name, duckdb type), before provenance


def time_columns(f: Field) -> list[tuple[str, str]]:
    """A time field is stored as its instant, its text and how the instant was resolved
    (``<name>_fold``: utc | offset | unambiguous | fold_first | fold_second | epoch)."""
    return [(f.name, "timestamptz"), (f"{f.name}_text", "varchar"), (f"{f.name}_fold", "varchar")] if f.time else [
        (f.name, STORAGE_TYPE[f.type])
    ]


def output_columns(spec: SourceSpec) -> list[tuple[str, str]]:
    cols: list[tuple[str, str]] = []
    for f in spec.fields:
        cols += time_columns(f)
    cols += [(name, "varchar") for name, _ in spec.derived]
    cols.append(("content_hash", "varchar"))
    if spec.identity_sql:
        cols += [(spec.identity[0], "varchar")]
    cols.append(("extra", "json"))
    return cols


def build_sql(spec: SourceSpec, relation: str, *, check_nonstandard: bool = True) -> ClassifySql:
    """The classification query over ``relation`` (columns path, line_number, byte_offset, text).

    Each stage is a CTE that adds columns computed once (raw field text ``v``, JSON kind ``k``,
    typed value ``t``, instant ``tm``); the reason and detail only read those columns.
    """
    params: dict[str, Any] = {
        "paths": [f"$.{f.name}" for f in spec.fields],
        "null_patch": json.dumps({f.name: None for f in spec.fields}),
        "comma_re": TRAILING_COMMA_RE,
        "nested_re": NESTED_NONSTANDARD_RE,
        "naive_formats": NAIVE_FORMATS,
        "extra_fraction_re": EXTRA_FRACTION_RE,
        "offset_re": OFFSET_RE,
        "earliest": spec.earliest,
        "latest": spec.latest,
        "max_offset": MAX_OFFSET_MINUTES,
        "offset_hm_re": OFFSET_HM_RE,
    }
    n = len(spec.fields)
    idx = range(1, n + 1)
    values = ", ".join(f"vals[{i}] as v{i}" for i in idx)
    kinds = ",\n    ".join(f"{_kind_expr(f'v{i}')} as k{i}" for i in idx)
    present = " + ".join(f"(v{i} is not null)::int" for i in idx)
    typed, timed, rules, outputs = [], [], [], []
    nested: list[str] = []
    for i, f in enumerate(spec.fields, start=1):
        value, checks = _typed_expr(f, i, params)
        if f.name in spec.identity and f.type == "string":
            # an empty id names no record: every line with one collapsed into one under last-wins
            checks.append((f"{_blank(f't{i}')}", "'the identity is empty or only whitespace: it names no record'"))
        typed.append(f"{value} as t{i}")
        if f.time:
            timed += _time_exprs(f, i, params, spec.time_zone)
            outputs += [f"tm{i} as {q(f.name)}", f"{_time_text(f, i)} as {q(f.name + '_text')}",
                        f"case when tm{i} is not null then fd{i} end as {q(f.name + '_fold')}"]
        else:
            outputs.append(f"t{i} as {q(f.name)}")
        if f.type in ("object", "array", "any", "json_text"):
            nested.append(f"v{i}")
        rules += _field_rules(f, i, checks)

    if check_nonstandard:
        kind_x = " or ".join(f"k{i} = 'x'" for i in idx)
        nested_check = " or ".join(
            f"coalesce(regexp_matches({v}::varchar, $nested_re), false)" for v in nested
        ) or "false"
        extra_check = f"(n_keys > n_present and regexp_matches(text, $nested_re))"
        nonstandard = (f"regexp_matches(text, $comma_re) or {kind_x} or {nested_check} "
                       f"or {extra_check}")
    else:
        nonstandard = "false"
    # A duplicate key inside a nested value (``{"a": {"b": 1, "b": 2}}``) hides a value just as
    # a top-level one does. Only object/array values can hold one: declared nested fields (and a
    # ``json_text`` field's document held in a string), and the unknown keys kept in ``extra``
    # (then the whole line is searched).
    nested_dup = " or ".join(
        [f"(k{i} in ('o', 'a') and {_dup_keys(f'v{i}')})" for i, f in enumerate(spec.fields, start=1)
         if f.type in ("object", "array", "any", "json_text")]
        # a JSON document held in a string (the eventlog's ``data``, as its SQLite rows store it)
        + [f"(k{i} = 's' and t{i} is not null and {_dup_keys(f't{i}')})" for i, f in enumerate(spec.fields, start=1)
           if f.type == "json_text"]
        + [f"(n_keys > n_present and {_dup_keys('text', root=False)})"])
    reason_case = "\n        ".join(f"when {cond} then {reason}" for cond, reason, _ in rules)
    detail_case = "\n        ".join(f"when {cond} then {detail}" for cond, _, detail in rules)
    derived = "".join(f",\n  {expr} as {q(name)}" for name, expr in spec.derived)
    # Hashing the content costs ~30% of the pass: only sources identified by content pay for it.
    content_hash = ("case when reason is null then md5(vals::varchar) end"
                    if "@content" in spec.identity else "null::varchar")

    held, final = _identified(spec, derived)
    sql = f"""
with parsed as (
  select path, line_number, byte_offset, text, json_valid(text) as is_valid
  from {relation}
),
shaped as (
  select *,
    case when is_valid then
      case when starts_with(text, '{{') then 'OBJECT' else json_type(text) end
    end as root_type
  from parsed
),
extracted as (
  select *,
    case when root_type = 'OBJECT' then len(json_keys(text)) end as n_keys,
    case when root_type = 'OBJECT' then json_extract(text, $paths) end as vals
  from shaped
),
fielded as (
  select *, {values}
  from extracted
),
kinded as (
  select *,
    {kinds},
    {present} as n_present
  from fielded
),
typed as (
  select *,
    {(","+chr(10)+"    ").join(typed)}
  from kinded
),
timed as (
  select *{"".join(","+chr(10)+"    "+t for t, _ in timed)}
  from typed
),
windowed as (
  select *{"".join(","+chr(10)+"    "+t for _, t in timed)}
  from timed
),
classified as (
  select *,
    case
      when not is_valid and trim(text, e' \\t\\r\\n') = '' then 'blank'
      when not is_valid then 'invalid_json'
      when root_type = 'OBJECT' and ({nonstandard}) then 'strict_check'
      when root_type <> 'OBJECT' then 'not_an_object'
      when n_keys > n_present and len(list_distinct(json_keys(text))) < n_keys then 'duplicate_key'
      when {nested_dup} then 'duplicate_key'
      {reason_case}
    end as reason
  from windowed
),
explained as (
  select *,
    case when reason is not null then
      case
        when reason in ('blank', 'invalid_json', 'strict_check', 'duplicate_key') then null
        when root_type <> 'OBJECT' then 'the line is JSON ' || lower(root_type) || ', not an object'
        {detail_case}
      end
    end as detail
  from classified
),
loaded as (
  select
    path, line_number, byte_offset, reason, detail,
    case when reason is not null then text end as text,
    {(","+chr(10)+"    ").join(outputs)},
    {content_hash} as content_hash,
    case when reason is null and n_keys > n_present
      then nullif(json_merge_patch(text, $null_patch)::varchar, '{{}}')::json end as extra{held}
  from explained
){final}
"""
    # DuckDB rejects bound parameters the text does not use.
    used = {k: v for k, v in params.items() if re.search(rf"\${k}\b", sql)}
    return ClassifySql(sql=sql, params=used, columns=output_columns(spec))


def _blank(t: str) -> str:
    """Naively: nothing left once every whitespace character is removed."""
    return f"length(regexp_replace({t}, '[ \\t\\r\\n]', '', 'g')) = 0"


def _identified(spec: SourceSpec, derived: str) -> tuple[str, str]:
    """Naively: the identity computed in a flagging step, the outcome columns patched after it."""
    if spec.identity_sql is None:
        return "", "\nselect *" + derived + "\nfrom loaded"
    name = spec.identity[0]
    nameless = f"(reason is null and {q(name)} is null)"
    patched = {"reason": f"'bad_value:{name}'", "detail": f"'the identity ({name}) is empty: it names no record'",
               "text": "__text"}
    replaced = ", ".join(f"case when {nameless} then {v} else {k} end as {k}" for k, v in patched.items())
    flagged = f"select *{derived}, {spec.identity_sql} as {q(name)} from loaded"
    final = f",\nflagged as ({flagged})\nselect * exclude (__text) replace ({replaced}) from flagged"
    return ",\n    text as __text", final


def _dup_keys(v: str, root: bool = True) -> str:
    """True when an object anywhere in JSON ``v`` repeats a key: ``v`` itself (unless ``root`` is
    False: a line's own keys are counted apart) and every value nested in it (``$..*`` matches
    the descendants only: ``{"b": 1, "b": 2}`` as a field's value was loaded, its first ``b`` kept)."""
    nested = f"list_bool_or(list_transform(json_keys({v}, '$..*'), lambda ks: len(ks) > len(list_distinct(ks))))"
    return f"(len(json_keys({v})) > len(list_distinct(json_keys({v}))) or {nested})" if root else nested


def _kind_expr(v: str) -> str:
    """The JSON kind of an extracted value from its first character ('x': NaN/Infinity)."""
    return (
        f"case when {v} is null then null else case left({v}::varchar, 1) "
        "when '\"' then 's' when '{' then 'o' when '[' then 'a' when 't' then 'b' when 'f' then 'b' "
        "when '-' then case when substr(" + v + "::varchar, 2, 1) between '0' and '9' then 'num' else 'x' end "
        "when 'n' then case when " + v + "::varchar = 'null' then 'n' else 'x' end "
        "else case when left(" + v + "::varchar, 1) between '0' and '9' then 'num' else 'x' end end end"
    )


def _typed_expr(f: Field, i: int, params: dict) -> tuple[str, list[tuple[str, str]]]:
    """SQL for the typed value ``t<i>`` of field ``f`` (never raises), and its value checks."""
    v, k, t, raw = f"v{i}", f"k{i}", f"t{i}", f"v{i}::varchar"
    checks: list[tuple[str, str]] = []  # (failing condition over t/v/k, detail)
    if f.type == "string":
        value = f"case when {k} = 's' then {v} ->> '$' end"
    elif f.type == "int":
        value = f"case when {k} = 'num' and regexp_full_match({raw}, '-?[0-9]+') then try_cast({raw} as bigint) end"
        checks.append((f"{k} = 'num' and {t} is null and regexp_full_match({raw}, '-?[0-9]+')",
                       f"'integer ' || {raw} || ' is out of range'"))
    elif f.type == "float":
        value = f"case when {k} = 'num' then try_cast({raw} as double) end"
        checks.append((f"{k} = 'num' and not isfinite(coalesce({t}, 'inf'::double))",
                       f"'number ' || {raw} || ' is not finite'"))
    elif f.type == "bool":
        value = f"case {raw} when 'true' then true when 'false' then false end"
    elif f.type == "date":
        # Strict ISO calendar date: DuckDB's cast alone also takes '2026-2-3' and year 0000 (which
        # Python cannot represent), so the shape is checked first; nothing else is coerced.
        text = f"({v} ->> '$')"
        value = (f"case when {k} = 's' and regexp_full_match({text}, '[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}') "
                 f"and not starts_with({text}, '0000') then try_cast({text} as date) end")
        checks.append((f"{k} = 's' and {t} is null",
                       f"'string ' || left({raw}, 80) || ' is not a calendar date YYYY-MM-DD'"))
    elif f.type == "json_text":
        value = (f"case when {k} = 's' and json_valid({v} ->> '$') then ({v} ->> '$')::json "
                 f"when {k} in ('o', 'a') then {v} end")
        checks.append((f"{k} = 's' and {t} is null",
                       f"'string is not a JSON document: ' || left({raw}, 80)"))
    else:  # object, array, any: kept as JSON
        value = f"case when {k} <> 'n' then {v} end"

    if f.enum is not None:
        params[f"enum{i}"] = list(f.enum)
        checks.append((f"{t} is not null and not list_contains($enum{i}, {t}::varchar)",
                       f"'value ' || {raw} || ' is not one of ' || array_to_string($enum{i}, '|')"))
    for bound, op, words in (("minimum", "<", "below"), ("maximum", ">", "above"),
                             ("exclusive_minimum", "<=", "not above")):
        limit = getattr(f, bound)
        if limit is not None:
            params[f"{bound}{i}"] = float(limit)
            checks.append((f"{t} {op} ${bound}{i}",
                           f"'value ' || {raw} || ' is {words} ' || ${bound}{i}"))
    return value, checks


def _time_exprs(f: Field, i: int, params: dict, source_zone: str) -> list[tuple[str, str]]:
    """(``timed`` CTE expression, ``windowed`` CTE expressions) for time field ``i``.

    ``tr`` is the instant as written (NULL: unreadable or an offset beyond ±18:00), ``tm`` the
    instant kept (inside the source's plausible window and not in a skipped local hour), ``fd``
    how it was resolved. A naive time in a repeated local hour (``ab`` set) gets the earlier
    offset here (``fold_first``); ``transforms.localtime`` moves the second pass of that hour to
    the later offset from the file's write order.
    """
    t = f"t{i}"
    # A field may pin its zone (signals' created_at is UTC whatever the writer's zone).
    params[f"tz{i}"] = f.time_zone or source_zone
    window = f"tr{i} >= $earliest::timestamptz and tr{i} < $latest::timestamptz"
    if f.time in ("epoch_s", "epoch_ms"):
        scale = 1 if f.time == "epoch_s" else 1000
        timed = (f"case when {t} between -62135596800 * {scale} and 253402300799 * {scale} "
                 f"then make_timestamptz({t} * {1_000_000 // scale}) end as tr{i}, "
                 f"null::timestamp as n{i}, null::int as om{i}")
        return [(timed, f"false as gap{i}, null::timestamptz as ab{i}, "
                        f"case when {window} then tr{i} end as tm{i}, 'epoch' as fd{i}")]
    offset_minutes = (f"case when regexp_matches({t}, $offset_hm_re) then "
                      f"try_cast(regexp_extract({t}, $offset_hm_re, 1) as int) * 60 + "
                      f"try_cast(regexp_extract({t}, $offset_hm_re, 2) as int) end")
    has_offset = f"regexp_matches({t}, $offset_re)"
    with_offset = f"case when coalesce(om{i}, 0) <= $max_offset then try_cast({t} as timestamptz) end"
    if f.time == "iso_offset":
        timed = (f"{offset_minutes} as om{i}, null::timestamp as n{i}, "
                 f"case when {has_offset} then {with_offset} end as tr{i}")
    else:
        timed = (f"{offset_minutes} as om{i}, "
                 f"case when not {has_offset} then {_naive(t)} end as n{i}, "
                 f"case when {has_offset} then {with_offset} else timezone($tz{i}, n{i}) end as tr{i}")
    # DuckDB reads a repeated local hour with the later offset: the same wall time one shift
    # (1 h; 30 min on Lord Howe) earlier is the first pass. A skipped hour does not round-trip.
    windowed = (
        f"coalesce(n{i} is not null and timezone($tz{i}, tr{i}) <> n{i}, false) as gap{i}, "
        f"case when n{i} is null then null "
        f"when timezone($tz{i}, tr{i} - interval 1 hour) = n{i} then tr{i} - interval 1 hour "
        f"when timezone($tz{i}, tr{i} - interval 30 minute) = n{i} then tr{i} - interval 30 minute end as ab{i}, "
        f"case when {window} and not gap{i} then coalesce(ab{i}, tr{i}) end as tm{i}, "
        f"case when n{i} is not null then case when ab{i} is not null then 'fold_first' else 'unambiguous' end "
        f"when regexp_matches({t}, '[Zz]$') then 'utc' else 'offset' end as fd{i}")
    return [(timed, windowed)]


def _naive(t: str) -> str:
    """The wall time of a naive time's text ``t`` (NULL: not one)."""
    return (f"coalesce(try_strptime({t}, $naive_formats), "
            f"try_strptime(regexp_replace({t}, $extra_fraction_re, '\\1'), $naive_formats))")


def _time_text(f: Field, i: int) -> str:
    if f.time in ("epoch_s", "epoch_ms"):
        return f"case when t{i} is not null then v{i}::varchar end"
    return f"t{i}"


TIME_WORDS = {
    "iso_naive": "an ISO-8601 time", "iso_any": "an ISO-8601 time",
    "iso_offset": "an ISO-8601 time with a UTC offset", "epoch_s": "epoch seconds",
    "epoch_ms": "epoch milliseconds",
}


def _field_rules(f: Field, i: int, checks: list) -> list[tuple[str, str, str]]:
    v, k, t = f"v{i}", f"k{i}", f"t{i}"
    lit = "'" + f.name.replace("'", "''") + "'"
    rules: list[tuple[str, str, str]] = []
    if f.required:
        rules.append((f"{v} is null", f"'missing_field:' || {lit}",
                      f"'required key \"' || {lit} || '\" is absent'"))
    if not f.nullable:
        rules.append((f"{k} = 'n'", f"'bad_type:' || {lit}",
                      f"'key \"' || {lit} || '\" is null; expected {EXPECTED[f.type]}'"))
    allowed = {
        "string": ["s"], "int": ["num"], "float": ["num"], "bool": ["b"], "date": ["s"], "object": ["o"],
        "array": ["a"], "any": ["s", "o", "a", "b", "num"], "json_text": ["s", "o", "a"],
    }[f.type] + ["n"]
    kind_list = ", ".join(f"'{x}'" for x in allowed)
    kind_name = f"case {k} " + " ".join(f"when '{x}' then '{n}'" for x, n in KIND_NAMES.items()) + " end"
    type_fail = f"{k} not in ({kind_list})"
    if f.type == "int":
        type_fail = f"{type_fail} or ({k} = 'num' and not regexp_full_match({v}::varchar, '-?[0-9]+'))"
    rules.append((type_fail, f"'bad_type:' || {lit}",
                  f"'expected {EXPECTED[f.type]}, got ' || {kind_name} || ' ' || left({v}::varchar, 80)"))
    for cond, detail in checks:
        rules.append((cond, f"'bad_value:' || {lit}", detail))
    if f.time:
        bad = f"'bad_timestamp:' || {lit}"
        rules += [
            (f"{t} is not null and tr{i} is null and om{i} > $max_offset", bad,
             f"'UTC offset of ' || left({v}::varchar, 80) || ' is beyond ±18:00'"),
            (f"{t} is not null and tr{i} is null", bad,
             f"'cannot read ' || left({v}::varchar, 80) || ' as {TIME_WORDS[f.time]}'"),
            (f"not ({'tr' + str(i)} >= $earliest::timestamptz and tr{i} < $latest::timestamptz)", bad,
             f"'instant ' || strftime(tr{i}, '%Y-%m-%dT%H:%M:%SZ') || ' of ' || left({v}::varchar, 80) || "
             f"' is outside this source''s plausible window [' || $earliest || ', ' || $latest || ')'"),
            (f"gap{i}", bad,
             f"'local time ' || left({v}::varchar, 80) || ' does not exist in ' || $tz{i} || "
             f"' (the clocks went forward; no correct clock writes it)'"),
        ]
    return rules


def strict_verdict(text: str, duckdb_reason: str) -> tuple[str | None, str]:
    """Settle a line DuckDB flagged, with Python's strict JSON parser.

    Returns ``(reason, detail)``; ``reason`` None means the line is standard JSON after all and
    must be classified again without the non-standard check.
    """
    line = text.rstrip("\r\n")

    def reject_constant(name: str):
        raise _NonStandard(name)

    def pairs(items):
        seen = set()
        for key, _ in items:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
        return dict(items)

    try:
        # parse_int: the verdict needs no value, and converting an integer of more than 4,300
        # digits raises ValueError (Python's limit), which DuckDB reads as valid JSON
        json.loads(line, parse_constant=reject_constant, parse_int=lambda digits: 0,
                   object_pairs_hook=pairs if duckdb_reason == "duplicate_key" else None)
    except _NonStandard as exc:
        return "non_standard_json", f"non-standard JSON literal {exc.args[0]} (NaN/Infinity are not JSON)"
    except _DuplicateKey as exc:
        return "duplicate_key", f"key {exc.args[0]!r} appears more than once"
    except json.JSONDecodeError as exc:
        return "invalid_json", f"{exc.msg} at column {exc.colno}"
    except RecursionError:
        return "invalid_json", "nesting too deep"
    if duckdb_reason == "invalid_json":
        # Python accepts lone surrogate escapes ("\ud800"); they are not valid Unicode text.
        return "invalid_json", "string escape is not valid Unicode (lone surrogate)"
    if duckdb_reason == "duplicate_key":
        return "duplicate_key", "a key appears more than once"
    return None, ""


class _NonStandard(Exception):
    pass


class _DuplicateKey(Exception):
    pass
