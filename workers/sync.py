"""The sync actor: diff disk against the store, send the writer a plan, enqueue the work.

The plan goes to the FIFO write queue *before* the ``index_files`` groups it
announces, so the writer always knows what is pending before the writes arrive.
Every step is idempotent: a duplicated message rewrites the same rows, a lost
one leaves its file pending until the next sync re-plans it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Iterator

from memindex.pipeline.config.agents import planned_settings, settings_for
from memindex.pipeline.config.settings import AgentSettings, Context
from memindex.pipeline.embeddings.embedder import planning_identity
from memindex.pipeline.errors import ConfigError, ProviderError, StoreError, WorkspaceError
from memindex.pipeline.index.indexer import SyncPlan, plan_agent
from memindex.pipeline.index.records import FileJob
from memindex.pipeline.search.reference import offer_reference
from memindex.workers import flags, leases, queues
from memindex.workers.broker import get_broker, is_embedded
from memindex.workers.messages import GROUP_FILES, RETRY
from memindex.workers.wire import IndexFiles, IndexSessionDelta, SyncAgent, WritePlan, actor, send

log = logging.getLogger("memindex.sync")

GROUP_BYTES = 4 * 1024 * 1024


def run_sync(ctx: Context, *, force: bool = False,
             progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Plan one agent's sync and enqueue its work. Returns counts for callers.

    ``progress(enqueued, total)`` is called as the index groups are sent (backfill's bar).
    """
    # Afresh (a re-sync's request carries the stamp of an older plan); its messages carry these.
    settings, msg = planned_settings(ctx)
    if not settings.enabled:  # a request queued before the config turned memory search off
        log.info("sync of %s skipped: memory search is disabled for it", settings.agent_id)
        return {"generation": 0, "to_index": 0, "to_delete": 0, "unchanged": 0, "disabled": 1}
    plan, _ = plan_agent(settings, planning_identity(settings, force=force), force=force)
    # (a plan with work sends the reference texts with its first group)
    plan.send_reference = not plan.has_work and offer_reference(settings, plan)
    return _dispatch(settings, msg, plan, progress)


def dispatch_plan(ctx: Context, plan: SyncPlan, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Send the writer the plan, then enqueue the work it announces.

    The messages carry the pinned Context (absolute config and state dir), so every
    worker plans and writes with the settings this plan was made with. Files another plan
    already queued as they are now are not queued again (``workers/leases.py``): the writer
    keeps them pending, and ``queued`` counts them.
    """
    settings, msg = planned_settings(ctx)
    return _dispatch(settings, msg, plan, progress)


def _dispatch(settings: AgentSettings, msg: Context, plan: SyncPlan,
              progress: Callable[[int, int], None] | None) -> dict[str, int]:
    store = settings.store_path
    broker = get_broker()
    queued = _queued_elsewhere(store, plan)
    jobs = [j for j in plan.jobs if (j.source, j.path) not in queued] if queued else plan.jobs
    pending = [(j.source, j.path) for j in jobs]
    dims = plan.fingerprint.get("vectorDims")
    send(WritePlan(msg, plan.generation, plan.fingerprint, pending, list(plan.deletes),
                   planned_at=time.time_ns(), keep=sorted(queued)), store=store)
    sent = 0
    for i, group in enumerate(_groups(jobs)):
        leases.grant(broker, store, plan.generation, group)  # before the send: a plan made meanwhile sees it
        try:
            # The first group also sees to the search's reference texts (index_files): once per plan.
            send(IndexFiles(msg, plan.generation, group, dims, reference=i == 0))
        except BaseException:
            leases.release(broker, store, plan.generation, [(j.source, j.path) for j in group])
            raise
        sent += len(group)
        if progress is not None:
            progress(sent, len(jobs))
    if plan.send_reference:  # (a plan with no group to carry them: offer_reference)
        send(IndexFiles(msg, plan.generation, [], dims, reference=True))
    for delta in plan.session_deltas:
        send(IndexSessionDelta(msg, plan.generation, delta, dims))
    to_index = len(jobs) + len(plan.session_deltas)
    log.info("sync %s: generation %d (%s), %d to index (%d session deltas)%s, %d to delete, %d unchanged",
             msg.agent_id, plan.generation, plan.role, to_index, len(plan.session_deltas),
             f", {len(queued)} already queued by another sync" if queued else "", len(plan.deletes), plan.unchanged)
    counts = {"generation": plan.generation, "to_index": to_index, "to_delete": len(plan.deletes),
              "unchanged": plan.unchanged}
    if queued:
        counts["queued"] = len(queued)
    return {**counts, "pending_sessions": plan.pending_sessions} if plan.pending_sessions else counts


def _queued_elsewhere(store: Path, plan: SyncPlan) -> set[tuple[str, str]]:
    """Jobs of ``plan`` another plan already queued as they are now (``workers/leases.py``);
    none while nothing at all is queued or running (then nothing can be in flight)."""
    candidates = [j for j in plan.jobs if (j.source, j.path) not in plan.retry_keys]
    if not candidates:
        return set()
    broker = get_broker()
    held = leases.held(broker, store, plan.generation, candidates)
    # Only a lease found needs the queues asked (on Redis, several reads): one is stale unless
    # its work is still queued or running.
    if held and queues.total_outstanding() == 0:
        if is_embedded(broker):
            leases.forget_all(broker)  # (Redis leases expire; these would only pile up)
        return set()
    return held


def _groups(jobs: list[FileJob]) -> Iterator[list[FileJob]]:
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


def _retry_sync(retries: int, exc: BaseException) -> bool:
    """A provider that cannot be built (its package or model file missing) stays so until someone
    acts, as the errors ``throws`` names do: never retried. Anything else: ``RETRY``'s count."""
    if isinstance(exc, ProviderError) and not exc.retryable:
        return False
    return retries < int(RETRY["max_retries"])


# A missing workspace, a bad extraPaths entry or an unwritable store stay so until someone acts.
@actor(SyncAgent, time_limit=10 * 60_000, throws=(WorkspaceError, ConfigError, StoreError),
       retry_when=_retry_sync, **RETRY)
def sync_agent(msg: SyncAgent) -> None:
    log.debug("sync %s requested (%s)", msg.ctx.agent_id, msg.reason)
    try:  # later requests need a new sync: this one may already have passed their change
        flags.clear_sync_requested(settings_for(msg.ctx).store_path)
    except Exception as exc:  # noqa: BLE001 - the flag's TTL covers a failed clear
        log.debug("could not clear the sync-requested flag: %s", exc)
    run_sync(msg.ctx, force=msg.force)


