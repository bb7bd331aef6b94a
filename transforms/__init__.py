"""Pure transformations: DuckDB/Arrow/Polars in, DuckDB/Arrow/Polars out. Never imports Dagster."""
