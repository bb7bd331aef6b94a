"""The last step of every run: publish the whole state as one snapshot, or nothing."""

import dagster as dg

from dagster_project.catalog import apply_comments
from dagster_project.defs.marts import TABLE_KEYS
from dagster_project import privacy
from dagster_project.publishing import PublishError, gate_state, publish_snapshot, watermarks
from dagster_project.publishing.snapshot import source_folders
from dagster_project.resources import FlywheelResource
from dagster_project.sources import builtin_sources, load_sources
from dagster_project.state import WRITER_TAGS, save_recent_runs

# Everything that writes the state database must finish (and pass its blocking checks) first.
UPSTREAM = [dg.AssetKey(["staging", name]) for name in builtin_sources()] + [
    dg.AssetKey(["staging", "weighted_examples"]), *TABLE_KEYS]


def not_materialised(context: dg.AssetExecutionContext) -> list[str]:
    """The assets upstream of the snapshot this run did not materialise. A run of part of the job
    (the UI's "Materialize selected", ``dg launch --assets``) published a snapshot mixing this
    run's tables with older ones built from other inputs (new staging rows, marts without them).
    A re-execution from failure counts as part of the job too: the steps its parent ran may have
    been built on since by other runs (a whole run again reuses what did not change)."""
    required = {*UPSTREAM, *(dg.AssetKey(["ingest", name]) for name in builtin_sources())}
    for record in context.instance.get_records_for_run(
            context.run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records:
        required.discard(record.event_log_entry.dagster_event.asset_key)
    return sorted(key.to_user_string() for key in required)


@dg.asset(
    key=["snapshot"],
    group_name="publish",
    deps=UPSTREAM,
    description="Publish every training set, analytics mart and the analyst warehouse as ONE snapshot "
    "(FLYWHEEL_EXPORT_DIR/current -> .snapshots/<version>, one atomic rename); unchanged partitions are "
    "hard-linked, a run with nothing new publishes nothing.",
    kinds={"parquet", "duckdb"},
    op_tags=WRITER_TAGS,
)
def snapshot(context: dg.AssetExecutionContext, flywheel: FlywheelResource) -> dg.MaterializeResult:
    settings = flywheel.settings()
    if missing := not_materialised(context):
        raise dg.Failure(description=(
            f"this run materialised part of the job ({len(missing)} upstream asset(s) not, e.g. {missing[0]}): "
            "a snapshot holds one consistent state; nothing was published: materialise flywheel_job "
            "(`flywheel run`; what did not change is reused)"), allow_retries=False)
    with flywheel.state() as con:
        try:
            gate_state(con)
        except PublishError as exc:
            raise dg.Failure(description=str(exc), allow_retries=False) from None
        # A rebuilt table loses its comments: describe them just before publishing.
        undescribed = apply_comments(con)
        if undescribed:
            context.log.warning(f"no description in dagster_project/catalog.py for: {', '.join(undescribed)}")
        if moved := settings.note_export_dir():
            context.log.warning(moved)
        def expire_in_snapshots() -> None:
            # Retention reaches the kept snapshots too (the current one was built from trimmed
            # bronze). (a source disabled in the sources file too: what the lake holds of it is
            # published)
            every = load_sources(settings.sources_file, disabled=True)
            for source, (expired, touched) in privacy.retention_in_snapshots(settings, list(every.values())).items():
                if expired:
                    privacy.record_erasure(con, "retention", {source: {"snapshot": expired}}, touched)

        try:
            result = publish_snapshot(
                con, export_dir=settings.export_dir, warehouse=settings.warehouse, run_id=context.run_id,
                pseudonym_key=flywheel.pseudonym_key(context.log), keep=settings.keep_snapshots,
                key_origin="FLYWHEEL_PSEUDONYM_KEY" if settings.pseudonym_key
                else f"the key in {settings.pseudonym_key_file}, FLYWHEEL_PSEUDONYM_KEY unset",
                allow_empty=settings.allow_empty, watermarks=watermarks(con),
                folders=source_folders(load_sources(settings.sources_file, disabled=True).values()))
        except Exception:
            # A publish refused (an emptied dataset) or failed: the expired records must not stay
            # readable in the current snapshot. The publish's error is the step's; a scrub that
            # fails too is a warning. (Not on Ctrl-C or a termination: stop, as asked.)
            try:
                expire_in_snapshots()
            except Exception as exc:  # noqa: BLE001 (the publish's error is the one to report)
                context.log.warning(f"retention in the kept snapshots failed too: {type(exc).__name__}: {exc}")
            raise
        expire_in_snapshots()
        if problem := save_recent_runs(con, settings):  # `flywheel status` lists this run, published or not
            context.log.warning(problem)
    for warning in result.warnings:
        context.log.warning(warning)
    if result.status == "unchanged":
        context.log.info(f"nothing changed since snapshot {result.version}: nothing published")
    shared = {p: d for p, d in (result.manifest or {}).get("datasets", {}).items() if d["kind"] != "internal"}
    return dg.MaterializeResult(metadata={
        "status": result.status,
        "version": result.version or "",
        "path": dg.MetadataValue.path(str(result.path or settings.export_dir)),
        "bytes_written": result.bytes_written,
        "bytes_reused": result.bytes_reused,
        "files_written": result.files_written,
        "files_reused": result.files_reused,
        "seconds": result.seconds,
        "datasets_hashed": len(result.hashed or []),  # the others' tables did not change: not read
        "datasets": dg.MetadataValue.md("| dataset | rows | files |\n|---|---|---|\n" + "\n".join(
            f"| {p} | {d['rows']:,} | {len(d['files'])} |" for p, d in sorted(shared.items()))),
    })
