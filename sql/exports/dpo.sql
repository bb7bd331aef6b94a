-- DPO preference pairs as published: the pairs of fw_dpo_pairs (sql/exports/dpo_pairs.sql,
-- which says which pairs there are) with their texts.
-- prompt = the chosen interaction's prompt messages (system context when not blank, user
-- input, byte for byte); chosen / rejected = one assistant message each.
-- fw_interactions: staging.interactions (a temp view), or the rows an incremental build needs
-- (both members of each pair in fw_dpo_pairs).
select
    fw_prompt_messages(c.has_system, p.context, p.input_text) as prompt,
    fw_completion(p.output_text) as chosen,
    fw_completion(n.output_text) as rejected,
    c.chosen_id,
    c.rejected_id,
    fw_split_hash(c.prompt_hash, $eval_fraction) as split,
    c.prompt_group,
    p.path as chosen_path,
    p.line_number as chosen_line_number,
    n.path as rejected_path,
    n.line_number as rejected_line_number,
    c.pair_timestamp
from fw_dpo_pairs as c
join fw_interactions as p on p.id = c.chosen_id
join fw_interactions as n on n.id = c.rejected_id
order by c.prompt_group, c.pair_timestamp, c.pair_hash, c.chosen_id, c.rejected_id
