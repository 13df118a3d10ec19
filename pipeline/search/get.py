"""``memory_get`` (F14): read a memory Markdown file, optionally a line window.

Unlike the reference (which answers every refusal with a generic "path
required"), each refusal names the rule that refused it, so an agent can
correct its call. Allowed: ``MEMORY.md``, ``memory.md``, ``memory/**.md``
inside the workspace and ``.md`` files inside an extraPaths entry (given
workspace-relative, as search returns them, e.g. ``../team/t.md``, or
absolute); never a symlink, never anything that resolves outside those roots.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from memindex.pipeline.config.paths import expand_home
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.chunking import lf_line_ends, split_lines
from memindex.pipeline.index.markdown import MAX_MARKDOWN_BYTES, read_text
from memindex.pipeline.index.media import media_kind_of
from memindex.pipeline.index.workspace import ROOT_FILES, is_ignored_dir, is_markdown_name, rel_path, resolve_extra_paths

from memindex.pipeline.errors import MemoryGetError, UsageError, checked_call, require
from memindex.pipeline.search.aio import run_in_pool
from memindex.pipeline.search.qmd.paths import QmdPathError, collection_containing, qmd_read_target

MAX_READ_BYTES = MAX_MARKDOWN_BYTES  # what indexing reads is what memory_get reads


@dataclass
class MemoryGetResult:
    path: str
    text: str
    from_line: int | None = None
    lines: int | None = None
    total_lines: int | None = None
    missing: bool = False  # no such file (not in the payload: OpenClaw answers {text: "", path})
    warning: str | None = None  # the agent's workspace itself is missing: not just "nothing yet"

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = {"path": self.path, "text": self.text}
        if self.from_line is not None:
            d["from"] = self.from_line
        if self.lines is not None:
            d["lines"] = self.lines
        if self.total_lines is not None:
            d["totalLines"] = self.total_lines
        if self.warning:
            d["warning"] = self.warning
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


# A refused path is named in its error, which reaches logs and the model's context: a 100 KB
# path came back whole in both.
NAMED_CHARS = 200


def _named(raw: str) -> str:
    shown = repr(raw)
    return shown if len(shown) <= NAMED_CHARS else f"{shown[:NAMED_CHARS]}… ({len(raw):,} characters)"


def _resolve(settings: AgentSettings, raw: str) -> tuple[Path, str, Path]:
    """Validate ``raw``: (absolute path, display path, the root it was vetted under: read below it),
    or raise MemoryGetError."""
    if not isinstance(raw, str) or not raw.strip():
        raise MemoryGetError("path required: give a workspace-relative path such as memory/2026-02-10.md")
    raw = raw.strip()
    if "\x00" in raw:
        raise MemoryGetError("path rejected: contains a NUL byte")
    try:  # a name with undecodable bytes is never indexed either (workspace.name_problem)
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise MemoryGetError("path rejected: not valid UTF-8") from None
    if raw.endswith(("/", os.sep)):  # normpath would drop the slash and read the file of that name
        raise MemoryGetError(f"path rejected: {_named(raw)} names a directory (ends with '/'); give a .md file")
    ws = settings.workspace
    if raw.startswith("qmd/"):
        return _resolve_qmd_path(settings, raw)
    kind = media_kind_of(raw)
    if kind is not None:  # multimodal results are searchable, never returned as raw content (F17)
        raise MemoryGetError(f"memory_get reads Markdown only; {_named(raw)} is an {kind} file "
                             "(found through memory_search, not readable as text)")
    # Relative paths resolve against the workspace, absolute ones as given (as OpenClaw's
    # readFile does), so every path search returns reads back, ``../team/t.md`` from an
    # extraPaths directory outside the workspace included. Normalising first means a
    # ``..`` can only ever land on a path that the root checks below still vet.
    norm = os.path.normpath(ws / expand_home(raw))
    if norm.startswith("//"):  # POSIX normpath keeps exactly two leading slashes; here they mean "/"
        norm = norm[1:]
    candidate = Path(norm)
    if not is_markdown_name(candidate.name):
        raise MemoryGetError("path rejected: only Markdown (.md) memory files can be read")
    root = _memory_root(settings, candidate)
    if root is None:
        raise MemoryGetError(
            f"path rejected: {_named(raw)} is outside the memory files (MEMORY.md, memory.md, memory/, extraPaths)"
        )
    if any(is_ignored_dir(p) for p in Path(os.path.relpath(candidate, root)).parts[:-1]):
        raise MemoryGetError("path rejected: inside an ignored directory")
    if not _no_symlinks_between(root, candidate):
        raise MemoryGetError("path rejected: symlinks are not followed")
    real_root, real = _realpath(root), _realpath(candidate)
    if not (real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)):
        raise MemoryGetError("path rejected: resolves outside the memory roots")
    return candidate, rel_path(ws, candidate), root


def _realpath(p: Path) -> str:
    """``os.path.realpath``, whose readlink fails with EINVAL when a symlink on the path is swapped
    for a directory while it resolves: said as the race it is, not "cannot read: Invalid argument"."""
    try:
        return os.path.realpath(p)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise MemoryGetError("path rejected: it changed while it was checked (a symlink swapped in or out)") from None
        raise


def _memory_root(settings: AgentSettings, candidate: Path) -> Path | None:
    """The memory root that holds ``candidate`` (normalised, absolute), or None."""
    ws = settings.workspace
    rel = rel_path(ws, candidate)
    if rel in ROOT_FILES or rel.startswith("memory/"):
        return ws
    for extra in resolve_extra_paths(settings):
        if extra.is_symlink():  # a symlinked extraPaths entry is ignored, as in discovery
            continue
        ex = Path(os.path.normpath(extra))
        if candidate == ex:
            return ex.parent
        if ex.is_dir() and ex in candidate.parents:
            return ex
    if settings.memory.backend == "qmd":
        coll = collection_containing(settings, candidate)  # a custom qmd collection
        return coll.path if coll is not None else None
    return None


def _resolve_qmd_path(settings: AgentSettings, raw: str) -> tuple[Path, str, Path]:
    """``qmd/<collection>/<rel>``: inside that collection's root, matching its pattern (F15)."""
    if settings.memory.backend != "qmd":
        raise MemoryGetError("path rejected: qmd/ paths are served only by the qmd backend")

    try:
        coll, candidate, display = qmd_read_target(settings, raw)
    except QmdPathError as exc:
        raise MemoryGetError(str(exc)) from None
    if not _no_symlinks_between(coll.path, candidate):
        raise MemoryGetError("path rejected: qmd path escapes its collection (symlinks are not followed)")
    real_root, real = _realpath(coll.path), _realpath(candidate)
    if not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise MemoryGetError("path rejected: qmd path escapes its collection")
    return candidate, display, coll.path


@checked_call("memory_get")
def memory_get(settings: AgentSettings, path: str, from_line: int | None = None,
               lines: int | None = None) -> MemoryGetResult:
    """Read a memory file. A missing file is not an error: it returns empty text. An agent
    whose memory search is disabled has no memory tools (OpenClaw registers none): refused."""
    require("settings", settings, AgentSettings)
    require("path", path, str)
    require("from_line", from_line, int, optional=True)
    require("lines", lines, int, optional=True)
    for name, v in (("from_line", from_line), ("lines", lines)):
        if v is not None and v < 0:  # the caller's bug, as a wrong type is (0 means "not given")
            raise UsageError(f"{name} must be a non-negative integer, not {v}")
    if not settings.enabled:
        raise MemoryGetError(f"memory search is disabled for agent {settings.agent_id!r}")
    try:
        return _read(settings, path, from_line, lines)
    except OSError as exc:  # a name too long, no permission: one error of ours, no absolute path
        raise MemoryGetError(f"cannot read {_named(path.strip())}: {exc.strerror or type(exc).__name__}") from None


def _read(settings: AgentSettings, path: str, from_line: int | None, lines: int | None) -> MemoryGetResult:
    target, display, root = _resolve(settings, path)
    try:
        data = _read_beneath(root, target)
    except (FileNotFoundError, NotADirectoryError):
        ws = settings.workspace
        # A client that started the server with another HOME or state dir reads a workspace that
        # is not there: every file is "missing", which said nothing (search warns; get did not).
        warning = None if os.path.isdir(ws) else f"the workspace of agent {settings.agent_id!r}, {ws}, does not exist"
        return MemoryGetResult(display, "", missing=True, warning=warning)
    text, _problem = read_text(data)  # the text indexing chunked (status reports the problem)
    if text is None:
        raise MemoryGetError("path rejected: binary file")
    # Every line ends in LF, whole file or window: the window a snippet cites reads back as the
    # snippet's text (snippets hold no CR), and a window is a slice of the whole file. (OpenClaw
    # splits on "\n" alone: its windows of a CRLF file keep each CR, one dangling at the end.)
    if not from_line and not lines:
        return MemoryGetResult(display, lf_line_ends(text))
    # The lines citations count (a lone CR ends one too); a final line end ends the last line, it
    # does not start one ("a\nb\n" is 2 lines).
    all_lines = split_lines(text)
    start = max(1, from_line or 1)
    # OpenClaw's max(1, lines ?? total): `lines` 0 with a `from` is one line, not the rest.
    count = max(1, len(all_lines) if lines is None else lines)
    window = all_lines[start - 1 : start - 1 + count]
    return MemoryGetResult(display, "\n".join(window), start, len(window), len(all_lines))


def _read_beneath(root: Path, target: Path) -> bytes:
    """The bytes of ``target``, opened one component at a time below ``root`` without following a
    symlink anywhere (the root itself, e.g. a symlinked workspace, may be one, as before). The checks
    in ``_resolve`` and a plain open() were apart: a file or folder swapped for a symlink in between
    was read through it, outside the workspace (helper-62: 46 reads of 440)."""
    nofollow = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    parts = target.relative_to(root).parts
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            # O_NONBLOCK: a FIFO put in the file's place must not hang the reader.
            flags = os.O_RDONLY | nofollow | (getattr(os, "O_NONBLOCK", 0) if last else getattr(os, "O_DIRECTORY", 0))
            try:
                nfd = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(part, fd)):
                    raise MemoryGetError("path rejected: symlinks are not followed") from None
                raise
            os.close(fd)
            fd = nfd
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise MemoryGetError("path rejected: not a regular file (directories and symlinks are refused)")
        if st.st_size > MAX_READ_BYTES:
            raise MemoryGetError(f"file too large to read ({st.st_size:,} bytes; memory files are read up to "
                                 f"{MAX_READ_BYTES:,}, and indexing skips larger ones too)")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(MAX_READ_BYTES + 1)
    finally:
        os.close(fd)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


@checked_call("amemory_get")
async def amemory_get(settings: AgentSettings, path: str, from_line: int | None = None,
                      lines: int | None = None) -> MemoryGetResult:
    """``memory_get`` without blocking the event loop (runs on the shared thread pool)."""
    return await run_in_pool(memory_get, settings, path, from_line, lines)
