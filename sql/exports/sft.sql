-- SFT: accepted interactions (was_accepted of the winning version) whose final label
-- (marts.interaction_labels) is positive. TRL conversational prompt/completion.
-- Needs the macros of transforms.text and transforms.pseudonyms (registered by
-- transforms.training). Columns: the public contract first (prompt, completion,
-- sample_weight, split, interaction_id), then provenance.
-- Retention: interactions at or after ($as_of 00:00 UTC - $interactions_retention_days days);
-- NULL keeps all.
with labelled as (
    select i.*, l.label, l.label_source, l.labeled_at, l.was_edited as label_was_edited
    from staging.interactions as i
    join marts.interaction_labels as l on l.interaction_id = i.id
    where $interactions_retention_days is null
        or i."timestamp" >= timezone('UTC', $as_of::date::timestamp
                                     - to_days($interactions_retention_days::integer))
)

select
    fw_prompt(context, input_text) as prompt,
    fw_completion(output_text) as completion,
    1.0::double as sample_weight,
    fw_split(fw_norm(input_text), $eval_fraction) as split,
    id as interaction_id,
    path,
    line_number,
    byte_offset,
    fw_session_pseudonym(session_id) as session_pseudonym,
    label_source,
    labeled_at,
    label_was_edited as was_edited,
    "timestamp" as interaction_timestamp,
    interaction_type,
    model
from labelled
where was_accepted and label = 'positive'
order by interaction_id
