"""JSON text read by its quotes and brackets alone, for values Python's decoder cannot take.

Python's ``json`` recurses once per level of nesting and raises ``RecursionError`` past ~1,000
levels; DuckDB's reader has no such limit, so such a record is valid and loads. These helpers
never recurse: ``value_end`` says where a value ends (a JSON array's element split), ``shallow``
cuts what lies deeper than a depth (the privacy filters, which read fields near the top).
"""

from __future__ import annotations

import re

_STRING_END = re.compile(r'(?:[^"\\]|\\.)*"', re.S)  # the rest of a string after its opening quote
_STRUCTURE = re.compile(r'["{}\[\]]')  # what changes the depth, or starts a string
_SCALAR_END = re.compile(r"[,\]\s]")
_CLOSES = {"{": "}", "[": "]"}


def value_end(text: str, i: int) -> int | None:
    """Where the JSON value starting at ``i`` ends, from its quotes and brackets alone (nothing
    in between is checked, and no depth is too deep); None when they do not close (or close the
    wrong kind) before the text ends."""
    if text.startswith('"', i):
        found = _STRING_END.match(text, i + 1)
        return found.end() if found else None
    if i >= len(text) or text[i] not in _CLOSES:
        found = _SCALAR_END.search(text, i)
        return found.start() if found and found.start() > i else None
    expected = [_CLOSES[text[i]]]
    j = i + 1
    while expected:
        found = _STRUCTURE.search(text, j)
        if found is None:
            return None
        c, j = found.group(), found.end()
        if c == '"':
            string = _STRING_END.match(text, j)
            if string is None:
                return None
            j = string.end()
        elif c in _CLOSES:
            expected.append(_CLOSES[c])
        elif c != expected.pop():
            return None
    return j


def shallow(text: str, depth: int = 64) -> str:
    """``text`` with each object or array nested deeper than ``depth`` levels replaced by
    ``null``; the rest byte for byte. ValueError when its quotes or brackets do not close."""
    out, start, level, i = [], 0, 0, 0
    while (found := _STRUCTURE.search(text, i)) is not None:
        c, at = found.group(), found.start()
        if c == '"':
            string = _STRING_END.match(text, at + 1)
            if string is None:
                raise ValueError(f"a string that does not end, at character {at}")
            i = string.end()
        elif c in _CLOSES and level >= depth:
            end = value_end(text, at)
            if end is None:
                raise ValueError(f"brackets that do not close, at character {at}")
            out += [text[start:at], "null"]
            start = i = end
        else:
            level += 1 if c in _CLOSES else -1
            i = at + 1
    return "".join(out) + text[start:]
