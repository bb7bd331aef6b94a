select
    data ->> 'query_id' as query_id,
    data ->> 'result_used' as result_used,
    (data ->> 'rank')::bigint as rank,
    nullif(regexp_extract(data ->> 'session_id', '^(\d{8}-\d{6})', 1), '') as session_id,
    "timestamp" as used_at
from staging.eventlog
where event_type = 'scry.use'
