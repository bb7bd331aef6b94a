-- marts.missed_files: files touched in a session that had counted queries, but that no query
-- of that session retrieved; sessions_missed = in how many such sessions.
with queried_sessions as (
    select distinct session_id from marts.retrieval_query_metrics
),

retrieved as (
    select distinct session_id, doc_path from marts.retrieval_judgements
)

select
    sf.file_path,
    count(*)::bigint as sessions_missed,
    max(sf.last_committed_at) as last_missed_at
from staging.session_files as sf
inner join queried_sessions as qs using (session_id)
left join retrieved as r on r.session_id = sf.session_id and r.doc_path = sf.file_path
where r.doc_path is null
group by sf.file_path
order by sessions_missed desc, sf.file_path
