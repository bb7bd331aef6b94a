-- One row per commit (staging.eventlog already keeps the latest re-scrape of each sha).
-- A commit's own session id loses its adapter suffix: 20260116-105801-claude -> 20260116-105801.
with commits as (
    select
        source_id as sha,
        "timestamp" as committed_at,
        timestamp_text as committed_at_text,
        data ->> 'message' as message,
        data ->> 'author_name' as author_name,
        data ->> 'author_email' as author_email,
        data ->> 'session_id' as session_id_raw,
        seq,
        path,
        line_number
    from staging.eventlog
    where event_type = 'git.commit'
)

select
    *,
    nullif(regexp_extract(session_id_raw, '^(\d{8}-\d{6})', 1), '') as session_id
from commits
