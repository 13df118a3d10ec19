"""Voyage AI batch API for embeddings, over HTTP with ``httpx``.

The ``voyageai`` SDK (0.5) has no batch or files API, so this speaks Voyage's
documented OpenAI-compatible endpoints directly: ``POST /files`` (multipart,
purpose=batch), ``POST /batches`` with endpoint ``/v1/embeddings``,
completion window 12h and the model in ``request_params``, ``GET
/batches/{id}``, ``POST /batches/{id}/cancel`` and ``GET
/files/{id}/content``. Request lines are ``{custom_id, body: {input}}``;
output lines have the OpenAI shape.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

import httpx

from memindex.pipeline.embeddings import http_errors
from memindex.pipeline.embeddings.base import REQUEST_TIMEOUT_S, EmbeddingProvider
from memindex.pipeline.embeddings.batch.base import (
    BatchClient,
    BatchError,
    BatchRequest,
    BatchResults,
    BatchStatus,
    Submitted,
    batch_error,
    to_jsonl,
)
from memindex.pipeline.embeddings.batch.openai_format import map_state, parse_output_lines

ATTEMPTS = 3  # control-plane calls: a 429/5xx/connection error is retried twice


class VoyageBatchClient(BatchClient):
    provider_id = "voyage"
    max_requests = 100_000  # documented cap on inputs per batch
    completion_window = "12h"

    def __init__(self, provider: EmbeddingProvider, *, timeout: float = REQUEST_TIMEOUT_S) -> None:
        super().__init__(provider)
        self.base_url = (provider.base_url or "").rstrip("/")
        self._http = httpx.Client(timeout=timeout, headers=provider.auth_headers())  # the key stays in there

    def request_file(self, requests: Iterable[BatchRequest]) -> bytes:
        return to_jsonl({"custom_id": r.custom_id, "body": {"input": r.text}} for r in requests)

    def _request(self, what: str, method: str, path: str, **kw: Any) -> httpx.Response:
        delay = 0.3
        for attempt in range(1, ATTEMPTS + 1):
            try:
                resp = self._http.request(method, f"{self.base_url}{path}", **kw)
            except http_errors.TRANSPORT_ERRORS as exc:
                err = batch_error(self.provider_id, what, http_errors.from_transport(self.provider_id, exc))
            else:
                if resp.status_code < 400:
                    return resp
                message = http_errors.body_message(resp, self.redact)
                err = batch_error(self.provider_id, what, http_errors.from_status(
                    self.provider_id, resp.status_code, message, model=self.model, headers=resp.headers))
            if not err.retryable or attempt == ATTEMPTS:
                raise err
            time.sleep(delay)
            delay *= 3
        raise AssertionError("unreachable")

    def _json(self, what: str, method: str, path: str, **kw: Any) -> dict[str, Any]:
        resp = self._request(what, method, path, **kw)
        try:
            body = resp.json()
        except ValueError:
            raise BatchError(f"{self.provider_id} batch {what} failed: response is not JSON") from None
        if not isinstance(body, dict):
            raise BatchError(f"{self.provider_id} batch {what} failed: unexpected response")
        return body

    def submit(self, requests: list[BatchRequest], *, label: str) -> Submitted:
        data = self.request_file(requests)
        f = self._json("file upload", "POST", "/files", data={"purpose": "batch"},
                       files={"file": (f"memindex-embeddings-{label}.jsonl", data, "application/jsonl")})
        file_id = f.get("id")
        if not file_id:
            raise BatchError(f"{self.provider_id} batch file upload failed: missing file id")
        b = self._json("create", "POST", "/batches", json={
            "input_file_id": file_id, "endpoint": "/v1/embeddings", "completion_window": self.completion_window,
            "request_params": {"model": self.model, "input_type": "document"},
            "metadata": {"source": "memindex", "job": label},
        })
        if not b.get("id"):
            raise BatchError(f"{self.provider_id} batch create failed: missing batch id")
        return Submitted(str(b["id"]), str(file_id))

    def status(self, batch_id: str) -> BatchStatus:
        b = self._json("status", "GET", f"/batches/{batch_id}")
        counts = c if isinstance(c := b.get("request_counts"), dict) else {}
        errors = b.get("errors")
        first = (errors.get("data") or [None])[0] if isinstance(errors, dict) else None
        message = (first or {}).get("message") if isinstance(first, dict) else None
        return BatchStatus(
            state=map_state(b.get("status")), raw=str(b.get("status")), output_file=b.get("output_file_id"),
            error_file=b.get("error_file_id"), total=counts.get("total"), completed=counts.get("completed"),
            failed=counts.get("failed"), message=message,
        )

    def results(self, status: BatchStatus) -> BatchResults:
        out = BatchResults()
        for file_id in (status.output_file, status.error_file):
            if file_id:
                out.merge(parse_output_lines(self._request("download", "GET", f"/files/{file_id}/content").content))
        return out

    def cancel(self, batch_id: str) -> None:
        self._request("cancel", "POST", f"/batches/{batch_id}/cancel")
