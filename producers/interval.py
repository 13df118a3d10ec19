"""Interval sync (F8): every ``memorySearch.sync.intervalMinutes`` per agent (0 = off).

One small scheduler thread for all agents. Settings are re-read on each tick
(cached by config mtime), so changing the interval needs no restart. The
sync goes through ``request_sync_once``: if one is already queued, nothing
more is enqueued.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable

from memindex.pipeline.config import environ
from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import Context
from memindex.pipeline.store.reader import open_reader
from memindex.producers.hooks import request_sync_once
from memindex.workers import leases, queues
from memindex.workers.broker import get_broker

log = logging.getLogger("memindex.interval")

Enqueue = Callable[[Context, str], object]

# Upper bound on one sleep, so a config change (interval turned on) is noticed.
MAX_SLEEP_S = 30.0
# Files stored keyword-only because their embeddings failed (the provider down, a 503) are
# re-tried by a sync this often while any remain, doubling while they keep failing up to the
# cap: `watch` otherwise re-tried them only on the next edit, and with intervalMinutes 0 (the
# default) a recovered provider was never asked again.
VECTOR_RETRY_S = environ.VECTOR_RETRY_S.get()
VECTOR_RETRY_MAX_S = 1800.0


# Files a plan announced (pending in the store) while nothing at all is queued or running: their
# work was lost (Redis refused it for memory, a message was dropped, a writer lost its WAL). Two
# looks this far apart that both see it ask for a sync, then less often (doubling up to the cap)
# while it stays so (a full disk: each re-plan would fail again). Before, nothing re-planned them
# until the next edit: a deployment stayed "healthy" with 128 files pending after Redis had room.
STRANDED_S = 5.0
STRANDED_MAX_S = 300.0

_warned: dict[str | None, str] = {}  # agent -> the config error last logged for it


def _interval_s(ctx: Context) -> float:
    try:
        settings = settings_for(ctx)
    except Exception as exc:  # noqa: BLE001 - a broken config must not kill the loop
        # Once per reason: every 30 s tick said it again while the config stayed broken, and a
        # config that does not load said it once for every agent (disabled ones included).
        said = str(exc) in _warned.values()
        _warned[ctx.agent_id] = str(exc)
        (log.debug if said else log.warning)("interval sync: cannot load settings for %s: %s", ctx.agent_id, exc)
        return 0.0
    _warned.pop(ctx.agent_id, None)
    if not settings.enabled:
        return 0.0
    return float(settings.memory_search.sync.interval_minutes) * 60.0


def _vectors_pending(ctx: Context) -> int:
    """Files of the agent's index stored without their vectors (the next sync re-embeds them)."""
    try:
        settings = settings_for(ctx)
        if not settings.enabled or not settings.store_path.exists():
            return 0
        reader = open_reader(settings)
        try:
            with reader.snapshot() as snap:
                return snap.problem_counts()["vectorsPending"]
        finally:
            reader.close()
    except Exception:  # noqa: BLE001 - a broken config or store is said elsewhere; nothing to retry here
        return 0


def _stranded(ctx: Context) -> int:
    """Files pending in the agent's store while no queue holds or runs anything (0 otherwise)."""
    try:
        settings = settings_for(ctx)
        if not settings.enabled or not settings.store_path.exists() or queues.total_outstanding():
            return 0
        reader = open_reader(settings)
        try:
            st = reader.state()
            return reader.pending_count(st.building_generation or st.live_generation)
        finally:
            reader.close()
    except Exception:  # noqa: BLE001 - Redis or the store unreadable: said elsewhere; look again later
        return 0


def _forget_leases(ctx: Context) -> None:
    leases.forget_store(get_broker(), settings_for(ctx).store_path)


def _default_enqueue(ctx: Context, reason: str) -> object:
    return request_sync_once(ctx, reason)


class IntervalSync:
    """Enqueue a sync for each agent whose interval has elapsed."""

    def __init__(self, contexts: Iterable[Context], *, enqueue: Enqueue | None = None,
                 interval_of: Callable[[Context], float] = _interval_s,
                 clock: Callable[[], float] = time.monotonic,
                 vectors_pending_of: Callable[[Context], int] = _vectors_pending,
                 retry_s: float | None = None, stranded_of: Callable[[Context], int] = _stranded,
                 stranded_s: float = STRANDED_S) -> None:
        self.contexts = list(contexts)
        self.stranded_of, self.stranded_s = stranded_of, stranded_s
        self._stranded: dict[Context, tuple[float, float, bool]] = {}  # ctx -> (next look, period, seen)
        self.vectors_pending_of = vectors_pending_of
        self.retry_s = VECTOR_RETRY_S if retry_s is None else retry_s
        self._retry: dict[Context, tuple[float, float]] = {}  # ctx -> (next check, current period)
        self.enqueue = enqueue or _default_enqueue
        self.interval_of = interval_of
        self.clock = clock
        self._last: dict[Context, float] = {c: clock() for c in self.contexts}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired = 0

    def tick(self) -> float:
        """Fire what is due; return seconds until the next check."""
        now = self.clock()
        wait = MAX_SLEEP_S
        if self.retry_s > 0:
            for ctx in self.contexts:
                wait = min(wait, self._retry_vectors(ctx, now))
        if self.stranded_s > 0:
            for ctx in self.contexts:
                wait = min(wait, self._replan_stranded(ctx, now))
        for ctx in self.contexts:
            every = self.interval_of(ctx)
            if every <= 0:
                continue
            due = self._last.setdefault(ctx, now) + every  # setdefault: set_contexts may race
            if now >= due:
                try:
                    self.enqueue(ctx, "interval")
                    self.fired += 1
                except Exception as exc:  # noqa: BLE001 - broker down: try again next tick
                    log.warning("interval sync for %s not enqueued: %s", ctx.agent_id, exc)
                self._last[ctx] = now
                due = now + every
            wait = min(wait, max(0.05, due - now))
        return wait

    def _retry_vectors(self, ctx: Context, now: float) -> float:
        """Enqueue a sync when the agent has files waiting for their vectors; seconds to the next look."""
        nxt, period = self._retry.setdefault(ctx, (now + self.retry_s, self.retry_s))
        if now >= nxt:
            if self.vectors_pending_of(ctx):
                try:
                    self.enqueue(ctx, "vector-retry")
                    self.fired += 1
                except Exception as exc:  # noqa: BLE001 - broker down: the next look tries again
                    log.warning("vector retry sync for %s not enqueued: %s", ctx.agent_id, exc)
                period = min(period * 2, max(self.retry_s, VECTOR_RETRY_MAX_S))  # still failing: ask less often
            else:
                period = self.retry_s
            nxt = now + period
            self._retry[ctx] = (nxt, period)
        return max(0.05, nxt - now)

    def _replan_stranded(self, ctx: Context, now: float) -> float:
        """Enqueue a sync when the agent's pending files have had nothing queued for them on two
        looks in a row; seconds to the next look."""
        nxt, period, seen = self._stranded.setdefault(ctx, (now + self.stranded_s, self.stranded_s, False))
        if now >= nxt:
            n = self.stranded_of(ctx)
            if n and seen:
                log.warning("%s: %d file(s) pending with nothing queued for them (their queued work was lost); "
                            "queuing them again", ctx.agent_id, n)
                try:
                    _forget_leases(ctx)  # they stand for the lost work: kept, the re-plan skipped every file
                    self.enqueue(ctx, "stranded")
                    self.fired += 1
                except Exception as exc:  # noqa: BLE001 - broker down or full: the next look tries again
                    log.warning("sync for %s's stranded files not enqueued: %s", ctx.agent_id, exc)
                period = min(period * 2, STRANDED_MAX_S)
            elif not n:
                period = self.stranded_s
            nxt = now + period
            self._stranded[ctx] = (nxt, period, bool(n))
        return max(0.05, nxt - now)

    def set_contexts(self, contexts: Iterable[Context]) -> None:
        """The agents after a config reload: new ones start their interval now, removed ones stop."""
        contexts = list(contexts)
        now = self.clock()
        self._last = {c: self._last.get(c, now) for c in contexts}
        self.contexts = contexts

    def start(self) -> "IntervalSync":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="memindex-interval", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(self.tick())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
