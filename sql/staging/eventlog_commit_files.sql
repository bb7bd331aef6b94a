-- staging.commit_files: one row per (commit, file) for EVERY file of every commit (the original
-- tool kept only commits that carried a session id and compared whole JSON values).
-- Rename text is resolved to the new path, like transforms.gitlog.resolve_rename:
--   'a => b' -> 'b'; 'dir/{a => b}/f' -> 'dir/b/f'; 'dir/{ => sub}/f' -> 'dir/sub/f';
--   'dir/{sub => }/f' -> 'dir/f'; '{a => }/f' -> 'f'.
-- old_path is the path before the rename (NULL when the entry is not a rename).
-- numstat has no status letter: change_type is what the scraper wrote (usually 'modified').
-- Should a commit list the same resolved path twice, the entries are summed into one row.
with entries as (
    select
        e.source_id as sha,
        f.i as file_index,
        f.entry ->> 'path' as raw_path,
        f.entry ->> 'change_type' as change_type,
        try_cast(f.entry ->> 'lines_added' as bigint) as lines_added,
        try_cast(f.entry ->> 'lines_removed' as bigint) as lines_removed
    from staging.eventlog as e,
        unnest(json_extract(e.data, '$.files[*]')) with ordinality as f(entry, i)
    where e.event_type = 'git.commit'
),

resolved as (
    select
        *,
        case
            when regexp_matches(raw_path, '\{[^{}]* => [^{}]*\}')
                then ltrim(regexp_replace(regexp_replace(raw_path, '\{([^{}]*) => ([^{}]*)\}', '\2'), '/{2,}', '/', 'g'), '/')
            when contains(raw_path, ' => ') then substr(raw_path, strpos(raw_path, ' => ') + 4)
            else raw_path
        end as file_path,
        case
            when regexp_matches(raw_path, '\{[^{}]* => [^{}]*\}')
                then ltrim(regexp_replace(regexp_replace(raw_path, '\{([^{}]*) => ([^{}]*)\}', '\1'), '/{2,}', '/', 'g'), '/')
            when contains(raw_path, ' => ') then substr(raw_path, 1, strpos(raw_path, ' => ') - 1)
        end as old_path
    from entries
    where raw_path is not null and raw_path <> ''
)

select
    sha,
    file_path,
    arg_min(raw_path, file_index) as raw_path,
    arg_min_null(old_path, file_index) as old_path,
    arg_min_null(change_type, file_index) as change_type,
    sum(lines_added)::bigint as lines_added,
    sum(lines_removed)::bigint as lines_removed,
    min(file_index)::bigint as file_index
from resolved
group by sha, file_path
