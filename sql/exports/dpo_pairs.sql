-- DPO preference pairs, by id: which pairs sql/exports/dpo.sql publishes, decided from
-- lineage.prompt_keys alone (no interaction text is read: a group's untouched members cost an
-- incremental build their keys, not their texts).
--
-- Groups: interactions whose final label is positive or negative and whose prompt and answer
-- both hold text (pairable: a blank one could only make pairs the exports' checks drop, and
-- blank prompts of unrelated interactions would all form one group; kto drops and records
-- each such interaction in ingest.excluded), grouped by (normalised
-- input_text, normalised context) (fw_norm: NFC, whitespace runs -> one space, trimmed), i.e.
-- by (prompt_group, prompt_hash), which determines both.
-- Responses: within a group and side, a response is a distinct output_text (byte-equal: equal
-- output_hash, its sha256); interactions repeating it byte for byte add nothing, so its
-- earliest interaction (by timestamp, then sha256(id)) represents it (its id, prompt and
-- provenance are published).
-- Pairs: each positive response with each negative response of its group, except pairs whose
-- texts are byte-identical.
-- Cap ($max_pairs, FLYWHEEL_DPO_MAX_PAIRS; NULL = no cap), deterministic, independent of input
-- order and append-stable: per side the candidates are the first $max_pairs + 1 responses by
-- (timestamp, sha256(id)), which bounds the work on a hot prompt (a text equals at most one
-- response of the other side, so k candidates facing $max_pairs + 1 make >= k * $max_pairs valid
-- pairs: at least min($max_pairs, all valid pairs)); kept are the first $max_pairs pairs by
-- (pair_timestamp, sha256(chosen_id || ':' || rejected_id)). Time first: an answer newer than
-- its group's sorts after everything the group holds, so it only fills a group under the cap
-- and earlier days' files stay unchanged. Equal times fall back to the hashes; timestamp is
-- never NULL in staging.interactions (a required field), NULL would sort last.
-- Retention as for sft (interactions, relative to $as_of).
-- pair_timestamp: the later of the two interactions' times (a pair exists from then on); the
-- published files are partitioned by its day, so a day's new pairs are a new file.
-- $all: every group, else only groups in fw_touched_groups (an incremental build recomputes
-- whole groups).
with labelled as (
    select id, "timestamp", label, prompt_group, prompt_hash, has_system, id_hash, output_hash
    from lineage.prompt_keys
    where pairable
        and ($all or prompt_group in (select key from fw_touched_groups))
        and ($interactions_retention_days is null
            or "timestamp" >= timezone('UTC', $as_of::date::timestamp
                                       - to_days($interactions_retention_days::integer)))
),

-- one representative per distinct response text and side, its earliest interaction (sha256 of
-- distinct ids differ, so (timestamp, id_hash) names one): a group by, not a window over every row
representatives as (
    select arg_min(id_hash, ("timestamp", id_hash)) as id_hash
    from labelled
    group by prompt_group, prompt_hash, label, output_hash
),

responses as (
    select *
    from labelled
    where id_hash in (select id_hash from representatives)
),

candidates as (
    select *
    from responses
    qualify $max_pairs is null or row_number() over (
        partition by prompt_group, prompt_hash, label
        order by "timestamp" nulls last, id_hash, id
    ) <= $max_pairs + 1
),

pairs as (
    select
        p.prompt_group,
        p.prompt_hash,
        p.has_system,
        p.id as chosen_id,
        n.id as rejected_id,
        sha256(p.id || ':' || n.id) as pair_hash,
        greatest(p."timestamp", n."timestamp") as pair_timestamp
    from candidates as p
    join candidates as n
        on p.prompt_group = n.prompt_group
        and p.prompt_hash = n.prompt_hash
    where p.label = 'positive'
        and n.label = 'negative'
        and p.output_hash <> n.output_hash
)

select *
from pairs
qualify $max_pairs is null or row_number() over (
    partition by prompt_group, prompt_hash
    order by pair_timestamp nulls last, pair_hash, chosen_id, rejected_id
) <= $max_pairs
