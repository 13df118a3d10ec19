"""Markdown chunker (F2): ~``tokens`` per chunk with ``overlap`` carried over.

Like the reference it is line-oriented and greedy, estimating 4 characters per
token. Unlike the reference, a line longer than a chunk is cut into
consecutive pieces that are never repeated and never truncated: the reference
keeps a whole oversized piece as "overlap" and then cuts the next chunk back
to size, which duplicates one piece and loses the tail of the line.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import hashlib
import re
from bisect import bisect_right
from dataclasses import dataclass, replace
from itertools import accumulate, repeat
from operator import add

from memindex.pipeline.config import defaults as D

CHARS_PER_TOKEN = 4
# Bump when the chunking algorithm changes in a way that moves chunk boundaries
# or ids: it is part of the index fingerprint, so existing indexes are rebuilt.
# 2: a lone CR ends a line; 3: chunks carry keyword context (file_context); 4: a daily note
# named ``.MD`` (any case) carries its date in that context too; 5: a final line break adds the
# empty last line OpenClaw counts (endLine parity).
CHUNKER_VERSION = 5

# Where a line ends, for the chunker's line numbers and memory_get's alike: at LF, or at a
# lone CR (classic Mac files). The CR of a CRLF stays with its line (split_lines drops it).
LINE_BREAK = re.compile(r"\r(?!\n)|\n")


@dataclass(frozen=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int
    text: str
    hash: str
    # Keyword-indexed with the chunk, never shown or embedded: the file's title and date
    # (file_context). ``hash`` stays the hash of ``text`` (the embedding cache key).
    context: str = ""


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def chunk_limits(tokens: int, overlap: int) -> tuple[int, int]:
    max_chars = max(32, tokens * CHARS_PER_TOKEN)
    overlap_chars = min(max(0, overlap * CHARS_PER_TOKEN), max_chars // 2)
    return max_chars, overlap_chars


def break_lines(text: str) -> list[str]:
    """``LINE_BREAK.split(text)``: the lines citations count, a CRLF's CR kept on its line.

    Text without a CR (nearly every Markdown file) takes ``str.split``: the regex split
    was ~8x slower, a tenth of a cold index's CPU.
    """
    return text.split("\n") if "\r" not in text else LINE_BREAK.split(text)


def lf_line_ends(text: str) -> str:
    """``text`` with every line end as LF: a CRLF or a lone CR becomes ``\n``, so its lines are
    exactly :func:`split_lines`' (what snippets show), and no CR is left over."""
    return text if "\r" not in text else _CR_LINE_END.sub("\n", text)


_CR_LINE_END = re.compile(r"\r\n?")


def split_lines(text: str) -> list[str]:
    """Split on CRLF, LF or a lone CR; no line keeps its terminator, so snippets and
    hashes carry none. A final line end ends the last line rather than starting an empty one.
    """
    lines = break_lines(text)
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    if "\r" not in text:
        return lines
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def chunk_markdown(text: str, tokens: int = D.CHUNK_TOKENS, overlap: int = D.CHUNK_OVERLAP) -> list[Chunk]:
    """Chunk ``text``. Every line lands in at least one chunk; no chunk exceeds
    ``max(32, tokens*4)`` characters; consecutive chunks share up to
    ``overlap*4`` characters of whole lines (never a piece of a long line).

    Greedy over *segments* (lines, and the pieces of a line longer than a chunk): a chunk
    is the run ``segs[lo:i]``; segment ``i`` that would push the run past ``max_chars``
    closes it, and the next run starts with the closed one's tail of whole lines up to
    ``overlap_chars`` (dropped from the front again if it leaves no room for segment ``i``).
    The run's joined length is read off prefix sums and the next closing segment found by
    bisection, so the Python work is per chunk, not per line (a cold index chunks every file).
    """
    max_chars, overlap_chars = chunk_limits(tokens, overlap)
    lines = split_lines(text)
    if len(text) > 1 and text[-1] == "\n":
        # OpenClaw splits on "\n" and keeps the empty line after a final line break: the last chunk
        # holds it, so its endLine is one past the last line of text (a 4-line note ending in a
        # newline is 1-5) and its text ends with "\n". The same line numbers and chunk hashes here.
        lines.append("")
    if max(map(len, lines), default=0) <= max_chars:
        segs, line_of, piece = lines, None, None  # the usual case: segment k is line k + 1
    else:
        segs, nos, flags = [], [], []
        for no, line in enumerate(lines, start=1):
            if len(line) <= max_chars:
                segs.append(line)
                nos.append(no)
                flags.append(False)
            else:  # pieces of an over-long line never overlap
                for i in range(0, len(line), max_chars):
                    segs.append(line[i : i + max_chars])
                    nos.append(no)
                    flags.append(True)
        line_of, piece = nos, flags
    n = len(segs)
    # cum[k]: joined length of segs[:k] plus one separator each; a run segs[a:b] is
    # cum[b] - cum[a] - 1 characters long.
    cum = list(accumulate(map(add, map(len, segs), repeat(1)), initial=0))  # C iterators only
    chunks: list[Chunk] = []

    def flush(a: int, b: int) -> None:
        body = "\n".join(segs[a:b])
        first, last = (a + 1, b) if line_of is None else (line_of[a], line_of[b - 1])
        chunks.append(Chunk(first, last, body, sha256_hex(body)))

    lo = carried = 0  # the run is segs[lo:i]; its first `carried` segments are overlap
    i = 0
    while True:
        # The next segment that does not fit the run: the first i with cum[i + 1] - cum[lo] - 1 > max_chars.
        i = max(i, lo + 1, bisect_right(cum, cum[lo] + max_chars + 1) - 1)
        if i >= n:
            break
        if i - lo > carried:
            flush(lo, i)
            k = i
            while k > lo and not (piece is not None and piece[k - 1]) and cum[i] - cum[k - 1] <= overlap_chars:
                k -= 1
            lo, carried = k, i - k
        # Carried overlap must never crowd out new content: drop it from the front.
        while i > lo and cum[i + 1] - cum[lo] - 1 > max_chars:
            lo += 1
            carried -= 1
        i += 1
    if (n - lo > carried or not chunks) and n > lo:
        flush(lo, n)
    return [c for c in chunks if c.text.strip()]


# A dated name, YYYY-MM-DD.md (``.md`` in any case), in any folder: an extraPaths folder of daily notes gets
# its date words too. Deliberately wider than decay's rule (ranking._DATED_PATH: under memory/ only, as
# OpenClaw ages files): words help find a note and never reorder by age.
_DATED_NAME = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})(?i:\.md)$")
# The file's title: its first ATX heading, when it is the first non-blank line.
_TITLE = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$")
MAX_CONTEXT_CHARS = 200


def file_context(path: str, text: str) -> str:
    """Context keyword-indexed with every chunk of a file (issue 17): its title and, for a
    dated daily note, the date in words.

    A chunk is found by its own words only, so the second chunk of ``memory/2023-07-07.md``
    never matched "what did I do on 7 July" (and its first chunk only through ``2023``, the
    heading's one token every note shares): the date lives in the file name and the heading
    of chunk 1. On the LoCoMo dev split this raised keyword-only R@10 from 0.811 to 0.829
    and MRR from 0.627 to 0.656. Embedding it as well cost vector-only R@10 0.612 -> 0.580
    (MiniLM's vector of a chunk drifts towards the date), so it is keyword-only.
    """
    parts: list[str] = []
    first = next((ln.strip() for ln in split_lines(text[:4096]) if ln.strip()), "")
    m = _TITLE.match(first)
    if m:
        parts.append(m.group(1)[:MAX_CONTEXT_CHARS])
    d = _DATED_NAME.search(path.replace("\\", "/"))
    if d:
        try:
            day = _dt.date(int(d.group(1)), int(d.group(2)), int(d.group(3)))
        except ValueError:  # 2026-02-30 is a name, not a date
            day = None
        if day is not None:
            # English names, independent of the process locale: the FTS tokenizer and the
            # query see the same words on every machine.
            parts.append(f"{day.isoformat()} {calendar.day_name[day.weekday()]} {day.day} "
                         f"{calendar.month_name[day.month]} {day.year}")
    return " ".join(parts)


def with_context(chunks: list[Chunk], context: str) -> list[Chunk]:
    """``chunks`` carrying ``context`` (see :func:`file_context`)."""
    return [replace(c, context=context) for c in chunks] if context else chunks
