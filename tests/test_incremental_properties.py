"""Order invariance and incremental == full refresh, on real files (hypothesis)."""

from __future__ import annotations

import shutil
from dataclasses import replace

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from conftest import dumps, ingest, interaction, rows

FILES = ["interactions/interactions_2026-02-2{}_0000000{}.jsonl".format(d, s) for d in (5, 6) for s in (1, 2)]
BAD = [b"null", b'{"id": 1', b'{"id": "x", "id": "y"}', b"", b"   "]


@st.composite
def lakes(draw):
    """Lines (for FILES) with duplicated ids, distinct event times per version, and bad lines."""
    n = draw(st.integers(min_value=1, max_value=25))
    minutes = draw(st.lists(st.integers(0, 10_000), min_size=n, max_size=n, unique=True))
    lines = []
    for k, minute in enumerate(minutes):
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.sampled_from(BAD)))
            continue
        ident = draw(st.integers(0, 5))
        record = interaction(ident, timestamp=f"2026-02-{25 + minute // 1440:02d}T{minute % 1440 // 60:02d}:"
                                              f"{minute % 60:02d}:00",
                             user_feedback=draw(st.sampled_from(["none", "positive", "negative"])),
                             output_text=f"answer {k} ✓")
        lines.append(dumps(record).encode())
    placement = draw(st.lists(st.integers(0, len(FILES) - 1), min_size=len(lines), max_size=len(lines)))
    cuts = sorted(draw(st.lists(st.integers(0, len(lines)), max_size=4)))
    split_inside = draw(st.booleans())
    return lines, placement, cuts, split_inside


def snapshot(con):
    # observed_seq is when this lake saw a line: two lakes fed differently see them at different times
    identity = rows(con, "select * exclude (ingest_run_id, observed_seq) from staging.interactions order by id")
    content = rows(con, "select * exclude (ingest_run_id, observed_seq, path, line_number, byte_offset) "
                        "from staging.interactions order by id")
    quarantine = rows(con, "select source, path, line_number, byte_offset, reason, detail, raw_text "
                           "from ingest.quarantine order by all")
    files = rows(con, "select source, path, size_bytes, lines_read, rows_loaded, rows_quarantined, blank_lines, "
                      "deferred_bytes, offset_bytes, prefix_sha256 from ingest.files order by all")
    return identity, content, quarantine, files


def write_all(raw, lines, placement):
    contents = {f: b"" for f in FILES}
    for line, where in zip(lines, placement):
        contents[FILES[where]] += line + b"\n"
    for name, data in contents.items():
        if data:
            (raw / name).parent.mkdir(parents=True, exist_ok=True)
            (raw / name).write_bytes(data)


@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lake=lakes())
def test_incremental_runs_equal_one_full_refresh(tmp_path_factory, lake):
    lines, placement, cuts, split_inside = lake
    base = tmp_path_factory.mktemp("lake")
    from dagster_project.settings import Settings

    def fresh(name):
        root = base / name
        return Settings.from_env({"FLYWHEEL_RAW_DIR": str(root / "raw"),
                                  "FLYWHEEL_WAREHOUSE": str(root / "warehouse.duckdb")})

    full = fresh("full")
    full.raw_dir.mkdir(parents=True)
    write_all(full.raw_dir, lines, placement)
    con_full, _ = ingest(full, "full", sources=["interactions"], full_refresh=True)
    expected = snapshot(con_full)

    inc = fresh("inc")
    inc.raw_dir.mkdir(parents=True)
    con = None
    bounds = [0, *cuts, len(lines)]
    for run, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        for line, where in zip(lines[lo:hi], placement[lo:hi]):
            path = inc.raw_dir / FILES[where]
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("ab") as fh:
                fh.write(line + b"\n")
        if split_inside and hi < len(lines):
            # The writer is half-way through the next line when this run starts.
            path = inc.raw_dir / FILES[placement[hi]]
            path.parent.mkdir(parents=True, exist_ok=True)
            head = lines[hi][: len(lines[hi]) // 2]
            with path.open("ab") as fh:
                fh.write(head)
            lines = [*lines[:hi], lines[hi][len(head):], *lines[hi + 1:]]
        con, _ = ingest(inc, f"inc-{run}", sources=["interactions"], con=con)
    assert snapshot(con) == expected


@hsettings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lake=lakes(), permutation=st.permutations(range(len(FILES))))
def test_which_file_a_line_lands_in_does_not_change_the_winners(tmp_path_factory, lake, permutation):
    lines, placement, _, _ = lake
    base = tmp_path_factory.mktemp("perm")
    from dagster_project.settings import Settings

    results = []
    for name, place in (("a", placement), ("b", [permutation[p] for p in placement])):
        s = Settings.from_env({"FLYWHEEL_RAW_DIR": str(base / name / "raw"),
                               "FLYWHEEL_WAREHOUSE": str(base / name / "warehouse.duckdb")})
        s.raw_dir.mkdir(parents=True)
        write_all(s.raw_dir, lines, place)
        con, _ = ingest(s, name, sources=["interactions"])
        results.append(snapshot(con)[1])
    assert results[0] == results[1]
