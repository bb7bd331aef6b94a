-- The ingestion bookkeeping tables. Created once; every statement is idempotent.
create schema if not exists ingest;
create schema if not exists raw;
create schema if not exists staging;

-- One row per input file (or SQLite table): public accounting plus the private watermark.
-- Identity: lines_read = rows_loaded + rows_quarantined + blank_lines.
create table if not exists ingest.files (
    source varchar not null,
    path varchar not null,
    format varchar not null,              -- jsonl | json_array | sqlite
    size_bytes bigint not null default 0,
    mtime_ns bigint,
    lines_read bigint not null default 0,
    rows_loaded bigint not null default 0,
    rows_quarantined bigint not null default 0,
    blank_lines bigint not null default 0,
    deferred_bytes bigint not null default 0,
    offset_bytes bigint not null default 0, -- watermark: end of the last complete line consumed
    prefix_sha256 varchar,                  -- sha256 of bytes [0, offset_bytes)
    high_water_mark bigint,                 -- SQLite: greatest key consumed
    high_water_sha256 varchar,              -- SQLite: sha256 of the record at the high-water mark
    status varchar not null default 'ok',   -- ok | corrupt | missing
    first_run_id varchar,
    last_run_id varchar,
    last_ingested_at timestamptz,
    primary key (source, path)
);

create table if not exists ingest.quarantine (
    source varchar not null,
    path varchar not null,
    line_number bigint,
    byte_offset bigint,
    reason varchar not null,
    detail varchar,
    raw_text varchar,
    raw_bytes blob,          -- the exact bytes, for invalid UTF-8
    raw_sha256 varchar,      -- for lines over the size limit (raw_text is then null)
    raw_length bigint,
    run_id varchar not null,
    quarantined_at timestamptz not null
);

create table if not exists ingest.runs (
    run_id varchar primary key,
    started_at timestamptz not null,
    finished_at timestamptz,
    mode varchar not null,   -- incremental | full_refresh | replay
    status varchar not null, -- running | success | failed
    sources varchar[],
    files_seen bigint default 0,
    files_changed bigint default 0,
    lines_read bigint default 0,
    rows_loaded bigint default 0,
    rows_quarantined bigint default 0,
    blank_lines bigint default 0,
    deferred_bytes bigint default 0,
    error varchar,
    warnings varchar[] default []  -- e.g. a source whose globs matched no file
);
alter table ingest.runs add column if not exists warnings varchar[] default [];
-- the snapshot a run published (or found current when nothing changed): published | unchanged | not published
alter table ingest.runs add column if not exists snapshot varchar;
alter table ingest.runs add column if not exists snapshot_status varchar;

-- Things worth telling a data engineer about a file: rewritten, shrunk, sealed, corrupt, unclaimed.
create table if not exists ingest.file_events (
    run_id varchar not null,
    source varchar,
    path varchar not null,
    event varchar not null,
    detail varchar,
    occurred_at timestamptz not null
);

-- Which generation of a line file the watermark belongs to (a file re-read after shrinking or
-- being rewritten starts a new one; its earlier rows stay).
alter table ingest.files add column if not exists generation bigint;

-- Derived from bronze: the last bronze entry applied to raw per source. Entries after it are
-- replayed first, so a crash between writing bronze and committing here loses nothing.
create table if not exists ingest.bronze_applied (
    source varchar primary key,
    seq bigint not null
);

-- Derived from bronze: the sha256 of the record the lake holds per SQLite key, to find rows
-- changed or deleted anywhere in a table.
create table if not exists ingest.sqlite_keys (
    source varchar not null,
    path varchar not null,
    key bigint not null,
    sha256 varchar not null,
    primary key (source, path, key)
);

-- Derived from bronze, private (the lineage schema is never published): each path's latest
-- state among the entries applied to raw, and the seq that cache is complete through
-- (engine/known.py). A run reads only the bronze segments after it, not the lake's history.
create schema if not exists lineage;
create table if not exists lineage.bronze_known (
    source varchar not null,
    path varchar not null,
    seq bigint not null,
    state varchar not null,  -- Entry.state as JSON
    primary key (source, path)
);
create table if not exists lineage.bronze_known_through (
    source varchar primary key,
    seq bigint not null
);

-- Private: what each source's raw table was read with, as a fingerprint of its declaration
-- (fields, formats, time zone; not its globs or description). Another one (a time_zone set in
-- the sources file, a field's type changed) replays the source from bronze: old and new rows
-- are then read alike (engine.Ingestor.run).
create table if not exists lineage.source_declarations (
    source varchar primary key,
    fingerprint varchar not null
);

-- Private: the records retention has counted, by a hash of their content: one past the window
-- when first read is kept out of bronze, so a later read of it (its SQLite key range changed, a
-- rebuild) finds it new again; counted once (engine.Ingestor.run).
create table if not exists lineage.expired_records (
    source varchar not null,
    record_sha256 varchar not null,
    primary key (source, record_sha256)
);
