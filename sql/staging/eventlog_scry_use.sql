-- staging.scry_use: one row per scry.use event (a result the user went on to use).
-- used_doc_path: result_used normalised like scry_results.doc_path when it names a path.
select
    e.data ->> 'query_id' as query_id,
    e.data ->> 'result_used' as result_used,
    case
        when regexp_matches(trim(e.data ->> 'result_used'), '^\d{8}-\d{6}(-[A-Za-z][A-Za-z0-9_]*)?$') then null
        when regexp_matches(trim(e.data ->> 'result_used'), '^[A-Za-z][A-Za-z0-9+.-]*:[^:]') then null
        else nullif(regexp_replace(split_part(trim(e.data ->> 'result_used'), '::', 1), '^(\./)+', ''), '')
    end as used_doc_path,
    -- an integral rank only: a cast alone rounds 1.5 to 2
    case when regexp_full_match(e.data ->> 'rank', '-?[0-9]+(\.0*)?') then try_cast(e.data ->> 'rank' as bigint) end as rank,
    case
        when regexp_matches(trim(e.data ->> 'session_id'), '^\d{8}-\d{6}(-[A-Za-z][A-Za-z0-9_]*)?$')
            then left(trim(e.data ->> 'session_id'), 15)
        else nullif(trim(e.data ->> 'session_id'), '')
    end as session_id,
    e."timestamp" as used_at,
    e.timestamp_text as used_at_text,
    e.seq,
    e.path,
    e.line_number
from staging.eventlog as e
where e.event_type = 'scry.use'
