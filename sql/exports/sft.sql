-- SFT: accepted interactions (was_accepted of the winning version) whose final label
-- (marts.interaction_labels) is positive. TRL conversational prompt/completion.
-- Needs the macros of transforms.text and lineage.prompt_keys (built by
-- transforms.training). Columns: the public contract first (prompt, completion,
-- sample_weight, split, interaction_id), then provenance.
-- Retention: interactions at or after ($as_of 00:00 UTC - $interactions_retention_days days);
-- NULL keeps all. $all: every interaction, else only those in fw_touched_interactions.
-- fw_interactions: staging.interactions (a temp view), or the rows an incremental build needs.
-- The label and its provenance come from lineage.prompt_keys (copied from the labels mart, one
-- row per interaction labelled positive or negative); an incremental build appended the touched
-- interactions' keys from row $new_keys on, so it reads that range, not every row (0 for a whole
-- build).
with labelled as (
    select
        i.*,
        k.label_source,
        k.labeled_at,
        k.label_was_edited,
        k.prompt_hash,
        k.has_system,
        k.session_pseudonym
    from fw_interactions as i
    join lineage.prompt_keys as k on k.id = i.id
    where k.label = 'positive'
        and i.was_accepted
        and ($all or (k.rowid >= $new_keys and i.id in (select key from fw_touched_interactions)))
        and ($interactions_retention_days is null
            or i."timestamp" >= timezone('UTC', $as_of::date::timestamp
                                         - to_days($interactions_retention_days::integer)))
)

select
    fw_prompt_messages(has_system, context, input_text) as prompt,
    fw_completion(output_text) as completion,
    1.0::double as sample_weight,
    fw_split_hash(prompt_hash, $eval_fraction) as split,
    id as interaction_id,
    path,
    line_number,
    byte_offset,
    session_pseudonym,
    label_source,
    labeled_at,
    label_was_edited as was_edited,
    "timestamp" as interaction_timestamp,
    interaction_type,
    model
from labelled
order by interaction_id
