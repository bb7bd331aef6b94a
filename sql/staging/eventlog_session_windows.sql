-- staging.session_windows: one row per session that has a start tag, from git.tag events
-- named session-<id>[-<adapter>]-start|end (adapter suffix stripped from the id).
-- * Times are the tag events' timestamps: real UTC instants, never compared as text.
-- * A tag name scraped more than once counts once (its latest scrape: seq, then position).
-- * Several start tags for one id (e.g. with and without an adapter): the earliest starts it.
-- * ended_at: the earliest end tag at or after started_at; end tags before the start are
--   ignored (counted in end_tags_ignored). start == end is a valid zero-length window.
-- * No usable end tag: the session claims 24 hours after its start (window_end).
-- * Orphan end tags (no start tag for that id) open no window.
-- Bounds are inclusive: a commit at exactly started_at or window_end is inside.
with tags as (
    select
        coalesce(e.data ->> 'tag_name', e.source_id) as tag_name,
        e."timestamp" as tagged_at,
        e.timestamp_text as tagged_at_text,
        e.seq,
        e.path,
        e.line_number
    from staging.eventlog as e
    where e.event_type = 'git.tag'
),

session_tags as (
    select
        regexp_extract(tag_name, '^session-(\d{8}-\d{6})', 1) as session_id,
        nullif(regexp_extract(tag_name, '^session-\d{8}-\d{6}-([A-Za-z][A-Za-z0-9_]*)-(start|end)$', 1), '') as adapter,
        regexp_extract(tag_name, '-(start|end)$', 1) as edge,
        tagged_at,
        tagged_at_text
    from tags
    where regexp_matches(tag_name, '^session-\d{8}-\d{6}(-[A-Za-z][A-Za-z0-9_]*)?-(start|end)$')
    qualify row_number() over (
        partition by tag_name order by seq desc nulls last, path desc, line_number desc
    ) = 1
),

starts as (
    select
        session_id,
        min(tagged_at) as started_at,
        arg_min(tagged_at_text, tagged_at) as started_at_text,
        arg_min_null(adapter, tagged_at) as adapter,
        count(*)::bigint as start_tags
    from session_tags
    where edge = 'start'
    group by session_id
),

ends as (
    select
        s.session_id,
        min(t.tagged_at) filter (where t.tagged_at >= s.started_at) as ended_at,
        arg_min(t.tagged_at_text, t.tagged_at) filter (where t.tagged_at >= s.started_at) as ended_at_text,
        count(*)::bigint as end_tags,
        count(*) filter (where t.tagged_at < s.started_at)::bigint as end_tags_ignored
    from starts as s
    inner join session_tags as t on t.session_id = s.session_id and t.edge = 'end'
    group by s.session_id
)

select
    s.session_id,
    s.adapter,
    s.started_at,
    s.started_at_text,
    e.ended_at,
    e.ended_at_text,
    coalesce(e.ended_at, s.started_at + interval 24 hours) as window_end,
    e.ended_at is null as is_open,
    s.start_tags,
    coalesce(e.end_tags, 0)::bigint as end_tags,
    coalesce(e.end_tags_ignored, 0)::bigint as end_tags_ignored
from starts as s
left join ends as e using (session_id)
