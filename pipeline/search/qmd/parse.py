"""qmd's ``--json`` search output → ``SearchResult``s.

qmd prints a JSON array; wrappers and warnings can surround it, so the first
balanced ``[...]`` is tried when the whole text is not JSON. An empty stdout
is an error (not "no results"): a crashed or killed qmd must not look like a
search that found nothing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence
from urllib.parse import unquote

from memindex.pipeline.search.engine import SearchResult
from memindex.pipeline.search.qmd.collections import Collection
from memindex.pipeline.search.qmd.runner import QmdBadOutput

NO_RESULTS_MARKERS = ("no results found", "no matching results", "no documents found")
_HEADER = re.compile(r"^@@\s*-(\d+)(?:,(\d+))?[^\n]*@@[^\n]*(?:\n|$)")


def _has_marker(text: str) -> bool:
    low = text.lower()
    return any(m in low for m in NO_RESULTS_MARKERS)


def _balanced_arrays(text: str, max_tries: int = 50) -> Iterator[str]:
    """Balanced ``[...]`` substrings in order of their start, ignoring brackets inside strings."""
    start = text.find("[")
    while start != -1 and max_tries > 0:
        max_tries -= 1
        depth, in_str, esc = 0, False, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "[":
                depth += 1
            elif ch == "]":
                depth -= 1
                if depth == 0:
                    yield text[start : i + 1]
                    break
        start = text.find("[", start + 1)


def _first_json_array(text: str) -> list[Any] | None:
    """The first balanced ``[...]`` that parses (log noise like "[1/3]" may come first)."""
    for sub in _balanced_arrays(text):
        try:
            data = json.loads(sub)
        except ValueError:
            continue
        if isinstance(data, list):
            return data
    return None


def parse_search_json(stdout: str, stderr: str = "") -> list[dict[str, Any]]:
    """The result objects, ``[]`` for a "no results" marker; QmdBadOutput otherwise."""
    out = stdout.strip()
    if not out:
        if _has_marker(stderr):
            return []
        raise QmdBadOutput(f"qmd returned invalid JSON: stdout empty (stderr: {stderr.strip()[:200]})")
    if _has_marker(out) and "[" not in out:
        return []
    try:
        data = json.loads(out)
    except ValueError:
        data = _first_json_array(out)
        if data is None:
            raise QmdBadOutput(f"qmd returned invalid JSON: {out[:200]!r}") from None
    if not isinstance(data, list):
        raise QmdBadOutput(f"qmd returned JSON that is not an array ({type(data).__name__})")
    return [item for item in data if isinstance(item, dict)]


def parse_qmd_uri(uri: str) -> tuple[str, str] | None:
    """``qmd://<collection>/<path>[?index=…]`` → (collection, relative path)."""
    if not isinstance(uri, str) or not uri.startswith("qmd://"):
        return None
    rest = uri[len("qmd://"):].split("?", 1)[0]
    coll, _, rel = rest.partition("/")
    if not coll or not rel:
        return None
    return coll, unquote(rel) if "%" in rel else rel


def line_range(snippet: str) -> tuple[int, int, str]:
    """(start, end, body): lines from a ``@@ -start,count @@`` header, which is stripped."""
    m = _HEADER.match(snippet)
    if m:
        start = max(1, int(m.group(1)))
        count = int(m.group(2)) if m.group(2) else 1
        body = snippet[m.end():]
        return start, start + max(1, count) - 1, body
    n = max(1, len(snippet.rstrip("\n").split("\n")))
    return 1, n, snippet


def display_path(workspace: Path, coll: Collection, rel: str) -> str:
    """Workspace-relative when inside the workspace, else ``qmd/<collection>/<rel>``."""
    abs_path = os.path.normpath(coll.path / rel)
    ws = os.path.normpath(workspace)
    if abs_path.startswith(ws.rstrip(os.sep) + os.sep):
        return Path(os.path.relpath(abs_path, ws)).as_posix()
    return f"qmd/{coll.name}/{rel}"


def map_results(
    items: Iterable[dict[str, Any]],
    collections: Sequence[Collection],
    workspace: Path,
    *,
    max_snippet_chars: int,
    min_score: float = 0.0,
) -> list[SearchResult]:
    """Map qmd results onto our result shape; unknown collections are dropped."""
    by_name = {c.name: c for c in collections}
    best: dict[tuple[str, str, int], SearchResult] = {}
    for item in items:
        parsed = parse_qmd_uri(item.get("file", ""))
        if parsed is None or parsed[0] not in by_name:
            continue
        coll = by_name[parsed[0]]
        try:
            score = float(item.get("score") or 0.0)
        except (TypeError, ValueError):
            score = 0.0
        if score < min_score:
            continue
        start, end, body = line_range(str(item.get("snippet") or ""))
        r = SearchResult(
            path=display_path(workspace, coll, parsed[1]), startLine=start, endLine=end,
            score=round(score, 6), snippet=body.strip("\n")[:max_snippet_chars], source=coll.source,
        )
        key = (r.path, r.source, r.startLine)
        if key not in best or best[key].score < r.score:
            best[key] = r
    return sorted(best.values(), key=lambda r: -r.score)
