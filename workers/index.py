"""The indexing actors: read, chunk and embed files (or a transcript's new turns).

They run on the ``embed`` queue, scale freely, and hand finished records to the
single writer (``workers.writer``).
"""

from __future__ import annotations

import logging
from typing import Any

import dramatiq

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import Context
from memindex.pipeline.embeddings.base import InvalidVectorError, ProviderAuthError
from memindex.pipeline.embeddings.embedder import FallbackSwitched, chunk_embedder_for
from memindex.pipeline.index.prepare import Prepared, unpreparable
from memindex.pipeline.index.preparers import prepare_file
from memindex.pipeline.index.records import FileJob, FileRecord, SessionDelta, TouchRecord
from memindex.pipeline.index.sessions import prepare_session_delta
from memindex.workers.batch.actors import send_to_batch
from memindex.workers.failures import note_record_failures
from memindex.workers.batch.route import batch_embedder_for
from memindex.workers.messages import EMBED_QUEUE, RETRY, request_resync
from memindex.workers.writer import send_write, write_deletes, write_files, write_session_append, write_touch

log = logging.getLogger("memindex.index")


# A rejected key or a malformed vector will not get better by retrying the message.
NOT_RETRIED = (ProviderAuthError, InvalidVectorError)


@dramatiq.actor(queue_name=EMBED_QUEUE, time_limit=30 * 60_000, throws=NOT_RETRIED, **RETRY)
def index_files(ctx: dict[str, Any], generation: int, jobs: list[dict[str, Any]]) -> None:
    context = Context.from_dict(ctx)
    settings = settings_for(context)
    embedder = chunk_embedder_for(settings)
    deferring = batch_embedder_for(settings, embedder)  # batch mode: cache hits now, misses to a batch job
    records: list[FileRecord] = []
    touches: list[TouchRecord] = []
    vanished: list[tuple[str, str]] = []
    for raw in jobs:
        job = FileJob.from_message(raw)
        try:
            prepared = prepare_file(settings, job, deferring or embedder)
        except FallbackSwitched as exc:
            # The primary provider failed over: these vectors belong to a new index.
            log.warning("%s: %s", context.agent_id, exc)
            request_resync(ctx, "fallback")
            return
        except Exception as exc:  # noqa: BLE001 - one bad file must not fail (and retry) its whole group
            prepared = Prepared(unpreparable(job, exc, embedder.identity if embedder else None))
        if prepared.vanished:
            vanished.append((job.source, job.path))
        elif prepared.touch is not None:
            touches.append(prepared.touch)
        elif prepared.record is not None:
            records.append(prepared.record)
    note_record_failures(settings, records)
    if deferring is not None:
        records = send_to_batch(ctx, settings, generation, records, deferring)  # the rest is ready now
    if records:
        send_write(write_files, ctx, generation, [r.to_message() for r in records], backpressure=True)
    if touches:
        send_write(write_touch, ctx, generation, [t.to_message() for t in touches])
    if vanished:
        send_write(write_deletes, ctx, generation, vanished)


@dramatiq.actor(queue_name=EMBED_QUEUE, time_limit=30 * 60_000, **RETRY)
def index_session_delta(ctx: dict[str, Any], generation: int, delta: dict[str, Any]) -> None:
    """Chunk and embed only a transcript's new turns; the writer appends them."""
    settings = settings_for(Context.from_dict(ctx))
    d = SessionDelta.from_message(delta)
    prepared = prepare_session_delta(settings, d, chunk_embedder_for(settings))
    rec = prepared.record
    if prepared.vanished:
        send_write(write_deletes, ctx, generation, [[d.source, d.path]])
    elif rec is not None and rec.base_hash is not None:
        send_write(write_session_append, ctx, generation, [rec.to_message()])
    elif rec is not None:  # the file no longer extends what was indexed: a full rewrite
        send_write(write_files, ctx, generation, [rec.to_message()])


