"""The embedded default: run the actors on worker threads inside this process.

Two dramatiq ``Worker``s share the in-memory broker: one consumes ``sync`` and
``write`` on exactly one thread (so each store still has a single writer, P5),
the other ``embed`` and ``batch`` with a few threads.
"""

from __future__ import annotations

import atexit
import threading
import time
from typing import TYPE_CHECKING, Any

import dramatiq
from dramatiq.errors import QueueJoinTimeout

import memindex.workers.actors  # noqa: F401 - every actor declared on the broker: start() consumes
from memindex.workers import writer
from memindex.workers.broker import QUEUES, SYNC_QUEUE, WRITE_QUEUE, get_broker, is_embedded, stub_broker

if TYPE_CHECKING:
    from dramatiq.brokers.stub import StubBroker

# How long an idle worker or consumer thread blocks before it looks again. Each wake-up takes the
# GIL from whichever thread is working: at 20 ms the eight threads' wake-ups cost a cold index
# ~10% of its CPU (bench/README.md); 250 ms still stops a Ctrl-C'd index within a quarter second.
POLL_MS = 250
# The file side and the writer share one thread here (issue 19). Both are mostly Python under
# one GIL, so two threads never ran them in parallel; they only handed the GIL (and its cache
# lines) back and forth at every SQLite call: ~5% more CPU for a cold index (bench/README.md).
# The writer's messages go first (writer.WRITE_PRIORITY), so its backlog stays a message or
# two. The embed/batch threads stay separate: they wait on providers or run the local model in
# C, and that does overlap.
FILE_QUEUES = (SYNC_QUEUE, WRITE_QUEUE)
_started: list[dramatiq.Worker] = []
_retired: list[dramatiq.Worker] = []
_lock = threading.Lock()


def start(worker_threads: int = 2) -> None:
    """Start the in-process workers once (no-op on a Redis broker). Every actor is declared on the
    broker by then: this module imports them."""
    broker = get_broker()
    if not is_embedded(broker):
        return
    with _lock:
        if _started:
            return
        for w in _retired:  # told to stop without waiting (stop(idle=True)): finish them, requeue what they took
            w.stop(timeout=5000)
        _retired.clear()
        files = dramatiq.Worker(broker, queues=set(FILE_QUEUES), worker_threads=1, worker_timeout=POLL_MS)
        compute = dramatiq.Worker(broker, queues={q for q in QUEUES if q not in FILE_QUEUES},
                                  worker_threads=worker_threads, worker_timeout=POLL_MS)
        writer.state.inline_work_queue = files.work_queue  # (before start: its thread must know itself at once)
        writer.state.inline_more_work = more_file_work
        for w in (files, compute):
            w.start()
            _started.append(w)
        atexit.register(stop)


def _stub() -> StubBroker:
    """The embedded broker (these helpers serve it only: ``start`` is a no-op on Redis)."""
    stub = stub_broker()
    if stub is None:
        raise RuntimeError("not the embedded broker")  # (a caller's bug)
    return stub


def more_file_work() -> bool:
    """Besides the message the files thread is processing, is sync or write work queued for it?"""
    broker = _stub()
    return sum(int(broker.queues[q].unfinished_tasks) for q in FILE_QUEUES) > 1


def stop(*, idle: bool = False) -> None:
    """Stop the in-process workers and close the writer's stores.

    ``idle=True`` (the queues are known to be drained, as at the end of a CLI
    command) skips joining dramatiq's daemon threads one by one: nothing is in
    flight, so they are just told to stop and die with the process. Until they
    notice (within POLL_MS) a consumer may still take a message sent meanwhile
    into its worker's memory, so a later ``start`` in this process first stops
    them for good, which puts such a message back on its queue.
    """
    with _lock:
        was_running = bool(_started)
        for w in _started:
            if idle and outstanding() == 0:
                for t in (*w.workers, *w.consumers.values()):
                    t.stop()  # type: ignore[attr-defined]  # dramatiq's worker/consumer threads; typed as Thread
                _retired.append(w)
            else:
                w.stop(timeout=5000)
        _started.clear()
    if was_running:
        writer.close_writers()


def outstanding() -> int:
    """Messages enqueued (ready or delayed) or in flight, across all queues."""
    return sum(int(q.unfinished_tasks) for q in _stub().queues.values())


def join_idle(timeout: float | None = None) -> bool:
    """Block until every queue is drained, woken by the queues themselves (no polling).

    Actors enqueue follow-up work before their own message is acked, so after a
    pass over all queues finds them joined, nothing can be in flight anywhere.
    """
    broker = _stub()
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


def dead_letters() -> list[dramatiq.MessageProxy]:
    stub = stub_broker()
    return list(stub.dead_letters) if stub is not None else []
