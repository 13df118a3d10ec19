"""Ask for a sync: enqueue it, and optionally wait until the queues drain.

On the embedded default the in-process workers are started here; on Redis
the workers run elsewhere (Procfile / compose) and waiting polls queue depth.
"""

from __future__ import annotations

import time
from typing import Callable

from memindex.pipeline.config.settings import AgentSettings, Context, pinned
from memindex.pipeline.errors import MemindexError

ProgressFn = Callable[[int, int], None]


def request_sync(ctx: Context, *, reason: str = "manual", force: bool = False) -> None:
    """Fire and forget: enqueue a sync of one agent (its message carries the pinned Context)."""
    from memindex.pipeline.config.agents import settings_for
    from memindex.workers import embedded
    from memindex.workers.sync import sync_agent

    msg = pinned(settings_for(ctx)).as_dict()
    embedded.start()
    sync_agent.send(msg, force=force, reason=reason)


def sync_and_wait(ctx: Context, *, force: bool = False, progress: ProgressFn | None = None,
                  timeout: float | None = None) -> dict[str, int]:
    """Plan now, then block until every queued job for it is written.

    A sync with nothing to do returns without touching the broker: no dramatiq
    import, no worker threads, no writer message - just the stats.
    """
    plan, noop = plan_now(ctx, force=force)
    counts = {"generation": plan.generation, "to_index": len(plan.jobs) + len(plan.session_deltas),
              "to_delete": len(plan.deletes), "unchanged": plan.unchanged}
    if noop:
        return counts
    from memindex.workers import embedded
    from memindex.workers.sync import dispatch_plan

    embedded.start()
    counts = dispatch_plan(ctx, plan)
    wait_idle(ctx, total=counts["to_index"], progress=progress, timeout=timeout)
    return counts


def plan_now(ctx: Context, *, force: bool = False):
    """(plan, nothing-to-do) for one agent, computed in this process."""
    from memindex.pipeline.config.agents import settings_for
    from memindex.pipeline.embeddings.embedder import identity_for
    from memindex.pipeline.index.indexer import plan_agent

    settings = settings_for(ctx)
    return plan_agent(settings, identity_for(settings), force=force)


# How long queued work may wait with no live worker consuming its queue before
# `index` says so and gives up (a worker starting up heartbeats well within this).
NO_WORKER_GRACE_S = 15.0


class NoWorkerError(MemindexError):
    """Work is queued on Redis but no worker process consumes its queue."""


def wait_idle(ctx: Context, *, total: int = 0, progress: ProgressFn | None = None,
              timeout: float | None = None) -> bool:
    from memindex.pipeline.config.agents import settings_for
    from memindex.workers import embedded
    from memindex.workers import queues
    from memindex.workers.broker import is_embedded

    if progress is None and is_embedded():
        return embedded.join_idle(timeout)  # event-driven: no polling latency at the end
    settings = settings_for(ctx)
    deadline = None if timeout is None else time.monotonic() + timeout
    quiet = 0
    unconsumed_since: float | None = None
    next_worker_check = time.monotonic()
    while True:
        if not is_embedded() and time.monotonic() >= next_worker_check:
            next_worker_check = time.monotonic() + 1.0
            orphaned = queues.unconsumed_queues()
            if not orphaned:
                unconsumed_since = None
            elif unconsumed_since is None:
                unconsumed_since = time.monotonic()
            elif time.monotonic() - unconsumed_since > NO_WORKER_GRACE_S:
                raise NoWorkerError(
                    f"no worker is consuming queue(s) {', '.join(orphaned)} on the broker; start the Procfile's "
                    "processes (`memindex worker --queues sync embed`, `memindex worker --writer`); "
                    "the work stays queued")
        if progress is not None and total:
            progress(total - min(total, pending_files(settings)), total)
        busy = embedded.outstanding() if is_embedded() else queues.total_outstanding()
        quiet = quiet + 1 if busy == 0 else 0
        # A message stays unfinished until its actor (and every send it made) is done,
        # so two idle readings in a row mean idle; Redis gets one more for its acks.
        if quiet >= (2 if is_embedded() else 3):
            if progress is not None and total:
                progress(total - min(total, pending_files(settings)), total)
            return True
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.01 if is_embedded() else 0.05)


def pending_files(settings: AgentSettings) -> int:
    from memindex.pipeline.store.core import open_reader

    reader = open_reader(settings)
    try:
        st = reader.state()
        return reader.pending_count(st.building_generation or st.live_generation)
    finally:
        reader.close()
