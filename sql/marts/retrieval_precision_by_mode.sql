select
    mode,
    count(*)::bigint as queries,
    sum(retrieved)::bigint as retrieved,
    sum(hits)::bigint as hits,
    sum(hits)::double / nullif(sum(retrieved), 0) as precision,
    avg(recall) as mean_recall,
    avg(reciprocal_rank) as mrr
from marts.retrieval_query_metrics
group by mode
order by mode
