-- Inferred-outcome acceptance by day (UTC date of the outcome), model, task_type and strategy
-- arm (strategy.arm_id; NULL when the strategy had none). NULL dimensions mean "not recorded".
-- acceptance_rate = accepted / (accepted + rejected), NULL when there were only neutral ones.
-- Retention: outcomes at or after ($as_of 00:00 UTC - $retention_days days); NULL keeps all.
-- Outcomes' session_id is never published (aggregates only).
with outcomes as (
    select "timestamp", model, task_type, arm_id, outcome
    from staging.outcomes
    where $retention_days is null
        or "timestamp" >= timezone('UTC', $as_of::date::timestamp - to_days($retention_days::integer))
)

select
    ("timestamp" at time zone 'UTC')::date as day,
    model,
    task_type,
    arm_id,
    count(*) as outcomes,
    count(*) filter (where outcome = 'accepted') as accepted,
    count(*) filter (where outcome = 'rejected') as rejected,
    count(*) filter (where outcome = 'neutral') as neutral,
    count(*) filter (where outcome = 'accepted')::double
        / nullif(count(*) filter (where outcome in ('accepted', 'rejected')), 0) as acceptance_rate
from outcomes
group by all
order by day, model nulls first, task_type nulls first, arm_id nulls first
