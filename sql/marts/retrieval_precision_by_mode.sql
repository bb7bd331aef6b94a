-- marts.retrieval_precision_by_mode: the summary's figures per query mode (hybrid, graph, ...).
select
    mode,
    count(*)::bigint as queries,
    sum(retrieved)::bigint as retrieved,
    sum(hits)::bigint as hits,
    sum(hits)::double / nullif(sum(retrieved), 0) as precision,
    avg(recall order by query_id)::double as mean_recall,
    avg(reciprocal_rank order by query_id)::double as mrr,
    avg(ndcg order by query_id)::double as mean_ndcg
from marts.retrieval_query_metrics
group by mode
order by mode nulls last
