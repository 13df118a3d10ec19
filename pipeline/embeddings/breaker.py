"""A circuit breaker per provider: one failure's cost is paid once, not on every call.

When a provider fails (after its own retries, or a query past its time budget),
its breaker opens: document embedding skips it (files are indexed keyword-only
and re-embedded by a later sync) and search answers keyword-only without
waiting. After ``COOLDOWN_S`` one caller is let through as a probe; its success
closes the breaker, its failure opens it for another cooldown.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

COOLDOWN_S = 30.0


class CircuitBreaker:
    def __init__(self, cooldown_s: float = COOLDOWN_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.cooldown_s = cooldown_s
        self.clock = clock
        self._lock = threading.Lock()
        self._open_until: dict[str, float] = {}
        self._reasons: dict[str, str] = {}
        self._probing: set[str] = set()

    def allow(self, key: str) -> bool:
        """May a call to ``key`` go ahead? True when closed, or for the one probe after a cooldown."""
        with self._lock:
            until = self._open_until.get(key)
            if until is None:
                return True
            if self.clock() < until or key in self._probing:
                return False
            self._probing.add(key)
            return True

    def success(self, key: str) -> None:
        with self._lock:
            self._open_until.pop(key, None)
            self._reasons.pop(key, None)
            self._probing.discard(key)

    def failure(self, key: str, reason: str) -> None:
        with self._lock:
            self._open_until[key] = self.clock() + self.cooldown_s
            self._reasons[key] = reason
            self._probing.discard(key)

    def reason(self, key: str) -> str | None:
        """Why ``key`` is open (None when closed)."""
        with self._lock:
            return self._reasons.get(key)

    def reset(self) -> None:
        with self._lock:
            self._open_until.clear()
            self._reasons.clear()
            self._probing.clear()

