-- Sidecar feedback whose record_id matches no interaction (yet). One row per record_id.
-- first_seen / last_seen are the events' own timestamps; latest_feedback is the label the
-- interaction will get from these events when it arrives (same order as interaction_labels).
-- A record leaves this table once its interaction is ingested. $all: every record, else only
-- those in fw_touched_interactions (new events or a changed interaction). Events stamped beyond
-- $cutoff are left out, as in sql/marts/interaction_labels.sql.
with events as (
    select distinct
        record_id,
        feedback,
        coalesce(source, 'manual') as source,
        "timestamp",
        path,
        byte_offset,
        line_number
    from raw.feedback
    where ($all or record_id in (select key from fw_touched_interactions))
        and ($cutoff is null or "timestamp" <= $cutoff)
        -- fw_label_interactions: staging.interactions, or an incremental build's touched ids'
        -- rows (the records it keeps are touched ones), not a hash table of every interaction id
        and record_id not in (select id from fw_label_interactions where id is not null)
)

select
    record_id,
    count(*) as n_events,
    min("timestamp") as first_seen,
    max("timestamp") as last_seen,
    max({
        't': "timestamp",
        'p': coalesce(path, ''),
        'o': coalesce(byte_offset, -1),
        'l': coalesce(line_number, -1),
        'f': feedback,
        's': source
    }).f as latest_feedback,
    min(path) as path
from events
group by record_id
order by record_id
