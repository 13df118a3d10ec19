"""Snippets centred on the lines of a chunk that match the query (F13).

An agent reads the snippet, not the file, so the snippet must show why the
chunk matched: a term at the end of a 1.5 KB chunk is invisible in the chunk's
first 700 characters. Lines are scored by the query's content terms they
contain (each weighted by how rare it is among the chunk's lines), the best
line is the centre, and whole neighbouring lines are added - the better
scoring side first - while the snippet stays within the cap. The snippet's own
line range is returned so that citations and ``memory_get`` point at exactly
the lines shown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Set as AbstractSet
from dataclasses import dataclass

from memindex.pipeline.config import defaults as D
from memindex.pipeline.store.fts_text import keys_by_line, keyword_tokens, lines_holding_keys, match_key

SNIPPET_MAX_CHARS = D.SNIPPET_CHARS


@dataclass(frozen=True)
class Snippet:
    text: str
    start_line: int
    end_line: int


def _line_scores(text: str, n: int, keys: frozenset[str]) -> list[float]:
    found: Mapping[int, AbstractSet[str]] | None = lines_holding_keys(text, keys)
    if found is None:
        found = {i: hit for i, hit in enumerate(keys_by_line(text, keys)) if hit}
    df: dict[str, int] = {}
    for hit in found.values():
        for k in hit:
            df[k] = df.get(k, 0) + 1
    # A term on every line locates nothing; a term on one line locates the match.
    weight = {k: math.log(1 + n / d) for k, d in df.items()}.__getitem__
    scores = [0.0] * n
    for i, hit in found.items():
        scores[i] = sum(map(weight, hit))
    return scores


def units(text: str) -> int:
    """JavaScript's string length (UTF-16 code units), which OpenClaw's 700-character cap counts:
    an emoji is 2, so a snippet of emoji capped by code points was up to twice OpenClaw's."""
    if text.isascii() or max(text, default="\0") < "\U00010000":  # C-speed checks: the usual case
        return len(text)
    return len(text) + sum(ord(ch) > 0xFFFF for ch in text)


def _head(text: str, limit: int) -> str:
    """The longest prefix of ``text`` within ``limit`` UTF-16 units."""
    cut = text[:limit]
    while units(cut) > limit:
        cut = cut[: len(cut) - max(1, (units(cut) - limit) // 2)]
    return cut


def _cut_line(line: str, keys: frozenset[str], limit: int) -> str:
    """``limit`` units of one over-long line, around its first matching token."""
    low, pos = line.lower(), 0
    for tok in keyword_tokens(line):
        if match_key(tok) in keys:
            pos = max(0, low.find(tok))
            break
    # Start half the cap (in units) before the match, or earlier when the line ends sooner.
    start, room = pos, max(limit // 2, limit - units(line[pos:]))
    while start > 0:
        need = 2 if ord(line[start - 1]) > 0xFFFF else 1
        if need > room:
            break
        start, room = start - 1, room - need
    return _head(line[start:], limit)


def centred_snippet(text: str, start_line: int, end_line: int, keys: frozenset[str],
                    limit: int = SNIPPET_MAX_CHARS) -> Snippet:
    """The ≤ ``limit``-unit window of whole lines of a chunk around its best-matching line.

    ``keys``: the query's content tokens (:func:`~memindex.pipeline.store.fts_text.query_keywords`).
    With no matching line the window starts at the chunk's first line. A chunk whose text lines
    do not map one for one onto its range (a transcript's chunk: one text line per message, its
    range in JSONL lines with tool records between; or a piece of an over-long line) gets the same
    window of whole lines, and keeps its own range, which holds the lines shown.
    """
    lines = text.split("\n")
    mapped = len(lines) == end_line - start_line + 1
    if units(text) <= limit:  # the whole chunk fits: every line is in the window, whichever is best
        return Snippet(text, start_line, end_line)
    scores = _line_scores(text, len(lines), keys) if keys else [0.0] * len(lines)
    best = scores.index(max(scores))  # the first of the best-scoring lines
    lens = list(map(units, lines))
    if lens[best] >= limit:
        cut = _cut_line(lines[best], keys, limit)
        return Snippet(cut, start_line + best, start_line + best) if mapped else Snippet(cut, start_line, end_line)
    lo = hi = best
    size, last = lens[best], len(lines) - 1
    while True:
        # Grow towards the better-scoring neighbour (ties: the shorter one, then downwards),
        # while the next line still fits.
        up = lo > 0 and size + 1 + lens[lo - 1] <= limit
        down = hi < last and size + 1 + lens[hi + 1] <= limit
        if up and down:
            a, b = lo - 1, hi + 1
            up = (scores[a], -lens[a]) > (scores[b], -lens[b])
            down = not up
        if up:
            lo -= 1
            size += 1 + lens[lo]
        elif down:
            hi += 1
            size += 1 + lens[hi]
        else:
            break
    # A window that ends on a heading or blank lines shows a section with no body ("## Oncall
    # notes" as its last line): end it at the last line of text.
    while hi > best and (not lines[hi].strip() or lines[hi].lstrip().startswith("#")):
        hi -= 1
    shown = "\n".join(lines[lo : hi + 1])
    return Snippet(shown, start_line + lo, start_line + hi) if mapped else Snippet(shown, start_line, end_line)
