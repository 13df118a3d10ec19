"""Markdown memory files as index input: decode, chunk and embed one file."""

from __future__ import annotations

import logging

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.chunking import chunk_markdown, file_context, with_context
from memindex.pipeline.index.prepare import ChunkEmbedder, Prepared, build_record, embed_into_record, read_for_index
from memindex.pipeline.index.records import FileJob

log = logging.getLogger("memindex.indexer")

MAX_MARKDOWN_BYTES = 10 * 1024 * 1024


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


def prepare_markdown(settings: AgentSettings, job: FileJob, embedder: ChunkEmbedder | None = None) -> Prepared:
    """Read, hash, chunk and (optionally) embed one Markdown file into a writer record."""
    # Skipped files carry the index's identity too: the writer rejects identity-less
    # records in a vector index, and a rejected file would loop through re-syncs.
    ident = None if embedder is None else embedder.identity
    read = read_for_index(job, MAX_MARKDOWN_BYTES, ident)
    if isinstance(read, Prepared):
        return read
    st, data, digest = read
    text, problem = read_text(data)
    if problem:
        log.warning("%s: %s", job.path, problem)
    if text is None:
        return Prepared(build_record(job, st, digest, [], ident, problem))
    chunks = with_context(chunk_markdown(text, settings.chunk_tokens, settings.chunk_overlap),
                          file_context(job.path, text))
    return Prepared(embed_into_record(job, st, digest, chunks, embedder, problem))
