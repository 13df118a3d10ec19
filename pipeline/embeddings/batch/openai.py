"""OpenAI Batch API for embeddings, through the official ``openai`` SDK.

Files API (``POST /files`` purpose=batch) + Batches API (``POST /batches``
with endpoint ``/v1/embeddings`` and completion window 24h, ``GET
/batches/{id}``, ``POST /batches/{id}/cancel``), results from ``GET
/files/{id}/content``. Successful lines land in the output file and failed
ones in the error file; an expired or cancelled batch still has an output
file for what finished, so only the rest needs redoing.

The states and the output line shape are in ``openai_format`` (Voyage's
OpenAI-compatible batch API shares them).
"""

from __future__ import annotations

from typing import Any, Iterable

import openai

from memindex.pipeline.embeddings import http_errors
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
from memindex.pipeline.embeddings.providers.openai import OpenAIProvider

SDK_RETRIES = 2  # control-plane calls are few; the SDK's backoff is enough here


class OpenAIBatchClient(BatchClient):
    provider_id = "openai"
    max_requests = 50_000  # embeddings batches: at most 50,000 inputs in all
    completion_window = "24h"

    provider: OpenAIProvider

    def __init__(self, provider: OpenAIProvider) -> None:
        super().__init__(provider)
        # The provider's client already carries the key, base URL and headers.
        self._client = provider.client.with_options(max_retries=SDK_RETRIES)

    def request_file(self, requests: Iterable[BatchRequest]) -> bytes:
        # base64 (little-endian float32) makes the output file ~3x smaller than JSON floats.
        return to_jsonl({"custom_id": r.custom_id, "method": "POST", "url": "/v1/embeddings",
                         "body": {"model": self.model, "input": r.text, "encoding_format": "base64"}}
                        for r in requests)

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except openai.APIStatusError as exc:
            raise batch_error(self.provider_id, what, self.provider.status_error(exc)) from None
        except openai.APIConnectionError as exc:
            raise batch_error(self.provider_id, what, http_errors.from_transport(self.provider_id, exc)) from None
        except openai.OpenAIError as exc:
            raise BatchError(self.redact(f"{self.provider_id} batch {what} failed: {exc}")) from None

    def submit(self, requests: list[BatchRequest], *, label: str) -> Submitted:
        data = self.request_file(requests)
        f = self._call("file upload", self._client.files.create,
                       file=(f"memindex-embeddings-{label}.jsonl", data, "application/jsonl"), purpose="batch")
        if not getattr(f, "id", None):
            raise BatchError(f"{self.provider_id} batch file upload failed: missing file id")
        b = self._call("create", self._client.batches.create, input_file_id=f.id, endpoint="/v1/embeddings",
                       completion_window=self.completion_window, metadata={"source": "memindex", "job": label})
        return Submitted(b.id, f.id)

    def status(self, batch_id: str) -> BatchStatus:
        b = self._call("status", self._client.batches.retrieve, batch_id)
        counts = b.request_counts
        message = None
        errors = getattr(b.errors, "data", None) or []
        if errors:
            first = errors[0]
            message = f"{getattr(first, 'code', '') or ''}: {getattr(first, 'message', '') or ''}".strip(": ")
        return BatchStatus(
            state=map_state(b.status), raw=str(b.status), output_file=b.output_file_id,
            error_file=b.error_file_id, total=getattr(counts, "total", None),
            completed=getattr(counts, "completed", None), failed=getattr(counts, "failed", None),
            message=message,
        )

    def _content(self, file_id: str) -> bytes:
        content: bytes = self._call("download", self._client.files.content, file_id).content
        return content

    def results(self, status: BatchStatus) -> BatchResults:
        out = BatchResults()
        if status.output_file:
            out.merge(parse_output_lines(self._content(status.output_file)))
        if status.error_file:
            out.merge(parse_output_lines(self._content(status.error_file)))
        return out

    def cancel(self, batch_id: str) -> None:
        self._call("cancel", self._client.batches.cancel, batch_id)
