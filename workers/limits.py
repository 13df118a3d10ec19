"""Cross-process limits on Redis: concurrent embedding requests per provider.

Each slot is a lease: a Redis sorted set per provider holds one member per
holder, scored by when its lease expires. A holder's process renews its leases
on a heartbeat while it holds them, and gives each back when done, so a
process killed mid-request (SIGKILL, OOM, a lost container) loses its slots
within one lease period instead of leaking them. (dramatiq's
``ConcurrentRateLimiter`` kept one counter whose TTL every acquire reset: a
leaked slot never expired while traffic flowed.) Acquisition waits for a
slot, retried with a short jittered sleep.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
import weakref
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Mapping

if TYPE_CHECKING:  # (types only: redis loads with a Redis broker)
    from dramatiq.brokers.redis import RedisBroker

from dramatiq.middleware import Shutdown

from memindex.pipeline.config import environ
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.limiter import set_limiter_factory

log = logging.getLogger("memindex.limits")

# A dead holder's slot comes back after at most this long; live holders renew every third of it.
LEASE_MS = environ.SLOT_LEASE_MS.get()
HEARTBEAT_S = LEASE_MS / 3000

# KEYS[1] = the provider's lease set; ARGV = cap, holder id, lease ms.
# Expired leases are dropped first (their count is returned so the caller can say so);
# the clock is Redis's own, so workers on hosts with skewed clocks agree.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reclaimed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 2)
  return {1, reclaimed}
end
return {0, reclaimed}
"""

# KEYS[1] = the lease set; ARGV = lease ms, holder ids. Renews only leases still held (XX).
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return 0
"""


# Every limiter of this process, so a stopping worker can give back what is still held;
# once the worker is stopping, no request of this process takes a new slot.
_limiters: "weakref.WeakSet[RedisConcurrencyLimiter]" = weakref.WeakSet()
_stopping = threading.Event()


def lease_key(provider_id: str, namespace: str = "memindex") -> str:
    return f"{namespace}:embed-slots:{provider_id}"


class RedisConcurrencyLimiter:
    def __init__(self, client: Any, default_cap: int = 4, caps: Mapping[str, int] | None = None,
                 namespace: str = "memindex") -> None:
        self.client = client
        self.default_cap = max(1, default_cap)
        self.caps = {**registry.default_caps(), **(caps or {})}
        self.namespace = namespace
        self._held: dict[str, str] = {}  # holder id -> lease key, renewed by the heartbeat
        # Holders asking for a slot right now (not renewed: Redis may not have granted them one).
        # Kept until their release really reached Redis, so release_all at shutdown covers a
        # release that a stopping worker's Shutdown interrupted (it lands at any bytecode).
        self._asking: dict[str, str] = {}
        self._lock = threading.Lock()
        self._heartbeat: threading.Thread | None = None
        if client is not None:
            self._acquire_script = client.register_script(_ACQUIRE)
            self._renew_script = client.register_script(_RENEW)
        _limiters.add(self)

    def cap(self, provider_id: str) -> int:
        return max(1, int(self.caps.get(provider_id) or registry.concurrency_cap(provider_id) or self.default_cap))

    @contextmanager
    def acquire(self, provider_id: str) -> Iterator[None]:
        key = lease_key(provider_id, self.namespace)
        holder = uuid.uuid4().hex
        delay = 0.01
        # The release is in ``finally`` from the first attempt on: an interruption (a stopping
        # worker's Shutdown) can land right after Redis granted the slot, before we know it.
        with self._lock:
            self._asking[holder] = key
        try:
            while True:
                if _stopping.is_set():
                    raise Shutdown("the worker is stopping: no new embedding requests")
                ok, reclaimed = self._acquire_script(keys=[key], args=[self.cap(provider_id), holder, LEASE_MS])
                if reclaimed:
                    log.warning("%s: reclaimed %d embedding slot(s) whose holder stopped renewing its lease "
                                "(a worker died or was killed, or Redis was unreachable meanwhile)", provider_id, reclaimed)
                if ok:
                    break
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.25)
            self._hold(holder, key)
            yield
        finally:
            self._release(holder, key)

    def _release(self, holder: str, key: str) -> None:
        try:
            self.client.zrem(key, holder)
        except Exception as exc:  # noqa: BLE001 - the lease expires on its own
            log.warning("%s: could not release an embedding slot (%s); it expires within %d s",
                        key.rsplit(":", 1)[-1], exc, LEASE_MS // 1000)
        # Forgotten only once the ZREM returned: interrupted before, release_all does it again.
        with self._lock:
            self._held.pop(holder, None)
            self._asking.pop(holder, None)

    def release_all(self) -> int:
        with self._lock:
            held = {**self._asking, **self._held}
        for holder, key in held.items():
            self._release(holder, key)
        return len(held)

    def _hold(self, holder: str, key: str) -> None:
        with self._lock:
            self._held[holder] = key
            if self._heartbeat is None or not self._heartbeat.is_alive():
                self._heartbeat = threading.Thread(target=self._renew_loop, name="memindex-slot-heartbeat",
                                                   daemon=True)
                self._heartbeat.start()

    def _renew_loop(self) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            with self._lock:
                by_key: dict[str, list[str]] = {}
                for holder, key in self._held.items():
                    by_key.setdefault(key, []).append(holder)
                if not by_key:
                    self._heartbeat = None
                    return
            for key, holders in by_key.items():
                try:
                    self._renew_script(keys=[key], args=[LEASE_MS, *holders])
                except Exception as exc:  # noqa: BLE001 - retried on the next beat
                    log.warning("could not renew %d embedding slot lease(s): %s", len(holders), exc)


def slots_held(client: Any, provider_id: str, namespace: str = "memindex") -> int:
    """Live leases on a provider's slots (expired ones not counted)."""
    key = lease_key(provider_id, namespace)
    return int(client.zcount(key, int(time.time() * 1000), "+inf"))


def stop_acquiring() -> None:
    """A stopping worker finishes the requests in flight and starts no more: each message
    still embedding is handed back at its next request (dramatiq's ``Shutdown``: retried)."""
    _stopping.set()


def release_all() -> None:
    """Give back every slot this process still holds (a worker stopping before its requests end)."""
    n = sum(limiter.release_all() for limiter in list(_limiters))
    if n:
        log.info("released %d embedding slot(s) still held at shutdown", n)


def install(broker: RedisBroker) -> None:
    """Make every embedding service in this process use the Redis limiter."""
    client = broker.client
    set_limiter_factory(lambda cap: RedisConcurrencyLimiter(client, cap))
