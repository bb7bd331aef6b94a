-- marts.retrieval_query_metrics: one row per counted query (its session has >= 1 commit).
-- retrieved = distinct files among its path results; hits = those its session touched;
-- touched = files of all the session's commits; precision = hits / retrieved (NULL when
-- nothing was retrieved); recall = hits / touched (NULL when the commits touched no file);
-- reciprocal_rank = 1 / logged rank of the first hit (0 without a hit);
-- ndcg = nDCG@k, k = retrieved, binary gains, discount 1 / log2(rank + 1) at the logged rank;
-- the ideal puts min(touched, k) hits at ranks 1.. (NULL when nothing was retrieved).
with sessions_with_commits as (
    select session_id, count(*) as commits
    from staging.commit_sessions
    group by session_id
),

touched as (
    select s.session_id, count(sf.file_path) as touched
    from sessions_with_commits as s
    left join staging.session_files as sf using (session_id)
    group by s.session_id
),

counted as (
    select q.query_id, q.session_id, q.mode, q.queried_at
    from staging.scry_queries as q
    inner join sessions_with_commits as s using (session_id)
),

per_query as (
    select
        query_id,
        count(*) as retrieved,
        count(*) filter (where hit) as hits,
        min(rank) filter (where hit) as first_hit_rank,
        -- ordered: a float sum must not depend on the order rows arrive in (stable published hashes)
        sum(case when hit then 1.0 / log2(rank + 1) else 0.0 end order by rank, doc_path) as dcg
    from marts.retrieval_judgements
    group by query_id
),

joined as (
    select
        c.query_id,
        c.session_id,
        c.mode,
        c.queried_at,
        coalesce(p.retrieved, 0)::bigint as retrieved,
        coalesce(p.hits, 0)::bigint as hits,
        t.touched::bigint as touched,
        p.first_hit_rank,
        p.dcg
    from counted as c
    inner join touched as t using (session_id)
    left join per_query as p using (query_id)
)

select
    query_id,
    session_id,
    mode,
    queried_at,
    retrieved,
    hits,
    touched,
    hits::double / nullif(retrieved, 0) as precision,
    hits::double / nullif(touched, 0) as recall,
    coalesce(1.0 / first_hit_rank, 0.0)::double as reciprocal_rank,
    case
        when retrieved = 0 then null
        when hits = 0 then 0.0
        else dcg / list_sum(list_transform(range(1, least(touched, retrieved) + 1), lambda i: 1.0 / log2(i + 1)))
    end::double as ndcg,
    first_hit_rank::bigint as first_hit_rank
from joined
