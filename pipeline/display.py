"""Text from memory files made safe to show: on a terminal, in a log line, in an error message.

A file name or a note may hold control characters (a newline, an ANSI escape, a bidi override):
printed raw, a name with a newline forges a search result line and an escape sequence drives the
reader's terminal. What is shown escapes them as ``\\xNN`` / ``\\uNNNN``; what is stored and
returned as data (JSON, ``memory_get``) is unchanged.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the bidi embedding/override/isolate marks (they reorder what
# follows them on screen). Tab stays: it is layout, not control.
_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROLS_BUT_NEWLINE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def escape_controls(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with its control characters escaped (newlines kept as lines when asked)."""
    pattern = _CONTROLS_BUT_NEWLINE if keep_newlines else _CONTROLS
    return pattern.sub(_escape, text) if pattern.search(text) else text


_ESCAPED = re.compile(r"\\x([0-9a-f]{2})|\\u(202[a-e]|206[6-9])")


def unescape_controls(text: str) -> str:
    """``escape_controls`` undone: the escapes it writes (and only those) back to their characters,
    so a name copied from a search line (``memory/new\\x0aline.md``) finds its file again."""
    def back(m: re.Match[str]) -> str:
        c = chr(int(m.group(1) or m.group(2), 16))
        return c if _CONTROLS.fullmatch(c) else m.group()

    return _ESCAPED.sub(back, text)


def printable(text: str) -> str:
    """One line safe for a log or an error message: undecodable bytes and controls escaped."""
    return escape_controls(text.encode("utf-8", "backslashreplace").decode("utf-8"))
