"""A store's health: damaged files, a full disk, a state dir that cannot be written (F6)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from memindex.pipeline.display import printable
from memindex.pipeline.errors import StoreCorrupt, StoreError
from memindex.pipeline.store import db

log = logging.getLogger("memindex.store")


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
