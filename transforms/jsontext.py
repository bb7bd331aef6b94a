"""JSON text read by its quotes and brackets alone, for values Python's decoder cannot take.

Python's ``json`` recurses once per level of nesting and raises ``RecursionError`` past ~1,000
levels; DuckDB's reader has no such limit, so such a record is valid and loads. These helpers
never recurse: ``value_end`` says where a value ends (a JSON array's element split), ``shallow``
cuts what lies deeper than a depth (the privacy filters, which read fields near the top).
"""

from __future__ import annotations

import re

_STRING_END = {  # the rest of a string after its opening quote (single quotes: not JSON, but written)
    '"': re.compile(r'(?:[^"\\]|\\.)*"', re.S), "'": re.compile(r"(?:[^'\\]|\\.)*'", re.S)}
_STRUCTURE = {'"': re.compile(r'["{}\[\]]'), "\"'": re.compile(r"[\"'{}\[\]]")}  # depth changes, strings
_SCALAR_END = re.compile(r"[,\] \t\r\n]")  # JSON's white space only
_CLOSES = {"{": "}", "[": "]"}


# what ``scan_value`` finds when a value does not end: the text ends inside it (a file caught
# while its writer is still writing it), or its brackets or quotes are wrong
CUT, BROKEN = -1, -2


def value_end(text: str, i: int, quotes: str = '"') -> int | None:
    """Where the JSON value starting at ``i`` ends, from its quotes and brackets alone (nothing
    in between is checked, and no depth is too deep); None when they do not close (or close the
    wrong kind) before the text ends. ``quotes``: the characters that open a string (``"'"`` too
    for text that is not JSON: a comma or bracket inside single quotes is not a boundary); a
    value that is no string, object or array must hold none of them (where it ends is not known)."""
    end = scan_value(text, i, quotes)
    return end if end >= 0 else None


def scan_value(text: str, i: int, quotes: str = '"') -> int:
    """``value_end``, or why there is none: ``CUT`` when the text ends inside the value (or
    before it starts), every bracket and quote opened still open (such text may be whole
    later); ``BROKEN`` when one closes the wrong kind, or a bare value holds a quote."""
    if i < len(text) and text[i] in quotes:
        found = _STRING_END[text[i]].match(text, i + 1)
        return found.end() if found else CUT
    if i >= len(text):
        return CUT
    if text[i] not in _CLOSES:
        found = _SCALAR_END.search(text, i)
        end = found.start() if found else len(text)
        return end if end > i and not any(c in text[i:end] for c in quotes) else BROKEN
    expected = [_CLOSES[text[i]]]
    structure = _STRUCTURE[quotes]
    j = i + 1
    while expected:
        found = structure.search(text, j)
        if found is None:
            return CUT
        c, j = found.group(), found.end()
        if c in quotes:
            string = _STRING_END[c].match(text, j)
            if string is None:
                return CUT
            j = string.end()
        elif c in _CLOSES:
            expected.append(_CLOSES[c])
        elif c != expected.pop():
            return BROKEN
    return j


def shallow(text: str, depth: int = 64) -> str:
    """``text`` with each object or array nested deeper than ``depth`` levels replaced by
    ``null``; the rest byte for byte. ValueError when a string or a cut value does not close;
    other damage is left to the JSON parser that reads the result."""
    out, start, level, i = [], 0, 0, 0
    while (found := _STRUCTURE['"'].search(text, i)) is not None:
        c, at = found.group(), found.start()
        if c == '"':
            string = _STRING_END['"'].match(text, at + 1)
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
