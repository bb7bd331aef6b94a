-- One row per file of every commit (all files, not just the first). Rename text is resolved to
-- the new path: "a => b" -> "b", "src/{a => b}/x.rs" -> "src/b/x.rs", "{ => sub}/f" -> "sub/f".
with files as (
    select
        e.source_id as sha,
        unnest(from_json(
            e.data -> 'files',
            '[{"path": "VARCHAR", "change_type": "VARCHAR", "lines_added": "BIGINT", "lines_removed": "BIGINT"}]'
        )) as f
    from staging.eventlog as e
    where e.event_type = 'git.commit'
),

braces_resolved as (
    select
        sha,
        f.path as raw_path,
        f.change_type,
        f.lines_added,
        f.lines_removed,
        case
            when f.path like '%{% => %}%'
                then trim(regexp_replace(regexp_replace(f.path, '\{[^{}]* => ([^{}]*)\}', '\1', 'g'), '/+', '/', 'g'), '/')
            when f.path like '% => %' then split_part(f.path, ' => ', 2)
            else f.path
        end as file_path
    from files
)

select distinct sha, file_path, raw_path, change_type, lines_added, lines_removed
from braces_resolved
where file_path <> ''
