"""Mistral embeddings over plain HTTP (POST {base}/embeddings, OpenAI-like body)."""

from __future__ import annotations

from typing import Mapping

import httpx

from memindex.pipeline.embeddings import http_errors
from memindex.pipeline.embeddings.base import REQUEST_TIMEOUT_S, EmbeddingProvider, InvalidVectorError


class MistralProvider(EmbeddingProvider):
    id = "mistral"

    def __init__(
        self,
        api_key: str,
        model: str | None = None,  # None: the registry's default model (likewise base_url)
        *,
        base_url: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = REQUEST_TIMEOUT_S,
        max_batch_items: int = 512,  # "Too many inputs in request" above this
        max_batch_tokens: int = 16_000,  # "Too many tokens in batch. Max is 16384"
    ) -> None:
        super().__init__()
        self._init_remote(api_key, model, base_url, max_batch_items, max_batch_tokens)
        self.headers = dict(headers or {})
        # Bearer first, configured headers after (they may override it, as in the reference).
        sent = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json", **self.headers}
        self._client = httpx.Client(headers=sent, timeout=timeout)  # no I/O until a request

    def fingerprint_headers(self) -> Mapping[str, str]:
        return self.headers

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._embed(list(texts))

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text])[0]

    def _embed(self, texts: list[str]) -> list[list[float]]:
        body = {"model": self.model, "input": texts, "encoding_format": "float"}
        resp = http_errors.post_json(self, self._client, f"{self.base_url}/embeddings", body)
        try:
            payload = resp.json()
        except ValueError:
            raise InvalidVectorError(f"{self.id}: response is not JSON") from None
        if isinstance(payload, dict) and (payload.get("object") == "error" or payload.get("error")):
            # A failure reported in a 200 body.
            raise http_errors.from_status(self.id, 400, http_errors.body_message(resp, self.redact), model=self.model)
        try:
            data = sorted(payload["data"], key=lambda d: d.get("index", 0))
            return [list(d["embedding"]) for d in data]
        except (KeyError, TypeError) as exc:
            raise InvalidVectorError(f"{self.id}: malformed response ({exc})") from None
