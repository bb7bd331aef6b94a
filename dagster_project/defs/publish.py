"""Publishing the analyst warehouse: the last step of every run."""

import dagster as dg

from dagster_project.catalog import apply_comments
from dagster_project.metadata import markdown_table
from dagster_project.resources import FlywheelResource
from dagster_project.defs.exports import PUBLISHED_KEYS
from dagster_project.defs.marts import TABLE_KEYS
from dagster_project.sources import builtin_sources
from dagster_project.publish import publish_warehouse
from dagster_project.state import record_run

# Everything that writes the state database must finish before it is published.
UPSTREAM = [dg.AssetKey(["staging", name]) for name in builtin_sources()] + [
    dg.AssetKey(["staging", "weighted_examples"]),
    *TABLE_KEYS,
    *PUBLISHED_KEYS,
]


@dg.asset(
    key=["warehouse"],
    group_name="publish",
    deps=UPSTREAM,
    description="Swap the freshly built state in as FLYWHEEL_WAREHOUSE (new file, checkpoint, "
    "os.replace): analysts' open connections never block a run and see new data on reconnect.",
    kinds={"duckdb"},
    op_tags={"flywheel/warehouse": "writer"},
)
def warehouse(context: dg.AssetExecutionContext, flywheel: FlywheelResource) -> dg.MaterializeResult:
    settings = flywheel.settings()
    with flywheel.state() as con:
        record_run(con, context.run_id, mode="incremental", status="success")
        # Tables are rebuilt every run (losing their comments): describe them just before publishing.
        undescribed = apply_comments(con)
        if undescribed:
            context.log.warning(f"no description in dagster_project/catalog.py for: {', '.join(undescribed)}")
        tables = markdown_table(con, "select schema_name || '.' || table_name as table_name, estimated_size as rows "
                                     "from duckdb_tables() where schema_name not in ('raw') order by 1")
        # New file beside the warehouse (checkpointed copy of the state), fsync, os.replace.
        publish_warehouse(con, settings.warehouse)
        size = settings.warehouse.stat().st_size
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(settings.warehouse)),
        "size_mb": round(size / 1e6, 2),
        "tables": dg.MetadataValue.md(tables),
    })
