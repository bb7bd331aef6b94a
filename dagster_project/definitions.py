"""Dagster entry point: everything under ``defs/`` plus the shared resource and executor."""

import os
from pathlib import Path

import dagster as dg

from dagster_project.executor import threaded_executor
from dagster_project.resources import FlywheelResource

# No network: never send telemetry (GX reads this when a context is created).
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "yes")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


def load_definitions() -> dg.Definitions:
    return dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent),
        dg.Definitions(
            resources={"flywheel": FlywheelResource()},
            # One DuckDB writer process: a job's steps run in it, independent ones at once on threads.
            executor=threaded_executor,
        ),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return load_definitions()
