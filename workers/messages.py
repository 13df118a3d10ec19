"""The queue boundary: queue names, message options, and sends that need no actor import.

Actors that ask for a re-sync (a stale write, a provider fallback) enqueue the
``sync_agent`` message by name, so the writer and the indexers do not import
the sync module that imports them.
"""

from __future__ import annotations

from typing import Any

import zlib

import dramatiq

from memindex.workers.broker import EMBED_QUEUE, SYNC_QUEUE, WRITE_QUEUE, broker, is_embedded, write_shards

# Retry policy shared by every pipeline actor.
# Files (or records) per index/write message: big enough to amortise queue
# overhead, small enough to keep memory bounded and retries cheap.
GROUP_FILES = 32

RETRY: dict[str, Any] = dict(max_retries=8, min_backoff=500, max_backoff=60_000)


def request_resync(ctx: dict[str, Any], reason: str, *, force: bool = False, delay_ms: int | None = None) -> None:
    """Enqueue a sync of the agent ``ctx`` names (what ``sync_agent.send`` does), unless one is
    already queued and not started (the "sync requested" flag the hooks use; the sync clears it
    as it starts, so a request made after that still gets its own sync). Each stale write group
    asked for its own: one edit burst over 199 files ran 37 syncs and wrote 5x the files.
    ``delay_ms`` holds the sync back that long, so the requests of one burst find it queued."""
    def send() -> None:
        broker.enqueue(dramatiq.Message(queue_name=SYNC_QUEUE, actor_name="sync_agent", args=(ctx,),
                                        kwargs={"force": force, "reason": reason}, options={}), delay=delay_ms)

    store = None
    if not force:
        try:
            from memindex.pipeline.config.agents import settings_for
            from memindex.pipeline.config.settings import Context

            store = settings_for(Context.from_dict(ctx)).store_path
        except Exception:  # noqa: BLE001 - no config here (a compute host): just send
            store = None
    if store is None:
        send()
        return
    from memindex.workers.flags import send_once

    send_once(store, send)


def write_queue_for(store_key: str) -> str:
    """The write queue that owns a store: ``write`` with one shard (and always on the embedded
    broker, whose single writer thread serves every store), else ``write.<k>`` with
    ``k = crc32(store path) % N``: stable across processes and runs (Python's ``hash`` is salted),
    so one store's plan and writes share one FIFO queue and one writer."""
    n = write_shards()
    if n <= 1 or is_embedded(broker):
        return WRITE_QUEUE
    return f"{WRITE_QUEUE}.{zlib.crc32(store_key.encode()) % n}"
