"""The provider interface every embedding backend implements, and its errors.

A provider does exactly one thing: turn a list of texts into vectors with one
request (or one request per text for backends without batching). Packing,
splitting oversized inputs, retries, validation and fallback live in
``service.py`` so that every backend gets the same behaviour.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from typing import Any, Callable, Mapping, Self, TypedDict

from memindex.pipeline.embeddings import registry, secrets
from memindex.pipeline.embeddings.registry import ProviderArgs
from memindex.pipeline.embeddings.prefixes import NONE as NO_PREFIXES, Prefixes
from memindex.pipeline.index.fingerprint import EmbeddingIdentity
# Re-exported: providers and callers import every provider error from here.
from memindex.pipeline.errors import ProviderError as ProviderError

class TimeoutArg(TypedDict, total=False):
    """A provider constructor's ``timeout`` keyword, present only when configured."""

    timeout: float


# One embedding request while indexing, for the hosted APIs (ollama waits longer: a local model loads
# first). sync.embeddingBatchTimeoutSeconds overrides it.
REQUEST_TIMEOUT_S = 120.0

# Headers that carry credentials. They are never part of a fingerprint, so a
# rotated key does not trigger a full reindex (reference §2.3).
AUTH_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "x-goog-api-key", "proxy-authorization"})
# Nor any other header whose name says it is a credential (OpenClaw keys every non-Authorization
# header): rotating a proxy's `X-Proxy-Token` re-embedded the whole corpus, for the same vectors.
_CREDENTIAL_NAME = re.compile(r"auth|token|key|secret|passw|signature|cookie|session")


def is_credential_header(name: str) -> bool:
    low = name.lower()
    return low in AUTH_HEADERS or bool(_CREDENTIAL_NAME.search(low))


class ProviderAuthError(ProviderError):
    """The request can never succeed as configured (missing/rejected key, unknown model, bad request)."""


class ProviderBadInput(ProviderAuthError):
    """HTTP 400/422 about the request's inputs (not the key, not the batch size): retrying the
    same request never helps, but other inputs may well succeed - the provider is not down."""

    per_input = True


class ProviderModelNotFound(ProviderAuthError):
    """HTTP 404: the model (or the endpoint: a wrong baseUrl) does not exist. Not a key problem,
    though as permanent (status said "ProviderAuthError: ... model not found")."""


class ProviderQuotaExhausted(ProviderAuthError):
    """HTTP 429 about billing or plan: waiting does not help."""


class ProviderKeyMissing(ProviderAuthError):
    """No API key anywhere for a provider that needs one: OpenClaw's "No API key found"."""


class ProviderUnavailable(ProviderError):
    """The provider failed recently and its circuit breaker is open: not called at all."""


class ProviderRateLimited(ProviderError):
    """HTTP 429. ``retry_after`` is the server's hint in seconds, when it gave one."""

    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProviderTransientError(ProviderError):
    """5xx, timeouts, connection resets: worth retrying with backoff."""

    retryable = True


class ProviderUnreachable(ProviderTransientError):
    """Nothing answered at the endpoint (connection refused, no such host): retried as
    OpenClaw's HTTP layer does (3 attempts), not as a 5xx is - a wrong port or URL took 18 s of
    retry lines before its one error line."""


class ProviderTimedOut(ProviderTransientError):
    """The endpoint took the request and did not answer within its deadline. Tried once more at
    most (``RetryPolicy.timeout_attempts``), and only while that try fits the retry budget: six
    tries of a hung endpoint held an ``index`` for four minutes, its files out of search with it."""


class ProviderTooManyItems(ProviderError):
    """The provider refused the request's number of inputs (or their total size).

    ``max_items`` is the per-request cap when the server's message states it.
    Splitting the batch helps; retrying it unchanged never does.
    """

    def __init__(self, message: str, max_items: int | None = None) -> None:
        super().__init__(message)
        self.max_items = max_items


class InvalidVectorError(ProviderError):
    """The response had the wrong number of vectors, wrong dims or non-finite values."""


class EmbeddingProvider(ABC):
    """One configured embedding backend.

    ``dims`` is None until known (from a table, the configured output size, or
    the first response). ``max_input_tokens`` is the per-text limit,
    ``max_batch_items`` / ``max_batch_tokens`` the per-request caps the service
    packs to. ``self_truncates`` marks providers that cut over-long input by
    their own tokenizer, so the service must not split for them.
    """

    id: str = ""
    model: str = ""
    dims: int | None = None
    max_input_tokens: int = registry.DEFAULT_MAX_INPUT_TOKENS
    max_batch_items: int = 64
    max_batch_tokens: int = 8000
    base_url: str | None = None
    output_dimensionality: int | None = None  # dims asked of the API, when configurable
    self_truncates: bool = False
    # The size is learnt from answers (a proxy, a local server, a model file), so it can change
    # under the same name; False when the model's own endpoint or the config fixes it.
    dims_learnt: bool = True
    # What the model family wants before queries and documents (``prefixes.prefixes_for``).
    prefixes: Prefixes = NO_PREFIXES

    def __init__(self) -> None:
        self._secret: str | None = None  # only for redacting error text

    # True for hosted APIs whose constructor takes ``output_dimensionality`` (the size asked of the API).
    takes_output_dims: bool = False

    @classmethod
    def from_args(cls, args: ProviderArgs) -> Self:
        """The provider for resolved settings: the registry's factory for providers whose
        constructor takes ``(api_key, model, *, base_url, headers)`` (plus ``output_dimensionality``
        when ``takes_output_dims``); others override it."""
        extra = cls.configured_timeout(args)
        # The base class's constructor takes none of these; the providers that use this factory all
        # take them (the contract above), which only a call at run time can check.
        make: Callable[..., Self] = cls
        if cls.takes_output_dims:
            return make(args.api_key or "", args.model, base_url=args.base_url,
                        headers=args.headers, output_dimensionality=cls.configured_dims(args), **extra)
        return make(args.api_key, args.model, base_url=args.base_url, headers=args.headers, **extra)

    @staticmethod
    def configured_timeout(args: ProviderArgs) -> TimeoutArg:
        """``{"timeout": s}`` from ``memorySearch.sync.embeddingBatchTimeoutSeconds``, if set."""
        s = (args.memory_search.get("sync") or {}).get("embeddingBatchTimeoutSeconds")
        return {"timeout": float(s)} if s else {}

    @staticmethod
    def configured_dims(args: ProviderArgs) -> int | None:
        """``memorySearch.outputDimensionality`` (OpenClaw's ``dimensions`` maps onto it), if set."""
        dims = args.memory_search.get("outputDimensionality")
        return int(dims) if dims else None

    def _init_remote(
        self, api_key: str | None, model: str | None, base_url: str | None, max_batch_items: int,
        max_batch_tokens: int,
    ) -> None:
        """The constructor setup hosted-API providers share: the key (kept only for ``redact`` and
        ``auth_headers``), the model and endpoint (the registry's defaults when not given; no trailing
        slash), the model's known dims and per-text limit, and the per-request caps."""
        spec = registry.get(self.id)
        self._secret = api_key
        self.model = model or spec.default_model
        # Credentials in the URL (http://user:pw@proxy/v1) are a header's, never the URL's: requests,
        # logs and status name the URL without them (secrets.split_credentials).
        self.base_url, self.url_auth = secrets.split_credentials((base_url or spec.default_base_url or "").rstrip("/"))
        # A proxy or local server (LiteLLM, ...) may serve other vectors under a known
        # model name: off the provider's own endpoint the dims come from the first
        # answer (or the configured output size), never from the provider's table.
        native = self.base_url == (spec.default_base_url or "").rstrip("/")
        # Configured output size (memorySearch.dimensions / outputDimensionality) wins everywhere.
        self.dims = self.output_dimensionality or (registry.known_dims(self.id, self.model) if native else None)
        self.dims_learnt = self.dims is None
        self.max_input_tokens = registry.max_input_tokens(self.id, self.model)
        self.max_batch_items = max_batch_items
        self.max_batch_tokens = max_batch_tokens

    url_auth: str | None = None  # "Basic ..." from the base URL's user:password (``_init_remote``)

    def with_url_auth(self, headers: Mapping[str, str]) -> dict[str, str]:
        """``headers`` plus the base URL's credentials as ``Authorization: Basic``, unless an API key
        (sent as its bearer token) or a configured Authorization header takes that place."""
        out = dict(headers)
        if self.url_auth and not self._secret and not any(k.lower() == "authorization" for k in out):
            out["Authorization"] = self.url_auth
        return out

    @abstractmethod
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors for texts being indexed, in input order (one request)."""

    @abstractmethod
    def embed_query(self, text: str) -> list[float]:
        """The vector for a search query."""

    def fingerprint_headers(self) -> Mapping[str, str]:
        """Headers this provider really sends, beyond auth (override when there are any)."""
        return {}

    def fingerprint_extra(self) -> Mapping[str, Any]:
        """Settings besides provider/model/endpoint that change the vectors."""
        return {}

    def fingerprint(self) -> str:
        """sha256 of what the vectors depend on: provider, model, endpoint, headers, dims.

        The API key is never part of it; neither are credential headers (``is_credential_header``).
        What it reads is fixed once the provider is built (``select.build_provider`` sets
        ``prefixes`` last), except through ``dims``: the service keeps its ``identity`` on that
        (``EmbeddingService._settle``).
        """
        headers = sorted(
            [k.lower(), str(v)] for k, v in self.fingerprint_headers().items() if not is_credential_header(k)
        )
        doc: dict[str, Any] = {
            "provider": self.id,
            "model": self.model,
            "baseUrl": self.base_url,
            "headers": headers,
            "outputDimensionality": self.output_dimensionality,
        }
        doc.update(self.fingerprint_extra())
        if self.prefixes:  # only when set: a model without prefixes keeps its index and cache
            doc["prefixes"] = [self.prefixes.query, self.prefixes.document]
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    def identity(self) -> EmbeddingIdentity:
        """What an index embedded by this provider records of it: id, model, ``fingerprint()``
        (its ``providerKey``) and the vector size known now."""
        return EmbeddingIdentity(self.id, self.model, self.fingerprint(), self.dims)

    def auth_headers(self) -> dict[str, str]:
        """``Authorization: Bearer <key>`` (empty without a key), for clients that call the provider's
        HTTP API themselves (a batch client); the key itself is never exposed."""
        return {"Authorization": f"Bearer {self._secret}"} if self._secret else {}

    def redact(self, text: str) -> str:
        """Remove the API key and every registered secret (``remote.headers`` values) from text
        that may reach a log or an exception."""
        if self._secret and len(self._secret) >= secrets.MIN_SECRET_LEN:
            text = text.replace(self._secret, secrets.MASK)
        return secrets.redact(text)

    def __repr__(self) -> str:  # never shows the key
        return f"<{type(self).__name__} id={self.id} model={self.model} base_url={self.base_url}>"
