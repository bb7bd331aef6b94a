"""Text normalisation, stable splits and TRL message lists, in Python and as DuckDB macros.

* **Normalised text** (DPO grouping, split key): Unicode NFC, then every run of whitespace
  collapsed to one ASCII space, then trimmed. "Whitespace" is exactly Python's ``str.isspace``
  set (:data:`WHITESPACE_CHARS`), so ``normalize_text`` here and ``fw_norm`` in DuckDB agree
  (DuckDB's own ``nfc_normalize`` does the NFC step; RE2's ``\\s`` is ASCII-only, hence the
  explicit class). NULL normalises to ``''``.
* **Split**: ``bucket = int(sha256(utf8(normalised user text)).hexdigest()[:15], 16) % 10000``;
  ``'eval'`` when ``bucket < floor(eval_fraction * 10000 + 0.5)`` else ``'train'``. SHA-256 is stable
  across DuckDB/Python versions (DuckDB's ``hash()`` is not). The key is the normalised *user*
  text only (not the context), so a question never lands in both splits whatever context it
  was asked in, and every dataset (sft, kto, dpo, weighted) puts the same prompt in the same split.
* **Messages**: TRL conversational format ``list<struct<role varchar, content varchar>>``.
  A prompt is ``[{system, context}, {user, input}]`` when the context holds anything but
  whitespace, else ``[{user, input}]``; a completion is ``[{assistant, output}]``. Contents
  are the ingested text byte for byte (never trimmed or normalised).

``register(con)`` creates the session-scoped (temp) macros the SQL files use:
``fw_norm(text)``, ``fw_split(normalised, eval_fraction)`` (``fw_split_hash(sha256(normalised),
eval_fraction)``), ``fw_prompt(context, input)`` (``fw_prompt_messages(has_system, context,
input)``), ``fw_completion(output)``.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata

import duckdb

# Python's str.isspace() set (Unicode White_Space minus nothing plus the ASCII separators 1C-1F).
WHITESPACE_CHARS = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
# The same set as an RE2 character class (DuckDB string literals keep backslashes as-is).
WHITESPACE_RE2 = (
    r"[\x{09}-\x{0d}\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}"
    r"\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]+"
)

MESSAGE_TYPE = "struct(role varchar, content varchar)[]"
SPLIT_BUCKETS = 10000


def normalize_text(text: str | None) -> str:
    """NFC, whitespace runs → one space, trimmed (the reference for ``fw_norm``)."""
    if text is None:
        return ""
    return " ".join(unicodedata.normalize("NFC", text).split())


def split_bucket(normalised: str) -> int:
    return int(hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:15], 16) % SPLIT_BUCKETS


def split_of(text: str | None, eval_fraction: float = 0.05) -> str:
    """``'eval'`` or ``'train'`` for a raw (not yet normalised) user text."""
    threshold = math.floor(eval_fraction * SPLIT_BUCKETS + 0.5)  # same arithmetic as fw_split
    return "eval" if split_bucket(normalize_text(text)) < threshold else "train"


def prompt_messages(context: str | None, input_text: str) -> list[dict[str, str]]:
    head = [{"role": "system", "content": context}] if normalize_text(context) else []
    return [*head, {"role": "user", "content": input_text}]


def completion_messages(output_text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": output_text}]


def check_eval_fraction(eval_fraction: float) -> float:
    if not 0.0 <= float(eval_fraction) <= 1.0:
        raise ValueError(f"eval_fraction must be within [0, 1], got {eval_fraction!r}")
    return float(eval_fraction)


# fw_norm rewrites only runs of 2+ whitespace characters and single non-space ones: ordinary
# single spaces cost no replacement (the result is the same; about 1.5x faster on prompts).
_WS = WHITESPACE_RE2[1:-2]  # the class body, without "[" and "]+"
_WS_NOT_SPACE = _WS.replace(r"\x{1c}-\x{20}", r"\x{1c}-\x{1f}")
assert _WS_NOT_SPACE != _WS, "WHITESPACE_RE2 changed shape; update fw_norm"

MACROS = (
    f"create or replace temp macro fw_norm(s) as "
    f"trim(regexp_replace(nfc_normalize(coalesce(s, '')), '[{_WS}]{{2,}}|[{_WS_NOT_SPACE}]', ' ', 'g'), ' ')",
    # fw_norm(s) <> '' without normalising: s holds a character that is not whitespace
    f"create or replace temp macro fw_nonblank(s) as coalesce(regexp_matches(s, '[^{_WS}]'), false)",
    # the split from sha256(normalised prompt), for callers that keep that hash
    f"create or replace temp macro fw_split_hash(prompt_hash, eval_fraction) as "
    f"case when (('0x' || left(prompt_hash, 15))::bigint % {SPLIT_BUCKETS}) "
    f"< floor(eval_fraction * {SPLIT_BUCKETS} + 0.5) then 'eval' else 'train' end",
    "create or replace temp macro fw_split(normalised, eval_fraction) as "
    "fw_split_hash(sha256(normalised), eval_fraction)",
    # has_system = fw_norm(context) <> '', for callers that computed it once
    f"create or replace temp macro fw_prompt_messages(has_system, context, input_text) as "
    f"case when has_system "
    f"then [{{'role': 'system', 'content': context}}, {{'role': 'user', 'content': input_text}}] "
    f"else [{{'role': 'user', 'content': input_text}}] end::{MESSAGE_TYPE}",
    "create or replace temp macro fw_prompt(context, input_text) as "
    "fw_prompt_messages(fw_norm(context) <> '', context, input_text)",
    f"create or replace temp macro fw_completion(output_text) as "
    f"[{{'role': 'assistant', 'content': output_text}}]::{MESSAGE_TYPE}",
)


def register(con: duckdb.DuckDBPyConnection) -> None:
    """Create the text macros on ``con`` (temp: nothing is written to the database file)."""
    for statement in MACROS:
        con.execute(statement)
