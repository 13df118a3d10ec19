"""Typed records that travel through the pipeline, and their queue form.

Planning makes a ``FileJob`` per file to (re)index and a ``SessionDelta`` per
grown transcript; preparing one makes a ``FileRecord`` of ``ChunkRecord``s
(or a ``TouchRecord`` when only the stat changed); the single writer stores
them. Between actors they travel inside the queue's typed payloads
(``workers/wire.py``), which msgspec encodes and decodes as these dataclasses are.
Vectors are base64 float32 only in that message form; in memory, and for the
store, a vector is a list of floats or packed little-endian float32 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from memindex.pipeline.index.fingerprint import EmbeddingIdentity

Vector = Union[list[float], bytes]  # floats as embedded, or packed float32 (as stored)


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


@dataclass(slots=True)
class TouchRecord:
    """Content unchanged (same hash): the writer only refreshes size and mtime."""

    source: str
    path: str
    hash: str
    size: int
    mtime_ns: int


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
