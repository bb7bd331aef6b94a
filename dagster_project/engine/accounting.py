"""The ingestion bookkeeping: schema, raw tables, per-file results, the accounting identity."""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from transforms.classify import output_columns, q
from transforms.spec import SourceSpec
from transforms.sqlfiles import SQL_DIR, table_columns, transaction
from transforms.staging import PROVENANCE


class AccountingError(RuntimeError):
    """``lines_read ≠ rows_loaded + rows_quarantined + blank_lines`` for some file."""


class SchemaChangedError(RuntimeError):
    """The source's declared fields no longer match its raw table."""


class BronzeDamaged(RuntimeError):
    """The bronze record names objects that are gone: a rebuild from it would lose their records."""


class LegacyStateError(RuntimeError):
    """raw.<source> holds rows an older version read before the lake kept a bronze record."""


@dataclass
class FileResult:
    path: str
    # new | appended | unchanged | rewritten | shrunk | sealed | corrupt | locked | missing | ...
    event: str
    lines: int = 0
    loaded: int = 0
    quarantined: int = 0
    blank: int = 0
    deferred_bytes: int = 0
    bytes_read: int = 0


@dataclass
class SourceReport:
    source: str
    run_id: str
    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0
    replayed_entries: int = 0
    expired: int = 0  # records retention removed from bronze this run, or kept out of it as read
    unlisted: list[tuple[str, str]] = field(default_factory=list)  # directories the listing may not read

    def total(self, attr: str) -> int:
        return sum(getattr(f, attr) for f in self.files)

    @property
    def changed_files(self) -> list[FileResult]:
        return [f for f in self.files if f.event != "unchanged"]


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("set TimeZone = 'UTC'")
    con.execute((SQL_DIR / "ingest" / "schema.sql").read_text(encoding="utf-8"))


def raw_columns(spec: SourceSpec) -> list[tuple[str, str]]:
    return output_columns(spec) + PROVENANCE


def ensure_raw_table(con: duckdb.DuckDBPyConnection, spec: SourceSpec) -> None:
    wanted = raw_columns(spec)
    table = f"raw.{q(spec.name)}"
    cols = ", ".join(f"{q(n)} {t}" for n, t in wanted)
    con.execute(f"create table if not exists {table} ({cols})")
    if list(table_columns(con, f"raw.{spec.name}") or {}) != [n for n, _ in wanted]:
        raise SchemaChangedError(
            f"source {spec.name!r}: its declared fields changed since raw.{spec.name} was built; "
            "run `flywheel run --full-refresh` to rebuild it (from bronze: nothing is lost)"
        )


def check_legacy_raw(con: duckdb.DuckDBPyConnection, settings, source: str, read_files: bool = True) -> bool:
    """Whether raw.<source> holds rows of a state an older version built before the lake kept a
    bronze record (rows, and no bronze entry applied), to be rebuilt from the producers' files.
    Anything that resets the source (a full refresh, a changed declaration, a retention pass,
    ``quarantine replay``) rebuilds raw from bronze, which does not hold them: the rows of files
    deleted since were lost with no word. Refused (``LegacyStateError``) until confirmed with
    ``FLYWHEEL_LEGACY_REBUILD=1`` (``settings.legacy_rebuild``), and for a source whose files are
    not read (disabled); after the rebuild bronze holds all raw does."""
    from dagster_project.privacy import _count

    if con.execute("select count(*) from ingest.bronze_applied where source = ?", [source]).fetchone()[0]:
        return False
    rows = _count(con, f"raw.{q(source)}")
    if not rows:
        return False
    if not settings.legacy_rebuild or not read_files:
        raise LegacyStateError(
            f"source {source}: raw.{source} in {settings.state_db} holds {rows:,} rows an older version read before the "
            f"lake kept a bronze record of them; this version rebuilds raw from that record, so the rows of files "
            f"deleted or rewritten since would be lost: copy {settings.state_dir} aside, then run once with "
            "FLYWHEEL_LEGACY_REBUILD=1, which rebuilds raw from the producers' files as they are now (the rows of "
            "files no longer there are dropped)" + ("" if read_files else "; enable the source first: its files are "
                                                                          "read then"))
    return True


def reset_source(con: duckdb.DuckDBPyConnection, source: str) -> None:
    """Drop everything derived from bronze for ``source``: its next run replays bronze whole
    (through today's classifier) before reading what is new in the producers' files."""
    from dagster_project import versions

    # One transaction: a crash after raw is dropped but before ingest.bronze_applied is cleared
    # would leave the next run replaying nothing into an empty raw.
    with transaction(con):
        con.execute(f"drop table if exists raw.{q(source)}")
        con.execute(f"drop table if exists staging.{q(source)}")
        versions.bump(con, f"raw.{source}", None, reset=True)
        versions.forget(con, f"staging.{source}")
        for table in ("ingest.quarantine", "ingest.files", "ingest.file_events", "ingest.bronze_applied",
                      "ingest.sqlite_keys", "lineage.bronze_known", "lineage.bronze_known_through"):
            con.execute(f"delete from {table} where source = ?", [source])


def check_accounting(con: duckdb.DuckDBPyConnection, source: str | None = None) -> None:
    """Fail loudly when any file's lines are not all accounted for."""
    bad = con.execute(
        "select source, path, lines_read, rows_loaded, rows_quarantined, blank_lines from ingest.files "
        "where ($source is null or source = $source) "
        "and lines_read <> rows_loaded + rows_quarantined + blank_lines",
        {"source": source}).fetchall()
    if bad:
        lines = [f"  {s}: {p}: read {r} ≠ loaded {l} + quarantined {qq} + blank {b}"
                 for s, p, r, l, qq, b in bad]
        raise AccountingError("ingestion accounting does not balance:\n" + "\n".join(lines))
    # The stored rows must match the counters too: nothing inserted twice, nothing missing.
    mismatch = con.execute(
        "with stored as (select source, path, count(*) as n from ingest.quarantine "
        "where ($source is null or source = $source) group by all) "
        "select f.source, f.path, f.rows_quarantined, coalesce(s.n, 0) from ingest.files f "
        "left join stored s using (source, path) "
        "where ($source is null or f.source = $source) and f.rows_quarantined <> coalesce(s.n, 0)",
        {"source": source}).fetchall()
    if mismatch:
        raise AccountingError("quarantine rows do not match the counters: " + "; ".join(
            f"{s}: {p}: counted {c}, stored {n}" for s, p, c, n in mismatch))
