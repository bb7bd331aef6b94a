-- One row per query (v2: query_id; v1: source_id, the query's timestamp).
select
    coalesce(data ->> 'query_id', source_id) as query_id,
    case when data ->> 'query_id' is not null then 2 else 1 end as version,
    "timestamp" as queried_at,
    data ->> 'query' as query,
    data ->> 'mode' as mode,
    nullif(regexp_extract(data ->> 'session_id', '^(\d{8}-\d{6})', 1), '') as session_id,
    data -> 'routing' as routing,
    path,
    line_number
from staging.eventlog
where event_type = 'scry.query'
