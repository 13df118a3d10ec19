"""Per-process caches of agent settings, keyed by the small ``Context``.

Workers receive a ``Context`` in every message and must not re-parse the
JSON5 config for each one: settings are cached and reloaded only when the
config file's (or an included file's, or the state dir's ``.env``) mtime or size changes.
Each is held with the pinned Context a sync planned with them sends (``planned_settings``).

A worker started with ``OPENCLAW_STATE_DIR`` or ``OPENCLAW_CONFIG_PATH`` serves
that state dir and config only: ``check_message_context`` refuses a message
whose sender resolved others (a CLI run with another environment must never
make production workers plan, or rebuild, with a config they were not given).
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Generic, Mapping, NamedTuple, TypeVar

from memindex.pipeline.config.settings import (AgentSettings, ConfigStamp, Context, config_stamp, context_paths,
                                               load_settings, pinned)
from memindex.pipeline.errors import ConfigError


class _Held(NamedTuple):
    """Settings as this process holds them."""

    stamp: ConfigStamp  # the config files' when they were read (taken before the read)
    settings: AgentSettings
    message: Context  # ``pinned(settings, stamp)``: what a sync planned with them sends


_lock = threading.Lock()
_cache: dict[Context, _Held] = {}


class ContextMismatch(ConfigError):
    """A queue message names another state dir or config than this worker was started with."""


def check_message_context(ctx: Context, env: Mapping[str, str] | None = None) -> None:
    """Refuse ``ctx`` if this process is pinned (``OPENCLAW_STATE_DIR``/``OPENCLAW_CONFIG_PATH`` set)
    to a state dir or config other than the ones ``ctx`` resolves to. Both paths are named."""
    env = os.environ if env is None else env
    if not (env.get("OPENCLAW_STATE_DIR", "").strip() or env.get("OPENCLAW_CONFIG_PATH", "").strip()):
        return
    mine, theirs = context_paths(Context(), env), context_paths(ctx, env)
    for what, a, b in (("state dir", mine[0], theirs[0]), ("config", mine[1], theirs[1])):
        if (a and a.resolve()) != (b and b.resolve()):
            raise ContextMismatch("context", f"refused a message for agent {ctx.agent_id!r}: its {what} is "
                                             f"{b or '(none)'} but this worker serves {a or '(none)'}")


def settings_for(ctx: Context) -> AgentSettings:
    """The settings ``ctx`` names: those its ``stamp`` says it was planned with when this process
    holds them (a sync's message: no config file is looked at), else as the config files are now."""
    if ctx.stamp is not None:
        with _lock:
            hit = _cache.get(ctx)
        if hit is not None and hit.stamp == ctx.stamp:
            return hit.settings
    return _current(ctx).settings


def current_settings(ctx: Context) -> AgentSettings:
    """The settings ``ctx`` names as the config files are now, whatever its ``stamp`` says."""
    return _current(ctx).settings


def planned_settings(ctx: Context) -> tuple[AgentSettings, Context]:
    """For a sync: the settings as the config files are now (whatever ``ctx.stamp`` says) and the
    pinned Context its messages carry, stamped with them (``settings_for`` takes them from there)."""
    held = _current(ctx)
    with _lock:  # its messages find them here in this process (the embedded broker) without a look
        _cache[held.message] = held
    return held.settings, held.message


def _current(ctx: Context) -> _Held:
    with _lock:
        held = _cache.get(ctx)
    # Stamped before any read, so that a change made while the files are read is seen next time.
    # A Context naming its files absolutely names those its held settings were read from: they are
    # stamped as they are. Any other is resolved again (OPENCLAW_*, the home or the cwd may have moved it).
    stamp = held.settings.config_stamp() if held is not None and ctx.absolute else config_stamp(ctx)
    if held is not None and held.stamp == stamp:
        return held
    settings = load_settings(ctx)
    held = _Held(stamp, settings, pinned(settings, stamp))
    with _lock:
        _cache[ctx] = held
    return held


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
