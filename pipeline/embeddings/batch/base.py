"""What every provider batch client shares: states, results, JSONL helpers.

A batch client does the provider's wire protocol only: build the request
file (one embeddings request per line, each with a custom id), upload it,
create the batch, report its status in a common vocabulary, download and
parse the output and error files, cancel. Deciding when to poll, what to
redo and where results go is the queue layer's job (workers/batch_actors.py).
"""

from __future__ import annotations

import base64
import json
import logging
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Iterator, Mapping

from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.base import EmbeddingProvider, ProviderError

log = logging.getLogger("memindex.batch")


class BatchState(str, Enum):
    """The common state of a remote batch, whatever the provider calls it."""

    PENDING = "pending"  # accepted, validating or queued
    RUNNING = "running"  # in progress, finalizing, or cancelling
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"  # a state this code does not know: it times out like any other

    @property
    def terminal(self) -> bool:
        return self in (BatchState.COMPLETED, BatchState.FAILED, BatchState.EXPIRED, BatchState.CANCELLED)


class BatchError(ProviderError):
    """A batch control-plane call failed (upload, create, status, download, cancel)."""


def batch_error(provider_id: str, what: str, exc: ProviderError) -> BatchError:
    """A provider error from a control-plane call, as a BatchError that keeps its retryability."""
    err = BatchError(f"{provider_id} batch {what} failed: {exc}")
    err.retryable = exc.retryable
    return err


@dataclass(frozen=True)
class BatchRequest:
    custom_id: str
    text: str


@dataclass(frozen=True)
class Submitted:
    batch_id: str
    input_file_id: str | None


@dataclass
class BatchStatus:
    state: BatchState
    raw: str  # the provider's own status word
    output_file: str | None = None
    error_file: str | None = None
    total: int | None = None
    completed: int | None = None
    failed: int | None = None
    message: str | None = None  # why it failed, when the provider says


@dataclass
class BatchResults:
    """Parsed output: vectors and per-item errors by custom id."""

    vectors: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def merge(self, other: "BatchResults") -> None:
        self.vectors.update(other.vectors)
        for cid, msg in other.errors.items():
            if cid not in self.vectors:
                self.errors.setdefault(cid, msg)


class BatchClient(ABC):
    """One provider's batch API, bound to one configured provider (key, endpoint, model)."""

    provider_id: str = ""
    max_requests: int = 50_000  # per batch (OpenAI: 50,000 embedding inputs)

    def __init__(self, provider: EmbeddingProvider) -> None:
        self.provider = provider
        self.model = provider.model

    @abstractmethod
    def request_file(self, requests: Iterable[BatchRequest]) -> bytes:
        """The JSONL input file."""

    @abstractmethod
    def submit(self, requests: list[BatchRequest], *, label: str) -> Submitted:
        """Upload the request file and create the batch."""

    @abstractmethod
    def status(self, batch_id: str) -> BatchStatus:
        """The batch's current state (raises BatchError when the call itself fails)."""

    @abstractmethod
    def results(self, status: BatchStatus) -> BatchResults:
        """Download and parse the output and error files named by a terminal status."""

    @abstractmethod
    def cancel(self, batch_id: str) -> None:
        """Ask the provider to stop the batch (idempotent)."""

    def redact(self, text: str) -> str:
        return self.provider.redact(text)


# --- helpers ---------------------------------------------------------------------

def custom_ids(hashes: Iterable[str]) -> dict[str, str]:
    """custom id -> chunk hash. Ids are short hash prefixes (providers cap ids at 64
    chars); the rare prefix collision gets a numbered id instead."""
    out: dict[str, str] = {}
    for i, h in enumerate(dict.fromkeys(hashes)):
        cid = f"c{h[:32]}"
        if cid in out:
            cid = f"n{i}"
        out[cid] = h
    return out


def to_jsonl(lines: Iterable[Mapping[str, Any]]) -> bytes:
    return b"".join(json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
                    for line in lines)


def iter_jsonl(data: bytes | str) -> Iterator[dict[str, Any]]:
    """Objects of a JSONL file; blank and malformed lines are skipped (and logged)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            log.warning("batch output line %d is not JSON; skipped", n)
            continue
        if isinstance(obj, dict):
            yield obj


def as_vector(value: Any) -> list[float] | None:
    """A float list, or base64 little-endian float32 (encoding_format=base64)."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value)
        except ValueError:
            return None
        if not raw or len(raw) % 4:
            return None
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    if isinstance(value, list) and value and all(isinstance(x, (int, float)) for x in value):
        return [float(x) for x in value]
    return None


def dig(obj: Any, *path: Any) -> Any:
    """obj[path[0]][path[1]]... or None when any step is missing."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(obj, list) or len(obj) <= key:
                return None
        elif not isinstance(obj, dict):
            return None
        obj = obj[key] if isinstance(key, int) else obj.get(key)
    return obj


def error_text(obj: Any) -> str | None:
    """A message out of the error shapes providers use ({message}, {error:{message}}, a string)."""
    if obj is None or obj == {}:
        return None
    if isinstance(obj, str):
        return obj or None
    if isinstance(obj, dict):
        for key in ("message", "detail"):
            if obj.get(key):
                code = obj.get("code")
                return f"{code}: {obj[key]}" if code else str(obj[key])
        if "error" in obj:
            return error_text(obj["error"])
        return json.dumps(obj)[:300]
    return str(obj)[:300]


def batch_client_for(provider: EmbeddingProvider | None) -> BatchClient | None:
    """The batch client for a provider (its registry row's ``batch_client``, imported now),
    or None when it has no batch API here."""
    spec = registry.find(provider.id) if provider is not None else None
    if provider is None or spec is None or spec.batch_client is None:
        return None
    client: BatchClient = registry.load(spec.batch_client)(provider)
    return client
