-- Session windows from session-<id>[-adapter]-start|end tags, compared as UTC instants.
-- A session without an end tag claims commits for 24 hours after its start.
with tags as (
    select
        regexp_extract(source_id, '^session-(\d{8}-\d{6})', 1) as session_id,
        regexp_extract(source_id, '-(start|end)$', 1) as edge,
        "timestamp" as tagged_at
    from staging.eventlog
    where event_type = 'git.tag' and regexp_matches(source_id, '^session-\d{8}-\d{6}(-[A-Za-z0-9_]+)?-(start|end)$')
),

starts as (
    select session_id, min(tagged_at) as started_at
    from tags
    where edge = 'start'
    group by session_id
),

ends as (
    select s.session_id, min(t.tagged_at) as ended_at
    from starts as s
    inner join tags as t on t.session_id = s.session_id and t.edge = 'end' and t.tagged_at >= s.started_at
    group by s.session_id
)

select
    s.session_id,
    s.started_at,
    e.ended_at,
    coalesce(e.ended_at, s.started_at + interval 24 hours) as window_end
from starts as s
left join ends as e using (session_id)
