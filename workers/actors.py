"""The actors: sync (plan), index (chunk + embed), and the single writer.

Flow: ``sync_agent`` diffs disk against the store and sends the writer a plan
(which files are pending) *before* enqueueing ``index_files`` groups, so on the
FIFO write queue the plan always precedes the writes it announces. Every step
is idempotent: a duplicated message rewrites the same rows, a lost one leaves
its file pending until the next sync re-plans it.

Run on Redis with ``dramatiq workers.actors`` (see Procfile); the write queue
must be consumed by exactly one thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable

import dramatiq

from pipeline.agents import settings_for
from pipeline.config import Context
from pipeline.embeddings.base import InvalidVectorError, ProviderAuthError
from pipeline.embedder import FallbackSwitched, chunk_embedder_for, identity_for
from pipeline.indexer import FileJob, is_current, plan_agent, prepare_file, still_on_disk
from pipeline.session_index import SessionDelta, prepare_session_delta
from pipeline.store import StoreWriter, open_writer

from . import broker as _broker  # noqa: F401  (installs the broker before actors bind)

log = logging.getLogger("memindex.actors")

# Files per index message: big enough to amortise queue overhead, small enough
# to keep memory bounded and retries cheap.
GROUP_FILES = 32
GROUP_BYTES = 4 * 1024 * 1024

RETRY = dict(max_retries=8, min_backoff=500, max_backoff=60_000)

# Backpressure: the writer is the one serial stage. Unbounded, a backfill's
# chunked records would pile up in the write queue (in this process on the
# embedded broker, in Redis otherwise) in proportion to the workspace.
WRITE_BACKLOG_MAX = 16
WRITE_BACKLOG_WAIT_S = 120.0  # never wait forever: no writer running must not wedge the embedders


def _wait_for_writer() -> None:
    from .queues import ready

    deadline = time.monotonic() + WRITE_BACKLOG_WAIT_S
    try:
        while ready("write") > WRITE_BACKLOG_MAX and time.monotonic() < deadline:
            time.sleep(0.02)
    except Exception as exc:  # noqa: BLE001 - depth unknown (broker hiccup): just send
        log.debug("write backlog check failed: %s", exc)


def _ctx(d: dict[str, Any]) -> Context:
    return Context.from_dict(d)


# --- sync -----------------------------------------------------------------------

def run_sync(ctx: Context, *, force: bool = False,
             progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Plan one agent's sync and enqueue its work. Returns counts for callers.

    ``progress(enqueued, total)`` is called as the index groups are sent (backfill's bar).
    """
    settings = settings_for(ctx)
    plan, _ = plan_agent(settings, identity_for(settings), force=force)
    return dispatch_plan(ctx, plan, progress)


def dispatch_plan(ctx: Context, plan: Any, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Send the writer the plan, then enqueue the work it announces."""
    pending = [(j.source, j.path) for j in plan.jobs]
    write_plan.send(ctx.as_dict(), plan.generation, plan.fingerprint, pending, plan.deletes,
                    planned_at=time.time_ns())
    sent = 0
    for group in _groups(plan.jobs):
        index_files.send(ctx.as_dict(), plan.generation, [j.as_dict() for j in group])
        sent += len(group)
        if progress is not None:
            progress(sent, len(plan.jobs))
    for delta in plan.session_deltas:
        index_session_delta.send(ctx.as_dict(), plan.generation, delta.as_dict())
    to_index = len(plan.jobs) + len(plan.session_deltas)
    log.info("sync %s: generation %d (%s), %d to index (%d session deltas), %d to delete, %d unchanged",
             ctx.agent_id, plan.generation, plan.role, to_index, len(plan.session_deltas), len(plan.deletes),
             plan.unchanged)
    return {"generation": plan.generation, "to_index": to_index, "to_delete": len(plan.deletes),
            "unchanged": plan.unchanged}


def _groups(jobs: list[FileJob]):
    group: list[FileJob] = []
    size = 0
    for j in jobs:
        if group and (len(group) >= GROUP_FILES or size + j.size > GROUP_BYTES):
            yield group
            group, size = [], 0
        group.append(j)
        size += j.size
    if group:
        yield group


@dramatiq.actor(queue_name="sync", time_limit=10 * 60_000, **RETRY)
def sync_agent(ctx: dict[str, Any], force: bool = False, reason: str = "manual") -> None:
    log.debug("sync %s requested (%s)", ctx.get("agent_id"), reason)
    context = _ctx(ctx)
    try:  # later requests need a new sync: this one may already have passed their change
        from producers.hooks import clear_sync_requested

        clear_sync_requested(settings_for(context).store_path)
    except Exception as exc:  # noqa: BLE001 - the flag's TTL covers a failed clear
        log.debug("could not clear the sync-requested flag: %s", exc)
    run_sync(context, force=force)


# --- chunk and embed --------------------------------------------------------------

# A rejected key or a malformed vector will not get better by retrying the message.
NOT_RETRIED = (ProviderAuthError, InvalidVectorError)


@dramatiq.actor(queue_name="embed", time_limit=30 * 60_000, throws=NOT_RETRIED, **RETRY)
def index_files(ctx: dict[str, Any], generation: int, jobs: list[dict[str, Any]]) -> None:
    context = _ctx(ctx)
    settings = settings_for(context)
    embedder = chunk_embedder_for(settings)
    deferring = batch_embedder_for(settings, embedder)  # batch mode: cache hits now, misses to a batch job
    records, touches, vanished = [], [], []
    for raw in jobs:
        job = FileJob(**raw)
        try:
            prepared = prepare_file(settings, job, deferring or embedder)
        except FallbackSwitched as exc:
            # The primary provider failed over: these vectors belong to a new index.
            log.warning("%s: %s", context.agent_id, exc)
            sync_agent.send(ctx, reason="fallback")
            return
        if prepared.vanished:
            vanished.append((job.source, job.path))
        elif prepared.touch is not None:
            touches.append(prepared.touch)
        elif prepared.record is not None:
            records.append(prepared.record)
    if deferring is not None:
        records = send_to_batch(ctx, settings, generation, records, deferring)  # the rest is ready now
    if records:
        _wait_for_writer()
        write_files.send(ctx, generation, records)
    if touches:
        write_touch.send(ctx, generation, touches)
    if vanished:
        write_deletes.send(ctx, generation, vanished)


@dramatiq.actor(queue_name="embed", time_limit=30 * 60_000, **RETRY)
def index_session_delta(ctx: dict[str, Any], generation: int, delta: dict[str, Any]) -> None:
    """Chunk and embed only a transcript's new turns; the writer appends them."""
    settings = settings_for(_ctx(ctx))
    d = SessionDelta.from_dict(delta)
    prepared = prepare_session_delta(settings, d, chunk_embedder_for(settings))
    rec = prepared.record
    if prepared.vanished:
        write_deletes.send(ctx, generation, [[d.source, d.path]])
    elif rec is not None and "base_hash" in rec:
        write_session_append.send(ctx, generation, [rec])
    elif rec is not None:  # the file no longer extends what was indexed: a full rewrite
        write_files.send(ctx, generation, [rec])


# --- the single writer -------------------------------------------------------------

_writers: dict[str, StoreWriter] = {}
_writer_inodes: dict[str, int | None] = {}  # the store file each writer opened
_writers_lock = threading.Lock()


def _writer(ctx: Context) -> tuple[Any, StoreWriter]:
    settings = settings_for(ctx)
    key = str(settings.store_path)
    with _writers_lock:
        w = _writers.get(key)
        if w is not None and _writer_inodes.get(key) != _inode(key):
            # The store was deleted or replaced under us (a manual reset): writing on
            # would go into an unlinked file nobody reads. Open the new one.
            log.info("store %s was replaced; reopening", key)
            w.close()
            w = None
        if w is None:
            w = _writers[key] = open_writer(settings)
            _writer_inodes[key] = _inode(key)
    return settings, w


def _inode(path: Any) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def close_writers() -> None:
    with _writers_lock:
        for w in _writers.values():
            w.close()
        _writers.clear()


@dramatiq.actor(queue_name="write", time_limit=10 * 60_000, **RETRY)
def write_plan(ctx: dict[str, Any], generation: int, fingerprint: dict[str, Any],
               pending: list[list[str]], deletes: list[list[str]], planned_at: int | None = None) -> None:
    settings, w = _writer(_ctx(ctx))
    # A delete is applied only if the file really is gone: a re-created file keeps its rows.
    real_deletes = [tuple(k) for k in deletes if not still_on_disk(settings, tuple(k))]
    w.plan(generation, fingerprint, [tuple(k) for k in pending], real_deletes, planned_at)


@dramatiq.actor(queue_name="write", time_limit=10 * 60_000, **RETRY)
def write_files(ctx: dict[str, Any], generation: int, records: list[dict[str, Any]]) -> None:
    context = _ctx(ctx)
    settings, w = _writer(context)
    fresh, stale = [], []
    for rec in records:
        (fresh if is_current(rec) else stale).append(rec)
    if fresh:
        _, rejected = w.write_files(generation, fresh)
        if rejected:
            sync_agent.send(ctx, reason="provider-changed")
        max_entries = settings.memory_search["cache"]["maxEntries"]
        if any(r.get("embedding") for r in fresh) and max_entries:
            w.prune_cache(max_entries)
    if stale:
        # The file changed after it was chunked: drop the write, re-plan from disk.
        log.info("dropped %d stale write(s) for %s: %s", len(stale), context.agent_id,
                 ", ".join(r["path"] for r in stale[:5]))
        sync_agent.send(ctx, reason="stale-write")


@dramatiq.actor(queue_name="write", time_limit=10 * 60_000, **RETRY)
def write_session_append(ctx: dict[str, Any], generation: int, records: list[dict[str, Any]]) -> None:
    _, w = _writer(_ctx(ctx))
    # A transcript replaced since the read is left to the detector's rebuild.
    w.append_chunks(generation, [r for r in records if is_current(r)])


@dramatiq.actor(queue_name="write", time_limit=10 * 60_000, **RETRY)
def write_touch(ctx: dict[str, Any], generation: int, records: list[dict[str, Any]]) -> None:
    _, w = _writer(_ctx(ctx))
    w.touch_files(generation, records)


@dramatiq.actor(queue_name="write", time_limit=10 * 60_000, **RETRY)
def write_deletes(ctx: dict[str, Any], generation: int, keys: list[list[str]]) -> None:
    settings, w = _writer(_ctx(ctx))
    w.delete_files(generation, [tuple(k) for k in keys if not still_on_disk(settings, tuple(k))])


from .batch_actors import send_to_batch  # noqa: E402  (registers the batch actors too)
from .batch_route import batch_embedder_for  # noqa: E402
