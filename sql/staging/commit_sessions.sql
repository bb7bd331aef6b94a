-- Which session each commit belongs to: its own session id if it carries one, else the tag
-- window holding its instant (bounds inclusive); when several windows hold it, the most
-- recently started session wins.
with direct as (
    select sha, session_id, 'commit_data' as linked_by
    from staging.git_commits
    where session_id is not null
),

windowed as (
    select
        c.sha,
        w.session_id,
        'tag_window' as linked_by,
        row_number() over (partition by c.sha order by w.started_at desc, w.session_id desc) as pick
    from staging.git_commits as c
    inner join staging.session_windows as w
        on c.committed_at between w.started_at and w.window_end
    where c.session_id is null
)

select sha, session_id, linked_by from direct
union all
select sha, session_id, linked_by from windowed where pick = 1
