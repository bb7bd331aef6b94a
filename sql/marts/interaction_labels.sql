-- One row per interaction with at least one feedback event (SPEC 4.1).
--
-- Timeline of an interaction = its in-row user_feedback (unless 'none'; from the WINNING
-- version in staging.interactions, at the interaction's timestamp, label_source 'inline')
-- + every sidecar event in raw.feedback (all versions; missing was_edited => false, missing
-- source => 'manual') not stamped beyond $cutoff (NULL: none is), the instant beyond which
-- staging.feedback's drop step excludes an event: a time years ahead would win for good.
-- Byte-identical copies of one physical line (same path and offset) count once.
--
-- The final label is the greatest event by the total order
--   (labeled_at, kind, path, byte_offset, line_number, label, label_source, was_edited)
-- where kind is 0 for the inline event and 1 for sidecar events: sidecars are only written
-- for interactions already flushed to disk, so a sidecar at the same instant as the inline
-- feedback came later and wins. Sidecars at the same instant: the later file path, then the
-- later line, wins. The last three terms only break ties between different rows read from
-- the same position (a rewritten file), so the result never depends on read order.
-- was_edited comes from the winning event. Sidecar rows whose interaction has not arrived yet
-- are left out here (see marts.orphan_feedback); they join as soon as their interaction is
-- ingested (its staging row is new, so it is touched).
-- fw_label_interactions: staging.interactions (a temp view), or the staging rows of the
-- interactions in fw_touched_interactions (an incremental build deletes and re-inserts their
-- rows: a label depends only on its own interaction's events).
with interactions as (
    select id, "timestamp", user_feedback, was_edited, path, byte_offset, line_number
    from fw_label_interactions
),

inline_events as (
    select
        id as interaction_id,
        user_feedback as label,
        was_edited,
        'inline' as label_source,
        "timestamp" as labeled_at,
        0 as kind,
        path,
        byte_offset,
        line_number
    from interactions
    where user_feedback <> 'none'
),

sidecar_events as (
    select distinct
        record_id as interaction_id,
        feedback as label,
        coalesce(was_edited, false) as was_edited,
        coalesce(source, 'manual') as label_source,
        "timestamp" as labeled_at,
        1 as kind,
        path,
        byte_offset,
        line_number
    from raw.feedback
    where record_id in (select id from interactions)
        and ($cutoff is null or "timestamp" <= $cutoff)
),

events as (
    select * from inline_events
    union all
    select * from sidecar_events
),

timeline as (
    select
        interaction_id,
        count(*) as n_events,
        count(*) filter (where label = 'positive') > 0
            and count(*) filter (where label = 'negative') > 0 as conflicting,
        min(labeled_at) as first_labeled_at,
        max({
            'labeled_at': labeled_at,
            'kind': kind,
            'path': coalesce(path, ''),
            'byte_offset': coalesce(byte_offset, -1),
            'line_number': coalesce(line_number, -1),
            'label': label,
            'label_source': label_source,
            'was_edited': was_edited
        }) as winner
    from events
    group by interaction_id
)

select
    interaction_id,
    winner.label as label,
    winner.was_edited as was_edited,
    winner.label_source as label_source,
    winner.labeled_at as labeled_at,
    n_events,
    conflicting,
    first_labeled_at,
    nullif(winner.path, '') as path,
    nullif(winner.line_number, -1) as line_number
from timeline
order by interaction_id
