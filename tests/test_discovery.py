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


def _glob_oracle(globs, raw):
    """What discovery returned before it listed directories itself: ``Path.glob``, ``is_file``,
    and each path resolved (links followed) and stored relative to the resolved root."""
    from pathlib import Path

    found = {}
    for pattern in globs:
        pattern = os.path.expanduser(pattern)
        if os.path.isabs(pattern):
            anchor = Path(pattern).anchor
            matches = Path(anchor).glob(os.path.relpath(pattern, anchor))
        else:
            matches = raw.glob(pattern)
        for real in matches:
            if real.is_file():
                found[stored_path(real, raw)] = real
    return sorted(found.items())


def test_listing_a_directory_finds_exactly_what_path_glob_finds(tmp_path, monkeypatch):
    """Every source's default glob is matched on one listing of its directory; the same files
    and stored paths as Path.glob, through links, hidden files, directories named like files,
    literal names, absolute, ``~`` and recursive globs, and directories that are missing."""
    import dataclasses

    raw = tmp_path / "raw"
    d = raw / "interactions"
    d.mkdir(parents=True)
    for name in ("interactions_1.jsonl", ".interactions_hidden.jsonl", "interactions_x.jsonl.bak",
                 "Interactions_upper.jsonl", "interactions_[x].jsonl", "other.jsonl"):
        (d / name).write_text("{}\n")
    (d / "interactions_dir.jsonl").mkdir()  # a directory whose name matches: not a file
    (d / "interactions_dir.jsonl" / "interactions_in.jsonl").write_text("{}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "interactions_out.jsonl").write_text("{}\n")
    os.symlink(outside / "interactions_out.jsonl", d / "interactions_link_out.jsonl")
    os.symlink(d / "interactions_1.jsonl", d / "interactions_link_in.jsonl")
    os.symlink(tmp_path / "nowhere.jsonl", d / "interactions_broken.jsonl")
    os.symlink(outside, raw / "linked_dir")
    os.symlink(d / "interactions_loop.jsonl", d / "interactions_loop.jsonl")  # a link loop: not a file
    (raw / "sessions").mkdir()
    (raw / "sessions" / "store.sqlite3").write_text("")
    (raw / "at_the_root.jsonl").write_text("{}\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    spec = builtin_sources()["interactions"]
    cases = [
        ("interactions/interactions_*.jsonl",),
        ("interactions/*",), ("interactions/.*",), ("interactions/interactions_[!x]*.jsonl",),
        ("interactions/interactions_?.jsonl", "interactions/*.jsonl"),  # overlapping globs: each file once
        ("sessions/store.sqlite3",), ("sessions/missing.sqlite3",), ("interactions/interactions_link_in.jsonl",),
        ("linked_dir/*.jsonl",), ("missing/*.jsonl",), ("interactions/other.jsonl/*",),
        (str(outside / "*.jsonl"),), ("~/outside/interactions_*.jsonl",), (str(d / "interactions_1.jsonl"),),
        ("**/*.jsonl",), ("*/interactions_*.jsonl",), ("interactions/**",), ("*.jsonl",),
        ("interactions/interactions_loop.jsonl",), ("interactions/interactions_broken.jsonl",),
        ("interactions/interactions_dir.jsonl",), ("interactions/",),
    ]
    for globs in cases:
        source = dataclasses.replace(spec, globs=globs)
        for root in (raw, tmp_path / "raw" / ".." / "raw"):
            assert discover(source, root) == _glob_oracle(globs, root), globs
    # the default glob: no directory, broken link, hidden or upper-case name; a link to a file of
    # the lake is that file (stored once), a link out of it is stored by its absolute path
    assert [p for p, _ in discover(spec, raw)] == [
        (outside / "interactions_out.jsonl").as_posix(), "interactions/interactions_1.jsonl",
        "interactions/interactions_[x].jsonl"]


def test_a_glob_over_the_whole_lake_never_reads_the_lakes_own_files(tmp_path):
    """An absolute glob with ``**`` over the directory that holds the raw root, the state and the
    exports (``/data/**/interactions/*.jsonl``) read the lake's own bronze segments as the
    source's files: every run quarantined the last one and published again, for ever."""
    from dataclasses import replace

    from conftest import dumps, ingest, interaction, rows, write_lines
    from dagster_project.engine.discovery import listing
    from dagster_project.settings import Settings
    from dagster_project.sources import load_sources

    sources = tmp_path / "sources.yml"
    glob = str(tmp_path / "**" / "interactions" / "*.jsonl")
    sources.write_text(f"sources:\n  interactions:\n    globs: [{glob!r}]\n")
    settings = Settings.from_env({"FLYWHEEL_RAW_DIR": str(tmp_path / "raw"),
                                  "FLYWHEEL_WAREHOUSE": str(tmp_path / "warehouse.duckdb"),
                                  "FLYWHEEL_EXPORT_DIR": str(tmp_path / "exports"),
                                  "FLYWHEEL_SOURCES": str(sources)})
    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26.jsonl", [dumps(interaction(1))])
    con, _ = ingest(settings, "run-1", sources=["interactions"])
    con.close()
    assert list((settings.state_dir / "bronze" / "interactions").glob("*.jsonl"))  # what the glob reaches
    con, reports = ingest(settings, "run-2", sources=["interactions"])
    assert [f.path for f in reports["interactions"].files] == ["interactions/interactions_2026-02-26.jsonl"]
    assert rows(con, "select count(*) from ingest.quarantine") == [(0,)]
    assert rows(con, "select count(*) from raw.interactions") == [(1,)]
    con.close()
    # a raw root inside the export directory is not the lake's own (every producer file was
    # excluded: review)
    inside = replace(settings, raw_dir=settings.export_dir / "raw")
    write_lines(inside.raw_dir / "interactions" / "interactions_2026-02-27.jsonl", [dumps(interaction(2))])
    spec = load_sources(inside.sources_file)["interactions"]
    listed = [path for path, _ in listing(spec, inside.raw_dir, exclude=inside.own_dirs)]
    assert "interactions/interactions_2026-02-27.jsonl" in listed and not [p for p in listed if ".flywheel" in p]
