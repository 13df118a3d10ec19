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
from typing import Any

import dramatiq

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import Context
from memindex.pipeline.embeddings.embedder import CacheOnlyEmbedder, FallbackSwitched, chunk_embedder_for
from memindex.pipeline.index.prepare import Prepared, unpreparable
from memindex.pipeline.index.preparers import prepare_file
from memindex.pipeline.index.records import FileJob, FileRecord, SessionDelta, TouchRecord
from memindex.pipeline.index.sessions import prepare_session_delta
from memindex.workers.batch.actors import send_to_batch
from memindex.workers.batch.route import batch_embedder_for
from memindex.workers.compute import NOT_RETRIED, route_records, send_text_first
from memindex.workers.messages import RETRY, SYNC_QUEUE, request_resync
from memindex.workers.writer import send_write, write_deletes, write_touch

log = logging.getLogger("memindex.index")


@dramatiq.actor(queue_name=SYNC_QUEUE, time_limit=30 * 60_000, throws=NOT_RETRIED, **RETRY)
def index_files(ctx: dict[str, Any], generation: int, jobs: list[dict[str, Any]],
                dims: int | None = None) -> None:
    """``dims``: the vector size the plan was made at (None: not known yet, or keyword-only)."""
    context = Context.from_dict(ctx)
    settings = settings_for(context)
    # At the plan's size before any cache lookup: a size learnt long ago finds the old vectors.
    full = chunk_embedder_for(settings, planned_dims=dims)
    embedder = CacheOnlyEmbedder(full) if full is not None else None
    deferring = batch_embedder_for(settings, full)  # batch mode: cache hits now, misses to a batch job
    records: list[FileRecord] = []
    touches: list[TouchRecord] = []
    vanished: list[tuple[str, str]] = []
    for raw in jobs:
        job = FileJob.from_message(raw)
        try:
            prepared = prepare_file(settings, job, deferring or embedder)
        except FallbackSwitched as exc:
            # The primary provider failed over (a media file embeds here): a new index.
            log.warning("%s: %s", context.agent_id, exc)
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
    if records:
        route_records(ctx, settings, generation, records)
    if touches:
        send_write(write_touch, ctx, generation, [t.to_message() for t in touches])
    if vanished:
        send_write(write_deletes, ctx, generation, vanished)


@dramatiq.actor(queue_name=SYNC_QUEUE, time_limit=30 * 60_000, throws=NOT_RETRIED, **RETRY)
def index_session_delta(ctx: dict[str, Any], generation: int, delta: dict[str, Any],
                        dims: int | None = None) -> None:
    """Chunk only a transcript's new turns; the compute side embeds them, the writer appends them."""
    settings = settings_for(Context.from_dict(ctx))
    d = SessionDelta.from_message(delta)
    full = chunk_embedder_for(settings, planned_dims=dims)
    prepared = prepare_session_delta(settings, d, CacheOnlyEmbedder(full) if full is not None else None)
    rec = prepared.record
    if prepared.vanished:
        send_write(write_deletes, ctx, generation, [[d.source, d.path]])
    elif rec is not None:
        # An append extends exactly the indexed state; otherwise the file no longer extends it: a rewrite.
        if rec.base_hash is None:
            send_text_first(ctx, settings, generation, [rec])
        route_records(ctx, settings, generation, [rec], "append" if rec.base_hash is not None else "files")
