"""The embedded default: run the actors on worker threads inside this process.

Two dramatiq ``Worker``s share the in-memory broker: one consumes sync/embed/
batch with a few threads, the other consumes ``write`` with exactly one thread,
so each store still has a single writer (P5).
"""

from __future__ import annotations

import atexit
import threading
import time

import dramatiq

from memindex.workers.broker import QUEUES, broker, is_embedded

POLL_MS = 20
_started: list[dramatiq.Worker] = []
_lock = threading.Lock()


def start(worker_threads: int = 2) -> None:
    """Start the in-process workers once (no-op on a Redis broker)."""
    if not is_embedded(broker):
        return
    with _lock:
        if _started:
            return
        from memindex.workers import actors  # noqa: F401  (declare actors before consuming)

        # A short worker_timeout keeps stop() (and so CLI exit) fast; idle threads
        # block on a queue condition in between, so it costs no busy polling.
        work = dramatiq.Worker(broker, queues={q for q in QUEUES if q != "write"},
                               worker_threads=worker_threads, worker_timeout=POLL_MS)
        writer = dramatiq.Worker(broker, queues={"write"}, worker_threads=1, worker_timeout=POLL_MS)
        for w in (work, writer):
            w.start()
            _started.append(w)
        atexit.register(stop)


def stop(*, idle: bool = False) -> None:
    """Stop the in-process workers and close the writer's stores.

    ``idle=True`` (the queues are known to be drained, as at the end of a CLI
    command) skips joining dramatiq's daemon threads one by one: nothing is in
    flight, so they are just told to stop and die with the process.
    """
    with _lock:
        was_running = bool(_started)
        for w in _started:
            if idle and outstanding() == 0:
                for t in (*w.workers, *w.consumers.values()):
                    t.stop()
            else:
                w.stop(timeout=5000)
        _started.clear()
    if was_running:
        from memindex.workers.writer import close_writers

        close_writers()


def outstanding() -> int:
    """Messages enqueued (ready or delayed) or in flight, across all queues."""
    return sum(q.unfinished_tasks for q in broker.queues.values())


def join_idle(timeout: float | None = None) -> bool:
    """Block until every queue is drained, woken by the queues themselves (no polling).

    Actors enqueue follow-up work before their own message is acked, so after a
    pass over all queues finds them joined, nothing can be in flight anywhere.
    """
    from dramatiq.errors import QueueJoinTimeout

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        for q in QUEUES:
            left = None if deadline is None else max(1, int((deadline - time.monotonic()) * 1000))
            try:
                broker.join(q, timeout=left, fail_fast=False)
            except QueueJoinTimeout:
                return False
        if outstanding() == 0:
            return True


def wait_idle(timeout: float | None = None, poll: float = 0.02) -> bool:
    """Block until every queue is drained and nothing is in flight."""
    deadline = None if timeout is None else time.monotonic() + timeout
    quiet = 0
    while True:
        quiet = quiet + 1 if outstanding() == 0 else 0
        if quiet >= 3:  # stable across polls: no actor is about to enqueue more
            return True
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(poll)


def dead_letters() -> list:
    return list(broker.dead_letters) if is_embedded(broker) else []
