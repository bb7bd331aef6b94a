"""The weighted feedback TUI's good/bad ratings (``feedback.jsonl``)."""

from transforms.spec import Field, SourceSpec

SOURCE = SourceSpec(
    name="weighted_ratings",
    description="weighted feedback TUI ratings (weighted/feedback*.jsonl)",
    globs=("weighted/feedback*.jsonl",),
    format="jsonl",
    fields=(
        Field("timestamp", "int", time="epoch_s"),
        Field("query"),
        Field("response"),
        Field("rating", enum=("good", "bad")),
        Field("weight", "float", exclusive_minimum=0),
        Field("note", required=False, nullable=True),
    ),
    identity=("@content",),
    order=("timestamp",),
)
