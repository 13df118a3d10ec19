"""Indexing steps as plain functions: plan a sync, prepare a file, check staleness.

The queue layer (``workers/``) calls these; they know nothing of queues.
A sync compares disk against the store by (size, mtime) first, so a sync
that finds nothing to do reads no file contents. A prepared file record is
JSON-serialisable so it can travel to the single writer.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

from .chunking import chunk_markdown
from .config import AgentSettings
from .fingerprint import KEYWORD_ONLY, EmbeddingIdentity, index_fingerprint, same_index
from .store import FileKey, StoreReader
from .vectors import to_b64
from .workspace import MemoryFile, iter_discover

log = logging.getLogger("memindex.indexer")

MAX_MARKDOWN_BYTES = 10 * 1024 * 1024


@dataclass(slots=True)  # slots: a 10,000-file plan holds 10,000 of these
class FileJob:
    """One file to (re)index; travels in queue messages as a dict."""

    source: str
    path: str
    abs_path: str
    size: int
    mtime_ns: int
    kind: str = "markdown"
    known_hash: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


@dataclass
class SyncPlan:
    generation: int
    fingerprint: dict[str, Any]
    role: str  # "live" (update in place) or "building" (rebuild beside the live index)
    jobs: list[FileJob] = field(default_factory=list)
    deletes: list[FileKey] = field(default_factory=list)
    unchanged: int = 0
    session_deltas: list[Any] = field(default_factory=list)  # session_index.SessionDelta: append only


def plan_sync(
    settings: AgentSettings,
    reader: StoreReader,
    ident: EmbeddingIdentity = KEYWORD_ONLY,
    *,
    files: Sequence[MemoryFile] | None = None,
    force: bool = False,
) -> SyncPlan:
    """Decide the target generation and which files need work."""
    fp = index_fingerprint(settings, ident)
    st = reader.state()
    if st.live_generation is None:
        gen, role = 1, "live"
    elif same_index(st.live_fingerprint, fp) and not force:
        gen, role = st.live_generation, "live"
        if st.live_fingerprint and "vectorDims" in st.live_fingerprint and "vectorDims" not in fp:
            fp["vectorDims"] = st.live_fingerprint["vectorDims"]
    elif st.building_generation is not None and same_index(st.building_fingerprint, fp) and not force:
        gen, role = st.building_generation, "building"
    else:
        gen = max(st.live_generation, st.building_generation or 0) + 1
        role = "building"
    indexed = reader.indexed_files(gen)
    on_disk = files if files is not None else iter_collect_files(settings)  # streamed, not listed
    plan = SyncPlan(gen, fp, role)
    seen: set[FileKey] = set()
    for f in on_disk:
        key = (f.source, f.path)
        seen.add(key)
        prev = indexed.get(key)
        if f.source == "sessions" and prev is not None and not force:
            # Growth below the delta thresholds is left to accumulate (the
            # session-delta detector owns it); past them only the new part is indexed.
            from .session_index import next_step

            step = next_step(settings, f, prev)
            if step == "unchanged":
                plan.unchanged += 1
                continue
            if step != "full":
                plan.session_deltas.append(step)
                continue
            prev = None
        if prev is not None and prev.size == f.size and prev.mtime_ns == f.mtime_ns and not force:
            plan.unchanged += 1
            continue
        plan.jobs.append(FileJob(f.source, f.path, str(f.abs_path), f.size, f.mtime_ns, f.kind,
                                 prev.hash if prev else None))
    plan.deletes = [k for k in indexed if k not in seen]
    return plan



def plan_agent(settings: AgentSettings, ident: EmbeddingIdentity = KEYWORD_ONLY, *,
               force: bool = False) -> tuple[SyncPlan, bool]:
    """(plan, nothing-to-do) for one agent, reading the store through its own reader.

    Nothing to do means no file work, no rebuild, nothing left pending and the
    live fingerprint unchanged: then a sync need not touch the writer at all.
    """
    from .fingerprint import dumps
    from .store import open_reader

    reader = open_reader(settings)
    try:
        plan = plan_sync(settings, reader, ident, force=force)
        st = reader.state()
        noop = (not plan.jobs and not plan.deletes and not plan.session_deltas and plan.role == "live"
                and st.live_fingerprint is not None and reader.pending_count(plan.generation) == 0
                and dumps(st.live_fingerprint) == dumps(plan.fingerprint))
    finally:
        reader.close()
    return plan, noop

def collect_files(settings: AgentSettings) -> list[MemoryFile]:
    """Every file the agent's configured sources contribute."""
    return list(iter_collect_files(settings))


def iter_collect_files(settings: AgentSettings) -> Iterator[MemoryFile]:
    """``collect_files`` as a stream (what a sync of a huge workspace uses)."""
    if "memory" in settings.sources:
        from .multimodal import extra_kind_for

        yield from iter_discover(settings, extra_kind=extra_kind_for(settings))  # + media under extraPaths (F17)
    if "sessions" in settings.sources:
        from .session_index import discover_sessions

        yield from discover_sessions(settings)


# --- preparing one file --------------------------------------------------------

class ChunkEmbedder(Protocol):
    identity: EmbeddingIdentity

    def embed_chunks(self, texts: Sequence[str], hashes: Sequence[str]) -> tuple[list[list[float] | None], set[str]]:
        """Vectors per text (None = not embedded) and the hashes served from cache."""


@dataclass
class Prepared:
    record: dict[str, Any] | None  # to write; None when the content is unchanged
    touch: dict[str, Any] | None = None  # same hash: refresh size/mtime only
    vanished: bool = False


def file_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_text(data: bytes) -> tuple[str | None, str | None]:
    """Decode a Markdown file: (text, problem). Text is None when it must be skipped."""
    if b"\x00" in data:
        return None, "binary file (contains NUL bytes); skipped"
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return data.decode("utf-8", errors="replace"), (
            f"invalid UTF-8 at byte {exc.start}; undecodable bytes replaced with U+FFFD"
        )


def prepare_file(
    settings: AgentSettings,
    job: FileJob,
    embedder: ChunkEmbedder | None = None,
    *,
    max_bytes: int = MAX_MARKDOWN_BYTES,
    chunk_text: Callable[[str], Iterable[Any]] | None = None,
) -> Prepared:
    """Read, hash, chunk and (optionally) embed one file into a writer record."""
    if job.kind == "session":
        from .session_index import prepare_session

        return prepare_session(settings, job, embedder)
    if job.kind in ("image", "audio"):
        from .multimodal import prepare_media

        return prepare_media(settings, job, embedder)  # one labelled chunk, vector from the bytes (F17)
    # Skipped files carry the index's identity too: the writer rejects identity-less
    # records in a vector index, and a rejected file would loop through re-syncs.
    ident = None if embedder is None else embedder.identity
    read = read_for_index(job, max_bytes, ident)
    if isinstance(read, Prepared):
        return read
    st, data, digest = read
    text, problem = read_text(data)
    if problem:
        log.warning("%s: %s", job.path, problem)
    if text is None:
        return Prepared(_record(job, st, digest, [], ident, problem))
    tokens, overlap = settings.chunk_tokens, settings.chunk_overlap
    chunks = list(chunk_text(text) if chunk_text else chunk_markdown(text, tokens, overlap))
    return Prepared(_embed_into_record(job, st, digest, chunks, embedder, problem))



def read_for_index(job: FileJob, max_bytes: int, ident: EmbeddingIdentity | None,
                   limit_name: str = "") -> "Prepared | tuple[os.stat_result, bytes, str]":
    """Read a job's file: (stat, bytes, sha256), or the ``Prepared`` that ends the job early.

    Vanished and symlinked files end as ``vanished``; too-large and unreadable
    ones as an error record (so the next sync does not retry them); unchanged
    content as a stat-only ``touch``.
    """
    path = Path(job.abs_path)
    try:
        st = os.lstat(path)
        if not os.path.isfile(path) or os.path.islink(path):
            return Prepared(None, vanished=True)
        if st.st_size > max_bytes:
            limit = f"{limit_name} {max_bytes:,}" if limit_name else f"{max_bytes:,}"
            log.warning("%s: %d bytes exceeds the limit (%s); skipped", job.path, st.st_size, limit)
            return Prepared(_record(job, st, f"size:{st.st_size}:{st.st_mtime_ns}", [], ident,
                                    f"file too large ({st.st_size:,} bytes > {limit}); skipped"))
        data = path.read_bytes()
    except FileNotFoundError:
        return Prepared(None, vanished=True)
    except OSError as exc:
        log.warning("cannot read %s: %s", job.path, exc)
        return Prepared(_record(job, None, f"error:{exc.errno}", [], ident, f"unreadable: {exc.strerror}"))
    digest = file_hash(data)
    if job.known_hash == digest:
        return Prepared(None, touch={"source": job.source, "path": job.path, "hash": digest,
                                     "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return st, data, digest

def _embed_into_record(job, st, digest, chunks, embedder, problem) -> dict[str, Any]:
    vectors: list[list[float] | None] = [None] * len(chunks)
    hits: set[str] = set()
    ident = None
    if embedder is not None and chunks:
        vectors, hits = embedder.embed_chunks([c.text for c in chunks], [c.hash for c in chunks])
    if embedder is not None:
        # Also for a file with no chunks: the writer rejects records whose identity
        # does not match the index, and an empty file must not loop through re-syncs.
        ident = embedder.identity
    out = []
    for c, v in zip(chunks, vectors):
        out.append({"start_line": c.start_line, "end_line": c.end_line, "hash": c.hash, "text": c.text,
                    "embedding": to_b64(v) if v else None, "cacheable": c.hash not in hits})
    rec = _record(job, st, digest, out, ident, problem)
    rec["cache_hits"] = sorted(hits)
    return rec


def _record(job: FileJob, st: os.stat_result | None, digest: str, chunks: list[dict[str, Any]],
            ident: EmbeddingIdentity | None, error: str | None) -> dict[str, Any]:
    return {
        "source": job.source,
        "path": job.path,
        "abs_path": job.abs_path,
        "hash": digest,
        "size": st.st_size if st else job.size,
        "mtime_ns": st.st_mtime_ns if st else job.mtime_ns,
        "kind": job.kind,
        "error": error,
        "chunks": chunks,
        "embedding": None if ident is None else {
            "provider": ident.provider, "model": ident.model,
            "provider_key": ident.provider_key, "dims": ident.dims,
        },
    }


def is_current(record: dict[str, Any]) -> bool:
    """Does the file on disk still hold what was chunked? (The writer's stale check.)

    Size+mtime equal means yes without reading; otherwise compare content hashes.
    Files recorded without a content hash (too large / unreadable) compare by stat only.
    """
    if record.get("kind") == "session":
        from .session_index import is_current_session

        return is_current_session(record)  # growth after the read is fine for a transcript
    path = Path(record["abs_path"])
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if st.st_size == record["size"] and st.st_mtime_ns == record["mtime_ns"]:
        return True
    if record["hash"].startswith(("size:", "error:")):
        return False
    try:
        return file_hash(path.read_bytes()) == record["hash"]
    except OSError:
        return False


def still_on_disk(settings: AgentSettings, key: FileKey) -> bool:
    """Is this indexed path still a real (non-symlink) file? Deletes are applied only if not."""
    source, path = key
    base = settings.sessions_dir.parent if source == "sessions" else settings.workspace
    candidate = base / path
    return candidate.is_file() and not candidate.is_symlink()
