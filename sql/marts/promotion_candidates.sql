-- Targets with at least two positive signals of effective strength >= 0.7, at least one of them
-- manual. One signal alone never promotes, nor do automated sources without a manual one.
select
    target_type,
    target_id,
    count(*)::bigint as strong_positive_signals,
    count_if(source = 'manual')::bigint as manual_signals,
    list(distinct source order by source) as sources,
    max(effective_strength) as max_effective_strength
from marts.signal_opinions
where polarity = 'positive' and effective_strength >= 0.7
group by target_type, target_id
having count(*) >= 2 and count_if(source = 'manual') >= 1
order by strong_positive_signals desc, target_type, target_id
