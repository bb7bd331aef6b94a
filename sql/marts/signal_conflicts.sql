-- marts.signal_conflicts: targets whose CURRENT opinions (one per aspect) include both a
-- positive and a negative one, e.g. relevance 'good' but accuracy 'incorrect'.
select
    target_type,
    target_id,
    count(*) filter (where polarity = 'positive')::bigint as positive_opinions,
    count(*) filter (where polarity = 'negative')::bigint as negative_opinions,
    count(*) filter (where polarity = 'neutral')::bigint as neutral_opinions,
    list(aspect || ':' || signal order by aspect) as opinions,
    max(created_at) as last_signal_at
from marts.signal_opinions
where is_current
group by target_type, target_id
having count(*) filter (where polarity = 'positive') > 0
    and count(*) filter (where polarity = 'negative') > 0
order by target_type, target_id
