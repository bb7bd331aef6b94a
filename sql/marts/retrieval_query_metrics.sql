-- Per counted query: precision = hits / retrieved, recall = distinct hit files / touched files,
-- reciprocal rank of the first hit, nDCG@k (binary gains, k = paths retrieved).
with counted as (
    select q.query_id, q.session_id, q.mode
    from staging.scry_queries as q
    where q.session_id in (select session_id from staging.session_files)
),

touched as (
    select session_id, count(*) as touched
    from staging.session_files
    group by session_id
),

per_query as (
    select
        query_id,
        count(*) as retrieved,
        count_if(hit) as hits,
        min(rank) filter (where hit) as first_hit_rank,
        sum(case when hit then 1 / log2(rank + 1) else 0 end) as dcg
    from marts.retrieval_judgements
    group by query_id
)

select
    c.query_id,
    c.session_id,
    c.mode,
    coalesce(p.retrieved, 0)::bigint as retrieved,
    coalesce(p.hits, 0)::bigint as hits,
    t.touched::bigint as touched,
    p.hits::double / nullif(p.retrieved, 0) as precision,
    coalesce(p.hits, 0)::double / t.touched as recall,
    coalesce(1.0 / p.first_hit_rank, 0.0) as reciprocal_rank,
    case when p.retrieved > 0 then p.dcg / list_sum(list_transform(
        range(1, least(t.touched, p.retrieved) + 1), lambda i: 1 / log2(i + 1)))
    end as ndcg
from counted as c
inner join touched as t using (session_id)
left join per_query as p using (query_id)
