"""``FeedbackRecord`` sidecar rows: thumbs given after an interaction was flushed to disk."""

from transforms.spec import Subject, Field, SourceSpec

SOURCE = SourceSpec(
    name="feedback",
    description="FeedbackRecord sidecar ({date}_feedback.jsonl)",
    globs=("feedback/*_feedback.jsonl",),
    format="jsonl",
    fields=(
        Field("record_id"),
        Field("feedback", enum=("positive", "negative", "neutral")),
        Field("was_edited", "bool", required=False),
        Field("timestamp", time="iso_naive"),
        Field("source", enum=("manual", "outcome_tracker"), required=False),
    ),
    # staging.feedback keeps the latest event per record; every event stays in raw.feedback
    # for the label timeline.
    identity=("record_id",),
    order=("timestamp",),
    subjects=(Subject("interaction", "record_id"),),
)
