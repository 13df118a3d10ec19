"""OpenAI (and OpenAI-compatible endpoints) through the official ``openai`` SDK."""

from __future__ import annotations

from typing import Any, Mapping

import openai

from memindex.pipeline.embeddings import http_errors
from memindex.pipeline.embeddings.base import REQUEST_TIMEOUT_S, EmbeddingProvider, InvalidVectorError, ProviderError


class OpenAIProvider(EmbeddingProvider):
    id = "openai"
    takes_output_dims = True

    def __init__(
        self,
        api_key: str,
        model: str | None = None,  # None: the registry's default model (likewise base_url)
        *,
        base_url: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = REQUEST_TIMEOUT_S,
        max_batch_items: int = 2048,  # API cap on inputs per request
        max_batch_tokens: int = 250_000,  # API cap is 300k tokens summed per request; margin kept
        output_dimensionality: int | None = None,  # the API's `dimensions` (text-embedding-3 and compatibles)
    ) -> None:
        super().__init__()
        self.output_dimensionality = output_dimensionality
        self._init_remote(api_key, model, base_url, max_batch_items, max_batch_tokens)
        self.headers = dict(headers or {})
        # SDK retries are off: retry.py owns retries (Retry-After, budget).
        # Constructing the client does no network I/O. The batch client reuses it.
        self.client = openai.OpenAI(
            api_key=api_key,
            base_url=self.base_url,
            default_headers=self.with_url_auth(self.headers) or None,
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
            extra: dict[str, Any] = {"dimensions": self.output_dimensionality} if self.output_dimensionality else {}
            resp = self.client.embeddings.create(model=self.model, input=texts, **extra)
        except openai.APIStatusError as exc:
            raise self.status_error(exc) from None
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise http_errors.from_transport(self.id, exc) from None
        except ValueError as exc:  # the SDK's "No embedding data received"
            raise InvalidVectorError(f"{self.id}: {exc}") from None
        except (AttributeError, TypeError):  # the SDK's own parser met a body that is not embeddings
            raise self._not_embeddings() from None
        except openai.OpenAIError as exc:
            raise ProviderError(self.redact(f"{self.id}: {exc}")) from None
        # A 200 that is not JSON (a proxy's or a captive portal's HTML page) reaches us as the
        # body's text; JSON of another shape as a response object with fields missing.
        if isinstance(resp, (str, bytes)):
            raise self._not_embeddings()
        try:
            data = sorted(resp.data, key=lambda d: d.index)
            return [list(d.embedding) for d in data]
        except (AttributeError, TypeError, KeyError) as exc:
            raise InvalidVectorError(f"{self.id}: malformed response ({type(exc).__name__}): check "
                                     "its baseUrl") from None

    def _not_embeddings(self) -> InvalidVectorError:
        return InvalidVectorError(f"{self.id}: the response is not JSON embeddings (an HTML page?): "
                                  "check its baseUrl")

    def status_error(self, exc: openai.APIStatusError) -> ProviderError:
        """Our error type for an SDK status error (shared with the batch client), redacted."""
        body: Any = exc.body
        message = exc.message
        if isinstance(body, dict):
            message = str(body.get("message") or message)
            if body.get("code") == "insufficient_quota":
                message = f"insufficient_quota: {message}"
        return http_errors.from_status(
            self.id, exc.status_code, self.redact(message), model=self.model, headers=exc.response.headers
        )
