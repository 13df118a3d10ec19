"""The queue side of a sync request: send the work, wait for the queues to drain, say what died.

Imports the queue layer (dramatiq, the actors: ~0.2 s) at its top. ``producers/enqueue.py``, which
the hooks, the CLI and the library import, loads this module only when work is sent or waited on
(a sync with nothing to do never does); the long-running producers (watcher, interval, backfill,
transcript detector) import it outright.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Callable

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings, Context, pinned
from memindex.pipeline.errors import BrokerUnavailable, DeadLettered, IndexIncomplete, IndexTimeout, NoWorkerError
from memindex.pipeline.index.failures import failures_since
from memindex.pipeline.store.reader import StoreReader, open_reader
from memindex.workers import embedded, queues
from memindex.workers.broker import is_embedded, is_write_queue, oom_refusals, redis_full, redis_of, write_shards
from memindex.workers.endpoint import oom_line
from memindex.workers.sync import dispatch_plan
from memindex.workers.wire import SyncAgent, send

if TYPE_CHECKING:  # (types only)
    from memindex.pipeline.index.indexer import SyncPlan

log = logging.getLogger("memindex.sync")

ProgressFn = Callable[[int, int], None]


def request_sync(ctx: Context, *, reason: str = "manual", force: bool = False) -> None:
    """Fire and forget: enqueue a sync of one agent (its message carries the pinned Context)."""
    msg = pinned(settings_for(ctx))
    embedded.start()
    send(SyncAgent(msg, force, reason))


def wait_for_plan(ctx: Context, plan: SyncPlan, replan: Callable[[], SyncPlan], *,
                  progress: ProgressFn | None = None, timeout: float | None = None) -> dict[str, int]:
    """``sync_and_wait`` once its plan has work: send it, block until it is written, and say what
    was not (the counts and errors ``sync_and_wait`` documents). ``replan()`` plans again when
    work of this plan was lost on the way."""
    settings = settings_for(ctx)
    embedded.start()
    started_ms = int(time.time() * 1000)  # this sync's failures are the ones recorded from now on
    deadline = None if timeout is None else time.monotonic() + timeout
    dead = queues.dead_count()
    sent_ns = time.time_ns()  # the plan's planned_at is later: the writer records it (StoreState.last_plan_ns)
    counts = dispatch_plan(ctx, plan)
    # Files another sync had queued are written by its messages before the queues drain: counted.
    total = counts["to_index"] + counts.get("queued", 0)
    idle = wait_idle(ctx, total=total, progress=progress, timeout=timeout, since_ns=sent_ns)
    _check_dead_letters(settings.agent_id, queues.dead_count() - dead)
    if idle and pending_files(settings):
        # Drained, and files of the plan are still not written: what another sync had queued did
        # not all arrive (its worker died), or this sync's own work was lost on the way (Redis
        # refused a message for memory, a writer lost its WAL). Nothing is in flight now, so this
        # plan queues whatever is still missing, once; "indexed 3001" with 57 pending is not said.
        redo = dispatch_plan(ctx, replan())
        log.info("sync %s: %d file(s) queued were not written; queued them again", settings.agent_id,
                 redo["to_index"])
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        idle = wait_idle(ctx, total=total, progress=progress, timeout=left, since_ns=sent_ns)
        _check_dead_letters(settings.agent_id, queues.dead_count() - dead)
        lost = pending_files(settings) if idle else 0
        if lost:
            raise IndexIncomplete(f"sync of agent '{settings.agent_id}' ended with {lost} file(s) not "
                                  "written: their queued work was lost twice (see the log lines above); the next "
                                  "sync queues them again", lost)
    if not idle:
        # A timed-out wait used to return the same counts as a finished one: the caller could not
        # tell "written" from "still queued" (index_status right after read 0 files).
        pending = pending_files(settings)
        raise IndexTimeout(f"sync of agent '{settings.agent_id}' did not finish within {timeout or 0:g} s: "
                           f"{pending} file(s) still to be written; the queued work goes on "
                           "(`memindex status` shows it)", pending)
    # Planned files deleted (or replaced by a symlink, never followed) before they were written:
    # their writes were dropped, and the re-plan that asked for removes what the store had of them.
    # Not "indexed".
    gone = sum(1 for job in plan.jobs if os.path.islink(job.abs_path) or not os.path.isfile(job.abs_path))
    if gone:
        counts = {**counts, "vanished": gone}
    # Files that failed (a wrong key, an unreachable provider: every embedding refused) are not
    # "indexed": the counts said the same as a good sync's, and only index_status told.
    failed = sum(g["count"] for g in failures_since(settings.store_path, started_ms).values())
    return {**counts, "failed": failed} if failed else counts


def _check_dead_letters(agent: str | None, new: int) -> None:
    """Drained is not done: messages this sync sent may have died (a worker serving another
    state dir refuses them at once). Then the sync failed, and says why."""
    if new <= 0:
        return
    mine = [d for d in queues.dead_letters(limit=max(new, 10), newest=True) if agent is None or d["agent"] == agent]
    if not mine:
        return  # another agent's (a concurrent sync): its own run reports it
    reasons = list(dict.fromkeys(d["error"] or "no error recorded" for d in mine))
    # In-process (no Redis) a failed message ends with this process: the next sync plans its files again.
    after = ("; the next sync (or `memindex index`) plans the files again" if is_embedded()
             else "; see `memindex dead-letters`, replay with `memindex dead-letters --replay`")
    raise DeadLettered(f"{len(mine)} message(s) of this sync were dead-lettered, so it did not finish: "
                       f"{reasons[0]}" + (f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else "")
                       + after)


# Readings (1 s apart) of a Redis out of memory before `index` gives up waiting and says so.
FULL_CHECKS = 2
# ... or readings within the last REFUSALS_WINDOW in which Redis refused more commands for memory.
REFUSALS_WINDOW, REFUSALS_RISES = 8, 2

# How long queued work may wait with no live worker consuming its queue before
# `index` says so and gives up (a worker starting up heartbeats well within this).
NO_WORKER_GRACE_S = 15.0


def wait_idle(ctx: Context, *, total: int = 0, progress: ProgressFn | None = None,
              timeout: float | None = None, since_ns: int = 0) -> bool:
    """Block until the queues are idle; ``progress(done, total)`` counts the files written of a
    plan sent at ``since_ns`` (none until the writer has recorded that plan)."""
    if is_embedded():
        if progress is None or not total:
            return embedded.join_idle(timeout)  # event-driven: no polling latency at the end
        return _join_with_progress(settings_for(ctx), total, progress, timeout, since_ns)

    reader = StoreReader(settings_for(ctx).store_path, vector_enabled=False)  # one connection, no sqlite-vec
    try:
        return _poll_broker(reader, total, progress, timeout, since_ns)
    finally:
        reader.close()


def _poll_broker(reader: StoreReader, total: int, progress: ProgressFn | None, timeout: float | None,
                 since_ns: int = 0) -> bool:
    """Redis: poll queue depth (the workers are other processes) until idle or timeout."""
    broker = redis_of()  # (the embedded broker's wait is join_idle's: this is Redis)

    deadline = None if timeout is None else time.monotonic() + timeout
    quiet = 0
    unconsumed_since: float | None = None
    full_checks = 0
    refusals = [oom_refusals(broker.client)]  # one reading a second, the last REFUSALS_WINDOW
    next_worker_check = time.monotonic()
    while True:
        if time.monotonic() >= next_worker_check:
            next_worker_check = time.monotonic() + 1.0
            # Redis out of memory refuses messages the workers send on (their work is lost): the
            # sync cannot finish, so `index` says so instead of waiting (it sat silent for minutes).
            # At the limit (two readings in a row), or refusing again and again just under it
            # (used memory falls back after each refusal): the next sync queues the rest.
            full_checks = full_checks + 1 if redis_full(broker.client) else 0
            refusals = [*refusals, oom_refusals(broker.client)][-REFUSALS_WINDOW:]
            rises = sum(1 for a, b in zip(refusals, refusals[1:]) if a is not None and b is not None and b > a)
            if full_checks >= FULL_CHECKS or rises >= REFUSALS_RISES:
                raise BrokerUnavailable(oom_line())
            orphaned = queues.unconsumed_queues()
            if not orphaned:
                unconsumed_since = None
            elif unconsumed_since is None:
                unconsumed_since = time.monotonic()
            elif time.monotonic() - unconsumed_since > NO_WORKER_GRACE_S:
                if redis_full(broker.client):  # workers cannot beat (or take work) while it refuses writes
                    raise NoWorkerError(oom_line())
                raise NoWorkerError(
                    f"no worker is consuming queue(s) {', '.join(orphaned)} on the broker; start the Procfile's "
                    f"processes ({', '.join(f'`{c}`' for c in _starts(orphaned))}); the work stays queued")
        if progress is not None and total:
            progress(_done(reader, total, since_ns), total)
        quiet = quiet + 1 if queues.total_outstanding() == 0 else 0
        # A message stays unfinished until its actor (and every send it made) is done,
        # so idle readings in a row mean idle (three: one more for the acks).
        if quiet >= 3:
            if progress is not None and total:
                progress(_done(reader, total, since_ns), total)
            return True
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _starts(queues: list[str]) -> list[str]:
    """The commands that consume ``queues`` (a shard's writer by its K/N: a plain `--writer` is
    refused in a sharded deployment)."""
    out = []
    side = [q for q in queues if not is_write_queue(q)]
    if side:
        out.append(f"memindex worker --queues {' '.join(side)}")
    for q in queues:
        if q == "write":
            out.append("memindex worker --writer")
        elif q.startswith("write."):
            out.append(f"memindex worker --writer --shard {q.split('.', 1)[1]}/{write_shards()}")
    return out


# How often the bar is redrawn while the embedded workers run. The wait itself is
# event-driven (it returns the moment the queues drain); this only bounds how stale
# the bar may look, and each redraw is one count(*) on an already open connection.
PROGRESS_REDRAW_S = 0.25


def _join_with_progress(settings: AgentSettings, total: int, progress: ProgressFn,
                        timeout: float | None, since_ns: int = 0) -> bool:
    # One read connection for the whole wait, without sqlite-vec: a count needs no vectors.
    reader = StoreReader(settings.store_path, vector_enabled=False)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            step = PROGRESS_REDRAW_S if deadline is None else min(PROGRESS_REDRAW_S, deadline - time.monotonic())
            done = embedded.join_idle(max(step, 0.001))
            progress(_done(reader, total, since_ns), total)
            if done:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
    finally:
        reader.close()


def _done(reader: StoreReader, total: int, since_ns: int) -> int:
    """Files of a plan of ``total`` written so far: none before the writer has recorded the plan
    (its pending rows are not there yet, and the count read "all done": the bar jumped to 100%
    at once and sat there, and said 100% when interrupted)."""
    st = reader.state()
    if since_ns and st.last_plan_ns < since_ns:
        return 0
    return total - min(total, reader.pending_count(st.building_generation or st.live_generation))


def _pending(reader: StoreReader) -> int:
    st = reader.state()
    return reader.pending_count(st.building_generation or st.live_generation)


def pending_files(settings: AgentSettings) -> int:
    reader = open_reader(settings)
    try:
        return _pending(reader)
    finally:
        reader.close()
