"""Which files a source claims and the path each is stored under, links included."""

import os

from dagster_project.engine.discovery import discover, stored_path
from dagster_project.sources import builtin_sources


def test_stored_paths_resolve_linked_files_and_directories_like_path_resolve(tmp_path):
    raw = tmp_path / "raw"
    (raw / "interactions").mkdir(parents=True)
    (raw / "interactions" / "interactions_2026-02-26_a.jsonl").write_text("{}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "interactions_2026-02-27_b.jsonl").write_text("{}\n")
    os.symlink(elsewhere / "interactions_2026-02-27_b.jsonl", raw / "interactions" / "interactions_2026-02-27_b.jsonl")
    os.symlink(raw / "interactions" / "interactions_2026-02-26_a.jsonl",
               raw / "interactions" / "interactions_2026-02-28_c.jsonl")
    linked_root = tmp_path / "linked_raw"
    os.symlink(raw, linked_root)
    spec = builtin_sources()["interactions"]
    for root in (raw, linked_root):
        found = discover(spec, root)
        assert [p for p, _ in found] == sorted(stored_path(real, root) for _, real in found)
        # c is a link to a: one file, stored once; b lives outside the root: its absolute path
        assert [p for p, _ in found] == sorted([
            "interactions/interactions_2026-02-26_a.jsonl", (elsewhere / "interactions_2026-02-27_b.jsonl").as_posix()])
