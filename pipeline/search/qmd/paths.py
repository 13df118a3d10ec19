"""Which files a ``memory_get`` may read through the qmd backend.

``qmd/<collection>/<relative-path>`` is resolved inside that collection's root
and must also match the collection's glob: a collection rooted at the
workspace with pattern ``MEMORY.md`` must not open the rest of the workspace.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path, PurePosixPath

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.errors import MemoryGetError
from memindex.pipeline.search.qmd.collections import Collection, managed_collections


class QmdPathError(MemoryGetError):
    """A refused qmd path; the message says why."""


@lru_cache(maxsize=64)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        ch = pattern[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "{":
            close = pattern.find("}", i)
            if close == -1:
                out.append(re.escape(ch))
            else:
                out.append("(?:" + "|".join(re.escape(a) for a in pattern[i + 1 : close].split(",")) + ")")
                i = close
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out) + r"\Z")


def split_mask(mask: str) -> list[str]:
    """qmd's ``--mask`` is a comma list of globs (commas inside ``{}`` belong to the glob)."""
    parts, cur, depth = [], "", 0
    for ch in mask:
        depth += (ch == "{") - (ch == "}" and depth > 0)
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return [p for p in parts if p]


def glob_matches(mask: str, rel: str) -> bool:
    """fast-glob style match of a ``/``-separated relative path (``**``, ``*``, ``?``, ``{a,b}``)."""
    return any(_glob_regex(p).match(rel) for p in split_mask(mask))


def _clean_rel(rel: str) -> str:
    if not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel:
        raise QmdPathError("path rejected: give qmd/<collection>/<relative-path>")
    parts = PurePosixPath(rel).parts
    if ".." in parts:
        raise QmdPathError("path rejected: qmd path escapes its collection ('..' segments)")
    return PurePosixPath(*[p for p in parts if p != "."]).as_posix()


def qmd_read_target(settings: AgentSettings, raw: str) -> tuple[Collection, Path, str]:
    """(collection, absolute candidate, display path) for ``qmd/<collection>/<rel>``."""
    _, _, rest = raw.partition("/")
    name, _, rel = rest.partition("/")
    colls = {c.name: c for c in managed_collections(settings)}
    if name not in colls:
        known = ", ".join(sorted(colls)) or "none configured"
        raise QmdPathError(f"path rejected: unknown qmd collection {name!r} (known: {known})")
    rel = _clean_rel(rel)
    if not rel.lower().endswith(".md"):
        raise QmdPathError("path rejected: only Markdown (.md) memory files can be read")
    coll = colls[name]
    if not glob_matches(coll.pattern, rel):
        raise QmdPathError(f"path rejected: {rel!r} is not part of collection {name} ({coll.pattern})")
    return coll, coll.path / rel, f"qmd/{name}/{rel}"


def collection_containing(settings: AgentSettings, candidate: Path) -> Collection | None:
    """A configured collection whose root and pattern cover ``candidate`` (no I/O)."""
    for coll in managed_collections(settings):
        try:
            rel = candidate.relative_to(coll.path).as_posix()
        except ValueError:
            continue
        if glob_matches(coll.pattern, rel):
            return coll
    return None
