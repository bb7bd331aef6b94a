-- Explicit signals about queries: results used (scry.use) and ratings (scry.feedback).
with uses as (
    select query_id, count(*)::bigint as uses from staging.scry_use group by query_id
),

ratings as (
    select
        query_id,
        count_if(signal = 'good')::bigint as rated_good,
        count_if(signal = 'bad')::bigint as rated_bad
    from staging.scry_feedback
    group by query_id
)

select
    q.query_id,
    q.session_id,
    q.mode,
    coalesce(u.uses, 0)::bigint as uses,
    coalesce(r.rated_good, 0)::bigint as rated_good,
    coalesce(r.rated_bad, 0)::bigint as rated_bad
from staging.scry_queries as q
left join uses as u using (query_id)
left join ratings as r using (query_id)
