"""A hit's ``provenance``: OpenClaw 2026.9's record of where a chunk's text came from.

memory-core (2026.9.6) attaches ``{originClass, sessionKind, observedAt[, supersedesKey]}`` to every
hit it indexed (``resolveChunkProvenance`` in ``manager-index-preparation``). For a memory file the
record is the file's: ``originClass`` by its path (``resolveMemoryPathClassification`` in
``memory-path-provenance``), ``sessionKind`` ``"unknown"``, ``observedAt`` its mtime in whole
milliseconds. Session chunks get theirs from the transcript's own lines (who wrote each message, the
session's kind), which memindex does not keep per line: their record is the file's too, with the
origin OpenClaw gives a message that carries no owner/system marker (``"untrusted"``).
"""

from __future__ import annotations

import posixpath
import re
from typing import Literal, TypedDict

OriginClass = Literal["owner", "agent", "system", "untrusted"]


class Provenance(TypedDict):
    originClass: OriginClass
    sessionKind: str
    observedAt: int


# The curated root files memory-core reads as the agent's own memory (case as OpenClaw spells them).
_CURATED = frozenset({"MEMORY.md", "memory.md", "USER.md"})
_DREAMS = frozenset({"DREAMS.md", "dreams.md"})
_USER_FILE = re.compile(r"^users/[a-zA-Z0-9][a-zA-Z0-9_-]{0,127}/USER\.md$")


def memory_origin(path: str) -> OriginClass:
    """A memory file's origin by its workspace-relative ``path``: "system" for dreaming output,
    "agent" for the workspace's memory files, "untrusted" for anything else (an extraPaths file,
    a path outside the workspace)."""
    if (not path or path in (".", "..") or path.startswith("../") or posixpath.isabs(path) or "\\" in path
            or "\0" in path or posixpath.normpath(path) != path):
        return "untrusted"
    segments = path.split("/")
    if (len(segments) == 1 and segments[0] in _DREAMS) or (
            segments[0] == "memory" and len(segments) > 1 and segments[1] in ("dreaming", ".dreams")):
        return "system"
    curated = len(segments) == 1 and segments[0] in _CURATED
    if curated or _USER_FILE.match(path) or (segments[0] == "memory" and segments[-1].endswith(".md")):
        return "agent"
    return "untrusted"


def provenance(source: str, path: str, mtime_ns: int | None) -> Provenance:
    """The hit's record; ``mtime_ns`` is the file's mtime (nanoseconds) as last indexed."""
    observed = max(0, (mtime_ns or 0) // 1_000_000)  # OpenClaw's Math.floor(mtimeMs)
    origin: OriginClass = memory_origin(path) if source == "memory" else "untrusted"
    return {"originClass": origin, "sessionKind": "unknown", "observedAt": observed}
