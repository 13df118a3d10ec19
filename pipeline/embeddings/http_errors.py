"""Turning HTTP statuses, error bodies and transport exceptions into our error types.

Every provider module funnels its SDK's failures through ``from_status`` and
``from_transport`` so the retry layer sees one vocabulary.
"""

from __future__ import annotations

import email.utils
import re
import time
from typing import Any, Callable, Iterator, Mapping

from memindex.pipeline.embeddings.base import (
    EmbeddingProvider,
    ProviderAuthError,
    ProviderModelNotFound,
    ProviderQuotaExhausted,
    ProviderBadInput,
    ProviderError,
    ProviderRateLimited,
    ProviderTooManyItems,
    ProviderTransientError,
    ProviderTimedOut,
    ProviderUnreachable,
)

# Wordings of "too many inputs / batch too big" seen from OpenAI(-compatible),
# Gemini, Voyage, Mistral and hosted OpenAI-compatible providers with small
# per-request row caps (reference bug 8).
_TOO_MANY = re.compile(
    r"too many (inputs|items|texts|rows|requests|embeddings|documents|tokens (in|overall))"
    r"|split into more batches|batch size|batch_size|array too long|maximum (input )?array"
    r"|at most \d+ (requests|inputs|items|texts)|exceeds? the (maximum|max) (number of )?(inputs|items|batch)"
    r"|input (list|array) (is )?too (long|large)|maximum (number of )?(inputs|items|texts) per request",
    re.IGNORECASE,
)
# "... limit is 1000", "at most 100 requests", "not be larger than 10", "maximum allowed batch size 32"
_CAP_HINTS = (
    re.compile(r"at most (\d+) (?:requests|inputs|items|texts)", re.I),
    re.compile(r"(?:batch size|batch_size)[^\d]{0,40}?(?:limit|max(?:imum)?)[^\d]{0,20}?(?:is|of|=|:)?\s*(\d+)", re.I),
    re.compile(r"not be (?:larger|greater|more) than (\d+)", re.I),
    re.compile(r"maximum allowed batch size (?:is )?(\d+)", re.I),
    re.compile(r"maximum (?:length|size) (?:of |is )?(\d+)", re.I),
    re.compile(r"limit(?: is|:)? (\d+)", re.I),
)
_KEY_WORDS = re.compile(r"api[ _-]?key|unauthori[sz]ed|invalid[ _]?(auth|token|credential)", re.I)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date."""
    if value is None:
        return None
    value = str(value).strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_from_headers(headers: Mapping[str, str] | None) -> float | None:
    """Retry-After (or OpenAI's retry-after-ms) from a case-insensitive header mapping."""
    if not headers:
        return None
    get = headers.get
    ms = get("retry-after-ms") or get("Retry-After-Ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    return parse_retry_after(get("retry-after") or get("Retry-After"))


def retry_delay_from_google_details(body: Any) -> float | None:
    """google.rpc.RetryInfo {retryDelay: "36s"} inside a Gemini error body."""
    err = body.get("error", body) if isinstance(body, dict) else None
    details = err.get("details") if isinstance(err, dict) else None
    for d in details or []:
        if isinstance(d, dict) and str(d.get("@type", "")).endswith("RetryInfo"):
            m = re.fullmatch(r"\s*([\d.]+)s\s*", str(d.get("retryDelay", "")))
            if m:
                return float(m.group(1))
    return None


def too_many_items(message: str) -> ProviderTooManyItems | None:
    if not _TOO_MANY.search(message or ""):
        return None
    cap = None
    for pat in _CAP_HINTS:
        m = pat.search(message)
        if m:
            cap = int(m.group(1))
            break
    return ProviderTooManyItems(message, max_items=cap if cap and cap > 0 else None)


def from_status(
    provider_id: str,
    status: int,
    message: str,
    *,
    model: str = "",
    headers: Mapping[str, str] | None = None,
    retry_after: float | None = None,
) -> ProviderError:
    """The error for a non-2xx response. ``message`` must already be redacted."""
    detail = (message or "").strip()[:500]
    suffix = f" ({status}: {detail})" if detail else f" ({status})"
    if status in (400, 413, 422):
        tm = too_many_items(detail)
        if tm is not None or status == 413:
            return tm or ProviderTooManyItems(f"{provider_id}: request too large{suffix}")
        if _KEY_WORDS.search(detail):
            return ProviderAuthError(f"{provider_id} rejected the API key{suffix}")
        return ProviderBadInput(f"{provider_id}: bad request{suffix}")
    if status in (401, 403):
        return ProviderAuthError(f"{provider_id} rejected the API key{suffix}")
    if status == 404:
        return ProviderModelNotFound(f"{provider_id}: model not found: {model or '?'} (or wrong baseUrl){suffix}")
    if status == 429:
        if re.search(r"insufficient_quota|billing|exceeded your current quota, please check your plan", detail, re.I):
            # A billing problem, not a rate window: waiting will not fix it.
            return ProviderQuotaExhausted(f"{provider_id}: quota exhausted, check the account's plan/billing{suffix}")
        ra = retry_after if retry_after is not None else retry_after_from_headers(headers)
        return ProviderRateLimited(f"{provider_id}: rate limited{suffix}", retry_after=ra)
    if status in (408, 409, 425) or status >= 500:
        return ProviderTransientError(f"{provider_id}: server error{suffix}")
    return ProviderError(f"{provider_id}: unexpected HTTP status{suffix}")


def _transport_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [TimeoutError, ConnectionError]
    for mod_name in ("httpx", "httpx2"):
        try:
            mod = __import__(mod_name)
        except ImportError:
            continue
        types.append(mod.TransportError)  # timeouts, connect/read errors, protocol errors
    try:
        import requests

        types.append(requests.exceptions.ConnectionError)
        types.append(requests.exceptions.Timeout)
        types.append(requests.exceptions.ChunkedEncodingError)
    except ImportError:
        pass
    return tuple(types)


TRANSPORT_ERRORS = _transport_types()


def _chain(exc: BaseException, depth: int = 10) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during (at most ``depth``)."""
    cur: BaseException | None = exc
    while cur is not None and depth > 0:
        yield cur
        cur, depth = cur.__cause__ or cur.__context__, depth - 1


def _never_connected(exc: BaseException) -> bool:
    """Refused or unresolvable (in the exception's chain): no server took the request."""
    return any(isinstance(cur, ConnectionRefusedError)
               or type(cur).__name__ in ("ConnectError", "NewConnectionError", "NameResolutionError", "gaierror")
               for cur in _chain(exc))


def _request_url(exc: BaseException) -> str | None:
    """Where the request went, without its query string (the SDKs' connection errors say only
    "Connection error.", which did not tell a wrong remote.baseUrl from a server that is down)."""
    for cur in _chain(exc):
        try:
            url = getattr(getattr(cur, "request", None), "url", None)
        except RuntimeError:  # httpx: an exception raised without a request
            url = None
        if url is not None:  # no query string, no user:password@
            return re.sub(r"//[^/@]*@", "//", str(url).split("?", 1)[0], count=1)
    return None


def from_transport(provider_id: str, exc: BaseException) -> ProviderTransientError:
    kind = "timed out" if "timeout" in type(exc).__name__.lower() else "connection failed"
    cls = (ProviderTimedOut if kind == "timed out"
           else ProviderUnreachable if _never_connected(exc) else ProviderTransientError)
    url = _request_url(exc)
    return cls(f"{provider_id}: request {kind}{f' ({url})' if url else ''}: {type(exc).__name__}: {exc}")


# An error body is cut to this many characters for a message, after the secrets are redacted:
# cut first, a key straddling the cut would no longer match and its head would be shown.
BODY_MESSAGE_CHARS = 500


def body_message(resp: Any, redact: Callable[[str], str]) -> str:
    """The human part of an error body ({"message"}, {"error": {"message"}}, {"detail"} or text),
    redacted, then cut to :data:`BODY_MESSAGE_CHARS`."""
    try:
        body: Any = resp.json()
    except ValueError:
        return redact(resp.text)[:BODY_MESSAGE_CHARS]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return redact(str(err["message"]))[:BODY_MESSAGE_CHARS]
        for key in ("message", "detail", "error"):
            if body.get(key):
                return redact(str(body[key]))[:BODY_MESSAGE_CHARS]
    return redact(str(body))[:BODY_MESSAGE_CHARS]


def post_json(provider: EmbeddingProvider, client: Any, url: str, body: Any) -> Any:
    """POST ``body`` as JSON with an ``httpx.Client``; returns the response when its status is below 400.

    A transport failure or an error status is raised as our error type, redacted.
    """
    import httpx

    try:
        resp = client.post(url, json=body)
    except httpx.TransportError as exc:
        raise from_transport(provider.id, exc) from None
    if resp.status_code >= 400:
        message = body_message(resp, provider.redact)
        raise from_status(provider.id, resp.status_code, message, model=provider.model, headers=resp.headers)
    return resp
