-- staging.git_commits: one row per commit sha (staging.eventlog already keeps the latest
-- re-scrape of each sha: its identity is 'git.commit:' || sha).
-- committed_at is the author date as a real UTC instant (the text keeps its offset).
-- session_id: the commit's own session id with an adapter suffix stripped
-- (20260116-105801-claude -> 20260116-105801); an id of any other shape is kept trimmed, so
-- both sides of a join normalise the same way (see eventlog_scry_queries.sql).
with commits as (
    select
        e.source_id as sha,
        e."timestamp" as committed_at,
        e.timestamp_text as committed_at_text,
        e.data ->> 'message' as message,
        e.data ->> 'author_name' as author_name,
        e.data ->> 'author_email' as author_email,
        e.data ->> 'session_id' as session_id_raw,
        coalesce(json_array_length(json_extract(e.data, '$.files')), 0)::bigint as n_files,
        e.seq,
        e.source_file,
        e.path,
        e.line_number
    from staging.eventlog as e
    where e.event_type = 'git.commit'
)

select
    sha,
    committed_at,
    committed_at_text,
    message,
    author_name,
    author_email,
    session_id_raw,
    case
        when regexp_matches(trim(session_id_raw), '^\d{8}-\d{6}(-[A-Za-z][A-Za-z0-9_]*)?$')
            then left(trim(session_id_raw), 15)
        else nullif(trim(session_id_raw), '')
    end as session_id,
    n_files,
    seq,
    source_file,
    path,
    line_number
from commits
