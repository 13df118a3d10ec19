"""Where the broker is (``MEMINDEX_BROKER_URL``) and the one line said when it fails.

Plain functions of the environment and an exception: no dramatiq, no redis. The CLI, the hooks and
``producers/enqueue.py`` import them at their top and still load no queue code until work is sent
(``workers/broker.py``, which builds brokers, imports dramatiq). ``workers.broker`` re-exports them.
"""

from __future__ import annotations

from memindex.pipeline.config import environ
from memindex.pipeline.config.environ import BROKER_ENV
from memindex.pipeline.errors import ConfigError
from memindex.workers.logs import out_of_memory

_SCHEMES = ("redis://", "rediss://", "unix://")


def broker_url() -> str | None:
    """The Redis URL (None: the embedded broker). Any other scheme is a config error, said in one
    line by every command (redis-py's ValueError surfaced as a traceback from each of them)."""
    url = environ.BROKER_URL.text()
    if url and not url.lower().startswith(_SCHEMES):
        raise ConfigError(BROKER_ENV, f"expected a redis://, rediss:// or unix:// URL, got {redact(url)!r}")
    return url or None


def oom_line() -> str:
    """The one line for a broker out of memory: what it means, and what to do."""
    return (f"the broker at {redact(broker_url() or '?')} is out of memory (Redis's maxmemory reached, no "
            "eviction): it refuses new work; raise maxmemory or free memory, and the next sync queues again "
            "whatever could not be queued")


def refused_credentials(exc: BaseException) -> str | None:
    """The one line for a Redis error saying the password is wrong or missing (Redis answers,
    so "start Redis" would mislead); None for any other error."""
    text = str(exc)
    if not (type(exc).__name__.startswith("Authentication")
            or any(s in text for s in ("WRONGPASS", "NOAUTH", "invalid username-password", "HELLO must be called",
                                        "Authentication required", "without any password configured"))):
        return None
    return (f"the broker at {redact(broker_url() or '?')} refused the credentials ({text}); "
            "check the password in MEMINDEX_BROKER_URL (redis://:PASSWORD@host:port/db)")


def broker_error_line(exc: BaseException) -> str:
    """The one line for a Redis error: refused credentials, out of memory, or not reachable."""
    refused = refused_credentials(exc)
    if refused:
        return refused
    if out_of_memory(exc):
        return oom_line()
    return (f"cannot reach the broker at {redact(broker_url() or '?')} ({exc}); "
            "start Redis or unset MEMINDEX_BROKER_URL to use the embedded default")


def redact(url: str) -> str:
    """Never log a password that rides in a broker URL."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
