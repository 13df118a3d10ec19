"""Ollama embeddings: POST {base}/api/embeddings {model, prompt} -> {embedding}, one text per request.

Never auto-selected. Requests go one after another (the reference fanned a
whole batch out at once and timed out on CPU hosts, bug 9), with a generous
per-request timeout; the limiter caps ollama at one request in flight.
"""

from __future__ import annotations

import re
from typing import Mapping, Self

import httpx

from memindex.pipeline.embeddings import http_errors
from memindex.pipeline.embeddings.base import EmbeddingProvider, InvalidVectorError
from memindex.pipeline.embeddings.registry import ProviderArgs
from memindex.pipeline.embeddings.validate import sanitize_and_normalize


class OllamaProvider(EmbeddingProvider):
    id = "ollama"

    def __init__(
        self,
        model: str | None = None,  # None: the registry's default model (likewise base_url)
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 600.0,
        max_batch_items: int = 16,  # texts per embed_documents call (still one request each)
    ) -> None:
        super().__init__()
        # max_batch_tokens: one text per request, so only the per-text limit matters.
        self._init_remote(api_key, model, base_url, max_batch_items, 10**9)
        # Users paste the OpenAI-compatible URL (".../v1") too; the native API sits at the root.
        self.base_url = re.sub(r"/(v1|api)/?$", "", self.base_url or "")
        self.headers = dict(headers or {})
        sent = {"Content-Type": "application/json"}
        if api_key:
            sent["Authorization"] = f"Bearer {api_key}"
        sent.update(self.headers)
        self._client = httpx.Client(headers=self.with_url_auth(sent), timeout=timeout)

    @classmethod
    def from_args(cls, args: ProviderArgs) -> Self:
        return cls(args.model, base_url=args.base_url, api_key=args.api_key, headers=args.headers,
                   **cls.configured_timeout(args))

    def fingerprint_headers(self) -> Mapping[str, str]:
        return self.headers

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed_one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed_one(text)

    def _embed_one(self, text: str) -> list[float]:
        body = {"model": self.model, "prompt": text}
        resp = http_errors.post_json(self, self._client, f"{self.base_url}/api/embeddings", body)
        try:
            vec = resp.json().get("embedding")
        except (ValueError, AttributeError):
            vec = None
        if not isinstance(vec, list) or not vec:
            raise InvalidVectorError(f"{self.id}: response missing embedding[]")
        return sanitize_and_normalize(vec)
