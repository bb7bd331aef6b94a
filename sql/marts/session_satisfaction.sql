-- End-of-session satisfaction by day (UTC date of the rating), source and modality.
--
-- Per session (session_id_opaque) only the latest rating counts: greatest by recorded_at, then
-- insertion order (line_number = the store's insertion_order), then file path. 'skip' is an
-- explicit non-rating: counted in sessions and skipped, never in satisfaction.
-- satisfaction = positive / (positive + negative), NULL when nobody rated.
-- modality is NULL for old records that did not carry it.
-- Retention: only ratings recorded at or after ($as_of 00:00 UTC - $retention_days days) are
-- used ($retention_days NULL = keep all). No ids are published: the table is aggregates only.
-- matched_sessions: sessions whose opaque id is sha256(session_id) of some interaction.
with ratings as (
    select session_id_opaque, label, source, modality, recorded_at, line_number, path
    from staging.session_ratings
    where $retention_days is null
        or recorded_at >= timezone('UTC', $as_of::date::timestamp - to_days($retention_days::integer))
),

latest as (
    select *
    from ratings
    qualify row_number() over (
        partition by session_id_opaque
        order by recorded_at desc, line_number desc, path desc
    ) = 1
),

interaction_sessions as (
    select distinct sha256(session_id) as session_id_opaque
    from staging.interactions
)

select
    (l.recorded_at at time zone 'UTC')::date as day,
    l.source,
    l.modality,
    count(*) as sessions,
    count(*) filter (where l.label = 'positive') as positive,
    count(*) filter (where l.label = 'negative') as negative,
    count(*) filter (where l.label = 'skip') as skipped,
    count(*) filter (where l.label = 'positive')::double
        / nullif(count(*) filter (where l.label in ('positive', 'negative')), 0) as satisfaction,
    count(s.session_id_opaque) as matched_sessions
from latest as l
left join interaction_sessions as s using (session_id_opaque)
group by all
order by day, source, modality nulls first
