"""OpenAI (and OpenAI-compatible endpoints) through the official ``openai`` SDK."""

from __future__ import annotations

from typing import Any, Mapping

import openai

from . import http_errors
from .base import EmbeddingProvider, InvalidVectorError, ProviderError
from .limits import known_dims

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "text-embedding-3-small"


class OpenAIProvider(EmbeddingProvider):
    id = "openai"

    def __init__(
        self,
        api_key: str,
        model: str = DEFAULT_MODEL,
        *,
        base_url: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        max_batch_items: int = 2048,  # API cap on inputs per request
        max_batch_tokens: int = 250_000,  # API cap is 300k tokens summed per request; margin kept
    ) -> None:
        super().__init__()
        self._init_remote(api_key, model or DEFAULT_MODEL, base_url or DEFAULT_BASE_URL,
                          max_batch_items, max_batch_tokens)
        self.headers = dict(headers or {})
        self.dims = known_dims("openai", self.model)
        # SDK retries are off: retry.py owns retries (Retry-After, budget).
        # Constructing the client does no network I/O.
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=self.base_url,
            default_headers=self.headers or None,
            max_retries=0,
            timeout=timeout,
        )

    def fingerprint_headers(self) -> Mapping[str, str]:
        return self.headers

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._embed(list(texts))

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text])[0]

    def _embed(self, texts: list[str]) -> list[list[float]]:
        try:
            resp = self._client.embeddings.create(model=self.model, input=texts)
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from None
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise http_errors.from_transport(self.id, exc) from None
        except ValueError as exc:  # the SDK's "No embedding data received"
            raise InvalidVectorError(f"{self.id}: {exc}") from None
        except openai.OpenAIError as exc:
            raise ProviderError(self.redact(f"{self.id}: {exc}")) from None
        data = sorted(resp.data, key=lambda d: d.index)
        return [list(d.embedding) for d in data]

    def _status_error(self, exc: openai.APIStatusError) -> ProviderError:
        body: Any = exc.body
        message = exc.message
        if isinstance(body, dict):
            message = str(body.get("message") or message)
            if body.get("code") == "insufficient_quota":
                message = f"insufficient_quota: {message}"
        return http_errors.from_status(
            self.id, exc.status_code, self.redact(message), model=self.model, headers=exc.response.headers
        )
