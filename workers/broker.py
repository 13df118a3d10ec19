"""Broker setup: Redis when a URL is configured, otherwise the embedded default; the bytes a
message is on it (``MessageEncoder``).

The embedded default is dramatiq's in-memory ``StubBroker`` with worker
threads in this process: the very same actors run, no server needed (P5).
Importing this module builds nothing and connects to nothing: the first
``get_broker()`` builds the broker, declares the queues on it and installs it
as dramatiq's global one. Every actor imported so far is declared on it then,
and every one imported later as it registers (``workers/wire.py``): a process
that consumes imports the actors first (``dramatiq
memindex.workers.actors:get_broker`` for ``memindex worker``,
``workers/embedded.py`` for the embedded default); one that only sends needs
none declared.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from typing import TYPE_CHECKING, Any, Callable, Iterable, cast

import dramatiq
import msgspec
from dramatiq.encoder import Encoder
from dramatiq.errors import DecodeError
from dramatiq.middleware import AgeLimit, Callbacks, Pipelines, Retries, TimeLimit

from memindex.pipeline.config import environ
from memindex.workers.endpoint import broker_error_line as broker_error_line
from memindex.workers.endpoint import broker_url as broker_url
from memindex.workers.endpoint import oom_line as oom_line
from memindex.workers.endpoint import redact as redact
from memindex.workers.endpoint import refused_credentials as refused_credentials
from memindex.workers.logs import out_of_memory as out_of_memory
from memindex.workers.failures import FailureReporter, install_log_filters as _install_log_filters
from memindex.workers import metrics
from memindex.workers.guard import ContextGuard
from memindex.workers.lifecycle import GroupCommit, HandBackOnStop, InterruptEmbedsOnStop, Lifecycle, WorkContext
from memindex.workers.limits import install as install_limits

if TYPE_CHECKING:  # (only for types: redis is imported when a Redis broker is built, never before)
    from dramatiq.brokers.redis import RedisBroker
    from dramatiq.brokers.stub import StubBroker

log = logging.getLogger("memindex.broker")

SYNC_QUEUE, EMBED_QUEUE, BATCH_QUEUE, WRITE_QUEUE = "sync", "embed", "batch", "write"
QUEUES = (SYNC_QUEUE, EMBED_QUEUE, BATCH_QUEUE, WRITE_QUEUE)
# Write-queue shards (issue 18): N > 1 routes each store to ``write.<k>`` (write_queue_for, below);
# every process of a deployment must agree on N (`memindex worker --writer --shard K/N` checks).
SHARDS_ENV = environ.WRITE_SHARDS.name


SHARDS_KEY = "memindex:write-shards"  # the N the deployment's first writer recorded
# (when read, the N recorded in Redis or None before any was seen): re-read at most every 5 s
_shards_seen: list[Any] = [0.0, None]
_shards_warned: set[int] = set()


def write_shards() -> int:
    """N: what the deployment's writers recorded in Redis; before any did (or without Redis),
    ``MEMINDEX_WRITE_SHARDS``, else 1.

    The recorded N wins over this process's variable: writers consume ``write.0 .. write.<N-1>`` of
    the N they recorded, and a process with another N (a compute host with an old ``.env``) routed
    writes to shards nobody consumes, while `index`, `queues` and `health` - counting their own N's
    shards only - all said done. It is said once, as a warning."""
    mine = configured_shards()
    url = broker_url()
    if not url or _broker is None:
        return mine or 1

    now = time.monotonic()
    if now - _shards_seen[0] > 5.0:
        _shards_seen[0] = now
        try:
            # A missing key keeps the last N seen: Redis restarted without its data loses it until
            # a writer's heartbeat records it again, and N = 1 meanwhile routed writes to `write`,
            # which no sharded writer consumes. (To change N, restart every process: README.)
            _shards_seen[1] = recorded_write_shards() or _shards_seen[1]
        except Exception:  # noqa: BLE001 - Redis down: sends fail anyway; keep the last value
            pass
    recorded = _shards_seen[1]
    if recorded is None:  # nothing recorded yet: this process's own N
        return mine or 1
    if mine is not None and mine != recorded and mine not in _shards_warned:
        _shards_warned.add(mine)
        log.warning("%s=%d here, but this deployment's writers run %d write shard(s) (recorded in Redis): "
                    "routing to their %d; fix the variable where this process starts", SHARDS_ENV, mine,
                    recorded, recorded)
    return int(recorded)


def configured_shards() -> int | None:
    """This process's ``MEMINDEX_WRITE_SHARDS`` (None: unset). Read at each call: `memindex worker
    --writer --shard K/N` sets it for the worker processes it starts."""
    return environ.WRITE_SHARDS.get()


def recorded_write_shards() -> int | None:
    """The N this deployment's writers recorded in Redis, None if none has (or no Redis)."""
    rb = redis_broker() if broker_url() else None
    if rb is None:
        return None
    raw = rb.client.get(SHARDS_KEY)
    return int(raw) if raw else None


def _shard_record(queues: Iterable[str]) -> tuple[str, int] | None:
    """A writer's N, for its heartbeat to record again and again (workers/lifecycle.py)."""
    n = configured_shards()
    return (SHARDS_KEY, n) if n is not None and any(map(is_write_queue, queues)) else None


def is_write_queue(queue_name: str) -> bool:
    """``write``, a shard ``write.<k>``, or the delay queue of either (``….DQ``)."""
    queue = queue_name.removesuffix(".DQ")
    return queue == WRITE_QUEUE or queue.startswith(f"{WRITE_QUEUE}.")


def write_queue_for(store_key: str) -> str:
    """The write queue that owns a store: ``write`` with one shard (and always on the embedded
    broker, whose single writer thread serves every store), else ``write.<k>`` with
    ``k = crc32(store path) % N``: stable across processes and runs (Python's ``hash`` is salted),
    so one store's plan and writes share one FIFO queue and one writer."""
    if is_embedded(get_broker()):  # (first: it decides without reading the environment or Redis)
        return WRITE_QUEUE
    n = write_shards()
    if n <= 1:
        return WRITE_QUEUE
    return f"{WRITE_QUEUE}.{zlib.crc32(store_key.encode()) % n}"


def shard_queues() -> tuple[str, ...]:
    """``write.0`` .. ``write.<N-1>`` when sharded (Redis only), else none."""
    n = write_shards()
    return tuple(f"{WRITE_QUEUE}.{k}" for k in range(n)) if n > 1 and broker_url() else ()


def redis_full(client: Any) -> bool:
    """Does this Redis refuse writes for memory now (used >= maxmemory under noeviction)?"""
    try:
        info = client.info("memory")
    except Exception:  # noqa: BLE001 - a broker that does not answer is another line's story
        return False
    limit = int(info.get("maxmemory") or 0)
    return bool(limit) and int(info.get("used_memory") or 0) >= limit and info.get("maxmemory_policy") == "noeviction"


def full_probe() -> Callable[[], bool] | None:
    """For a metrics collector: a call saying whether the deployment's Redis is out of memory now
    (None on the embedded broker)."""
    rb = redis_broker()
    return None if rb is None else (lambda: redis_full(rb.client))


def oom_refusals(client: Any) -> int | None:
    """How many commands this Redis refused for memory since its start (None: it does not say)."""
    try:
        stat = client.info("errorstats").get("errorstat_OOM")
    except Exception:  # noqa: BLE001 - unreachable, or a Redis before 6.2
        return None
    return int(stat.get("count", 0)) if isinstance(stat, dict) else 0


def _middleware() -> list[dramatiq.Middleware]:
    # "after" hooks run in reverse order: FailureReporter, listed before Retries, sees the
    # message after Retries has decided whether it failed for good.
    # WorkContext first: its "before" hook runs first and its "after" hook last, so every line
    # logged about a message (FailureReporter's included) names it.
    # GroupCommit second: its "after" hook (reverse order: next to last) commits a writer's held
    # transaction inside WorkContext's, so its log lines name the message; all run before the ack.
    return [WorkContext(), GroupCommit(), FailureReporter(), AgeLimit(), TimeLimit(), InterruptEmbedsOnStop(EMBED_QUEUE), Callbacks(),
            Pipelines(), Retries(), HandBackOnStop()]


# An idle Redis consumer backs off up to the worker timeout (1 s by default)
# between polls, and a sync crosses three queues (sync -> embed -> write):
# capping the idle poll keeps write-to-searchable latency low for ~10 cheap
# Lua calls per second per idle queue.
POLL_MS = environ.POLL_MS.get()


# The broker commands that settle a message already taken (acknowledge, reject, hand back): when
# Redis refuses them for memory they are retried like a lost connection's, until it takes writes.
_RETRIED_WHEN_FULL = frozenset({"ack", "nack", "requeue"})
REQUEUE_WAIT_S = 60.0  # a consumer handing back its delayed messages waits this long for room


def _redis_broker_class() -> type[RedisBroker]:
    from dramatiq.brokers.redis import RedisBroker  # (third-party: redis only for a Redis broker)

    class _RedisBroker(RedisBroker):
        def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> dramatiq.Consumer:
            return super().consume(queue_name, prefetch, min(timeout, POLL_MS))

        def _dispatch(self, command: str) -> Callable[..., Any]:
            do: Callable[..., Any] = super()._dispatch(command)  # type: ignore[no-untyped-call]  # dramatiq's is untyped
            if command not in _RETRIED_WHEN_FULL:
                return do

            def until_it_takes_writes(*args: Any) -> Any:
                # dramatiq retries an acknowledgement (every 5 s) only after a connection error,
                # and hands back a consumer's delayed messages only once: an OOM left the message in
                # this live worker's ack set for good (a requeue's even killed its consumer thread):
                # `index` waited on it forever, and the queue stayed wedged once Redis had room.
                waited = 0.0
                while True:
                    try:
                        return do(*args)
                    except Exception as exc:
                        if not out_of_memory(exc):
                            raise
                        if command != "requeue" or waited >= REQUEUE_WAIT_S:
                            # ack, nack: raised as the connection error dramatiq retries; a
                            # requeue that waited long enough: as the one its close() lets pass
                            # (the messages come back when this worker stops: maintenance).
                            import redis
                            from dramatiq.brokers.redis import ConnectionClosed  # type: ignore[attr-defined]  # (not in its __all__)

                            err = redis.ConnectionError(f"{exc} ({command})")
                            closed = ConnectionClosed(err)  # type: ignore[no-untyped-call]  # dramatiq's errors are untyped
                            raise (err if command != "requeue" else closed) from exc
                    time.sleep(1.0)
                    waited += 1.0

            return until_it_takes_writes

    return _RedisBroker


# Recovery of a dead worker's messages: dramatiq requeues the unacked messages of
# a worker whose heartbeat is older than HEARTBEAT_TIMEOUT_MS during "maintenance",
# which runs on MAINTENANCE_CHANCE in a million broker commands (default 60 s and
# 1000: several minutes in practice). Every live consumer heartbeats on each poll
# (POLL_MS), so 15 s cannot mistake a busy worker for a dead one, and a 2 %
# chance at ~10 polls/s/queue runs maintenance every few seconds.
HEARTBEAT_TIMEOUT_MS = 15_000
REDIS_CONNECT_TIMEOUT_S = 5.0
REDIS_SOCKET_TIMEOUT_S = 30.0
MAINTENANCE_CHANCE = 20_000


def make_broker() -> dramatiq.Broker:
    url = broker_url()
    if url:
        import redis  # (third-party, only for a Redis broker: the embedded default never loads it)

        # Bounded socket waits: a hung Redis fails a command after REDIS_SOCKET_TIMEOUT_S
        # instead of blocking a CLI command (or a sync request) forever.
        client = redis.Redis.from_url(url, socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
                                      socket_timeout=REDIS_SOCKET_TIMEOUT_S)
        extra = metrics.middleware(is_write_queue) if metrics.enabled() else []
        broker: dramatiq.Broker = _redis_broker_class()(client=client, middleware=[*_middleware(), ContextGuard(), Lifecycle(QUEUES, _shard_record),
                                                                  *extra],
                                       namespace="memindex",
                                       heartbeat_timeout=HEARTBEAT_TIMEOUT_MS,
                                       maintenance_chance=MAINTENANCE_CHANCE)
        log.debug("broker: redis at %s", redact(url))
    else:
        from dramatiq.brokers.stub import StubBroker

        broker = StubBroker(middleware=_middleware(), fail_fast_default=False)
        broker.emit_after("process_boot")
    return broker


def is_embedded(broker: dramatiq.Broker | None = None) -> bool:
    from dramatiq.brokers.stub import StubBroker  # (third-party; cheap once dramatiq is loaded)

    return isinstance(broker or get_broker(), StubBroker)


# A broker is one of two kinds (make_broker): these say which, typed, without importing redis.
def redis_broker(broker: dramatiq.Broker | None = None) -> RedisBroker | None:
    """This process's broker (or ``broker``) when it is the Redis one, else None (embedded)."""
    b = broker or get_broker()
    return None if is_embedded(b) else cast("RedisBroker", b)


def redis_of(broker: dramatiq.Broker | None = None) -> RedisBroker:
    """``redis_broker``, for code past its embedded case (the broker is the Redis one there)."""
    rb = redis_broker(broker)
    if rb is None:
        raise RuntimeError("the embedded broker has no Redis")  # (a caller's bug: it checked is_embedded first)
    return rb


def stub_broker(broker: dramatiq.Broker | None = None) -> StubBroker | None:
    """This process's broker (or ``broker``) when it is the embedded one, else None (Redis)."""
    b = broker or get_broker()
    return cast("StubBroker", b) if is_embedded(b) else None


class _DropDuplicateWorkerWarning(logging.Filter):
    """Two in-process Workers (pool + single writer) share one broker by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "same type twice" not in record.getMessage()


class MessageEncoder(Encoder):
    """The queue's message encoder: JSON, as with dramatiq's default, written and read by msgspec.

    The wire format does not change (messages queued by any version decode alike); only the speed
    does. A cold index sends every chunk's text through the writer's queue, and the json module's
    round trip of those messages was ~0.3 s of a 1,000-file index's ~3.3 s of CPU; msgspec does it
    in about a quarter of that. What msgspec will not write (a str holding a lone surrogate, which the
    json module escapes) or read goes through the json module instead, so nothing that encoded
    before fails now. A non-finite float would be written as null: no message of ours carries one
    (vectors travel as base64 float32, pipeline/index/records.py).
    """

    def encode(self, data: Any) -> bytes:
        try:
            return msgspec.json.encode(data)
        except (msgspec.EncodeError, UnicodeEncodeError, TypeError, OverflowError):
            return json.dumps(data, separators=(",", ":")).encode("utf-8")

    def decode(self, data: bytes) -> Any:
        try:
            return msgspec.json.decode(data)
        except msgspec.DecodeError:
            pass
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise DecodeError(f"failed to decode message {data[:200]!r}", data, exc) from None  # type: ignore[no-untyped-call]  # dramatiq's errors are untyped


_broker: dramatiq.Broker | None = None
_broker_lock = threading.RLock()
# Called with each broker set_broker installs: workers/wire.py declares every actor on it.
_on_install: list[Callable[[dramatiq.Broker], None]] = []


def installed() -> dramatiq.Broker | None:
    """The broker installed so far (None: none yet; nothing is built here)."""
    return _broker


def on_install(hook: Callable[[dramatiq.Broker], None]) -> None:
    """Call ``hook(broker)`` for the broker installed now (if any) and every one installed later."""
    with _broker_lock:
        _on_install.append(hook)
        if _broker is not None:
            hook(_broker)


def get_broker() -> dramatiq.Broker:
    """This process's broker, built (Redis or embedded, from ``MEMINDEX_BROKER_URL``) and
    installed on first use. Nothing before that call builds one or connects anywhere."""
    if _broker is None:
        with _broker_lock:
            if _broker is None:
                set_broker(make_broker())
    assert _broker is not None  # (set_broker just installed it)
    return _broker


def set_broker(broker: dramatiq.Broker) -> None:
    """Install ``broker`` as this process's (and dramatiq's global) broker: its queues declared,
    every actor declared on it (the ``on_install`` hooks), Redis's rate limiter installed."""
    global _broker
    with _broker_lock:
        logging.getLogger("dramatiq.broker.StubBroker").addFilter(_DropDuplicateWorkerWarning())
        _install_log_filters()
        dramatiq.set_encoder(MessageEncoder())
        # Declared without asking Redis: a no-op `index` must not wait on a hung Redis (it waited its 30 s
        # socket timeout here). A writer's N is in its environment (`--shard K/N` sets it); other
        # processes send to the recorded shards (write_queue_for) without declaring them.
        own_shards = (configured_shards() or 1) if broker_url() else 1
        for q in (*QUEUES, *(f"{WRITE_QUEUE}.{k}" for k in range(own_shards) if own_shards > 1)):
            broker.declare_queue(q)
        _broker = broker
        for hook in _on_install:
            hook(broker)
        dramatiq.set_broker(broker)
        rb = redis_broker(broker)
        if rb is not None:
            install_limits(rb)


def __getattr__(name: str) -> Any:
    """``broker``: the callers that still read the module attribute get the lazy broker."""
    if name == "broker":
        return get_broker()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
