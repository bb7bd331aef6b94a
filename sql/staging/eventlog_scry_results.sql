-- staging.scry_results: one row per returned result.
-- doc_kind: 'session' (a session id, with or without adapter suffix), 'persona' ('persona:...'),
-- 'other' (empty, a URI-like 'scheme:...' id, a bare commit sha, a code fact without a path),
-- else 'path'. doc_path (paths only) is the repository path the result names: leading './'
-- removed, a code-fact suffix ('::fn:main') removed, e.g. './src/x.rs::fn:main' -> 'src/x.rs'.
-- rank is the logged rank (1-based) when it is an integer, else the result's position in the list.
with results as (
    select
        coalesce(e.data ->> 'query_id', e.source_id) as query_id,
        r.i as result_index,
        r.result
    from staging.eventlog as e,
        unnest(json_extract(e.data, '$.results[*]')) with ordinality as r(result, i)
    where e.event_type = 'scry.query'
),

fields as (
    select
        query_id,
        result_index::bigint as result_index,
        -- an integral rank only (a cast alone rounds 1.5 to 2), else the position
        coalesce(
            case when regexp_full_match(result ->> 'rank', '-?[0-9]+(\.0*)?') then try_cast(result ->> 'rank' as bigint) end,
            result_index
        )::bigint as rank,
        try_cast(result ->> 'score' as double) as score,
        result ->> 'doc_id' as doc_id,
        trim(result ->> 'doc_id') as d,
        result ->> 'event_type' as result_type,
        result ->> 'source_repo' as source_repo,
        try_cast(result ->> 'weight' as double) as weight
    from results
),

classified as (
    select
        *,
        regexp_replace(split_part(d, '::', 1), '^(\./)+', '') as stripped
    from fields
),

kinds as (
    select
        *,
        case
            when d is null or d = '' then 'other'
            when regexp_matches(d, '^\d{8}-\d{6}(-[A-Za-z][A-Za-z0-9_]*)?$') then 'session'
            when starts_with(d, 'persona:') then 'persona'
            when regexp_matches(d, '^[A-Za-z][A-Za-z0-9+.-]*:[^:]') then 'other'
            when regexp_matches(d, '^[0-9a-f]{40}$') then 'other'
            when stripped = '' then 'other'
            else 'path'
        end as doc_kind
    from classified
)

select
    query_id,
    rank,
    score,
    doc_id,
    case when doc_kind = 'path' then stripped end as doc_path,
    doc_kind,
    result_type,
    source_repo,
    weight,
    result_index
from kinds
