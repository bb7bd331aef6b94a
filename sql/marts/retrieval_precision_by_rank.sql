select
    rank,
    count(*)::bigint as retrieved,
    count_if(hit)::bigint as hits,
    count_if(hit)::double / count(*) as precision
from marts.retrieval_judgements
group by rank
order by rank
