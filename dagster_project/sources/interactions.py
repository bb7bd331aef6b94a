"""FlywheelCollector ``InteractionRecord`` lines: one file per collector process per day."""

from transforms.spec import Subject, Field, SourceSpec

INTERACTION_TYPES = (
    "prompt_response", "code_generation", "code_review", "refactor", "search",
    "decision", "error_fix", "documentation", "test", "other",
)

SOURCE = SourceSpec(
    name="interactions",
    description="FlywheelCollector InteractionRecord (interactions_{date}_{sid8}.jsonl)",
    globs=("interactions/interactions_*.jsonl",),
    format="jsonl",
    fields=(
        Field("id"),
        Field("timestamp", time="iso_naive"),
        Field("interaction_type", enum=INTERACTION_TYPES),
        Field("input_text"),
        Field("output_text"),
        Field("context", required=False, nullable=True),
        Field("model", required=False, nullable=True),
        Field("tokens_used", "int", required=False, nullable=True, minimum=0),
        # measured with the wall clock, negative when it steps back (NTP): kept, and reported by a
        # warn expectation (expectations.STAGING_EXTRAS); a bound here quarantined the whole record
        Field("latency_ms", "float", required=False, nullable=True),
        Field("user_feedback", enum=("positive", "negative", "neutral", "none")),
        Field("was_edited", "bool"),
        Field("was_accepted", "bool"),
        Field("source", required=False, nullable=True),
        Field("session_id"),
        Field("project_context", required=False, nullable=True),  # Optional[str]
    ),
    identity=("id",),
    order=("timestamp",),
    subjects=(Subject("session", "session_id"),),
    name_id=r"^(interactions_\d{4}-\d{2}-\d{2}_)(.+)(\.jsonl)$",
    carries=(("id", "interaction"),),
)
