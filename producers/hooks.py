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

import hashlib
import logging
import threading
import time
from pathlib import Path

from pipeline.config import AgentSettings, Context

log = logging.getLogger("memindex.hooks")

# Long enough to cover a queued sync under normal load, short enough that a
# lost message only delays freshness briefly.
FLAG_TTL_S = 30
KEY_PREFIX = "memindex:sync-requested:"

_local_flags: dict[str, float] = {}
_local_lock = threading.Lock()


def context_for(settings: AgentSettings) -> Context:
    """The Context a worker needs to find these settings again."""
    return Context(settings.agent_id, str(settings.config_path) if settings.config_path else None,
                   str(settings.state_dir), str(settings.workspace))


def flag_key(store_path: Path | str) -> str:
    # Keyed by the store: two Contexts naming the same agent store share one flag.
    return KEY_PREFIX + hashlib.sha1(str(store_path).encode()).hexdigest()[:20]


def _redis_client():
    from workers.broker import broker, is_embedded

    return None if is_embedded(broker) else broker.client


def mark_sync_requested(store_path: Path | str, ttl_s: float = FLAG_TTL_S) -> bool:
    """Set the flag; True if it was not set (the caller should enqueue)."""
    key = flag_key(store_path)
    client = _redis_client()
    if client is not None:
        return bool(client.set(key, "1", nx=True, ex=max(1, int(ttl_s))))
    now = time.monotonic()
    with _local_lock:
        if _local_flags.get(key, 0.0) > now:
            return False
        _local_flags[key] = now + ttl_s
        return True


def clear_sync_requested(store_path: Path | str) -> None:
    """Called by the sync actor as it starts: later requests need a new sync."""
    key = flag_key(store_path)
    client = _redis_client()
    if client is not None:
        client.delete(key)
        return
    with _local_lock:
        _local_flags.pop(key, None)


def request_sync_once(ctx: Context, reason: str, settings: AgentSettings | None = None) -> bool:
    """Enqueue a sync unless one is already queued for this agent. True if enqueued."""
    from pipeline.agents import settings_for
    from producers.trigger import request_sync

    settings = settings or settings_for(ctx)
    if not settings.enabled:
        return False
    if not mark_sync_requested(settings.store_path):
        return False
    try:
        request_sync(ctx, reason=reason)
    except Exception:
        clear_sync_requested(settings.store_path)  # nothing was queued: let the next call retry
        raise
    return True


def on_session_start(ctx: Context, session_key: str | None = None) -> bool:
    """A session started: schedule a sync if ``sync.onSessionStart`` (default on)."""
    from pipeline.agents import settings_for

    settings = settings_for(ctx)
    if not settings.memory_search["sync"]["onSessionStart"]:
        return False
    log.debug("session start %s for %s", session_key or "-", ctx.agent_id)
    return request_sync_once(ctx, "session-start", settings)


def schedule_sync(settings: AgentSettings, reason: str) -> None:
    """``MemorySearch(schedule_sync=schedule_sync)``: enqueue, never wait."""
    request_sync_once(context_for(settings), reason, settings)


def scheduler_for(ctx: Context):
    """A ``schedule_sync`` callback that keeps the caller's exact Context."""

    def _schedule(settings: AgentSettings, reason: str) -> None:
        request_sync_once(ctx, reason, settings)

    return _schedule
