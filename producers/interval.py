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

from memindex.pipeline.config.settings import Context

log = logging.getLogger("memindex.interval")

Enqueue = Callable[[Context, str], object]

# Upper bound on one sleep, so a config change (interval turned on) is noticed.
MAX_SLEEP_S = 30.0


_warned: dict[str | None, str] = {}  # agent -> the config error last logged for it


def _interval_s(ctx: Context) -> float:
    from memindex.pipeline.config.agents import settings_for

    try:
        settings = settings_for(ctx)
    except Exception as exc:  # noqa: BLE001 - a broken config must not kill the loop
        # Once per agent and reason: every 30 s tick said it again while the config stayed broken.
        said = _warned.get(ctx.agent_id)
        _warned[ctx.agent_id] = str(exc)
        (log.debug if said == str(exc) else log.warning)(
            "interval sync: cannot load settings for %s: %s", ctx.agent_id, exc)
        return 0.0
    _warned.pop(ctx.agent_id, None)
    if not settings.enabled:
        return 0.0
    return float(settings.memory_search["sync"]["intervalMinutes"]) * 60.0


def _default_enqueue(ctx: Context, reason: str) -> object:
    from memindex.producers.hooks import request_sync_once

    return request_sync_once(ctx, reason)


class IntervalSync:
    """Enqueue a sync for each agent whose interval has elapsed."""

    def __init__(self, contexts: Iterable[Context], *, enqueue: Enqueue | None = None,
                 interval_of: Callable[[Context], float] = _interval_s,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.contexts = list(contexts)
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
