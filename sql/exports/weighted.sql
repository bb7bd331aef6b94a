-- Every weighted example (queue + archives + TUI ratings, one row per content hash) with its
-- weight, note and label (queue weight <= 1 -> true, > 1 -> false; ratings good -> true).
-- origin: 'weighted_queue' | 'weighted_rating'. Retention per source relative to $as_of
-- (NULL keeps all; queue lines without a timestamp are always kept).
-- $all: every example, else only those in fw_touched_weighted.
with weighted as (
    select *
    from staging.weighted_examples
    where ($all or content_hash in (select key from fw_touched_weighted))
        and case origin
        when 'queue' then $queue_retention_days is null or "timestamp" is null
            or "timestamp" >= timezone('UTC', $as_of::date::timestamp
                                       - to_days($queue_retention_days::integer))
        else $ratings_retention_days is null
            or "timestamp" >= timezone('UTC', $as_of::date::timestamp
                                       - to_days($ratings_retention_days::integer))
    end
)

select
    fw_prompt(null, query) as prompt,
    fw_completion(response) as completion,
    weight::double as weight,
    note,
    label,
    fw_split(fw_norm(query), $eval_fraction) as split,
    case origin when 'queue' then 'weighted_queue' else 'weighted_rating' end as origin,
    content_hash,
    path,
    line_number,
    byte_offset,
    "timestamp" as example_timestamp
from weighted
order by origin, content_hash
