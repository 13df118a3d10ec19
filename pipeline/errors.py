"""The one error tree: every error memindex raises derives from ``MemindexError``.

Each family has its root here (the way dramatiq keeps ``dramatiq.errors``);
modules raise these or subclasses of them, and the public API re-exports them,
so a caller can catch ``memindex.MemindexError`` alone, or one family.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class MemindexError(Exception):
    """Root of every error memindex raises."""


class UsageError(MemindexError, TypeError):
    """A library call given an argument of the wrong type or value: a bug in the caller, said at
    the call (never an empty answer that looks like "no matches")."""


def require(name: str, value: object, kinds: type | tuple[type, ...], *, optional: bool = False) -> None:
    """Raise ``UsageError`` unless ``value`` is one of ``kinds`` (or None when ``optional``); bools are not numbers."""
    if value is None and optional:
        return
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool)):
        return
    names = " or ".join(k.__name__ for k in kinds)
    raise UsageError(f"{name} must be {names}{' or None' if optional else ''}, not {type(value).__name__}")


def require_path_text(name: str, text: object) -> None:
    """Raise ``UsageError`` unless ``text`` (a path's ``os.fspath``) names something: an empty path is
    the current directory (or, for a config, none at all) and a NUL byte no file."""
    if not isinstance(text, str) or not text.strip() or "\x00" in text:
        raise UsageError(f"{name} must be a non-empty path without NUL bytes, not {text!r}")


def checked_call(name: str) -> Callable[[F], F]:
    """Decorate a public function or method so that a call its signature cannot take (an unknown
    keyword such as OpenClaw's ``maxResults``, a missing or an extra argument) is a ``UsageError``
    naming ``name`` and the parameters it takes, not Python's TypeError naming an internal class."""

    def wrap(fn: F) -> F:
        import inspect  # here, not at the top: the --server client imports this module and no more

        sig = inspect.signature(fn)
        params = [p for p in sig.parameters if p not in ("self", "cls")]
        # The keywords the call can take: an unknown one is named first (Python's bind names the
        # first missing argument instead, so flush_decision(foo=1) said "missing 'token_estimate'").
        takes_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        named = {n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}

        def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            unknown = [k for k in kwargs if k not in named] if not takes_any else []
            if unknown:
                raise UsageError(f"{name}(): got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                                 f"it takes {', '.join(params)}")
            try:
                sig.bind(*args, **kwargs)
            except TypeError as exc:
                raise UsageError(f"{name}(): {exc}; it takes {', '.join(params)}") from None

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def acall(*args: Any, **kwargs: Any) -> Any:
                check(args, kwargs)
                return await fn(*args, **kwargs)
            return acall  # type: ignore[return-value]  # fn's own signature: the wrapper only checks the call

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            check(args, kwargs)
            return fn(*args, **kwargs)
        return call  # type: ignore[return-value]  # fn's own signature: the wrapper only checks the call

    return wrap


# Keys whose values may be secrets (an API key, a header carrying one, the env block): an error
# about such a key says what was expected, never the value it got.
_SECRET_SEGMENT = re.compile(r"(?i)^(api_?key|key|\w*token|\w*secret\w*|password|passwd|headers?|authorization|auth)$")
_GOT_VALUE = re.compile(r"([,;]?\s*\bgot) .*$", re.S)


def _secret_key(key: str) -> bool:
    parts = [p for p in re.split(r"[.\[\]]", key) if p]
    return bool(parts) and (parts[0] == "env" or any(_SECRET_SEGMENT.match(p) for p in parts))


class ConfigError(MemindexError, ValueError):
    """A bad configuration value; ``key`` is the offending key path."""

    def __init__(self, key: str, message: str) -> None:
        if _secret_key(key):
            message = _GOT_VALUE.sub(r"\1 a value not shown here (the key may hold a secret)", message)
        self.key = key
        self.detail = f"{key}: {message}"  # without the "invalid config" label (a request argument's error)
        super().__init__(self._line())

    def _line(self) -> str:
        # A command-line flag (--agent) is an option, not the config file.
        return f"{'invalid option' if self.key.startswith('-') else 'invalid config'}: {self.detail}"


class EnvError(ConfigError):
    """An environment variable set to a value it cannot take (``MEMINDEX_POLL_MS=abc``). It is
    no key of the config file, so its line names the variable and what it takes, unlabelled:
    ``MEMINDEX_POLL_MS must be a whole number, not 'abc'``."""

    def __init__(self, var: str, message: str) -> None:
        self.why = message  # before the base class builds the line from it
        super().__init__(var, message)

    def _line(self) -> str:
        return f"{self.key} {self.why}"


class UnknownAgent(ConfigError):
    """An agent id the config does not list (any more): no retry or wait makes it one, so queued
    work for an agent removed from the config fails at once, never retried. ``why`` is the message
    without the "invalid config: <key>:" label (the config itself is fine)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(key, message)
        self.why = message


class StoreError(MemindexError, RuntimeError):
    """The per-agent store refused an operation (mixed vector dims, a corrupt file, ...)."""


class StoreBusy(StoreError):
    """Another process kept writing the store for the whole wait (its writer lock)."""


class StoreCorrupt(StoreError):
    """The store file is damaged (not a database, malformed pages, failed integrity check)."""


class WorkspaceError(MemindexError, RuntimeError):
    """The workspace is missing or not a directory: nothing is synced, the index is left as it was."""


class ProviderError(MemindexError):
    """Any failure of an embedding provider; ``retryable`` says whether trying again can help,
    ``per_input`` whether it is about the request's inputs (others may succeed) rather than the provider."""

    retryable = False
    per_input = False
    endpoint = True  # the provider's endpoint failed (False: this process's config cannot use the index)


class IndexTimeout(MemindexError, TimeoutError):
    """``sync_and_wait``'s timeout passed before the sync's work was written. Nothing is lost:
    the queued work goes on, and ``pending`` says how many files were still to be written."""

    def __init__(self, message: str, pending: int) -> None:
        super().__init__(message)
        self.pending = pending


class IndexIncomplete(MemindexError):
    """The queues drained and files this sync planned were still not written, also after one
    re-plan: their queued work was lost on the way (Redis refused it for memory, a writer lost its
    WAL, ...). ``pending`` says how many; the next sync queues them again."""

    def __init__(self, message: str, pending: int) -> None:
        super().__init__(message)
        self.pending = pending


class DeadLettered(MemindexError):
    """Work of this sync was dead-lettered (refused by a worker, or out of retries): not indexed."""


class NoWorkerError(MemindexError):
    """Work is queued on Redis but no worker process consumes its queue."""


class BrokerUnavailable(MemindexError, ConnectionError):
    """The queue's Redis (``MEMINDEX_BROKER_URL``) did not answer, refused the credentials or is out
    of memory; the message is the one line that says which and what to do. Raised by the calls
    that enqueue (``sync_and_wait``, ``on_session_start``, ``schedule_sync``) in place of
    redis-py's own errors, which are no part of this tree; the original is its ``__cause__``."""


class FallbackSwitched(MemindexError, RuntimeError):
    """The provider changed while embedding: these vectors belong to another index."""


class MemoryGetError(MemindexError, ValueError):
    """A refused ``memory_get``; the message says which rule refused it."""


class QmdError(MemindexError, RuntimeError):
    """qmd could not answer; ``kind`` names the failure mode for status/fallback."""

    kind = "error"


class QmdMissing(QmdError):
    """No qmd to run here (not installed, not executable): the built-in index serves."""

    kind = "missing"
