"""Runtime configuration from ``FLYWHEEL_*`` environment variables (defaults serve the sample lake).

Every value is checked when the settings are read, and every problem is reported at once, one
line each, naming the variable, the bad value and a good example: a user who mistyped a setting
should learn it before any work is done, not from a traceback 40 seconds into a run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
# Sizes are binary whatever the spelling: the default limit is 16 MiB and "16MB" means the same.
SIZE_RE = re.compile(r"^\s*(\d+)\s*(|b|k|kb|kib|m|mb|mib|g|gb|gib)\s*$", re.IGNORECASE)
SIZE_FACTOR = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}

# The run date's earliest (no source holds an instant before 2000: transforms.spec's plausible
# window) and retention's longest window: a larger one overflowed the run date's arithmetic
# (the step failed, and the window was recorded as the lake's, refusing the next run's 180).
EARLIEST_RUN_DATE = date(2000, 1, 1)
MAX_RETENTION_DAYS = 36_500

DEFAULTS = {
    "FLYWHEEL_RAW_DIR": "data/raw",
    "FLYWHEEL_WAREHOUSE": "data/warehouse.duckdb",
    "FLYWHEEL_EXPORT_DIR": "data/exports",
}


class SettingsError(ValueError):
    """Bad configuration: ``problems`` holds one printable line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def parse_duration(text: str) -> float:
    """``"24h"``, ``"90m"``, ``"3600"`` → seconds."""
    match = DURATION_RE.match(text)
    if not match:
        raise ValueError(f"FLYWHEEL_SEAL_AFTER={text!r} is not a duration; use e.g. 24h, 90m, 2d or 3600 (seconds)")
    return float(match.group(1)) * UNIT_SECONDS[match.group(2)]


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no"):
        return False
    raise ValueError(text)


def parse_size(text: str) -> int:
    """``"16777216"``, ``"16MiB"``, ``"16MB"``, ``"512k"`` → bytes (K/M/G are powers of 1024)."""
    match = SIZE_RE.match(text)
    if not match:
        raise ValueError(text)
    return int(match.group(1)) * SIZE_FACTOR[match.group(2)[:1].lower()]


def project_root_for(cwd: Path) -> Path | None:
    """The checkout holding this package when ``cwd`` is inside it (defaults resolve from there)."""
    if not (PROJECT_ROOT / "pyproject.toml").is_file():
        return None  # installed as a package, not run from a checkout
    try:
        cwd.resolve().relative_to(PROJECT_ROOT)
    except ValueError:
        return None
    return PROJECT_ROOT


# What a publish writes in the export directory (publishing.snapshot: SNAPSHOTS, CURRENT and the
# links through it): its snapshot tree, and the links it puts in place of whatever is there.
SNAPSHOT_TREE = ".snapshots"
EXPORT_LINKS = ("current", "training", "analytics")


@dataclass(frozen=True)
class Settings:
    raw_dir: Path
    warehouse: Path  # the analyst warehouse: a symlink to <export_dir>/current/warehouse.duckdb
    export_dir: Path
    sources_file: Path | None
    seal_after_seconds: float = 24 * 3600
    max_line_bytes: int = 16 * 1024 * 1024
    pseudonym_key: str | None = field(default=None, repr=False)
    dpo_max_pairs: int = 16
    as_of: date | None = None  # the run date for decay and retention; None: today (UTC)
    eval_fraction: float = 0.05
    session_retention_days: int = 180
    # the shorter window a run may apply (FLYWHEEL_RETENTION_CONFIRM: ``_retention_window_problem``)
    retention_confirm: int | None = None
    # the raw root a run may read instead of the recorded one (FLYWHEEL_RAW_DIR_CONFIRM: ``_raw_root_problem``)
    raw_dir_confirm: Path | None = None
    # rebuild raw from the files where a state from before the bronze record holds rows (``check_legacy_raw``)
    legacy_rebuild: bool = False
    keep_snapshots: int = 5  # published snapshots kept readable (time travel)
    keep_runs: int = 200  # finished runs whose Dagster history is kept (0: all; ``history``)
    allow_empty: bool = False  # publish an empty dataset over a non-empty one
    # a line file whose size, mtime, inode and settled ctime are the recorded ones is not read
    # (off: its last 64 KiB are read and hashed, for mounts whose ctime does not follow writes)
    trust_ctime: bool = True
    # steps of a run that may run at once, on threads of its process (1: one after another)
    step_threads: int = 2

    @property
    def run_date(self) -> date:
        return self.as_of or datetime.now(timezone.utc).date()

    @property
    def pseudonym_key_file(self) -> Path:
        return self.state_dir / "pseudonym.key"

    @property
    def own_dirs(self) -> tuple[Path, ...]:
        """What the lake writes itself, never a source's files: its state, its snapshot tree and
        the links a publish puts in the export directory (not the export directory itself: a raw
        root inside it lost every producer file to the exclusion)."""
        return (self.state_dir, self.export_dir / SNAPSHOT_TREE, *(self.export_dir / name for name in EXPORT_LINKS))

    @property
    def state_dir(self) -> Path:
        """Private working area beside the warehouse: the writer's database, locks, keys."""
        return self.warehouse.parent / ".flywheel"

    @property
    def state_db(self) -> Path:
        return self.state_dir / "state.duckdb"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, cwd: Path | None = None, *,
                 lenient: bool = False) -> "Settings":
        """Read and check every ``FLYWHEEL_*`` variable; raise one ``SettingsError`` listing all problems
        (``lenient``: a value that cannot be read is left at its default instead; the paths are
        read alike, so that a run failing on a bad value can still be recorded where the lake is).

        A relative path set in the environment is relative to the current directory; the
        defaults are relative to the project checkout when the command runs anywhere inside it
        (so ``cd data && flywheel status`` finds ``data/warehouse.duckdb``), else to the
        current directory.
        """
        env = dict(os.environ if env is None else env)
        cwd = cwd or Path.cwd()
        default_base = project_root_for(cwd) or cwd
        problems: list[str] = []

        def path(name: str) -> Path:
            given = env.get(name)
            value = Path(given or DEFAULTS[name]).expanduser()
            return value if value.is_absolute() else ((cwd if given else default_base) / value)

        def parse(name: str, default, convert, example: str, check=lambda v: True, rule: str = ""):
            text = env.get(name)
            if text is None or text.strip() == "":
                return default
            try:
                value = convert(text.strip())
            except (ValueError, OverflowError):
                value = None
            if value is None or not check(value):
                problems.append(f"{name}={text!r} is not valid: use {rule or example}, e.g. {name}={example}")
                return default
            return value

        sources = env.get("FLYWHEEL_SOURCES")
        sources_file = None
        if sources:
            sources_file = Path(sources).expanduser()
            sources_file = sources_file if sources_file.is_absolute() else cwd / sources_file
        settings = cls(
            raw_dir=path("FLYWHEEL_RAW_DIR"),
            warehouse=path("FLYWHEEL_WAREHOUSE"),
            export_dir=path("FLYWHEEL_EXPORT_DIR"),
            sources_file=sources_file,
            seal_after_seconds=parse("FLYWHEEL_SEAL_AFTER", 24 * 3600.0, parse_duration, "24h",
                                     rule="a duration in s, m, h or d (24h, 90m, 2d, 3600)"),
            max_line_bytes=parse("FLYWHEEL_MAX_LINE_BYTES", 16 * 1024 * 1024, parse_size, "16MiB",
                                 check=lambda v: v > 0,
                                 rule="a positive size in bytes, or with K/M/G (binary: 16MB = 16MiB = 16777216)"),
            pseudonym_key=env.get("FLYWHEEL_PSEUDONYM_KEY") or None,
            dpo_max_pairs=parse("FLYWHEEL_DPO_MAX_PAIRS", 16, int, "16", check=lambda v: v > 0,
                                rule="a positive whole number"),
            as_of=parse("FLYWHEEL_AS_OF", None, date.fromisoformat, "2026-02-28",
                        check=lambda v: len(env["FLYWHEEL_AS_OF"].strip()) == 10 and v >= EARLIEST_RUN_DATE,
                        rule=f"a calendar date YYYY-MM-DD from {EARLIEST_RUN_DATE} on"),
            eval_fraction=parse("FLYWHEEL_EVAL_FRACTION", 0.05, float, "0.05", check=lambda v: 0 <= v < 1,
                                rule="a number from 0 up to (not including) 1"),
            session_retention_days=parse("FLYWHEEL_SESSION_RETENTION_DAYS", 180, int, "180",
                                         check=lambda v: 0 < v <= MAX_RETENTION_DAYS,
                                         rule=f"a number of days from 1 to {MAX_RETENTION_DAYS:,} (100 years)"),
            retention_confirm=parse("FLYWHEEL_RETENTION_CONFIRM", None, int, "30",
                                    check=lambda v: 0 < v <= MAX_RETENTION_DAYS,
                                    rule=f"the new, shorter FLYWHEEL_SESSION_RETENTION_DAYS (1 to {MAX_RETENTION_DAYS:,})"),
            raw_dir_confirm=path("FLYWHEEL_RAW_DIR_CONFIRM") if env.get("FLYWHEEL_RAW_DIR_CONFIRM") else None,
            legacy_rebuild=parse("FLYWHEEL_LEGACY_REBUILD", False, _flag, "1", rule="1/true/yes or 0/false/no"),
            keep_snapshots=parse("FLYWHEEL_KEEP_SNAPSHOTS", 5, int, "5", check=lambda v: v > 0,
                                 rule="a positive number of snapshots"),
            keep_runs=parse("FLYWHEEL_KEEP_RUNS", 200, int, "200", check=lambda v: v >= 0,
                            rule="a whole number of runs (0 keeps every run)"),
            allow_empty=parse("FLYWHEEL_ALLOW_EMPTY", False, _flag, "1", rule="1/true/yes or 0/false/no"),
            trust_ctime=parse("FLYWHEEL_TRUST_CTIME", True, _flag, "0", rule="1/true/yes or 0/false/no"),
            step_threads=parse("FLYWHEEL_STEP_THREADS", 2, int, "2", check=lambda v: 1 <= v <= 16,
                               rule="a whole number from 1 (one step at a time) to 16"),
        )
        if problems and not lenient:
            raise SettingsError(problems)
        return settings

    def location_problems(self) -> list[str]:
        """Why ``warehouse`` is no place for this lake's warehouse link and state (the state
        directory beside it): checked before anything is created there, by ``preflight`` and by a
        Dagster run's resource (a mistyped path made a run write a state database into a
        producer's directory before its steps refused the setting)."""
        problems: list[str] = []
        if directory := self.warehouse_directory():
            problems.append(directory)
        elif (self.warehouse.parent.resolve() / self.warehouse.name).is_relative_to(self.export_dir.resolve()):
            # (a snapshot's own warehouse, as the README names it: the link replaced that file)
            problems.append(f"FLYWHEEL_WAREHOUSE={self.warehouse} is inside FLYWHEEL_EXPORT_DIR={self.export_dir}: "
                            "each publish puts its link to the current snapshot's warehouse there; put it beside, "
                            f"e.g. FLYWHEEL_WAREHOUSE={self.export_dir.parent / 'warehouse.duckdb'}")
        elif (foreign := _foreign_file(self.warehouse)) is not None:
            # the publish puts its link in the warehouse's place (a warehouse an older version
            # wrote as a file is replaced by it): any other file there was destroyed, a run later
            problems.append(f"FLYWHEEL_WAREHOUSE={self.warehouse} is an existing file that is not this lake's "
                            f"warehouse ({foreign}): the run would replace it with a link to the published "
                            f"warehouse; name a new path, e.g. FLYWHEEL_WAREHOUSE="
                            f"{self.warehouse.parent / 'warehouse.duckdb'}")
        elif problem := _unwritable(self.warehouse.parent) or _unwritable(self.state_dir):
            # (the state directory beside it holds the writer's database: read-only, a run failed
            # at its first commit)
            problems.append(f"FLYWHEEL_WAREHOUSE={self.warehouse}: {problem}; choose a writable place, "
                            f"e.g. FLYWHEEL_WAREHOUSE={Path.home() / 'flywheel' / 'warehouse.duckdb'}")
        if (inside := self._inside_raw("FLYWHEEL_WAREHOUSE", self.warehouse, self.state_dir, "warehouse.duckdb")):
            problems.append(inside)
        return problems

    def warehouse_directory(self) -> str | None:
        """The problem of a warehouse path that names a directory (for `run` and the read-only
        commands alike), or None."""
        if not self.warehouse.is_dir():
            return None
        return (f"FLYWHEEL_WAREHOUSE={self.warehouse} is a directory: name the database file, "
                f"e.g. FLYWHEEL_WAREHOUSE={self.warehouse / 'warehouse.duckdb'}")

    def _inside_raw(self, name: str, value: Path, inside: Path, example: str) -> str | None:
        """``inside`` (what ``name`` puts there) lies under the raw root: a source's glob
        (``**/*.jsonl``) then reads the lake's own bronze and exports (every run quarantined some
        of them and published again)."""
        if self.raw_dir.is_dir() and inside.resolve().is_relative_to(raw := self.raw_dir.resolve()):
            return (f"{name}={value} is inside FLYWHEEL_RAW_DIR={self.raw_dir}: the lake would read its "
                    f"own files; put it beside the raw root, e.g. {name}={raw.parent / example}")
        return None

    def _nested_export(self) -> str | None:
        """The export directory inside a snapshot tree (another lake's ``current``, a link into its
        ``.snapshots``), inside another export directory, or inside a lake's state directory. The
        owner check looks in the directory given only: a run given another lake's `…/exports/current`
        took that snapshot's datasets for an older layout's, moved them aside and put its own links
        there, and `flywheel status` of that lake still said `passed`."""
        real = self.export_dir.resolve()
        for directory in (real, *real.parents):
            if directory.name == SNAPSHOT_TREE and _snapshot_tree(directory):
                what = f"inside the snapshot tree {directory}"
            elif directory != real and _snapshot_tree(directory / SNAPSHOT_TREE):
                what = f"inside the export directory {directory}"
            elif directory.name == self.state_dir.name and (directory / self.state_db.name).exists():
                what = f"inside the lake state directory {directory}"
            else:
                continue
            return (f"FLYWHEEL_EXPORT_DIR={self.export_dir} is {what}: a publish there would move a published "
                    f"snapshot's files aside; give a directory of its own, outside {directory}")
        return None

    def preflight(self, *, need_raw: bool = True) -> None:
        """Check the file system before a run writes anything: the raw root exists, the warehouse
        and export paths can be written, the sources file loads. All problems at once."""
        from dagster_project.sources import SourcesConfigError, load_sources

        problems: list[str] = []
        if need_raw and not self.raw_dir.is_dir():
            what = "is not a directory" if self.raw_dir.exists() else "does not exist"
            problems.append(f"FLYWHEEL_RAW_DIR={self.raw_dir} {what}: point it at the root of the raw lake, "
                            f"e.g. FLYWHEEL_RAW_DIR={PROJECT_ROOT / 'data' / 'raw'}")
        problems += self.location_problems()
        if self.export_dir.exists() and not self.export_dir.is_dir():
            problems.append(f"FLYWHEEL_EXPORT_DIR={self.export_dir} is a file: name a directory, "
                            f"e.g. FLYWHEEL_EXPORT_DIR={self.export_dir.parent / 'exports'}")
        elif problem := _unwritable(self.export_dir):
            problems.append(f"FLYWHEEL_EXPORT_DIR={self.export_dir}: {problem}; choose a writable directory, "
                            f"e.g. FLYWHEEL_EXPORT_DIR={Path.home() / 'flywheel' / 'exports'}")
        elif (foreign := _foreign_export(self.export_dir)) is not None:
            problems.append(f"FLYWHEEL_EXPORT_DIR={self.export_dir} holds {foreign}, which this pipeline did not "
                            "write: a publish puts its link in that place; choose a directory of its own, e.g. "
                            f"FLYWHEEL_EXPORT_DIR={self.export_dir / 'flywheel'}")
        if (inside := self._inside_raw("FLYWHEEL_EXPORT_DIR", self.export_dir, self.export_dir, "exports")):
            problems.append(inside)
        if (nested := self._nested_export()) is not None:
            problems.append(nested)
        today = datetime.now(timezone.utc).date()
        if self.as_of is not None and (self.as_of - today).days > 1:  # (a day's slack: time zones)
            # retention erases from the lake (bronze) what is older than its window as of the run
            # date, for good: a typo of a year erased every rating
            problems.append(f"FLYWHEEL_AS_OF={self.as_of} is after today ({today}): retention as of that day "
                            "would erase from the lake records that are still in their window; use today or an "
                            "earlier date, or unset it")
        if self.sources_file is not None:
            if not self.sources_file.is_file():
                what = "is not a file" if self.sources_file.exists() else "does not exist"
                problems.append(f"FLYWHEEL_SOURCES={self.sources_file} {what}: point it at a sources "
                                "YAML file (see README, Configuration) or unset it")
            else:
                try:
                    load_sources(self.sources_file)
                except SourcesConfigError as exc:
                    problems.append(f"FLYWHEEL_SOURCES: {exc}")
        if not problems:
            from dagster_project.privacy import erasure_key_problem

            problems += [problem for problem in (erasure_key_problem(self), self._retention_window_problem(),
                                                 need_raw and self._raw_root_problem(),
                                                 self._export_owner_problem()) if problem]
        if problems:
            raise SettingsError(problems)
        self._claim_export_dir()
        self._record(self.RETENTION_WINDOW, "session_retention_days", self.session_retention_days)
        if need_raw:
            self._record(self.RAW_ROOT, "raw_root", [str(self.raw_dir.resolve()), str(self.raw_dir)])

    # under the state dir, what the runs of this lake last applied: the retention window, the raw root
    RETENTION_WINDOW = "retention_window.json"
    RAW_ROOT = "raw_root.json"
    # the lake's identity (under the state dir), and the lake whose snapshots an export directory
    # holds (under its snapshot tree, publishing.snapshot.SNAPSHOTS)
    LAKE_ID = "lake_id.json"
    EXPORT_OWNER = (SNAPSHOT_TREE, ".owner.json")  # (a dot name: not taken for a snapshot version)
    # every export directory this lake has published to, the last one used last
    EXPORT_DIRS = "export_dirs.json"

    def _recorded(self, name: str, key: str):
        import json

        try:
            return json.loads((self.state_dir / name).read_text(encoding="utf-8"))[key]
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def _record(self, name: str, key: str, value) -> None:
        import json

        from dagster_project.engine.bronze import _atomic_write

        if self._recorded(name, key) != value:
            _atomic_write(self.state_dir / name, json.dumps({key: value}).encode("utf-8"))

    def _recorded_retention_window(self) -> int | None:
        try:
            return int(self._recorded(self.RETENTION_WINDOW, "session_retention_days"))
        except (ValueError, TypeError):
            return None

    def _raw_root_problem(self) -> str | None:
        """Files are known by their path under the raw root, so a mistyped root holding another
        lake's files under the same names (``outcomes/2026-02-05_outcomes.jsonl``) read as this
        lake's files rewritten: their lines were merged into bronze, for good. A root other than
        the one the lake was read from (the same directory by another path is the same) is read
        only when confirmed: a lake that moved."""
        kept = self._recorded(self.RAW_ROOT, "raw_root")
        if isinstance(kept, str):  # (as the first version recorded it)
            kept = [kept, kept]
        root = self.raw_dir.resolve()
        # the same path as given (a link switched to each day's copy) or the same directory
        if not isinstance(kept, list) or str(self.raw_dir) == kept[-1] or Path(kept[0]) == root \
                or not self.raw_dir.is_dir():
            return None
        try:
            if os.path.samefile(kept[0], root):
                return None
        except OSError:  # the recorded root is gone: the lake may have moved
            pass
        if self.raw_dir_confirm is not None and self.raw_dir_confirm.resolve() == root:
            return None
        return (f"FLYWHEEL_RAW_DIR={self.raw_dir} is not the raw root this lake was read from ({kept[-1]}, recorded in "
                f"{self.state_dir / self.RAW_ROOT}): its files would be merged into that lake's for good; set "
                f"FLYWHEEL_RAW_DIR={kept[-1]} again, or give another lake a FLYWHEEL_WAREHOUSE in a directory of its "
                f"own (the state is the .flywheel beside it) and its own FLYWHEEL_EXPORT_DIR; if this lake moved, "
                f"run once with FLYWHEEL_RAW_DIR_CONFIRM={root}")

    def _owner_file(self) -> Path:
        return self.export_dir.joinpath(*self.EXPORT_OWNER)

    def _export_owner_problem(self) -> str | None:
        """Nothing tied an export directory to the lake publishing into it: two lakes given one
        (another FLYWHEEL_WAREHOUSE, the same default exports) each published over the other, and a
        lake's warehouse showed the other's data; a new state (a warehouse path mistyped) published
        a subject `flywheel forget` had erased from the first, read again from the producers'
        files, into its current snapshot. A directory holding another lake's snapshots is refused."""
        owner = _owner_of(self.export_dir)  # (None: no snapshot yet, or an earlier version's: this lake takes it)
        if not isinstance(owner, dict) or owner.get("lake") in (None, self._recorded(self.LAKE_ID, "lake")):
            return None
        return (f"FLYWHEEL_EXPORT_DIR={self.export_dir} holds the snapshots of another lake (its state: "
                f"{owner.get('state')}; recorded in {self._owner_file()}): the run would publish over them; give "
                f"this lake its own FLYWHEEL_EXPORT_DIR, or point FLYWHEEL_WAREHOUSE at that lake's; if this lake "
                f"replaces that one (its state was deleted), delete {self._owner_file()}")

    def _claim_export_dir(self) -> None:
        """This lake's identity (made once) recorded as the export directory's owner."""
        import json
        import uuid

        from dagster_project.engine.bronze import _atomic_write, create_once

        lake = self._recorded(self.LAKE_ID, "lake")
        if lake is None:
            # Created once, whoever is first: the steps of a Dagster run check their settings at
            # once, and two ids written one over the other left the export directory owned by
            # the one this lake did not keep (every run refused from then on).
            create_once(self.state_dir / self.LAKE_ID, json.dumps({"lake": uuid.uuid4().hex}).encode("utf-8"))
            lake = self._recorded(self.LAKE_ID, "lake")
        owner = self._as_owner(lake)
        if _owner_of(self.export_dir) == owner:
            return
        self._owner_file().parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(self._owner_file(), json.dumps(owner).encode("utf-8"))

    def _as_owner(self, lake: str) -> dict:
        """What an export directory this lake (this state) publishes to records as its owner."""
        return {"lake": lake, "state": str(self.state_dir.resolve())}

    def _recorded_export_dirs(self) -> list[str]:
        dirs = self._recorded(self.EXPORT_DIRS, "export_dirs")
        return [d for d in dirs if isinstance(d, str)] if isinstance(dirs, list) else []

    def note_export_dir(self) -> str | None:
        """Record ``export_dir`` as the one this lake publishes to (called by the publish, under
        the writer lock); a warning when the last was another that still holds its snapshots."""
        here = os.path.realpath(self.export_dir)
        recorded = self._recorded_export_dirs()
        if recorded[-1:] == [here]:
            return None
        self._record(self.EXPORT_DIRS, "export_dirs", [d for d in recorded if d != here] + [here])
        last = recorded[-1] if recorded else None
        if last is None or Path(last) not in self.export_dirs():
            return None
        return (f"FLYWHEEL_EXPORT_DIR={self.export_dir} is not the export directory this lake last published to "
                f"({last}): the warehouse link moves here; the snapshots there stay, and `flywheel forget` and "
                "retention scrub them as they do these")

    def export_dirs(self) -> list[Path]:
        """``export_dir`` and every other export directory this lake (this state) has published to
        that still holds its snapshots: `flywheel forget` and retention scrub each. A run given another
        FLYWHEEL_EXPORT_DIR (one shell's setting, not the schedule's) published a whole snapshot
        there, which a forget, scrubbing only the one it was given, left holding the subject.
        (Directories published to before this was recorded, the thirty-third session, are not known.)"""
        found = [Path(os.path.realpath(self.export_dir))]
        lake = self._recorded(self.LAKE_ID, "lake")
        for name in reversed(self._recorded_export_dirs() if lake is not None else []):
            other = Path(name)
            # this lake's, from this state (not removed, nor taken by another lake): a copy of the
            # lake (its state copied beside it) holds the same id and list, and its forget
            # scrubbed the original's snapshots
            if other not in found and _owner_of(other) == self._as_owner(lake):
                found.append(other)
        return found

    def _retention_window_problem(self) -> str | None:
        """A window shorter than the one the lake keeps erases from bronze, for good, what lies
        between the two (the producer's store is read again only when it changes): a typo (18 for
        180) did that with no word. It is applied only when confirmed."""
        kept = self._recorded_retention_window()
        days = self.session_retention_days
        if kept is None or days >= kept or self.retention_confirm == days:
            return None
        return (f"FLYWHEEL_SESSION_RETENTION_DAYS={days} is shorter than the {kept} days the lake keeps: the run "
                f"would erase from it, for good, the session ratings {days} to {kept} days old; if that is meant, "
                f"run once with FLYWHEEL_RETENTION_CONFIRM={days}")


def _foreign_export(export_dir: Path) -> str | None:
    """What in the export directory a publish would replace and did not write: the names it puts
    links at holding a file (a user's notes in ``analytics`` were replaced by a link, their
    content gone), or a directory that is not an older version's layout (its Parquet datasets,
    moved aside into ``.snapshots/.legacy-*``: a user's ``training/notes.txt`` went there
    without a word)."""
    for name in EXPORT_LINKS:
        path = export_dir / name
        if path.is_symlink() or not os.path.lexists(path):
            continue
        if not path.is_dir() or name == "current":
            return f"{path} (a {'directory' if path.is_dir() else 'file'})"
        for here, dirs, files in os.walk(path):
            # (an older version's own dot files: ``.versions/<dataset>/.lock``, ``.<dataset>.link-<pid>``)
            dirs[:] = [d for d in dirs if not d.startswith(".") or d == ".versions"]
            other = next((f for f in files if not f.startswith(".") and not f.endswith((".parquet", ".json"))), None)
            if other is not None:
                return f"{Path(here) / other}"
    return None


def _owner_of(export_dir: Path):
    """What ``export_dir``'s snapshot tree records as its owner (``Settings.EXPORT_OWNER``), None
    when nothing is recorded or it cannot be read."""
    import json

    try:
        return json.loads(export_dir.joinpath(*Settings.EXPORT_OWNER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _snapshot_tree(directory: Path) -> bool:
    """``directory`` is a lake's snapshot tree: it records its lake or holds its objects (a
    `.snapshots` of another tool, snapper's `/.snapshots`, is none: every export directory below
    it was refused)."""
    return (directory / Settings.EXPORT_OWNER[-1]).is_file() or (directory / ".objects").is_dir()


def _foreign_file(path: Path) -> str | None:
    """Why the file at ``path`` is not a warehouse this pipeline wrote, or None: nothing there, the
    link a publish made (or any link: replacing one loses no data), or a DuckDB database holding
    the pipeline's tables (an older layout's warehouse, rebuilt from the state database)."""
    if path.is_symlink() or not path.exists():
        return None
    if not path.is_file():
        return "not a regular file"
    try:
        with path.open("rb") as fh:
            header = fh.read(12)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if header[8:12] != b"DUCK":
        return "not a DuckDB database"
    import duckdb

    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        return f"cannot be opened: {str(exc).splitlines()[0]}"
    try:  # (a published warehouse holds views only: a snapshot's file, not one to replace)
        schemas = {r[0] for r in con.execute("select distinct schema_name from duckdb_tables()").fetchall()}
    finally:
        con.close()
    return None if {"ingest", "exports"} <= schemas else "a DuckDB database without the warehouse's tables"


def _unwritable(directory: Path) -> str | None:
    """Why files cannot be created in ``directory`` (made on demand), or None if they can."""
    probe = directory
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None
