"""Secrets kept out of every log line and error message, at every level.

Provider selection registers each API key, every ``remote.headers`` value
(an ``X-Api-Key`` is as secret as the key) and the credentials a base URL carries
(``url_secrets``) the moment it builds a provider;
``redact`` replaces them in any text, and ``install`` wraps the process's log
record factory once, so every record - ours, dramatiq's, httpx/httpcore's at
``-vv`` (which print response headers verbatim), tracebacks included - is
scrubbed before any handler sees it. Provider error bodies that echo a header
are redacted when the error is built (``EmbeddingProvider.redact``).
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Callable
from urllib.parse import parse_qsl, unquote, urlsplit

MIN_SECRET_LEN = 4  # shorter values would blank out ordinary words
MASK = "***"

_secrets: set[str] = set()
_lock = threading.Lock()


def register(*values: Any) -> None:
    """Remember secret values (None and short values are ignored); installs the log scrubber."""
    fresh = {str(v) for v in values if v is not None and len(str(v)) >= MIN_SECRET_LEN}
    if fresh - _secrets:
        with _lock:
            _secrets.update(fresh)
    install()


def url_secrets(url: str | None) -> list[str]:
    """What in a base URL may be a credential: its user, its password and its query values
    (``http://user:pass@proxy/v1?token=...``; httpx logs the whole URL at ``-vv``)."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [parts.username, parts.password, *(v for _, v in parse_qsl(parts.query))]
    return list(dict.fromkeys([unquote(v) for v in found if v] + [v for v in found if v]))


def split_credentials(url: str) -> tuple[str, str | None]:
    """(``url`` without its ``user:password@``, the ``Basic ...`` header value they make, or None).

    Left in the URL, httpx turned them into an ``Authorization: Basic <base64>`` header of its own:
    the base64 (no registered secret) was echoed in logs, errors and status, and it replaced the
    bearer token of a configured ``apiKey``. The header value and its base64 are registered here."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, None
    if parts.username is None and parts.password is None:
        return url, None
    import base64

    host = parts.netloc.rsplit("@", 1)[1]
    token = base64.b64encode(f"{unquote(parts.username or '')}:{unquote(parts.password or '')}".encode()).decode()
    register(token, *url_secrets(url))
    return parts._replace(netloc=host).geturl(), f"Basic {token}"


# A key a provider echoes half-masked ("Incorrect API key provided: sk-proj-****...cdef", OpenAI's
# 401): its prefix and last characters are still part of the key. The whole token goes.
_MASKED_ECHO = re.compile(r"[A-Za-z0-9_\-]{2,}[*\u2022]{4,}[A-Za-z0-9_\-]{1,12}")


def redact(text: str) -> str:
    """``text`` with every registered secret, and any half-masked key echo, replaced by ``***``."""
    for s in sorted(_secrets, key=len, reverse=True):  # longest first: a key containing another
        if s in text:
            text = text.replace(s, MASK)
    if "**" in text or "\u2022" in text:
        text = _MASKED_ECHO.sub(MASK, text)
    return text


def _scrubbing(make: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    formatter = logging.Formatter()

    def factory(*a: Any, **kw: Any) -> logging.LogRecord:
        record = make(*a, **kw)
        if not _secrets:
            return record
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the logging module's to report
            return record
        clean = redact(msg)
        if clean != msg:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = redact(formatter.formatException(record.exc_info))
        return record

    # install()'s marker (an attribute on a function): one scrubber, however often it runs.
    factory.memindex_redacts = True  # type: ignore[attr-defined]
    return factory


def install() -> None:
    """Scrub every log record of this process (idempotent)."""
    with _lock:
        make = logging.getLogRecordFactory()
        if not getattr(make, "memindex_redacts", False):
            logging.setLogRecordFactory(_scrubbing(make))
