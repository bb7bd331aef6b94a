-- Files committed in a session that had counted queries, but never retrieved in that session.
with queried_sessions as (
    select distinct session_id from marts.retrieval_judgements
    union
    select distinct session_id from marts.retrieval_query_metrics
),

retrieved as (
    select distinct session_id, doc_path from marts.retrieval_judgements
)

select sf.file_path, count(*)::bigint as sessions_missed
from staging.session_files as sf
inner join queried_sessions using (session_id)
left join retrieved as r on r.session_id = sf.session_id and r.doc_path = sf.file_path
where r.doc_path is null
group by sf.file_path
order by sessions_missed desc, sf.file_path
