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
from typing import Any, Callable, TypeVar

from memindex.pipeline.config import environ

T = TypeVar("T")

# One thread by default: each extra thread running Python (ranking) competes with the
# loop for the GIL, and with two the loop stalled 30-60 ms under 50 concurrent searches.
POOL_THREADS = environ.ASYNC_THREADS.get()

# Calls that mostly wait for another process (a qmd search, up to its timeout) get threads of
# their own: one hung qmd must not hold the thread every other agent's search and get queue for.
WAIT_POOL_THREADS = environ.ASYNC_WAIT_THREADS.get()

# Searches whose query vector is a request to a remote provider: threads per agent, so one
# agent's slow or hung endpoint never holds the shared thread every other agent's search and get
# queue for (8 searches at 2 s each held a plain `get` of another agent for 16 s on one server).
EMBED_POOL_THREADS = environ.ASYNC_EMBED_THREADS.get()

_lock = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}


def _forget_pools_in_child() -> None:
    """A forked child (a pre-forking server that warmed up first) inherits the pools but not
    their threads: every ``asearch`` waited forever on a thread that does not exist there."""
    global _lock
    _lock = threading.Lock()  # (a fork while another thread held it would leave it held)
    _pools.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_in_child)


def _executor(kind: str = "async") -> ThreadPoolExecutor:
    with _lock:
        pool = _pools.get(kind)
        if pool is None:
            size = (POOL_THREADS if kind == "async" else EMBED_POOL_THREADS if kind.startswith("embed:")
                    else WAIT_POOL_THREADS)
            pool = _pools[kind] = ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"memindex-{kind}")
        return pool


async def _run(kind: str, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(kind), functools.partial(fn, *args, **kwargs))


async def run_in_pool(fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
    """``fn(*args, **kwargs)`` on the shared pool, awaited without blocking the running loop."""
    return await _run("async", fn, args, kwargs)


async def run_embedding(owner: str, fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
    """``run_in_pool`` for a call that waits on ``owner``'s embedding endpoint: ``owner``'s threads."""
    return await _run(f"embed:{owner}", fn, args, kwargs)


async def run_waiting(fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
    """``run_in_pool`` for work that waits on a subprocess: its own pool (``WAIT_POOL_THREADS``)."""
    return await _run("wait", fn, args, kwargs)
