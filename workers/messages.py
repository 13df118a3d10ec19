"""What every actor shares: the re-sync request, the group size and the retry policy.

Actors that ask for a re-sync (a stale write, a provider fallback) send a ``SyncAgent`` payload
(``workers/wire.py``), so the writer and the indexers do not import the sync module that imports them.
"""

from __future__ import annotations

from typing import Any

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import Context
from memindex.workers.flags import send_once
from memindex.workers.wire import SyncAgent, send

# Files (or records) per index/write message: big enough to amortise queue
# overhead, small enough to keep memory bounded and retries cheap.
GROUP_FILES = 32

# Retry policy shared by every pipeline actor.
RETRY: dict[str, Any] = dict(max_retries=8, min_backoff=500, max_backoff=60_000)


def request_resync(ctx: Context, reason: str, *, force: bool = False, delay_ms: int | None = None) -> None:
    """Enqueue a sync of the agent ``ctx`` names, unless one is already queued and not started
    (the "sync requested" flag the hooks use; the sync clears it as it starts, so a request made
    after that still gets its own sync). Each stale write group asked for its own: one edit burst
    over 199 files ran 37 syncs and wrote 5x the files. ``delay_ms`` holds the sync back that
    long, so the requests of one burst find it queued."""
    def enqueue() -> None:
        send(SyncAgent(ctx, force, reason), delay_ms=delay_ms)

    store = None
    if not force:
        try:
            store = settings_for(ctx).store_path
        except Exception:  # noqa: BLE001 - no config here (a compute host): just send
            store = None
    if store is None:
        enqueue()
        return
    send_once(store, enqueue)

