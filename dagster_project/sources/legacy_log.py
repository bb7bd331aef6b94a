"""The deprecated FabrikLogger's rows: same folder as interactions, different schema, no id."""

from transforms.spec import Subject, Field, SourceSpec

SOURCE = SourceSpec(
    name="legacy_log",
    description="deprecated FabrikLogger ({date}_interactions.jsonl); kept apart from interactions",
    globs=("interactions/*_interactions.jsonl",),
    format="jsonl",
    fields=(
        Field("timestamp", time="iso_any"),
        Field("type", enum=("interaction", "pipeline_event", "api_call")),
        Field("interaction_type", required=False, nullable=True),
        Field("project", required=False, nullable=True),
        Field("session_id", required=False, nullable=True),
        Field("user_input", required=False, nullable=True),
        Field("assistant_output", required=False, nullable=True),
        Field("context", "object", required=False, nullable=True),
        Field("reasoning", required=False, nullable=True),
        Field("lesson_learned", required=False, nullable=True),
        Field("model", required=False, nullable=True),
        Field("tokens_used", "int", required=False, nullable=True),
        Field("latency_ms", "float", required=False, nullable=True),
        # The one field that really holds several JSON types: a rating object or a string ("👍").
        Field("feedback", "any", required=False, nullable=True),
        Field("tags", "array", required=False, nullable=True),
    ),
    # No id: a row is identified by its content, so a re-logged identical row collapses.
    identity=("@content",),
    order=("timestamp",),
    subjects=(Subject("session", "session_id"),),
)
