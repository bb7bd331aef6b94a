-- staging.scry_queries: one row per query (staging.eventlog's identity for scry.query is the
-- v2 query_id, else the v1 source_id, which is the query's timestamp).
-- session_id is normalised like the commit side (adapter suffix stripped).
select
    coalesce(e.data ->> 'query_id', e.source_id) as query_id,
    case when e.data ->> 'query_id' is not null then 2 else 1 end::integer as version,
    e."timestamp" as queried_at,
    e.timestamp_text as queried_at_text,
    e.data ->> 'query' as query,
    e.data ->> 'mode' as mode,
    e.data ->> 'session_id' as session_id_raw,
    case
        when regexp_matches(trim(e.data ->> 'session_id'), '^\d{8}-\d{6}(-[A-Za-z][A-Za-z0-9_]*)?$')
            then left(trim(e.data ->> 'session_id'), 15)
        else nullif(trim(e.data ->> 'session_id'), '')
    end as session_id,
    e.data -> 'routing' as routing,
    coalesce(json_array_length(json_extract(e.data, '$.results')), 0)::bigint as n_results,
    e.seq,
    e.source_file,
    e.path,
    e.line_number
from staging.eventlog as e
where e.event_type = 'scry.query'
