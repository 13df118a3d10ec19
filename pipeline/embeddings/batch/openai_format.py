"""The OpenAI batch format: job states and output lines, shared by OpenAI's and Voyage's batch APIs.

Kept apart from ``openai.py`` so the Voyage client needs neither the ``openai`` SDK nor
the OpenAI client. An output line is ``custom_id`` plus ``response.status_code/body``
or ``error``.
"""

from __future__ import annotations

from memindex.pipeline.embeddings.batch.base import BatchResults, BatchState, as_vector, dig, error_text, iter_jsonl

STATES = {
    "validating": BatchState.PENDING,
    "queued": BatchState.PENDING,
    "in_progress": BatchState.RUNNING,
    "finalizing": BatchState.RUNNING,
    "cancelling": BatchState.RUNNING,
    "completed": BatchState.COMPLETED,
    "failed": BatchState.FAILED,
    "expired": BatchState.EXPIRED,
    "cancelled": BatchState.CANCELLED,
    "canceled": BatchState.CANCELLED,
}


def map_state(raw: str | None) -> BatchState:
    return STATES.get((raw or "").lower(), BatchState.UNKNOWN)


def parse_output_lines(data: bytes | str) -> BatchResults:
    """Output or error file lines -> vectors / errors by custom_id."""
    out = BatchResults()
    for obj in iter_jsonl(data):
        cid = obj.get("custom_id")
        if not isinstance(cid, str):
            continue
        err = error_text(obj.get("error"))
        resp = r if isinstance(r := obj.get("response"), dict) else {}
        status = resp.get("status_code")
        body = resp.get("body")
        if err is None and isinstance(status, int) and status >= 400:
            err = f"HTTP {status}: {error_text(body) or 'error'}"
        if err is None and isinstance(body, dict) and body.get("error"):
            err = error_text(body.get("error"))
        if err is not None:
            out.errors.setdefault(cid, err)
            continue
        vec = as_vector(dig(body, "data", 0, "embedding"))
        if vec is None:
            out.errors.setdefault(cid, "empty embedding")
        else:
            out.vectors[cid] = vec
            out.errors.pop(cid, None)
    return out
