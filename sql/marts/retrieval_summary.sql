-- marts.retrieval_summary: one row, the headline of `flywheel eval --feedback`.
-- queries: counted queries (their session has >= 1 commit); retrieved / hits: files retrieved
-- and subsequently committed in the session; precision = hits / retrieved (micro);
-- mean_recall, mrr, mean_ndcg: means over counted queries (NULLs skipped), summed in query_id
-- order so the result is the same to the last bit on every run.
-- commits / linked_commits: every commit, and those that belong to a session (SPEC 4.2).
-- all_queries: every logged query; non_path_results: results of counted queries that are not
-- files (session ids, persona:, other), counted apart and never as misses.
with metrics as (
    select
        count(*)::bigint as queries,
        count(distinct session_id)::bigint as sessions,
        coalesce(sum(retrieved), 0)::bigint as retrieved,
        coalesce(sum(hits), 0)::bigint as hits,
        sum(hits)::double / nullif(sum(retrieved), 0) as precision,
        avg(recall order by query_id)::double as mean_recall,
        avg(reciprocal_rank order by query_id)::double as mrr,
        avg(ndcg order by query_id)::double as mean_ndcg
    from marts.retrieval_query_metrics
),

non_paths as (
    select
        count(*)::bigint as non_path_results,
        count(*) filter (where r.doc_kind = 'session')::bigint as session_results,
        count(*) filter (where r.doc_kind = 'persona')::bigint as persona_results,
        count(*) filter (where r.doc_kind = 'other')::bigint as other_results
    from staging.scry_results as r
    inner join marts.retrieval_query_metrics as m using (query_id)
    where r.doc_kind <> 'path'
),

logged as (
    select
        count(*)::bigint as all_queries,
        count(*) filter (where session_id is null)::bigint as queries_without_session
    from staging.scry_queries
),

commits as (
    select
        (select count(*) from staging.git_commits)::bigint as commits,
        (select count(*) from staging.commit_sessions)::bigint as linked_commits
)

select m.*, n.*, l.*, c.*
from metrics as m, non_paths as n, logged as l, commits as c
