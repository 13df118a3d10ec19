"""Markdown memory files as index input: decode, chunk and embed one file."""

from __future__ import annotations

import logging

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.chunking import chunk_markdown, file_context, with_context
from memindex.pipeline.index.prepare import ChunkEmbedder, Prepared, build_record, embed_into_record, read_for_index
from memindex.pipeline.index.records import FileJob

log = logging.getLogger("memindex.indexer")

MAX_MARKDOWN_BYTES = 10 * 1024 * 1024


# A note is binary when its NUL bytes are more than stray ones: UTF-16 text or a renamed image
# is full of them (and rarely valid UTF-8), while a note an editor or an agent left one NUL in is
# still text, and OpenClaw indexes it (git's "any NUL is binary" rule lost such notes whole).
MAX_NUL_SHARE = 0.01


def read_text(data: bytes) -> tuple[str | None, str | None]:
    """Decode a Markdown file: (text, problem). Text is None when it must be skipped.

    Indexing and ``memory_get`` both read notes through this, so a snippet and the lines
    ``memory_get`` returns for it are the same text.
    """
    nuls = data.count(b"\x00")
    wide = _wide_text(data) if nuls else None
    if wide is not None:
        return wide, None
    if nuls and (nuls > max(1, len(data) * MAX_NUL_SHARE) or not _valid_utf8(data)):
        return None, "binary file (contains NUL bytes); skipped"
    problems = []
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", errors="replace")
        problems.append(f"invalid UTF-8 at byte {exc.start}; undecodable bytes replaced with U+FFFD")
    if nuls:
        # One character for one, so line and column positions stay those of the file.
        text = text.replace("\x00", "\ufffd")
        problems.append(f"{nuls} NUL byte{'s' if nuls > 1 else ''} replaced with U+FFFD")
    return text, "; ".join(problems) or None


# UTF-32 first: its little-endian mark begins with UTF-16's.
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
              (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def _wide_text(data: bytes) -> str | None:
    """A note an editor saved as UTF-16 or UTF-32 (Windows Notepad's "Unicode"): a byte-order mark,
    NUL bytes (any line end has one) and a clean decode. It was skipped as "binary file (contains
    NUL bytes)"; bytes that merely start like a mark stay what they were."""
    for bom, codec in _WIDE_BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom):].decode(codec)
            except UnicodeDecodeError:
                return None
    return None


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


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
