-- marts.signal_opinions: every signal (history kept) with its polarity and its strength decayed
-- as of $as_of (a DATE parameter: the run date, or a fixed date for reproducible runs).
-- * Time is created_at (the trustworthy one; the epoch `timestamp` is skewed by the writer's
--   UTC offset). age_days = calendar days from created_at's UTC date to $as_of, never below 0.
-- * effective_strength = strength * 0.8 ^ floor(age_days / 30): x0.8 per FULL 30 days.
-- * polarity: good|correct -> positive, bad|incorrect -> negative, unsure|neutral -> neutral.
-- * The current opinion per (target_type, target_id, aspect) is the latest signal by created_at,
--   then id (ties); every earlier one is superseded_by the next later signal.
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
        session_id,
        created_at,
        created_at_text,
        greatest(date_diff('day', (created_at at time zone 'UTC')::date, $as_of::date), 0)::bigint as age_days,
        original_class,
        suggested_class,
        path,
        line_number
    from staging.signals
)

select
    id,
    target_type,
    target_id,
    aspect,
    signal,
    polarity,
    strength,
    source,
    context,
    session_id,
    created_at,
    created_at_text,
    $as_of::date as as_of,
    age_days,
    (age_days // 30)::bigint as decay_periods,
    (strength * pow(0.8, age_days // 30))::double as effective_strength,
    row_number() over latest = 1 as is_current,
    lag(id) over latest as superseded_by,
    original_class,
    suggested_class,
    path,
    line_number
from signals
window latest as (partition by target_type, target_id, aspect order by created_at desc, id desc)
