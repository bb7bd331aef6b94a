-- Targets whose current opinions (one per aspect) include both a positive and a negative one.
select
    target_type,
    target_id,
    count_if(polarity = 'positive')::bigint as positive_opinions,
    count_if(polarity = 'negative')::bigint as negative_opinions,
    list(aspect || ':' || signal order by aspect) as opinions
from marts.signal_opinions
where is_current
group by target_type, target_id
having count_if(polarity = 'positive') > 0 and count_if(polarity = 'negative') > 0
order by target_type, target_id
