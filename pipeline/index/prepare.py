"""What every preparer shares: reading a job's file, building and embedding its record.

The Markdown, media and session preparers (``markdown``, ``media``,
``sessions``) build on these; ``preparers`` maps a file kind to its preparer.
This module imports none of them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from memindex.pipeline.errors import ProviderError
from memindex.pipeline.index.chunking import Chunk
from memindex.pipeline.index.fingerprint import EmbeddingIdentity
from memindex.pipeline.index.records import ChunkRecord, FileJob, FileRecord, TouchRecord
from memindex.pipeline.index.workspace import name_problem
from memindex.pipeline.store.schema import EMBED_PENDING, READ_ERROR

log = logging.getLogger("memindex.indexer")


class ChunkEmbedder(Protocol):
    @property
    def identity(self) -> EmbeddingIdentity:
        """The vector space the vectors are in (read-only: the wrappers derive it from their inner embedder)."""

    def embed_chunks(self, texts: Sequence[str], hashes: Sequence[str]) -> tuple[list[list[float] | None], set[str]]:
        """Vectors per text (None = not embedded) and the hashes served from cache."""


@dataclass
class Prepared:
    record: FileRecord | None  # to write; None when the content is unchanged
    touch: TouchRecord | None = None  # same hash: refresh size/mtime only
    vanished: bool = False


def file_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_record(job: FileJob, st: os.stat_result | None, digest: str, chunks: list[ChunkRecord],
                 ident: EmbeddingIdentity | None, error: str | None) -> FileRecord:
    """The writer record for ``job``: stat from ``st`` (the job's when the file was not read)."""
    return FileRecord(job.source, job.path, job.abs_path, digest,
                      st.st_size if st else job.size, st.st_mtime_ns if st else job.mtime_ns,
                      job.kind, error, chunks, ident)


def read_for_index(job: FileJob, max_bytes: int, ident: EmbeddingIdentity | None,
                   limit_name: str = "") -> Prepared | tuple[os.stat_result, bytes, str]:
    """Read a job's file: (stat, bytes, sha256), or the ``Prepared`` that ends the job early.

    Vanished and symlinked files end as ``vanished``; too-large, unreadable and
    unnamable ones as an error record (so the next sync does not retry them);
    unchanged content as a stat-only ``touch``.
    """
    path = Path(job.abs_path)
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):  # a symlink, directory or device now: not a memory file
            return Prepared(None, vanished=True)
        bad_name = name_problem(job.abs_path)
        if bad_name:
            log.warning("%s: %s", job.path, bad_name)
            return Prepared(build_record(job, st, f"size:{st.st_size}:{st.st_mtime_ns}", [], ident, bad_name))
        if st.st_size > max_bytes:
            limit = f"{limit_name} {max_bytes:,}" if limit_name else f"{max_bytes:,}"
            log.warning("%s: %d bytes exceeds the limit (%s); skipped", job.path, st.st_size, limit)
            return Prepared(build_record(job, st, f"size:{st.st_size}:{st.st_mtime_ns}", [], ident,
                                         f"file too large ({st.st_size:,} bytes > {limit}); skipped"))
        data = path.read_bytes()
    except FileNotFoundError:
        return Prepared(None, vanished=True)
    except OSError as exc:
        log.warning("cannot read %s: %s", job.path, exc)
        return Prepared(build_record(job, None, f"{READ_ERROR}{exc.errno}", [], ident, f"unreadable: {exc.strerror}"))
    digest = file_hash(data)
    if job.known_hash == digest:
        return Prepared(None, touch=TouchRecord(job.source, job.path, digest, st.st_size, st.st_mtime_ns))
    return st, data, digest


def unpreparable(job: FileJob, exc: BaseException, ident: EmbeddingIdentity | None) -> FileRecord:
    """The problem record of a file whose preparation raised: skipped and reported, never retried
    until it changes (a provider failure instead leaves it pending its vectors)."""
    why = f"{type(exc).__name__}: {exc}"
    problem = (f"{EMBED_PENDING} ({why})" if isinstance(exc, ProviderError)
               else f"could not be indexed ({why}); skipped")
    log.warning("%s: %s", job.path, problem)
    return build_record(job, None, f"error:{type(exc).__name__}", [], ident, problem)


def embed_into_record(job: FileJob, st: os.stat_result | None, digest: str, chunks: Sequence[Chunk],
                      embedder: ChunkEmbedder | None, problem: str | None) -> FileRecord:
    """``build_record`` for text chunks, embedded through ``embedder`` (and its cache) if there is one."""
    vectors: list[list[float] | None] = [None] * len(chunks)
    hits: set[str] = set()
    ident = None
    if embedder is not None and chunks:
        try:
            vectors, hits = embedder.embed_chunks([c.text for c in chunks], [c.hash for c in chunks])
        except ProviderError as exc:
            # Keyword indexing never waits for embeddings: write the text now, vectors later.
            # INFO per file: the provider's failure itself is one WARNING (its breaker opening).
            log.info("%s: %s (%s); indexed for keyword search", job.path, EMBED_PENDING, exc)
            problem = f"{EMBED_PENDING} ({exc}); keyword-searchable until a later sync embeds it" + (
                f"; {problem}" if problem else "")
    if embedder is not None:
        # Also for a file with no chunks: the writer rejects records whose identity
        # does not match the index, and an empty file must not loop through re-syncs.
        ident = embedder.identity
    out = [ChunkRecord(c.start_line, c.end_line, c.hash, c.text, v or None, c.hash not in hits, c.context)
           for c, v in zip(chunks, vectors)]
    rec = build_record(job, st, digest, out, ident, problem)
    rec.cache_hits = sorted(hits)
    return rec


def embed_missing(records: Sequence[FileRecord], embedder: ChunkEmbedder) -> int:
    """Embed the chunks of ``records`` that have no vector yet, in one call (the compute side,
    issue 18: the provider sees a message's texts together); returns how many were embedded.

    A provider failure leaves the texts keyword-searchable with the "embedding pending"
    problem, exactly as ``embed_into_record`` does when it embeds inline.
    """
    todo = [(r, c) for r in records for c in r.chunks if not c.embedding]
    if not todo:
        return 0
    touched = list({id(r): r for r, _ in todo}.values())
    try:
        vectors, hits = embedder.embed_chunks([c.text for _, c in todo], [c.hash for _, c in todo])
    except ProviderError as exc:
        if exc.per_input and len(touched) > 1:
            # The provider refused some file's text (not the key, not the batch size): one request
            # per file finds it, and the others get their vectors instead of waiting with it.
            return sum(embed_missing([rec], embedder) for rec in touched)
        for rec in touched:
            log.info("%s: %s (%s); indexed for keyword search", rec.path, EMBED_PENDING, exc)
            rec.error = f"{EMBED_PENDING} ({exc}); keyword-searchable until a later sync embeds it" + (
                f"; {rec.error}" if rec.error else "")
        return 0
    for (rec, c), v in zip(todo, vectors):
        if v:
            c.embedding = v
            c.cacheable = c.hash not in hits
    for rec in touched:
        if hits:
            rec.cache_hits = sorted(set(rec.cache_hits) | {c.hash for c in rec.chunks if c.hash in hits})
        rec.embedding = embedder.identity  # it may have learnt its dims just now
    return sum(1 for v in vectors if v)


def file_is_current(record: FileRecord) -> bool:
    """Does the file on disk still hold what was read? (The writer's stale check for whole files.)

    Size+mtime equal means yes without reading; otherwise compare content hashes.
    Files recorded without a content hash (too large / unreadable) compare by stat only.
    """
    path = Path(record.abs_path)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if st.st_size == record.size and st.st_mtime_ns == record.mtime_ns:
        return True
    if record.hash.startswith(("size:", "error:")):
        return False
    try:
        return file_hash(path.read_bytes()) == record.hash
    except OSError:
        return False
