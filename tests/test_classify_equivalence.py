"""The one-pass classifier gives every line exactly the outcome the previous classifier gave.

``classify_reference.py`` is the builder as it was before the fast paths (validity from the
extraction, the per-field ``ok`` guard, UTC without zone conversions); random lines — valid,
invalid JSON, wrong types, missing and extra keys, duplicate keys (top level and nested), odd
unicode, NaN/Infinity, trailing commas, times in DST folds and gaps, offsets beyond ±18:00 —
must classify to identical rows: reason, detail, every typed value, ``<col>_fold``, line numbers
and byte offsets. The real sources' specs are checked too, on their own shapes of record.
"""

from __future__ import annotations

import json
from dataclasses import replace

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

import classify_reference
from dagster_project.sources import load_sources
from transforms.classify import build_sql
from transforms.spec import Field, SourceSpec

SPEC = SourceSpec(
    name="probe", globs=("probe/*.jsonl",), format="jsonl", identity=("id",), time_zone="Europe/Madrid",
    fields=(
        Field("id"),
        Field("kind", enum=("a", "b", "c")),
        Field("n", "int", required=False, nullable=True, minimum=0),
        Field("x", "float", required=False, minimum=0, maximum=10),
        Field("w", "float", required=False, nullable=True, exclusive_minimum=0),
        Field("ok", "bool"),
        Field("day", "date", required=False),
        Field("obj", "object", required=False, nullable=True),
        Field("arr", "array", required=False),
        Field("any", "any", required=False, nullable=True),
        Field("doc", "json_text", required=False),
        Field("at", time="iso_naive"),
        Field("at_utc", time="iso_any", time_zone="UTC", required=False, nullable=True),
        Field("at_off", time="iso_offset", required=False),
        Field("ms", "int", time="epoch_ms", required=False),
    ),
)
UTC_SPEC = replace(SPEC, name="probe_utc", time_zone="UTC")
KEYS = [f.name for f in SPEC.fields]

TIMES = ["2026-10-25T02:30:00", "2026-10-25T02:30:00.5", "2026-03-29T02:30:00", "2026-02-26 14:03:12",
         "2026-02-26T14:03:12+01:00", "2026-02-26T14:03:12Z", "2026-02-26T14:03:12+19:00",
         "2026-02-26T14:03:12-0530", "1999-01-01T00:00:00", "2126-01-01T00:00:00", "26-02-2026",
         "2026-02-30T00:00:00", " 2026-02-26T14:03:12", "0001-01-01T00:00:00"]
STRINGS = ["a", "b", "c", "d", "", "ü ✓ 😀", "\u2028", "\\ud800", "\\u0000", "x\\\"y", "2026-02-26",
           "2026-2-3", "0000-01-01", "{\"a\": 1}", "[1, 2]", "not json {", "nan", "true",
           " \t", "git.commit", "scry.query", "{\"query_id\": \" \"}"]  # blank ids; the eventlog's keyed events


def _string(s: str) -> str:
    # Escapes are written raw so lone surrogates and NULs reach the parser as a producer wrote them.
    return '"' + s.replace("\n", "\\n") + '"' if "\\" in s else json.dumps(s, ensure_ascii=False)


def _object(draw, depth: int) -> str:
    keys = draw(st.lists(st.sampled_from(["a", "b", "id", "ü"]), max_size=3))  # repeats: duplicate keys
    return "{" + ", ".join(f"{json.dumps(k)}: {draw(values(depth + 1))}" for k in keys) + "}"


@st.composite
def values(draw, depth: int = 0) -> str:
    """One JSON value as text, including what lenient parsers accept and strict ones reject."""
    choice = draw(st.integers(0, 13 if depth < 2 else 9))
    if choice == 0:
        return _string(draw(st.sampled_from(STRINGS)))
    if choice == 1:
        return _string(draw(st.sampled_from(TIMES)))
    if choice == 2:
        return str(draw(st.integers(-(2 ** 70), 2 ** 70)))
    if choice == 3:
        return draw(st.sampled_from(["0", "-1", "7", "1.5", "-0.0", "1e999", "3e2", "10.000001", "1782000000000"]))
    if choice == 4:
        return draw(st.sampled_from(["true", "false", "null"]))
    if choice == 5:
        return draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "-inf"]))
    if choice == 6:
        return str(draw(st.integers(0, 10)))
    if choice == 7:
        return _string(draw(st.text(max_size=6)))
    if choice in (8, 9):
        return draw(st.sampled_from(["1", "\"b\"", "5.5", "null"]))
    if choice in (10, 11):
        return _object(draw, depth)
    items = draw(st.lists(values(depth + 1), max_size=3))
    return "[" + ", ".join(items) + (",]" if draw(st.booleans()) and items else "]")


GOOD = {"id": '"r1"', "kind": '"a"', "n": "3", "x": "1.5", "w": "0.5", "ok": "true", "day": '"2026-02-26"',
        "obj": '{"a": 1}', "arr": "[1]", "any": '"s"', "doc": '"{\\"a\\": 1}"', "at": '"2026-02-26T14:03:12"',
        "at_utc": '"2026-02-26T14:03:12Z"', "at_off": '"2026-02-26T14:03:12+01:00"', "ms": "1772114592000"}


def fitting(key: str):
    """Values of the right JSON kind for the field, so its value rules (not its type) decide."""
    if key.startswith("at"):
        return st.sampled_from(TIMES).map(_string)
    if key == "ms":
        return st.sampled_from(["-62135596800001", "0", "253402300799999", "253402300800000", "1e3"])
    return st.sampled_from(STRINGS).map(_string)


@st.composite
def lines(draw) -> str:
    """A line: mostly a record close to valid (so each rule is reached), sometimes not JSON."""
    shape = draw(st.integers(0, 19))
    if shape == 0:
        return draw(st.sampled_from(["", "   ", "\t\r", "null", "[1, 2]", "\"s\"", "{", "{\"id\": 1",
                                     " {\"id\": \"r\"}", "{\"id\": \"r\"} x", "{\"id\": \"r\",}"]))
    # A few fields off a good record: each rule is reached on a line whose other fields pass.
    touched = draw(st.lists(st.sampled_from(KEYS), max_size=3, unique=True))
    pairs = []
    for key in KEYS:
        how = draw(st.sampled_from(["missing", "value", "value", "duplicate"])) if key in touched else "good"
        if how != "missing":
            pairs.append((key, GOOD[key] if how == "good" else draw(st.one_of(values(), fitting(key)))))
        if how == "duplicate":
            pairs.append((key, draw(st.sampled_from([GOOD[key], draw(values())]))))
    for _ in range(draw(st.integers(0, 2)) if draw(st.integers(0, 3)) == 0 else 0):
        pairs.append((draw(st.sampled_from(["extra", "more", "ü"])), draw(values())))  # extra keys
    pairs = draw(st.permutations(pairs))
    text = "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {v}" for k, v in pairs) + "}"
    if shape == 1:
        text = text[: draw(st.integers(0, len(text)))]  # truncated
    if shape == 2:
        text = text[:-1] + ", }"  # trailing comma
    return text + draw(st.sampled_from(["\n", "\r\n"]))


def classify(con: duckdb.DuckDBPyConnection, builder, spec: SourceSpec, texts: list[str]) -> list[tuple]:
    offsets, pos = [], 0
    for t in texts:
        offsets.append(pos)
        pos += len(t.encode("utf-8", "surrogatepass"))
    table = pa.table({"path": ["0"] * len(texts), "line_number": pa.array(range(1, len(texts) + 1), pa.int64()),
                      "byte_offset": pa.array(offsets, pa.int64()), "text": pa.array(texts, pa.large_string())})
    con.register("_lines", table)
    try:
        sql = builder(spec, "_lines")
        return con.execute(f"select * from ({sql.sql}) order by line_number", sql.params).fetchall()
    finally:
        con.unregister("_lines")


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    yield con
    con.close()


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(lines(), min_size=1, max_size=80), utc=st.booleans())
def test_new_classifier_equals_the_reference(con, texts, utc):
    spec = UTC_SPEC if utc else SPEC
    new = classify(con, build_sql, spec, texts)
    old = classify(con, classify_reference.build_sql, spec, texts)
    assert new == old


def test_fixed_lines_reach_every_family(con):
    """Fixed expected outcomes for the new path (so the comparison is not between two wrong
    answers): a load each way a field can be absent or null, and one line per rule family."""
    good = {k: json.loads(GOOD[k]) for k in KEYS}
    texts = [json.dumps(good), json.dumps({k: v for k, v in good.items() if k not in ("n", "x", "obj")}),
             json.dumps({**good, "n": None, "obj": None, "w": None}),
             '{"id": "r", "id": "s"}', "{", "", "[1]", json.dumps({**good, "kind": "z"}),
             json.dumps({**good, "n": 1.5}), json.dumps({**good, "n": -1}), json.dumps({**good, "ok": None}),
             json.dumps({**good, "at": "2026-03-29T02:30:00"}), json.dumps({**good, "at": "2026-10-25T02:30:00"}),
             json.dumps(good).replace("\"x\": 1.5", "\"x\": 1e999"), json.dumps({**good, "day": "2026-2-3"}),
             '{"id": "r", "x": NaN}', json.dumps({k: v for k, v in good.items() if k != "id"})]
    rows = classify(con, build_sql, SPEC, [t + "\n" for t in texts])
    assert [(r[3], r[4]) for r in rows] == [
        (None, None), (None, None), (None, None),
        ("duplicate_key", None), ("invalid_json", None), ("blank", None),
        ("not_an_object", "the line is JSON array, not an object"),
        ("bad_value:kind", "value \"z\" is not one of a|b|c"),
        ("bad_type:n", "expected an integer, got a number 1.5"),
        ("bad_value:n", "value -1 is below 0.0"),
        ("bad_type:ok", 'key "ok" is null; expected a boolean'),
        ("bad_timestamp:at", 'local time "2026-03-29T02:30:00" does not exist in Europe/Madrid '
                             "(the clocks went forward; no correct clock writes it)"),
        (None, None), ("bad_value:x", "number 1e999 is not finite"),
        ("bad_value:day", 'string "2026-2-3" is not a calendar date YYYY-MM-DD'),
        ("strict_check", None), ("missing_field:id", 'required key "id" is absent'),
    ]
    fold = [c for c, (name, _) in enumerate(sql_columns()) if name == "at_fold"][0]
    assert rows[12][5 + fold] == "fold_first"


def sql_columns():
    return [("text", "varchar")] + build_sql(SPEC, "_lines").columns


@pytest.mark.parametrize("name", sorted(n for n, s in load_sources().items() if s.format != "sqlite"))
@hsettings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_real_specs_classify_as_before(con, name, data):
    spec = load_sources()[name]
    keys = [f.name for f in spec.fields]
    texts = []
    for _ in range(data.draw(st.integers(1, 40))):
        pairs = [(k, data.draw(values())) for k in keys if data.draw(st.integers(0, 5))]
        if data.draw(st.booleans()) and pairs:
            pairs.append((pairs[0][0], data.draw(values())))
        texts.append("{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in pairs) + "}\n")
    assert classify(con, build_sql, spec, texts) == classify(con, classify_reference.build_sql, spec, texts)
