"""The signal feedback buffer (``feedback_buffer.jsonl``): opinions on chunks and concepts."""

from transforms.spec import Subject, Field, SourceSpec

SOURCE = SourceSpec(
    name="signals",
    description="signal feedback buffer (signals/*.jsonl)",
    globs=("signals/*.jsonl",),
    format="jsonl",
    fields=(
        Field("id"),
        # Epoch ms written from a local utcnow(): skewed by the writer's offset; kept, not trusted.
        Field("timestamp", "int", time="epoch_ms", required=False, nullable=True),
        Field("signal", enum=("correct", "incorrect", "good", "bad", "unsure", "neutral")),
        Field("strength", "float", minimum=0, maximum=1),
        Field("context", required=False, nullable=True),
        Field("session_id", required=False, nullable=True),
        Field("source", enum=("manual", "heuristic", "llm_agreement")),
        # The trustworthy time: naive, but written in UTC whatever the source's zone.
        Field("created_at", time="iso_naive", time_zone="UTC"),
        Field("target_type", enum=("chunk", "concept")),
        Field("target_id"),
        Field("aspect", enum=("classification", "content", "relevance", "extraction", "accuracy")),
        Field("original_class", enum=("STM", "LONGTERM", "DISCARD"), required=False, nullable=True),
        Field("suggested_class", enum=("STM", "LONGTERM", "DISCARD"), required=False, nullable=True),
    ),
    identity=("id",),
    order=("created_at",),
    subjects=(Subject("session", "session_id"),),
)
