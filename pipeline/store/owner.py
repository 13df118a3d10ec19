"""Whose SQLite file a store path holds, told from its tables without writing a byte.

memindex never opens, let alone rewrites, a store it did not write: OpenClaw's own index
(2026.3 ``<state>/memory/<id>.sqlite``, 2026.9 ``agents/<id>/agent/openclaw-agent.sqlite``) at a
configured path is refused with one line naming the file and the setting to change. memindex's
default store had OpenClaw 2026.3's name until it got its own (``<state>/memindex/<id>.sqlite``): a
store at the old name that memindex wrote is moved to the new one, with its side files, once.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path
from typing import Any

from memindex.pipeline.errors import ConfigError
from memindex.pipeline.store import db
from memindex.pipeline.store.schema import META_KEY, STORE_ID_KEY

log = logging.getLogger("memindex.store")

ABSENT, EMPTY, MEMINDEX, OPENCLAW, OTHER = "absent", "empty", "memindex", "openclaw", "other"
DAMAGED = "damaged"
# What an OpenClaw index holds that a memindex store does not (memory-schema.ts; 2026.9's agent db).
_OPENCLAW_TABLES = ("chunks", "files", "memory_index_chunks", "memory_index_sources")
# The files next to a store that are the store's: SQLite's and memindex's own.
_SIDE_SUFFIXES = ("-wal", "-shm", "-journal", ".failures.json", ".failures.lock", ".unchanged",
                  ".query-breaker.json", ".held", ".writer")

_known: dict[tuple[str, int, int], str] = {}
# Files (path, inode) this process opened as memindex's store: never classified again. Reading the
# file (any descriptor of it, closed) would drop the POSIX locks this process's own connections hold
# on it, and another process's last close would then delete the WAL under them.
_own: set[tuple[str, int]] = set()
_lock = threading.Lock()


def classify(path: Path) -> str:
    """ABSENT (or not a regular file), EMPTY (no tables yet), MEMINDEX, OPENCLAW, OTHER (someone
    else's SQLite) or DAMAGED (not SQLite).

    Read with ``immutable=1``: no lock, no journal, no ``-shm`` created, nothing written.
    """
    try:
        st = os.stat(path)
    except OSError:
        return ABSENT
    if not stat.S_ISREG(st.st_mode):  # a directory or a device: the store's own checks say what it is
        return ABSENT
    if st.st_size == 0:
        return EMPTY
    stamp = (str(path), st.st_ino, st.st_mtime_ns)
    with _lock:
        if (str(path), st.st_ino) in _own:
            return MEMINDEX
        if stamp in _known:
            return _known[stamp]
    try:
        conn = db.peek(path)  # (the store's own driver: see db.peek)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall()) if "meta" in tables else {}
        finally:
            conn.close()
    except db.DatabaseError:
        # Not SQLite at all (truncated, garbage): no one's index. memindex's damaged-store handling
        # takes it (moved aside as .corrupt-*, rebuilt) as it always has.
        return DAMAGED
    if not tables:
        kind = EMPTY
    elif STORE_ID_KEY in meta or any(t.startswith("files_g") for t in tables):
        kind = MEMINDEX
    elif any(t in tables for t in _OPENCLAW_TABLES) or '"generation"' not in meta.get(META_KEY, '"generation"'):
        kind = OPENCLAW
    else:
        kind = OTHER
    with _lock:
        _known[stamp] = kind
        if kind == MEMINDEX:
            _own.add((str(path), st.st_ino))
    return kind


def opened(path: Path) -> None:
    """Record that this process opened ``path`` as memindex's store (it may have just created it),
    so later opens in this process never read the file to tell whose it is."""
    try:
        ino = os.stat(path).st_ino
    except OSError:
        return
    with _lock:
        _own.add((str(path), ino))


def require_own(settings: Any) -> None:
    """A ConfigError naming the file and what to set when ``settings.store_path`` holds a store
    memindex did not write; the file is never modified."""
    kind = classify(settings.store_path)
    if kind in (ABSENT, EMPTY, MEMINDEX, DAMAGED):
        return
    whose = "OpenClaw's own memory index" if kind == OPENCLAW else "a file memindex did not write"
    raise ConfigError(settings.store_key, f"{settings.store_path} holds {whose}; memindex never modifies it: set "
                                          "MEMINDEX_STORE_PATH (e.g. memindex/{agentId}.sqlite) to a file of its own")


def adopt_legacy(settings: Any) -> None:
    """Move memindex's store from its old default name (OpenClaw 2026.3's store path) to its own,
    when the old file is memindex's and the new one does not exist yet. OpenClaw's file stays put."""
    old, new = getattr(settings, "legacy_store", None), settings.store_path
    if old is None or os.path.lexists(new) or classify(old) != MEMINDEX or _held(Path(f"{old}.writer")):
        return
    Path(new).parent.mkdir(parents=True, exist_ok=True)
    old_batches = Path(old).with_name(Path(old).stem + ".batches.sqlite")  # workers/batch/state.py's file
    new_batches = Path(new).with_name(Path(new).stem + ".batches.sqlite")
    try:
        for src, dst in [*((Path(f"{old}{x}"), f"{new}{x}") for x in ("", *_SIDE_SUFFIXES)),
                         *((Path(f"{old_batches}{x}"), f"{new_batches}{x}") for x in ("", "-wal", "-shm"))]:
            if src.exists():
                os.replace(src, dst)
    except OSError as exc:  # the next open tries again; the index is rebuilt if it must be
        log.warning("could not move memindex's store %s to %s: %s", old, new, exc)
        return
    log.warning("memindex's store moved from %s (OpenClaw's store path) to %s", old, new)


def _held(lock: Path) -> bool:
    """Whether a writer (an older memindex, mid-upgrade) holds the old store's writer lock: the store
    is not moved from under it; a later open moves it once that process is gone."""
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # (closing releases a lock taken here)
    return False


def open_own(settings: Any) -> None:
    """What every open of an agent's store does first: adopt the old default, refuse a foreign file."""
    adopt_legacy(settings)
    require_own(settings)
