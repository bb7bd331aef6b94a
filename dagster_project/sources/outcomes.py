"""OutcomeTracker ``OutcomeRecord`` rows: inferred accept/reject of an assistant turn."""

from transforms.spec import Subject, Field, SourceSpec

SOURCE = SourceSpec(
    name="outcomes",
    description="OutcomeTracker OutcomeRecord ({date}_outcomes.jsonl)",
    globs=("outcomes/*_outcomes.jsonl",),
    format="jsonl",
    fields=(
        Field("id"),
        Field("timestamp", time="iso_naive"),
        Field("query", required=False, nullable=True),
        Field("response_summary", required=False, nullable=True),
        Field("task_type", required=False, nullable=True),
        Field("model", required=False, nullable=True),
        Field("topic", required=False, nullable=True),
        Field("competence_level", required=False, nullable=True),  # a level name or "Unknown"
        Field("strategy", "object", required=False, nullable=True),
        Field("outcome", enum=("accepted", "rejected", "neutral")),
        Field("inference_reason", required=False, nullable=True),
        # measured with the wall clock, negative when it steps back (NTP): kept, and reported by a
        # warn expectation (expectations.STAGING_EXTRAS); a bound here quarantined the whole record
        Field("latency_ms", "float", required=False, nullable=True),
        Field("session_id", required=False, nullable=True),
    ),
    identity=("id",),
    order=("timestamp",),
    derived=(("arm_id", "strategy ->> 'arm_id'"),),
    subjects=(Subject("session", "session_id"),),
)
