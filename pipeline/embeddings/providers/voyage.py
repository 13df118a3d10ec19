"""Voyage AI embeddings through the ``voyageai`` SDK.

SDK quirks: the endpoint is the client's ``base_url`` argument (keys starting
"al-" otherwise default to MongoDB's endpoint); the SDK drops every request
header except Authorization/Content-Type, so remote.headers cannot be sent and
are left out of the fingerprint; ``voyage-4-nano`` is run locally by the SDK,
not over HTTP.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from voyageai import error as verr
from voyageai.client import Client as VoyageClient  # the package re-exports it implicitly only

from memindex.pipeline.embeddings import http_errors
from memindex.pipeline.embeddings.base import REQUEST_TIMEOUT_S, EmbeddingProvider, InvalidVectorError, ProviderError

log = logging.getLogger(__name__)


class VoyageProvider(EmbeddingProvider):
    id = "voyage"
    takes_output_dims = True

    def __init__(
        self,
        api_key: str,
        model: str | None = None,  # None: the registry's default model (likewise base_url)
        *,
        base_url: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = REQUEST_TIMEOUT_S,
        max_batch_items: int = 1000,  # API cap on inputs per request
        max_batch_tokens: int = 120_000,  # API cap for the large models (lower than others')
        output_dimensionality: int | None = None,  # the API's output_dimension (voyage-3.5 and later)
    ) -> None:
        super().__init__()
        self.output_dimensionality = output_dimensionality
        self._init_remote(api_key, model, base_url, max_batch_items, max_batch_tokens)
        if headers:
            log.warning("voyage: the voyageai SDK does not send custom headers; ignoring %s", sorted(headers))
        # max_retries=0: one attempt; retry.py owns retries. No network I/O here.
        self._client = VoyageClient(api_key=api_key, max_retries=0, timeout=timeout, base_url=self.base_url)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._embed(list(texts), "document")

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text], "query")[0]

    def _embed(self, texts: list[str], input_type: str) -> list[list[float]]:
        try:
            extra: dict[str, Any] = {"output_dimension": self.output_dimensionality} if self.output_dimensionality else {}
            result = self._client.embed(texts, model=self.model, input_type=input_type, truncation=True, **extra)
        except (verr.Timeout, verr.APIConnectionError) as exc:
            raise http_errors.from_transport(self.id, exc) from None
        except verr.VoyageError as exc:
            raise self._api_error(exc) from None
        except http_errors.TRANSPORT_ERRORS as exc:
            raise http_errors.from_transport(self.id, exc) from None
        except (KeyError, AttributeError, TypeError, ValueError) as exc:  # malformed body
            raise InvalidVectorError(f"{self.id}: malformed response: {type(exc).__name__}: {exc}") from None
        except ImportError as exc:  # e.g. a model the SDK runs locally
            raise ProviderError(f"{self.id}: {exc}") from None
        return [list(v) for v in result.embeddings]

    def _api_error(self, exc: Any) -> ProviderError:
        status = exc.http_status
        message = self.redact(str(exc.user_message or exc))
        if isinstance(exc, verr.AuthenticationError) and not status:
            status = 401
        if not status:
            return ProviderError(f"{self.id}: {message}")
        return http_errors.from_status(self.id, int(status), message, model=self.model, headers=exc.headers)
