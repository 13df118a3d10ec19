"""What each long-running process tells Redis about itself: a heartbeat, the
messages it is running, and a clean goodbye.

Every worker process (and ``memindex watch``) keeps one hash,
``memindex:proc:<id>``, with its host, pid, queues, last heartbeat and last
consume time, and one hash ``memindex:proc:<id>:running`` of the message ids it
is processing (id -> queue). Both are renewed on every heartbeat and expire
after ``PROC_TTL_S``, so a process killed without cleanup (SIGKILL, OOM, a lost
container) vanishes from ``queues`` and ``health`` on its own. ``queues``
counts running messages from these hashes, not from dramatiq's ack sets (which
also hold prefetched messages and those of dead workers).

Graceful stop: dramatiq's parent process forwards SIGTERM to its children, and
a second signal makes a child exit at once ("Killing worker process...")
without finishing its messages. honcho (and ``kill -- -PGID``) signal the whole
process group, so every child got two at the same instant. A child now takes a
repeat of the signal within ``REPEAT_WINDOW_S`` as the same request (a later
one still means "stop now"), drains, and gives back every embedding slot it
still holds before it exits. The children stay in their parent's process group,
so a SIGKILL of the group still takes them all.

Draining must fit the supervisor's grace period (honcho: 5 s, then SIGKILL), and
a group of files can take many provider requests: a stopping worker lets each
embedding request in flight finish, then interrupts the message between
requests (dramatiq's shutdown notification, and the limiter refusing new
slots); the message is retried later (every actor is idempotent).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from typing import Any, Callable, Iterable

from dramatiq.middleware import Middleware, Shutdown, ShutdownNotifications
from memindex.pipeline.config import environ
from memindex.workers.logs import clear_work, redis_answered, set_work
from memindex.pipeline.config.environ import env_number
from memindex.workers.limits import release_all, stop_acquiring
from memindex.workers.logs import clear_work, configure_from_env, redis_answered, set_work
from memindex.workers.run import PARENT_ENV
from memindex.workers.supervisor import SUPERVISOR_ENV

log = logging.getLogger("memindex.lifecycle")

# Set when this worker process is asked to stop (its first SIGTERM).
STOPPING = threading.Event()

# Heartbeat period, and how long a silent process's entries live on.
BEAT_S = environ.HEARTBEAT_S.get()
PROC_TTL_S = environ.PROC_TTL_S.get()  # whole seconds in Redis: 0.5 expired them at once
# A stop signal repeated within this window is the same stop (see the module docstring).
REPEAT_WINDOW_S = 3.0


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def proc_key(namespace: str, proc_id: str) -> str:
    return f"{namespace}:proc:{proc_id}"


def _now_ms() -> int:
    return int(time.time() * 1000)


class Heartbeat:
    """One process's presence on Redis, renewed by a daemon thread until ``stop``."""

    def __init__(self, client: Any, namespace: str, kind: str, queues: Iterable[str],
                 record: tuple[str, int] | None = None) -> None:
        self.client, self.namespace = client, namespace
        # (key, value) set again on every beat (SET NX): a writer's shard count. Redis restarted
        # without its data lost it, and the processes routing by it sent writes to the unsharded
        # queue nobody reads.
        self.record = record
        self.key = proc_key(namespace, uuid.uuid4().hex)

        self.info = {"kind": kind, "host": socket.gethostname(), "pid": os.getpid(),
                     "queues": json.dumps(sorted(queues)), "started": _now_ms(),
                     # whose death must end this process (workers/supervisor.py): `health` checks it
                     "supervisor": environ.SUPERVISOR.raw() or ""}
        self.last_consume = _now_ms()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memindex-heartbeat", daemon=True)
        # Messages whose end could not be recorded (Redis was down): cleared by the next beat that
        # gets through, or they would count as running for the life of the process.
        self._unended: set[str] = set()
        self._lock = threading.Lock()

    def start(self) -> "Heartbeat":
        self.beat()
        self._thread.start()
        return self

    def began(self, message_id: str, queue: str) -> None:
        self.last_consume = _now_ms()
        # One HSET / HDEL per message, at once (not on the next beat), so `queues` is exact while
        # the process lives; each op is atomic, so threads finishing together cannot undo each other.
        try:
            pipe = self.client.pipeline()
            pipe.hset(f"{self.key}:running", message_id, queue)
            pipe.expire(f"{self.key}:running", int(PROC_TTL_S))
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - the count is advice; the work goes on
            log.debug("could not record running message %s: %s", message_id, exc)

    def ended(self, message_id: str) -> None:
        self.last_consume = _now_ms()
        try:
            self.client.hdel(f"{self.key}:running", message_id)
        except Exception as exc:  # noqa: BLE001 - the next beat clears it
            with self._lock:
                self._unended.add(message_id)
            log.debug("could not clear running message %s (the next heartbeat will): %s", message_id, exc)

    def beat(self) -> None:
        ttl = int(PROC_TTL_S)
        with self._lock:
            unended = list(self._unended)
        pipe = self.client.pipeline()
        if unended:
            pipe.hdel(f"{self.key}:running", *unended)
        pipe.hset(self.key, mapping={**self.info, "beat": _now_ms(), "last_consume": self.last_consume})
        if self.record is not None:
            pipe.set(self.record[0], self.record[1], nx=True)
        pipe.expire(self.key, ttl)
        pipe.expire(f"{self.key}:running", ttl)
        pipe.execute()
        with self._lock:
            self._unended.difference_update(unended)

    def _loop(self) -> None:
        while not self._stop.wait(BEAT_S):
            self.beat_and_report()

    def beat_and_report(self) -> None:
        """One beat of the loop: a failure is an outage line; the first beat after an outage ends it."""
        try:
            self.beat()
        except Exception as exc:  # noqa: BLE001 - retried on the next beat
            log.warning("heartbeat to redis failed: %s", exc)
        else:
            if redis_answered():
                self._tell_watchers()

    def _tell_watchers(self) -> None:
        """This process lost Redis for a while, however briefly (a watcher probing every 2 s can
        miss a sub-second restart): count it where every watcher's probe looks (DataLossProbe)."""
        try:
            pipe = self.client.pipeline()
            pipe.incr(outages_key(self.namespace))
            # Not kept forever: a key of a deployment long gone. Its expiry reads as one more
            # change to each watcher's probe (one extra re-plan, harmless), at most once a week.
            pipe.expire(outages_key(self.namespace), OUTAGES_TTL_S)
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - the next outage is counted again
            log.debug("could not count the outage: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        try:
            self.client.delete(self.key, f"{self.key}:running")
        except Exception as exc:  # noqa: BLE001 - the keys expire on their own
            log.debug("could not remove the heartbeat: %s", exc)


def processes(client: Any, namespace: str) -> list[dict[str, Any]]:
    """Live processes (their keys not yet expired), each with its running message ids by queue."""
    out = []
    for key in client.scan_iter(match=f"{namespace}:proc:*"):
        key = key.decode() if isinstance(key, bytes) else key
        if key.endswith(":running"):
            continue
        raw = client.hgetall(key)
        if not raw:
            continue
        d = {k.decode(): v.decode() for k, v in raw.items()}
        running = client.hgetall(f"{key}:running")
        out.append({"kind": d.get("kind"), "host": d.get("host"), "pid": int(d.get("pid", 0)),
                    "queues": json.loads(d.get("queues", "[]")), "beat": int(d.get("beat", 0)),
                    "last_consume": int(d.get("last_consume", 0)), "supervisor": d.get("supervisor", ""),
                    "running": [q.decode() for q in running.values()]})
    return out


class InterruptEmbedsOnStop(ShutdownNotifications):
    """dramatiq's shutdown notification for one queue's messages (the embed queue): the
    writer and the sync planner are short and finish their work."""

    def __init__(self, queue: str) -> None:
        super().__init__()
        self.queue = queue

    def should_notify(self, actor: Any, message: Any) -> bool:
        return bool(message.queue_name.removesuffix(".DQ") == self.queue
                    or super().should_notify(actor, message))  # type: ignore[no-untyped-call]  # dramatiq's is untyped


class HandBackOnStop(Middleware):
    """A message handed back by a stopping worker (dramatiq's ``Shutdown``) did not fail, but
    ``Retries`` counts every exception: nine stops during one slow provider request dead-lettered
    healthy work ("Shutdown:"). Listed after ``Retries``, so its "after" hook runs first (they
    unwind in reverse), it takes that count back before ``Retries`` adds it."""

    def after_process_message(self, broker: Any, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        if isinstance(exception, Shutdown):
            message.options["retries"] = message.options.get("retries", 0) - 1


class GroupCommit(Middleware):
    """After each message a worker thread processed, and before it is acknowledged: the writer
    decides whether to commit the stores' held transactions (``workers.writer.after_message``,
    which registers itself here: the broker imports this module, so it cannot import the writer)."""

    after_message: Callable[[str], None] | None = None
    on_shutdown: Callable[[], None] | None = None  # commit and close the writer's stores

    def after_process_message(self, broker: Any, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        if GroupCommit.after_message is not None:
            GroupCommit.after_message(message.queue_name)

    after_skip_message = after_process_message


def _stop_with_parent() -> None:
    """A dramatiq worker child gets SIGTERM when its parent (the `memindex worker` pid a supervisor
    knows) dies. SIGKILLed, the parent left its children consuming on their own: a writer nobody
    could stop but by pid, which the restarted one then (rightly) refused to run beside."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes


        # dramatiq's parent as it was when it forked this process: it may have died since (before
        # the call below could take effect), and then getppid() is already someone else.
        parent = int(environ.WORKER_PARENT.raw() or os.getppid())
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it died before the call took effect
            os.kill(os.getpid(), signal.SIGTERM)
    except Exception as exc:  # noqa: BLE001 - best effort: the heartbeat check still refuses a second writer
        log.debug("could not ask to stop with the parent process: %s", exc)


class Lifecycle(Middleware):
    """Worker processes on Redis: one stop per stop signal, heartbeat, running messages, slots released on stop."""

    def __init__(self, queues: Iterable[str],
                 record: Callable[[Iterable[str]], tuple[str, int] | None] = lambda queues: None) -> None:
        self.queues = tuple(queues)  # what a worker consumes when not told (dramatiq: every queue)
        self.record = record  # what a process consuming these queues keeps recorded (Heartbeat.record)
        self.heartbeat: Heartbeat | None = None

    def after_process_boot(self, broker: Any) -> None:
        configure_from_env()
        # Only dramatiq's worker children boot a process on Redis, in their main thread.
        first = signal.getsignal(signal.SIGTERM)
        if not callable(first):
            return
        stopping_since: list[float] = []

        def once(signum: int, frame: Any) -> None:
            now = time.monotonic()
            if stopping_since and now - stopping_since[0] < REPEAT_WINDOW_S:
                return
            stopping_since[:] = [now]
            STOPPING.set()  # messages waiting on backpressure (queues.wait_below) send and finish
            first(signum, frame)

        signal.signal(signal.SIGTERM, once)
        _stop_with_parent()

    def after_worker_boot(self, broker: Any, worker: Any) -> None:
        queues = worker.consumer_whitelist or self.queues
        self.heartbeat = Heartbeat(broker.client, broker.namespace, "worker", queues, self.record(queues)).start()

    def before_process_message(self, broker: Any, message: Any) -> None:
        if self.heartbeat is not None:
            self.heartbeat.began(message.message_id, message.queue_name)

    def after_process_message(self, broker: Any, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        if self.heartbeat is not None:
            self.heartbeat.ended(message.message_id)

    after_skip_message = after_process_message

    def before_worker_shutdown(self, broker: Any, worker: Any) -> None:
        stop_acquiring()

    def after_worker_shutdown(self, broker: Any, worker: Any) -> None:
        release_all()  # slots of messages that did not finish within the shutdown timeout
        if GroupCommit.on_shutdown is not None:
            GroupCommit.on_shutdown()  # a writer's held transaction holds acknowledged writes
        if self.heartbeat is not None:
            self.heartbeat.stop()
            self.heartbeat = None



# A process's "Redis still has our data" marker lives this long without renewal. It is
# checked and renewed every few seconds, so only lost data (FLUSHALL, a restart without
# persistence) or a process paused this long finds it gone; the second costs one extra sync.
ALIVE_TTL_S = 120


class DataLossProbe:
    """Each call says, once, why queued work may have been lost since the previous call (None:
    no reason): Redis lost its data, or it was unreachable for a while. Work in flight across an
    outage can vanish with Redis's data kept too: a worker whose retry could not be enqueued
    (Redis down) still acknowledges the message once Redis answers. Either way the caller
    re-plans, and the plan queues again every file still pending in the store.

    Each process keeps its own key (``memindex:alive:<host>:<pid>:<uuid>``), so every
    watcher of a deployment notices the loss, not only the first one to look.
    """

    def __init__(self, client: Any, namespace: str = "memindex") -> None:
        self.client = client
        self.key = f"{namespace}:alive:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.outages_key = outages_key(namespace)
        self._armed = False
        self._unreachable = False
        self._outages: bytes | None = None
        self._verdict_at = float("-inf")
        self._renewed_at = time.monotonic()
        # What the last verdict was: "data_lost" (leases went with the data: any there now stand
        # for work queued since), "paused" (nothing lost: leases hold), "unreachable" or "outage"
        # (leases may outlive dropped work).
        self.kind: str | None = None

    def __call__(self) -> str | None:
        try:
            present = self.client.set(self.key, "1", ex=ALIVE_TTL_S, xx=True)  # renew only if still there
            if not present:
                self.client.set(self.key, "1", ex=ALIVE_TTL_S)
            outages = self.client.get(self.outages_key)  # what the workers' heartbeats counted
        except Exception as exc:  # noqa: BLE001 - Redis down: no verdict until it answers again
            log.debug("data-loss probe: Redis unreachable (%s)", exc)
            self._unreachable = self._armed
            return None
        armed, unreachable, seen = self._armed, self._unreachable, self._outages
        self._armed, self._unreachable, self._outages = True, False, outages
        now = time.monotonic()
        gap, self._renewed_at = now - self._renewed_at, now
        if armed and not present and gap >= ALIVE_TTL_S:
            # Not renewed for longer than it lives: this process was paused (SIGSTOP, a suspended
            # VM) and its own key expired; Redis kept its data. A re-plan still catches up.
            return self._verdict("paused", now, f"this process was paused for {gap:.0f} s (its Redis marker "
                                                "expired meanwhile; Redis kept its data)")
        if armed and not present:
            return self._verdict("data_lost", now, "Redis lost its data (flushed or restarted without persistence)")
        if unreachable:
            return self._verdict("unreachable", now,
                                 "Redis was unreachable for a while (work in flight then may have been dropped)")
        if armed and outages != seen:
            if now - self._verdict_at < OUTAGE_SETTLE_S:
                # The workers counting the outage the last verdict already answered (they bump the
                # counter as they reconnect): a second re-plan queued every pending file again.
                return None
            return self._verdict("outage", now, "a worker lost its connection to Redis for a moment (work in "
                                               "flight then may have been dropped)")
        return None

    def _verdict(self, kind: str, now: float, reason: str) -> str:
        self.kind, self._verdict_at = kind, now
        return reason


OUTAGES_TTL_S = 7 * 86400
# After a verdict, changes of the outage counter within this are the same outage's (workers
# reconnecting to the restarted Redis), not another one.
OUTAGE_SETTLE_S = 60.0


def outages_key(namespace: str) -> str:
    """A counter of the Redis outages worker processes lived through (their heartbeats add one)."""
    return f"{namespace}:outages"


class WorkContext(Middleware):
    """Every line logged while a message is processed names its agent and message id, so an
    operator can follow one message from its enqueue to its write (and to its dead letter)."""

    def before_process_message(self, broker: Any, message: Any) -> None:
        ctx = message.args[0] if message.args and isinstance(message.args[0], dict) else {}
        set_work(str(ctx.get("agent_id") or ""), message.message_id)

    def after_process_message(self, broker: Any, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        clear_work()

    after_skip_message = after_process_message
