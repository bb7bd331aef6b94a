"""The weighted feedback CLI's training queue and its renamed archives (one history)."""

from transforms.spec import Field, SourceSpec

SOURCE = SourceSpec(
    name="weighted_queue",
    description="weighted feedback queue (training_queue.jsonl + training_queue_archive_*.jsonl)",
    globs=("weighted/training_queue*.jsonl",),
    # Older saves hold one JSON array of objects with timestamp and tags.
    format="jsonl_or_array",
    fields=(
        Field("query"),
        Field("response"),
        Field("weight", "float", exclusive_minimum=0),
        Field("feedback", required=False, nullable=True),
        Field("timestamp", time="iso_offset", required=False, nullable=True),
        Field("tags", "array", required=False, nullable=True),
    ),
    # No id and no timestamp: the same line under the queue and an archive is one example.
    identity=("@content",),
    order=("timestamp",),
)
