"""Hooks the agent runtime calls: schedule a sync without waiting for it (F8).

``on_session_start(ctx, session_key)`` and ``schedule_sync(settings, reason)``
(the ``MemorySearch(schedule_sync=...)`` callback) enqueue one sync and return
at once. They are called on every search, so they de-duplicate: a per-agent
"sync requested" flag is set when a sync is enqueued and cleared by the sync
actor when it *starts* (``clear_sync_requested``). A request that arrives
while a sync is still queued is therefore covered by that sync (it has not
looked at the disk yet); one that arrives after it started enqueues a new one.
The flag has a short TTL so a lost message cannot silence an agent for long.

On Redis the flag is a key set with SET NX EX through the broker's client, so
it is shared by every process; on the embedded broker it lives in this process
(which is also where the sync runs).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings, Context, pinned
from memindex.pipeline.config.environ import BROKER_ENV, broker_configured
from memindex.pipeline.errors import BrokerUnavailable, checked_call, require
from memindex.producers import enqueue
from memindex.producers.enqueue import broker_errors
from memindex.workers.flags import send_once
from memindex.workers.logs import redis_answered

log = logging.getLogger("memindex.hooks")


def request_sync_once(ctx: Context, reason: str, settings: AgentSettings | None = None) -> bool:
    """Enqueue a sync unless one is already queued for this agent. True if enqueued."""
    settings = settings or settings_for(ctx)
    if not settings.enabled:
        return False
    sent = send_once(settings.store_path, lambda: enqueue.request_sync(ctx, reason=reason))
    # Redis answered: ends an outage this process's logs were counting (a server has no heartbeat,
    # and said "redis still unreachable after 150 s" of an outage seconds old).
    redis_answered()
    return sent


# The runtime hook's bound (README "Freshness"): it enqueues within this, or raises BrokerUnavailable
# and leaves the request to finish on its own thread (a Redis that answers later still gets it; one
# that never does fails it after the client's socket timeout). A hung Redis (SIGSTOP, a full
# network buffer) held a session start for the 30 s socket timeout.
HOOK_DEADLINE_S = 0.5
_in_flight: dict[str, threading.Thread] = {}
_flight_lock = threading.Lock()


def _within_deadline(key: str, call: Callable[[], bool]) -> bool:
    """``call()`` on a thread of its own, waited for at most HOOK_DEADLINE_S. A request of ``key``
    still in flight from an earlier call covers this one: refused at once, not a second thread."""
    if not broker_configured():
        return call()  # no network: the flag and the queue are in this process
    # The queue layer is imported here, outside the deadline: importing it asks Redis nothing, and
    # a process's first call spent most of the 0.5 s importing dramatiq and the actors.
    # lazy: only a hook on Redis needs the queue layer here (the embedded path above loads it
    # inside the call); importing the hooks stays light for the agent runtime
    import memindex.producers.dispatch  # noqa: F401
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["sent"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, or logged if it left
            box["error"] = exc
            if done.is_set():
                log.warning("a sync request that gave up waiting for Redis failed later: %s", exc)

    done = threading.Event()
    with _flight_lock:
        earlier = _in_flight.get(key)
        if earlier is not None and earlier.is_alive():
            raise BrokerUnavailable(f"the broker ({BROKER_ENV}) has not answered an earlier sync request yet; "
                                    "not waiting for it")
        worker = threading.Thread(target=run, name="memindex-sync-request", daemon=True)
        _in_flight[key] = worker
        worker.start()
    worker.join(HOOK_DEADLINE_S)
    done.set()
    if worker.is_alive():
        raise BrokerUnavailable(f"the broker ({BROKER_ENV}) did not answer within {HOOK_DEADLINE_S:g} s; "
                                "the sync request waits for it in the background")
    if "error" in box:
        raise box["error"]
    return bool(box.get("sent"))


@checked_call("on_session_start")
@broker_errors()
def on_session_start(ctx: Context, session_key: str | None = None) -> bool:
    """A session started: schedule a sync if ``sync.onSessionStart`` (default on). Returns
    within HOOK_DEADLINE_S, or raises ``BrokerUnavailable``."""
    require("ctx", ctx, Context)
    require("session_key", session_key, str, optional=True)
    settings = settings_for(ctx)
    if not settings.memory_search.sync.on_session_start:
        return False
    log.debug("session start %s for %s", session_key or "-", ctx.agent_id)
    return _within_deadline(str(settings.store_path), lambda: request_sync_once(ctx, "session-start", settings))


# A search-triggered sync re-plans the whole workspace (a stat per file); a server
# answering many searches a second would otherwise plan continuously and slow the
# searches themselves. Syncs for other reasons (session start, watcher) are not spaced.
SEARCH_SYNC_MIN_INTERVAL_S = 2.0
_last_search_sync: dict[str, float] = {}
_last_lock = threading.Lock()


@checked_call("schedule_sync")
@broker_errors()
def schedule_sync(settings: AgentSettings, reason: str) -> None:
    """``MemorySearch(schedule_sync=schedule_sync)``: enqueue, never wait."""
    require("settings", settings, AgentSettings)
    # Checked here, where the caller is: a reason of another type was queued, and the worker then
    # refused the message as "sent by another version of memindex".
    require("reason", reason, str)
    key = str(settings.store_path)
    if reason == "search":
        with _last_lock:
            if time.monotonic() - _last_search_sync.get(key, float("-inf")) < SEARCH_SYNC_MIN_INTERVAL_S:
                return
    if request_sync_once(pinned(settings), reason, settings) and reason == "search":
        with _last_lock:
            _last_search_sync[key] = time.monotonic()
