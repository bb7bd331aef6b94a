"""Declarative description of a raw source: what a valid record looks like.

A ``SourceSpec`` says *what* a source is (where its files live, the fields of a record with
their types, the identity and the last-wins order); the ingestion engine decides *how* to read
it safely. Nothing here does I/O, so specs are cheap to build, compare and override from YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

# The JSON value types a field accepts, and the DuckDB type its value is stored as.
FieldType = Literal["string", "int", "float", "bool", "date", "object", "array", "any", "json_text"]
# How a field's text becomes an instant. ``iso_naive`` is read in the source's time zone.
TimeFormat = Literal["iso_naive", "iso_offset", "iso_any", "epoch_s", "epoch_ms"]
Format = Literal["jsonl", "jsonl_or_array", "sqlite"]

STORAGE_TYPE: dict[str, str] = {
    "string": "varchar",
    "int": "bigint",
    "float": "double",
    "bool": "boolean",
    "date": "date",
    "object": "json",
    "array": "json",
    "any": "json",
    "json_text": "json",
}


@dataclass(frozen=True)
class Field:
    """One key of a record.

    ``required`` keys must be present; ``nullable`` keys may hold JSON ``null``. Checks that a
    value must pass (``enum``, ``minimum``...) quarantine the record as ``bad_value:<name>``.
    ``time`` turns the value into a UTC ``timestamptz`` column and keeps the text in
    ``<name>_text``; ``time_zone`` pins a naive field to a zone regardless of the source's.
    A ``date`` is a calendar day with no time or zone: a string exactly ``YYYY-MM-DD``.
    """

    name: str
    type: FieldType = "string"
    required: bool = True
    nullable: bool = False
    enum: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    time: TimeFormat | None = None
    time_zone: str | None = None


@dataclass(frozen=True)
class Subject:
    """A field that identifies a person (``flywheel forget``, dagster_project/privacy.py).

    ``kind``: whose id it holds (``session``, ``user``; ``interaction`` links a record to an
    erased interaction). ``field``: a key of the record, dotted for a key inside a JSON object
    field (``data.session_id``). ``hashed``: the field holds ``sha256(id)``, not the id.
    ``extract``: a regex whose group 1 is the id inside a longer value (a tag name, an id with
    an adapter suffix); the whole value is compared too.
    """

    kind: Literal["session", "user", "interaction"]
    field: str
    hashed: bool = False
    extract: str | None = None


@dataclass(frozen=True)
class SqliteTable:
    """Where a SQLite source keeps its rows.

    ``key`` is the monotonically increasing integer primary key used as the high-water mark.
    Each row's record (the JSON object the field schema validates) is the JSON the column
    ``record_column`` holds, or else an object of the key and the text columns ``text_columns``,
    which the reader builds (a BLOB in one of them is read as its UTF-8 text).
    """

    table: str
    key: str
    record_column: str | None = None
    text_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.record_column is None) == (not self.text_columns):
            raise ValueError(f"SqliteTable {self.table!r}: declare record_column or text_columns (one of them)")


@dataclass(frozen=True)
class SourceSpec:
    """A raw source.

    ``identity``: the fields whose values identify one entity (last-wins per identity); the
    special name ``@content`` means a hash of the record's canonical content.
    ``order``: the leading, source-specific part of the last-wins total order (event time, then
    a source sequence); the engine always appends ``path`` and ``byte_offset``/``line_number``
    so the order is total and independent of listing order.
    ``identity_sql``: optional DuckDB expression over the typed columns, when identity is a rule
    rather than a column (the eventlog keys commits by sha, queries by query id...).
    """

    name: str
    globs: tuple[str, ...]
    format: Format
    fields: tuple[Field, ...]
    identity: tuple[str, ...]
    order: tuple[str, ...] = ()
    time_zone: str = "UTC"
    sqlite: SqliteTable | None = None
    identity_sql: str | None = None
    description: str = ""
    # Extra columns computed from the typed ones (name -> DuckDB expression), e.g. normalised ids.
    derived: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    # The plausible window of every instant this source writes ([earliest, latest), UTC). An
    # instant outside it cannot come from a working writer (epoch seconds in an epoch-ms field
    # reads as 1970; ms read as seconds as year 50000+): quarantined as ``bad_timestamp:<f>``.
    # It is fixed, not relative to the run, so quarantine never depends on when a run happens;
    # a readable instant beyond the run time + slack is dropped at staging instead (expectations).
    earliest: str = "2000-01-01"
    latest: str = "2100-01-01"
    # Privacy: the fields naming a person; ``carries``: (field, kind) of a matched record that
    # other sources refer to (an erased session's interactions erase their feedback too).
    subjects: tuple[Subject, ...] = ()
    carries: tuple[tuple[str, str], ...] = ()
    # A file name that carries part of a person's id (the collector names each file by its
    # session: interactions_{date}_{sid8}.jsonl): a regex over the file's name with three groups,
    # before, the id's part, after. Shared datasets publish provenance with that part keyed. Not
    # in the repr, which fingerprints how a source is read (engine.declaration_key): publishing
    # alone depends on it, and a new fingerprint replays the source from bronze.
    name_id: str | None = field(default=None, repr=False)
    # (time field, settings attribute holding the days): records older are removed from every
    # layer by the lake's own retention.
    retention: tuple[str, str] | None = None

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"source {self.name!r} has no field {name!r}")

    def with_overrides(self, **changes) -> "SourceSpec":
        return replace(self, **changes)
