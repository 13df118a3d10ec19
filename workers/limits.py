"""Cross-process limits on Redis: concurrent embedding requests per provider.

dramatiq's ``ConcurrentRateLimiter`` is non-blocking (acquire succeeds or
not); a request must wait for a slot instead, so acquisition is retried with
a short sleep. Slots expire after ``ttl`` so a killed worker cannot hold one
forever.
"""

from __future__ import annotations

import random
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Mapping

from dramatiq.rate_limits import ConcurrentRateLimiter
from dramatiq.rate_limits.backends import RedisBackend

from memindex.pipeline.embeddings import registry

SLOT_TTL_MS = 10 * 60_000


class RedisConcurrencyLimiter:
    def __init__(self, client, default_cap: int = 4, caps: Mapping[str, int] | None = None,
                 namespace: str = "memindex") -> None:
        self.backend = RedisBackend(client=client)
        self.default_cap = max(1, default_cap)
        self.caps = {**registry.default_caps(), **(caps or {})}
        self.namespace = namespace
        self._limiters: dict[str, ConcurrentRateLimiter] = {}
        self._lock = threading.Lock()

    def _limiter(self, provider_id: str) -> ConcurrentRateLimiter:
        with self._lock:
            lim = self._limiters.get(provider_id)
            if lim is None:
                cap = int(self.caps.get(provider_id) or registry.concurrency_cap(provider_id) or self.default_cap)
                lim = ConcurrentRateLimiter(self.backend, f"{self.namespace}:embed:{provider_id}",
                                            limit=max(1, cap), ttl=SLOT_TTL_MS)
                self._limiters[provider_id] = lim
            return lim

    @contextmanager
    def acquire(self, provider_id: str) -> Iterator[None]:
        lim = self._limiter(provider_id)
        delay = 0.01
        while True:
            with lim.acquire(raise_on_failure=False) as ok:
                if ok:
                    yield
                    return
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.25)


def install(broker) -> None:
    """Make every embedding service in this process use the Redis limiter."""
    from memindex.pipeline.embeddings.limiter import set_limiter_factory

    client = broker.client
    set_limiter_factory(lambda cap: RedisConcurrencyLimiter(client, cap))
