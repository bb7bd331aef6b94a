-- marts.retrieval_judgements: one row per (counted query, retrieved file), the file at the best
-- rank the query gave it. A query counts when its session has at least one commit.
-- Files are sets per query (the seed design: hit = retrieved ∩ touched): several code facts of
-- one file are one retrieved file. Only path results count; session ids and persona: ids are
-- counted apart (marts.retrieval_summary.non_path_results), not as misses.
-- hit: the normalised path is EXACTLY one of the session's touched files (the original tool's
-- LIKE matching made '_' and '%' wildcards and let substrings match).
with sessions_with_commits as (
    select distinct session_id
    from staging.commit_sessions
),

counted as (
    select q.query_id, q.session_id, q.mode, q.queried_at
    from staging.scry_queries as q
    inner join sessions_with_commits as s using (session_id)
),

retrieved as (
    select r.query_id, r.doc_path, min(r.rank) as rank, count(*) as results
    from staging.scry_results as r
    inner join counted as c using (query_id)
    where r.doc_kind = 'path'
    group by r.query_id, r.doc_path
)

select
    c.query_id,
    c.session_id,
    c.mode,
    c.queried_at,
    r.doc_path,
    r.rank::bigint as rank,
    r.results::bigint as results,
    sf.file_path is not null as hit
from retrieved as r
inner join counted as c using (query_id)
left join staging.session_files as sf on sf.session_id = c.session_id and sf.file_path = r.doc_path
