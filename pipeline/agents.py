"""Per-process caches of agent settings, keyed by the small ``Context``.

Workers receive a ``Context`` in every message and must not re-parse the
JSON5 config for each one: settings are cached and reloaded only when the
config file's mtime changes.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .config import AgentSettings, Context, config_path_for, default_state_dir, load_settings

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
