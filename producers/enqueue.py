"""Ask for a sync: enqueue it, and optionally wait until the queues drain.

On the embedded default the in-process workers are started here; on Redis
the workers run elsewhere (Procfile / compose) and waiting polls queue depth.

This module is what the hooks, the CLI and the library import, so it stays light: the queue
layer (dramatiq, the actors: ~0.2 s) is in ``producers/dispatch.py``, imported only where work is
sent or waited on, and the planner only where a plan is made.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import Context
from memindex.pipeline.errors import BrokerUnavailable, UsageError, checked_call, require
from memindex.workers.endpoint import broker_error_line
from memindex.workers.logs import is_redis_error

if TYPE_CHECKING:  # (types only: each loads on the paths that use it)
    from memindex.pipeline.index.indexer import SyncPlan
    from memindex.producers.dispatch import ProgressFn


def request_sync(ctx: Context, *, reason: str = "manual", force: bool = False) -> None:
    """Fire and forget: enqueue a sync of one agent (its message carries the pinned Context)."""
    # lazy: the queue layer (dramatiq, the actors: ~0.2 s) loads only when work is sent
    from memindex.producers import dispatch

    dispatch.request_sync(ctx, reason=reason, force=force)


@contextlib.contextmanager
def broker_errors() -> Iterator[None]:
    """Around a public call that enqueues: redis-py's errors leave it as ``BrokerUnavailable``
    (under the library's one error root) with the line that says why and what to do. Checked by
    module name, so a call that never reaches the broker imports neither redis nor dramatiq."""
    try:
        yield
    except Exception as exc:
        if not is_redis_error(exc):
            raise
        raise BrokerUnavailable(broker_error_line(exc)) from exc


@checked_call("sync_and_wait")
@broker_errors()
def sync_and_wait(ctx: Context, *, force: bool = False, progress: ProgressFn | None = None,
                  timeout: float | None = None) -> dict[str, int]:
    """Plan now, then block until every queued job for it is written.

    Returns the plan's counts (``generation``, ``to_index``, ``to_delete``, ``unchanged``), plus,
    when any, ``queued`` (files another sync had queued as they are: written when this returns,
    not queued again), ``pending_sessions`` (of the unchanged, transcripts grown below the delta
    thresholds), ``vanished`` (planned files deleted on disk before they were written) and
    ``failed`` (files this sync could not index fully, e.g. a provider that refused every
    request: ``index_status()["problems"]`` says why, as ``memindex index`` does when it exits 1).

    ``timeout`` (seconds): when it passes first, ``IndexTimeout`` is raised (its ``pending`` is
    how many files were still to be written); the queued work goes on without the caller.

    A sync with nothing to do returns without touching the broker: no dramatiq
    import, no worker threads, no writer message - just the stats (once per store state, a store
    of fewer than 20 files whose cache lacks the search's reference texts sends them and waits:
    ``search/reference.offer_reference``). An agent whose memory
    search is disabled is not indexed (``"disabled": 1``, nothing else).
    """
    require("ctx", ctx, Context)
    # Checked before anything is queued: a force of another type was taken by its truth value,
    # a progress that is not callable failed mid-sync, with the work already queued.
    require("force", force, bool)
    if progress is not None and not callable(progress):
        raise UsageError(f"progress must be callable or None, not {type(progress).__name__}")
    require("timeout", timeout, (int, float), optional=True)
    if timeout is not None and not timeout >= 0:  # (NaN too)
        raise UsageError(f"timeout must be a number of seconds >= 0 or None, not {timeout!r}")
    if not settings_for(ctx).enabled:
        return {"generation": 0, "to_index": 0, "to_delete": 0, "unchanged": 0, "disabled": 1}
    plan, noop = plan_now(ctx, force=force)
    counts = {"generation": plan.generation, "to_index": len(plan.jobs) + len(plan.session_deltas),
              "to_delete": len(plan.deletes), "unchanged": plan.unchanged}
    if plan.pending_sessions:
        counts["pending_sessions"] = plan.pending_sessions
    # (a plan with work sends the reference texts with its first group)
    plan.send_reference = not plan.has_work and _offer_reference(ctx, plan)
    if noop and not plan.send_reference:
        return counts
    # lazy: the queue layer (dramatiq, the actors: ~0.2 s) loads only when a plan has work to send
    from memindex.producers import dispatch

    return dispatch.wait_for_plan(ctx, plan, lambda: plan_now(ctx)[0], progress=progress, timeout=timeout)


def _offer_reference(ctx: Context, plan: SyncPlan) -> bool:
    """A plan with nothing to index or delete still goes to the queue when its small store lacks
    the search's reference texts, once per store state (``search/reference.offer_reference``: no
    store read at 20 files or more)."""
    # lazy: the search side's module (ranking, the store reader) only where a plan is made
    from memindex.pipeline.search.reference import offer_reference

    return offer_reference(settings_for(ctx), plan)


def plan_now(ctx: Context, *, force: bool = False, probe: bool = True) -> tuple[SyncPlan, bool]:
    """(plan, nothing-to-do) for one agent, computed in this process (``probe`` False: a dry plan
    that never calls the embedding provider, see ``planning_identity``)."""
    # lazy: the planner and the embedder's identity (the store, the provider table: ~90 ms) load
    # only where a plan is made; the hooks import this module only to send
    from memindex.pipeline.embeddings.embedder import planning_identity
    from memindex.pipeline.index.indexer import plan_agent

    settings = settings_for(ctx)
    # re-index all (force): with the provider's vectors as they are now, their size included
    return plan_agent(settings, planning_identity(settings, force=force, probe=probe), force=force)
