"""Broker setup: Redis when a URL is configured, otherwise the embedded default.

The embedded default is dramatiq's in-memory ``StubBroker`` with worker
threads in this process: the very same actors run, no server needed (P5).
Importing this module installs the broker globally, which is what dramatiq's
``dramatiq memindex.workers.actors`` CLI expects.
"""

from __future__ import annotations

import logging
import os

import dramatiq
from dramatiq.middleware import AgeLimit, Callbacks, Pipelines, Retries, ShutdownNotifications, TimeLimit

log = logging.getLogger("memindex.broker")

BROKER_ENV = "MEMINDEX_BROKER_URL"
QUEUES = ("sync", "embed", "batch", "write")


def broker_url() -> str | None:
    url = os.environ.get(BROKER_ENV, "").strip()
    return url or None


def redact(url: str) -> str:
    """Never log a password that rides in a broker URL."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def _middleware() -> list:
    return [AgeLimit(), TimeLimit(), ShutdownNotifications(), Callbacks(), Pipelines(), Retries()]


# An idle Redis consumer backs off up to the worker timeout (1 s by default)
# between polls, and a sync crosses three queues (sync -> embed -> write):
# capping the idle poll keeps write-to-searchable latency low for ~10 cheap
# Lua calls per second per idle queue.
POLL_MS = int(os.environ.get("MEMINDEX_POLL_MS", "100"))


def _redis_broker_class():
    from dramatiq.brokers.redis import RedisBroker

    class _RedisBroker(RedisBroker):
        def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000):
            return super().consume(queue_name, prefetch, min(timeout, POLL_MS))

    return _RedisBroker


def make_broker() -> dramatiq.Broker:
    url = broker_url()
    if url:
        broker = _redis_broker_class()(url=url, middleware=_middleware(), namespace="memindex")
        log.debug("broker: redis at %s", redact(url))
    else:
        from dramatiq.brokers.stub import StubBroker

        broker = StubBroker(middleware=_middleware(), fail_fast_default=False)
        broker.emit_after("process_boot")
    return broker


def is_embedded(broker: dramatiq.Broker | None = None) -> bool:
    from dramatiq.brokers.stub import StubBroker

    return isinstance(broker or dramatiq.get_broker(), StubBroker)


class _DropDuplicateWorkerWarning(logging.Filter):
    """Two in-process Workers (pool + single writer) share one broker by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "same type twice" not in record.getMessage()


logging.getLogger("dramatiq.broker.StubBroker").addFilter(_DropDuplicateWorkerWarning())

broker = make_broker()
dramatiq.set_broker(broker)
for _q in QUEUES:
    broker.declare_queue(_q)
if not is_embedded(broker):
    from memindex.workers.limits import install as _install_limits

    _install_limits(broker)
