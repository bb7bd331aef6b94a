"""Keyed pseudonyms for session and user ids (HMAC-SHA-256 with ``FLYWHEEL_PSEUDONYM_KEY``).

Format: ``'p_' + the first 32 hex digits`` (128 bits) of ``HMAC-SHA-256(key, utf8(value))``.
128 bits keeps collisions out of reach for any realistic number of ids while staying short;
the ``p_`` prefix makes a pseudonym impossible to mistake for a raw uuid or a SHA-256 hex.

Sessions are pseudonymised through their opaque form: ``session_pseudonym(key, raw_id) =
pseudonym(key, sha256_hex(raw_id))``. The session-ratings store only ever has
``session_id_opaque = sha256_hex(thread id)``, so the same session gets the same pseudonym
whether it comes from an interaction (raw id) or from a rating (opaque id), and the two can be
joined in published data without publishing either id.

The key: ``FLYWHEEL_PSEUDONYM_KEY``'s UTF-8 bytes when set; otherwise a key file beside the
warehouse (64 random hex digits, created once with mode 0600; the key is the UTF-8 bytes of
that text, so copying the file's content into ``FLYWHEEL_PSEUDONYM_KEY`` gives the same
pseudonyms). Changing the key changes every pseudonym.

In DuckDB, :func:`register` defines ``fw_pseudonym(varchar)`` and
``fw_session_pseudonym(varchar)`` as native SQL (HMAC spelled out with ``sha256`` over the
key's inner/outer pads, kept in session variables, never in the database file): about 0.75 s
per million values on one connection, versus ~2.3 s for a Python/Arrow UDF.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

import duckdb

from transforms.sqlfiles import lit

PREFIX = "p_"
HEX_DIGITS = 32
KEY_FILE_NAME = "pseudonym.key"
_BLOCK = 64  # SHA-256 block size


def pseudonym(key: bytes, value: str) -> str:
    """``'p_' + hex(HMAC-SHA-256(key, utf8(value)))[:32]``."""
    if not key:
        raise ValueError("the pseudonym key is empty")
    return PREFIX + hmac.new(key, value.encode("utf-8"), hashlib.sha256).hexdigest()[:HEX_DIGITS]


def opaque_session_id(raw_session_id: str) -> str:
    """The session-ratings store's ``session_id_opaque``: lowercase hex SHA-256 of the id."""
    return hashlib.sha256(raw_session_id.encode("utf-8")).hexdigest()


def session_pseudonym(key: bytes, raw_session_id: str) -> str:
    return pseudonym(key, opaque_session_id(raw_session_id))


def hmac_pads(key: bytes) -> tuple[bytes, bytes]:
    """(key ⊕ ipad, key ⊕ opad) as RFC 2104 defines them for SHA-256."""
    if not key:
        raise ValueError("the pseudonym key is empty")
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)


def register(con: duckdb.DuckDBPyConnection, key: bytes, name_ids: Iterable[str] = (),
             folders: Iterable[str] = ()) -> None:
    """Define ``fw_pseudonym(v)``, ``fw_session_pseudonym(raw_id)`` and ``fw_provenance(path)`` on
    ``con``.

    Vectorised native SQL: HMAC(K, m) = sha256(K⊕opad ‖ sha256(K⊕ipad ‖ m)). NULL stays NULL.
    ``fw_provenance``: a raw file's path as shared datasets publish it (``provenance_sql``), for
    the file names ``name_ids`` declare (``SourceSpec.name_id``).
    """
    ipad, opad = hmac_pads(key)
    con.execute("set variable fw_pseudonym_ipad = $pad", {"pad": ipad})
    con.execute("set variable fw_pseudonym_opad = $pad", {"pad": opad})
    con.execute(
        "create or replace temp macro fw_hmac_hex(v) as sha256(getvariable('fw_pseudonym_opad') || "
        "unhex(sha256(getvariable('fw_pseudonym_ipad') || encode(v::varchar))))"
    )
    con.execute(f"create or replace temp macro fw_pseudonym(v) as '{PREFIX}' || left(fw_hmac_hex(v), {HEX_DIGITS})")
    con.execute(
        "create or replace temp macro fw_session_pseudonym(raw_id) as "
        "fw_pseudonym(sha256(raw_id::varchar))"
    )
    con.execute(f"create or replace temp macro fw_provenance(path) as {provenance_sql('path', name_ids, folders)}")
    con.execute(f"create or replace temp macro fw_doc_path(path) as {doc_path_sql('path')}")


# Repository documents' paths (the retrieval marts' columns): a session id in one is shared as its
# pseudonym. A retrieval session's id (``YYYYMMDD-HHMMSS``, the eventlog's sessions) names the
# session notes the retrieval tool commits (``layer/sessions/20260203-044020.md``); any such
# stamp, not inside a longer run of digits, is taken for one.
DOC_PATHS = ("doc_path", "file_path")
SESSION_IN_PATH = r"(?:^|[^0-9])(\d{8}-\d{6})(?:[^0-9]|$)"


def doc_path_sql(path: str) -> str:
    """SQL of a repository document's path (retrieval marts' ``doc_path``, ``file_path``) in shared
    datasets: each session id in it replaced by that session's pseudonym
    (``layer/sessions/p_3f….md``), which the same datasets' ``session_pseudonym`` columns hold.
    Published as they were, the marts listing missed and retrieved files held 15 of the sample's
    17 session ids, which the privacy gate, looking for values equal to an id, let through."""
    return (f"list_reduce(regexp_extract_all({path}, {lit(SESSION_IN_PATH)}, 1), "
            f"lambda acc, id: replace(acc, id, fw_session_pseudonym(id)), {path})")


def provenance_sql(path: str, name_ids: Iterable[str], folders: Iterable[str] = ()) -> str:
    """SQL of ``path`` (a raw file's, as staging records it) in shared datasets: in a file name a
    declared pattern matches, the part of a person's id it carries (``interactions_{date}_{sid8}``:
    the session's first 8 characters, a handle on the session as linkable as its id) replaced by
    as many hex digits of its keyed HMAC; of a path outside the raw root (absolute), only its
    directory and the file (not ``/home/<user>/…``). A folder is shared by name when the sources'
    globs name it (``folders``: ``glob_folders``), else as 8 hex digits of its keyed HMAC: a
    glob's ``*/`` matched per-user folders, published as ``interactions/alice/…``. Deterministic
    under one key, so rows keep one provenance per file."""
    name = f"regexp_extract({path}, '[^/]*$')"
    for pattern in name_ids:
        r = lit(pattern)
        part = f"regexp_extract({name}, {r}, 2)"
        name = (f"(case when regexp_matches({name}, {r}) then regexp_extract({name}, {r}, 1) || "
                f"left(fw_hmac_hex('file-name:' || {part}), length({part})) || regexp_extract({name}, {r}, 3) "
                f"else {name} end)")
    named = "[" + ", ".join(lit(f) for f in sorted(set(folders))) + "]::varchar[]"

    def shared(folders_sql: str) -> str:  # "a/b/" as shared: each folder by name or keyed
        return (f"(case when {folders_sql} = '' then '' else array_to_string(list_transform(string_split("
                f"rtrim({folders_sql}, '/'), '/'), lambda part: case when list_contains({named}, part) then part "
                f"else left(fw_hmac_hex('directory:' || part), 8) end), '/') || '/' end)")

    parent = f"regexp_extract({path}, '([^/]+/)?[^/]*$', 1)"  # of an absolute path: its folder alone
    folders_of = f"regexp_extract({path}, '^(.*/)?', 1)"  # of a relative one: every folder
    directory = f"(case when starts_with({path}, '/') then '…/' || {shared(parent)} else {shared(folders_of)} end)"
    return f"(case when {path} is null then null else {directory} || {name} end)"


def glob_folders(globs: Iterable[str]) -> set[str]:
    """The folder names ``globs`` spell out (no wildcard in them): configuration, not data, so
    shared paths keep them (``interactions/`` of ``interactions/*/x_*.jsonl``; not the ``*``)."""
    return {part for glob in globs for part in PurePosixPath(glob).parts[:-1]
            if part not in ("/", "~", ".", "..") and not any(c in part for c in "*?[")}


_CREATING = threading.Lock()  # two steps of one run may ask for the key at once


def load_or_create_key(env_value: str | None, key_path: Path) -> tuple[bytes, bool]:
    """The pseudonym key and whether it was just created (the caller should warn then).

    ``env_value`` (``FLYWHEEL_PSEUDONYM_KEY``) wins when non-empty; else ``key_path`` is read;
    else a new random key is written there (mode 0600). The key is written whole to a temp file
    and linked into place, which fails when a key is already there: two processes or two steps
    racing end up with the same key, and no one ever reads a half-written file.
    """
    key = existing_key(env_value, key_path)
    if key is not None:
        return key, False
    with _CREATING:
        return _create_key(Path(key_path))


def existing_key(env_value: str | None, key_path: Path) -> bytes | None:
    """The pseudonym key ``load_or_create_key`` would use, or None where it would create one."""
    if env_value:
        return env_value.encode("utf-8")
    key_path = Path(key_path)
    return _read_key(key_path) if key_path.exists() else None


def _create_key(key_path: Path) -> tuple[bytes, bool]:
    if key_path.exists():
        return _read_key(key_path), False
    key_path.parent.mkdir(parents=True, exist_ok=True)
    text = secrets.token_hex(32)
    tmp = key_path.with_name(f".{key_path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (text + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, key_path)
        except FileExistsError:
            return _read_key(key_path), False
        except OSError:  # a file system without hard links: rename, and use whichever key won
            if key_path.exists():
                return _read_key(key_path), False
            os.replace(tmp, key_path)
            kept = _read_key(key_path)
            return kept, kept == text.encode("utf-8")
    finally:
        tmp.unlink(missing_ok=True)
    return text.encode("utf-8"), True


def _read_key(path: Path) -> bytes:
    text = path.read_text(encoding="utf-8").strip()
    if not text:
        raise ValueError(f"{path}: the pseudonym key file is empty; delete it to create a new key")
    return text.encode("utf-8")
