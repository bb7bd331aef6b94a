-- marts.promotion_candidates (SPEC 4.3, seed "Feedback Layer" safety rules): targets with
-- >= 2 qualifying positive signals, at least one of them from source 'manual'.
-- A qualifying signal is positive (good|correct), has effective_strength >= 0.7 as of the run
-- date, and has not been overturned: the current opinion on its (target, aspect) is positive.
-- "A single source never promotes" follows the seed's Rule 1 ("No single-source LONGTERM
-- promotion": a single feedback never promotes; consensus = count >= 2) and its anti-pattern
-- "single-source trust" (automated sources alone need "multiple sources OR manual
-- confirmation"): one signal alone never promotes, automated signals without a manual one never
-- promote, and two manual signals do (the seed's own candidate query accepts them).
-- distinct_sources is published for readers who want the stricter "two kinds of source" rule;
-- in_conflict flags targets also listed in marts.signal_conflicts.
with qualifying as (
    select o.*
    from marts.signal_opinions as o
    where o.polarity = 'positive'
        and o.effective_strength >= 0.7
        and exists (
            select 1
            from marts.signal_opinions as c
            where c.is_current
                and c.polarity = 'positive'
                and c.target_type = o.target_type
                and c.target_id = o.target_id
                and c.aspect = o.aspect
        )
)

select
    q.target_type,
    q.target_id,
    count(*)::bigint as strong_positive_signals,
    count(*) filter (where q.source = 'manual')::bigint as manual_signals,
    count(distinct q.source)::bigint as distinct_sources,
    list(distinct q.source order by q.source) as sources,
    list(distinct q.aspect order by q.aspect) as aspects,
    max(q.effective_strength)::double as max_effective_strength,
    min(q.effective_strength)::double as min_effective_strength,
    max(q.created_at) as last_signal_at,
    bool_or(c.target_id is not null) as in_conflict
from qualifying as q
left join marts.signal_conflicts as c on c.target_type = q.target_type and c.target_id = q.target_id
group by q.target_type, q.target_id
having count(*) >= 2 and count(*) filter (where q.source = 'manual') >= 1
order by strong_positive_signals desc, q.target_type, q.target_id
