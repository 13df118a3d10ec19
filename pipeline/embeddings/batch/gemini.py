"""Gemini batch embeddings through the ``google-genai`` SDK.

``client.files.upload`` (resumable upload of the JSONL request file),
``client.batches.create_embeddings`` (REST ``models/{m}:asyncBatchEmbedContent``),
``client.batches.get`` / ``cancel`` (``batches/{id}``) and
``client.files.download`` for the responses file. Request lines are
``{key, request: {content, task_type, output_dimensionality}}``; response
lines carry the same key with ``response.embedding.values`` or an ``error``
status. The provider's own client is reused, so a custom base URL, headers
and the API version split apply here too.
"""

from __future__ import annotations

import io
import warnings
from typing import Any, Iterable

from google.genai import errors as genai_errors
from google.genai import types

from memindex.pipeline.embeddings import http_errors
from memindex.pipeline.embeddings.batch.base import (
    BatchClient,
    BatchError,
    BatchRequest,
    BatchResults,
    BatchState,
    BatchStatus,
    Submitted,
    as_vector,
    batch_error,
    dig,
    error_text,
    iter_jsonl,
    to_jsonl,
)
from memindex.pipeline.embeddings.providers.gemini import GeminiProvider

STATES = {
    "JOB_STATE_QUEUED": BatchState.PENDING,
    "JOB_STATE_PENDING": BatchState.PENDING,
    "JOB_STATE_RUNNING": BatchState.RUNNING,
    "JOB_STATE_UPDATING": BatchState.RUNNING,
    "JOB_STATE_PAUSED": BatchState.RUNNING,
    "JOB_STATE_CANCELLING": BatchState.RUNNING,
    "JOB_STATE_SUCCEEDED": BatchState.COMPLETED,
    "JOB_STATE_PARTIALLY_SUCCEEDED": BatchState.COMPLETED,
    "JOB_STATE_FAILED": BatchState.FAILED,
    "JOB_STATE_CANCELLED": BatchState.CANCELLED,
    "JOB_STATE_EXPIRED": BatchState.EXPIRED,
}


def map_state(raw: Any) -> BatchState:
    name = getattr(raw, "value", raw)
    name = str(name or "").upper().replace("BATCH_STATE_", "JOB_STATE_")
    return STATES.get(name, BatchState.UNKNOWN)


def parse_output_lines(data: bytes | str) -> BatchResults:
    out = BatchResults()
    for obj in iter_jsonl(data):
        cid = obj.get("key") or obj.get("custom_id") or obj.get("request_id")
        if not isinstance(cid, str):
            continue
        err = error_text(obj.get("error")) or error_text(dig(obj, "response", "error"))
        status = obj.get("status")
        if err is None and isinstance(status, dict) and status.get("message"):
            err = error_text(status)
        if err is not None:
            out.errors.setdefault(cid, err)
            continue
        vec = (as_vector(dig(obj, "response", "embedding", "values")) or as_vector(dig(obj, "embedding", "values"))
               or as_vector(dig(obj, "response", "embeddings", 0, "values")))
        if vec is None:
            out.errors.setdefault(cid, "empty embedding")
        else:
            out.vectors[cid] = vec
    return out


class GeminiBatchClient(BatchClient):
    provider_id = "gemini"
    max_requests = 50_000

    provider: GeminiProvider

    def __init__(self, provider: GeminiProvider) -> None:
        super().__init__(provider)
        self._client = provider.client
        self.output_dimensionality = provider.output_dimensionality

    def request_file(self, requests: Iterable[BatchRequest]) -> bytes:
        def line(r: BatchRequest) -> dict[str, Any]:
            req: dict[str, Any] = {"content": {"parts": [{"text": r.text}]}, "task_type": "RETRIEVAL_DOCUMENT"}
            if self.output_dimensionality:
                req["output_dimensionality"] = self.output_dimensionality
            return {"key": r.custom_id, "request": req}

        return to_jsonl(line(r) for r in requests)

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            with warnings.catch_warnings():  # create_embeddings is marked experimental by the SDK
                warnings.simplefilter("ignore")
                return fn(*args, **kw)
        except genai_errors.APIError as exc:
            if what == "create" and int(exc.code or 0) == 404:
                raise BatchError(f"gemini batch create failed: 404 (asyncBatchEmbedContent not available for "
                                 f"{self.model} at this baseUrl)") from None
            raise batch_error(self.provider_id, what, self.provider.api_error(exc)) from None
        except http_errors.TRANSPORT_ERRORS as exc:
            raise batch_error(self.provider_id, what, http_errors.from_transport(self.provider_id, exc)) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise BatchError(self.redact(f"gemini batch {what} failed: {exc}")) from None

    def submit(self, requests: list[BatchRequest], *, label: str) -> Submitted:
        data = self.request_file(requests)
        f = self._call("file upload", self._client.files.upload, file=io.BytesIO(data),
                       config=types.UploadFileConfig(mime_type="jsonl", display_name=f"memindex-embeddings-{label}"))
        if not getattr(f, "name", None):
            raise BatchError("gemini batch file upload failed: missing file name")
        job = self._call("create", self._client.batches.create_embeddings, model=self.model,
                         src=types.EmbeddingsBatchJobSource(file_name=f.name),
                         config=types.CreateEmbeddingsBatchJobConfig(display_name=f"memindex-{label}"))
        if not getattr(job, "name", None):
            raise BatchError("gemini batch create failed: missing batch name")
        return Submitted(job.name, f.name)

    def status(self, batch_id: str) -> BatchStatus:
        job = self._call("status", self._client.batches.get, name=batch_id)
        stats = job.completion_stats
        err = getattr(job, "error", None)
        return BatchStatus(
            state=map_state(job.state), raw=str(getattr(job.state, "value", job.state)),
            output_file=getattr(job.dest, "file_name", None) if job.dest else None,
            total=None, completed=getattr(stats, "successful_count", None) if stats else None,
            failed=getattr(stats, "failed_count", None) if stats else None,
            message=getattr(err, "message", None) if err else None,
        )

    def results(self, status: BatchStatus) -> BatchResults:
        if not status.output_file:
            return BatchResults()
        data = self._call("download", self._client.files.download, file=status.output_file)
        return parse_output_lines(data)

    def cancel(self, batch_id: str) -> None:
        self._call("cancel", self._client.batches.cancel, name=batch_id)
