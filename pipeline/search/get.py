"""``memory_get`` (F14): read a memory Markdown file, optionally a line window.

Unlike the reference (which answers every refusal with a generic "path
required"), each refusal names the rule that refused it, so an agent can
correct its call. Allowed: ``MEMORY.md``, ``memory.md``, ``memory/**.md``
inside the workspace and ``.md`` files inside an extraPaths entry; never a
symlink, never anything that resolves outside those roots.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.workspace import ROOT_FILES, is_ignored_dir, rel_path, resolve_extra_paths

from memindex.pipeline.errors import MemoryGetError

MAX_READ_BYTES = 10 * 1024 * 1024


@dataclass
class MemoryGetResult:
    path: str
    text: str
    from_line: int | None = None
    lines: int | None = None
    total_lines: int | None = None

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = {"path": self.path, "text": self.text}
        if self.from_line is not None:
            d["from"] = self.from_line
        if self.lines is not None:
            d["lines"] = self.lines
        if self.total_lines is not None:
            d["totalLines"] = self.total_lines
        return d


def _no_symlinks_between(root: Path, target: Path) -> bool:
    """True if no component from ``root`` (exclusive) down to ``target`` is a symlink."""
    rel = target.relative_to(root)
    cur = root
    for part in rel.parts:
        cur = cur / part
        if cur.is_symlink():
            return False
    return True


def resolve_memory_path(settings: AgentSettings, raw: str) -> tuple[Path, str]:
    """Validate ``raw`` and return (absolute path, display path) or raise MemoryGetError."""
    if not isinstance(raw, str) or not raw.strip():
        raise MemoryGetError("path required: give a workspace-relative path such as memory/2026-02-10.md")
    raw = raw.strip()
    if "\x00" in raw:
        raise MemoryGetError("path rejected: contains a NUL byte")
    ws = settings.workspace
    if raw.startswith("qmd/"):
        return _resolve_qmd_path(settings, raw)
    from memindex.pipeline.index.media import media_kind_of

    kind = media_kind_of(raw)
    if kind is not None:  # multimodal results are searchable, never returned as raw content (F17)
        raise MemoryGetError(f"memory_get reads Markdown only; {raw} is an {kind} file "
                             "(found through memory_search, not readable as text)")
    given = Path(raw).expanduser()
    if given.is_absolute():
        raise MemoryGetError("path rejected: absolute paths are not allowed; use a workspace-relative path")
    if ".." in PurePosixPath(raw.replace("\\", "/")).parts:
        raise MemoryGetError("path rejected: '..' segments are not allowed")
    if not raw.lower().endswith(".md"):
        raise MemoryGetError("path rejected: only Markdown (.md) memory files can be read")
    candidate = ws / raw
    norm = PurePosixPath(raw.replace("\\", "/").lstrip("./")).as_posix()
    root: Path | None = None
    if norm in ROOT_FILES or norm.startswith("memory/"):
        root = ws
    else:
        for extra in resolve_extra_paths(settings):
            if extra.is_symlink():
                continue
            ex = os.path.normpath(extra)
            cand = os.path.normpath(candidate)
            if extra.is_dir() and (cand == ex or cand.startswith(ex + os.sep)):
                root = extra
                break
            if cand == ex:
                root = extra.parent
                break
    if root is None and settings.memory["backend"] == "qmd":
        from memindex.pipeline.search.qmd.paths import collection_containing  # a custom qmd collection inside the workspace

        coll = collection_containing(settings, candidate)
        root = coll.path if coll is not None else None
    if root is None:
        raise MemoryGetError(
            f"path rejected: {raw!r} is outside the memory files (MEMORY.md, memory.md, memory/, extraPaths)"
        )
    if any(is_ignored_dir(p) for p in PurePosixPath(norm).parts[:-1]):
        raise MemoryGetError("path rejected: inside an ignored directory")
    if not _no_symlinks_between(root, candidate):
        raise MemoryGetError("path rejected: symlinks are not followed")
    real_root = os.path.realpath(root)
    real = os.path.realpath(candidate)
    if not (real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)):
        raise MemoryGetError("path rejected: resolves outside the memory roots")
    return candidate, rel_path(ws, candidate)


def _resolve_qmd_path(settings: AgentSettings, raw: str) -> tuple[Path, str]:
    """``qmd/<collection>/<rel>``: inside that collection's root, matching its pattern (F15)."""
    if settings.memory["backend"] != "qmd":
        raise MemoryGetError("path rejected: qmd/ paths are served only by the qmd backend")
    from memindex.pipeline.search.qmd.paths import QmdPathError, qmd_read_target

    try:
        coll, candidate, display = qmd_read_target(settings, raw)
    except QmdPathError as exc:
        raise MemoryGetError(str(exc)) from None
    if not _no_symlinks_between(coll.path, candidate):
        raise MemoryGetError("path rejected: qmd path escapes its collection (symlinks are not followed)")
    real_root = os.path.realpath(coll.path)
    real = os.path.realpath(candidate)
    if not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise MemoryGetError("path rejected: qmd path escapes its collection")
    return candidate, display


def memory_get(settings: AgentSettings, path: str, from_line: int | None = None,
               lines: int | None = None) -> MemoryGetResult:
    """Read a memory file. A missing file is not an error: it returns empty text."""
    target, display = resolve_memory_path(settings, path)
    for name, v in (("from", from_line), ("lines", lines)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise MemoryGetError(f"{name} must be a non-negative integer")
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return MemoryGetResult(display, "")
    if not stat.S_ISREG(st.st_mode):
        raise MemoryGetError("path rejected: not a regular file (directories and symlinks are refused)")
    if st.st_size > MAX_READ_BYTES:
        raise MemoryGetError(f"file too large to read ({st.st_size:,} bytes); use from/lines on a smaller file")
    with open(target, "rb") as fh:
        data = fh.read()
    if b"\x00" in data:
        raise MemoryGetError("path rejected: binary file")
    text = data.decode("utf-8", errors="replace")
    if not from_line and not lines:
        return MemoryGetResult(display, text)
    all_lines = text.split("\n")
    start = max(1, from_line or 1)
    count = max(1, lines or len(all_lines))
    window = all_lines[start - 1 : start - 1 + count]
    return MemoryGetResult(display, "\n".join(window), start, len(window), len(all_lines))
