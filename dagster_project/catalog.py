"""The data dictionary: what every table and column of the warehouse means, in one place.

Applied as DuckDB comments (``COMMENT ON TABLE/COLUMN``) to the state database after every
table is built, so an analyst browsing the warehouse (``duckdb_tables()``,
``duckdb_columns()``, any SQL client) reads each table's grain and each column's meaning. Tables
are rebuilt every run, and a rebuilt table loses its comments, so ``apply_comments`` runs last.

A column is described by the most specific entry: ``schema.table.column``, then
``schema.*.column``, then the bare column name (one meaning everywhere: provenance, ids, the
``*_text`` originals); source fields of ``raw.*``/``staging.*`` fall back to their declaration.
"""

from __future__ import annotations

import duckdb

from transforms.spec import Field, SourceSpec
from transforms.sqlfiles import lit, transaction

TABLES: dict[str, str] = {
    "ingest.files": "One row per input file (or SQLite table) per source: accounting "
                    "(lines_read = rows_loaded + rows_quarantined + blank_lines) and the watermark.",
    "ingest.quarantine": "One row per rejected line or row: where it is (file, line, byte offset), "
                         "why (reason, detail) and its exact raw text or bytes.",
    "ingest.runs": "One row per pipeline run: mode, status, what it read, warnings and error.",
    "ingest.file_events": "One row per noteworthy file event per run: rewritten, shrunk, sealed, corrupt, missing.",
    "ingest.validations": "One row per expectation result per run (Great Expectations on staged tables, marts, exports).",
    "lineage.staging_watermarks": "Private: per staging table, what its last incremental build covered.",
    "lineage.bronze_known": "Private: per source and file, its latest state among the bronze entries applied to raw "
                            "(engine/known.py), so a run need not reread bronze's whole manifest.",
    "lineage.bronze_known_through": "Private: per source, the bronze entry lineage.bronze_known is complete through "
                                    "(another than ingest.bronze_applied's: the next run rebuilds it from bronze).",
    "lineage.source_declarations": "Private: per source, a fingerprint of the declaration its raw table was read "
                                   "with (not its globs); another one replays the source from bronze.",
    "lineage.expired_records": "Private: per source, the records retention has counted (removed from bronze, or "
                               "kept out of it when first read), so that reading one again counts it once.",
    "lineage.shared_paths": "Private: per raw file, its path as the training and analytics datasets publish it "
                            "(a session's part of its name keyed), computed once per file and key.",
    "lineage.published_key": "Private: the pseudonym key (its sha256) the last snapshot was published with; a run "
                             "publishing with another one warns that every pseudonym changed.",
    "lineage.raw_tombstones": "Private: raw rows a SQLite delete flagged since staging last looked (they keep "
                              "their observed_seq), consumed by the next staging build.",
    "ingest.excluded": "One row per row a `drop` expectation kept out of a table, per run: which row (key, "
                       "provenance), which expectation and the offending value (never silently lost).",
    "ingest.erasures": "One row per source per erasure (flywheel forget), two per retention pass: when, kind "
                       "(session | user | retention) and the rows removed per layer; never the id.",
    "ingest.bronze_applied": "One row per source: the last bronze entry (observation sequence) applied to raw "
                             "(run bookkeeping: published with the next snapshot that has new data).",
    "lineage.validation_baselines": "One row per table whose last validation found no offender for any row-level "
                                    "expectation: what its row hashes in lineage.validated_rows were checked with "
                                    "(private: never published).",
    "lineage.validated_rows": "The 64-bit hash of the checked columns of every row of each baselined table: rows "
                              "not in it are the ones the next validation looks at (private: never published).",
    "lineage.validation_group_keys": "Per table and group expression (split leakage's normalised prompt), the group "
                                     "key of each content seen, so only new contents are normalised (private: "
                                     "never published).",
    "lineage.validation_group_values": "Per table and per-group check (split leakage), each group's distinct "
                                       "counted values (splits) as validations left them: a scoped validation "
                                       "compares the new rows' values with them first (private: never published).",
    "lineage.validation_group_value_runs": "Per table and per-group check, the run whose validation left "
                                           "lineage.validation_group_values holding every value of the table's rows "
                                           "(private: never published).",
    "lineage.validation_clean_checks": "Per table and uniqueness or split-leakage check, the run whose validation "
                                       "found it clean: the next one scoped to the rows added since looks only at "
                                       "their keys (private: never published).",
    "lineage.table_versions": "Private (never published): one row per table a run writes: its content version "
                              "and, for built tables, the key of the inputs it was built from (dagster_project/versions.py).",
    "lineage.validated": "Private (never published): per table, the last validation: on which version, by which "
                         "run, passed or not (a table that did not change keeps that result).",
    "lineage.table_changes": "Private (never published): per version of a table built incrementally, the version "
                             "before it and the event days (as the snapshot cuts files) of every row the build "
                             "deleted or inserted: the snapshot hashes only those days' files. The latest 64 "
                             "builds of each table are kept.",
    "lineage.table_fingerprints": "Private (never published): per small table rebuilt whole, the digest of the "
                                  "content its current version was built with; a rebuild to the same content "
                                  "keeps the version (its validation and snapshot files are reused).",
    "lineage.run_processes": "Private (never published): the process (host:pid) of each `flywheel run` still "
                             "running, noted with its ingest.runs row: a run whose process is gone is recorded "
                             "failed by the next one.",
    "ingest.sqlite_keys": "One row per key of each SQLite table read: the sha256 of its record as last seen "
                          "(detects rows updated or deleted anywhere in the table).",
    "staging.weighted_examples": "One row per content hash: training-queue rows and TUI ratings as weighted "
                                 "examples with a boolean label.",
    "staging.git_commits": "One row per commit sha from the eventlog (the latest re-scrape wins).",
    "staging.commit_files": "One row per file of each commit (renames resolved to the new path).",
    "staging.session_windows": "One row per agent session seen in start/end tags: its time window (no end tag: 24 h).",
    "staging.commit_sessions": "One row per commit: the session it belongs to and how it was linked.",
    "staging.session_files": "One row per session and committed file.",
    "staging.scry_queries": "One row per retrieval (scry) query, eventlog v1 and v2.",
    "staging.scry_results": "One row per result of a retrieval query (rank order), with the normalised doc_path.",
    "staging.scry_use": "One row per recorded use of a retrieval result.",
    "staging.scry_feedback": "One row per explicit good/bad rating of a retrieval query.",
    "marts.interaction_labels": "One row per interaction with at least one feedback event: its final label "
                                "(the last event wins; equal times: sidecar over inline, then later file and line; "
                                "sidecar events stamped beyond the run time + 1 day left out).",
    "marts.orphan_feedback": "One row per sidecar feedback record_id whose interaction has not arrived yet "
                             "(events stamped beyond the run time + 1 day left out).",
    "marts.session_satisfaction": "One row per day (UTC), source and modality: latest end-of-session rating per "
                                  "session within the retention window; aggregates only.",
    "marts.session_rating_matches": "One row: how many rated sessions match interactions via "
                                    "sha256(session_id) = session_id_opaque.",
    "marts.outcome_rates": "One row per day, model, task type and strategy arm: inferred outcome counts and acceptance rate.",
    "marts.retrieval_query_metrics": "One row per counted retrieval query (its session has at least one commit): "
                                     "precision, recall, reciprocal rank, nDCG against the files committed.",
    "marts.retrieval_precision_by_rank": "One row per result rank: results, hits and precision at that rank.",
    "marts.retrieval_precision_by_mode": "One row per query mode: precision, recall, MRR, nDCG.",
    "marts.retrieval_summary": "One row: overall retrieval quality and coverage of the eventlog.",
    "marts.doc_utility": "One row per document path retrieved at least twice: how often it was then committed.",
    "marts.missed_files": "One row per file committed in sessions that queried but never retrieved it.",
    "marts.scry_usage": "One row per retrieval query: uses of its results and ratings.",
    "marts.retrieval_judgements": "One row per counted query and retrieved path: whether it was a hit "
                                  "(committed in the query's session; exact path match).",
    "marts.signal_opinions": "One row per feedback signal: polarity, decayed effective strength as of the run "
                             "date, whether it is the current opinion on its target and aspect.",
    "marts.signal_conflicts": "One row per target whose current opinions are both positive and negative.",
    "marts.promotion_candidates": "One row per target with at least 2 strong positive signals (effective "
                                  "strength >= 0.7) not since overturned (the current opinion on the signal's "
                                  "target and aspect is positive), at least one manual.",
    "exports.sft": "Training set (TRL SFT, conversational): one row per accepted interaction whose final label is positive.",
    "exports.kto": "Training set (TRL KTO): one row per labelled interaction (neutral excluded) or weighted example.",
    "exports.dpo": "Training set (TRL DPO): one row per chosen/rejected response pair to the same normalised "
                   "prompt and context (at most FLYWHEEL_DPO_MAX_PAIRS per prompt, the earliest; blank prompts "
                   "and answers are not paired).",
    "exports.weighted": "Training set: one row per weighted example (queue and TUI ratings) with its weight.",
}

COLUMNS: dict[str, str] = {
    # Provenance: one name everywhere (a prefix only where a row has two provenances).
    "path": "Provenance: the raw file, relative to FLYWHEEL_RAW_DIR (absolute when outside it; in training and "
            "analytics datasets, a session's part of its name keyed and only the last directory of an absolute path).",
    "line_number": "Provenance: 1-based line in the raw file (SQLite: the row's insertion order).",
    "byte_offset": "Provenance: byte offset of the line's start in the raw file (NULL for SQLite rows).",
    "chosen_path": "Provenance of the chosen response: its raw file.",
    "chosen_line_number": "Provenance of the chosen response: its 1-based line in the raw file named by chosen_path.",
    "rejected_path": "Provenance of the rejected response: its raw file.",
    "rejected_line_number": "Provenance of the rejected response: its 1-based line in the raw file named by "
                            "rejected_path.",
    "ingest_run_id": "Run that loaded this version of the record.",
    "observed_seq": "Order in which the lake observed this version (bronze record); the last tie-breaker of "
                    "last-wins, so an in-place edit at the source wins.",
    "deleted_at_source": "When the lake saw the producer delete this row (SQLite); NULL while it exists. "
                         "The row is kept.",
    "extra": "Keys the record carried beyond the declared fields, as JSON (nothing is dropped).",
    "content_hash": "sha256 of the record's canonical content (identity of content-identified sources).",
    "source": "Source name (the registry in dagster_project/sources/) or, in source tables, the producer's "
              "own source field.",
    "run_id": "Pipeline run id (the Dagster run id).",
    "seq": "The eventlog's own sequence number of the event.",
    "source_file": "The file the eventlog's producer said it scraped.",
    "session_id": "Agent session id (adapter suffix stripped where linked).",
    "session_id_raw": "Session id as written, before normalisation.",
    "query_id": "Retrieval query id.",
    "sha": "Git commit sha.",
    "mode": "Retrieval mode of the query (as logged).",
    "queried_at": "When the query ran (UTC).",
    "committed_at": "Commit time (UTC).",
    "doc_path": "Retrieved document as a repository path (./ and ::fn:… stripped).",
    "file_path": "Committed file path (renames resolved to the new path).",
    "rank": "1-based rank of the result.",
    "retrieved": "Results retrieved.",
    "hits": "Retrieved results that were committed in the query's session.",
    "precision": "hits / retrieved.",
    "mean_recall": "Mean over queries of hits / files touched.",
    "mrr": "Mean reciprocal rank of the first hit.",
    "mean_ndcg": "Mean normalised discounted cumulative gain.",
    "queries": "Number of queries.",
    "prompt": "Conversation up to the answer (TRL conversational: list of {role, content}; a non-empty context "
              "is a leading system message).",
    "completion": "The assistant's answer as a conversation (list of {role, content}).",
    "split": "train or eval: from a hash of the normalised prompt, so a prompt is never in both.",
    "sample_weight": "Per-example weight for the trainer.",
    "origin": "Where the example came from: queue (the training queue) or rating (a TUI rating).",
    "label": "The label (see the table's comment for its domain).",
    "session_pseudonym": "HMAC-SHA-256 pseudonym of the session id (keyed by FLYWHEEL_PSEUDONYM_KEY).",
    "weight": "Weight as written by the producer (queue weight; > 1 means a correction).",
    "note": "Free-text note of the rating or queue row.",
    "target_type": "What the signal is about (kind of target).",
    "target_id": "Id of the signal's target.",
    "last_signal_at": "Latest signal time (UTC).",
    "day": "UTC calendar date.",
    "event_key": "Identity of the eventlog event: commit sha, query id or content hash.",
    "arm_id": "Strategy arm id (strategy ->> 'arm_id').",
    "model": "Model name.",
}

# Columns whose meaning depends on the table.
TABLE_COLUMNS: dict[str, str] = {
    # incremental staging's private bookkeeping (transforms/staging.py; the lineage schema is never published)
    **{f"lineage.staging_watermarks.{c}": d for c, d in {
        "table_name": "The staging table (staging.<source>).",
        "raw_epoch": "Epoch of raw.<source> (lineage.table_versions) it was built from; another epoch rebuilds it.",
        "code_key": "sha256 of the staging code, the drop suite and raw's columns it was built with.",
        "applied_seq": "The last bronze entry applied to raw when it was built: newer observed_seq is re-decided.",
        "drop_now": "The time its drop step ran as of, or a later run found it still current; an earlier one rebuilds "
                    "it (staging.feedback's + 1 day: the labels' cutoff for sidecar events).",
        "run_id": "The run that built it.", "mode": "full | incremental.",
        "redecided": "Identities re-decided by that build (full: every identity).",
        "built_at": "When (UTC)."}.items()},
    "lineage.shared_paths.path": "The raw file, as staging's provenance names it.",
    "lineage.shared_paths.shared": "The path as shared datasets publish it (transforms.pseudonyms.provenance_sql).",
    "lineage.shared_paths.rule": "sha256 of the pseudonym key's hash and the rule it was computed with; another "
                                 "key or rule recomputes every row.",
    "lineage.bronze_known.state": "The file's state as JSON (bronze Entry.state: watermark, size, mtime, inode, ctime...).",
    "lineage.published_key.key_sha256": "sha256 of the pseudonym key.",
    "lineage.published_key.snapshot": "The snapshot published with it (the last one).",
    "lineage.expired_records.record_sha256": "sha256 of the record's JSON (keys sorted).",
    "lineage.bronze_known.seq": "The bronze entry the state is from (for tracing; the cache is read by path).",
    "lineage.source_declarations.fingerprint": "sha256 of the source's declaration but its globs and description "
                                               "(engine.declaration_key).",
    **{f"lineage.raw_tombstones.{c}": d for c, d in {
        "source": "The source.", "seq": "The bronze entry (a SQLite delete) that flagged the row.",
        "path": "The SQLite file.", "line_number": "The deleted row's key (raw line_number)."}.items()},
    "lineage.validation_baselines.table_name": "The validated table (schema.table).",
    "lineage.validation_baselines.fingerprint": "sha256 of the row-level checks, the checked columns' types and the "
                                                "DuckDB version (another fingerprint: validate every row).",
    "lineage.validation_baselines.valid_at": "The run time the rows passed at (an earlier run time: validate every row).",
    "lineage.validation_baselines.hashes": "Row hashes held in lineage.validated_rows for the table (rows since deleted included).",
    "lineage.validation_baselines.run_id": "The run that validated it.",
    "lineage.validation_baselines.updated_at": "When the baseline was recorded (UTC).",
    "lineage.validated_rows.table_name": "The validated table (schema.table).",
    "lineage.validated_rows.row_hash": "DuckDB hash() of the row's checked columns.",
    "lineage.validation_group_keys.table_name": "The validated table (schema.table).",
    "lineage.validation_group_keys.group_expr": "sha256 of the group expression, the columns it reads and the DuckDB version.",
    "lineage.validation_group_keys.content_hash": "DuckDB hash() of the columns the group expression reads.",
    "lineage.validation_group_keys.group_hash": "DuckDB hash() of the group expression's value for that content.",
    "lineage.validation_group_values.table_name": "The validated table (schema.table).",
    "lineage.validation_group_values.group_expr": "sha256 of the group key's expression and the counted column.",
    "lineage.validation_group_values.group_hash": "The group (lineage.validation_group_keys.group_hash).",
    "lineage.validation_group_values.value": "One counted value of the group's rows, as text.",
    "lineage.validation_group_value_runs.table_name": "The validated table (schema.table).",
    "lineage.validation_group_value_runs.group_expr": "As lineage.validation_group_values.group_expr.",
    "lineage.validation_group_value_runs.run_id": "The run whose validation left the values complete.",
    "lineage.validation_clean_checks.table_name": "The validated table (schema.table).",
    "lineage.validation_clean_checks.check_key": "sha256 of the check, its columns' types and the DuckDB version.",
    "lineage.validation_clean_checks.run_id": "The run whose validation found no unexpected row for it.",
    "lineage.table_versions.table_name": "schema.table in the state database.",
    "lineage.table_versions.version": "Changes whenever the content may have changed (built tables: the input key).",
    "lineage.table_versions.epoch": "Changes only when the table was rebuilt rather than appended to.",
    "lineage.table_versions.input_key": "Built tables: sha256 of code, settings read and input versions; null while "
                                        "a build is under way or for tables ingest writes.",
    "lineage.table_versions.run_id": "The run that last built the table: it made this version, or found its "
                                     "build gave this version's rows again (kept; its exclusions are this "
                                     "run's, its validation and files those of the run that made it).",
    "lineage.table_versions.updated_at": "When this version was recorded (UTC).",
    "lineage.run_processes.run_id": "The run (ingest.runs).",
    "lineage.run_processes.process": "host:pid@start of the process that ran it (start: when it started, in clock "
                                     "ticks since boot, where known).",
    "lineage.run_processes.boot": "The machine's boot id when it started (Linux; empty elsewhere).",
    "lineage.table_fingerprints.table_name": "schema.table in the state database.",
    "lineage.table_fingerprints.version": "The version (lineage.table_versions) with this content.",
    "lineage.table_fingerprints.fingerprint": "sha256 of the columns (names and types, in order), the row count "
                                              "and the sum of the 64-bit hashes of each row's JSON.",
    "lineage.table_changes.table_name": "schema.table in the state database.",
    "lineage.table_changes.version": "The version (lineage.table_versions) the build made.",
    "lineage.table_changes.base_version": "The version the build started from.",
    "lineage.table_changes.days": "YYYY-MM-DD (or 'undated') of every row deleted or inserted; a build that "
                                  "cannot say records no row, and the next snapshot hashes the whole table.",
    "lineage.validated.table_name": "schema.table validated.",
    "lineage.validated.validation_key": "sha256 of the suites' code, the table's version and the run and clock dates.",
    "lineage.validated.run_id": "The run that validated it (its rows in ingest.validations are copied to later runs).",
    "lineage.validated.passed": "Whether every blocking expectation passed.",
    "lineage.validated.result": "What the check reported (rows validated, failures), reported again on reuse.",
    "ingest.erasures.erased_at": "When the erasure or retention pass ran (UTC).",
    "ingest.erasures.kind": "session | user (flywheel forget) or retention (the source's retention window).",
    "ingest.erasures.source": "The source whose records were removed (a retention pass: one row from its ingest "
                              "step, one from the kept snapshots' scrub after the publish).",
    "ingest.erasures.bronze_rows": "Records removed from the bronze record (JSONL lines blanked, SQLite rows dropped), "
                                   "or, for retention, kept out of it as they were read (already expired).",
    "ingest.erasures.raw_rows": "Rows fewer in raw.<source> after the rebuild from bronze.",
    "ingest.erasures.staging_rows": "Rows fewer in staging.<source> after the rebuild from bronze (retention: its "
                                    "rows expired, which its staging step then drops).",
    "ingest.erasures.snapshot_rows": "Rows removed from the Parquet files of kept snapshots.",
    "ingest.erasures.snapshots": "Kept snapshots rewritten (their manifests updated).",
    # ingest.excluded
    "ingest.excluded.table_name": "Table the row was excluded from (schema.table).",
    "ingest.excluded.row_key": "The excluded row's key columns as text, '|'-joined.",
    "ingest.excluded.expectation": "The drop expectation that excluded the row.",
    "ingest.excluded.detail": "The offending value: <column> = <JSON value>.",
    "ingest.excluded.excluded_at": "When the row was excluded (UTC).",
    "ingest.excluded.recorded_at": "When this run recorded the row (a standing exclusion is recorded again by "
                                   "each run that builds its table); the published files are cut by its day.",
    "ingest.validations.recorded_at": "When this run recorded the result (a reused result is recorded again, "
                                      "validated_at keeps when it ran); the published files are cut by its day.",
    "ingest.bronze_applied.seq": "Observation sequence of the last bronze entry applied.",
    "ingest.sqlite_keys.key": "The SQLite table's integer key.",
    "ingest.sqlite_keys.sha256": "sha256 of the row's record as last read.",
    "ingest.validations.action": "What a failure does: warn (reported), drop (rows excluded into ingest.excluded), "
                                 "fail (blocks the run).",
    "ingest.runs.snapshot": "Snapshot version this run published, or the current one when nothing changed.",
    "ingest.runs.snapshot_status": "published | unchanged | not published (the publish itself failed); null for a "
                                   "run that failed before publishing.",
    "ingest.files.generation": "How many times the lake started reading this path from byte 0 (rewritten, "
                               "shrunk, reappeared); earlier generations' rows are kept.",
    # ingest.files
    "ingest.files.format": "jsonl | json_array | sqlite.",
    "ingest.files.size_bytes": "File size when last read.",
    "ingest.files.mtime_ns": "File modification time (ns) when last read.",
    "ingest.files.lines_read": "Lines (or SQLite rows) read so far.",
    "ingest.files.rows_loaded": "Lines loaded into raw.<source>.",
    "ingest.files.rows_quarantined": "Lines stored in ingest.quarantine.",
    "ingest.files.blank_lines": "Empty lines (counted, not loaded).",
    "ingest.files.deferred_bytes": "Bytes after the last newline, waiting for the writer to finish the line "
                                   "(a JSON array: all its bytes, while its text ends inside it).",
    "ingest.files.offset_bytes": "Watermark: end of the last complete line consumed.",
    "ingest.files.prefix_sha256": "sha256 of bytes [0, offset_bytes): detects rewritten files.",
    "ingest.files.high_water_mark": "SQLite: greatest integer key consumed.",
    "ingest.files.high_water_sha256": "SQLite: sha256 of the record at the high-water mark (detects a recreated store).",
    "ingest.files.status": "ok | corrupt | missing, as of the last run that read the file (a file unreadable "
                           "or locked in a run keeps its status: see ingest.file_events).",
    "ingest.files.first_run_id": "Run that first read the file.",
    "ingest.files.last_run_id": "Run that last read the file.",
    "ingest.files.last_ingested_at": "When the file was last read (UTC).",
    # ingest.quarantine
    "ingest.quarantine.reason": "Why: invalid_utf8, invalid_json, not_an_object, duplicate_key, non_standard_json, "
                                "missing_field:<f>, bad_type:<f>, bad_value:<f>, bad_timestamp:<f>, line_too_large, "
                                "unterminated_last_line, corrupt_file.",
    "ingest.quarantine.detail": "Human-readable detail of the reason.",
    "ingest.quarantine.raw_text": "The line exactly as written; invalid UTF-8 bytes escaped as \\xNN (the bytes "
                                  "themselves in raw_bytes); NULL for an oversized line (raw_sha256, raw_length).",
    "ingest.quarantine.raw_bytes": "The exact bytes, for invalid UTF-8.",
    "ingest.quarantine.raw_sha256": "sha256 of an oversized line (its text is not stored).",
    "ingest.quarantine.raw_length": "Length in bytes of an oversized line (line_too_large); NULL otherwise.",
    "ingest.quarantine.quarantined_at": "When it was quarantined (UTC).",
    # ingest.runs
    "ingest.runs.started_at": "Run start (UTC).",
    "ingest.runs.finished_at": "Run end (UTC); NULL while running.",
    "ingest.runs.mode": "incremental | full_refresh | replay.",
    "ingest.runs.status": "running | success | failed.",
    "ingest.runs.sources": "Sources the run ingested.",
    "ingest.runs.files_seen": "Files matched by the sources' globs.",
    "ingest.runs.files_changed": "Files with new, rewritten or shrunk content.",
    "ingest.runs.lines_read": "Lines read in this run.",
    "ingest.runs.rows_loaded": "Lines loaded in this run.",
    "ingest.runs.rows_quarantined": "Lines quarantined in this run.",
    "ingest.runs.blank_lines": "Blank lines seen in this run.",
    "ingest.runs.deferred_bytes": "Bytes of unfinished last lines left for a later run.",
    "ingest.runs.error": "Why the run failed (step: message).",
    "ingest.runs.warnings": "Warnings of the run, e.g. a source whose globs matched no file.",
    # ingest.file_events
    "ingest.file_events.event": "rewritten | shrunk | new_generation | reappeared | sealed | corrupt | locked | "
                                "unreadable | missing | waiting (a JSON array cut short) (files); rows_updated | rows_deleted | recreated (SQLite tables).",
    "ingest.file_events.detail": "What was observed.",
    "ingest.file_events.occurred_at": "When (UTC).",
    # ingest.validations
    "ingest.validations.table_name": "Validated table or export.",
    "ingest.validations.expectation": "Expectation name.",
    "ingest.validations.expectation_type": "Great Expectations expectation type.",
    "ingest.validations.column_name": "Column checked (NULL for table-level expectations).",
    "ingest.validations.blocking": "A failure stops the publish.",
    "ingest.validations.success": "Whether the expectation held.",
    "ingest.validations.status": "Result status.",
    "ingest.validations.observed": "Observed value.",
    "ingest.validations.unexpected_count": "Rows violating the expectation.",
    "ingest.validations.rows_validated": "Rows checked.",
    "ingest.validations.sample_rows": "Sample offending rows (JSON).",
    "ingest.validations.detail": "Detail of the result.",
    "ingest.validations.validated_at": "When (UTC).",
    # staging.weighted_examples
    "staging.weighted_examples.query": "The prompt text.",
    "staging.weighted_examples.response": "The response text.",
    "staging.weighted_examples.label": "true = desirable (queue weight <= 1, rating good), false = undesirable.",
    "staging.weighted_examples.timestamp": "When the example was written (UTC).",
    # eventlog staging
    "staging.git_commits.committed_at_text": "Commit time as written.",
    "staging.git_commits.message": "Commit message.",
    "staging.git_commits.author_name": "Commit author name.",
    "staging.git_commits.author_email": "Commit author email.",
    "staging.git_commits.n_files": "Files in the commit.",
    "staging.commit_files.raw_path": "Path as written by git (rename text, C quoting).",
    "staging.commit_files.old_path": "Previous path of a rename.",
    "staging.commit_files.change_type": "Kind of change (added, modified, deleted, renamed).",
    "staging.commit_files.lines_added": "Lines added.",
    "staging.commit_files.lines_removed": "Lines removed.",
    "staging.commit_files.file_index": "Position of the file in the commit.",
    "staging.commit_sessions.linked_by": "How the commit was linked: its own session id, or a tag window.",
    "staging.commit_sessions.window_started_at": "Start of the tag window holding the commit.",
    "staging.commit_sessions.windows_holding": "Tag windows holding the commit's instant.",
    "staging.session_windows.adapter": "Adapter suffix of the session tag.",
    "staging.session_windows.started_at": "Window start (UTC).",
    "staging.session_windows.started_at_text": "Window start as written.",
    "staging.session_windows.ended_at": "Window end from the end tag (UTC).",
    "staging.session_windows.ended_at_text": "Window end as written.",
    "staging.session_windows.window_end": "Effective end: the end tag, or start + 24 h.",
    "staging.session_windows.is_open": "No end tag seen.",
    "staging.session_windows.start_tags": "Start tags seen.",
    "staging.session_windows.end_tags": "End tags seen.",
    "staging.session_windows.end_tags_ignored": "End tags ignored (before the start, duplicates).",
    "staging.session_files.commits": "Commits of the session touching the file.",
    "staging.session_files.first_committed_at": "First commit of the file in the session (UTC).",
    "staging.session_files.last_committed_at": "Last commit of the file in the session (UTC).",
    "staging.scry_queries.version": "Eventlog schema version of the query (1 or 2).",
    "staging.scry_queries.queried_at_text": "Query time as written.",
    "staging.scry_queries.query": "The query text.",
    "staging.scry_queries.routing": "Routing information of the query.",
    "staging.scry_queries.n_results": "Results returned.",
    "staging.scry_results.score": "Retrieval score.",
    "staging.scry_results.doc_id": "Document id as returned.",
    "staging.scry_results.doc_kind": "path, session, persona or other.",
    "staging.scry_results.result_type": "Result type as logged.",
    "staging.scry_results.source_repo": "Repository of the result.",
    "staging.scry_results.weight": "Result weight as logged.",
    "staging.scry_results.result_index": "Position in the logged result list.",
    "staging.scry_use.result_used": "Which result was used.",
    "staging.scry_use.used_doc_path": "Path of the used result.",
    "staging.scry_use.used_at": "When (UTC).",
    "staging.scry_use.used_at_text": "When, as written.",
    "staging.scry_feedback.signal": "good or bad.",
    "staging.scry_feedback.comment": "Rating comment.",
    "staging.scry_feedback.rated_at": "When (UTC).",
    "staging.scry_feedback.rated_at_text": "When, as written.",
    # marts
    "marts.interaction_labels.interaction_id": "The interaction (staging.interactions.id).",
    "marts.interaction_labels.label": "Final label: positive | negative | neutral.",
    "marts.interaction_labels.was_edited": "The user edited the answer (from the winning event).",
    "marts.interaction_labels.label_source": "inline | manual | outcome_tracker: who gave the winning label.",
    "marts.interaction_labels.labeled_at": "Time of the winning event (UTC).",
    "marts.interaction_labels.n_events": "Feedback events for the interaction.",
    "marts.interaction_labels.conflicting": "Events disagree on the label.",
    "marts.interaction_labels.first_labeled_at": "Time of the first event (UTC).",
    "marts.interaction_labels.path": "Provenance of the winning event: its raw file (for inline feedback, the "
                                     "interaction's own file).",
    "marts.interaction_labels.line_number": "Provenance of the winning event: its 1-based line.",
    "marts.orphan_feedback.record_id": "The interaction id the feedback names (not in staging.interactions yet).",
    "marts.orphan_feedback.n_events": "Feedback events waiting.",
    "marts.orphan_feedback.first_seen": "First event time (UTC).",
    "marts.orphan_feedback.last_seen": "Last event time (UTC).",
    "marts.orphan_feedback.latest_feedback": "The latest event's feedback.",
    "marts.orphan_feedback.path": "Provenance: the (alphabetically first) sidecar file holding its events.",
    "marts.session_satisfaction.source": "Where the rating was given (the rating's source field).",
    "marts.session_satisfaction.modality": "Interface modality (NULL for old records).",
    "marts.session_satisfaction.sessions": "Sessions whose latest rating falls on this day.",
    "marts.session_satisfaction.positive": "Sessions rated positive.",
    "marts.session_satisfaction.negative": "Sessions rated negative.",
    "marts.session_satisfaction.skipped": "Sessions that skipped rating (counted, not rated).",
    "marts.session_satisfaction.satisfaction": "positive / (positive + negative); NULL when nobody rated.",
    "marts.session_satisfaction.matched_sessions": "Sessions matched to interactions.",
    "marts.session_rating_matches.rated_sessions": "Sessions with a rating.",
    "marts.session_rating_matches.matched_sessions": "Rated sessions matching an interaction session.",
    "marts.session_rating_matches.match_rate": "matched_sessions / rated_sessions.",
    "marts.session_rating_matches.interaction_sessions": "Distinct interaction sessions.",
    "marts.session_rating_matches.interaction_rating_rate": "Share of interaction sessions that were rated.",
    "marts.session_rating_matches.matched_interactions": "Interactions in rated sessions.",
    "marts.outcome_rates.task_type": "Task type.",
    "marts.outcome_rates.arm_id": "Strategy arm.",
    "marts.outcome_rates.outcomes": "Inferred outcomes.",
    "marts.outcome_rates.accepted": "Outcomes inferred accepted.",
    "marts.outcome_rates.rejected": "Outcomes inferred rejected.",
    "marts.outcome_rates.neutral": "Outcomes inferred neutral.",
    "marts.outcome_rates.acceptance_rate": "accepted / (accepted + rejected).",
    "marts.retrieval_query_metrics.touched": "Files committed in the query's session.",
    "marts.retrieval_query_metrics.recall": "hits / touched.",
    "marts.retrieval_query_metrics.reciprocal_rank": "1 / rank of the first hit (0 without a hit).",
    "marts.retrieval_query_metrics.ndcg": "Normalised discounted cumulative gain.",
    "marts.retrieval_query_metrics.first_hit_rank": "Rank of the first hit.",
    "marts.retrieval_summary.sessions": "Sessions with counted queries.",
    "marts.retrieval_summary.non_path_results": "Results that are not paths (session and persona ids, other).",
    "marts.retrieval_summary.session_results": "Results that are session ids.",
    "marts.retrieval_summary.persona_results": "Results that are persona: ids.",
    "marts.retrieval_summary.other_results": "Other non-path results.",
    "marts.retrieval_summary.all_queries": "All queries, counted or not.",
    "marts.retrieval_summary.queries_without_session": "Queries with no session.",
    "marts.retrieval_summary.commits": "Commits in the eventlog.",
    "marts.retrieval_summary.linked_commits": "Commits linked to a session.",
    "marts.doc_utility.times_retrieved": "Times retrieved.",
    "marts.doc_utility.times_committed": "Times committed in the retrieving query's session.",
    "marts.doc_utility.hit_rate": "times_committed / times_retrieved.",
    "marts.doc_utility.best_rank": "Best rank it was retrieved at.",
    "marts.doc_utility.mean_rank": "Mean rank it was retrieved at.",
    "marts.missed_files.sessions_missed": "Sessions that queried but never retrieved the file they committed.",
    "marts.missed_files.last_missed_at": "Last such commit (UTC).",
    "marts.scry_usage.query_logged": "The query was logged (not only its use or rating).",
    "marts.scry_usage.uses": "Recorded uses of its results.",
    "marts.scry_usage.results_used": "Distinct results used.",
    "marts.scry_usage.best_rank_used": "Best rank among used results.",
    "marts.scry_usage.rated_good": "Good ratings.",
    "marts.scry_usage.rated_bad": "Bad ratings.",
    "marts.scry_usage.last_rating": "Latest rating.",
    "marts.retrieval_judgements.results": "Results of the query.",
    "marts.retrieval_judgements.hit": "The path was committed in the query's session (exact match).",
    "marts.signal_opinions.polarity": "positive | negative | neutral, from the signal.",
    "marts.signal_opinions.as_of": "The run date the decay is computed for (FLYWHEEL_AS_OF or today).",
    "marts.signal_opinions.age_days": "Days from created_at to as_of.",
    "marts.signal_opinions.decay_periods": "floor(age_days / 30).",
    "marts.signal_opinions.effective_strength": "strength × 0.8^decay_periods.",
    "marts.signal_opinions.is_current": "Latest signal on its target and aspect.",
    "marts.signal_opinions.superseded_by": "Id of the signal that replaced it.",
    "marts.signal_conflicts.positive_opinions": "Current positive opinions.",
    "marts.signal_conflicts.negative_opinions": "Current negative opinions.",
    "marts.signal_conflicts.neutral_opinions": "Current neutral opinions.",
    "marts.signal_conflicts.opinions": "Current opinions.",
    "marts.promotion_candidates.strong_positive_signals": "Positive signals with effective strength >= 0.7, "
                                                          "not overturned by a later opinion.",
    "marts.promotion_candidates.manual_signals": "Of those, manual ones.",
    "marts.promotion_candidates.distinct_sources": "Distinct signal sources.",
    "marts.promotion_candidates.sources": "Those sources.",
    "marts.promotion_candidates.aspects": "Aspects covered.",
    "marts.promotion_candidates.max_effective_strength": "Strongest qualifying signal.",
    "marts.promotion_candidates.min_effective_strength": "Weakest qualifying signal.",
    "marts.promotion_candidates.in_conflict": "The target is in marts.signal_conflicts.",
    # exports
    "exports.sft.interaction_id": "The interaction (staging.interactions.id).",
    "exports.sft.label_source": "Who gave the final label.",
    "exports.sft.labeled_at": "When the final label was given (UTC).",
    "exports.sft.was_edited": "The user edited the answer.",
    "exports.sft.interaction_timestamp": "When the interaction happened (UTC).",
    "exports.sft.interaction_type": "Kind of interaction.",
    "exports.kto.label": "true = desirable, false = undesirable.",
    "exports.kto.origin": "Where the example came from: interaction, weighted_queue (the training queue) or "
                          "weighted_rating (a TUI rating).",
    "exports.kto.example_id": "Interaction id or weighted example content hash.",
    "exports.dpo.chosen": "The preferred answer (conversation).",
    "exports.dpo.rejected": "The dispreferred answer (conversation).",
    "exports.dpo.chosen_id": "Interaction id of the chosen answer.",
    "exports.dpo.rejected_id": "Interaction id of the rejected answer.",
    "exports.dpo.prompt_group": "Hash of the normalised prompt and context the pair shares.",
    "exports.dpo.pair_timestamp": "The later of the chosen and rejected interactions' times (UTC): the pair exists "
                                  "from then on; published files are partitioned by its day.",
    "exports.kto.example_timestamp": "When the interaction or weighted example was written (UTC; null for queue "
                                     "lines without one); published files are partitioned by its day.",
    "exports.weighted.label": "true = desirable, false = undesirable.",
    "exports.weighted.origin": "Where the example came from: weighted_queue (the training queue) or weighted_rating "
                               "(a TUI rating).",
    "exports.weighted.example_timestamp": "When the example was written (UTC).",
}

# The incremental marts' and exports' private watermarks (transforms.delta; never published).
TABLES.update({
    "lineage.mart_watermarks": "Per incremental builder (labels, training): the key of the settings and code "
                               "its last build used and what it had read; another key means a whole rebuild.",
    "lineage.label_inputs": "What the last labels build read: one row per staging interaction and its fingerprint.",
    "lineage.label_builds": "One row per labels build (the newest 64): whole or incremental, and a checksum "
                            "of the staging rows it read.",
    "lineage.label_changes": "The interactions each incremental labels build re-decided: the training sets' delta.",
    "lineage.prompt_keys": "Per labelled (positive/negative) interaction: prompt hashes, DPO group, "
                           "label and its provenance, time, answer hash and pseudonym, computed once per "
                           "interaction version.",
    "lineage.training_weighted_inputs": "What the last training build read of staging.weighted_examples: "
                                        "a hash of each row.",
})
TABLE_COLUMNS.update({
    "lineage.mart_watermarks.builder": "labels | training.",
    "lineage.mart_watermarks.settings_key": "sha256 of the settings, SQL and builder code of the last build.",
    "lineage.mart_watermarks.state": "JSON: the last build's read positions (raw.feedback observed_seq, labels build).",
    "lineage.label_inputs.id": "The interaction id.",
    "lineage.label_inputs.fp": "hash(observed_seq, path, byte_offset, line_number, deleted_at_source) of its staging row.",
    "lineage.label_inputs.h": "hash(id): the interactions a build re-decides are looked up by it first.",
    "lineage.label_builds.seq": "Build number, increasing.",
    "lineage.label_builds.build": "Random id of the build (a consumer checks it is following the same log).",
    "lineage.label_builds.whole": "True when the build was whole (no change list: consumers rebuild whole).",
    "lineage.label_builds.inputs_sum": "Sum of the fingerprints of the staging rows the build read.",
    "lineage.label_builds.inputs_rows": "How many staging rows the build read.",
    "lineage.label_changes.seq": "The labels build that re-decided the interaction.",
    "lineage.label_changes.interaction_id": "The interaction re-decided.",
    "lineage.prompt_keys.id": "The interaction id.",
    "lineage.prompt_keys.prompt_hash": "sha256 of the normalised user text: the split key.",
    "lineage.prompt_keys.prompt_group": "sha256(normalised prompt, NUL, normalised context): the DPO group.",
    "lineage.prompt_keys.has_system": "True when the context holds anything but whitespace.",
    "lineage.prompt_keys.id_hash": "sha256 of the id: DPO's order among equal times.",
    "lineage.prompt_keys.id_key": "hash(id), 64 bits: an incremental build finds a touched id's row by it first.",
    "lineage.prompt_keys.label": "The final label, positive or negative (DPO's side).",
    "lineage.prompt_keys.timestamp": "The interaction's time (DPO's order and pair times).",
    "lineage.prompt_keys.output_hash": "sha256 of the output text: DPO's distinct answers, compared without reading them.",
    "lineage.prompt_keys.pairable": "The prompt and the answer both hold more than whitespace: only these are paired in DPO.",
    "lineage.prompt_keys.session_pseudonym": "The session's keyed pseudonym.",
    "lineage.prompt_keys.label_source": "Who gave the winning label (marts.interaction_labels.label_source).",
    "lineage.prompt_keys.labeled_at": "Time of the winning event (marts.interaction_labels.labeled_at).",
    "lineage.prompt_keys.label_was_edited": "The user edited the answer (marts.interaction_labels.was_edited).",
    "lineage.training_weighted_inputs.content_hash": "The weighted example's content hash.",
    "lineage.training_weighted_inputs.h": "hash of its whole staging row.",
})


def field_comment(spec: SourceSpec, f: Field) -> str:
    """A source field's meaning from its declaration: type, constraints, time handling."""
    parts = [f"{spec.name}.{f.name} as the producer wrote it: {f.type}"]
    parts.append("required" if f.required else "optional")
    if f.nullable:
        parts.append("may be null")
    if f.enum:
        parts.append("one of " + ", ".join(f.enum))
    bounds = [f"{op} {v:g}" for op, v in ((">=", f.minimum), ("<=", f.maximum), (">", f.exclusive_minimum))
              if v is not None]
    if bounds:
        parts.append(" and ".join(bounds))
    if f.time:
        parts.append(f"instant in UTC read as {f.time} (original text in {f.name}_text)")
    if f.type == "date":
        parts.append("a calendar date written YYYY-MM-DD (no time, no zone)")
    return "; ".join(parts) + "."


def source_comments(specs: dict[str, SourceSpec]) -> tuple[dict[str, str], dict[str, str]]:
    tables, columns = {}, {}
    for name, spec in specs.items():
        tables[f"raw.{name}"] = (f"Every loaded version of every {name} record (one row per loaded line or "
                                 f"row, typed), with provenance. {spec.description}")
        tables[f"staging.{name}"] = (f"One row per identity ({', '.join(spec.identity)}) of {name}: the latest "
                                     f"version by ({', '.join([*spec.order, 'path', 'byte_offset'])}) that passes "
                                     "the drop expectations.")
        tables[f"lineage.staging_excluded_{name}"] = (f"Private: identities of {name} a version of which a drop "
                                                      "expectation excluded; re-decided every run.")
        for f in spec.fields:
            columns[f"lineage.staging_excluded_{name}.{f.name}"] = field_comment(spec, f)
            for schema in ("raw", "staging"):
                columns[f"{schema}.{name}.{f.name}"] = field_comment(spec, f)
                if f.time:
                    columns[f"{schema}.{name}.{f.name}_text"] = f"{f.name} exactly as written (before conversion to UTC)."
    return tables, columns


# Marts that carry their source's columns through unchanged.
CARRIED = {"marts.signal_opinions": "staging.signals"}


def column_comment(schema: str, table: str, column: str, generated: dict[str, str]) -> str | None:
    carried = CARRIED.get(f"{schema}.{table}")
    for key in (f"{schema}.{table}.{column}", f"{schema}.*.{column}", f"{carried}.{column}"):
        if key in TABLE_COLUMNS:
            return TABLE_COLUMNS[key]
        if key in generated:
            return generated[key]
    if column.endswith("_fold"):
        return (f"How {column[:-5]} was resolved to an instant: utc | offset | epoch | unambiguous | "
                "fold_first | fold_second (a naive local time in a repeated hour, see README: Local times).")
    if column.endswith("_text") and column != "raw_text":
        return f"{column[:-5]} exactly as written (before conversion to UTC)."
    return COLUMNS.get(column)


def apply_comments(con: duckdb.DuckDBPyConnection, specs: dict[str, SourceSpec] | None = None) -> list[str]:
    """Comment every table and column present; return ``schema.table[.column]`` left undescribed."""
    from dagster_project.sources import builtin_sources

    generated_tables, generated_columns = source_comments(specs or builtin_sources())
    tables = {**generated_tables, **TABLES}
    missing = []
    present = con.execute(
        "select schema_name, table_name, comment from duckdb_tables() where database_name = current_database() "
        "order by all").fetchall()
    # Each comment is a catalog write: only tables rebuilt since the last run lack theirs.
    described: dict[tuple[str, str], dict[str, str | None]] = {}  # by table, in column order
    for s, t, c, comment in con.execute(
            "select schema_name, table_name, column_name, comment from duckdb_columns() "
            "where database_name = current_database()").fetchall():
        described.setdefault((s, t), {})[c] = comment
    statements = []
    for schema, table, comment in present:
        name = f"{schema}.{table}"
        qualified = f'"{schema}"."{table}"'
        if name in tables:
            if comment != tables[name]:
                statements.append(f"comment on table {qualified} is {lit(tables[name])}")
        else:
            missing.append(name)
        for column, old in described.get((schema, table), {}).items():
            text = column_comment(schema, table, column, generated_columns)
            if text is None:
                missing.append(f"{name}.{column}")
                continue
            if old != text:
                statements.append(f'comment on column {qualified}."{column}" is {lit(text)}')
    if statements:
        # one transaction and one call: a full refresh rewrites ~800 comments, each committed
        # alone ~0.7 ms
        with transaction(con):
            con.execute(";\n".join(statements))
    return missing
