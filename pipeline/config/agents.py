"""Per-process caches of agent settings, keyed by the small ``Context``.

Workers receive a ``Context`` in every message and must not re-parse the
JSON5 config for each one: settings are cached and reloaded only when the
config file's mtime changes.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable, Generic, TypeVar

from memindex.pipeline.config.settings import AgentSettings, Context, config_path_for, default_state_dir, load_settings

_lock = threading.Lock()
_cache: dict[Context, tuple[float | None, AgentSettings]] = {}


def _config_mtime(ctx: Context) -> float | None:
    state = Path(ctx.state_dir).expanduser() if ctx.state_dir else default_state_dir()
    path = config_path_for(ctx.config, state)
    try:
        return os.stat(path).st_mtime if path else None
    except OSError:
        return None


def settings_for(ctx: Context) -> AgentSettings:
    mtime = _config_mtime(ctx)
    with _lock:
        hit = _cache.get(ctx)
        if hit is not None and hit[0] == mtime:
            return hit[1]
    settings = load_settings(ctx)
    with _lock:
        _cache[ctx] = (mtime, settings)
    return settings


T = TypeVar("T")


class PerSettings(Generic[T]):
    """One shared object per agent settings in this process (search engines, qmd managers):
    connection reuse and shared state, keyed by ``AgentSettings.digest()``."""

    def __init__(self) -> None:
        self._items: dict[str, T] = {}
        self._lock = threading.Lock()

    def get(self, settings: AgentSettings, make: Callable[[], T]) -> T:
        key = settings.digest()
        with self._lock:
            item = self._items.get(key)
            if item is None:
                item = self._items[key] = make()
            return item

    def pop_all(self) -> list[T]:
        with self._lock:
            items = list(self._items.values())
            self._items.clear()
        return items
