"""The JSON5 that openclaw.json files are written in, read in linear time by the C JSON parser.

The ``json5`` library parses in pure Python at 40-60 µs per byte: a 10 KB commented config
added 0.5-0.7 s to every command, an 82 KB one 3.3 s. What OpenClaw's configs use of JSON5 -
comments, trailing commas, unquoted keys, single-quoted strings - is rewritten here into JSON
by two regular-expression passes (each token is visited once, strings are skipped whole, so a
``//`` or a ``,]`` inside a string is never touched) and handed to ``json.loads``. Anything else
(hex numbers, a leading ``+`` or ``.``, line continuations, non-ASCII keys) makes ``json.loads``
refuse the result, and the caller falls back to ``json5`` (``loads`` returns None then), so the
values and the error messages stay the library's.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKENS = re.compile(r"""
      (?P<dq>"(?:[^"\\\n]|\\.)*")            # a JSON string: kept as it is
    | '(?P<sq>(?:[^'\\\n]|\\.)*)'            # a single-quoted string: re-quoted
    | (?P<comment>//[^\n]*|/\*.*?\*/)        # a comment: dropped
    | (?P<key>[A-Za-z_$][A-Za-z0-9_$]*)(?=\s*:)  # an unquoted key: quoted
""", re.S | re.X)
_TRAILING = re.compile(r'("(?:[^"\\\n]|\\.)*")|,(\s*[}\]])')


def _token(m: re.Match[str]) -> str:
    kind = m.lastgroup
    if kind == "dq":
        return m.group(0)
    if kind == "comment":
        return " "  # a separator still (`1/* */2` must stay two tokens, and so invalid)
    if kind == "key":
        return f'"{m.group("key")}"'
    # 'it\'s "x"' -> "it's \"x\"": the only escapes that differ between the two quotings
    body = m.group("sq").replace("\\'", "'")
    return '"' + re.sub(r'(\\.)|"', lambda e: e.group(1) or '\\"', body) + '"'


def _trailing(m: re.Match[str]) -> str:
    return m.group(1) or m.group(2)


def loads(text: str) -> Any | None:
    """``text`` parsed, or None when it uses JSON5 beyond this subset (or is not JSON5 at all)."""
    try:
        return json.loads(_TRAILING.sub(_trailing, _TOKENS.sub(_token, text)))
    except (ValueError, RecursionError):
        return None
