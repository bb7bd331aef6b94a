-- marts.retrieval_precision_by_rank: per logged rank, how many retrieved files of counted
-- queries sat there (a file at its best rank in its query) and how many were committed.
select
    rank,
    count(*)::bigint as retrieved,
    count(*) filter (where hit)::bigint as hits,
    (count(*) filter (where hit))::double / count(*) as precision
from marts.retrieval_judgements
group by rank
order by rank
