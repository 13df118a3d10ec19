"""Advisory locks on side files: one for processes that update files beside a store, and the
store's writer lock (one writing process per store, across processes)."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from memindex.pipeline.config import environ
from memindex.pipeline.errors import MemindexError


@contextmanager
def file_lock(path: Path | str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` block."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --- the store's writer lock ----------------------------------------------------------------
# Each process that writes stores has its own writer (the embedded default runs one inside
# `memindex watch`, `memindex index`, a runtime's engine; a Redis deployment runs `memindex worker
# --writer`). Two of them on one store (an `index` while `watch` runs, two writers started for
# one shard) wrote it at once: transactions of both interleaved, SQLite's busy timeouts decided
# the order, and one process's plan could replace the generation the other was filling, whose
# writes were then dropped and planned again. A ``flock`` on ``<store>.writer``, held while a
# process has the store open for writing, makes the second one wait, and say for whom, instead
# (writers close a store after a few idle seconds, workers/writer.py, so they take turns).
# flock, not fcntl: SQLite's own locks on the store are POSIX locks, which any close of the
# same file in this process would drop; this is another file. Within one process the lock is
# shared (counted): its writer module keeps one writer per store.

LOCK_SUFFIX = ".writer"
POLL_S = 0.1

_held: dict[str, list[int]] = {}  # real lock path -> [fd, holders in this process]
_held_lock = threading.Lock()
_acquiring: dict[str, threading.Lock] = {}  # one acquisition per lock path at a time in this process


def _forget_in_child() -> None:
    """A forked child shares the parent's lock descriptions: it closes its copies (which leaves
    the parent's locks alone) and, if it writes a store itself, takes the lock anew."""
    global _held_lock
    _held_lock = threading.Lock()  # another thread may have held it at the fork
    for fd, _ in _held.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()
    _acquiring.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def writer_lock_path(store: Path | str) -> Path:
    store = Path(store)
    return store.with_name(store.name + LOCK_SUFFIX)


# What this process is, for other writers' wait lines (set_process_label); a process started by
# exec is named through LABEL_ENV instead.
_label: list[str] = []


LABEL_ENV = environ.PROCESS_LABEL.name  # the label of a process started by exec (`memindex worker` runs dramatiq)


def set_process_label(label: str) -> None:
    """Name this process in the lock file (the CLI: ``memindex watch``); the default is
    ``$MEMINDEX_PROCESS_LABEL``, else its argv[0]."""
    _label[:] = [label[:80]]


def _me() -> str:
    argv0 = sys.argv[0] if sys.argv else ""
    label = (_label[0] if _label else (environ.PROCESS_LABEL.raw() or "")[:80]
             or ("python" if argv0 in ("", "-c", "-m") or argv0.endswith("__main__.py") else os.path.basename(argv0)))
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "cmd": label})


def describe_holder(lock: Path | str) -> str:
    """Who holds (or last held) the writer lock: ``pid 123 (memindex watch)``, plus the
    host when it is another one (a container sharing the state dir)."""
    try:
        info = json.loads(Path(lock).read_text(encoding="utf-8"))
        where = "" if info.get("host") == socket.gethostname() else f" on {info.get('host')}"
        return f"pid {int(info['pid'])}{where} ({info.get('cmd') or '?'})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


class WriterLockTimeout(MemindexError, TimeoutError):
    """The store's writer lock stayed with another process for the whole wait."""

    def __init__(self, lock: Path, holder: str, waited_s: float) -> None:
        super().__init__(f"{holder} kept writing this store for {waited_s:.0f} s")
        self.lock, self.holder = lock, holder


def acquire_writer_lock(store: Path | str, *, wait_s: float,
                        on_wait: Callable[[str], None] | None = None) -> Path:
    """Take the store's writer lock, waiting up to ``wait_s`` while another process holds it
    (``on_wait(holder)`` is called once when the wait begins). Returns the lock path, to pass
    to :func:`release_writer_lock`. Raises :class:`WriterLockTimeout`, or OSError when the lock
    file cannot be created (the store then cannot be written either)."""
    lock = writer_lock_path(store)
    key = os.path.realpath(lock)
    with _held_lock:
        if key in _held:
            _held[key][1] += 1
            return lock
        guard = _acquiring.setdefault(key, threading.Lock())
    with guard:
        with _held_lock:
            if key in _held:  # another thread of this process took it meanwhile
                _held[key][1] += 1
                return lock
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        started = time.monotonic()
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited >= wait_s:
                    os.close(fd)
                    raise WriterLockTimeout(lock, describe_holder(lock), waited) from None
                if not told and on_wait is not None:
                    told = True
                    on_wait(describe_holder(lock))
                time.sleep(POLL_S)
            except BaseException:
                os.close(fd)
                raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, _me().encode(), 0)
        except OSError:
            pass  # only the waiters' message needs it
        with _held_lock:
            _held[key] = [fd, 1]
    return lock


def release_writer_lock(lock: Path | str) -> None:
    """Give back one hold of the writer lock; the last one in this process unlocks it."""
    key = os.path.realpath(lock)
    with _held_lock:
        entry = _held.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _held[key]
    try:
        fcntl.flock(entry[0], fcntl.LOCK_UN)
    finally:
        os.close(entry[0])
