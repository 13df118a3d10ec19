"""Which files are an agent's memory (F1).

``MEMORY.md`` / ``memory.md`` and ``memory/**/*.md`` under the workspace, plus
``extraPaths`` (files or directories, scanned recursively). Symlinks - files
and directories - are never followed: a link could point the index (and
``memory_get``) anywhere on disk. Non-memory trees such as ``.git`` or
``node_modules`` are skipped so a big extraPaths tree stays cheap to walk and
to watch.
"""

from __future__ import annotations

import marshal
import os
import signal
import stat
import warnings
from operator import attrgetter
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple

from memindex.pipeline.config import environ
from memindex.pipeline.config.paths import expand_home, resolve_home
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.errors import ConfigError, WorkspaceError

ROOT_FILES = ("MEMORY.md", "memory.md")
MEMORY_DIR = "memory"
# Directory names never descended into (lowercase compare): OpenClaw's watcher list (reference
# §3.3) plus tool and dependency trees no one names a notes folder. Not `build`, `dist` or `target`:
# plain words a user's `memory/projects/build/plan.md` used, silently left unindexed.
IGNORED_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", ".pnpm-store", ".venv", "venv", ".tox",
     "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".cache", "site-packages",
     ".idea", ".vscode", ".next"}
)


# What kind of memory a file name is ("markdown", "image", ...), None: not a memory file.
KindOf = Callable[[str], str | None]


class MemoryFile(NamedTuple):
    """A discovered file. ``path`` is workspace-relative with ``/`` (``../x`` outside it).

    A tuple, not a dataclass: a no-change sync of 30,000 files builds 30,000 of them, and a
    frozen dataclass's ``__init__`` cost more than the file's ``lstat``."""

    path: str
    abs_path: str  # a plain string: a Path object per file was a tenth of a no-change sync
    source: str
    size: int
    mtime_ns: int
    kind: str = "markdown"  # or "image" / "audio" (F17)


# An extraPaths entry this broad indexes a whole disk (or the index itself); it needs this opt-in.
ALLOW_BROAD_ENV = environ.ALLOW_BROAD_EXTRA_PATHS.name


def rel_path(workspace: Path, abs_path: str | os.PathLike[str]) -> str:
    return display_path(Path(os.path.relpath(abs_path, workspace)).as_posix())


def display_path(path: str) -> str:
    """``path`` as stored and shown: a name that is not valid UTF-8 (legal on Linux, carried
    by Python as surrogate escapes) has its undecodable bytes shown as ``\\xNN``.

    Such a file is skipped with a problem (``name_problem``), never indexed: SQLite text
    and every log line must be valid UTF-8, and an escaped name is not a path to read back.
    """
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def name_problem(abs_path: str) -> str | None:
    """Why a file cannot be indexed by its name, or None."""
    try:
        abs_path.encode("utf-8")
        return None
    except UnicodeEncodeError:
        return "file name is not valid UTF-8; skipped (rename it to index it)"


def is_markdown_name(name: str) -> bool:
    """The one rule for a Markdown memory file's name (discovery and memory_get): ``.md`` in any case."""
    return name.lower().endswith(".md")


def is_ignored_dir(name: str) -> bool:
    return name.lower() in IGNORED_DIRS


def _regular(path: Path) -> os.stat_result | None:
    """lstat that answers only for regular, non-symlink files."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


class ListingFacts:
    """What a listing noticed beyond its files (for plans and `status`)."""

    __slots__ = ("unreadable", "symlinks", "specials")

    def __init__(self) -> None:
        # Directories the walk could not list, with why: their files are not "deleted" (a plan
        # keeps what it indexed from them) and `status` names them.
        self.unreadable: list[tuple[str, str]] = []
        self.symlinks: list[str] = []  # links passed over (never followed), for `status`
        # FIFOs, sockets, devices with a memory file's name: never opened (a FIFO would block
        # the reader), and named by `status` rather than passed over without a word.
        self.specials: list[str] = []

    def merge(self, unreadable: Iterable[tuple[object, object]], symlinks: Iterable[object],
              specials: Iterable[object] = ()) -> None:
        self.unreadable.extend((str(d), str(why)) for d, why in unreadable)
        self.symlinks.extend(map(str, symlinks))
        self.specials.extend(map(str, specials))


# A walk that has found this many files with at least two directories still to read hands
# the later half of them to a forked helper on another CPU: at 30,000 files the lstat calls and
# the Python around them are nearly all of a no-change sync, and threads only take turns at the
# GIL. Smaller trees never pay for a fork.
SPLIT_WALK_AFTER = 1024


def _walk(root: Path, keep: KindOf,
          facts: ListingFacts) -> Iterator[tuple[str, int, int, str]]:
    """Depth-first walk with os.scandir in name order: (path, size, mtime_ns, kind) per kept file.

    Never follows symlinks and skips ignored dirs: ``is_file``/``is_dir`` with
    ``follow_symlinks=False`` answer from the directory entry's type (no system call) and are
    false for a symlink, so a symlink is never yielded or entered. A large tree is walked by
    two processes (:data:`SPLIT_WALK_AFTER`); the order and the files are those of one.
    """
    stack: list[str] = [str(root)]
    split: _SplitWalk | None = None
    found = 0
    try:
        while stack:
            if split is None and found >= SPLIT_WALK_AFTER and len(stack) >= 2 and _spare_cpu():
                # The bottom of the stack is what this walk would read last: the helper reads it
                # (depth-first, in the same order) while this process reads the rest.
                cut = len(stack) // 2
                split = _SplitWalk.start(stack[:cut], keep, facts)
                if split is not None:
                    del stack[:cut]
            for item in _walk_dir(stack.pop(), keep, stack, facts):
                found += 1
                yield item
        if split is not None:
            yield from split.results()
    finally:
        if split is not None:
            split.close()


def _walk_dirs(dirs: list[str], keep: KindOf,
               facts: ListingFacts) -> Iterator[tuple[str, int, int, str]]:
    """What :func:`_walk` yields for these directories (in stack order: the last first), in one process."""
    stack = list(dirs)
    while stack:
        yield from _walk_dir(stack.pop(), keep, stack, facts)


def _walk_dir(d: str, keep: KindOf, stack: list[str],
              facts: ListingFacts) -> Iterator[tuple[str, int, int, str]]:
    """One directory's kept files; its subdirectories go onto ``stack`` (first name on top)."""
    lstat = os.lstat
    try:
        with os.scandir(d) as it:
            entries = sorted(it, key=_entry_name)
    except FileNotFoundError:  # removed while the walk ran: its files are gone
        return
    except OSError as exc:
        facts.unreadable.append((d, exc.strerror or type(exc).__name__))
        return
    subdirs = []
    for e in entries:
        try:
            if e.is_file(follow_symlinks=False):
                kind = keep(e.name)
                if kind is not None:
                    # os.lstat, not e.stat(): DirEntry caches the result, and a
                    # 10,000-entry directory would then hold 10,000 stat results.
                    st = lstat(e.path)
                    yield e.path, st.st_size, st.st_mtime_ns, kind
            elif e.is_dir(follow_symlinks=False):
                if not is_ignored_dir(e.name):
                    subdirs.append(e.path)
            elif e.is_symlink():
                facts.symlinks.append(e.path)
            elif keep(e.name) is not None:
                facts.specials.append(e.path)
        except OSError:
            continue
    stack.extend(reversed(subdirs))


def _spare_cpu() -> bool:
    if not hasattr(os, "fork"):
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) >= 2


class _SplitWalk:
    """A forked helper walking part of a tree; its files come back marshalled through a pipe.

    The helper only makes system calls and builds lists of strings and ints (no imports, no
    logging, no lock another thread could hold at the fork), then exits without running any
    clean-up of the parent's. Whatever goes wrong with it - it cannot be forked, it dies, its
    answer is cut short - the parent walks those directories itself: the result is the same.
    """

    def __init__(self, pid: int, fd: int, dirs: list[str], keep: KindOf,
                 facts: ListingFacts) -> None:
        self.pid, self.fd, self.dirs, self.keep, self.facts = pid, fd, dirs, keep, facts

    @classmethod
    def start(cls, dirs: list[str], keep: KindOf,
              facts: ListingFacts) -> "_SplitWalk | None":
        try:
            r, w = os.pipe()
        except OSError:
            return None
        try:
            with warnings.catch_warnings():  # 3.12+ warns about a fork beside threads; see above
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return None
        if pid == 0:  # the helper
            code = 1
            try:
                # A signal ends the helper (the parent then walks its part): none of the parent's
                # Python handlers (a worker's shutdown, Ctrl-C) may run in it.
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
                    signal.signal(sig, signal.SIG_DFL)
                os.close(r)
                mine = ListingFacts()
                files = list(_walk_dirs(dirs, keep, mine))
                view = memoryview(marshal.dumps((len(files), files, mine.unreadable, mine.symlinks,
                                                    mine.specials)))
                while view:
                    view = view[os.write(w, view):]
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        return cls(pid, r, dirs, keep, facts)

    def results(self) -> Iterator[tuple[str, int, int, str]]:
        parts = []
        try:
            while chunk := os.read(self.fd, 1 << 20):
                parts.append(chunk)
            count, files, unreadable, symlinks, specials = marshal.loads(b"".join(parts))
            ok = isinstance(files, list) and len(files) == count
        except (OSError, EOFError, ValueError, TypeError):
            ok = False
        self.close()
        if ok:
            self.facts.merge(unreadable, symlinks, specials)
        yield from (files if ok else _walk_dirs(self.dirs, self.keep, self.facts))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)  # done already, or no longer wanted
            except OSError:
                pass
            try:
                os.waitpid(self.pid, 0)
            except OSError:  # SIGCHLD ignored: the kernel reaped it
                pass
            self.pid = 0


_entry_name = attrgetter("name")


def _markdown_only(name: str) -> str | None:
    return "markdown" if is_markdown_name(name) else None


def _too_broad(p: Path, settings: AgentSettings) -> bool:
    """``/``, the home directory (the OS one, and ``~`` as the config reads it: ``$OPENCLAW_HOME``
    when set), or the state dir (or anything holding it): the index would index itself."""
    try:
        real = Path(os.path.realpath(p))
        state = Path(os.path.realpath(settings.state_dir))
        homes = {Path(os.path.realpath(Path.home())), Path(os.path.realpath(resolve_home()))}
    except (OSError, RuntimeError):
        return False
    return real == Path(real.anchor) or real in homes or real == state or real in state.parents


def _allow_broad() -> bool:
    """The opt-in a too-broad extraPaths entry needs; asked only about such an entry (a workspace
    without one has nothing for it to allow)."""
    return environ.ALLOW_BROAD_EXTRA_PATHS.on()


def resolve_extra_paths(settings: AgentSettings) -> list[Path]:
    """The extraPaths entries as absolute paths; a too-broad one is left out unless opted in
    (``check_roots`` is what refuses it with an error)."""
    out: list[Path] = []
    for raw in settings.memory_search.extra_paths:
        p = expand_home(raw)
        p = p if p.is_absolute() else settings.workspace / p
        if not _too_broad(p, settings) or _allow_broad():
            out.append(p)
    return out


LEFT_UNCHANGED = "; index left unchanged"


def check_roots(settings: AgentSettings) -> None:
    """Refuse to sync from a workspace that is not there (an unmounted or renamed workspace
    must not look like "every file deleted") or with a too-broad extraPaths entry."""
    ws = settings.workspace
    if not os.path.lexists(ws):
        raise WorkspaceError(f"workspace {display_path(str(ws))} does not exist{LEFT_UNCHANGED}")
    if not ws.is_dir():
        raise WorkspaceError(f"workspace {display_path(str(ws))} is not a directory{LEFT_UNCHANGED}")
    for raw in settings.memory_search.extra_paths:
        p = expand_home(raw)
        if _too_broad(p if p.is_absolute() else ws / p, settings) and not _allow_broad():
            raise ConfigError(settings.keys.key("extraPaths"),
                              f"{raw!r} is too broad (the filesystem root, the home directory or the "
                              f"state dir); name a narrower directory, or set {ALLOW_BROAD_ENV}=1")


def roots_refusal(settings: AgentSettings) -> str | None:
    """Why ``check_roots`` refuses this agent (a sync cannot run), else None."""
    try:
        check_roots(settings)
    except (WorkspaceError, ConfigError) as exc:
        return str(exc)
    return None


def iter_discover(settings: AgentSettings, *, extra_kind: KindOf | None = None,
                  facts: ListingFacts | None = None) -> Iterator[MemoryFile]:
    """All memory files of the agent, de-duplicated by real path, as a stream: a sync of a huge
    workspace never holds the file list. ``extra_kind`` lets multimodal discovery (F17) accept more
    file kinds, but only under extraPaths, never in the default memory roots."""
    ws = settings.workspace
    facts = ListingFacts() if facts is None else facts
    seen: set[str] = set()

    def add(p: str, size: int, mtime_ns: int, kind: str) -> MemoryFile | None:
        try:
            real = os.path.realpath(p)
        except OSError:
            return None
        key = os.path.normcase(real)
        if key in seen:
            return None
        seen.add(key)
        return MemoryFile(rel_path(ws, p), p, "memory", size, mtime_ns, kind)

    def found(items: Iterable[tuple[str, int, int, str]], root: Path | None = None) -> Iterator[MemoryFile]:
        if root is None:
            for p, size, mtime_ns, kind in items:
                f = add(p, size, mtime_ns, kind)
                if f is not None:
                    yield f
            return
        # Below a walked root nothing is a symlink (the walk never follows one), so a
        # file's real path is the root's real path + its relative part: one realpath
        # and one relpath per root instead of per file (the bulk of a no-change sync).
        base = str(root) + os.sep
        real_root = os.path.realpath(root)
        # With no symlink in the root's own path (the usual case) a file's real path is its path.
        real_base = None if os.path.normcase(real_root) == os.path.normcase(str(root)) else real_root
        rel_root = rel_path(ws, root)
        prefix = "" if rel_root == "." else rel_root + "/"
        cut = len(base)
        fold_case = os.sep != "/"  # Windows: case-insensitive keys, "\\" separators
        new_file = tuple.__new__
        for sp, size, mtime_ns, kind in items:
            if not sp.startswith(base):
                f = add(sp, size, mtime_ns, kind)
                if f is not None:
                    yield f
                continue
            sub = sp[cut:]
            key = sp if real_base is None else os.path.join(real_base, sub)
            if fold_case:
                key = os.path.normcase(key)
            if key in seen:
                continue
            seen.add(key)
            if fold_case:
                sub = sub.replace(os.sep, "/")
            if not sub.isascii():
                sub = display_path(sub)
            # tuple.__new__: MemoryFile's fields in order, without its Python-level __new__
            yield new_file(MemoryFile, (prefix + sub, sp, "memory", size, mtime_ns, kind))

    for name in ROOT_FILES:
        p = ws / name
        st = _regular(p)
        if st is not None:
            yield from found([(str(p), st.st_size, st.st_mtime_ns, "markdown")])
        elif p.is_symlink():
            facts.symlinks.append(str(p))
        elif os.path.lexists(p) and not p.is_dir():
            facts.specials.append(str(p))
    mem = ws / MEMORY_DIR
    if mem.is_symlink():
        facts.symlinks.append(str(mem))
    elif mem.is_dir():
        yield from found(_walk(mem, _markdown_only, facts), mem)
    keep_extra = extra_kind or _markdown_only
    for extra in resolve_extra_paths(settings):
        if extra.is_symlink():
            facts.symlinks.append(str(extra))
            continue
        if extra.is_dir():
            yield from found(_walk(extra, keep_extra, facts), extra)
        else:
            st = _regular(extra)
            kind = keep_extra(extra.name) if st is not None else None
            if st is not None and kind is not None:
                yield from found([(str(extra), st.st_size, st.st_mtime_ns, kind)])


def indexed_path_filter(settings: AgentSettings) -> Callable[[str, str], bool]:
    """Whether an indexed ``(source, path)`` is still the agent's memory as configured now.

    A store keeps what an older config indexed (a source or an extraPaths entry since removed)
    until the next sync; search must not serve it meanwhile (OpenClaw filters every query by
    the configured sources), and every path it serves must read back through ``memory_get``.
    The paths are the ones discovery gives: ``MEMORY.md``, ``memory/...``, each extraPaths
    entry's files under its workspace-relative path.
    """
    sources = frozenset(settings.sources)
    exact, prefixes = set(ROOT_FILES), [MEMORY_DIR + "/"]
    for extra in resolve_extra_paths(settings):
        rel = rel_path(settings.workspace, extra)
        if rel == ".":
            prefixes.append("")  # the workspace itself: every path under it
        exact.add(rel)
        prefixes.append(rel + "/")
    starts = tuple(prefixes)

    def visible(source: str, path: str) -> bool:
        if source not in sources:
            return False
        return source != "memory" or path in exact or path.startswith(starts)

    return visible


def watch_roots(settings: AgentSettings) -> list[Path]:
    """Directories a watcher must observe (existing, not symlinks)."""
    roots = [settings.workspace]
    for extra in resolve_extra_paths(settings):
        target = extra if extra.is_dir() else extra.parent
        if target.exists() and not extra.is_symlink():
            roots.append(target)
    return roots
