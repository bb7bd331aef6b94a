-- One row: the headline figures of the feedback report.
with metrics as (
    select
        count(*)::bigint as queries,
        coalesce(sum(retrieved), 0)::bigint as retrieved,
        coalesce(sum(hits), 0)::bigint as hits,
        sum(hits)::double / nullif(sum(retrieved), 0) as precision,
        avg(recall) as mean_recall,
        avg(reciprocal_rank) as mrr,
        avg(ndcg) as mean_ndcg
    from marts.retrieval_query_metrics
),

non_paths as (
    select count(*)::bigint as non_path_results
    from staging.scry_results
    where doc_kind <> 'path'
)

select
    m.*,
    (select count(*) from staging.scry_queries)::bigint as all_queries,
    n.non_path_results
from metrics as m, non_paths as n
