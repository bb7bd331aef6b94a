"""One factory for assets that (re)build DuckDB tables in the state database.

Marts and export tables differ only in which tables they read and which builder makes them, so
each is declared as data (``TableGroup``) and turned into a Dagster multi-asset here.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dagster as dg
import duckdb

from dagster_project.metadata import preview
from dagster_project.resources import FlywheelResource
from dagster_project.validation import apply_drops

WAREHOUSE_TAG = {"flywheel/warehouse": "writer"}

Builder = Callable[[duckdb.DuckDBPyConnection, FlywheelResource, dg.AssetExecutionContext], dict[str, int]]


@dataclass(frozen=True)
class TableGroup:
    name: str  # the op name
    group: str  # Dagster group
    tables: Sequence[str]  # "schema.table" built, in order
    deps: Sequence[str]  # asset keys read, like "staging/interactions"
    build: Builder
    description: str
    headline: Callable[[duckdb.DuckDBPyConnection], dict] | None = None  # extra metadata

    def key(self, table: str) -> dg.AssetKey:
        return dg.AssetKey(table.split("."))


def table_assets(spec: TableGroup) -> dg.AssetsDefinition:
    @dg.multi_asset(
        name=spec.name,
        specs=[
            dg.AssetSpec(
                key=spec.key(table), group_name=spec.group, kinds={"duckdb"},
                deps=[dg.AssetKey.from_user_string(d) for d in spec.deps],
                description=f"{table}: {spec.description}",
            )
            for table in spec.tables
        ],
        op_tags=WAREHOUSE_TAG,
    )
    def _build(context: dg.AssetExecutionContext, flywheel: FlywheelResource):
        with flywheel.state() as con:
            counts = spec.build(con, flywheel, context)
            # drop expectations: rows that cannot be used leave the table before its check and
            # the snapshot read it; each is named in ingest.excluded (never silently lost)
            drops = {table: apply_drops(con, table, run_id=context.run_id) for table in spec.tables}
            extra = spec.headline(con) if spec.headline else {}
            for table in spec.tables:
                schema, name = table.split(".")
                yield dg.MaterializeResult(
                    asset_key=spec.key(table),
                    metadata={
                        "dagster/row_count": int(counts.get(table, 0)) - drops[table].total,
                        "excluded_rows": drops[table].total,
                        "excluded": dg.MetadataValue.json(drops[table].metadata()),
                        "preview": preview(con, f'"{schema}"."{name}"'),
                        **extra.get(table, {}),
                    },
                )

    return _build
