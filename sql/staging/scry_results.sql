-- One row per returned result. doc_path is the repository path the result names: "./" and a
-- code-fact suffix ("::fn:main") are stripped. Session ids and persona: ids are not paths.
with results as (
    select
        coalesce(e.data ->> 'query_id', e.source_id) as query_id,
        unnest(from_json(
            e.data -> 'results',
            '[{"doc_id": "VARCHAR", "score": "DOUBLE", "rank": "BIGINT", "event_type": "VARCHAR", "source_repo": "VARCHAR", "weight": "DOUBLE"}]'
        )) as r
    from staging.eventlog as e
    where e.event_type = 'scry.query'
),

classified as (
    select
        query_id,
        r.rank as rank,
        r.score as score,
        r.doc_id as doc_id,
        r.event_type as result_type,
        r.source_repo as source_repo,
        r.weight as weight,
        case
            when regexp_matches(r.doc_id, '^\d{8}-\d{6}(-[A-Za-z0-9_]+)?$') then 'session'
            when starts_with(r.doc_id, 'persona:') then 'persona'
            when r.doc_id is null or r.doc_id = '' then 'other'
            else 'path'
        end as doc_kind
    from results
)

select
    *,
    case when doc_kind = 'path' then split_part(regexp_replace(doc_id, '^\./', ''), '::', 1) end as doc_path
from classified
