-- staging.scry_feedback: one row per scry.feedback event (an explicit good|bad rating of a query).
select
    e.data ->> 'query_id' as query_id,
    e.data ->> 'signal' as signal,
    e.data ->> 'comment' as comment,
    case
        when regexp_matches(trim(e.data ->> 'session_id'), '^\d{8}-\d{6}(-[A-Za-z][A-Za-z0-9_]*)?$')
            then left(trim(e.data ->> 'session_id'), 15)
        else nullif(trim(e.data ->> 'session_id'), '')
    end as session_id,
    e."timestamp" as rated_at,
    e.timestamp_text as rated_at_text,
    e.seq,
    e.path,
    e.line_number
from staging.eventlog as e
where e.event_type = 'scry.feedback'
