-- staging.session_files: a session's touched files = ALL files of ALL its commits
-- (renames resolved to the new path).
select
    cs.session_id,
    cf.file_path,
    count(distinct cs.sha)::bigint as commits,
    min(cs.committed_at) as first_committed_at,
    max(cs.committed_at) as last_committed_at
from staging.commit_sessions as cs
inner join staging.commit_files as cf using (sha)
group by cs.session_id, cf.file_path
