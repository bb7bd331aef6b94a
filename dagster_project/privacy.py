"""Privacy: erase one person (``flywheel forget``) and apply retention in every layer.

One machinery for both: a *matcher* says whether a record must go (its declared subject fields,
``SourceSpec.subjects``, hash to an erased key; or its retention field is older than the
window). It is applied

* to the bronze record: each affected object is rewritten with the subject's JSONL lines
  overwritten by spaces of the same length (offsets and line counts stay valid, the line
  replays as blank: accounting still balances) and its SQLite rows dropped; the segments naming
  the object are replaced atomically with the new object, offsets and sha256;
* at ingest, before bronze is written (``scrub_batch``), so a producer file that still holds
  the subject (a rewrite, a new generation, a full refresh) never brings it back;
* raw/staging/marts/exports follow by replaying bronze (a full refresh of the affected sources);
* to every kept snapshot: the affected Parquet files are rewritten without the rows, linked in
  place and the manifest updated (rows, sha256, object), so ``verify_snapshot`` still passes.

Erased subjects are kept as HMAC-SHA-256 (the pseudonym key) of ``<kind>:<value>`` in
``<state_dir>/erased_subjects.json``, never the id. Each erasure leaves one row per source in
``ingest.erasures`` (no id). A producer's own purge (a row deleted at source) is only recorded
by the engine; removing is the lake's retention.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import duckdb

from dagster_project.engine import bronze as bronze_mod
from dagster_project.engine.accounting import BronzeDamaged
from dagster_project.engine.readers import sqlite as sqlite_reader
from dagster_project.settings import Settings
from transforms.jsontext import shallow
from transforms.pseudonyms import (DOC_PATHS, existing_key, load_or_create_key, opaque_session_id, pseudonym,
                                  session_pseudonym)
from transforms.spec import SourceSpec

ERASED_FILE = "erased_subjects.json"
PENDING_FILE = "erase_pending.json"  # (an earlier version's one file for every erasure)
PENDING_DIR = "erase_pending"  # one file per unfinished erasure, named by its subject's HMAC
SCHEMA = """
create schema if not exists ingest;
create table if not exists ingest.erasures (
    erased_at timestamptz, kind varchar, source varchar,
    bronze_rows bigint, raw_rows bigint, staging_rows bigint, snapshot_rows bigint, snapshots bigint)
"""


class NothingToErase(ValueError):
    pass


# --------------------------------------------------------------------------- matching records


def _key(secret: bytes, kind: str, value: str) -> str:
    return hmac.new(secret, f"erase:{kind}:{value}".encode("utf-8"), hashlib.sha256).hexdigest()


def subject_keys(secret: bytes, kind: str, subject_id: str) -> set[str]:
    """What an erased subject is recognised by: its id, and for a session its sha256 form."""
    keys = {_key(secret, kind, subject_id)}
    if kind == "session":
        keys.add(_key(secret, "session#sha256", opaque_session_id(subject_id)))
    return keys


def _value(record: dict, path: str):
    value: object = record
    for part in path.split("."):
        if isinstance(value, str):  # a JSON document held as a string (the eventlog's data)
            try:
                value = _loads(value)
            except ValueError:
                return None
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value if isinstance(value, str) and value else None


@dataclass
class Matcher:
    """Which records of one source must go; collects what the removed records carried."""

    spec: SourceSpec
    secret: bytes
    keys: set[str]
    cutoff: datetime | None = None
    mention: str | None = None  # at forget time only: the raw id written anywhere in the record
    carried: set[str] = field(default_factory=set)  # new keys (interaction ids of erased sessions)
    values: set[str] = field(default_factory=set)  # ids of removed records (for snapshot rows)
    removed: int = 0
    expired: set[str] = field(default_factory=set)  # of those, removed for their age: their content's sha256
    oldest_kept: datetime | None = None  # the earliest retention time among the records kept

    def __post_init__(self):
        self._extract = {s.field: re.compile(s.extract) for s in self.spec.subjects if s.extract}

    def __call__(self, record: dict) -> bool:
        if not self._matches(record):
            return False
        self.removed += 1
        for name, kind in self.spec.carries:
            value = _value(record, name)
            if value:
                self.carried.add(_key(self.secret, kind, value))
                self.values.add(value)
        for name in self.spec.identity:
            value = _value(record, name)
            if value:
                self.values.add(value)
        return True

    def mentioned(self, raw: bytes) -> bool:
        """An unreadable line (quarantined) that names the subject: only at erase time."""
        if self.mention and self.mention.encode("utf-8") in raw:
            self.removed += 1
            return True
        return False

    def _matches(self, record: dict) -> bool:
        # Free text naming the subject (a commit message "archive session <id>") goes too; later
        # reads cannot see this (only HMACs are kept), they match the declared fields.
        if self.mention and self.mention in json.dumps(record, ensure_ascii=False):
            return True
        for subject in self.spec.subjects if self.keys else ():
            value = _value(record, subject.field)
            if value is None:
                continue
            kind = subject.kind + ("#sha256" if subject.hashed else "")
            candidates = [value]
            if subject.field in self._extract:
                m = self._extract[subject.field].search(value)
                if m:
                    candidates.append(m.group(1))
            if any(_key(self.secret, kind, c) in self.keys for c in candidates):
                return True
        if self.cutoff is not None and self.spec.retention:
            text = _value(record, self.spec.retention[0])
            at = retention_time(text) if text else None
            if at is not None:  # None: unreadable, quarantined by the classifier, not a retention matter
                if at < self.cutoff:
                    content = json.dumps(record, sort_keys=True, default=str).encode("utf-8")
                    self.expired.add(hashlib.sha256(content).hexdigest())
                    return True
                self.oldest_kept = at if self.oldest_kept is None else min(self.oldest_kept, at)
        return False


# An ISO 8601 time with fields unpadded ('2020-1-5T9:00:00Z') or at 24:00, which DuckDB's cast
# reads and datetime.fromisoformat refuses: such a record, loaded by the classifier, never expired.
# It also reads a few forms the classifier quarantines (an offset '+05'): expiring those from
# bronze is what retention does to any record of that age.
_LOOSE_TIME = re.compile(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[T ]\s*(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d+))?)?)?"
                         r"\s*(?:(Z|z)|([+-])(\d{1,2})(?::?(\d{2}))?)?\s*")


def retention_time(text: str) -> datetime | None:
    """The instant of a record's retention field (a naive time is taken as UTC); None when it
    cannot be read."""
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        m = _LOOSE_TIME.fullmatch(text)
        if m is None:
            return None
        year, month, day, hour, minute, second, fraction, _, sign, oh, om = m.groups()
        try:
            midnight = hour == "24" and not int(minute) and not int(second or 0) and not int(fraction or 0)
            at = datetime(int(year), int(month), int(day), 0 if midnight else int(hour or 0), int(minute or 0),
                          int(second or 0), int((fraction or "0")[:6].ljust(6, "0"))) + timedelta(days=midnight)
            if sign:
                at = at.replace(tzinfo=timezone(int(sign + "1") * timedelta(hours=int(oh), minutes=int(om or 0))))
        except ValueError:  # a field out of range, an offset of a day or more
            return None
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def retention_cutoff(settings: Settings, spec: SourceSpec) -> datetime | None:
    """The instant before which the source's records expire (the run date's 00:00 UTC - days)."""
    if not spec.retention:
        return None
    days = getattr(settings, spec.retention[1], None)
    if days is None:
        return None
    day: date = settings.run_date
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc) - timedelta(days=int(days))


# --------------------------------------------------------------------------- payloads


class _Shallow(dict):
    """A record read without what lies deeper than ``SHALLOW_DEPTH`` (``jsontext.shallow``)."""


# The fields the filters read (subjects, times, ids) lie near a record's top; Python's parser
# recurses once a level and gives up past ~1,000.
SHALLOW_DEPTH = 64


def _loads(text: str):
    """``json.loads``; a document nested deeper than Python's recursion limit (valid: DuckDB
    reads it) is read without its levels past ``SHALLOW_DEPTH`` (``_shallow_loads``).
    ValueError when it is not JSON."""
    try:
        return json.loads(text, parse_int=_int_or_zero)
    except RecursionError:
        return _shallow_loads(text)


def _shallow_loads(text: str):
    """``text`` read without its levels past ``SHALLOW_DEPTH``, as a ``_Shallow`` when a dict."""
    value = json.loads(shallow(text, SHALLOW_DEPTH), parse_int=_int_or_zero)
    return _Shallow(value) if isinstance(value, dict) else value


def _decoded(raw: bytes) -> str:
    """A record's text: bytes that are not UTF-8 as replacement characters, no BOM."""
    return raw.decode("utf-8", errors="replace").lstrip("\ufeff")


def _record(text: bytes) -> dict | None:
    """The record, or None when it is not a JSON object (the filters then keep it, but for a
    mention of the subject at erase time). Bytes that are not UTF-8 are read with replacement
    characters: the classifier quarantines such a line, and its subject or time still decides
    whether it is erased or expires. A record nested deeper than Python's recursion limit is
    read down to ``SHALLOW_DEPTH`` levels: before, the filters could not read it and kept it, so
    an erased subject's such record was ingested again and an expired one never went."""
    try:
        value = _loads(_decoded(text))
    except ValueError:  # not JSON (too deep is read shallow: ``_loads``)
        return None
    return value if isinstance(value, dict) else None


def _goes(match: "Matcher", record: dict | None, raw: bytes) -> bool:
    """Whether ``match`` removes the record read from ``raw``: by its fields, or (what cannot be
    read whole) by a mention of the subject in its bytes."""
    if record is None:
        return match.mentioned(raw)
    try:
        return match(record) or (isinstance(record, _Shallow) and match.mentioned(raw))
    except RecursionError:  # read whole, just too deep to write out again for the mention check
        return match(_shallow_loads(_decoded(raw))) or match.mentioned(raw)


def _int_or_zero(digits: str) -> int:
    """``parse_int`` for records read for their strings (and mentions of an id written as a
    number): an integer of more than 4,300 digits is valid JSON, but converting it raises
    ValueError (Python's limit)."""
    try:
        return int(digits)
    except ValueError:
        return 0


def scrub_payload(kind: str, data: bytes, match: Matcher) -> bytes:
    """The payload without the matched records (same bytes when nothing matched)."""
    if kind == "span":
        out, changed = [], False
        for line in re.findall(rb"[^\n]*\n|[^\n]+$", bytes(data)):  # lines as the reader splits them
            body = line.rstrip(b"\r\n")
            record = _record(body) if body.strip() else None
            if _goes(match, record, body):
                line = b" " * len(body) + line[len(body):]  # same length: offsets and line count hold
                changed = True
            out.append(line)
        return b"".join(out) if changed else data
    if kind == "rows":
        out, changed = [], False
        for line in bytes(data).splitlines(keepends=True):
            _, text, undecodable = sqlite_reader.payload_record(line)
            raw = undecodable if undecodable is not None else (text or "").encode("utf-8", errors="surrogatepass")
            record = _record(raw) if raw else None
            if _goes(match, record, raw):
                changed = True
                continue
            out.append(line)
        return b"".join(out) if changed else data
    return data  # arrays, tombstones, events: no subject fields (sources with arrays declare none)


def scrub_batch(matcher: Matcher | None, batch: list[bronze_mod.Entry]) -> None:
    """At ingest: erased subjects and expired records never reach bronze."""
    if matcher is None:
        return
    for entry in batch:
        if entry.data is not None and entry.kind in ("span", "rows"):
            data = bytes(entry.data)
            entry.data = scrub_payload(entry.kind, data, matcher)
            entry.sha256 = None  # other bytes: bronze hashes them
            if entry.data is not data:
                entry.parsed = None  # what the reader found in them: a removed row is not there now


def ingest_matcher(settings: Settings, spec: SourceSpec) -> Matcher | None:
    keys = erased_keys(settings) if spec.subjects else set()
    cutoff = retention_cutoff(settings, spec)
    if not keys and cutoff is None:
        return None
    return Matcher(spec, _secret(settings), keys, cutoff)


# --------------------------------------------------------------------------- bronze


def scrub_bronze(settings: Settings, spec: SourceSpec, matcher: Matcher,
                 before_rewrite: Callable[[], None] | None = None,
                 before_commit: Callable[[], None] | None = None) -> int:
    """Rewrite every bronze object of the source holding a matched record; returns records removed.
    ``before_rewrite`` is called once, before the first object is written; ``before_commit`` once,
    when every object has been read (``matcher`` has seen every record) and before the segments
    name the new objects (what commits the source's erasure).

    Each new object is in ``bronze.PENDING`` from before it is written (or found already there)
    until the segments name it: another source's collection in between would delete bytes the
    segments then name.

    A retention pass (a cutoff, no subject) reads only the objects that may hold an expired
    record: the earliest retention time of the records each object keeps is cached
    (``RETENTION_CACHE`` beside the source's manifest; objects are immutable, so an entry holds
    for as long as its object exists), and an object whose earliest time is not before the
    cutoff, or that holds no readable time, is not read. Otherwise every run decoded and parsed
    the source's whole history (8 µs a rating)."""
    store = bronze_mod.Bronze(settings, spec.name)
    retention_only = matcher.cutoff is not None and not matcher.keys and matcher.mention is None
    cache = _retention_cache(store, spec) if retention_only else None
    segments: dict[Path, list[bronze_mod.Entry]] = {}
    if not store.dir.is_dir():
        return 0
    for seg in sorted(store.dir.glob("*.jsonl")):
        with open(seg, encoding="utf-8") as fh:
            segments[seg] = [bronze_mod.Entry(**json.loads(line)) for line in fh if line.strip()]
    by_object: dict[str, list[bronze_mod.Entry]] = {}
    for entries in segments.values():
        for e in entries:
            if e.object is not None:
                by_object.setdefault(e.object, []).append(e)
    before = matcher.removed
    replaced: dict[str, str] = {}
    moved_entries: set[int] = set()  # id() of the entries now naming a new object
    oldest: dict[str, str | None] = {}  # object -> the earliest retention time it keeps (ISO)
    try:
        for obj, entries in by_object.items():
            if cache is not None and obj in cache and (cache[obj] is None
                                                       or datetime.fromisoformat(cache[obj]) >= matcher.cutoff):
                oldest[obj] = cache[obj]
                continue
            matcher.oldest_kept = None
            spans = sorted({(e.offset, e.length, e.kind) for e in entries})
            new_parts, moved, changed, pos = [], {}, False, 0
            for offset, length, kind in spans:
                try:
                    old = bytes(store.payload(next(e for e in entries if (e.offset, e.length) == (offset, length))))
                except FileNotFoundError:  # (a bare FileNotFoundError failed every run after)
                    raise BronzeDamaged(
                        f"source {spec.name}: object {bronze_mod.object_path(store.root, obj)} of the lake's bronze "
                        "record is missing: retention or an erasure cannot remove the records it held; restore "
                        f"{store.root / 'objects'} from a backup") from None
                new = scrub_payload(kind, old, matcher)
                changed |= new is not old and new != old
                moved[(offset, length)] = (pos, len(new), hashlib.sha256(new).hexdigest())
                new_parts.append(new)
                pos += len(new)
            kept = matcher.oldest_kept.isoformat() if matcher.oldest_kept is not None else None
            if not changed:
                oldest[obj] = kept
                continue
            if before_rewrite is not None and not replaced:
                before_rewrite()
            sha = bronze_mod.name_for(store.root, new_parts,
                                      [(moved[span[:2]][2], moved[span[:2]][1]) for span in spans])
            with bronze_mod.OBJECTS_LOCK:  # before the existence check: a found object stays too
                bronze_mod.PENDING[sha] += 1
            replaced[obj] = sha
            target = bronze_mod.object_path(store.root, sha)
            if not target.exists():
                bronze_mod._atomic_write(target, bronze_mod._blob(new_parts))
            for e in entries:
                e.offset, e.length, e.sha256 = moved[(e.offset, e.length)]
                e.object = sha
                moved_entries.add(id(e))
            oldest[sha] = kept
        if cache is not None and oldest != cache:
            _save_retention_cache(store, spec, oldest)
        if not replaced:
            return 0
        if before_commit is not None:
            before_commit()
        # Only the segments whose entries moved: every expired object becomes the same empty one,
        # and matching segments by the new objects' names rewrote (and fsynced) every segment any
        # earlier pass had emptied, each day (174 of 200 after 200 daily runs)
        for seg, entries in segments.items():
            if any(id(e) in moved_entries for e in entries):
                bronze_mod._atomic_write(seg, "".join(e.to_json() + "\n" for e in entries).encode("utf-8"))
        store._objects = {}
        collect_objects(settings)
    finally:
        with bronze_mod.OBJECTS_LOCK:
            for sha in replaced.values():
                bronze_mod.PENDING[sha] -= 1
                if bronze_mod.PENDING[sha] <= 0:
                    del bronze_mod.PENDING[sha]
    return matcher.removed - before


RETENTION_CACHE = "retention.json"
_RETENTION_CACHE_VERSION = 2  # of the records' and times' reading (``_record``, ``retention_time``)


def _retention_cache(store: bronze_mod.Bronze, spec: SourceSpec) -> dict[str, str | None]:
    """The cached earliest retention time per object ({} when missing, unreadable, or written for
    another field or reading of the times)."""
    try:
        found = json.loads((store.dir / RETENTION_CACHE).read_text(encoding="utf-8"))
        if found["version"] != _RETENTION_CACHE_VERSION or found["field"] != spec.retention[0]:
            return {}
        return {obj: at for obj, at in found["objects"].items()
                if at is None or datetime.fromisoformat(at).tzinfo is not None}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # damaged: every object is read
        return {}


def _save_retention_cache(store: bronze_mod.Bronze, spec: SourceSpec, oldest: dict[str, str | None]) -> None:
    text = json.dumps({"version": _RETENTION_CACHE_VERSION, "field": spec.retention[0], "objects": oldest},
                      sort_keys=True)
    bronze_mod._atomic_write(store.dir / RETENTION_CACHE, text.encode("utf-8"))


def collect_objects(settings: Settings) -> int:
    """Delete bronze objects no segment names (the erased subject's old bytes)."""
    with bronze_mod.OBJECTS_LOCK:  # no other step's object is between its write and its segment
        return _collect(bronze_mod.bronze_dir(settings))


def _collect(root: Path) -> int:
    named = set()
    for seg in root.glob("*/*.jsonl"):
        if seg.parent.name == "objects":
            continue
        with open(seg, encoding="utf-8") as fh:
            named.update(json.loads(line).get("object") for line in fh if line.strip())
    removed = 0
    for obj in (root / "objects").glob("*/*.zst"):
        name = obj.name[:-len(".zst")]
        if name not in named and not bronze_mod.PENDING.get(name):
            obj.unlink()
            removed += 1
    return removed


# --------------------------------------------------------------------------- erased subjects


def _secret(settings: Settings) -> bytes:
    return load_or_create_key(settings.pseudonym_key, settings.pseudonym_key_file)[0]


def _key_check(secret: bytes) -> str:
    """An HMAC of a fixed text under the key: whether a key is the one the erased subjects were
    recorded with (it tells nothing of the key)."""
    return _key(secret, "check", ERASED_FILE)


def erasure_key_problem(settings: Settings, erased: dict | None = None) -> str | None:
    """Why the pseudonym key in use cannot read the erased subjects (None: it can). They are
    recorded as HMACs under the key of their erasure: under another key (a shell with
    ``FLYWHEEL_PSEUDONYM_KEY`` set and a daemon without it) none matches, and an erased session
    came back with its producer's files. Creates no key (the check runs before anything is done).
    ``erased``: the erased-subjects file as read (None: read here)."""
    erased = _erased(settings) if erased is None else erased
    check = erased.get("key_check")
    if check is None:
        return None  # no file, or one from before the check: taken as it is (it never gains one)
    secret = existing_key(settings.pseudonym_key, settings.pseudonym_key_file)
    if secret is not None and hmac.compare_digest(check, _key_check(secret)):
        return None
    where = ("FLYWHEEL_PSEUDONYM_KEY" if settings.pseudonym_key else f"the key file {settings.pseudonym_key_file}"
             if secret is not None else f"no key (FLYWHEEL_PSEUDONYM_KEY unset, no {settings.pseudonym_key_file})")
    return (f"the pseudonym key in use ({where}) is not the key the erased subjects in "
            f"{settings.state_dir / ERASED_FILE} were recorded with: set FLYWHEEL_PSEUDONYM_KEY to the key "
            "they were erased under (else an erased session or user would come back)")


# The erased-subjects file as last parsed, by path: (inode, size, mtime) and the document. Every
# subject source's ingest asks for it; each forgotten session adds its records' ids, so it grows
# with the lake's age (200,000 keys, 13.6 MB: 0.60 s a run, parsed once by each of nine sources).
_ERASED_CACHE: dict[Path, tuple[tuple[int, int, int], dict]] = {}


def _erased(settings: Settings) -> dict:
    """The erased-subjects file (``{"keys": [...], "key_check": ...}``; {} when there is none).
    Parsed again only when it changed (``_save_keys`` replaces it: a new inode)."""
    path = settings.state_dir / ERASED_FILE
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {}
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _ERASED_CACHE.get(path)
    if cached is None or cached[0] != stamp:
        cached = _ERASED_CACHE[path] = (stamp, json.loads(path.read_text(encoding="utf-8")))
    return cached[1]


def erased_keys(settings: Settings) -> set[str]:
    erased = _erased(settings)
    if problem := erasure_key_problem(settings, erased):
        raise RuntimeError(problem)
    return set(erased.get("keys", []))


def _save_keys(settings: Settings, keys: set[str]) -> None:
    """The erased subjects' keys, with the check of the key they are under; a file kept from
    before the check never gains one (which key its subjects were erased under is not known)."""
    erased = _erased(settings)
    legacy = bool(erased) and "key_check" not in erased
    doc = {"keys": sorted(keys)} if legacy else {"keys": sorted(keys), "key_check": _key_check(_secret(settings))}
    bronze_mod._atomic_write(settings.state_dir / ERASED_FILE, json.dumps(doc, indent=0).encode("utf-8"))


# --------------------------------------------------------------------------- snapshots


def scrub_snapshots(export_dir: Path, condition, legacy: bool = False,
                    progress: Callable[[str, int], None] | None = None) -> tuple[int, int]:
    """Rewrite every kept snapshot's Parquet files without the rows ``condition(table, columns)``
    (a SQL predicate, or None to skip the table) selects; returns (rows removed, snapshots).
    ``legacy``: an older layout's exports moved aside too (``_scrub_legacy``; retention, which
    reaches staging tables only, has none to scrub there, and every run would look at them).
    ``progress(file, rows)``: called before each file (``<version>/<dataset>/<name>``) is changed,
    with the rows it loses, so a scrub stopped half way can be counted whole when it is finished."""
    from dagster_project.publishing.parquet import fsync_dir, lit, seal, sha256_file
    from dagster_project.publishing.snapshot import (MANIFEST, OBJECTS, _link, _locked, _versions, _write_manifest,
                                                     collect_objects, manifest_objects, snapshots_dir)

    snaps = snapshots_dir(Path(os.path.abspath(export_dir)))
    if not snaps.exists():
        return 0, 0
    removed = touched = 0
    # Kept snapshots hard-link the same immutable objects: a file with no matching row is read
    # once per call, not once per snapshot linking it (retention runs this every run). By the
    # file itself (its inode), not the object its manifest names: they differ after a scrub
    # stopped between the two (below).
    clean: set[tuple[int, int, str]] = set()
    known: set[str] = set()  # the objects the kept manifests name, once scrubbed
    con = duckdb.connect()
    with _locked(snaps / ".lock"):
        for version in _versions(snaps):
            manifest_path = snaps / version / MANIFEST
            if not manifest_path.exists():
                continue
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            changed = False
            for path, entry in manifest["datasets"].items():
                where = condition(entry["table"], entry["columns"])
                if not where:
                    continue
                for f in entry["files"]:
                    file = snaps / version / path / f["name"]
                    st = file.stat()
                    if (st.st_dev, st.st_ino, where) in clean:
                        continue
                    tmp = snaps / OBJECTS / f".tmp-erase-{os.getpid()}.parquet"
                    n = _copy_without(con, file, where, tmp)
                    if not n:
                        clean.add((st.st_dev, st.st_ino, where))
                        continue
                    sha = sha256_file(tmp)
                    key = f"erased-{sha[:40]}"
                    obj = snaps / OBJECTS / f"{key}.parquet"
                    if obj.exists():
                        tmp.unlink()
                    else:
                        seal(tmp)
                        os.replace(tmp, obj)
                    rows = con.execute(f"select count(*) from read_parquet({lit(obj)})").fetchone()[0]
                    _noted(entry, f, rows=rows, bytes=obj.stat().st_size, sha256=sha, object=key)
                    if progress is not None:
                        progress(f"{version}/{path}/{f['name']}", n)
                    # The manifest first, then the file: stopped in between (a full export disk),
                    # the file still holds the rows and the next scrub replaces it. The other way
                    # round, it found the file clean and skipped it, and the manifest went on naming
                    # the old object, which kept the rows for good (and no longer matched).
                    _write_manifest(snaps / version, manifest)
                    fsync_dir(snaps / version)
                    link = file.with_name(f".{file.name}.erase")
                    link.unlink(missing_ok=True)
                    _link(obj, link)  # a copy where the file system has no hard links
                    os.replace(link, file)
                    fsync_dir(file.parent)
                    removed += n
                    changed = True
            touched += changed
            known |= manifest_objects(manifest)
        collect_objects(snaps, known)  # the old files no snapshot names any more
        for moved in sorted(snaps.glob(".legacy-*")) if legacy else []:
            # an older layout's exports, moved aside by the first snapshot (``ensure_links``): no
            # manifest, plain files (their ``.versions`` copies included), scrubbed where they lie
            n = _scrub_legacy(con, moved, condition)
            if progress is not None and n:
                progress(f"{moved.name}/", n)
            removed += n
            touched += bool(n)
    con.close()
    return removed, touched


def _noted(entry: dict, f: dict, **now) -> None:
    """A manifest ``entry``'s file ``f`` is now ``now`` (rows, bytes, sha256, object)."""
    entry["rows"] += now["rows"] - f["rows"]
    f.update(now, reused=False)
    entry["content_hash"] = hashlib.sha256("".join(x["sha256"] for x in entry["files"]).encode()).hexdigest()
    entry.pop("appended_through", None)  # its files no longer end where the table did


def _scrub_legacy(con: duckdb.DuckDBPyConnection, directory: Path, condition) -> int:
    """Rewrite the Parquet files under ``directory`` without the rows ``condition`` selects (by
    their columns; ``table`` is ``legacy``); returns the rows removed."""
    from dagster_project.publishing.parquet import fsync_dir, lit

    removed = 0
    for file in sorted(directory.rglob("*.parquet")):
        try:
            columns = _columns(con, f"select * from read_parquet({lit(file)})")
        except duckdb.Error:  # not Parquet (whatever the name): no reader finds rows in it either
            continue
        where = condition("legacy", columns)
        tmp = file.with_name(f".{file.name}.erase")
        if where and (n := _copy_without(con, file, where, tmp)):
            os.replace(tmp, file)
            fsync_dir(file.parent)
            removed += n
    return removed


def _copy_without(con: duckdb.DuckDBPyConnection, file: Path, where: str, tmp: Path) -> int:
    """How many rows of the Parquet ``file`` ``where`` selects; when some, ``file`` without them is
    written (and fsynced) to ``tmp``."""
    from dagster_project.publishing.parquet import PARQUET_OPTIONS, copy_nullable, fsync_file, lit

    n = con.execute(f"select count(*) from read_parquet({lit(file)}) where {where}").fetchone()[0]
    if n:
        # every column OPTIONAL, as in the dataset's other files (copied straight from this one,
        # a column the kept rows hold no NULL in was REQUIRED: pa.concat_tables of the dataset failed)
        copy_nullable(con, f"select * from read_parquet({lit(file)}) where not coalesce({where}, false)", tmp,
                      PARQUET_OPTIONS)
        fsync_file(tmp)
    return n


def _columns(con: duckdb.DuckDBPyConnection, relation: str) -> list[dict]:
    """``relation``'s columns as a ``condition`` takes them: name and type."""
    return [{"name": name, "type": kind} for name, kind, *_ in con.execute(f"describe {relation}").fetchall()]


def _text_columns(columns: list[dict]) -> list[str]:
    return [c["name"] for c in columns if c["type"].upper().startswith(("VARCHAR", "JSON"))]


# An id this long or longer is also matched where text mentions it; a shorter one (a user id
# "7") only where a value is the id: mentions of "7" are in every other row (a forget of user "7"
# emptied the kept snapshots' interactions and training sets).
MENTION_MIN = 8


def session_of(subject_id: str) -> str:
    """The session an id names: a retrieval session's id with its adapter suffix
    (``20260301-052928-claude``) is that session's (``20260301-052928``), as its records name it;
    any other id is itself. Forgetting the suffixed id erased only the records written with the
    suffix: the session's queries, uses and commits stayed, and their rows in every snapshot."""
    from transforms.gitlog import SESSION_ID

    found = SESSION_ID.fullmatch(subject_id)
    return found.group(1) if found else subject_id


def mention(subject_id: str) -> str | None:
    """The id to look for inside text, or None when it is too short to mean the subject."""
    return subject_id if len(subject_id) >= MENTION_MIN else None


def subject_condition(subject_id: str, values: set[str], in_paths: str | None = None):
    """A row goes if a text column equals one of ``values`` or contains the raw id (``mention``),
    or a document path column contains ``in_paths`` (a session's pseudonym: a shared document
    path names the session by it, ``fw_doc_path``)."""
    from dagster_project.publishing.parquet import lit, q

    listed = ", ".join(lit(v) for v in sorted(values))
    inside = mention(subject_id)

    def condition(table: str, columns: list[dict]) -> str | None:
        names = _text_columns(columns)
        if not names:
            return None
        return " or ".join(
            f"({q(n)}::varchar in ({listed})" + (f" or contains({q(n)}::varchar, {lit(inside)})" if inside else "")
            + (f" or contains({q(n)}, {lit(in_paths)})" if in_paths and n in DOC_PATHS else "") + ")"
            for n in names)
    return condition


def retention_condition(specs: list[SourceSpec], settings: Settings):
    """Expired records in the snapshots' copies of each source's staging table."""
    from dagster_project.publishing.parquet import lit, q

    cutoffs = {f"staging.{s.name}": (s.retention[0], retention_cutoff(settings, s)) for s in specs if s.retention}

    def condition(table: str, columns: list[dict]) -> str | None:
        if table not in cutoffs or cutoffs[table][1] is None:
            return None
        name, cutoff = cutoffs[table]
        if name not in {c["name"] for c in columns}:
            return None
        return f"{q(name)} < {lit(cutoff.isoformat())}::timestamptz"
    return condition


# --------------------------------------------------------------------------- audit


_ERASURES = threading.Lock()  # two sources' steps may record retention at once (executor)


def record_erasure(con: duckdb.DuckDBPyConnection, kind: str, rows: dict[str, dict[str, int]],
                   snapshots: int = 0) -> None:
    """Rows in ``ingest.erasures`` (every run creates it first; a state no run has prepared since
    this version, by the first erasure: under a lock, so that two steps never both create it)."""
    with _ERASURES:
        con.execute(SCHEMA)
    at = datetime.now(timezone.utc)
    for source, c in sorted(rows.items()):
        con.execute("insert into ingest.erasures values (?, ?, ?, ?, ?, ?, ?, ?)",
                    [at, kind, source, c.get("bronze", 0), c.get("raw", 0), c.get("staging", 0),
                     c.get("snapshot", 0), snapshots])


def expired_rows(con: duckdb.DuckDBPyConnection, settings: Settings, spec: SourceSpec, layer: str) -> int:
    """Rows of ``<layer>.<source>`` that retention expires as of the run date (0: no such table)."""
    cutoff = retention_cutoff(settings, spec)
    if cutoff is None:
        return 0
    try:
        return con.execute(f'select count(*) from {layer}."{spec.name}" where "{spec.retention[0]}" < ?',
                           [cutoff]).fetchone()[0]
    except duckdb.CatalogException:
        return 0


def _count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    try:
        return con.execute(f"select count(*) from {table}").fetchone()[0]
    except duckdb.CatalogException:
        return 0


# --------------------------------------------------------------------------- retention (each run)


def enforce_retention(settings: Settings, spec: SourceSpec, before_rewrite: Callable[[], None] | None = None,
                      expired: set[str] | None = None) -> int:
    """Remove expired records of the source from bronze; the caller replays it when > 0.
    ``before_rewrite``: called once before bronze is first changed (none when nothing expired).
    ``expired``: gets the removed records' sha256 (``Matcher.expired``)."""
    cutoff = retention_cutoff(settings, spec)
    if cutoff is None:
        return 0
    matcher = Matcher(spec, b"-", set(), cutoff)
    removed = scrub_bronze(settings, spec, matcher, before_rewrite)
    if expired is not None:
        expired |= matcher.expired
    return removed


def retention_in_snapshots(settings: Settings, specs: list[SourceSpec]) -> dict[str, tuple[int, int]]:
    """Per source under retention: (rows removed, snapshots rewritten) from the kept snapshots'
    copies of its staging table (each source's own row in ``ingest.erasures``)."""
    found = {}
    for spec in specs:
        if spec.retention:
            counts = [scrub_snapshots(export_dir, retention_condition([spec], settings))
                      for export_dir in settings.export_dirs()]
            found[spec.name] = (sum(rows for rows, _ in counts), sum(n for _, n in counts))
    return found


# --------------------------------------------------------------------------- forget


@dataclass
class ForgetResult:
    kind: str
    rows: dict[str, dict[str, int]]
    snapshots: int

    def summary(self) -> str:
        total = {layer: sum(c.get(layer, 0) for c in self.rows.values())
                 for layer in ("bronze", "raw", "staging", "snapshot")}
        return (f"forgot one {self.kind}: bronze {total['bronze']:,} records, raw {total['raw']:,} rows, "
                f"staging {total['staging']:,} rows, {total['snapshot']:,} rows in {self.snapshots} kept "
                f"snapshot(s) across {len(self.rows)} source(s); recorded in ingest.erasures")


def forget(settings: Settings, kind: str, subject_id: str, specs: dict[str, SourceSpec], rebuild) -> ForgetResult:
    """Erase one subject from bronze, then ``rebuild()`` (a full refresh that publishes), then
    from every kept snapshot. Raises NothingToErase when no record names the subject."""
    if kind == "session":
        subject_id = session_of(subject_id)
    secret = _secret(settings)
    subject_key = _key(secret, kind, subject_id)
    # held for the whole erasure: a forget of the same subject waits, and ``unfinished_erasures``
    # does not call one still running interrupted
    with _subject_lock(settings, subject_key):
        return _forget(settings, kind, subject_id, specs, rebuild, secret, subject_key)


def _forget(settings: Settings, kind: str, subject_id: str, specs: dict[str, SourceSpec], rebuild,
            secret: bytes, subject_key: str) -> ForgetResult:
    from dagster_project.state import state_connection, writer_lock
    from dagster_project.validation import forget_baselines

    keys = subject_keys(secret, kind, subject_id)
    rows: dict[str, dict[str, int]] = {}
    values = {subject_id, opaque_session_id(subject_id), pseudonym(secret, subject_id),
              session_pseudonym(secret, subject_id)}
    # kept-snapshot file -> rows the scrub removed from it: a scrub stopped half way (a full export
    # disk) and finished by a retry recorded only the retry's rows (41 of 42 in a hunt)
    scrubbed: dict[str, int] = {}
    pending_file = settings.state_dir / PENDING_DIR / f"{subject_key}.json"

    # What is needed to finish (a retry of the same command), kept privately from before bronze is
    # first changed until the state is compacted; it names no id, only the subject's HMAC and the
    # linked record ids. One file per subject: a second forget finishing removed the first's, which
    # could then never be finished. Phases: bronze (erasing it), rebuild (bronze done), recorded
    # (``ingest.erasures`` written: a retry must not record it again).
    def save_pending(now: str) -> None:
        bronze_mod._atomic_write(pending_file, json.dumps(
            {"subject": subject_key, "phase": now, "values": sorted(values - {subject_id}), "rows": rows,
             "scrubbed": scrubbed}
        ).encode("utf-8"))

    with writer_lock(settings):
        pending = _pending(settings, subject_key)
        # an earlier version's file has no phase (its bronze was done) and counted raw and staging
        # as the tables' totals, the rows left after the rebuild to be taken from them
        phase = pending.get("phase", "rebuild") if pending else None
        totals = pending is not None and "phase" not in pending
        all_keys = erased_keys(settings) | keys
        if pending:
            rows, values = pending["rows"], values | set(pending["values"])
            scrubbed.update(pending.get("scrubbed", {}))
        # Sources whose records carry links (interaction ids) go first: their carried keys
        # erase the linked records of the others. Each source's erasure commits on its own: the
        # keys it carried and what it removed are saved before it does, so a run killed between
        # two sources is finished by running it again (the keys reach the linked records, which
        # were missed when the first source, already erased, carried none the second time).
        for spec in sorted(specs.values(), key=lambda s: not s.carries) if phase in (None, "bronze") else []:
            if not spec.subjects:
                continue
            matcher = Matcher(spec, secret, all_keys, mention=mention(subject_id))

            def before_commit(spec=spec, matcher=matcher) -> None:
                # (found again by a retry, the earlier attempt did not commit: counted once)
                rows[spec.name] = {"bronze": matcher.removed}
                values.update(matcher.values)
                # the pending file first: a kill between the two writes left the keys saved and no
                # pending file, and nothing said the erasure was unfinished
                save_pending("bronze")
                _save_keys(settings, all_keys | matcher.carried)

            scrub_bronze(settings, spec, matcher, before_commit=before_commit)
            all_keys |= matcher.carried
            values |= matcher.values
        if not rows:
            raise NothingToErase(f"no record in the bronze record names {kind} {subject_id!r}: nothing erased "
                                 "(check the id; an id already forgotten matches nothing)")
        # objects no segment names: a scrub killed between its segments and its collection left
        # the subject's old object, which no later scrub (nothing left to replace) collected
        collect_objects(settings)
        _save_keys(settings, all_keys)
        if phase != "recorded":
            save_pending("rebuild")
            with state_connection(settings, lock=False) as con:
                # the rows the rebuild will not hold: counted now, not as a difference (the rebuild
                # reads what producers appended meanwhile: a difference went negative)
                condition = subject_condition(subject_id, values)
                for name, c in rows.items():
                    if "raw" not in c:  # (a retry after the rebuild keeps what was counted before it)
                        c["raw"], c["staging"] = (_count_where(con, f"{layer}.{name}", condition)
                                                  for layer in ("raw", "staging"))
                _scrub_run_log(con, subject_id, values)
                forget_baselines(con)  # row hashes of the subject's records: recomputed by the next run
            save_pending("rebuild")
    if phase != "recorded":
        rebuild()
    in_paths = session_pseudonym(secret, subject_id) if kind == "session" else None

    for export_dir in settings.export_dirs():
        def scrubbing(file: str, n: int, where: str = f"{export_dir}::") -> None:
            if phase != "recorded":  # (a retry after the record only finishes the scrub)
                # (the same file found again by a retry: the same rows, once; a copy of the export
                # directory holds the same versions: by directory, version, dataset and name)
                scrubbed[where + file] = n
                save_pending("rebuild")

        scrub_snapshots(export_dir, subject_condition(subject_id, values, in_paths), legacy=True, progress=scrubbing)
    snapshot_rows = sum(scrubbed.values())
    snapshots = len({_snapshot_of(key) for key in scrubbed})
    if phase != "recorded":
        with state_connection(settings) as con:
            if totals:
                for name, c in rows.items():
                    c["raw"] -= _count(con, f"raw.{name}")
                    c["staging"] -= _count(con, f"staging.{name}")
            first = next(iter(sorted(rows)))
            rows[first]["snapshot"] = snapshot_rows  # snapshot rows are per dataset, not per source
            record_erasure(con, kind, rows, snapshots)
            save_pending("recorded")
    with writer_lock(settings):
        compact_state(settings)
        for path in _pending_files(settings, subject_key):
            path.unlink()
    return ForgetResult(kind, rows, snapshots)


def _snapshot_of(key: str) -> str:
    """The snapshot of a scrubbed file's key, ``<export dir>::<version>/<dataset>/<name>`` (a
    pending file of the thirty-second session's names no directory)."""
    where, _, file = key.rpartition("::")
    return f"{where}::{file.split('/', 1)[0]}"


@contextmanager
def _subject_lock(settings: Settings, subject_key: str) -> Iterator[None]:
    """An exclusive lock on ``erase_pending/<subject>.lock`` for as long as the block runs."""
    from dagster_project.publishing.snapshot import _locked

    path = settings.state_dir / PENDING_DIR / f"{subject_key}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        try:
            yield
        finally:
            if not (path.with_suffix(".json")).exists():  # finished (or nothing erased): no file left
                path.unlink(missing_ok=True)


def _running(lock: Path) -> bool:
    """A forget holds this subject's lock."""
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY)  # (not created: a subject no forget is running for has none)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _pending_files(settings: Settings, subject_key: str) -> list[Path]:
    """The subject's unfinished erasure: its own file, and an earlier version's one file when it
    names this subject."""
    found = []
    for path in (settings.state_dir / PENDING_DIR / f"{subject_key}.json", settings.state_dir / PENDING_FILE):
        if path.exists() and json.loads(path.read_text(encoding="utf-8")).get("subject") == subject_key:
            found.append(path)
    return found


def _pending(settings: Settings, subject_key: str) -> dict | None:
    files = _pending_files(settings, subject_key)
    return json.loads(files[0].read_text(encoding="utf-8")) if files else None


def unfinished_erasures(settings: Settings) -> list[str]:
    """When each unfinished erasure was last saved (UTC, to the second), one per subject: a
    ``forget`` that stopped after it changed bronze, whose subject the published data may still
    hold until it is run again (one still running is not listed)."""
    when: dict[str, float] = {}
    for path in [*(settings.state_dir / PENDING_DIR).glob("*.json"), settings.state_dir / PENDING_FILE]:
        try:
            subject = json.loads(path.read_text(encoding="utf-8"))["subject"]
            saved = path.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not _running(settings.state_dir / PENDING_DIR / f"{subject}.lock"):
            when[subject] = max(saved, when.get(subject, saved))
    return sorted(datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S") for t in when.values())


def _count_where(con: duckdb.DuckDBPyConnection, table: str, condition) -> int:
    """Rows of ``table`` that ``condition(table, columns)`` selects (0 when it selects none, or
    there is no such table)."""
    try:
        columns = _columns(con, table)
    except duckdb.CatalogException:
        return 0
    where = condition(table, columns)
    return con.execute(f"select count(*) from {table} where {where}").fetchone()[0] if where else 0


def compact_state(settings: Settings) -> None:
    """DuckDB reuses freed blocks without zeroing them: copy the state database into a fresh
    file so the erased rows' old bytes do not survive in it."""
    db = settings.state_db
    fresh = db.with_name(db.name + ".compact")
    fresh.unlink(missing_ok=True)
    con = duckdb.connect()
    try:
        con.execute(f"attach '{db}' as old (read_only); attach '{fresh}' as new; copy from database old to new")
        con.execute("detach old; detach new")
    except BaseException:
        # (a full disk): the partial copy, as big as what it copied, stayed on that disk, and
        # the next run failed for want of its space
        con.close()
        for leftover in (fresh, Path(f"{fresh}.wal")):
            leftover.unlink(missing_ok=True)
        raise
    con.close()
    os.replace(fresh, db)
    for suffix in (".wal",):
        Path(str(db) + suffix).unlink(missing_ok=True)


def _scrub_run_log(con: duckdb.DuckDBPyConnection, subject_id: str, values: set[str]) -> None:
    """The run log is not rebuilt from bronze: drop its rows naming the subject, and in what a
    failed check or run said (its sample rows, its detail, a run's error line) write `<erased>`
    where the subject's id, its sha256, its pseudonyms or an erased record's id stood (they stayed
    there, and in every snapshot publishing the run log after the forget)."""
    from transforms.sqlfiles import relation_exists, transaction

    inside = mention(subject_id)
    said = sorted({v for v in values if len(v) >= MENTION_MIN} | ({inside} if inside else set()), key=len,
                  reverse=True)  # (the longest first: an id inside another is not cut out of it)
    pattern = {"p": "|".join(re.escape(v) for v in said)}
    if said and all(relation_exists(con, t) for t in ("ingest.runs", "ingest.validations")):
        # one pass whatever the number of ids (a user's thousands of interactions), in one
        # transaction: the validations are deleted and appended again, not changed in place (the
        # publisher reads only the rows appended to the table since its last publish,
        # ``APPEND_ONLY``; a deleted row makes it read them all), and never lost in between
        text = "concat_ws(' ', sample_rows::varchar, detail, observed)"
        with transaction(con):
            con.execute("update ingest.runs set error = regexp_replace(error, $p, '<erased>', 'g') "
                        "where regexp_matches(error, $p)", pattern)
            con.execute(f"create or replace temp table _fw_said as select * from ingest.validations "
                        f"where regexp_matches({text}, $p)", pattern)
            con.execute(f"delete from ingest.validations where regexp_matches({text}, $p)", pattern)
            con.execute("insert into ingest.validations by name select * replace ("
                        "regexp_replace(sample_rows::varchar, $p, '<erased>', 'g')::json as sample_rows, "
                        "regexp_replace(detail, $p, '<erased>', 'g') as detail, "
                        "regexp_replace(observed, $p, '<erased>', 'g') as observed) from _fw_said", pattern)
            con.execute("drop table _fw_said")
    for table, column in (("ingest.excluded", "row_key"), ("ingest.excluded", "detail")):
        try:
            # a row key may join several ids with "|" (kto, dpo: "interaction|<id>")
            con.execute(f"delete from {table} where {column} in (select unnest(?::varchar[])) "
                        f"or list_has_any(string_split({column}, '|'), ?::varchar[]) "
                        f"or (? is not null and contains({column}, ?))",
                        [sorted(values), sorted(values), inside, inside])
        except duckdb.CatalogException:
            pass
