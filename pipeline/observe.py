"""Hooks through which the library reports what it does, for metrics.

The pipeline knows no metrics library and no queue: every hook is a no-op
until a long-running process installs its recorders (``workers/metrics.py``,
with ``--metrics-port``). A hook must be cheap and must never raise.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator


def _noop(*_: object) -> None:
    return None


class Hooks:
    # provider id, seconds, error type name (None when the request succeeded)
    embedding_request: Callable[[str, float, str | None], None] = _noop
    embedding_retry: Callable[[str], None] = _noop  # provider id: a request about to be sent again
    cache_hits: Callable[[int, int], None] = _noop  # chunks found in the embedding cache, chunks looked up


hooks = Hooks()


@contextmanager
def embedding_request(provider_id: str) -> Iterator[None]:
    """Time one request to a provider, and report it with its outcome."""
    start = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        hooks.embedding_request(provider_id, time.perf_counter() - start, type(exc).__name__)
        raise
    hooks.embedding_request(provider_id, time.perf_counter() - start, None)
