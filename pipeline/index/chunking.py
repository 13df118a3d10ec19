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
from dataclasses import dataclass, replace

CHARS_PER_TOKEN = 4
# Bump when the chunking algorithm changes in a way that moves chunk boundaries
# or ids: it is part of the index fingerprint, so existing indexes are rebuilt.
CHUNKER_VERSION = 3  # 2: a lone CR ends a line; 3: chunks carry keyword context (file_context)

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


def split_lines(text: str) -> list[str]:
    """Split on CRLF, LF or a lone CR; no line keeps its terminator, so snippets and
    hashes carry none. A final line end ends the last line rather than starting an empty one.
    """
    lines = break_lines(text)
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def chunk_markdown(text: str, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    """Chunk ``text``. Every line lands in at least one chunk; no chunk exceeds
    ``max(32, tokens*4)`` characters; consecutive chunks share up to
    ``overlap*4`` characters of whole lines (never a piece of a long line)."""
    max_chars, overlap_chars = chunk_limits(tokens, overlap)
    # (line_no, text, is_piece): pieces of an over-long line never overlap.
    segments: list[tuple[int, str, bool]] = []
    for no, line in enumerate(split_lines(text), start=1):
        if len(line) <= max_chars:
            segments.append((no, line, False))
        else:
            for i in range(0, len(line), max_chars):
                segments.append((no, line[i : i + max_chars], True))

    chunks: list[Chunk] = []
    buf: list[tuple[int, str, bool]] = []
    carried = 0  # how many entries at the head of buf are overlap from the previous chunk
    size = -1  # joined length of buf: sum(len) + separators

    def flush() -> None:
        body = "\n".join(s for _, s, _ in buf)
        chunks.append(Chunk(buf[0][0], buf[-1][0], body, sha256_hex(body)))

    for seg in segments:
        cost = len(seg[1]) + 1
        if buf and size + cost > max_chars:
            if len(buf) > carried:
                flush()
                keep: list[tuple[int, str, bool]] = []
                acc = 0
                for entry in reversed(buf):
                    if entry[2] or acc + len(entry[1]) + 1 > overlap_chars:
                        break
                    keep.insert(0, entry)
                    acc += len(entry[1]) + 1
                buf = keep
                carried = len(buf)
                size = sum(len(s) + 1 for _, s, _ in buf) - 1
            # Carried overlap must never crowd out new content: drop it from the front.
            while buf and size + cost > max_chars:
                size -= len(buf.pop(0)[1]) + 1
                carried -= 1
        buf.append(seg)
        size += cost
    if len(buf) > carried or not chunks:
        if buf:
            flush()
    return [c for c in chunks if c.text.strip()]


# A daily note's name: memory/[...]/YYYY-MM-DD.md (as ranking.dated_path_date reads it).
_DATED_NAME = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})\.md$")
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
