"""The retrieval tool's eventlog: SQLite databases and JSONL exports with the same columns."""

from transforms.spec import Subject, Field, SourceSpec, SqliteTable

# Session ids are "YYYYMMDD-HHMMSS", written with an adapter suffix or inside a tag name.
SESSION_ID = r"^(\d{8}-\d{6})-[A-Za-z][A-Za-z0-9_]*$"
SESSION_TAG = r"^session-(\d{8}-\d{6})"
QUERY_ID = "data ->> 'query_id'"  # v2 queries; v1 has only source_id


def _named(id_sql: str) -> str:
    """The id, or NULL when it is empty or only whitespace."""
    return f"case when trim({id_sql}, e' \\t\\r\\n') <> '' then {id_sql} end"


SOURCE = SourceSpec(
    name="eventlog",
    description="retrieval tool eventlog (eventlog/*.db table eventlog, eventlog/*.jsonl)",
    globs=("eventlog/*.db", "eventlog/*.jsonl"),
    format="jsonl",  # .db files are read as SQLite (by extension), .jsonl as lines
    sqlite=SqliteTable(table="eventlog", key="seq",
                       text_columns=("event_type", "timestamp", "source_id", "source_file", "data")),
    fields=(
        Field("seq", "int", required=False, nullable=True),
        Field("event_type"),
        Field("timestamp", time="iso_any"),
        Field("source_id"),
        Field("source_file", required=False, nullable=True),
        # A JSON document: a string holding JSON (SQLite's TEXT column) or an inline object.
        Field("data", "json_text"),
    ),
    identity=("event_key",),
    # Commits by sha, queries by query id (v1: source_id); other events by their content. A
    # commit or query whose id is empty or blank names none: NULL, quarantined as
    # bad_value:event_key (one such line would otherwise replace every other under last-wins).
    identity_sql=(
        "case event_type "
        f"when 'git.commit' then 'git.commit:' || {_named('source_id')} "
        f"when 'scry.query' then 'scry.query:' || coalesce({_named(QUERY_ID)}, {_named('source_id')}) "
        "else event_type || ':' || source_id || ':' || md5(data::varchar) end"
    ),
    order=("timestamp", "seq"),
    subjects=(
        Subject("session", "data.session_id", extract=SESSION_ID),
        Subject("session", "data.tag_name", extract=SESSION_TAG),
        Subject("session", "source_id", extract=SESSION_TAG),
    ),
)
