"""Which preparer handles which kind of file: one table, read by the index actors and the writer.

A preparer turns a ``FileJob`` into a ``Prepared`` (a record to write, a touch,
or "vanished"); its ``is_current`` is the writer's check that the file on disk
still holds what was prepared. A new kind of input adds a row here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index import media, sessions
from memindex.pipeline.index.markdown import prepare_markdown
from memindex.pipeline.index.prepare import ChunkEmbedder, Prepared, file_is_current
from memindex.pipeline.index.records import FileJob, FileRecord


@dataclass(frozen=True)
class Preparer:
    prepare: Callable[[AgentSettings, FileJob, Any], Prepared]
    is_current: Callable[[FileRecord], bool]
    # Its chunks' vectors are embeddings of the chunk texts, so a compute worker that has
    # only the record can embed them (issue 18). Media vectors embed the file's bytes.
    embeds_text: bool = True
    # A record of the whole file as read may be written though the file changed since (the writer's
    # ``snapshot_writable``); a transcript's records carry delta offsets into the bytes they read.
    snapshots: bool = True


_MEDIA = Preparer(media.prepare_media, file_is_current, embeds_text=False)  # one labelled chunk (F17)

PREPARERS: dict[str, Preparer] = {
    "markdown": Preparer(prepare_markdown, file_is_current),
    **{kind: _MEDIA for kind in media.MEDIA_KINDS},
    # Growth after the read is fine for a transcript: the rest is a later delta.
    sessions.KIND: Preparer(sessions.prepare_session, sessions.is_current_session, snapshots=False),
}


def prepare_file(settings: AgentSettings, job: FileJob, embedder: ChunkEmbedder | None = None) -> Prepared:
    """Read, hash, chunk and (optionally) embed one file into a writer record."""
    return PREPARERS[job.kind].prepare(settings, job, embedder)


def needs_embedding(record: FileRecord) -> bool:
    """Does a record prepared with the cache-only embedder still miss chunk vectors the compute
    side can make from its texts? (A keyword-only index has no identity: nothing to embed.)"""
    return (record.embedding is not None and PREPARERS[record.kind].embeds_text
            and any(not c.embedding for c in record.chunks))


def is_current(record: FileRecord) -> bool:
    """Does the file on disk still hold what was prepared? (The writer's stale check.)"""
    return PREPARERS[record.kind].is_current(record)


def snapshot_writable(record: FileRecord, indexed_mtime_ns: int | None) -> bool:
    """May a record the file has changed since be written as it was read? Yes for a whole-file
    kind whose file is still a regular file, unless the store holds a later read of it already
    (``indexed_mtime_ns``: its row's mtime). Dropping such a write instead, and re-planning, never
    indexed a note that is appended to all the time: each pass read, embedded and dropped it."""
    import os
    import stat

    if not PREPARERS[record.kind].snapshots or record.hash.startswith(("size:", "error:")):
        return False
    try:
        if not stat.S_ISREG(os.lstat(record.abs_path).st_mode):
            return False
    except OSError:
        return False
    return indexed_mtime_ns is None or indexed_mtime_ns <= record.mtime_ns
