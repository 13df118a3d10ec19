"""A change journal for the resident process: no-change syncs that do not walk the disk.

At 30,000 files a sync that finds nothing to do is still a walk: one ``lstat`` per file, most
of its time. The resident process (producers/cli/resident.py) lives between calls, so it can
watch instead: Linux's inotify tells it when anything under a listing's directories changes.
A sync's walk is recorded (the listing's digest and file count, index/unchanged.py); the next
sync, if no event arrived since, uses that record instead of walking again.

How it stays exact:

- Every directory is watched *before* the walk lists it (``arm``), so a change the walk did not
  see raises an event. Each event, whatever it is (an overflowed queue included), moves one
  counter, and a record is used only while the counter still reads what it read when the
  process forked the call that made it: any event since, anywhere, and the next sync walks.
- The key of a record covers the settings, each root's identity (device, inode, type: a root
  replaced or renamed is another root) and the mount table (a mount over a watched directory
  raises no event); a root on a file system whose changes inotify cannot see (NFS, SMB, FUSE,
  9p, virtiofs...) is never vouched for.
- The forked child that runs a call shares the parent's inotify instance (a forked descriptor)
  and adds its watches there; only the parent reads events, and children report their walks
  over a datagram socket the parent reads before it forks the next call.
- A listing holding a file with other hard links is never recorded (a write through a link
  outside the watched directories raises no event in them), nor one spread over more than
  :data:`MAX_WATCHED_DIRS` directories.

What inotify does not see at all - a write through ``mmap`` - shows only in a walk.
``memindex index --force`` and every in-process run (``MEMINDEX_RESIDENT=off``, workers, the
watcher) always walk.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from typing import Sequence

from memindex.pipeline.index.workspace import is_ignored_dir

# What a sync's listing depends on: entries created, removed, renamed; contents and timestamps.
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_IN_ONLYDIR, _IN_DONT_FOLLOW = 0x01000000, 0x02000000
_WATCH_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE
               | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW)
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, getattr(os, "O_CLOEXEC", 0o2000000)

# File systems whose every change, whoever makes it, reaches this kernel's inotify.
LOCAL_FS = frozenset(("ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs", "zfs", "reiserfs", "jfs",
                      "overlay", "bcachefs", "nilfs2", "ramfs", "hfsplus", "vfat", "exfat", "ntfs3"))
# A listing spread over more directories than this is walked every time: each is a watch, and
# a user's inotify watches are shared with every other tool they run (8,192 on older kernels).
MAX_WATCHED_DIRS = 1024
# Watches for listings no longer asked about stay until the instance is closed; past this many
# (counted per listing, so an overestimate) the journal starts afresh with a new instance.
_MAX_WATCHES = 2 * MAX_WATCHED_DIRS
_MAX_RECORDS = 64
_MOUNTINFO = "/proc/self/mountinfo"


def _unescape(field: str) -> str:
    r"""mountinfo escapes space, tab, newline and backslash as ``\ooo``."""
    if "\\" not in field:
        return field
    return bytes(field, "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8", "surrogateescape")


def mount_table(text: str) -> list[tuple[str, str]]:
    """(mount point, file system type) of each line of ``/proc/self/mountinfo``."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if sep and len(fields) >= 5 and after:
            out.append((_unescape(fields[4]), after[0]))
    return out


def watchable(mounts: Sequence[tuple[str, str]], roots: Sequence[tuple[str, bool]]) -> bool:
    """Whether inotify sees every change under ``roots``: the file system each lies on, and any
    mounted below a whole-tree root, is local (later mounts hide earlier ones at one point)."""
    for path, tree in roots:
        real = os.path.realpath(path)
        below = real.rstrip("/") + "/"
        fs = None
        for point, kind in mounts:
            if real == point or real.startswith(point.rstrip("/") + "/"):
                if fs is None or len(point) >= len(fs[0]):
                    fs = (point, kind)
            elif tree and point.startswith(below) and kind not in LOCAL_FS:
                return False
        if fs is None or fs[1] not in LOCAL_FS:
            return False
    return True


def _identity(path: str) -> list[int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode)]


_active: "ChangeJournal | None" = None


def use(journal: "ChangeJournal", *, debug: bool = False) -> None:
    """In a call's forked child: plans made in this process consult ``journal``."""
    global _active
    journal.debug = debug
    _active = journal


def active() -> "ChangeJournal | None":
    return _active


class ChangeJournal:
    """Created by the resident process before it forks any call; see the module docstring."""

    def __init__(self, inotify_fd: int, libc) -> None:
        self._fd, self._libc = inotify_fd, libc
        self._seq = 0
        self.debug = False
        self._records: dict[str, tuple[str, int, int]] = {}  # key -> (disk digest, files, seq)
        self._watches: dict[str, int] = {}  # key -> directories its walk watched
        import socket  # not at module level: the wrapper module costs every in-process plan ~10 ms

        self._inbox, self._outbox = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._inbox.setblocking(False)
        self._outbox.setblocking(False)

    @classmethod
    def create(cls) -> "ChangeJournal | None":
        """A journal, or None where there is no inotify (not Linux, no libc, no instance left)."""
        if not os.path.exists(_MOUNTINFO):
            return None
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        except (OSError, AttributeError):
            return None
        return cls(fd, libc) if fd >= 0 else None

    # -- the resident process, before each fork ----------------------------------------------
    def refresh(self) -> None:
        """Count the events since the last call and take in the children's records."""
        moved = False
        try:
            while os.read(self._fd, 1 << 16):
                moved = True
        except BlockingIOError:
            pass
        except OSError:  # no instance (a restart found none left): nothing can be vouched for
            moved = True
        if moved:
            self._seq += 1
        while True:
            try:
                data = self._inbox.recv(1 << 16)
            except (BlockingIOError, OSError):
                break
            try:
                key, disk, count, seq, watched = json.loads(data)
            except (ValueError, TypeError):
                continue
            self._watches[str(key)] = int(watched)
            if seq == self._seq:  # else already out of date
                self._records[str(key)] = (str(disk), int(count), int(seq))
        if len(self._watches) > _MAX_RECORDS or sum(self._watches.values()) > _MAX_WATCHES:
            self._restart()

    def _restart(self) -> None:
        """A new inotify instance (closing the old one drops its watches once no child holds it)."""
        fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = fd  # -1 if none is left: every arm then fails and every sync walks
        self._records.clear()
        self._watches.clear()
        self._seq += 1

    def close(self) -> None:
        for s in (self._inbox, self._outbox):
            s.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- a forked call (index/unchanged.py ListingJournal) -----------------------------------
    def key(self, context: str, roots: Sequence[tuple[str, bool]]) -> str | None:
        try:
            with open(_MOUNTINFO, encoding="utf-8", errors="surrogateescape") as fh:
                mounts = fh.read()
        except OSError:
            return None
        if not watchable(mount_table(mounts), roots):
            return None
        blob = [context, [[p, t, _identity(p)] for p, t in roots], hashlib.sha256(mounts.encode(
            "utf-8", "surrogateescape")).hexdigest()]
        return hashlib.sha256(json.dumps(blob).encode("utf-8", "surrogateescape")).hexdigest()

    def listing(self, key: str) -> tuple[str, int] | None:
        rec = self._records.get(key)
        if rec is None or rec[2] != self._seq:
            return None
        if self.debug:
            files = f"{rec[1]:,} file{'' if rec[1] == 1 else 's'}"
            print(f"memindex: listing of {files} vouched for by the change journal (no walk)", file=sys.stderr)
        return rec[0], rec[1]

    def arm(self, key: str, roots: Sequence[tuple[str, bool]]) -> str | None:
        watched = 0
        for path, tree in roots:
            stack = [path]
            while stack:
                d = stack.pop()
                # The watch first, then the listing: a subdirectory made after it raises an event.
                if self._libc.inotify_add_watch(self._fd, os.fsencode(d), _WATCH_MASK) < 0:
                    return None  # gone meanwhile (a change), no permission, or out of watches
                watched += 1
                if watched > MAX_WATCHED_DIRS:
                    return None
                if not tree:
                    continue
                try:
                    with os.scandir(d) as it:
                        stack.extend(e.path for e in it
                                     if e.is_dir(follow_symlinks=False) and not is_ignored_dir(e.name))
                except OSError:
                    return None
        return json.dumps([key, self._seq, watched])

    def record(self, token: str, disk: str, count: int) -> None:
        key, seq, watched = json.loads(token)
        try:
            self._outbox.send(json.dumps([key, disk, count, seq, watched]).encode())
        except OSError:
            pass  # a full inbox: only a walk more
