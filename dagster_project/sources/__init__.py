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
from functools import cache
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


class _UniqueKeys(yaml.SafeLoader):
    """YAML whose mappings name each key once: a source given twice kept its second entry alone,
    and a key twice its last value, without a word (a time zone read as UTC)."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: merged by construct_mapping
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"{key!r} is given twice", key_node.start_mark)
            seen.add(key)
        except TypeError:  # a list or mapping as a key: construct_mapping says so
            break
    return loader.construct_mapping(node, deep=deep)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


@cache
def _known_zone(zone: str) -> None:
    """Raise unless both Python and DuckDB know ``zone``: the classifier converts in DuckDB, whose
    list lacks some names Python's has (``localtime``, ``posixrules``, ``posix/…``, ``right/…``:
    every run failed, on a line naming neither the setting nor the file). Once per zone and
    process: the sources file is read by every step (a DuckDB connection costs ~20 ms)."""
    import duckdb

    ZoneInfo(zone)
    with duckdb.connect() as con:
        con.execute("select timezone(?, timestamp '2000-01-01')", [zone]).fetchone()


def load_sources(sources_file: Path | None = None, *, disabled: bool = False) -> dict[str, SourceSpec]:
    """The registry with the sources YAML applied; errors name the file and the key.
    ``disabled``: keep the sources it disables, with their other settings (erasure and retention
    reach what the lake holds of them, read as it was)."""
    specs = builtin_sources()
    if sources_file is None:
        return specs
    try:
        doc = yaml.load(sources_file.read_text(encoding="utf-8"), Loader=_UniqueKeys) or {}
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
            if dirs := [g for g in globs if Path(g).name in ("", ".", "..")]:
                # (`/` failed every run in a traceback from inside pathlib)
                raise SourcesConfigError(f"{sources_file}: sources.{name}.globs: {dirs[0]!r} names a directory, "
                                         f"not files; e.g. {str(Path(dirs[0]) / '*.jsonl')!r}")
            changes["globs"] = tuple(globs)
        if "time_zone" in override:
            try:
                if not isinstance(override["time_zone"], str):
                    raise TypeError("not a name")
                _known_zone(override["time_zone"])
            except Exception as exc:
                raise SourcesConfigError(
                    f"{sources_file}: sources.{name}.time_zone: unknown time zone "
                    f"{override['time_zone']!r}"
                ) from exc
            changes["time_zone"] = override["time_zone"]
        specs[name] = replace(specs[name], **changes)
    return specs
