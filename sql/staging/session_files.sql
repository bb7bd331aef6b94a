-- Every file a session touched: all files of all its commits.
select cs.session_id, cf.file_path, count(distinct cs.sha) as commits
from staging.commit_sessions as cs
inner join staging.commit_files as cf using (sha)
group by all
