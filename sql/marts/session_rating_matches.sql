-- One row: how well session ratings join to interactions through
-- sha256(interaction.session_id) = session_id_opaque (SPEC 4.1), over the same rated sessions
-- as marts.session_satisfaction (latest rating per session, within retention).
--   rated_sessions             sessions with a latest rating (skip included)
--   matched_sessions           of those, sessions with at least one interaction
--   match_rate                 matched_sessions / rated_sessions (NULL when no ratings)
--   interaction_sessions       distinct session ids among interactions
--   interaction_sessions_rated interaction sessions that have a rating (= matched_sessions)
--   interaction_rating_rate    matched_sessions / interaction_sessions
--   matched_interactions       interactions belonging to a rated session
with ratings as (
    select session_id_opaque, recorded_at
    from staging.session_ratings
    where $retention_days is null
        or recorded_at >= timezone('UTC', $as_of::date::timestamp - to_days($retention_days::integer))
),

rated as (
    select distinct session_id_opaque from ratings
),

interaction_sessions as (
    select sha256(session_id) as session_id_opaque, count(*) as interactions
    from staging.interactions
    group by all
),

matched as (
    select i.session_id_opaque, i.interactions
    from interaction_sessions as i
    join rated as r using (session_id_opaque)
)

select
    (select count(*) from rated) as rated_sessions,
    (select count(*) from matched) as matched_sessions,
    (select count(*) from matched)::double / nullif((select count(*) from rated), 0) as match_rate,
    (select count(*) from interaction_sessions) as interaction_sessions,
    (select count(*) from matched)::double
        / nullif((select count(*) from interaction_sessions), 0) as interaction_rating_rate,
    coalesce((select sum(interactions) from matched), 0)::bigint as matched_interactions
