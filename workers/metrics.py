"""Prometheus metrics (``--metrics-port`` on ``worker`` and ``watch``; off by default).

Every definition is here. ``memindex worker --metrics-port P`` runs dramatiq's
own ``Prometheus`` middleware in multiprocess mode: the forked worker processes
write their samples into one directory made for that command
(``PROMETHEUS_MULTIPROC_DIR``) and dramatiq's exposition process serves all of
them, summed, on port P. So one port per ``memindex worker`` command, however
many processes it forks. ``memindex watch --metrics-port P`` is one process and
serves its own registry, with the per-agent pending gauges computed at scrape.

Series: dramatiq's ``dramatiq_messages_total``, ``..._errors_total``,
``..._retries_total``, ``..._rejects_total``, ``dramatiq_messages_inprogress``,
``dramatiq_message_duration_milliseconds``; ours:
``memindex_embedding_requests_total{provider}``,
``memindex_embedding_errors_total{provider,error}``,
``memindex_embedding_retries_total{provider}``,
``memindex_embedding_request_seconds{provider}``,
``memindex_embedding_cache_hits_total`` / ``..._lookups_total``,
``memindex_writer_transaction_seconds``;
on watch: ``memindex_files_pending{agent}``, ``memindex_oldest_pending_seconds{agent}``,
``memindex_batch_jobs{agent,state}`` (from the agent's batch state file),
``memindex_queue_messages{queue,state}`` (``memindex queues``: ready ... dead);
in a process that serves searches (``memindex serve``, ``memindex mcp``):
``memindex_searches_total{agent,transport,outcome}`` and ``memindex_search_seconds{agent,transport}``
(``memindex serve`` exposes them, with the process's other series, at ``GET /metrics``).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable

import dramatiq

from dramatiq.middleware import Middleware

from memindex.pipeline.config import environ
from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.errors import MemindexError
from memindex.pipeline.observe import hooks
from memindex.pipeline.store.reader import open_reader
from memindex.workers.lifecycle import pid_alive

PORT_ENV = environ.METRICS_PORT.name
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def worker_env(host: str, port: int) -> dict[str, str]:
    """Environment for ``dramatiq`` children that makes them export metrics on ``host:port``
    (dramatiq's own default host is every interface)."""
    db = _multiproc_dir(port)
    return {PORT_ENV: str(port), "dramatiq_prom_host": host, "dramatiq_prom_port": str(port),
            "dramatiq_prom_db": db, MULTIPROC_ENV: db}


class MetricsPortError(MemindexError):
    """The metrics port cannot be listened on (in use, no permission): one line, not a traceback."""


def _multiproc_dir(port: int) -> str:
    """One directory per user and port, reused by every ``memindex worker --metrics-port`` run.

    A fresh ``mkdtemp`` per run left one directory of sample files behind per start (the command
    execs dramatiq, so nothing of ours runs at its exit); reusing one per port bounds that to the
    processes of one run. Files of processes that are gone are removed here: their counters would
    otherwise be summed into the new run's series. A path some other user made (``/tmp`` is shared)
    is not used.
    """
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"memindex-metrics-{os.getuid()}-{port}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="memindex-metrics-")
    import stat


    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return tempfile.mkdtemp(prefix="memindex-metrics-")
    for name in os.listdir(path):
        pid = name.rsplit("_", 1)[-1].removesuffix(".db")
        if name.endswith(".db") and pid.isdigit() and not pid_alive(int(pid)):
            try:
                os.unlink(os.path.join(path, name))
            except OSError:
                pass
    return path


def enabled() -> bool:
    return bool(environ.METRICS_PORT.raw())


class Recorders:
    """Our series, and the pipeline hooks that feed them (``pipeline/observe.py``)."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Counter, Histogram

        r = registry or REGISTRY
        self.requests = Counter("memindex_embedding_requests", "Requests sent to an embedding provider.",
                                ["provider"], registry=r)
        self.errors = Counter("memindex_embedding_errors", "Embedding requests that failed, by error type.",
                              ["provider", "error"], registry=r)
        self.retries = Counter("memindex_embedding_retries", "Embedding requests sent again after a failure.",
                               ["provider"], registry=r)
        self.latency = Histogram("memindex_embedding_request_seconds", "Time of one embedding request.",
                                 ["provider"], registry=r, buckets=(.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120))
        self.cache_hits = Counter("memindex_embedding_cache_hits", "Chunks found in the embedding cache.",
                                  registry=r)
        self.cache_lookups = Counter("memindex_embedding_cache_lookups", "Chunks looked up in the embedding cache.",
                                     registry=r)
        self.writer = Histogram("memindex_writer_transaction_seconds", "Time of one writer transaction "
                                "(one write-queue message).", registry=r,
                                buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))

    def install(self) -> "Recorders":
        hooks.embedding_request = self._request
        hooks.embedding_retry = lambda provider: self.retries.labels(provider).inc()
        hooks.cache_hits = self._cache
        return self

    def _request(self, provider: str, seconds: float, error: str | None) -> None:
        self.requests.labels(provider).inc()
        self.latency.labels(provider).observe(seconds)
        if error is not None:
            self.errors.labels(provider, error).inc()

    def _cache(self, hits: int, looked_up: int) -> None:
        self.cache_hits.inc(hits)
        self.cache_lookups.inc(looked_up)


class SearchRecorders:
    """Searches a serving process answered: count by agent, transport (http: ``memindex serve``,
    mcp: ``memindex mcp``) and outcome (ok, error), and latency by agent and transport."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Counter, Histogram

        r = registry or REGISTRY
        self.searches = Counter("memindex_searches", "Searches answered by this process.",
                                ["agent", "transport", "outcome"], registry=r)
        self.latency = Histogram("memindex_search_seconds", "Time of one search, from request to payload.",
                                 ["agent", "transport"], registry=r,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))

    def observe(self, agent: str, seconds: float, ok: bool, transport: str) -> None:
        self.searches.labels(agent, transport, "ok" if ok else "error").inc()
        self.latency.labels(agent, transport).observe(seconds)


_search: list[SearchRecorders] = []


def search_recorders() -> SearchRecorders:
    """This process's search series, registered once on first use."""
    if not _search:
        _search.append(SearchRecorders())
    return _search[0]


def exposition() -> tuple[bytes, str]:
    """(body, content type) of this process's registry, for a server's ``/metrics`` route."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


class WriterTiming(Middleware):
    """Time each write-queue message's writes (the group commit after it is not included:
    this hook runs before GroupCommit's)."""

    def __init__(self, is_write_queue: Callable[[str], bool]) -> None:
        self.is_write_queue = is_write_queue  # (``write`` and its shards ``write.<k>``: the broker's own test)
        self.recorders: Recorders | None = None
        self._started: dict[str, float] = {}

    def after_process_boot(self, broker: Any) -> None:
        self.recorders = Recorders().install()  # after dramatiq's Prometheus set the multiprocess dir

    def before_process_message(self, broker: Any, message: Any) -> None:
        if self.is_write_queue(message.queue_name):
            self._started[message.message_id] = time.perf_counter()

    def after_process_message(self, broker: Any, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        start = self._started.pop(message.message_id, None)
        if start is not None and self.recorders is not None:
            self.recorders.writer.observe(time.perf_counter() - start)

    after_skip_message = after_process_message


def middleware(is_write_queue: Callable[[str], bool]) -> list[dramatiq.Middleware]:
    """The worker-side middleware when metrics are on (the broker appends it)."""
    from dramatiq.middleware.prometheus import Prometheus

    return [Prometheus(), WriterTiming(is_write_queue)]


class PendingCollector:
    """``memindex_files_pending`` and ``memindex_oldest_pending_seconds`` per agent, read from
    the stores at each scrape. A file's age counts from when this process first saw it pending."""

    def __init__(self, contexts: Iterable[Any], batch_states: Callable[[Any], dict[str, int]] | None = None,
                 broker_full: Callable[[], bool] | None = None) -> None:
        self.contexts = list(contexts)
        self.broker_full = broker_full  # None: no Redis (the broker imports this module: passed in)
        self.batch_states = batch_states  # store path -> {state: jobs} (workers.batch.backend.job_state_counts)
        self._first_seen: dict[tuple[str, str], float] = {}

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily


        pending = GaugeMetricFamily("memindex_files_pending", "Files announced by a sync, not yet written.",
                                    labels=["agent"])
        oldest = GaugeMetricFamily("memindex_oldest_pending_seconds", "Age of the oldest pending file.",
                                   labels=["agent"])
        jobs = GaugeMetricFamily("memindex_batch_jobs", "Batch-API jobs kept in this agent's batch state, by "
                                 "state (pending, in_progress, completed, failed, ...).", labels=["agent", "state"])
        now = time.monotonic()
        for ctx in self.contexts:
            counts = self.batch_states(settings_for(ctx).store_path) if self.batch_states else {}
            for state, count in sorted(counts.items()):
                jobs.add_metric([ctx.agent_id, state], count)
            reader = open_reader(settings_for(ctx))
            try:
                st = reader.state()
                gen = st.building_generation or st.live_generation
                count, paths = reader.pending_count(gen), reader.pending_paths(gen)
            finally:
                reader.close()
            seen = {(ctx.agent_id, p): self._first_seen.get((ctx.agent_id, p), now) for p in paths}
            self._first_seen = {k: v for k, v in self._first_seen.items() if k[0] != ctx.agent_id} | seen
            pending.add_metric([ctx.agent_id], count)
            oldest.add_metric([ctx.agent_id], now - min(seen.values()) if seen else 0.0)
        yield pending
        yield oldest
        yield jobs
        if self.broker_full is not None:
            full = GaugeMetricFamily("memindex_broker_out_of_memory", "1 while the deployment's Redis refuses "
                                     "writes for memory (maxmemory, noeviction): no work moves on.")
            full.add_metric([], 1.0 if self.broker_full() else 0.0)
            yield full



class QueueCollector:
    """``memindex_queue_messages{queue,state}``: what ``memindex queues`` shows, read from the
    broker at each scrape: ready, delayed, running, prefetched and dead (dead letters, refused
    ones included) messages per queue (``write.<k>`` per shard)."""

    def __init__(self, depth: Callable[[], dict[str, dict[str, int]]]) -> None:
        self.depth = depth  # workers.queues.depth, passed in (that module imports the broker, which imports this)

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily("memindex_queue_messages", "Messages per queue and state (ready, delayed, "
                                   "running, prefetched, dead), as `memindex queues` counts them.",
                                   labels=["queue", "state"])
        try:
            depth = self.depth()
        except Exception as exc:  # noqa: BLE001 - Redis away: no sample (absent, not a false zero)
            import logging

            logging.getLogger("memindex.metrics").debug("queue depth unavailable at scrape: %s", exc)
            depth = {}
        for queue, states in sorted(depth.items()):
            for state, count in states.items():
                family.add_metric([queue, state], count)
        yield family


def check_port(address: tuple[str, int]) -> None:
    """``MetricsPortError`` unless ``address`` can be listened on now: ``memindex worker`` asks before
    dramatiq starts, whose exposition process otherwise died of the busy port with a traceback while
    the worker ran on unmonitored (every Procfile process given one ``MEMINDEX_METRICS_ADDRESS``)."""
    import socket

    host, port = address
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, where = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
            probe.bind(where)
    except OSError as exc:
        raise MetricsPortError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None


def serve_metrics(address: tuple[str, int], contexts: Iterable[Any] = (),
                  batch_states: Callable[[Any], dict[str, int]] | None = None,
                  queue_depth: Callable[[], dict[str, dict[str, int]]] | None = None,
                  broker_full: Callable[[], bool] | None = None) -> None:
    """``--metrics-port`` of a long-running process (``watch``, ``mcp``): this process's series on
    ``port`` from a daemon thread, plus files pending per agent for ``contexts`` (what it watches),
    given ``queue_depth`` the messages per queue, and given ``broker_full`` whether Redis is out of memory.

    ``batch_states``, ``queue_depth`` and ``broker_full`` are passed in: their modules import the broker, which
    imports this module."""
    from prometheus_client import REGISTRY, start_http_server

    host, port = address
    try:
        start_http_server(port, addr=host)
    except OSError as exc:
        raise MetricsPortError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    Recorders().install()
    search_recorders()  # the search series exist (at zero) before the first search
    contexts = list(contexts)
    if contexts:
        REGISTRY.register(PendingCollector(contexts, batch_states, broker_full))
    if queue_depth is not None:
        REGISTRY.register(QueueCollector(queue_depth))
