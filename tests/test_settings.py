"""Settings: every bad value is reported before any work, one line each, all at once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest

from conftest import PROJECT
from dagster_project.settings import Settings, SettingsError, parse_size


@pytest.mark.parametrize("name, value", [
    ("FLYWHEEL_AS_OF", "2026-13-45"),
    ("FLYWHEEL_AS_OF", "yesterday"),
    ("FLYWHEEL_MAX_LINE_BYTES", "16 megs"),
    ("FLYWHEEL_MAX_LINE_BYTES", "0"),
    ("FLYWHEEL_EVAL_FRACTION", "2"),
    ("FLYWHEEL_EVAL_FRACTION", "five percent"),
    ("FLYWHEEL_SEAL_AFTER", "1day"),
    ("FLYWHEEL_DPO_MAX_PAIRS", "-1"),
    ("FLYWHEEL_SESSION_RETENTION_DAYS", "half a year"),
    # the run date minus the window overflowed in the run's ingest step, after the window was
    # recorded as the lake's (the next run's 180 was then refused as shorter)
    ("FLYWHEEL_SESSION_RETENTION_DAYS", "1000000"),
    ("FLYWHEEL_SESSION_RETENTION_DAYS", "99999999999"),
    ("FLYWHEEL_AS_OF", "0001-01-01"),
    ("FLYWHEEL_AS_OF", "1999-12-31"),
    ("FLYWHEEL_TRUST_CTIME", "sometimes"),
    ("FLYWHEEL_STEP_THREADS", "0"),
    ("FLYWHEEL_STEP_THREADS", "two"),
    ("FLYWHEEL_KEEP_RUNS", "-1"),
    ("FLYWHEEL_KEEP_RUNS", "all"),
])
def test_each_bad_value_is_one_line_naming_variable_value_and_example(name, value):
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({name: value})
    assert raised.value.problems == [str(raised.value)]  # exactly one line
    line = raised.value.problems[0]
    assert line.startswith(f"{name}={value!r} is not valid") and f"e.g. {name}=" in line


def test_all_problems_are_reported_at_once():
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"FLYWHEEL_AS_OF": "2026-13-45", "FLYWHEEL_EVAL_FRACTION": "2",
                           "FLYWHEEL_SEAL_AFTER": "1day", "FLYWHEEL_MAX_LINE_BYTES": "lots"})
    assert [p.split("=")[0] for p in raised.value.problems] == [
        "FLYWHEEL_SEAL_AFTER", "FLYWHEEL_MAX_LINE_BYTES", "FLYWHEEL_AS_OF", "FLYWHEEL_EVAL_FRACTION"]


def test_good_values_and_sizes():
    s = Settings.from_env({"FLYWHEEL_AS_OF": "2026-04-03", "FLYWHEEL_MAX_LINE_BYTES": "16MB",
                           "FLYWHEEL_EVAL_FRACTION": "0", "FLYWHEEL_SEAL_AFTER": "90m",
                           "FLYWHEEL_DPO_MAX_PAIRS": "4", "FLYWHEEL_SESSION_RETENTION_DAYS": "30"})
    assert (s.as_of, s.max_line_bytes, s.eval_fraction, s.seal_after_seconds, s.dpo_max_pairs,
            s.session_retention_days) == (date(2026, 4, 3), 16 * 1024**2, 0.0, 5400.0, 4, 30)
    assert [parse_size(t) for t in ("16777216", "16MiB", "16 mb", "512k", "1G")] == [
        16777216, 16777216, 16777216, 512 * 1024, 1024**3]
    assert Settings.from_env({}).max_line_bytes == 16 * 1024**2
    assert (Settings.from_env({}).trust_ctime, Settings.from_env({"FLYWHEEL_TRUST_CTIME": "0"}).trust_ctime,
            Settings.from_env({"FLYWHEEL_TRUST_CTIME": "yes"}).trust_ctime) == (True, False, True)
    assert (Settings.from_env({}).step_threads, Settings.from_env({"FLYWHEEL_STEP_THREADS": "1"}).step_threads) == (2, 1)
    assert (Settings.from_env({}).keep_runs, Settings.from_env({"FLYWHEEL_KEEP_RUNS": "0"}).keep_runs) == (200, 0)


def test_defaults_resolve_from_the_project_inside_the_checkout_and_env_paths_from_cwd(tmp_path):
    inside = Settings.from_env({}, cwd=PROJECT / "data")
    assert inside.warehouse == PROJECT / "data" / "warehouse.duckdb"
    assert inside.raw_dir == PROJECT / "data" / "raw"
    outside = Settings.from_env({}, cwd=tmp_path)
    assert outside.warehouse == tmp_path / "data" / "warehouse.duckdb"
    given = Settings.from_env({"FLYWHEEL_WAREHOUSE": "wh.duckdb"}, cwd=PROJECT / "data")
    assert given.warehouse == PROJECT / "data" / "wh.duckdb"


def preflight_problems(tmp_path, **env) -> list[str]:
    settings = Settings.from_env({"FLYWHEEL_RAW_DIR": str(tmp_path / "raw"),
                                  "FLYWHEEL_WAREHOUSE": str(tmp_path / "wh.duckdb"),
                                  "FLYWHEEL_EXPORT_DIR": str(tmp_path / "exports"), **env})
    try:
        settings.preflight()
    except SettingsError as exc:
        return exc.problems
    return []


def test_preflight_names_each_unusable_path(tmp_path):
    (tmp_path / "raw").mkdir()
    assert preflight_problems(tmp_path) == []
    assert preflight_problems(tmp_path, FLYWHEEL_RAW_DIR=str(tmp_path / "nope")) == [
        f"FLYWHEEL_RAW_DIR={tmp_path / 'nope'} does not exist: point it at the root of the raw lake, "
        f"e.g. FLYWHEEL_RAW_DIR={PROJECT / 'data' / 'raw'}"]
    (tmp_path / "file").write_text("x")
    problems = preflight_problems(tmp_path, FLYWHEEL_RAW_DIR=str(tmp_path / "file"),
                                  FLYWHEEL_WAREHOUSE=str(tmp_path),
                                  FLYWHEEL_EXPORT_DIR=str(tmp_path / "file"),
                                  FLYWHEEL_SOURCES=str(tmp_path / "sources.yaml"))
    assert [p.split("=")[0] for p in problems] == [
        "FLYWHEEL_RAW_DIR", "FLYWHEEL_WAREHOUSE", "FLYWHEEL_EXPORT_DIR", "FLYWHEEL_SOURCES"]
    assert "is not a directory" in problems[0] and "is a directory" in problems[1]
    assert "is a file" in problems[2] and "does not exist" in problems[3]
    # a warehouse under a file cannot be created
    problems = preflight_problems(tmp_path, FLYWHEEL_WAREHOUSE=str(tmp_path / "file" / "wh.duckdb"))
    assert problems == [f"FLYWHEEL_WAREHOUSE={tmp_path / 'file' / 'wh.duckdb'}: {tmp_path / 'file'} is not a "
                        f"directory; choose a writable place, e.g. FLYWHEEL_WAREHOUSE="
                        f"{Path.home() / 'flywheel' / 'warehouse.duckdb'}"]


def test_a_warehouse_path_naming_another_file_is_refused_before_the_link_replaces_it(tmp_path):
    """The publish puts a link to the published warehouse where FLYWHEEL_WAREHOUSE points: a
    user's file there (notes, their own DuckDB database) was replaced by it, its content lost,
    and the run succeeded. An older layout's warehouse (a DuckDB file with the pipeline's
    schemas, rebuilt from the state database) and the link itself are taken as before."""
    import duckdb

    (tmp_path / "raw").mkdir()
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    duckdb.connect(str(tmp_path / "mine.duckdb")).execute("create table t as select 1").close()
    legacy = duckdb.connect(str(tmp_path / "legacy.duckdb"))
    legacy.execute("create schema ingest; create schema exports; create table ingest.runs (run_id varchar); "
                   "create table exports.sft (prompt varchar)")
    legacy.close()
    os.symlink("exports/current/warehouse.duckdb", tmp_path / "linked.duckdb")
    for name, why in (("notes.txt", "not a DuckDB database"),
                      ("mine.duckdb", "a DuckDB database without the warehouse's tables")):
        assert preflight_problems(tmp_path, FLYWHEEL_WAREHOUSE=str(tmp_path / name)) == [
            f"FLYWHEEL_WAREHOUSE={tmp_path / name} is an existing file that is not this lake's warehouse ({why}): "
            "the run would replace it with a link to the published warehouse; name a new path, e.g. "
            f"FLYWHEEL_WAREHOUSE={tmp_path / 'warehouse.duckdb'}"]
    for name in ("legacy.duckdb", "linked.duckdb", "new.duckdb"):
        assert preflight_problems(tmp_path, FLYWHEEL_WAREHOUSE=str(tmp_path / name)) == []
    assert notes.read_text() == "my notes"
    # a snapshot's own warehouse (the README names exports/current/warehouse.duckdb): a link to itself
    inside = tmp_path / "exports" / "current" / "warehouse.duckdb"
    assert preflight_problems(tmp_path, FLYWHEEL_WAREHOUSE=str(inside)) == [
        f"FLYWHEEL_WAREHOUSE={inside} is inside FLYWHEEL_EXPORT_DIR={tmp_path / 'exports'}: each publish puts its "
        f"link to the current snapshot's warehouse there; put it beside, e.g. FLYWHEEL_WAREHOUSE="
        f"{tmp_path / 'warehouse.duckdb'}"]


def test_a_run_date_after_today_is_refused_before_retention_erases_by_it(tmp_path):
    """Retention erases from bronze, for good, what is older than its window as of the run date:
    ``FLYWHEEL_AS_OF=2062-01-01`` for 2026-01-01 erased every rating. Tomorrow is allowed (a
    machine's UTC date may lag the user's)."""
    from datetime import date, datetime, timedelta, timezone

    (tmp_path / "raw").mkdir()
    today = datetime.now(timezone.utc).date()
    for allowed in (date(2026, 4, 3), today, today + timedelta(days=1)):
        assert preflight_problems(tmp_path, FLYWHEEL_AS_OF=allowed.isoformat()) == []
    later = today + timedelta(days=2)
    assert preflight_problems(tmp_path, FLYWHEEL_AS_OF=later.isoformat()) == [
        f"FLYWHEEL_AS_OF={later} is after today ({today}): retention as of that day would erase from the lake "
        "records that are still in their window; use today or an earlier date, or unset it"]


def test_a_warehouse_or_export_directory_inside_the_raw_root_is_refused(tmp_path):
    """A glob such as ``**/*.jsonl`` then reads the lake's own bronze segments and exports: every
    run quarantined some of them and published a snapshot again."""
    (tmp_path / "raw").mkdir()
    assert preflight_problems(tmp_path, FLYWHEEL_WAREHOUSE=str(tmp_path / "raw" / ".wh" / "w.duckdb"),
                              FLYWHEEL_EXPORT_DIR=str(tmp_path / "raw" / "out")) == [
        f"FLYWHEEL_WAREHOUSE={tmp_path / 'raw' / '.wh' / 'w.duckdb'} is inside FLYWHEEL_RAW_DIR={tmp_path / 'raw'}: "
        f"the lake would read its own files; put it beside the raw root, e.g. "
        f"FLYWHEEL_WAREHOUSE={tmp_path / 'warehouse.duckdb'}",
        f"FLYWHEEL_EXPORT_DIR={tmp_path / 'raw' / 'out'} is inside FLYWHEEL_RAW_DIR={tmp_path / 'raw'}: "
        f"the lake would read its own files; put it beside the raw root, e.g. FLYWHEEL_EXPORT_DIR={tmp_path / 'exports'}"]


def test_preflight_reports_a_malformed_sources_file_in_one_line(tmp_path):
    (tmp_path / "raw").mkdir()
    bad = tmp_path / "sources.yaml"
    bad.write_text("sources:\n  interactions: {globs: [x], colour: red}\n")
    problems = preflight_problems(tmp_path, FLYWHEEL_SOURCES=str(bad))
    assert problems == [f"FLYWHEEL_SOURCES: {bad}: sources.interactions: unknown keys ['colour']; "
                        "allowed: ['enabled', 'globs', 'time_zone']"]


def test_a_sources_file_with_a_misspelt_top_level_key_or_bad_yaml_is_refused_in_one_line(tmp_path):
    """``source:`` for ``sources:`` was read as an empty file: every override ignored (a time zone
    read as UTC, a source meant to be off read) and the run succeeded. PyYAML's own message spans
    five lines; a directory was said not to exist."""
    (tmp_path / "raw").mkdir()
    typo = tmp_path / "typo.yaml"
    typo.write_text("source:\n  signals: {enabled: false}\n")
    assert preflight_problems(tmp_path, FLYWHEEL_SOURCES=str(typo)) == [
        f"FLYWHEEL_SOURCES: {typo}: unknown top-level keys ['source']; the file holds one mapping, 'sources:'"]
    broken = tmp_path / "broken.yaml"
    broken.write_text("sources:\n  signals: {enabled: false\n")
    assert preflight_problems(tmp_path, FLYWHEEL_SOURCES=str(broken)) == [
        f"FLYWHEEL_SOURCES: {broken}: not valid YAML at line 3, column 1: expected ',' or '}}', but got '<stream end>'"]
    assert preflight_problems(tmp_path, FLYWHEEL_SOURCES=str(tmp_path / "raw")) == [
        f"FLYWHEEL_SOURCES={tmp_path / 'raw'} is not a file: point it at a sources YAML file (see README, "
        "Configuration) or unset it"]


def test_a_sources_file_naming_a_key_twice_a_zone_duckdb_lacks_or_a_directory_glob_is_refused(tmp_path):
    """A source given twice kept its second entry alone (its time zone read as UTC), without a
    word; `localtime` (Python knows it, DuckDB does not) failed every run on a line naming neither
    the setting nor the file; a glob of `/` failed every run in a traceback from pathlib."""
    (tmp_path / "raw").mkdir()
    twice = tmp_path / "twice.yaml"
    twice.write_text("sources:\n  interactions: {time_zone: Europe/Oslo}\n  signals: {enabled: false}\n"
                     "  interactions: {globs: [x.jsonl]}\n")
    assert preflight_problems(tmp_path, FLYWHEEL_SOURCES=str(twice)) == [
        f"FLYWHEEL_SOURCES: {twice}: not valid YAML at line 4, column 3: 'interactions' is given twice"]
    for zone in ("localtime", "posixrules", "right/UTC"):
        local = tmp_path / "local.yaml"
        local.write_text(f"sources:\n  interactions:\n    time_zone: {zone}\n")
        assert preflight_problems(tmp_path, FLYWHEEL_SOURCES=str(local)) == [
            f"FLYWHEEL_SOURCES: {local}: sources.interactions.time_zone: unknown time zone {zone!r}"]
    # a merge key is no key given twice; a list as a key is one line too, not a traceback (review)
    merged = tmp_path / "merged.yaml"
    merged.write_text("sources:\n  interactions: &zoned {time_zone: Europe/Oslo}\n  feedback: {<<: *zoned}\n")
    assert preflight_problems(tmp_path, FLYWHEEL_SOURCES=str(merged)) == []
    listed = tmp_path / "listed.yaml"
    listed.write_text("sources:\n  [a, b]: 1\n")
    assert preflight_problems(tmp_path, FLYWHEEL_SOURCES=str(listed)) == [
        f"FLYWHEEL_SOURCES: {listed}: not valid YAML at line 2, column 3: found unhashable key"]
    root = tmp_path / "root.yaml"
    for glob in ("/", ".", "signals/.."):
        root.write_text(f'sources:\n  signals:\n    globs: ["{glob}"]\n')
        [problem] = preflight_problems(tmp_path, FLYWHEEL_SOURCES=str(root))
        assert problem.startswith(f"FLYWHEEL_SOURCES: {root}: sources.signals.globs: {glob!r} names a directory, "
                                  "not files; e.g. "), problem


def test_an_export_directory_inside_a_snapshot_tree_or_another_export_directory_is_refused(settings, tmp_path):
    """Given another lake's `exports/current` (a link into its snapshot tree), a run took that
    snapshot's datasets for an older layout's, moved them aside and linked its own in their place:
    the other lake's published `training/sft` read this lake's rows. Its `.snapshots`, a
    directory under its export directory and a lake's state directory are refused alike."""
    from conftest import dumps, interaction, write_lines
    from dagster_project.pipeline import run_pipeline
    from dagster_project.publishing import current_version
    from dagster_project.publishing.snapshot import verify_snapshot

    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26.jsonl",
                [dumps(interaction(i)) for i in (1, 2)])
    settings = replace(settings, pseudonym_key="test-key")
    assert run_pipeline(settings).success
    published = current_version(settings.export_dir)
    write_lines(tmp_path / "raw_b" / "interactions" / "interactions_2026-02-26.jsonl",
                [dumps(interaction(i)) for i in (7, 8, 9)])
    other = replace(settings, raw_dir=tmp_path / "raw_b", warehouse=tmp_path / "b" / "warehouse.duckdb")
    snapshots = (settings.export_dir / ".snapshots").resolve()
    for export_dir, inside in ((settings.export_dir / "current", f"inside the snapshot tree {snapshots}"),
                               (settings.export_dir / ".snapshots", f"inside the snapshot tree {snapshots}"),
                               (settings.export_dir / "mine", f"inside the export directory "
                                                              f"{settings.export_dir.resolve()}"),
                               (settings.state_dir / "exports", f"inside the lake state directory "
                                                                f"{settings.state_dir.resolve()}")):
        with pytest.raises(SettingsError) as refused:
            run_pipeline(replace(other, export_dir=export_dir))
        assert refused.value.problems == [
            f"FLYWHEEL_EXPORT_DIR={export_dir} is {inside}: a publish there would move a published snapshot's "
            f"files aside; give a directory of its own, outside {inside.rsplit(' ', 1)[1]}"]
    assert current_version(settings.export_dir) == published
    verify_snapshot(settings.export_dir)
    assert sorted(p.name for p in (settings.export_dir / "current").iterdir()) == [
        "analytics", "internal", "manifest.json", "training", "warehouse.duckdb"]
    # another tool's `.snapshots` (snapper's `/.snapshots`) above is no lake's: every export
    # directory below it was refused (review)
    (tmp_path / "os" / ".snapshots" / "1").mkdir(parents=True)
    (tmp_path / "os" / "raw").mkdir()
    assert preflight_problems(tmp_path / "os", FLYWHEEL_EXPORT_DIR=str(tmp_path / "os" / "home" / "exports")) == []


def _allocator_options(env: dict[str, str]) -> str:
    """What pyarrow's allocator says of its options when the command line's modules load it."""
    code = ("import dagster_project.cli, pyarrow as pa; "
            "print(pa.default_memory_pool().backend_name, flush=True); pa.allocate_buffer(1 << 20)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT,
                          env={**env, "MIMALLOC_VERBOSE": "1"}, check=True)
    if proc.stdout.strip() != "mimalloc":
        pytest.skip(f"pyarrow allocates with {proc.stdout.strip()}, not mimalloc")
    return proc.stderr


def test_pyarrows_allocator_commits_memory_as_it_is_touched_unless_the_environment_says_otherwise():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    assert "option 'arena_eager_commit': 0" in _allocator_options(env)
    assert "option 'arena_eager_commit': 1" in _allocator_options({**env, "MIMALLOC_ARENA_EAGER_COMMIT": "1"})


def test_an_export_directory_holding_another_lakes_snapshots_is_refused(settings, tmp_path):
    """Two lakes given one export directory (another FLYWHEEL_WAREHOUSE, the same exports) each
    published over the other, a lake's warehouse showing the other's data; a new state (a mistyped
    warehouse path) published, read again from the producers' files, a subject the first lake's
    `flywheel forget` had erased. The directory records its lake; another is refused in one line."""
    from conftest import dumps, interaction, write_lines
    from dagster_project.pipeline import run_pipeline
    from dagster_project.publishing import current_version

    write_lines(settings.raw_dir / "interactions" / "interactions_2026-02-26.jsonl",
                [dumps(interaction(i)) for i in (1, 2)])
    write_lines(tmp_path / "raw_b" / "interactions" / "interactions_2026-02-26.jsonl",
                [dumps(interaction(i)) for i in (7, 8, 9)])
    settings = replace(settings, pseudonym_key="test-key")
    assert run_pipeline(settings).success
    published = current_version(settings.export_dir)
    owner = settings.export_dir / ".snapshots" / ".owner.json"
    other = replace(settings, raw_dir=tmp_path / "raw_b", warehouse=tmp_path / "b" / "warehouse.duckdb")
    refusal = (f"FLYWHEEL_EXPORT_DIR={settings.export_dir} holds the snapshots of another lake (its state: "
               f"{settings.state_dir.resolve()}; recorded in {owner}): the run would publish over them; give this "
               f"lake its own FLYWHEEL_EXPORT_DIR, or point FLYWHEEL_WAREHOUSE at that lake's; if this lake "
               f"replaces that one (its state was deleted), delete {owner}")
    with pytest.raises(SettingsError) as refused:
        run_pipeline(other)
    assert refused.value.problems == [refusal]
    assert current_version(settings.export_dir) == published
    assert run_pipeline(replace(other, export_dir=tmp_path / "b" / "exports")).success  # its own
    assert run_pipeline(settings).success and current_version(settings.export_dir) == published  # nothing new
    # the lake's state deleted by hand: a new lake, until the old one's record is removed
    shutil.rmtree(settings.state_dir)
    with pytest.raises(SettingsError) as refused:
        run_pipeline(settings)
    assert refused.value.problems == [refusal]
    owner.unlink()
    assert run_pipeline(settings).success


def test_steps_checking_their_settings_at_once_claim_the_export_directory_for_one_lake(tmp_path):
    """A Dagster run's steps check their settings at once: two lake ids written one over the
    other left the export directory owned by the id the lake did not keep, and every run after
    it was refused as another lake's (review: 8 fresh lakes of 40)."""
    import json
    import threading

    for trial in range(20):
        root = tmp_path / str(trial)
        (root / "raw").mkdir(parents=True)
        settings = Settings.from_env({"FLYWHEEL_RAW_DIR": str(root / "raw"),
                                      "FLYWHEEL_WAREHOUSE": str(root / "warehouse.duckdb"),
                                      "FLYWHEEL_EXPORT_DIR": str(root / "exports")})
        start = threading.Barrier(4)

        def check():
            start.wait()
            settings.preflight()

        threads = [threading.Thread(target=check) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        lake = json.loads((settings.state_dir / "lake_id.json").read_text())["lake"]
        assert json.loads((settings.export_dir / ".snapshots" / ".owner.json").read_text())["lake"] == lake
        settings.preflight()  # not refused


def test_an_export_directory_holding_the_users_own_files_where_links_go_is_refused(settings):
    """A publish puts links at ``current``, ``training`` and ``analytics``: a user's file there
    was replaced (its content gone), a directory of notes moved into ``.snapshots/.legacy-*``
    without a word. An older version's layout (Parquet datasets) is still taken over."""
    export = settings.export_dir
    # an older version's layout, as its publisher left it: versioned directories, its lock, a link
    # left by a killed publish
    (export / "training" / ".versions" / "sft" / "v1").mkdir(parents=True)
    (export / "training" / ".versions" / "sft" / "v1" / "part-00000.parquet").write_bytes(b"PAR1")
    (export / "training" / ".versions" / "sft" / ".lock").write_bytes(b"")
    (export / "training" / "sft").symlink_to(".versions/sft/v1")
    (export / "training" / ".sft.link-123").symlink_to(".versions/sft/v1")
    settings.preflight()
    (export / "analytics").write_text("notes\n")
    with pytest.raises(SettingsError) as refused:
        settings.preflight()
    assert refused.value.problems == [
        f"FLYWHEEL_EXPORT_DIR={export} holds {export / 'analytics'} (a file), which this pipeline did not write: a "
        f"publish puts its link in that place; choose a directory of its own, e.g. "
        f"FLYWHEEL_EXPORT_DIR={export / 'flywheel'}"]
    (export / "analytics").unlink()
    (export / "training" / "notes.txt").write_text("mine\n")
    with pytest.raises(SettingsError) as refused:
        settings.preflight()
    assert f"holds {export / 'training' / 'notes.txt'}, which" in refused.value.problems[0]
    assert (export / "training" / "notes.txt").read_text() == "mine\n"


def test_a_raw_root_other_than_the_lakes_is_read_only_when_confirmed(settings, tmp_path):
    """Files are known by their path under the raw root: a mistyped FLYWHEEL_RAW_DIR naming
    another lake with the same file names read its files as this lake's files rewritten, and
    merged their lines into bronze for good. Another root is refused in one line until confirmed
    (a lake that moved); the same directory by another path (a symlink) is the same root."""
    import duckdb

    from conftest import dumps, interaction, write_lines
    from dagster_project.pipeline import run_pipeline

    name = "interactions/interactions_2026-02-26.jsonl"
    write_lines(settings.raw_dir / name, [dumps(interaction(i)) for i in (1, 2)])
    write_lines(tmp_path / "other" / name, [dumps(interaction(i)) for i in (7, 8, 9)])
    settings = replace(settings, pseudonym_key="test-key")
    assert run_pipeline(settings).success

    def ids() -> list[str]:
        con = duckdb.connect(str(settings.state_db), read_only=True)
        try:
            return [r[0][-1] for r in con.execute("select id from raw.interactions order by id").fetchall()]
        finally:
            con.close()

    with pytest.raises(SettingsError) as refused:
        run_pipeline(replace(settings, raw_dir=tmp_path / "other"))
    assert refused.value.problems == [
        f"FLYWHEEL_RAW_DIR={tmp_path / 'other'} is not the raw root this lake was read from ({settings.raw_dir}, "
        f"recorded in {settings.state_dir / 'raw_root.json'}): its files would be merged into that lake's for good; "
        f"set FLYWHEEL_RAW_DIR={settings.raw_dir} again, or give another lake a FLYWHEEL_WAREHOUSE in a directory of "
        f"its own (the state is the .flywheel beside it) and its own FLYWHEEL_EXPORT_DIR; if this lake moved, "
        f"run once with FLYWHEEL_RAW_DIR_CONFIRM={tmp_path / 'other'}"]
    assert ids() == ["1", "2"]
    (tmp_path / "link").symlink_to(settings.raw_dir)
    assert run_pipeline(replace(settings, raw_dir=tmp_path / "link")).success  # the same directory
    # the link switched to the day's copy (rsync --link-dest, a file-system snapshot): the same root as given
    shutil.copytree(settings.raw_dir, tmp_path / "copy", copy_function=shutil.copy2)
    (tmp_path / "link").unlink()
    (tmp_path / "link").symlink_to(tmp_path / "copy")
    assert run_pipeline(replace(settings, raw_dir=tmp_path / "link")).success
    assert ids() == ["1", "2"]
    # the lake moves: refused until confirmed, then read as the same files (nothing twice)
    moved = (tmp_path / "copy").rename(tmp_path / "moved")
    with pytest.raises(SettingsError):
        run_pipeline(replace(settings, raw_dir=moved))
    assert run_pipeline(replace(settings, raw_dir=moved, raw_dir_confirm=moved)).success
    assert run_pipeline(replace(settings, raw_dir=moved)).success  # the new root is now the lake's
    assert ids() == ["1", "2"]
