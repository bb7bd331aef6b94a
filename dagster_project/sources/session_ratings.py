"""End-of-session thumbs in the session-feedback SQLite store; ``value`` is the source of truth."""

from transforms.spec import Subject, Field, SourceSpec, SqliteTable

SOURCE = SourceSpec(
    name="session_ratings",
    description="session-feedback store (sessions/*.sqlite3, table session_feedback)",
    globs=("sessions/*.sqlite3",),
    format="sqlite",
    sqlite=SqliteTable(table="session_feedback", key="insertion_order", record_column="value"),
    fields=(
        Field("id"),
        Field("session_id_opaque"),
        Field("user_id_or_null", required=False, nullable=True),
        Field("recorded_at", time="iso_offset"),
        Field("recorded_date", "date", required=False),
        Field("label", enum=("positive", "negative", "skip")),
        Field("turn_count_at_end", "int", required=False, minimum=0),
        Field("source", enum=("cli_end", "cli_exit", "api_end")),
        Field("schema_version", "int", required=False),
        Field("modality", enum=("text", "voice"), required=False, nullable=True),
    ),
    # ``id`` is not unique (a double submit is two rows): the later insertion wins.
    identity=("id",),
    order=("recorded_at", "line_number"),
    subjects=(Subject("session", "session_id_opaque", hashed=True), Subject("user", "user_id_or_null")),
    retention=("recorded_at", "session_retention_days"),
)
