-- staging.commit_sessions: one row per commit that belongs to a session (SPEC 4.2):
-- 1. the session id in the commit's own data (adapter suffix stripped) -> linked_by 'commit_data';
-- 2. else the session whose tag window holds the commit's author instant, compared as UTC
--    instants with inclusive bounds (started_at <= committed_at <= window_end); where several
--    windows hold it the most recently started wins (then the greater session id)
--    -> linked_by 'tag_window', window_started_at = that window's start.
-- Commits in no session are left out (staging.git_commits has them all; the number linked is
-- in marts.retrieval_summary). windows_holding: how many tag windows hold the commit's instant.
with holding as (
    select
        c.sha,
        w.session_id,
        w.started_at,
        row_number() over (partition by c.sha order by w.started_at desc, w.session_id desc) as pick,
        count(*) over (partition by c.sha) as windows_holding
    from staging.git_commits as c
    inner join staging.session_windows as w
        on c.committed_at >= w.started_at and c.committed_at <= w.window_end
),

linked as (
    select
        c.sha,
        c.committed_at,
        coalesce(c.session_id, h.session_id) as session_id,
        case when c.session_id is not null then 'commit_data' else 'tag_window' end as linked_by,
        case when c.session_id is null then h.started_at end as window_started_at,
        coalesce(h.windows_holding, 0)::bigint as windows_holding
    from staging.git_commits as c
    left join holding as h on h.sha = c.sha and h.pick = 1
)

select *
from linked
where session_id is not null
