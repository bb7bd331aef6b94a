-- One row per (counted query, retrieved path) at its best rank, and whether it was a hit: the
-- path is among the files its session committed (exact match on the normalised path — the
-- original tool's LIKE '%id%' made '_' a wildcard and matched substrings). Only queries whose
-- session has at least one commit count.
with counted as (
    select q.query_id, q.session_id, q.mode
    from staging.scry_queries as q
    where q.session_id in (select session_id from staging.session_files)
),

retrieved as (
    select r.query_id, r.doc_path, min(r.rank) as rank
    from staging.scry_results as r
    where r.doc_kind = 'path' and r.query_id in (select query_id from counted)
    group by all
)

select
    c.query_id,
    c.session_id,
    c.mode,
    r.rank,
    r.doc_path,
    sf.file_path is not null as hit
from retrieved as r
inner join counted as c using (query_id)
left join staging.session_files as sf on sf.session_id = c.session_id and sf.file_path = r.doc_path
