"""The source registry: one small module per raw source, each defining ``SOURCE``.

Adding a source is adding a module here. A sources YAML (``FLYWHEEL_SOURCES``) can override,
per source, where its files are (``globs``, absolute or relative to the raw root, ``~``
expanded) and the time zone of its naive timestamps (``time_zone``)::

    sources:
      interactions:
        globs: ["~/.finch/01-raw/interactions/interactions_*.jsonl"]
        time_zone: Europe/Oslo
      session_ratings:
        globs: ["~/.store/session_feedback.sqlite3"]
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace
from pathlib import Path
from zoneinfo import ZoneInfo

import yaml

from transforms.spec import SourceSpec

OVERRIDABLE = {"globs", "time_zone", "enabled"}


class SourcesConfigError(ValueError):
    pass


def builtin_sources() -> dict[str, SourceSpec]:
    """Every ``SOURCE`` declared in this package, by name, in a stable order."""
    found: dict[str, SourceSpec] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SOURCE", None)
        if isinstance(spec, SourceSpec):
            found[spec.name] = spec
    return dict(sorted(found.items(), key=lambda kv: ORDER.get(kv[0], 99)))


ORDER = {name: i for i, name in enumerate([
    "interactions", "legacy_log", "feedback", "outcomes", "session_ratings",
    "weighted_queue", "weighted_ratings", "eventlog", "signals",
])}


def load_sources(sources_file: Path | None = None, *, disabled: bool = False) -> dict[str, SourceSpec]:
    """The registry with the sources YAML applied; errors name the file and the key.
    ``disabled``: keep the sources it disables, with their other settings (erasure and retention
    reach what the lake holds of them, read as it was)."""
    specs = builtin_sources()
    if sources_file is None:
        return specs
    try:
        doc = yaml.safe_load(sources_file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        # PyYAML's message spans lines (the problem, then the line and a caret): one line here
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SourcesConfigError(f"{sources_file}: not valid YAML{where}: {what}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SourcesConfigError(f"{sources_file}: cannot read the sources file: {exc}") from exc
    if isinstance(doc, dict) and (unknown := sorted(map(str, set(doc) - {"sources"}))):
        # a misspelt `source:` left every override unapplied: time zones read as UTC, a source
        # meant to be off read
        raise SourcesConfigError(f"{sources_file}: unknown top-level keys {unknown}; the file holds one "
                                 "mapping, 'sources:'")
    entries = doc.get("sources", {}) if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise SourcesConfigError(f"{sources_file}: expected a mapping under 'sources:'")
    for name, override in entries.items():
        if name not in specs:
            raise SourcesConfigError(
                f"{sources_file}: unknown source {name!r}; known: {', '.join(specs)}"
            )
        override = override or {}
        if not isinstance(override, dict):
            raise SourcesConfigError(f"{sources_file}: sources.{name}: expected a mapping of "
                                     f"{', '.join(sorted(OVERRIDABLE))}, got {override!r}")
        unknown = set(override) - OVERRIDABLE
        if unknown:
            raise SourcesConfigError(
                f"{sources_file}: sources.{name}: unknown keys {sorted(unknown)}; "
                f"allowed: {sorted(OVERRIDABLE)}"
            )
        if not isinstance(override.get("enabled", True), bool):
            raise SourcesConfigError(f"{sources_file}: sources.{name}.enabled: expected true or false, "
                                     f"got {override['enabled']!r}")
        if override.get("enabled") is False and not disabled:
            del specs[name]
            continue
        changes = {}
        if "globs" in override:
            globs = override["globs"]
            if isinstance(globs, str):
                globs = [globs]
            if not isinstance(globs, list) or not globs or not all(isinstance(g, str) and g for g in globs):
                raise SourcesConfigError(f"{sources_file}: sources.{name}.globs: expected a path or a list of "
                                         f"paths, got {globs!r}")
            changes["globs"] = tuple(globs)
        if "time_zone" in override:
            try:
                ZoneInfo(override["time_zone"])
            except Exception as exc:
                raise SourcesConfigError(
                    f"{sources_file}: sources.{name}.time_zone: unknown time zone "
                    f"{override['time_zone']!r}"
                ) from exc
            changes["time_zone"] = override["time_zone"]
        specs[name] = replace(specs[name], **changes)
    return specs
