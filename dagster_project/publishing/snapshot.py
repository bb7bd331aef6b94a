"""One snapshot per run: every dataset and the analyst warehouse switch together or not at all.

Layout under ``FLYWHEEL_EXPORT_DIR``::

    current -> .snapshots/<version>          the ONLY commit point (one atomic symlink rename)
    training -> current/training             fixed links through it (created once)
    analytics -> current/analytics
    .snapshots/<version>/manifest.json       one manifest per snapshot (written last)
    .snapshots/<version>/training/<name>/{train,test}-<YYYY-MM>.parquet
    .snapshots/<version>/analytics/<mart>/part-<YYYY-MM>.parquet
    .snapshots/<version>/internal/<schema>.<table>/part-*.parquet   (ingest, staging: warehouse only)
    .snapshots/<version>/warehouse.duckdb    views over this snapshot's files (flywheel_snapshot(): its directory)
    .snapshots/.objects/<key>.parquet        content-addressed, immutable; hard-linked into snapshots

and ``FLYWHEEL_WAREHOUSE`` is a symlink to ``<export dir>/current/warehouse.duckdb``.

A snapshot directory is built completely (objects written or reused, links, warehouse, every
view's directory checked against the manifest and every new view bound, manifest, fsync) before
``current`` is replaced: a kill, ENOSPC or error at any
point leaves the previous snapshot current. Snapshots newer than ``current`` are leftovers of
runs that never committed; the next publish removes them. A run whose every table hashes as in
the current snapshot, each with as many rows excluded as it says, publishes nothing
(``status="unchanged"``). Run-log tables (``ingest.runs``,
``ingest.validations``, ``ingest.excluded``, ``ingest.files`` whose ``last_run_id`` moves every
run, ``ingest.file_events``, ``ingest.erasures``, ``ingest.bronze_applied``) record the run
itself and do not count as change.

Nothing here imports Dagster.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb

from dagster_project import versions
from dagster_project.publishing import parquet
from dagster_project.publishing.parquet import (Dataset, Plan, commit_objects, fsync_all, fsync_dir, lit,
                                                on_connections, plan, q, sha256_file, write_all)
from dagster_project.privacy import MENTION_MIN
from dagster_project.settings import EXPORT_LINKS, SNAPSHOT_TREE
from dagster_project.state import side_cursors
from dagster_project.publishing.warehouse import build_warehouse, verify_warehouse
from transforms.pseudonyms import DOC_PATHS

FORMAT = "flywheel-snapshot/1"
SNAPSHOTS = SNAPSHOT_TREE
OBJECTS = ".objects"
CURRENT = EXPORT_LINKS[0]  # the link publishing moves; the others go through it
MANIFEST = "manifest.json"
WAREHOUSE_FILE = "warehouse.duckdb"
TRAINING = ("sft", "kto", "dpo", "weighted")
WAREHOUSE_SCHEMAS = ("ingest", "staging", "marts", "exports")  # raw.* stays private
# Bookkeeping about runs, not data: it changes every run (ingest.erasures is written after a
# publish, by retention on kept snapshots; ingest.bronze_applied moves with a bronze entry that
# changes no row: a file's new inode, mtime or ctime, a partial last line that grew), so it never
# makes a run "changed" on its own; it is published with the next snapshot that has new data.
RUN_LOG = frozenset({"ingest.runs", "ingest.validations", "ingest.excluded", "ingest.files", "ingest.file_events",
                     "ingest.erasures", "ingest.bronze_applied"})
# The run log's tables that grow by every run's rows, cut into files by the day a row was recorded
# (``recorded_at``, copies of reused results included): a publish hashes only the days of the rows
# appended since the last one (``_plan_run_log``), so its cost does not grow with the number of
# runs behind it. What keeps that sound: no row is ever updated; rows are deleted only by
# ``apply_drops`` (its own run's, appended after any publish) and by an erasure (then compacted);
# every row names its run, so no two rows hash alike.
APPEND_ONLY = frozenset({"ingest.validations", "ingest.excluded"})
# Columns holding a raw session or user id (staging names them so): pseudonymised when shared,
# and the values the privacy gate looks for in every shared dataset.
ID_COLUMN = r"(^|_)(session|user)_id"
FAULT_ENV = "FLYWHEEL_PUBLISH_FAULT"  # tests: "kill:<stage>" or "enospc:<stage>"
# Datasets hashed and written at once, each on a connection of its own (``parquet.on_connections``):
# a partition's COPY runs on one thread, and a dataset's hashing and sort keep two cores busy
# only part of the time.
WRITERS = 2
STAGES = ("hashed", "objects_staged", "objects_written", "files_linked", "warehouse_built", "manifest_written", "committed", "linked")

Hook = Callable[[str], None]


class PublishError(RuntimeError):
    pass


@dataclass
class PublishResult:
    status: str  # "published" | "unchanged"
    version: str | None
    path: Path | None
    manifest: dict | None
    bytes_written: int = 0
    bytes_reused: int = 0
    files_written: int = 0
    files_reused: int = 0
    seconds: float = 0.0
    hashed: list[str] | None = None  # datasets whose table was read and hashed (the others: unchanged versions)
    warnings: list[str] = field(default_factory=list)  # published, but worth a look (``check_privacy``)


def snapshots_dir(export_dir: Path) -> Path:
    return Path(os.path.abspath(export_dir)) / SNAPSHOTS


def current_version(export_dir: Path) -> str | None:
    link = Path(os.path.abspath(export_dir)) / CURRENT
    try:
        return Path(os.readlink(link)).name
    except OSError:
        return None


def read_manifest(export_dir: Path, version: str | None = None) -> dict | None:
    version = version or current_version(export_dir)
    if version is None:
        return None
    try:
        return json.loads((snapshots_dir(export_dir) / version / MANIFEST).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


# ---------------------------------------------------------------------------------------------
# What is published
# ---------------------------------------------------------------------------------------------

def datasets(con: duckdb.DuckDBPyConnection) -> list[Dataset]:
    """Every table of the warehouse schemas; exports and marts are shared (pseudonymised)."""
    from dagster_project.expectations import order_keys

    tables = con.execute(
        "select schema_name, table_name from duckdb_tables() where database_name = current_database() "
        f"and not temporary and schema_name in ({', '.join(lit(s) for s in WAREHOUSE_SCHEMAS)}) order by 1, 2"
    ).fetchall()
    listed: dict[tuple[str, str], list[str]] = {}
    for schema, name, column in con.execute(
            "select schema_name, table_name, column_name from duckdb_columns() where database_name = current_database() "
            f"and schema_name in ({', '.join(lit(s) for s in WAREHOUSE_SCHEMAS)}) order by 1, 2, column_index"
    ).fetchall():
        listed.setdefault((schema, name), []).append(column)
    out = []
    for schema, name in tables:
        table = f"{schema}.{name}"
        if schema == "exports":
            kind, path = "training", f"training/{name}"
        elif schema == "marts":
            kind, path = "analytics", f"analytics/{name}"
        else:
            kind, path = "internal", f"internal/{table}"
        columns = listed.get((schema, name), [])
        select = shared_select(table, columns) if kind != "internal" else f"select * from {q(schema)}.{q(name)}"
        out.append(Dataset(table=table, path=path, kind=kind, select=select, order=tuple(order_keys(table))))
    return out


def shared_select(table: str, columns: list[str]) -> str:
    """``select *`` with every raw id column replaced by its keyed pseudonym (and renamed so), every
    provenance path by what a shared dataset may say of it (``SHARED_PATHS``), and every document
    path by its form without session ids (``fw_doc_path``)."""
    schema, name = table.split(".", 1)
    replace, rename, joins = [], [], []
    for column in columns:
        if column in PROVENANCE_PATHS:
            alias = f"fw_p{len(joins)}"
            joins.append(f" left join {SHARED_PATHS} {alias} on {alias}.path = t.{q(column)}")
            replace.append(f"coalesce({alias}.shared, fw_provenance(t.{q(column)})) as {q(column)}")
            continue
        if column in DOC_PATHS:
            replace.append(f"fw_doc_path(t.{q(column)}) as {q(column)}")
            continue
        if not re.search(ID_COLUMN, column):
            continue
        # Sessions are pseudonymised through their opaque form, as in the training sets, so the
        # same session has the same pseudonym in every dataset (transforms/pseudonyms.py).
        function = "fw_session_pseudonym" if column.startswith("session_id") and "opaque" not in column \
            else "fw_pseudonym"
        replace.append(f"{function}(t.{q(column)}) as {q(column)}")
        rename.append(f"{q(column)} as {q(column.replace('_id', '_pseudonym', 1))}")
    base = f"select * from {q(schema)}.{q(name)}"
    if not replace:
        return base
    replaced = f"select t.* replace ({', '.join(replace)}) from {q(schema)}.{q(name)} t{''.join(joins)}"
    return f"select * rename ({', '.join(rename)}) from ({replaced})" if rename else replaced


def ensure_publish_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Created before a run's steps (``pipeline.prepare_state``), so the snapshot step's comments
    reach them before its first publish; and by a publish of a state no run prepared."""
    con.execute(f"create table if not exists {SHARED_PATHS} "
                "(path varchar primary key, shared varchar not null, rule varchar)")
    con.execute(f"create table if not exists {PUBLISHED_KEY} (key_sha256 varchar not null, snapshot varchar not null)")


def key_changed(con: duckdb.DuckDBPyConnection, secret: str | None) -> str | None:
    """The snapshot published with another pseudonym key than ``secret`` (its sha256), if the
    last publish that noted one was: every pseudonym of the shared datasets changes with the key."""
    row = con.execute(f"select key_sha256, snapshot from {PUBLISHED_KEY}").fetchone()
    return row[1] if row and row[0] != secret else None


def _note_key(con: duckdb.DuckDBPyConnection, secret: str | None, version: str, *, keep: bool = False) -> None:
    """``PUBLISHED_KEY``: the key ``version`` was published with (``keep``: only if none is noted,
    for a snapshot found unchanged: a lake upgraded from a version that noted none)."""
    if secret is None or (keep and con.execute(f"select count(*) from {PUBLISHED_KEY}").fetchone()[0]):
        return
    con.execute(f"delete from {PUBLISHED_KEY}")
    con.execute(f"insert into {PUBLISHED_KEY} values (?, ?)", [secret, version])


def note_shared_paths(con: duckdb.DuckDBPyConnection, secret: str | None, patterns: list[str],
                      folders: Iterable[str] = ()) -> str:
    """``SHARED_PATHS``: each raw file's path as the shared datasets publish it (``fw_provenance``),
    computed once per file, for the files new since the last publish (all of them when the key or
    the rule changed: a pattern fixed must reach the files already noted). Per row, its regexes
    and two digests cost ~7 µs: seconds of a full publish, whose datasets hold a million
    provenance paths, where a lake has thousands of files. ``patterns``: ``name_ids()``;
    ``folders``: the folder names the sources' globs spell out (``glob_folders``). Returns the
    rule's hash (the key's with it): what a shared dataset's files are a function of."""
    from transforms.pseudonyms import provenance_sql

    rule = hashlib.sha256(f"{secret}|{provenance_sql('path', patterns, folders)}".encode()).hexdigest()
    ensure_publish_tables(con)
    con.execute(f"delete from {SHARED_PATHS} where rule is distinct from ?", [rule])
    con.execute(f"insert into {SHARED_PATHS} select path, fw_provenance(path), ? from "
                f"(select distinct path from ingest.files) where path not in (select path from {SHARED_PATHS})",
                [rule])
    return rule


# The raw-file provenance columns (``path`` everywhere, two in a DPO pair): in shared datasets a
# person's id a file name carries is keyed, and a path outside the raw root loses its directories.
PROVENANCE_PATHS = ("path", "chosen_path", "rejected_path")
SHARED_PATHS = "lineage.shared_paths"
# The pseudonym key (its sha256) of the last snapshot published: a run with another one says so.
PUBLISHED_KEY = "lineage.published_key"


def name_ids() -> list[str]:
    """The file-name patterns the sources declare as carrying part of a person's id."""
    from dagster_project.sources import builtin_sources

    return [spec.name_id for spec in builtin_sources().values() if spec.name_id]


def source_folders(specs: Iterable | None = None) -> set[str]:
    """The folder names the sources' globs spell out (``specs``: the sources as configured; the
    built-in ones by default), which shared paths keep by name."""
    from dagster_project.sources import builtin_sources
    from transforms.pseudonyms import glob_folders

    return glob_folders(glob for spec in (specs if specs is not None else builtin_sources().values())
                        for glob in spec.globs)


# ---------------------------------------------------------------------------------------------
# Publishing
# ---------------------------------------------------------------------------------------------

def publish_snapshot(con: duckdb.DuckDBPyConnection, *, export_dir: Path, warehouse: Path, run_id: str,
                     pseudonym_key: bytes, keep: int = 5, allow_empty: bool = False,
                     watermarks: dict | None = None, hook: Hook | None = None,
                     writers: int = WRITERS, key_origin: str = "FLYWHEEL_PSEUDONYM_KEY",
                     folders: Iterable[str] | None = None) -> PublishResult:
    """Publish every table of ``con`` (the state database) as one snapshot, or nothing.
    ``writers``: tables hashed and written at once, each on a connection of its own;
    ``key_origin``: where ``pseudonym_key`` came from, for a warning that it changed."""
    from transforms.pseudonyms import register

    if keep < 1:
        raise PublishError(f"FLYWHEEL_KEEP_SNAPSHOTS={keep}: keep at least 1 snapshot (the current one)")
    started = time.perf_counter()
    hook = _fault_hook(hook)
    export_dir = Path(os.path.abspath(export_dir))
    snaps = export_dir / SNAPSHOTS
    objects = snaps / OBJECTS
    objects.mkdir(parents=True, exist_ok=True)
    with _locked(snaps / ".lock"), side_cursors(con, writers - 1) as others:
        _remove_leftovers(export_dir)
        cons = [con, *others]
        patterns, folders = name_ids(), sorted(folders if folders is not None else source_folders())
        for each in cons:
            register(each, pseudonym_key, patterns, folders)  # a connection's own macros
        _gate_validations(con, run_id)
        _ensure_run_columns(con)
        secret = versions.secret_hash(pseudonym_key)
        shared = note_shared_paths(con, secret, patterns, folders)
        rekeyed = [f"the pseudonym key ({key_origin}) is not the one snapshot {since} was published with: every "
                   "pseudonym of the training and analytics datasets changed with it (session_pseudonym, keyed ids, "
                   "file names) and no longer matches earlier snapshots'; if that was not meant, set the earlier key "
                   "back and run again"] if (since := key_changed(con, secret)) else []
        previous_version = current_version(export_dir)
        previous = read_manifest(export_dir) or {}
        before = previous.get("datasets", {})
        published = datasets(con)
        tables = versions.versions_of(con, [d.table for d in published])
        inputs = {d.path: _input_version(d, tables.get(d.table), shared) for d in published}
        # The run log changes every run and never decides "changed": it is hashed only to publish.
        # An unchanged dataset is its manifest entry (no statement); the others are hashed on
        # every connection at once.
        plans = {d.path: _reused(d, objects, inputs[d.path], before.get(d.path))
                 for d in published if d.table not in RUN_LOG}
        hashed = _largest_first(con, [d for d in published if d.path in plans and plans[d.path] is None])
        plans.update(zip((d.path for d in hashed), on_connections(
            cons, hashed, lambda c, d: _plan(c, d, objects, inputs[d.path], before.get(d.path), shared))))
        hook("hashed")
        # what a drop expectation keeps out of each table is published too: a run whose only new
        # record was excluded (a re-flush stamped years ahead: the table keeps its row) publishes
        # its ledger row, or the warehouse would not say why that record is missing
        built = versions.built_by(con)
        excluded = _excluded(con, run_id, built)
        unchanged = bool(previous) and _unchanged(plans, before, excluded)
        # an unchanged snapshot stands for this run only if it stands whole where it is
        damage = _damage(snaps / previous_version, previous) if unchanged else None
        if unchanged and damage is None:
            _note_input_versions(con, snaps / previous_version, previous, plans, inputs, tables)
            _record_snapshot(con, run_id, previous_version, "unchanged")
            _note_key(con, secret, previous_version, keep=True)
            ensure_links(export_dir, warehouse)  # idempotent; repairs a link someone removed
            return PublishResult("unchanged", previous_version, snaps / previous_version, previous,
                                 seconds=round(time.perf_counter() - started, 3),
                                 hashed=[p for p, pl in plans.items() if not pl.from_manifest])
        try:  # the publish's own refusals: not published, as a write that failed is
            _refuse_empty(plans, before, previous_version, allow_empty)
            privacy_warnings = check_privacy(con, plans)
        except PublishError:
            _record_not_published(con, run_id)
            raise

        created = datetime.now(timezone.utc)
        version = _next_version(snaps, created, run_id)
        _record_snapshot(con, run_id, version, "published", warnings=rekeyed)
        # the run log now holds this run; datasets keep their order in the manifest
        run_log = [d for d in published if d.path not in plans]
        plans.update(zip((d.path for d in run_log), on_connections(
            cons, run_log, lambda c, d: _plan_run_log(c, d, objects, before.get(d.path)))))
        plans = {d.path: plans[d.path] for d in published}

        snap = snaps / version
        committed = False
        try:
            snap.mkdir()
            manifest = _write_snapshot(cons, snap, plans, objects, run_id, created, previous_version, watermarks,
                                       hook, inputs, tables, previous, built, excluded)
            tmp = export_dir / f".{CURRENT}.link-{os.getpid()}"
            tmp.unlink(missing_ok=True)
            os.symlink(f"{SNAPSHOTS}/{version}", tmp)
            os.replace(tmp, export_dir / CURRENT)  # the commit
            committed = True
            hook("committed")
            fsync_dir(export_dir)
        except BaseException:
            # After the commit it is the current snapshot, whatever failed then (the directory's
            # fsync, a signal): kept and still recorded as published (it was removed, and
            # ``current`` named nothing)
            if not committed:
                shutil.rmtree(snap, ignore_errors=True)
                _record_not_published(con, run_id)
            raise
        _note_key(con, secret, version)  # (first: published with it, whatever fails after)
        ensure_links(export_dir, warehouse)
        hook("linked")
        prune(export_dir, keep)
        versions.prune_changes(con)  # the day lists older snapshots asked for, no longer needed
    parts = [p for pl in plans.values() for p in pl.parts]
    return PublishResult(
        "published", version, snap, manifest,
        bytes_written=sum(p.bytes for p in parts if not p.reused), bytes_reused=sum(p.bytes for p in parts if p.reused),
        files_written=sum(not p.reused for p in parts), files_reused=sum(p.reused for p in parts),
        seconds=round(time.perf_counter() - started, 3), hashed=[p for p, pl in plans.items() if not pl.from_manifest],
        warnings=privacy_warnings + ([f"snapshot {previous_version} was not whole where it stands ({damage}): "
                                      "published again"] if damage else []) + rekeyed)


def _write_snapshot(cons: list[duckdb.DuckDBPyConnection], snap: Path, plans: dict[str, Plan], objects: Path,
                    run_id: str, created: datetime, previous_version: str | None, watermarks: dict | None,
                    hook: Hook, inputs: dict[str, str | None], tables: dict[str, str | None], previous: dict,
                    built: dict[str, str], excluded: dict[str, int]) -> dict:
    con = cons[0]
    known = _known_objects(snap.parent)
    pending: dict[str, Path] = {}
    try:
        write_all(cons, list(plans.values()), objects, known, pending)
        hook("objects_staged")  # new objects are temp files: neither durable nor named yet
        commit_objects(pending, objects)
    except BaseException:
        for tmp in pending.values():
            tmp.unlink(missing_ok=True)
        raise
    hook("objects_written")
    views, directories = {}, []
    for path, planned in plans.items():
        target = snap / path
        target.mkdir(parents=True)
        for part in planned.parts:
            _link(objects / f"{part.key}.parquet", target / part.name)
        views[planned.dataset.table] = [(f"{path}/{p.name}", p.bytes) for p in planned.parts]
        directories.append(target)
    # The links must be durable before the commit, not before the warehouse is built: one pass.
    fsync_all(directories)
    hook("files_linked")
    # views whose directory and columns are the previous snapshot's: kept from its warehouse
    before = previous.get("datasets", {})
    kept = {planned.dataset.table for path, planned in plans.items()
            if (entry := before.get(path)) and entry.get("table") == planned.dataset.table
            and entry.get("columns") == planned.columns}
    warehouse = build_warehouse(
        con, snap / WAREHOUSE_FILE, views, kept=kept, previous_entry=previous.get("warehouse"),
        previous=snap.parent / previous_version / WAREHOUSE_FILE if previous_version else None)
    hook("warehouse_built")
    validation = validation_summary(con, run_id)
    manifest = {
        "format": FORMAT, "version": snap.name, "run_id": run_id, "created_at": created.isoformat(),
        "previous": previous_version,
        "source_watermarks": watermarks or {},
        "validation": validation,
        "warehouse": {"file": WAREHOUSE_FILE, **warehouse, "views": sorted(views)},
        "datasets": {path: {
            "table": p.dataset.table, "kind": p.dataset.kind, "rows": p.rows, "columns": p.columns,
            "content_hash": p.content_hash, "order_by": list(p.dataset.order),
            "input_version": inputs.get(path), "table_version": tables.get(p.dataset.table),
            "partition_sql": p.part_sql, "partition_rule": p.rule,
            "built_by_run": built.get(p.dataset.table, run_id),
            "excluded_rows": excluded.get(p.dataset.table, 0),
            "validation": validation["tables"].get(p.dataset.table, {"status": "not validated"}),
            "files": [{"name": f.name, "rows": f.rows, "bytes": f.bytes, "sha256": f.sha256, "object": f.key,
                       "reused": f.reused} for f in p.parts],
            **({"appended_through": p.mark} if p.mark else {}),
        } for path, p in plans.items()},
    }
    _write_manifest(snap, manifest)
    fsync_all([d for d in (snap, snap / "training", snap / "analytics", snap / "internal") if d.exists()])
    fsync_dir(snap.parent)
    hook("manifest_written")
    return manifest


def _largest_first(con: duckdb.DuckDBPyConnection, published: list[Dataset]) -> list[Dataset]:
    """``published``, the tables with the most rows first (DuckDB's estimate): hashed at once
    on a few connections, a large table taken last would run alone."""
    if len(published) < 2:
        return published
    sizes = dict(con.execute("select schema_name || '.' || table_name, estimated_size from duckdb_tables() "
                             "where database_name = current_database() and not temporary").fetchall())
    return sorted(published, key=lambda d: -(sizes.get(d.table) or 0))


def _input_version(dataset: Dataset, table_version: str | None, shared: str | None) -> str | None:
    """What ``dataset``'s published files are a function of: its table's version, the projection,
    the publisher's format and (shared datasets) ``shared``, the hash of the pseudonym key and of
    the rule that publishes raw paths (``note_shared_paths``). With the key's alone, a folder
    that rule newly keyed (per-user folders, after an upgrade or a glob changed) stayed by name
    in every dataset no row of which changed, a full refresh included. None for a table without
    a version (the ingest bookkeeping): hashed every run."""
    return None if table_version is None else versions.key(
        FORMAT, parquet.FORMAT, table_version, dataset.select, dataset.order, shared if dataset.shared else None)


def _reused(dataset: Dataset, objects: Path, input_version: str | None, entry: dict | None) -> Plan | None:
    """The current manifest's entry when the dataset's inputs are those it recorded (and its
    objects are all there)."""
    if input_version is not None and entry and entry.get("input_version") == input_version:
        return parquet.reuse(dataset, entry, objects)
    return None


def _plan(con: duckdb.DuckDBPyConnection, dataset: Dataset, objects: Path, input_version: str | None,
          entry: dict | None, shared: str | None) -> Plan:
    """A dataset ``_reused`` could not take from the manifest: when only the table changed since
    the entry (same projection and key) and its builds said on which event days, the entry with
    just those days hashed again; else every row hashed."""
    if input_version is not None and entry and entry.get("input_version") != input_version:
        if entry.get("input_version") == _input_version(dataset, entry.get("table_version"), shared):
            days = versions.changed_days(con, dataset.table, since=entry.get("table_version"))
            replanned = None if days is None else parquet.replan(con, dataset, objects, entry, days)
            if replanned is not None:
                return replanned
    return plan(con, dataset, objects)


def _plan_run_log(con: duckdb.DuckDBPyConnection, dataset: Dataset, objects: Path, entry: dict | None) -> Plan:
    """A run-log dataset, hashed whole, except an ``APPEND_ONLY`` table whose rows up to the
    previous entry's mark are as they were: then only the days of the rows appended since (a
    daily run's: its day). Measured on a run log of 1M validations and 1M exclusions (~3,000
    runs): hashing both whole cost 231 + 224 ms a publish, a next day's rows 21-29 + 29-51 ms."""
    mark = parquet.append_mark(con, dataset.table) if dataset.table in APPEND_ONLY else None
    planned = None
    if mark is not None and entry and entry.get("appended_through"):
        days = parquet.appended_days(con, dataset.table, entry["appended_through"])
        if days is not None:
            planned = parquet.replan(con, dataset, objects, entry, days)
    planned = planned or plan(con, dataset, objects)
    planned.mark = mark
    return planned


def _note_input_versions(con: duckdb.DuckDBPyConnection, snap: Path, manifest: dict, plans: dict[str, Plan],
                         inputs: dict[str, str | None], tables: dict[str, str | None]) -> None:
    """Nothing changed, but tables were rebuilt (a full refresh): the current manifest's entries
    are what the new versions produce, so say so, or every later no-op would hash them again.
    Only these private fields change (temp file, fsync, rename). ``built_by_run`` stays: the
    snapshot's warehouse holds that run's ledger rows (``ingest.excluded``), not the rebuild's,
    and status and the README's query read the exclusions by it."""
    changed = False
    for path, planned in plans.items():
        entry = manifest["datasets"][path]
        now = {"input_version": inputs.get(path), "table_version": tables.get(planned.dataset.table),
               "partition_sql": planned.part_sql, "partition_rule": planned.rule}
        if inputs.get(path) and any(entry.get(k) != v for k, v in now.items()):
            entry.update(now)
            changed = True
    if not changed:
        return
    _write_manifest(snap, manifest)
    fsync_dir(snap)


def _write_manifest(snap: Path, manifest: dict) -> None:
    """Replace ``snap``'s manifest whole or not at all: temp file, fsync, rename."""
    tmp = snap / f".{MANIFEST}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            # one string, one write: json.dump writes every token on its own (~50 ms for 1,400 files)
            fh.write(json.dumps(manifest, indent=1, ensure_ascii=False, default=str))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        if exc.filename is not None:
            raise
        # a write to an open file names none: a full disk was a bare "[Errno 28] No space left on device"
        raise OSError(exc.errno, exc.strerror, str(tmp)) from exc
    os.replace(tmp, snap / MANIFEST)


def _damage(snap: Path, manifest: dict) -> str | None:
    """Why the current snapshot does not stand whole where it is, or None. Its warehouse's views
    read files by absolute path: in a lake moved elsewhere every view failed (the directory they
    name is gone), and a run with nothing new said "nothing changed". A file removed by hand was
    never put back, nor the warehouse file. Names and sizes only for the Parquet files: a stat per
    file (~1,100 on the bench lake), their content is not read. The warehouse file is hashed (0.5 to
    1.1 MB there): an analyst's ``duckdb.connect(path)`` opens it read-write, and a view dropped or
    replaced there (same size) was published on, "nothing changed", until the data changed. (A
    copy beside the original reads the original's files until it publishes: the directory its
    views name is still there.)"""
    root = (manifest.get("warehouse") or {}).get("root")
    if root is None:  # (published once again, as the lake may have moved since)
        return "an older version's manifest does not say which directory its warehouse reads"
    if root != str(snap.resolve()) and not os.path.isdir(root):
        return f"its warehouse reads {root}, which is gone: the lake moved"
    if not (snap / WAREHOUSE_FILE).is_file():
        return f"{snap / WAREHOUSE_FILE} is gone"
    published = (manifest.get("warehouse") or {}).get("sha256")
    if published and sha256_file(snap / WAREHOUSE_FILE) != published:
        return (f"{snap / WAREHOUSE_FILE} was changed after it was published (opened read-write: "
                "`duckdb.connect(path, read_only=True)` reads it without a chance of that)")
    for path, entry in manifest.get("datasets", {}).items():
        for f in entry.get("files", []):
            try:
                size = os.stat(snap / path / f["name"]).st_size
            except OSError:
                return f"{snap / path / f['name']} is gone"
            if size != f.get("bytes"):
                return f"{snap / path / f['name']} is {size:,} bytes, not {f.get('bytes'):,}"
    return None


def _unchanged(plans: dict[str, Plan], before: dict, excluded: dict[str, int]) -> bool:
    compared = {p for p, pl in plans.items() if pl.dataset.table not in RUN_LOG}
    if compared != {p for p, d in before.items() if d.get("table") not in RUN_LOG}:
        return False
    return all(before[p].get("content_hash") == plans[p].content_hash
               and before[p].get("excluded_rows", 0) == excluded.get(plans[p].dataset.table, 0) for p in compared)


# Marts that list exceptions, empty in the normal course: feedback whose interaction has not
# arrived (it arrives), signals strong enough to promote (they decay), conflicting signals (they
# are resolved), relevant files retrieval missed. Emptied, they are right: published. (Every
# daily run failed once the last strong signal had decayed below promotion, until
# FLYWHEEL_ALLOW_EMPTY turned the guard off for every dataset, the training sets included.)
EXCEPTION_LISTS = frozenset({"marts.orphan_feedback", "marts.promotion_candidates", "marts.signal_conflicts",
                             "marts.missed_files"})
# The mart of the session ratings alone, whose records retention removes from every layer (180
# days by default): emptied when the last rating expires, as the lake's own rule says. (Every
# daily run failed from then on, the expired ratings staying in the current snapshot, until
# FLYWHEEL_ALLOW_EMPTY turned the guard off for every dataset.) session_rating_matches is one
# row of counts, never empty.
RETAINED = frozenset({"marts.session_satisfaction"})


def _refuse_empty(plans: dict[str, Plan], before: dict, version: str | None, allow_empty: bool) -> None:
    if allow_empty:
        return
    for path, planned in plans.items():
        was = (before.get(path) or {}).get("rows") or 0
        if planned.dataset.shared and planned.rows == 0 and was > 0 \
                and planned.dataset.table not in EXCEPTION_LISTS | RETAINED:
            raise PublishError(
                f"{path} ({planned.dataset.table}) would be published empty over {was:,} rows of snapshot "
                f"{version}; nothing was published. If that is intended, rerun with `flywheel run --allow-empty` "
                "(or FLYWHEEL_ALLOW_EMPTY=1).")


def check_privacy(con: duckdb.DuckDBPyConnection, plans: dict[str, Plan]) -> list[str]:
    """Blocking: no text column of a shared dataset holds a raw session/user id from staging.
    Returns warnings: the columns holding a value equal to an id shorter than ``MENTION_MIN``.

    Such a short id cannot be told from an ordinary value (user "2", strategy arm "2"): blocking
    on it stopped every publish until the data changed, so it is published and the column named
    (``flywheel forget`` matches short ids only where a value is the id, for the same reason).
    Every producer's session ids are longer, so a column leaking them still blocks.

    Only partitions being written are read: a reused object passed this check when it was made.
    The new rows' distinct text values are looked up in staging's id columns (a semi-join), not
    staging's every id collected first: that set grows with the lake, the new rows with the run.
    Columns are counted one by one only when some value matched, to name them.
    """
    id_columns = con.execute(
        "select table_name, column_name from duckdb_columns() where database_name = current_database() "
        "and schema_name = 'staging' and data_type = 'VARCHAR' and regexp_matches(column_name, ?)",
        [ID_COLUMN]).fetchall()
    checked = []
    for path, planned in plans.items():
        new = [p.stem for p in planned.parts if not p.reused and p.rows]
        text = [c["name"] for c in planned.columns if c["type"] == "VARCHAR"]
        if planned.dataset.shared and new and text:
            checked.append((path, planned, text, parquet.rows_of(planned, new)))
    if not id_columns or not checked:
        return []
    candidates = " union ".join(
        f"select unnest([{', '.join(q(c) for c in text)}]) as v from ({planned.dataset.select}) where {where}"
        for _, planned, text, where in checked)
    union = " union all ".join(f"select {q(c)} as v from staging.{q(t)}" for t, c in id_columns)
    con.execute(f"create or replace temp table __fw_raw_ids as with new as ({candidates}) "
                f"select distinct v, length(v) >= {MENTION_MIN} as long from ({union}) "
                "where v <> '' and v in (select v from new)")
    try:
        if not con.execute("select count(*) from __fw_raw_ids").fetchone()[0]:
            return []
        problems, warnings = [], []
        for path, planned, text, where in checked:
            counts = con.execute(
                "select " + ", ".join(
                    f"count(*) filter (where {q(c)} in (select v from __fw_raw_ids where long)), "
                    f"count(*) filter (where {q(c)} in (select v from __fw_raw_ids where not long))" for c in text)
                + f" from ({planned.dataset.select}) where {where}").fetchone()
            for c, long, short in zip(text, counts[0::2], counts[1::2]):
                if long:
                    problems.append(f"{path}.{c}: {long:,} rows")
                elif short:
                    warnings.append(f"{path}.{c}: {short:,} new rows hold a value equal to a raw session/user id "
                                    f"shorter than {MENTION_MIN} characters, published (such an id cannot be told "
                                    "from an ordinary value); pseudonymise the column if it holds ids")
        if problems:
            raise PublishError(
                f"raw session/user ids in shared datasets ({'; '.join(problems)}); nothing was published. "
                "Pseudonymise the column (name it like *session_id*/*user_id* or pseudonymise it in its SQL).")
        return warnings
    finally:
        con.execute("drop table if exists __fw_raw_ids")


def _gate_validations(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    try:
        failed = con.execute("select distinct table_name from ingest.validations where run_id = ? and blocking "
                             "and not success order by 1", [run_id]).fetchall()
    except duckdb.CatalogException:
        return
    if failed:
        raise PublishError(f"blocking expectations failed in this run on {', '.join(r[0] for r in failed)}; "
                           "nothing was published (see ingest.validations)")


def gate_state(con: duckdb.DuckDBPyConnection) -> None:
    """Every published table with a suite is the version its last validation ran on, and that
    validation passed. The run's own results are not enough: a run of part of the job (the
    ``snapshot`` asset alone, from the UI or ``dg launch``) validates nothing, and published the
    rows a failed run had left in the state database (a blocking check failed on them)."""
    from dagster_project.expectations import SUITES

    tables = {d.table for d in datasets(con)}
    current = {t: v for t, v in versions.get_many(con, sorted(t for t in tables if t in SUITES)).items()
               if v is not None}  # (a table the pipeline did not build has no version)
    suites = sorted(current)
    versions.ensure_validated(con)
    last = {t: (k, passed) for t, k, passed in con.execute(
        f"select table_name, validation_key, passed from {versions.VALIDATED} "
        "where table_name in (select unnest(?::varchar[]))", [suites]).fetchall()}
    stale = [t for t in suites if last.get(t, (None, False)) != (versions.validation_key_of(current[t]), True)]
    if stale:
        failed = [t for t in stale if t in last and not last[t][1]
                  and last[t][0] == versions.validation_key_of(current[t])]
        raise PublishError(
            f"{', '.join(stale[:5])}{f' and {len(stale) - 5} more' if len(stale) > 5 else ''}: "
            f"{'failed their last validation' if failed == stale else 'not validated as they are now'} "
            "(a failed run's rows, or a run of part of the job); nothing was published: run the whole job "
            "(`flywheel run`, or flywheel_job)")


def validation_summary(con: duckdb.DuckDBPyConnection, run_id: str) -> dict:
    try:
        rows = con.execute(
            "select table_name, count(*), count_if(not success), count_if(not success and blocking) "
            "from ingest.validations where run_id = ? group by 1 order by 1", [run_id]).fetchall()
    except duckdb.CatalogException:
        rows = []
    tables = {t: {"status": "failed" if b else "passed", "expectations": n, "failed": f, "failed_blocking": b}
              for t, n, f, b in rows}
    return {"status": "failed" if any(v["failed_blocking"] for v in tables.values()) else
            ("passed" if tables else "not validated"),
            "expectations": sum(v["expectations"] for v in tables.values()),
            "failed": sum(v["failed"] for v in tables.values()), "tables": tables}


def watermarks(con: duckdb.DuckDBPyConnection) -> dict:
    rows = con.execute("select source, count(*), sum(offset_bytes)::bigint, max(high_water_mark), "
                       "max(last_run_id) from ingest.files group by source order by source").fetchall()
    return {s: {"files": f, "bytes_consumed": b, "high_water_mark": h, "last_run_id": r} for s, f, b, h, r in rows}


def _excluded(con: duckdb.DuckDBPyConnection, run_id: str, built: dict[str, str]) -> dict[str, int]:
    """Rows kept out of each table now (a reused table counts the ledger rows of the run that built it)."""
    out: dict[str, int] = {}
    for table, _, n in versions.exclusions(con, run_id, built=built):
        out[table] = out.get(table, 0) + n
    return out


def _ensure_run_columns(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("alter table ingest.runs add column if not exists snapshot varchar")
    con.execute("alter table ingest.runs add column if not exists snapshot_status varchar")


def _record_snapshot(con: duckdb.DuckDBPyConnection, run_id: str, version: str | None, status: str,
                     warnings: list[str] | None = None) -> None:
    from dagster_project.state import record_run

    record_run(con, run_id, mode="incremental", status="success", warnings=warnings)
    con.execute("update ingest.runs set snapshot = ?, snapshot_status = ? where run_id = ?", [version, status, run_id])


def _record_not_published(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    try:
        con.execute("update ingest.runs set snapshot = null, snapshot_status = 'not published' where run_id = ?",
                    [run_id])
    except duckdb.Error:  # (the failure being recorded may be the database's own)
        pass


# ---------------------------------------------------------------------------------------------
# Links, legacy layouts, retention
# ---------------------------------------------------------------------------------------------

def ensure_links(export_dir: Path, warehouse: Path) -> None:
    """``training``/``analytics`` -> ``current/…`` and the warehouse -> ``current/warehouse.duckdb``.

    A legacy layout (real directories, a regular warehouse file) is replaced once: a directory is
    renamed into ``.snapshots/.legacy-*`` and the link put in its place right after (a directory
    cannot be replaced atomically by a link; erasure scrubs what it holds); the warehouse file,
    derived from the state database, by one atomic rename of the link over it.
    """
    export_dir = Path(os.path.abspath(export_dir))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    for name in EXPORT_LINKS[1:]:
        _point(export_dir / name, f"{CURRENT}/{name}", export_dir / SNAPSHOTS / f".legacy-{stamp}-{name}")
    warehouse = Path(os.path.abspath(warehouse))
    warehouse.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(export_dir / CURRENT / WAREHOUSE_FILE, warehouse.parent)
    _point(warehouse, target, None)


def _point(link: Path, target: str, aside: Path | None) -> None:
    if link.is_symlink() and os.readlink(link) == target:
        return
    tmp = link.with_name(f".{link.name}.link-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    if link.is_dir() and not link.is_symlink():
        os.rename(link, aside or link.with_name(f".{link.name}.legacy"))
    os.replace(tmp, link)
    fsync_dir(link.parent)


def prune(export_dir: Path, keep: int) -> list[str]:
    """Keep the newest ``keep`` snapshots (never deleting the current one); drop unused objects."""
    snaps = snapshots_dir(export_dir)
    current = current_version(export_dir)
    removed = []
    for version in _versions(snaps)[max(keep, 1):]:
        if version != current:
            shutil.rmtree(snaps / version, ignore_errors=True)
            removed.append(version)
    collect_objects(snaps)
    return removed


def collect_objects(snaps: Path, known: set[str] | None = None) -> int:
    """Delete the objects no kept snapshot's manifest names; returns how many. ``known``: the
    objects the kept manifests name, when the caller has just read them all.

    A hard link from a snapshot proves an object is used, so only objects with no other link are
    looked up. Their link count alone does not prove them unused: a snapshot whose files are
    copies (a file system without hard links, where ``_link`` copies; a backup restored without
    them) names objects it does not link, and deleting those would make every later publish
    write every file again instead of reusing it. A manifest that cannot be read keeps them all."""
    candidates = [obj for obj in (snaps / OBJECTS).glob("*.parquet") if obj.stat().st_nlink <= 1]
    if candidates and known is None:
        known = _referenced_objects(snaps)
    if not candidates or known is None:
        return 0
    unused = [obj for obj in candidates if obj.stem not in known]
    for obj in unused:
        obj.unlink(missing_ok=True)
    return len(unused)


VERSION_STAMP = "%Y%m%dT%H%M%S%f"


def _next_version(snaps: Path, created: datetime, run_id: str) -> str:
    """The new snapshot's name: its creation time, later than every kept snapshot's.

    Names order snapshots (``prune`` keeps the newest, ``_remove_leftovers`` takes one newer than
    ``current`` for a publish that never committed): a clock set back (NTP, a VM restored, a
    machine moved across a wrong time zone) named the new snapshot older than the others, and its
    publish deleted every older one as a leftover. Then the name is the newest's time + 1 µs;
    the manifest's ``created_at`` keeps the clock's time."""
    run = re.sub(r"[^A-Za-z0-9]", "", run_id)[:8] or "run"
    stamp = created
    newest = next(iter(_versions(snaps)), None)
    if newest is not None and f"{stamp:{VERSION_STAMP}}Z" <= newest:
        try:
            stamp = datetime.strptime(newest[:21], VERSION_STAMP).replace(tzinfo=timezone.utc) + timedelta(microseconds=1)
        except ValueError:  # not a name this module made: the clock's time
            pass
    return f"{stamp:{VERSION_STAMP}}Z-{run}"


def _versions(snaps: Path) -> list[str]:
    if not snaps.exists():
        return []
    return sorted((p.name for p in snaps.iterdir() if p.is_dir() and not p.name.startswith(".")), reverse=True)


def _remove_leftovers(export_dir: Path) -> None:
    """What killed publishes left: temp objects and links, snapshots that were never committed."""
    snaps = export_dir / SNAPSHOTS
    current = current_version(export_dir)
    for version in _versions(snaps):
        if _uncommitted(snaps, version, current):
            shutil.rmtree(snaps / version, ignore_errors=True)
    for tmp in (snaps / OBJECTS).glob(".tmp-*"):  # temp objects, and the directories COPY wrote them to
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
    for link in export_dir.glob(f".{CURRENT}.link-*"):
        link.unlink(missing_ok=True)


def _uncommitted(snaps: Path, version: str, current: str | None) -> bool:
    """Versions are creation times: one newer than ``current`` never became current. Without a
    ``current`` link only a manifest-less (half-built) directory surely is not a snapshot."""
    return version > current if current else not (snaps / version / MANIFEST).exists()


def _kept_manifests(snaps: Path) -> Iterator[dict | None]:
    """Each kept snapshot's manifest, None for one that is not JSON. A snapshot a killed publish
    left without one names nothing yet: skipped."""
    for version in _versions(snaps):
        try:
            text = (snaps / version / MANIFEST).read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        try:
            manifest = json.loads(text)
        except json.JSONDecodeError:
            manifest = None
        yield manifest


def _referenced_objects(snaps: Path) -> set[str] | None:
    """The objects every kept snapshot's manifest names; None when one cannot be read."""
    try:
        manifests = list(_kept_manifests(snaps))
    except OSError:
        return None
    if any(m is None for m in manifests):
        return None
    return set().union(*map(manifest_objects, manifests))


def manifest_objects(manifest: dict) -> set[str]:
    return {f["object"] for entry in manifest.get("datasets", {}).values() for f in entry.get("files", [])}


def _known_objects(snaps: Path) -> dict[str, tuple[str, int]]:
    """Object -> (sha256, bytes), as the readable kept manifests record them."""
    known = {}
    for manifest in _kept_manifests(snaps):
        for entry in (manifest or {}).get("datasets", {}).values():
            for f in entry.get("files", []):
                known.setdefault(f["object"], (f["sha256"], f["bytes"]))
    return known


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copyfile(source, target)  # no hard links here: a copy is as immutable, just bigger


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _fault_hook(hook: Hook | None) -> Hook:
    """``FLYWHEEL_PUBLISH_FAULT=kill:<stage>`` SIGKILLs, ``enospc:<stage>`` raises ENOSPC (tests)."""
    fault = os.environ.get(FAULT_ENV, "")
    action, _, at = fault.partition(":")

    def run(stage: str) -> None:
        if hook is not None:
            hook(stage)
        if stage == at and action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if stage == at and action == "enospc":
            raise OSError(errno.ENOSPC, f"No space left on device (injected at {stage})")

    return run


# ---------------------------------------------------------------------------------------------
# Reading: status, verification
# ---------------------------------------------------------------------------------------------

def list_snapshots(export_dir: Path) -> list[dict]:
    """Kept snapshots, newest first: version, path, current, run_id, created_at, datasets, rows.
    Not a directory a publish has not committed (being written now, or left by a killed one for
    the next publish to remove, ``_remove_leftovers``)."""
    snaps = snapshots_dir(export_dir)
    current = current_version(export_dir)
    out = []
    for version in _versions(snaps):
        if _uncommitted(snaps, version, current):
            continue
        manifest = read_manifest(export_dir, version) or {}
        shared = {p: d for p, d in manifest.get("datasets", {}).items() if d.get("kind") != "internal"}
        out.append({"version": version, "path": str(snaps / version), "current": version == current,
                    "run_id": manifest.get("run_id"), "created_at": manifest.get("created_at"),
                    "datasets": len(shared), "rows": sum(d.get("rows", 0) for d in shared.values()),
                    "validation": (manifest.get("validation") or {}).get("status")})
    return out


def status(export_dir: Path) -> dict:
    """What ``flywheel status`` shows about publishing (data only; the CLI renders it)."""
    snapshots = list_snapshots(export_dir)
    manifest = read_manifest(export_dir) or {}
    return {"current": current_version(export_dir), "export_dir": str(Path(os.path.abspath(export_dir))),
            "snapshots": snapshots,
            "datasets": [{"dataset": p, "rows": d["rows"], "files": len(d["files"]),
                          "excluded_rows": d.get("excluded_rows", 0),
                          "validation": (d.get("validation") or {}).get("status")}
                         for p, d in sorted(manifest.get("datasets", {}).items()) if d.get("kind") != "internal"]}


def verify_snapshot(export_dir: Path, version: str | None = None) -> dict:
    """Every file matches its manifest hash and every warehouse view reads; returns the manifest."""
    from dagster_project.publishing.parquet import sha256_file

    version = version or current_version(export_dir)
    manifest = read_manifest(export_dir, version)
    if manifest is None:
        raise PublishError(f"{export_dir}: snapshot {version} has no readable manifest")
    snap = snapshots_dir(export_dir) / version
    for path, entry in manifest["datasets"].items():
        names = sorted(p.name for p in (snap / path).iterdir())
        if names != sorted(f["name"] for f in entry["files"]):
            raise PublishError(f"{snap / path}: files {names} differ from the manifest")
        for f in entry["files"]:
            if sha256_file(snap / path / f["name"]) != f["sha256"]:
                raise PublishError(f"{snap / path / f['name']}: content differs from the manifest")
    verify_warehouse(snap / WAREHOUSE_FILE, {d["table"]: d["rows"] for d in manifest["datasets"].values()})
    return manifest


def run_outcome(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[str | None, str | None]:
    """(snapshot, snapshot_status) that the run recorded in ``ingest.runs``."""
    try:
        row = con.execute("select snapshot, snapshot_status from ingest.runs where run_id = ?", [run_id]).fetchone()
    except duckdb.Error:
        return None, None
    return (row[0], row[1]) if row else (None, None)


def describe_run(settings, version: str | None, outcome: str | None) -> str:
    """One line for the CLI: which snapshot a run published (``run_outcome``), or that it
    published nothing."""
    path = snapshots_dir(settings.export_dir) / version if version else None
    if outcome == "unchanged":
        return f"Nothing changed since snapshot {version}: nothing published."
    if outcome == "published":
        return f"Published snapshot {version} ({path}); {settings.export_dir / CURRENT} points to it."
    return "No snapshot published by this run."
