"""The per-agent "sync requested" flag that de-duplicates sync requests (F8).

Set when a sync is enqueued (``mark_sync_requested``), cleared by the sync actor
as it *starts* (``clear_sync_requested``): a request that arrives while a sync
is still queued is covered by it. On Redis the flag is a key set with SET NX EX
through the broker's client, shared by every process; on the embedded broker
it lives in this process. A short TTL keeps a lost message from silencing an
agent for long.
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any, Callable

# Long enough to cover a queued sync under normal load, short enough that a
# lost message only delays freshness briefly.
FLAG_TTL_S = 30
KEY_PREFIX = "memindex:sync-requested:"

_local_flags: dict[str, float] = {}
_local_lock = threading.Lock()


def flag_key(store_path: Path | str) -> str:
    # Keyed by the store: two Contexts naming the same agent store share one flag.
    return KEY_PREFIX + hashlib.sha1(str(store_path).encode()).hexdigest()[:20]


def _redis_client() -> Any:
    # (the OpenClaw hooks import this module on their hot path, producers/hooks.py)
    # lazy: no dramatiq import for a hook when no broker is configured
    from memindex.workers.broker import redis_broker

    rb = redis_broker()
    return None if rb is None else rb.client


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


def send_once(store_path: Path | str, send: Callable[[], None]) -> bool:
    """``send()`` unless a sync for this store is already requested and not started. True if
    sent. A send that fails clears the flag again: nothing was queued, so the next request
    must not be swallowed."""
    if not mark_sync_requested(store_path):
        return False
    try:
        send()
    except Exception:
        clear_sync_requested(store_path)
        raise
    return True
