-- marts.scry_usage: one row per query that was logged, used or rated: results used (scry.use)
-- and explicit ratings (scry.feedback). Uses or ratings whose query was never logged are kept
-- (query_logged = false) rather than dropped.
with uses as (
    select
        query_id,
        count(*)::bigint as uses,
        count(distinct result_used)::bigint as results_used,
        min(rank)::bigint as best_rank_used
    from staging.scry_use
    group by query_id
),

ratings as (
    select
        query_id,
        count(*) filter (where signal = 'good')::bigint as rated_good,
        count(*) filter (where signal = 'bad')::bigint as rated_bad,
        arg_max(signal, rated_at) as last_rating
    from staging.scry_feedback
    group by query_id
),

ids as (
    -- events without a query_id name no query; they stay visible in staging.scry_use/_feedback
    select query_id
    from (
        select query_id from staging.scry_queries
        union
        select query_id from uses
        union
        select query_id from ratings
    )
    where query_id is not null
)

select
    i.query_id,
    q.query_id is not null as query_logged,
    q.session_id,
    q.mode,
    q.queried_at,
    coalesce(u.uses, 0)::bigint as uses,
    coalesce(u.results_used, 0)::bigint as results_used,
    u.best_rank_used,
    coalesce(r.rated_good, 0)::bigint as rated_good,
    coalesce(r.rated_bad, 0)::bigint as rated_bad,
    r.last_rating
from ids as i
left join staging.scry_queries as q using (query_id)
left join uses as u using (query_id)
left join ratings as r using (query_id)
order by q.queried_at nulls last, i.query_id
