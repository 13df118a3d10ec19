"""Typed records that travel through the pipeline, and their queue form.

Planning makes a ``FileJob`` per file to (re)index and a ``SessionDelta`` per
grown transcript; preparing one makes a ``FileRecord`` of ``ChunkRecord``s
(or a ``TouchRecord`` when only the stat changed); the single writer stores
them. Between actors they travel as dramatiq messages: ``to_message()`` gives
a JSON-safe dict and ``from_message()`` reads one back. Vectors are base64
float32 only in that message form; in memory, and for the store, a vector is
a list of floats or packed little-endian float32 bytes.
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Union

from memindex.pipeline.index.fingerprint import EmbeddingIdentity
from memindex.pipeline.store.vectors import pack

Vector = Union[list[float], bytes]  # floats as embedded, or packed float32 (as stored)
Message = dict[str, Any]


def _vector_to_message(vec: Vector | None) -> str | None:
    if not vec:
        return None
    return base64.b64encode(vec if isinstance(vec, bytes) else pack(vec)).decode("ascii")


def _vector_from_message(text: str | None) -> bytes | None:
    return base64.b64decode(text) if text else None  # stays packed: the store keeps float32 bytes


@dataclass(slots=True)  # slots: a 10,000-file plan holds 10,000 of these
class FileJob:
    """One file to (re)index."""

    source: str
    path: str
    abs_path: str
    size: int
    mtime_ns: int
    kind: str = "markdown"
    known_hash: str | None = None  # the indexed content hash: same bytes -> only a touch

    def to_message(self) -> Message:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_message(cls, m: Mapping[str, Any]) -> "FileJob":
        return cls(**m)


@dataclass(slots=True)
class SessionDelta:
    """Index only a transcript's turns after ``start_byte`` and append them."""

    source: str
    path: str
    abs_path: str
    start_byte: int
    start_line: int
    base_hash: str  # files-row hash this delta extends
    prev: dict[str, Any]  # that row's extra

    def to_message(self) -> Message:
        return asdict(self)

    @classmethod
    def from_message(cls, m: Mapping[str, Any]) -> "SessionDelta":
        return cls(**{f.name: m[f.name] for f in fields(cls)})


@dataclass(slots=True)
class TouchRecord:
    """Content unchanged (same hash): the writer only refreshes size and mtime."""

    source: str
    path: str
    hash: str
    size: int
    mtime_ns: int

    def to_message(self) -> Message:
        return asdict(self)

    @classmethod
    def from_message(cls, m: Mapping[str, Any]) -> "TouchRecord":
        return cls(**{f.name: m[f.name] for f in fields(cls)})


@dataclass(slots=True)
class ChunkRecord:
    """One chunk to store: its lines, content hash, text and (maybe) vector."""

    start_line: int
    end_line: int
    hash: str
    text: str
    embedding: Vector | None = None
    cacheable: bool = True  # False for a vector served from the cache (its row is only refreshed)
    context: str = ""  # keyword-indexed with the text, never stored as it (chunking.file_context)

    def to_message(self) -> Message:
        return {"start_line": self.start_line, "end_line": self.end_line, "hash": self.hash, "text": self.text,
                "embedding": _vector_to_message(self.embedding), "cacheable": self.cacheable,
                "context": self.context}

    @classmethod
    def from_message(cls, m: Mapping[str, Any]) -> "ChunkRecord":
        return cls(m["start_line"], m["end_line"], m["hash"], m["text"], _vector_from_message(m.get("embedding")),
                   m.get("cacheable", True), m.get("context", ""))


@dataclass(slots=True)
class FileRecord:
    """A prepared file: what the writer stores for it (replacing, or appending to, its chunks)."""

    source: str
    path: str
    abs_path: str
    hash: str  # content sha256, or a "size:"/"error:" marker for a file that was skipped
    size: int
    mtime_ns: int
    kind: str = "markdown"
    error: str | None = None  # the file's problem, shown by ``status``
    chunks: list[ChunkRecord] = field(default_factory=list)
    # Which vector space the chunks belong to. Skipped files carry it too: the writer
    # rejects identity-less records in a vector index.
    embedding: EmbeddingIdentity | None = None
    cache_hits: list[str] = field(default_factory=list)  # chunk hashes whose vectors came from the cache
    extra: dict[str, Any] | None = None  # stored on the files row (a transcript's delta state)
    base_hash: str | None = None  # set on an append: the files-row hash these chunks extend
    continues: bool = False  # a transcript read up to the per-read cap: the rest is the next delta

    def to_message(self) -> Message:
        return {
            "source": self.source, "path": self.path, "abs_path": self.abs_path, "hash": self.hash,
            "size": self.size, "mtime_ns": self.mtime_ns, "kind": self.kind, "error": self.error,
            "chunks": [c.to_message() for c in self.chunks],
            "embedding": None if self.embedding is None else asdict(self.embedding),
            "cache_hits": list(self.cache_hits), "extra": self.extra, "base_hash": self.base_hash,
            **({"continues": True} if self.continues else {}),
        }

    @classmethod
    def from_message(cls, m: Mapping[str, Any]) -> "FileRecord":
        ident = m.get("embedding")
        return cls(
            m["source"], m["path"], m["abs_path"], m["hash"], m["size"], m["mtime_ns"], m.get("kind", "markdown"),
            m.get("error"), [ChunkRecord.from_message(c) for c in m.get("chunks") or []],
            None if ident is None else EmbeddingIdentity(**ident), list(m.get("cache_hits") or []),
            m.get("extra"), m.get("base_hash"), bool(m.get("continues")),
        )
