"""Cross-worker coordination for batch jobs: in-flight slots and the agent registry.

Slots: at most ``remote.batch.concurrency`` jobs in flight per provider across
all workers. A slot is held from submission until the job is collected or
cancelled - across many messages, so it is a lease keyed by the job, not a
semaphore around one call: a Redis sorted set (member = job, score = expiry)
on Redis, a dict in this process on the embedded broker. The poller renews
it; a job whose workers all died loses it after ``ttl``.

Registry: which agents have batch work, so a worker that (re)starts can find
jobs whose poller died (it cannot know every state dir otherwise).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from memindex.workers.broker import get_broker, is_embedded, on_install

NS = "memindex:batch"

_ACQUIRE = """
local key, member = KEYS[1], ARGV[1]
local now, expires, limit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if redis.call('ZSCORE', key, member) or redis.call('ZCARD', key) < limit then
  redis.call('ZADD', key, expires, member)
  return 1
end
return 0
"""


class _LocalSlots:
    def __init__(self) -> None:
        self._held: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    def acquire(self, provider: str, holder: str, limit: int, ttl_s: float) -> bool:
        now = time.time()
        with self._lock:
            held = self._held.setdefault(provider, {})
            for k in [k for k, exp in held.items() if exp < now]:
                del held[k]
            if holder in held or len(held) < limit:
                held[holder] = now + ttl_s
                return True
            return False

    def renew(self, provider: str, holder: str, ttl_s: float) -> None:
        with self._lock:
            self._held.setdefault(provider, {})[holder] = time.time() + ttl_s

    def release(self, provider: str, holder: str) -> None:
        with self._lock:
            self._held.get(provider, {}).pop(holder, None)

    def count(self, provider: str) -> int:
        now = time.time()
        with self._lock:
            return sum(1 for exp in self._held.get(provider, {}).values() if exp >= now)


class _RedisSlots:
    def __init__(self, client: Any) -> None:
        self.client = client
        self._acquire = client.register_script(_ACQUIRE)

    def _key(self, provider: str) -> str:
        return f"{NS}:slots:{provider}"

    def acquire(self, provider: str, holder: str, limit: int, ttl_s: float) -> bool:
        now = time.time()
        return bool(self._acquire(keys=[self._key(provider)], args=[holder, now, now + ttl_s, limit]))

    def renew(self, provider: str, holder: str, ttl_s: float) -> None:
        self.client.zadd(self._key(provider), {holder: time.time() + ttl_s})

    def release(self, provider: str, holder: str) -> None:
        self.client.zrem(self._key(provider), holder)

    def count(self, provider: str) -> int:
        return int(self.client.zcount(self._key(provider), time.time(), "+inf"))


class _LocalRegistry:
    def __init__(self) -> None:
        self._agents: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def add(self, key: str, ctx: dict[str, Any]) -> None:
        with self._lock:
            self._agents[key] = dict(ctx)

    def remove(self, key: str) -> None:
        with self._lock:
            self._agents.pop(key, None)

    def all(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._agents)


class _RedisRegistry:
    def __init__(self, client: Any) -> None:
        self.client = client
        self.key = f"{NS}:agents"

    def add(self, key: str, ctx: dict[str, Any]) -> None:
        self.client.hset(self.key, key, json.dumps(ctx))

    def remove(self, key: str) -> None:
        self.client.hdel(self.key, key)

    def all(self) -> dict[str, dict[str, Any]]:
        raw = self.client.hgetall(self.key) or {}
        out = {}
        for k, v in raw.items():
            k = k.decode() if isinstance(k, bytes) else k
            try:
                out[k] = json.loads(v)
            except ValueError:
                continue
        return out


class _Coordination:
    """The broker's slots and registry: in this process on the embedded broker, in Redis otherwise.
    Chosen when a broker is installed (importing this module asks no broker anything)."""

    def __init__(self) -> None:
        self.slots: _LocalSlots | _RedisSlots | None = None
        self.registry: _LocalRegistry | _RedisRegistry | None = None

    def install(self, broker: Any) -> None:
        embedded = is_embedded(broker)
        self.slots = _LocalSlots() if embedded else _RedisSlots(broker.client)
        self.registry = _LocalRegistry() if embedded else _RedisRegistry(broker.client)


_coordination = _Coordination()
on_install(_coordination.install)


def slots() -> _LocalSlots | _RedisSlots:
    """The batch concurrency slots of this process's broker."""
    get_broker()  # (installs the broker, and with it these, on first use)
    assert _coordination.slots is not None
    return _coordination.slots


def registry() -> _LocalRegistry | _RedisRegistry:
    """The agents with batch work, as this process's broker keeps them."""
    get_broker()
    assert _coordination.registry is not None
    return _coordination.registry
