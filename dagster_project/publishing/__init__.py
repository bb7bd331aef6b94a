"""Publishing: one snapshot per run (Parquet datasets + the analyst warehouse), all or nothing.

``snapshot`` commits and lists snapshots, ``parquet`` writes content-addressed partitions,
``warehouse`` builds the views file. Nothing here imports Dagster.
"""

from dagster_project.publishing.snapshot import (CURRENT, MANIFEST, SNAPSHOTS, PublishError, PublishResult,
                                                 current_version, gate_state, list_snapshots, publish_snapshot, read_manifest,
                                                 run_outcome, status, verify_snapshot, watermarks)

__all__ = ["CURRENT", "MANIFEST", "SNAPSHOTS", "PublishError", "PublishResult", "current_version", "gate_state",
           "list_snapshots",
           "publish_snapshot", "read_manifest", "run_outcome", "status", "verify_snapshot", "watermarks"]
