"""A circuit breaker per provider: one failure's cost is paid once, not on every call.

When a provider fails (after its own retries, or a query past its time budget),
its breaker opens: document embedding skips it (files are indexed keyword-only
and re-embedded by a later sync) and search answers keyword-only without
waiting. After ``COOLDOWN_S`` one caller is let through as a probe; its success
closes the breaker, its failure opens it for another cooldown.

``SharedOpen`` carries the query side's open state across processes (a file beside the
agent's store): a runtime that shells out one ``memindex search`` per call paid the query
timeout of a dead or slow endpoint on every call, since each process started closed.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path
from typing import Callable

COOLDOWN_S = 30.0
MAX_STATE_BYTES = 1 << 20  # the shared state file holds a few providers' entries; more is not ours


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



class SharedOpen:
    """Providers that failed a query recently, in a small JSON file other processes read
    (``{provider key: [until (epoch s), reason]}``). Best effort: a file that cannot be read or
    written is a closed breaker, never an error."""

    def __init__(self, path: Path, cooldown_s: float = COOLDOWN_S, clock: Callable[[], float] = time.time) -> None:
        self.path, self.cooldown_s, self.clock = path, cooldown_s, clock

    def _read(self) -> dict[str, list[object]]:  # {key: [until, reason]} as JSON, checked where read
        # Opened without blocking and read only if it is a regular file: a FIFO put at this path
        # hung every search (a plain open waits for a writer), a device would be read for ever.
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return {}
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {}
            data = json.loads(os.read(fd, MAX_STATE_BYTES).decode("utf-8"))
        except (OSError, ValueError):
            return {}
        finally:
            os.close(fd)
        return data if isinstance(data, dict) else {}

    def _write(self, data: dict[str, list[object]]) -> None:
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        try:
            if data:
                tmp.write_text(json.dumps(data), encoding="utf-8")
                os.replace(tmp, self.path)
            else:
                self.path.unlink(missing_ok=True)
        except OSError:
            tmp.unlink(missing_ok=True)

    def reason(self, key: str) -> str | None:
        """Why ``key`` is open for another process's query (None: closed, or its cooldown is over:
        this caller is the probe)."""
        if not self.path.exists():  # the common case: one stat
            return None
        hit = self._read().get(key)
        if isinstance(hit, list) and len(hit) == 2 and isinstance(hit[0], (int, float)) and self.clock() < hit[0]:
            return str(hit[1])
        return None

    def failure(self, key: str, reason: str) -> None:
        data = self._read()
        data[key] = [self.clock() + self.cooldown_s, reason]
        self._write(data)

    def success(self, key: str) -> None:
        if not self.path.exists():
            return
        data = self._read()
        if data.pop(key, None) is not None:
            self._write(data)
