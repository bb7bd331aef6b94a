-- Every signal with its polarity and strength decayed as of $as_of (x 0.8 per full 30 days since
-- created_at, the trustworthy time). The current opinion per (target, aspect) is the latest
-- signal; earlier ones are kept as history with the id that superseded them.
with signals as (
    select
        id,
        target_type,
        target_id,
        aspect,
        signal,
        case
            when signal in ('good', 'correct') then 'positive'
            when signal in ('bad', 'incorrect') then 'negative'
            else 'neutral'
        end as polarity,
        strength,
        source,
        context,
        created_at,
        greatest(date_diff('day', created_at::date, $as_of::date), 0) as age_days,
        original_class,
        suggested_class
    from staging.signals
)

select
    *,
    strength * pow(0.8, floor(age_days / 30)) as effective_strength,
    row_number() over latest = 1 as is_current,
    lag(id) over latest as superseded_by
from signals
window latest as (partition by target_type, target_id, aspect order by created_at desc, id desc)
