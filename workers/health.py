"""``memindex health``: are this host's memindex processes alive and consuming?

Reads the heartbeats of ``workers/lifecycle.py``. A process is unhealthy when its
heartbeat is older than ``STALE_S`` (stopped, paused, hung: a worker blocked in
C code still beats, its threads are separate), or when one of its queues has
messages ready and it has neither started nor finished one for ``STALL_S``. Also
unhealthy while any queue has messages ready that no live process anywhere consumes:
a writer shard killed outright stops beating, and once its heartbeat record expires
(``PROC_TTL_S``) it would otherwise be forgotten while its work waits.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from memindex.pipeline.config import environ
from memindex.workers import supervisor
from memindex.workers.broker import is_write_queue, oom_line, redis_full
from memindex.workers.lifecycle import BEAT_S, PROC_TTL_S, processes
from memindex.workers.queues import ready, unconsumed_queues

STALE_S = 3 * BEAT_S
STALL_S = environ.HEALTH_STALL_S.get()


def _stopped_here() -> list[tuple[int, str]]:
    """memindex processes of this machine in the stopped state (``T``/``t`` in /proc). A paused
    process's heartbeat record expires after ``PROC_TTL_S``, and it was then forgotten: `health`
    said "healthy" while it held its queue's share of the work. (No /proc: nothing to add.)"""
    out = []
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
            if state not in (b"T", b"t"):
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                argv = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if _is_memindex(argv):
            out.append((int(entry.name), " ".join(argv[1:4] if len(argv) > 1 else argv)))
    return out


def _is_memindex(argv: list[str]) -> bool:
    """``memindex ...``, ``python -m memindex ...``, ``python .../bin/memindex ...``, or a dramatiq
    worker process of memindex's actors."""
    return "memindex" in (os.path.basename(a) for a in argv[:3]) or any(a.startswith("memindex.workers.actors") for a in argv)


def check(client: Any, namespace: str, host: str, stall_s: float | None = None) -> tuple[bool, list[str]]:
    """Whether the memindex processes on ``host`` are healthy, and one line per process."""
    import time

    stall_s = STALL_S if stall_s is None else stall_s
    now = time.time()
    every = processes(client, namespace)
    procs = [p for p in every if p["host"] == host]
    if redis_full(client):  # no heartbeat can be written: "none running" would send the operator astray
        return False, [oom_line()]
    stopped = _stopped_here() if host == socket.gethostname() else []
    if not procs and not stopped:
        return False, [f"no memindex process on {host} has a live heartbeat (none running, or all of them "
                       f"stopped or paused for over {PROC_TTL_S:.0f} s)"]
    ok, lines = not stopped, [f"pid {pid} ({cmd}): stopped (SIGSTOP, a debugger or a suspended job): it takes no "
                              "work until continued (kill -CONT)" for pid, cmd in stopped]
    procs = [p for p in procs if p["pid"] not in {pid for pid, _ in stopped}]
    for p in sorted(procs, key=lambda p: (p["kind"], p["pid"])):
        beat_s, idle_s = now - p["beat"] / 1000, now - p["last_consume"] / 1000
        waiting = sum(ready(q) for q in p["queues"])
        what = f"{p['kind']} pid {p['pid']} ({', '.join(p['queues']) or 'no queues'})"
        sup = supervisor.parse(p["supervisor"]) if p["host"] == socket.gethostname() else None
        if sup is not None and supervisor.gone(*sup):
            ok = False
            lines.append(f"{what}: its supervisor (pid {sup[0]}) is gone: an orphan nothing will stop or "
                         "restart, and a restarted supervisor's own would run beside it (it stops itself within "
                         f"{supervisor.POLL_S:g} s; if it does not, kill it)")
        elif beat_s > STALE_S:
            ok = False
            lines.append(f"{what}: no heartbeat for {beat_s:.0f} s (stopped, paused or hung)")
        elif waiting and idle_s > stall_s:
            ok = False
            lines.append(f"{what}: {waiting} message(s) ready but none started or finished for {idle_s:.0f} s")
        else:
            lines.append(f"{what}: heartbeat {beat_s:.1f} s ago, {len(p['running'])} message(s) running, "
                         f"last consumed {idle_s:.0f} s ago")
    writers: dict[str, list[str]] = {}
    for p in every:  # every host: one writer per store is global
        if now - p["beat"] / 1000 <= STALE_S:
            for q in {q.removesuffix(".DQ") for q in p["queues"] if is_write_queue(q)}:
                writers.setdefault(q, []).append(f"pid {p['pid']} on {p['host']}")
    for q, who in sorted(writers.items()):
        if len(who) > 1:
            ok = False
            lines.append(f"queue {q}: {len(who)} writers ({', '.join(who)}); only one may write a store "
                         "(their transactions would interleave): stop all but one")
    for q in unconsumed_queues():
        ok = False
        lines.append(f"queue {q}: {ready(q)} message(s) ready and no live memindex process consumes it "
                     "(its worker is down: start it, e.g. the Procfile's line for that queue)")
    return ok, lines
