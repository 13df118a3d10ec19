"""Caps how many embedding requests run at once per provider, in this process.

The queue layer may swap in a cross-process (Redis) limiter; anything with an
``acquire(provider_id)`` context manager fits.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, ContextManager, Iterator, Mapping, Protocol

from memindex.pipeline.embeddings import registry


class Limiter(Protocol):
    def acquire(self, provider_id: str) -> ContextManager[None]:
        """Hold one of the provider's slots for the duration of a request."""


class ConcurrencyLimiter:
    """A registry of semaphores, one per provider id, created on first use.

    A provider's cap: ``caps`` given here, else the provider registry's
    ``max_concurrency`` (ollama, local: 1), else ``default_cap``.
    """

    def __init__(self, default_cap: int = 4, caps: Mapping[str, int] | None = None) -> None:
        if default_cap < 1:
            raise ValueError("default_cap must be >= 1")
        self.default_cap = default_cap
        self.caps = {**registry.default_caps(), **(caps or {})}
        self._sems: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    def _sem(self, provider_id: str) -> threading.BoundedSemaphore:
        with self._lock:
            sem = self._sems.get(provider_id)
            if sem is None:
                cap = self.caps.get(provider_id) or registry.concurrency_cap(provider_id) or self.default_cap
                sem = threading.BoundedSemaphore(max(1, int(cap)))
                self._sems[provider_id] = sem
            return sem

    @contextmanager
    def acquire(self, provider_id: str) -> Iterator[None]:
        sem = self._sem(provider_id)
        sem.acquire()
        try:
            yield
        finally:
            sem.release()


_default: ConcurrencyLimiter | None = None
_default_lock = threading.Lock()


def default_limiter() -> ConcurrencyLimiter:
    """The process-wide limiter used when a service is not given one."""
    global _default
    with _default_lock:
        if _default is None:
            _default = ConcurrencyLimiter()
        return _default


# The queue layer installs a cross-process limiter factory (Redis) here; the
# library itself only knows the in-process one.
_factory: "Callable[[int], Limiter] | None" = None


def set_limiter_factory(factory: "Callable[[int], Limiter] | None") -> None:
    global _factory
    _factory = factory


def make_limiter(default_cap: int) -> Limiter:
    """A limiter with ``default_cap`` concurrent requests per provider."""
    if _factory is not None:
        return _factory(default_cap)
    return ConcurrencyLimiter(default_cap=default_cap)
