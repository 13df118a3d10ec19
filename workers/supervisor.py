"""A long-running process stops when its supervisor dies (honcho, foreman, a shell script).

honcho starts each Procfile line as ``/bin/sh -c "<line>"`` from a fork of itself, and Debian's
``sh`` (dash) does not exec the command: the supervisor is the shell's parent's parent. SIGKILLed,
honcho left its forks, the shells and every process under them running: a second ``honcho start`` then found a
writer on each shard and exited, and ``memindex health`` called the orphans healthy. The kernel's
parent-death signal (``PR_SET_PDEATHSIG``) only follows the direct parent (the surviving shell),
so the supervisor is watched instead: its pid and its start time (a reused pid is not it), every
``POLL_S``. Gone, the process sends itself SIGTERM: the graceful stop a supervisor would have asked
for (a worker hands back its messages and slots; dramatiq's parent forwards it to its children).

The supervisor found at start is put in the environment (``SUPERVISOR_ENV``) for the dramatiq
worker processes, whose heartbeats record it so that ``health`` names a worker outliving it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from memindex.pipeline.config import environ

log = logging.getLogger("memindex.supervisor")

SUPERVISOR_ENV = environ.SUPERVISOR.name  # "<pid>:<start time>" of the supervisor found at start
POLL_S = environ.SUPERVISOR_POLL_S.get()
# A parent of these names run with -c is a wrapper of this one command, not the supervisor.
SHELLS = frozenset(("sh", "dash", "bash", "zsh", "ash", "ksh"))


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state first), or None (gone, no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), which a reused pid does not share."""
    fields = _stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def _parent(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[1]) if fields else 0


def _cmdline(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0")
    except OSError:
        return None


def _shell(argv: list[bytes] | None) -> str | None:
    """"wrapper" for a ``sh -c`` running one command line, "session" for any other shell (a
    terminal's, a script's), None for a process that is not a shell."""
    if not argv or os.path.basename(argv[0].decode(errors="replace")).lstrip("-") not in SHELLS:
        return None
    return "wrapper" if len(argv) > 1 and argv[1] == b"-c" else "session"


def find() -> tuple[int, int] | None:
    """(pid, start time) of this process's supervisor: the nearest ancestor that is not a wrapper.
    Wrappers are ``sh -c`` shells and forks of their own parent (same command line: honcho runs
    each Procfile line from a fork of itself, which outlives a SIGKILLed honcho). None without one
    to watch: pid 1 of a container, init as the parent, no /proc, or a shell session (started by
    hand from a terminal, where ``nohup ... &`` means "outlive this shell")."""
    pid = os.getppid()
    for _ in range(8):  # a handful of wrappers at most; never loop on a strange /proc
        argv, parent = _cmdline(pid), _parent(pid)
        if parent > 1 and (_shell(argv) == "wrapper" or argv == _cmdline(parent)):
            pid = parent
            continue
        break
    if _shell(_cmdline(pid)) == "session":
        return None
    started = start_time(pid) if pid > 1 else None
    return None if started is None else (pid, started)


def gone(pid: int, started: int) -> bool:
    """Whether the process ``pid`` that started at ``started`` has exited (a zombie counts)."""
    fields = _stat(pid)
    return fields is None or fields[0] in ("Z", "X") or (len(fields) > 19 and int(fields[19]) != started)


def parse(value: str | None) -> tuple[int, int] | None:
    """``SUPERVISOR_ENV``'s "<pid>:<start time>" (as a heartbeat records it), or None."""
    pid, _, started = (value or "").partition(":")
    return (int(pid), int(started)) if pid.isdigit() and started.isdigit() else None


def stop_with_supervisor() -> tuple[int, int] | None:
    """Watch this process's supervisor from a daemon thread and SIGTERM this process when it is
    gone; the supervisor is also put in ``SUPERVISOR_ENV`` for the processes this one starts."""
    sup = find()
    if sup is None:
        os.environ.pop(SUPERVISOR_ENV, None)
        return None
    os.environ[SUPERVISOR_ENV] = f"{sup[0]}:{sup[1]}"
    me = os.getpid()

    def watch() -> None:
        while True:
            time.sleep(POLL_S)
            if gone(*sup):
                log.warning("the supervisor of this process (pid %d) is gone: stopping (as it would have "
                            "asked), so that a restarted supervisor finds no orphan in its place", sup[0])
                os.kill(me, signal.SIGTERM)
                return

    threading.Thread(target=watch, name="memindex-supervisor-watch", daemon=True).start()
    return sup
