"""The file side of indexing (issue 18): read, chunk and look up the embedding cache.

``index_files`` and ``index_session_delta`` run on the ``sync`` queue, on the
host that holds the workspaces and stores. They prepare each file with the
cache-only embedder (cache hits get their vectors, misses none), then
``compute.route_records`` sends records that still miss vectors to the compute
side (``embed`` queue) and the rest straight to the store's writer. With
``remote.batch.enabled`` the misses go to a batch job instead
(``workers.batch``), whose state lives beside the store.
"""

from __future__ import annotations

import logging

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.embeddings.embedder import CacheOnlyEmbedder, chunk_embedder_for
from memindex.pipeline.errors import FallbackSwitched
from memindex.pipeline.index.prepare import Prepared, unpreparable
from memindex.pipeline.index.preparers import prepare_file
from memindex.pipeline.index.records import FileRecord, TouchRecord
from memindex.pipeline.store.schema import FileKey
from memindex.pipeline.index.sessions import prepare_session_delta
from memindex.pipeline.search.reference import REFERENCE_HASHES, reference_missing, reference_record
from memindex.workers.batch.actors import send_to_batch
from memindex.workers.batch.route import batch_embedder_for
from memindex.workers.compute import NOT_RETRIED, route_records, send_text_first
from memindex.workers.messages import RETRY, request_resync
from memindex.workers.wire import IndexFiles, IndexSessionDelta, WriteDeletes, WriteTouch, actor, send

log = logging.getLogger("memindex.index")


@actor(IndexFiles, time_limit=30 * 60_000, throws=NOT_RETRIED, **RETRY)
def index_files(msg: IndexFiles) -> None:
    ctx, generation = msg.ctx, msg.generation
    settings = settings_for(ctx)
    # At the plan's size before any cache lookup: a size learnt long ago finds the old vectors.
    full = chunk_embedder_for(settings, planned_dims=msg.dims)
    embedder = CacheOnlyEmbedder(full) if full is not None else None
    deferring = batch_embedder_for(settings, full)  # batch mode: cache hits now, misses to a batch job
    records: list[FileRecord] = []
    touches: list[TouchRecord] = []
    vanished: list[FileKey] = []
    for job in msg.jobs:
        try:
            prepared = prepare_file(settings, job, deferring or embedder)
        except FallbackSwitched as exc:
            # The primary provider failed over (a media file embeds here): a new index.
            log.warning("%s: %s", ctx.agent_id, exc)
            request_resync(ctx, "fallback")
            return
        except Exception as exc:  # noqa: BLE001 - one bad file must not fail (and retry) its whole group
            prepared = Prepared(unpreparable(job, exc, full.identity if full else None))
        if prepared.vanished:
            vanished.append((job.source, job.path))
        elif prepared.touch is not None:
            touches.append(prepared.touch)
        elif prepared.record is not None:
            records.append(prepared.record)
    send_text_first(ctx, settings, generation, records)  # searchable by its words now, vectors follow
    if deferring is not None:
        records = send_to_batch(ctx, settings, generation, records, deferring)  # the rest is ready now
    # The search's reference texts, if this is a plan's first group and the cache lacks them: to
    # the compute side with the records (one direct request, never the batch API: 48 short
    # texts, and a search wants them before any batch job would end).
    reference = _reference_to_embed(settings, embedder) if msg.reference else None
    if records or reference is not None:
        route_records(ctx, settings, generation, records, reference=reference)
    if touches:
        send(WriteTouch(ctx, generation, touches), store=settings.store_path)
    if vanished:
        send(WriteDeletes(ctx, generation, vanished), store=settings.store_path)


def _reference_to_embed(settings: AgentSettings, embedder: CacheOnlyEmbedder | None) -> FileRecord | None:
    """The reference texts' record when this index's embedding cache lacks any of their vectors
    (one lookup); None for a keyword-only index or with the cache off (where nothing is cached,
    so they would be embedded again by every sync, never to be found)."""
    if embedder is None or not settings.memory_search.cache.enabled:
        return None
    if not reference_missing(embedder.cached_vectors(REFERENCE_HASHES)):
        return None
    return reference_record(embedder.identity)


@actor(IndexSessionDelta, time_limit=30 * 60_000, throws=NOT_RETRIED, **RETRY)
def index_session_delta(msg: IndexSessionDelta) -> None:
    """Chunk only a transcript's new turns; the compute side embeds them, the writer appends them."""
    ctx, generation, d = msg.ctx, msg.generation, msg.delta
    settings = settings_for(ctx)
    full = chunk_embedder_for(settings, planned_dims=msg.dims)
    prepared = prepare_session_delta(settings, d, CacheOnlyEmbedder(full) if full is not None else None)
    rec = prepared.record
    if prepared.vanished:
        send(WriteDeletes(ctx, generation, [(d.source, d.path)]), store=settings.store_path)
    elif rec is not None:
        # An append extends exactly the indexed state; otherwise the file no longer extends it: a rewrite.
        if rec.base_hash is None:
            send_text_first(ctx, settings, generation, [rec])
        route_records(ctx, settings, generation, [rec], "append" if rec.base_hash is not None else "files")
