select
    data ->> 'query_id' as query_id,
    data ->> 'signal' as signal,
    data ->> 'comment' as comment,
    nullif(regexp_extract(data ->> 'session_id', '^(\d{8}-\d{6})', 1), '') as session_id,
    "timestamp" as rated_at
from staging.eventlog
where event_type = 'scry.feedback'
