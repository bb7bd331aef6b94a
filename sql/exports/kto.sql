-- KTO: unpaired labelled examples.
--   interactions: final label positive -> true, negative -> false, neutral excluded; weight 1.
--   weighted examples (staging.weighted_examples): their computed label (queue weight <= 1 ->
--   true, > 1 -> false; ratings good -> true); sample_weight = the example's weight.
-- origin: 'interaction' | 'weighted_queue' | 'weighted_rating'. example_id is the interaction
-- id or the weighted example's content hash. Retention per source relative to $as_of
-- (NULL keeps all; weighted queue lines without a timestamp are always kept).
-- $all: every row, else only interactions in fw_touched_interactions and weighted examples in
-- fw_touched_weighted. Interactions' label, split and pseudonym come from lineage.prompt_keys
-- (one row per interaction labelled positive or negative), read from row $new_keys on (as in
-- sql/exports/sft.sql).
-- fw_interactions: staging.interactions (a temp view), or the rows an incremental build needs.
-- example_timestamp: when the interaction or weighted example was written; the published files
-- are partitioned by its day, so a day's new examples are a new file.
with labelled as (
    select i.*, k.label, k.prompt_hash, k.has_system, k.session_pseudonym
    from fw_interactions as i
    join lineage.prompt_keys as k on k.id = i.id
    where ($all or (k.rowid >= $new_keys and i.id in (select key from fw_touched_interactions)))
        and ($interactions_retention_days is null
            or i."timestamp" >= timezone('UTC', $as_of::date::timestamp
                                         - to_days($interactions_retention_days::integer)))
),

weighted as (
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
),

examples as (
    select
        fw_prompt_messages(has_system, context, input_text) as prompt,
        fw_completion(output_text) as completion,
        label = 'positive' as label,
        1.0::double as sample_weight,
        fw_split_hash(prompt_hash, $eval_fraction) as split,
        'interaction' as origin,
        id as example_id,
        path,
        line_number,
        byte_offset,
        session_pseudonym,
        "timestamp"::timestamptz as example_timestamp
    from labelled

    union all

    select
        fw_prompt(null, query) as prompt,
        fw_completion(response) as completion,
        label,
        weight::double as sample_weight,
        fw_split(fw_norm(query), $eval_fraction) as split,
        case origin when 'queue' then 'weighted_queue' else 'weighted_rating' end as origin,
        content_hash as example_id,
        path,
        line_number,
        byte_offset,
        null::varchar as session_pseudonym,
        "timestamp"::timestamptz as example_timestamp
    from weighted
)

select * from examples
order by origin, example_id
