"""A store's health (F6): is the file at a store path ours, intact and writable.

Ours: whose SQLite file a store path holds, told from its tables without writing a byte. memindex
never opens, let alone rewrites, a store it did not write: OpenClaw's own index (2026.3
``<state>/memory/<id>.sqlite``, 2026.9 ``agents/<id>/agent/openclaw-agent.sqlite``) at a configured
path is refused with one line naming the file and the setting to change. memindex's default store
had OpenClaw 2026.3's name until it got its own (``<state>/memindex/<id>.sqlite``): a store at the
old name that memindex wrote is moved to the new one, with its side files, once (``open_own``).

Intact: a damaged file is told from a busy one, confirmed on a fresh connection, and moved aside to
be rebuilt. Writable: a full disk, or a state dir that cannot be written, is said in one line before
any work is done for it.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path
from typing import Any

from memindex.pipeline.display import printable
from memindex.pipeline.errors import ConfigError, StoreCorrupt, StoreError
from memindex.pipeline.store import db
from memindex.pipeline.store.schema import META_KEY, STORE_ID_KEY

log = logging.getLogger("memindex.store")


# -- ours: whose file the store path holds ------------------------------------------------------

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


# -- intact and writable: damage, a full disk, a state dir that cannot be written ---------------


def is_corruption(exc: BaseException) -> bool:
    """A damaged file, as opposed to a busy or missing one (OperationalError: retry or wait)."""
    return isinstance(exc, db.DatabaseError) and not isinstance(exc, db.OperationalError)


def corrupt(path: Path | str, why: object) -> StoreCorrupt:
    return StoreCorrupt(f"store {printable(str(path))} is damaged ({why}); `memindex index` moves it "
                        "aside and rebuilds it from the Markdown files")


def store_problem(conn: db.Connection, path: Path | str) -> str | None:
    """What is wrong with the store file, judged in O(1) through a connection to it, or None: not a
    SQLite file (garbage), or shorter than the page count its header records (truncated).

    Never by reading the file ourselves: closing any descriptor of a database file drops every
    POSIX lock this process holds on it (SQLite's "How To Corrupt", 2.2), and another process's
    last connection then checkpoints and deletes the WAL under this one's connections.
    """
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]  # the header's count while valid
    except db.DatabaseError as exc:
        if is_corruption(exc):  # "file is not a database"
            return "not a SQLite database" if "not a database" in str(exc) else str(exc)
        raise
    try:
        size = os.stat(path).st_size
        wal = os.stat(f"{path}-wal").st_size
    except FileNotFoundError:
        wal = 0
    except OSError:
        return None
    # With a WAL, the count includes pages a checkpoint has not copied back yet.
    if not wal and pages and size < pages * page_size:
        return f"truncated: {size:,} of {pages * page_size:,} bytes"
    return None


def confirmed_damage(path: Path | str) -> str | None:
    """A read that failed as damage, judged again on a fresh connection: the store's header checks
    and ``PRAGMA quick_check`` (seconds on a big store: only after such a failure). None: the file
    checks out, and the failure was the reading connection's, not the file's. A healthy store moved
    aside and rebuilt loses its embedding cache, and a non-writing process that moves it does so
    under the writer, which then keeps writing the file it has open."""
    try:
        conn = db.connect(path, readonly=True)
    except db.DatabaseError as exc:
        return str(exc) if is_corruption(exc) else None
    try:
        problem = store_problem(conn, path)
        if problem is not None:
            return problem
        rows = [r[0] for r in conn.execute("PRAGMA quick_check(1)")]
        return None if rows == ["ok"] else "; ".join(map(str, rows))
    except db.DatabaseError as exc:
        return str(exc) if is_corruption(exc) else None
    finally:
        conn.close()


def is_full(exc: BaseException) -> bool:
    """SQLITE_FULL: the store's disk (or its size limit) is full; retrying only fails again."""
    return isinstance(exc, db.OperationalError) and (
        getattr(exc, "sqlite_errorcode", None) == 13 or "database or disk is full" in str(exc))


def store_full(path: Path | str) -> StoreError:
    """The one line a full disk gets: which store, and what to do. (No byte count: the same
    failure must read the same each time, to be counted as one reason.)"""
    return StoreError(f"cannot write the store {printable(str(path))}: its disk is full; free some space, "
                      "then `memindex index` writes the rest")


# Below this much free space a reader's "disk I/O error" is the disk being full: a read-only open
# still creates the store's -shm file (status, index and search died with a traceback).
FULL_DISK_BYTES = 1 << 20


def disk_free(path: Path | str) -> int | None:
    """Bytes free on the filesystem that holds (or will hold) the store; None when it cannot be told."""
    import shutil

    where = nearest_existing(path)
    try:
        usage = shutil.disk_usage(where) if where is not None else None
    except OSError:
        return None
    # A filesystem of no size at all (procfs, sysfs: a store put under /proc) has no free space to
    # tell, not a full disk: "its disk is full" sent an operator to free space that does not matter.
    return usage.free if usage is not None and usage.total > 0 else None


def disk_full(path: Path | str, below: int = FULL_DISK_BYTES) -> bool:
    """Has the disk that holds (or will hold) the store less than ``below`` bytes free?"""
    free = disk_free(path)
    return free is not None and free < below


def unreadable(path: Path | str, exc: BaseException) -> StoreError:
    """The one line for a store SQLite cannot open for reading (not damage: that is ``corrupt``)."""
    if disk_full(path):
        return StoreError(f"cannot read the store {printable(str(path))}: its disk is full (SQLite needs room "
                          "for its shared-memory file even to read); free some space")
    folder = Path(path).parent
    if not os.path.exists(f"{path}-shm") and folder.is_dir() and not os.access(folder, os.W_OK):
        # A WAL store closed cleanly has no -shm file, and reading it means creating one beside it:
        # on a read-only mount (or a folder another user owns) that fails, and said only "unable to
        # open database file", which read as a damaged or missing store.
        return StoreError(f"cannot read the store {printable(str(path))}: SQLite must create "
                          f"{printable(Path(path).name)}-shm beside it to read it, and {printable(str(folder))} is "
                          "not writable here (a read-only mount, or another user's folder): give this user write "
                          "access to that folder, or run memindex where the store is written")
    return StoreError(f"cannot read the store {printable(str(path))}: {type(exc).__name__}: {exc}")


def nearest_existing(path: Path | str) -> Path | None:
    """``path`` if it exists, else its nearest existing parent (where a new store will be made)."""
    p = Path(path)
    return p if p.exists() else next((d for d in p.parents if d.exists()), None)


def check_writable(path: Path | str, setting: str = "the store path") -> None:
    """Refuse early, with one clear line, when the store cannot be written (a read-only state dir):
    otherwise every write would fail and be retried. ``setting``: as ``db.connect``'s."""
    p = Path(path)
    target = nearest_existing(p)
    if target is not None and target != p and not target.is_dir():
        # `--state-dir ~/notes.txt`: the file passed the writable check, and every write of a
        # whole sync was embedded first, then failed ("Not a directory"), blamed on a read-only dir.
        raise StoreError(f"cannot write the store {printable(str(p))}: {printable(str(target))} is a file, "
                         f"not a directory (check --state-dir / {setting})")
    if target is not None and not os.access(target, os.W_OK):
        raise StoreError(f"cannot write the store {printable(str(p))}: {printable(str(target))} is read-only")
    if p.exists() and not os.access(p.parent, os.W_OK):  # SQLite's WAL and SHM files live beside it
        raise StoreError(f"cannot write the store {printable(str(p))}: its directory is read-only")


def quarantine(path: Path | str) -> Path:
    """Move a damaged store (and its WAL/SHM) aside as ``<store>.corrupt-<ms>``; the next writer
    starts a fresh one. The Markdown on disk is the source of truth; only the embedding cache is lost."""
    dest = Path(f"{path}.corrupt-{db.now_ms()}")
    for suffix in ("", "-wal", "-shm"):
        try:
            os.replace(f"{path}{suffix}", f"{dest}{suffix}")
        except FileNotFoundError:
            pass
    log.warning("store %s is damaged: moved aside to %s; rebuilding", printable(str(path)), printable(str(dest)))
    return dest
