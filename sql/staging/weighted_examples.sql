-- Weighted examples from the CLI queue (and its archives) and the TUI ratings, one row per
-- content hash. Labels: queue weight <= 1 ("good") is a positive example, > 1 ("critical",
-- "medium") a negative one; ratings carry their own good/bad.
with queue as (
    select
        content_hash,
        'queue' as origin,
        query,
        response,
        weight,
        feedback as note,
        weight <= 1 as label,
        "timestamp",
        path,
        line_number,
        byte_offset
    from staging.weighted_queue
),

ratings as (
    select
        content_hash,
        'rating' as origin,
        query,
        response,
        weight,
        note,
        rating = 'good' as label,
        "timestamp",
        path,
        line_number,
        byte_offset
    from staging.weighted_ratings
)

select * from queue
union all
select * from ratings
order by origin, content_hash
