"""Gemini embeddings through the ``google-genai`` SDK.

SDK quirks handled here:
- a custom base URL must not carry the API version: ``.../v1beta`` is split
  into ``base_url`` + ``api_version`` (the SDK would otherwise default to v1);
- for multimodal models (gemini-embedding-2-*) the SDK merges a list of plain
  strings into ONE content with many parts, i.e. one vector for the whole list,
  so every text is wrapped in its own ``Content``;
- the Developer API path is always ``models/{m}:batchEmbedContents``, queries
  included; ``vertexai=False`` keeps GOOGLE_GENAI_USE_VERTEXAI from switching it.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from memindex.pipeline.embeddings import http_errors, registry
from memindex.pipeline.embeddings.base import REQUEST_TIMEOUT_S, EmbeddingProvider, InvalidVectorError, ProviderAuthError, ProviderError

_VERSION = re.compile(r"^v\d+(?:(?:alpha|beta)\d*)?$")


def split_base_url(url: str) -> tuple[str, str]:
    """'https://host/v1beta' -> ('https://host/', 'v1beta'); anything from /openai on is dropped."""
    url = re.sub(r"/openai(/.*)?$", "", url.strip().rstrip("/"))
    head, _, last = url.rpartition("/")
    if _VERSION.match(last) and "://" in head + "/":
        return head + "/", last
    return url + "/", "v1beta"


def output_dims_for(model: str, configured: int | None) -> int | None:
    """The output_dimensionality to request (None = the model's native size).

    Models with a fixed set of sizes (gemini-embedding-2-*) default to the largest;
    others to the registry's known size (gemini-embedding-001: 768, spec F3).
    """
    choices = registry.dims_choices("gemini", model)
    if choices:
        dims = configured or max(choices)
        if dims not in choices:
            allowed = ", ".join(map(str, choices[:-1])) + f" or {choices[-1]}"
            raise ProviderAuthError(f"gemini: outputDimensionality for {model} must be {allowed} (got {dims})")
        return dims
    return configured or registry.known_dims("gemini", model)


class GeminiProvider(EmbeddingProvider):
    id = "gemini"
    takes_output_dims = True

    def __init__(
        self,
        api_key: str,
        model: str | None = None,  # None: the registry's default model (likewise base_url)
        *,
        base_url: str | None = None,
        headers: Mapping[str, str] | None = None,
        output_dimensionality: int | None = None,
        timeout: float = REQUEST_TIMEOUT_S,
        max_batch_items: int = 100,  # batchEmbedContents: at most 100 requests per call
        max_batch_tokens: int = 32_000,
    ) -> None:
        super().__init__()
        self._init_remote(api_key, model, base_url, max_batch_items, max_batch_tokens)
        self.headers = dict(headers or {})
        self.output_dimensionality = output_dims_for(self.model, output_dimensionality)
        self.dims = self.output_dimensionality
        sdk_base, api_version = split_base_url(self.base_url or "")  # (set by _init_remote)
        # retry_options=None -> the SDK makes exactly one attempt; retry.py retries.
        # The batch client reuses it (same base URL, headers and API version).
        self.client = genai.Client(
            api_key=api_key,
            vertexai=False,
            http_options=types.HttpOptions(
                base_url=sdk_base,
                api_version=api_version,
                headers=self.with_url_auth(self.headers) or None,
                timeout=int(timeout * 1000),  # milliseconds
            ),
        )

    def fingerprint_headers(self) -> Mapping[str, str]:
        return self.headers

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._embed(list(texts), "RETRIEVAL_DOCUMENT")

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text], "RETRIEVAL_QUERY")[0]

    def embed_media(self, items: list[tuple[bytes, str]]) -> list[list[float]]:
        """One vector per (bytes, MIME type), sent as inline-data parts (F17, gemini-embedding-2-*)."""
        contents = [types.Content(parts=[types.Part.from_bytes(data=d, mime_type=m)]) for d, m in items]
        return self._embed_contents(contents, "RETRIEVAL_DOCUMENT")

    def _embed(self, texts: list[str], task_type: str) -> list[list[float]]:
        return self._embed_contents([types.Content(parts=[types.Part(text=t)]) for t in texts], task_type)

    def _embed_contents(self, contents: list[types.Content], task_type: str) -> list[list[float]]:
        config = types.EmbedContentConfig(task_type=task_type, output_dimensionality=self.output_dimensionality)
        try:
            resp = self.client.models.embed_content(model=self.model, contents=contents, config=config)
        except genai_errors.APIError as exc:
            raise self.api_error(exc) from None
        except http_errors.TRANSPORT_ERRORS as exc:
            raise http_errors.from_transport(self.id, exc) from None
        except (ValueError, TypeError) as exc:  # SDK-side validation / malformed response
            raise ProviderError(self.redact(f"{self.id}: {exc}")) from None
        embeddings = resp.embeddings or []
        vectors = [list(e.values or []) for e in embeddings]
        if any(not v for v in vectors):
            raise InvalidVectorError(f"{self.id}: response contained an empty embedding")
        return vectors

    def api_error(self, exc: genai_errors.APIError) -> ProviderError:
        """Our error type for an SDK API error (shared with the batch client), redacted."""
        status = int(exc.code or 0)
        message = self.redact(str(exc.message or exc.status or exc))
        headers: Any = getattr(getattr(exc, "response", None), "headers", None)
        retry_after = http_errors.retry_after_from_headers(headers) if headers is not None else None
        if retry_after is None:
            retry_after = http_errors.retry_delay_from_google_details(exc.details)
        return http_errors.from_status(self.id, status, message, model=self.model, retry_after=retry_after)
