"""Backfill (P2): enqueue a whole workspace in bulk, optionally wait for it.

The plan is made here (one pass of stats, no file reads) and streamed into the
queue as it is made: ``run_sync`` sends ``index_files`` groups of at most
``GROUP_FILES`` files, so nothing proportional to file *contents* is ever held
by the producer. Waiting does not watch queue depth (other agents' work, or a
dead worker's unacknowledged messages, would keep that above zero): it waits
until the writer has recorded this sync's plan and the agent's pending set is
empty, which is exactly "everything announced is written".

On the embedded default the workers run inside this process, so a backfill
always waits there (returning would drop the queued work with the process).

A long-running producer: it imports the queue layer at its top (the commands that use it,
``backfill``, ``watch`` and ``status``, load it anyway).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings, Context
from memindex.pipeline.index.failures import failures_since
from memindex.pipeline.store.reader import open_reader
from memindex.pipeline.store.schema import STORE_ID_KEY
from memindex.producers.dispatch import ProgressFn, pending_files
from memindex.workers import embedded
from memindex.workers.broker import is_embedded
from memindex.workers.queues import refused_since
from memindex.workers.sync import run_sync

log = logging.getLogger("memindex.backfill")

STALL_WARN_S = 30.0  # no progress for this long while waiting: say why it may be stuck


@dataclass
class Backfill:
    """One agent's enqueued backfill and what waiting for it needs."""

    ctx: Context
    settings: AgentSettings
    counts: dict[str, int]
    plan_marker: str | None  # the store's last_sync_at before this plan
    started: float = field(default_factory=time.monotonic)
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))  # failures count from here
    refused: list[dict[str, Any]] = field(default_factory=list)  # dead letters a worker refused since the start (newest first)
    _refused_at: float = 0.0
    store_id: str | None = None  # the store's id when the plan was made (None: no store yet)
    replaced: bool = False  # set by ``wait``: the store was replaced under it (nothing it queued lands there)


def _markers(settings: AgentSettings) -> tuple[str | None, str | None]:
    """(the store's last_sync_at, its store id)."""
    reader = open_reader(settings)
    try:
        extra = reader.state().extra
        return extra.get("last_sync_at"), extra.get(STORE_ID_KEY)
    finally:
        reader.close()


def enqueue(ctx: Context, *, force: bool = False, progress: ProgressFn | None = None) -> Backfill:
    """Plan one agent and enqueue all of its work; returns at once."""
    settings = settings_for(ctx)
    embedded.start()  # no-op on Redis
    marker, store_id = _markers(settings)
    counts = run_sync(ctx, force=force, progress=progress)
    log.info("backfill %s: %d file(s) enqueued, %d to delete, %d unchanged", ctx.agent_id,
             counts["to_index"], counts["to_delete"], counts["unchanged"])
    return Backfill(ctx, settings, counts, marker, store_id=store_id)


def progress_of(b: Backfill) -> tuple[bool, int]:
    """(plan recorded by the writer, files still pending). A store replaced since the plan (moved
    aside as damaged, deleted) sets ``b.replaced``: its empty pending set is not this backfill done."""
    marker, store_id = _markers(b.settings)
    if b.store_id is not None and store_id != b.store_id:
        b.replaced = True
        return True, _total(b)
    landed = marker != b.plan_marker
    return landed, pending_files(b.settings) if landed else _total(b)


def _total(b: Backfill) -> int:
    """Files this backfill waits for: those it queued and those another sync had queued."""
    return b.counts["to_index"] + b.counts.get("queued", 0)


def wait(b: Backfill, *, progress: ProgressFn | None = None, timeout: float | None = None,
         poll: float = 0.1) -> bool:
    """Block until everything this backfill announced is written. False on timeout."""
    total = _total(b)
    deadline = None if timeout is None else time.monotonic() + timeout
    last_change, last_pending, warned = time.monotonic(), None, False
    while True:
        landed, pending = progress_of(b)
        if b.replaced:  # what it queued was for a store that is gone: said by the caller, never "done"
            return False
        if progress is not None:
            progress(total - min(total, pending), total)
        if landed and (pending == 0 or pending <= _failed_since_start(b) + _refused_files(b)):
            return True  # what is left failed for good or was refused: waiting cannot help (the caller reports it)
        now = time.monotonic()
        if pending != last_pending:
            last_change, last_pending = now, pending
        elif not warned and now - last_change > STALL_WARN_S:
            warned = True
            log.warning("backfill %s: no progress for %.0f s (%d pending%s); are the worker and the "
                        "writer running? try `memindex queues`%s", b.ctx.agent_id, STALL_WARN_S, pending,
                        "" if landed else ", plan not yet recorded by the writer",
                        f"; {refused_line(b)}" if b.refused else "")
        if deadline is not None and now > deadline:
            return False
        time.sleep(poll)


REFUSED_POLL_S = 1.0  # how often waiting reads the dead letters (every queue's, on Redis)


def _refused_files(b: Backfill) -> int:
    """Files of this agent's messages a worker refused since the backfill started: dead-lettered
    (workers/guard.py), they are written by nobody until replayed."""
    now = time.monotonic()
    if now - b._refused_at >= REFUSED_POLL_S:
        b._refused_at, b.refused = now, refused_since(b.settings.agent_id, b.started_ms)
    return sum(d["files"] for d in b.refused)


def refused_line(b: Backfill) -> str:
    """What ``backfill --wait`` says of its refused messages: how many, their files, the reason."""
    files = sum(d["files"] for d in b.refused)
    return (f"{len(b.refused)} message(s) ({files} file(s)) refused by a worker and dead-lettered: "
            f"{b.refused[0]['error']} (`memindex dead-letters`; once that worker serves these paths, "
            "`memindex dead-letters --replay`)")


def _failed_since_start(b: Backfill) -> int:
    return sum(g["count"] for g in failures_since(b.settings.store_path, b.started_ms).values())


def must_wait() -> bool:
    """On the embedded broker the work lives in this process: leaving would lose it."""
    return is_embedded()
