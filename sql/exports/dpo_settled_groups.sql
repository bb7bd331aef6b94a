-- DPO groups an incremental build can leave as they are although touched interactions joined
-- them: the group already holds $max_pairs kept pairs, no touched interaction was in it before
-- (fw_left_groups: the groups touched interactions were in), and every touched interaction now
-- in it is strictly later than its latest kept pair.
-- Why (sql/exports/dpo_pairs.sql, append-stable cap): let T be the latest kept pair_timestamp. Only
-- responses are added; each new one x has timestamp > T, so it sorts after every response at or
-- before T, whose ranks (and so candidacy) are unchanged. x can only displace responses sorting
-- after it - a candidate pushed past $max_pairs + 1, or the representative of x's text - and
-- their pairs, like every pair with x or with a response newly admitted behind them, have
-- pair_timestamp >= that response's timestamp > T. So the kept pairs (all at or before T, the
-- chosen and rejected rows unchanged) are all still pairs, every other pair sorts strictly after
-- them, and the first $max_pairs are the same rows.
-- fw_interactions: the touched interactions' staging rows (no other member is read before
-- this); lineage.prompt_keys: already holds the touched interactions' new keys, appended by this
-- build from row $new_keys on (their earlier keys deleted): read by that range, not by matching
-- every id of the table.
with joined as (
    select k.prompt_group, i."timestamp"
    from lineage.prompt_keys as k
    join fw_interactions as i on i.id = k.id
    where k.rowid >= $new_keys
),

kept as (
    select prompt_group, count(*) as pairs, count(pair_timestamp) as timed, max(pair_timestamp) as latest
    from exports.dpo
    where prompt_group in (select prompt_group from joined)
    group by prompt_group
)

select j.prompt_group as key
from joined as j
join kept as k on k.prompt_group = j.prompt_group
where k.pairs >= $max_pairs
    and k.timed = k.pairs
    and j.prompt_group not in (select key from fw_left_groups)
group by j.prompt_group, k.latest
having count(j."timestamp") = count(*) and min(j."timestamp") > k.latest
