"""Ingestion: one reader per format, the bronze record, and the engine that classifies units."""

from dagster_project.engine.accounting import (AccountingError, BronzeDamaged, FileResult, LegacyStateError,
                                               SchemaChangedError, SourceReport, check_accounting, ensure_raw_table,
                                               ensure_schema, reset_source)
from dagster_project.engine.bronze import bronze_usage
from dagster_project.engine.discovery import SQLITE_SUFFIXES, discover, stored_path, unclaimed_files
from dagster_project.engine.engine import BATCH_BYTES, Ingestor

__all__ = ["AccountingError", "BATCH_BYTES", "BronzeDamaged", "FileResult", "Ingestor", "LegacyStateError",
           "SQLITE_SUFFIXES", "SchemaChangedError", "SourceReport", "bronze_usage", "check_accounting", "discover",
           "ensure_raw_table", "ensure_schema", "reset_source", "stored_path", "unclaimed_files"]
