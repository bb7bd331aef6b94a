"""transforms.gitlog: git log --numstat and session tag parsing, rename resolution, eventlog rows;
the SQL twins (rename resolution, session id normalisation) agree with the Python ones."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from conftest import SAMPLES
from eventlog_fixtures import EventLake
from transforms import gitlog

PATINA_LOG = SAMPLES / "patina" / "git_log_numstat_2025-12-17_to_23.txt"
PATINA_TAGS = SAMPLES / "patina" / "session_tags.psv"
RIPGREP_LOG = SAMPLES / "ripgrep" / "git_log_numstat_2016-09_to_2017-03.txt"

SHA_A = "a" * 40
SHA_B = "b" * 40


def test_parse_numstat_log_fields_pipes_binaries_and_quoted_paths():
    text = (
        f"{SHA_A}|fix: a | b in the subject|Jane Doe|jane@x|2025-12-17T22:50:42-05:00\n"
        "3\t1\tsrc/a.rs\n"
        "-\t-\tassets/logo.png\n"
        '0\t0\t"caf\\303\\251 \\"q\\".rs"\n'
        "\n"
        f"{SHA_B}|init|Bob|bob@x|2025-12-16T01:00:00+09:00\r\n"
        "\r\n"
    )
    assert gitlog.parse_numstat_log(text) == [
        {"sha": SHA_A, "message": "fix: a | b in the subject", "author_name": "Jane Doe", "author_email": "jane@x",
         "date": "2025-12-17T22:50:42-05:00", "files": [
             {"path": "src/a.rs", "change_type": "modified", "lines_added": 3, "lines_removed": 1},
             {"path": "assets/logo.png", "change_type": "modified", "lines_added": None, "lines_removed": None},
             {"path": 'café "q".rs', "change_type": "modified", "lines_added": 0, "lines_removed": 0}]},
        {"sha": SHA_B, "message": "init", "author_name": "Bob", "author_email": "bob@x",
         "date": "2025-12-16T01:00:00+09:00", "files": []},
    ]


def test_a_subject_holding_unicode_line_separators_stays_one_line():
    subject = "fix:\u2028two lines\u2029and\x85more"
    assert gitlog.parse_numstat_log(f"{SHA_A}|{subject}|a|e|2025-12-17T00:00:00Z\n1\t2\tsrc/a.rs\n")[0]["message"] == subject
    assert gitlog.parse_session_tags(f"v1|tag|2025-08-18T22:13:49-04:00|{SHA_A}|{subject}\n")[0]["message"] == subject


def test_parse_numstat_log_rejects_what_it_cannot_read():
    with pytest.raises(ValueError, match="line 2"):
        gitlog.parse_numstat_log(f"{SHA_A}|m|a|e|2025-12-17T00:00:00Z\nnot a numstat line\n")
    with pytest.raises(ValueError, match="line 1"):  # a numstat line before any commit
        gitlog.parse_numstat_log("1\t2\tsrc/a.rs\n")


def test_real_patina_log():
    commits = gitlog.parse_numstat_log(PATINA_LOG.read_text())
    assert len(commits) == 61
    assert sum(len(c["files"]) for c in commits) == 139
    assert commits[0]["sha"] == "251da91faa99a8667b4196c714d2910a4ffed8c2"
    assert commits[0]["date"] == "2025-12-23T22:11:20-05:00"
    assert commits[0]["files"] == [{"path": "layer/surface/build/spec-secrets-boundary.md",
                                    "change_type": "modified", "lines_added": 58, "lines_removed": 0}]
    feedback_loop = next(c for c in commits if c["message"] == "feat(feedback): implement Phase 3 feedback loop")
    assert len(feedback_loop["files"]) == 11
    assert {c["author_name"] for c in commits} == {"NicabarNimble"}


def test_real_patina_session_tags():
    tags = gitlog.parse_session_tags(PATINA_TAGS.read_text())
    assert len(tags) == 880
    assert Counter(t["edge"] for t in tags) == {"start": 440, "end": 440}
    assert Counter(t["adapter"] for t in tags) == {None: 770, "claude": 106, "gemini": 2, "opencode": 2}
    assert Counter(t["object_type"] for t in tags) == {"tag": 878, "commit": 2}
    assert tags[0] == {"tag_name": "session-20250818-140534-end", "object_type": "tag",
                       "tag_date": "2025-08-18T22:13:49-04:00", "sha": "e868f9cec202b356d5736b0891757c2a4ee72df5",
                       "message": "Session end: testing new commands", "session_id": "20250818-140534",
                       "adapter": None, "edge": "end"}
    assert len({t["session_id"] for t in tags}) == 442
    with pytest.raises(ValueError, match="line 1"):
        gitlog.parse_session_tags("session-20250818-140534-end|tag|2025-08-18T22:13:49-04:00\n")


def test_real_ripgrep_log():
    commits = gitlog.parse_numstat_log(RIPGREP_LOG.read_text())
    # every '%H|...' header in the file (the samples README's "420" undercounts)
    assert len(commits) == 524
    assert sum(len(c["files"]) for c in commits) == 1101
    assert len({c["sha"] for c in commits}) == 524
    offsets = {c["date"][-6:] for c in commits}
    assert len(offsets) > 1  # authors in several time zones


@pytest.mark.parametrize("raw, resolved", [
    ("a => b", "b"),
    ("dir/{a => b}/f", "dir/b/f"),
    ("dir/{ => sub}/f", "dir/sub/f"),
    ("dir/{sub => }/f", "dir/f"),
    ("{a => }/f", "f"),
    ("{ => a}/f", "a/f"),
    ("src/{old.rs => new.rs}", "src/new.rs"),
    ("benchsuite => benchsuite/benchsuite", "benchsuite/benchsuite"),
    ("plain/path.rs", "plain/path.rs"),
    ("templates/{name}.rs", "templates/{name}.rs"),  # braces without ' => ' are not rename text
])
def test_resolve_rename(raw, resolved):
    assert gitlog.resolve_rename(raw) == resolved


RIPGREP_RENAMES = {
    "{benches => globset/benches}/bench.rs": "globset/benches/bench.rs",
    "globset/src/{pattern.rs => glob.rs}": "globset/src/glob.rs",
    "pkg/brew/{ripgrep.rb => ripgrep-bin.rb}": "pkg/brew/ripgrep-bin.rb",
    "src/glob.rs => globset/src/lib.rs": "globset/src/lib.rs",
    "benchsuite/{benchsuite.raw.csv => raw.csv}": "benchsuite/raw.csv",
    "benchsuite/{benchsuite.summary => summary}": "benchsuite/summary",
    "benchsuite => benchsuite/benchsuite": "benchsuite/benchsuite",
    "benchsuite.raw.csv => benchsuite/benchsuite.raw.csv": "benchsuite/benchsuite.raw.csv",
    "benchsuite.summary => benchsuite/benchsuite.summary": "benchsuite/benchsuite.summary",
    "src/{search.rs => search_stream.rs}": "src/search_stream.rs",
    "src/{sys.rs => atty.rs}": "src/atty.rs",
}


def test_ripgrep_renames_resolve_alike_in_python_and_sql():
    commits = gitlog.parse_numstat_log(RIPGREP_LOG.read_text())
    renames = {f["path"] for c in commits for f in c["files"] if " => " in f["path"]}
    assert {p: gitlog.resolve_rename(p) for p in renames} == RIPGREP_RENAMES

    ev = EventLake()
    ev.gitlog(commits)
    ev.build()
    entries = [(c["sha"], f["path"]) for c in commits for f in c["files"]]
    sql = ev.rows("select sha, raw_path, file_path from staging.commit_files")
    assert len(sql) == len({(sha, gitlog.resolve_rename(p)) for sha, p in entries}) == 1101
    assert all(gitlog.resolve_rename(raw) == path for _, raw, path in sql)
    assert dict(ev.rows("select raw_path, file_path from staging.commit_files where old_path is not null")) \
        == RIPGREP_RENAMES
    assert ev.one("select old_path from staging.commit_files "
                  "where raw_path = 'globset/src/{pattern.rs => glob.rs}'") == "globset/src/pattern.rs"


def test_rename_edge_cases_resolve_alike_in_sql():
    raws = ["a => b", "dir/{a => b}/f", "dir/{ => sub}/f", "dir/{sub => }/f", "{a => }/f", "{ => a}/f",
            "templates/{name}.rs", "x => y => z"]
    ev = EventLake()
    ev.commit(SHA_A, "2025-12-17T00:00:00Z", raws)
    ev.build()
    assert dict(ev.rows("select raw_path, file_path from staging.commit_files")) == {
        raw: gitlog.resolve_rename(raw) for raw in raws}
    assert ev.one("select old_path from staging.commit_files where raw_path = 'dir/{sub => }/f'") == "dir/sub/f"
    assert ev.one("select old_path from staging.commit_files where raw_path = 'dir/{ => sub}/f'") == "dir/f"


@pytest.mark.parametrize("raw, normalised", [
    ("20260116-105801-claude", "20260116-105801"),
    ("20260116-105801-opencode", "20260116-105801"),
    ("20260116-105801", "20260116-105801"),
    (" 20260116-105801 ", "20260116-105801"),
    ("session-abc", "session-abc"),  # another shape is kept as it is
    ("2026011-105801-claude", "2026011-105801-claude"),
    ("", None),
    (None, None),
])
def test_normalize_session_id_alike_in_python_and_sql(raw, normalised):
    assert gitlog.normalize_session_id(raw) == normalised
    ev = EventLake()
    ev.commit(SHA_A, "2025-12-17T00:00:00Z", ["a.rs"], session=raw)
    ev.query("q_1", "2025-12-17T00:00:00Z", raw, [])
    ev.build()
    assert ev.one("select session_id from staging.git_commits") == normalised
    assert ev.one("select session_id from staging.scry_queries") == normalised


def test_parse_session_tag():
    assert gitlog.parse_session_tag("session-20260116-105801-claude-start") == ("20260116-105801", "claude", "start")
    assert gitlog.parse_session_tag("session-20260116-105801-end") == ("20260116-105801", None, "end")
    assert gitlog.parse_session_tag("v1.0.0") is None
    assert gitlog.parse_session_tag("session-20260116-105801") is None


def test_to_eventlog_rows():
    commits = gitlog.parse_numstat_log(
        f"{SHA_B}|second|Bob|bob@x|2025-12-17T10:00:00+01:00\n1\t0\tsrc/{{a => b}}.rs\n\n"
        f"{SHA_A}|first|Ann|ann@x|2025-12-17T08:00:00-05:00\n2\t2\tREADME.md\n")
    tags = gitlog.parse_session_tags("session-20251217-070000-claude-start|tag|2025-12-17T07:00:00-05:00|"
                                     f"{SHA_A}|Session start: x\n")
    rows = gitlog.to_eventlog_rows(commits, tags, session_ids={SHA_A: "20251217-070000-claude"}, start_seq=10,
                                   source_file="git")
    assert [(r["seq"], r["event_type"], r["timestamp"], r["source_id"], r["source_file"]) for r in rows] == [
        (10, "git.commit", "2025-12-17T08:00:00-05:00", SHA_A, "git"),  # oldest first, as the scraper appends
        (11, "git.commit", "2025-12-17T10:00:00+01:00", SHA_B, "git"),
        (12, "git.tag", "2025-12-17T07:00:00-05:00", "session-20251217-070000-claude-start", "git"),
    ]
    assert json.loads(rows[0]["data"]) == {
        "sha": SHA_A, "message": "first", "author_name": "Ann", "author_email": "ann@x",
        "files": [{"path": "README.md", "change_type": "modified", "lines_added": 2, "lines_removed": 2}],
        "session_id": "20251217-070000-claude"}
    assert "session_id" not in json.loads(rows[1]["data"])
    assert json.loads(rows[2]["data"]) == {
        "tag_name": "session-20251217-070000-claude-start", "sha": SHA_A, "tag_date": "2025-12-17T07:00:00-05:00",
        "tagger_name": None, "message": "Session start: x"}
