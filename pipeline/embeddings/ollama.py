"""Ollama embeddings: POST {base}/api/embeddings {model, prompt} -> {embedding}, one text per request.

Never auto-selected. Requests go one after another (the reference fanned a
whole batch out at once and timed out on CPU hosts, bug 9), with a generous
per-request timeout; the limiter caps ollama at one request in flight.
"""

from __future__ import annotations

import re
from typing import Mapping

import httpx

from . import http_errors
from .base import EmbeddingProvider, InvalidVectorError
from .limits import max_input_tokens
from .validate import sanitize_and_normalize

DEFAULT_BASE_URL = "http://127.0.0.1:11434"
DEFAULT_MODEL = "nomic-embed-text"


class OllamaProvider(EmbeddingProvider):
    id = "ollama"

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 600.0,
        max_batch_items: int = 16,  # texts per embed_documents call (still one request each)
    ) -> None:
        super().__init__()
        self._secret = api_key
        self.model = model or DEFAULT_MODEL
        # Users paste the OpenAI-compatible URL (".../v1") too; the native API sits at the root.
        self.base_url = re.sub(r"/(v1|api)/?$", "", (base_url or DEFAULT_BASE_URL).rstrip("/"))
        self.headers = dict(headers or {})
        self.max_input_tokens = max_input_tokens("ollama", self.model)
        self.max_batch_items = max_batch_items
        self.max_batch_tokens = 10**9  # one text per request: only the per-text limit matters
        sent = {"Content-Type": "application/json"}
        if api_key:
            sent["Authorization"] = f"Bearer {api_key}"
        sent.update(self.headers)
        self._client = httpx.Client(headers=sent, timeout=timeout)

    def fingerprint_headers(self) -> Mapping[str, str]:
        return self.headers

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed_one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed_one(text)

    def _embed_one(self, text: str) -> list[float]:
        try:
            resp = self._client.post(f"{self.base_url}/api/embeddings", json={"model": self.model, "prompt": text})
        except httpx.TransportError as exc:
            raise http_errors.from_transport(self.id, exc) from None
        if resp.status_code >= 400:
            raise http_errors.from_status(
                self.id, resp.status_code, self.redact(http_errors.body_message(resp)), model=self.model, headers=resp.headers
            )
        try:
            vec = resp.json().get("embedding")
        except (ValueError, AttributeError):
            vec = None
        if not isinstance(vec, list) or not vec:
            raise InvalidVectorError(f"{self.id}: response missing embedding[]")
        return sanitize_and_normalize(vec)
