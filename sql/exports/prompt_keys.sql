-- What sft, kto and dpo need per labelled interaction that is costly to compute, computed once
-- per interaction version and kept between builds in lineage.prompt_keys (private, never
-- published): one row per interaction whose final label is positive or negative.
--   prompt_hash   sha256(fw_norm(input_text)): the split key (fw_split_hash)
--   prompt_group  sha256(norm prompt || chr(0) || norm context): the DPO group as published;
--                 (prompt_group, prompt_hash) determines (norm prompt, norm context)
--   has_system    fw_norm(context) <> '': the prompt starts with a system message
--   id_hash       sha256(id): DPO's order among equal times
--   id_key        hash(id), 64 bits: an incremental build finds a touched id's row by it first
--   label         the final label (positive or negative), timestamp the interaction's, and
--   output_hash   sha256(output_text): with them DPO pairs a group's members (sql/exports/
--                 dpo_pairs.sql) without reading their texts; equal hashes are equal bytes
--   pairable      the prompt and the answer both hold more than whitespace: DPO pairs only
--                 these (a blank prompt is no prompt: blank prompts of unrelated interactions
--                 would form one group whose pairs are all dropped)
--   label_source, labeled_at, label_was_edited   the final label's provenance (SFT publishes
--                 it): with label, all sft and kto read of marts.interaction_labels, so an
--                 incremental build reads the touched interactions' labels here, among the
--                 rows it has just appended, instead of matching every id of the labels mart
-- fw_interactions: staging.interactions (a temp view), or the rows an incremental build needs.
-- $all: every labelled interaction, else only those in fw_touched_interactions.
with labelled as materialized (
    select
        i.id,
        i.session_id,
        i."timestamp",
        l.label,
        l.label_source,
        l.labeled_at,
        l.was_edited as label_was_edited,
        sha256(i.output_text) as output_hash,
        fw_nonblank(i.output_text) as answered,
        fw_norm(i.input_text) as norm_prompt,
        fw_norm(i.context) as norm_context
    from fw_interactions as i
    join marts.interaction_labels as l on l.interaction_id = i.id
    where l.label in ('positive', 'negative')
        and ($all or i.id in (select key from fw_touched_interactions))
),

-- one HMAC per session, not per interaction
sessions as (
    select session_id, fw_session_pseudonym(session_id) as session_pseudonym
    from (select distinct session_id from labelled)
)

select
    l.id,
    sha256(l.norm_prompt) as prompt_hash,
    sha256(l.norm_prompt || chr(0) || l.norm_context) as prompt_group,
    l.norm_context <> '' as has_system,
    sha256(l.id) as id_hash,
    hash(l.id) as id_key,
    l.label,
    l."timestamp",
    l.output_hash,
    l.norm_prompt <> '' and l.answered as pairable,
    s.session_pseudonym,
    l.label_source,
    l.labeled_at,
    l.label_was_edited
from labelled as l
left join sessions as s on s.session_id = l.session_id
