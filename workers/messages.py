"""The queue boundary: queue names, message options, and sends that need no actor import.

Actors that ask for a re-sync (a stale write, a provider fallback) enqueue the
``sync_agent`` message by name, so the writer and the indexers do not import
the sync module that imports them.
"""

from __future__ import annotations

from typing import Any

import dramatiq

from memindex.workers.broker import EMBED_QUEUE, SYNC_QUEUE, WRITE_QUEUE, broker

# Retry policy shared by every pipeline actor.
# Files (or records) per index/write message: big enough to amortise queue
# overhead, small enough to keep memory bounded and retries cheap.
GROUP_FILES = 32

RETRY: dict[str, Any] = dict(max_retries=8, min_backoff=500, max_backoff=60_000)


def request_resync(ctx: dict[str, Any], reason: str, *, force: bool = False) -> None:
    """Enqueue a sync of the agent ``ctx`` names (what ``sync_agent.send`` does)."""
    broker.enqueue(dramatiq.Message(queue_name=SYNC_QUEUE, actor_name="sync_agent", args=(ctx,),
                                    kwargs={"force": force, "reason": reason}, options={}))
