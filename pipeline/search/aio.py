"""Async access for event-loop runtimes: the blocking work runs in one small shared thread pool.

SQLite reads, file reads and the embedding SDKs release the GIL, so a few
threads serve many awaiting coroutines while the loop keeps running. The pool
is bounded: a burst of calls queues for a thread instead of starting one (and
a SQLite connection, one per thread) per call, and fewer threads contending
for the GIL keep the loop's own turns short.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

T = TypeVar("T")

# One thread by default: each extra thread running Python (ranking) competes with the
# loop for the GIL, and with two the loop stalled 30-60 ms under 50 concurrent searches.
POOL_THREADS = int(os.environ.get("MEMINDEX_ASYNC_THREADS", "1"))

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, POOL_THREADS), thread_name_prefix="memindex-async")
        return _pool


async def run_in_pool(fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
    """``fn(*args, **kwargs)`` on the shared pool, awaited without blocking the running loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))
