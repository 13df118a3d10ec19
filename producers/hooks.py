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

from memindex.pipeline.config.settings import AgentSettings, Context, pinned
from memindex.pipeline.errors import checked_call, require
from memindex.producers.enqueue import broker_errors
from memindex.workers.flags import send_once

log = logging.getLogger("memindex.hooks")


def request_sync_once(ctx: Context, reason: str, settings: AgentSettings | None = None) -> bool:
    """Enqueue a sync unless one is already queued for this agent. True if enqueued."""
    from memindex.pipeline.config.agents import settings_for
    from memindex.producers.enqueue import request_sync

    settings = settings or settings_for(ctx)
    if not settings.enabled:
        return False
    sent = send_once(settings.store_path, lambda: request_sync(ctx, reason=reason))
    # Redis answered: ends an outage this process's logs were counting (a server has no heartbeat,
    # and said "redis still unreachable after 150 s" of an outage seconds old).
    from memindex.workers.logs import redis_answered

    redis_answered()
    return sent


@checked_call("on_session_start")
@broker_errors()
def on_session_start(ctx: Context, session_key: str | None = None) -> bool:
    """A session started: schedule a sync if ``sync.onSessionStart`` (default on)."""
    from memindex.pipeline.config.agents import settings_for

    require("ctx", ctx, Context)
    require("session_key", session_key, str, optional=True)
    settings = settings_for(ctx)
    if not settings.memory_search["sync"]["onSessionStart"]:
        return False
    log.debug("session start %s for %s", session_key or "-", ctx.agent_id)
    return request_sync_once(ctx, "session-start", settings)


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
    key = str(settings.store_path)
    if reason == "search":
        with _last_lock:
            if time.monotonic() - _last_search_sync.get(key, float("-inf")) < SEARCH_SYNC_MIN_INTERVAL_S:
                return
    if request_sync_once(pinned(settings), reason, settings) and reason == "search":
        with _last_lock:
            _last_search_sync[key] = time.monotonic()
