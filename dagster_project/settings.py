"""Runtime configuration from ``FLYWHEEL_*`` environment variables (defaults serve the sample lake)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``"24h"``, ``"90m"``, ``"3600"`` → seconds."""
    match = DURATION_RE.match(text)
    if not match:
        raise ValueError(f"FLYWHEEL_SEAL_AFTER: cannot read {text!r} as a duration like 24h, 90m or 3600")
    return float(match.group(1)) * UNIT_SECONDS[match.group(2)]


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
    keep_snapshots: int = 5  # published snapshots kept readable (time travel)
    allow_empty: bool = False  # publish an empty dataset over a non-empty one

    @property
    def run_date(self) -> date:
        return self.as_of or datetime.now(timezone.utc).date()

    @property
    def pseudonym_key_file(self) -> Path:
        return self.state_dir / "pseudonym.key"

    @property
    def state_dir(self) -> Path:
        """Private working area beside the warehouse: the writer's database, locks, keys."""
        return self.warehouse.parent / ".flywheel"

    @property
    def state_db(self) -> Path:
        return self.state_dir / "state.duckdb"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if env is None else env)

        def path(name: str, default: str) -> Path:
            value = Path(env.get(name) or default).expanduser()
            return value if value.is_absolute() else (Path.cwd() / value)

        sources = env.get("FLYWHEEL_SOURCES")
        return cls(
            raw_dir=path("FLYWHEEL_RAW_DIR", "data/raw"),
            warehouse=path("FLYWHEEL_WAREHOUSE", "data/warehouse.duckdb"),
            export_dir=path("FLYWHEEL_EXPORT_DIR", "data/exports"),
            sources_file=Path(sources).expanduser() if sources else None,
            seal_after_seconds=parse_duration(env.get("FLYWHEEL_SEAL_AFTER", "24h")),
            max_line_bytes=int(env.get("FLYWHEEL_MAX_LINE_BYTES", 16 * 1024 * 1024)),
            pseudonym_key=env.get("FLYWHEEL_PSEUDONYM_KEY") or None,
            dpo_max_pairs=int(env.get("FLYWHEEL_DPO_MAX_PAIRS", 16)),
            as_of=date.fromisoformat(env["FLYWHEEL_AS_OF"]) if env.get("FLYWHEEL_AS_OF") else None,
            eval_fraction=float(env.get("FLYWHEEL_EVAL_FRACTION", 0.05)),
            session_retention_days=int(env.get("FLYWHEEL_SESSION_RETENTION_DAYS", 180)),
            keep_snapshots=int(env.get("FLYWHEEL_KEEP_SNAPSHOTS", 5)),
            allow_empty=env.get("FLYWHEEL_ALLOW_EMPTY", "") in ("1", "true", "yes"),
        )
