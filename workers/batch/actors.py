"""Batch embedding as queue work: route -> submit -> poll -> collect -> finish.

- ``send_to_batch`` (called by ``index_files``) queues prepared records whose
  chunks missed the cache in the agent's batch state and asks for a submit.
- ``batch_submit`` gathers queued records briefly (so a backfill's groups share
  a job), takes one of the provider's in-flight slots (``remote.batch.concurrency``
  across all workers) and submits one job; no slot -> it re-enqueues itself
  with a delay. One submitter per agent at a time (a named lease).
- ``batch_poll`` checks the job once and re-enqueues itself with
  ``delay=pollIntervalMs``: no worker ever sleeps on a batch. Terminal ->
  collect the vectors; past ``timeoutMinutes`` -> cancel, then collect what
  finished; unknown states just run into the same deadline.
- ``batch_finish`` (batch queue) fills each record from the collected vectors and
  routes the records on (``compute.route_records``): whatever is still missing
  (failed items, an expired or cancelled or failed job, a failed submission)
  goes to the compute side's normal synchronous path, complete records to the
  store's writer.

Every message carries the agent's compute spec (``compute.compute_spec``: no
secrets) and the batch state is in Redis on a Redis deployment
(``backend.open_for``), so the ``batch`` queue is compute-side (issue 18): its
workers need only Redis and the provider, never a workspace, a store or the
state dir. Only ``send_to_batch`` runs on the file side (in ``index_files``).

Every job carries a lease token; messages with a stale token do nothing. A
janitor thread in every worker takes over jobs whose lease expired (a killed
poller), so a restarted worker polls and collects the same job instead of
submitting a new one. A failed job only sends its own chunks to the
synchronous path: nothing is switched off for later backfills.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import dramatiq
import msgspec

from memindex.pipeline.config import environ
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.config.environ import env_number
from memindex.pipeline.config.settings import AgentSettings, Context
from memindex.pipeline.embeddings.embedder import chunk_embedder_for
from memindex.pipeline.errors import ProviderError
from memindex.pipeline.embeddings.registry import supports_batch
from memindex.pipeline.embeddings.batch.base import (
    BatchClient,
    BatchRequest,
    BatchResults,
    batch_client_for,
    custom_ids,
)
from memindex.pipeline.index.records import FileRecord
from memindex.pipeline.store.vectors import is_valid

from memindex.workers.batch import state as bs
from memindex.workers.batch.backend import StateBackend, has_state, open_for
from memindex.workers.batch.coord import registry, slots
from memindex.workers.batch.redis_state import agent_key
from memindex.workers.batch.route import DeferringEmbedder, batch_embedder_for
from memindex.workers.broker import BATCH_QUEUE, is_embedded, on_install
from memindex.workers.compute import compute_spec, route_records, settings_from_spec
from memindex.workers.messages import GROUP_FILES, RETRY
from memindex.workers.wire import BatchFinish, BatchPoll, BatchSubmit, ComputeSpec, actor, send

log = logging.getLogger("memindex.batch")

LEASE_MIN_S = environ.BATCH_LEASE_S.get()  # a silent poller is presumed dead after this
JANITOR_S = environ.BATCH_JANITOR_S.get() or max(0.5, min(5.0, LEASE_MIN_S / 2))
MIN_POLL_S = 0.05
SUBMIT_LEASE_S = 600.0  # uploading a large request file may take minutes
FINISH_LEASE_S = 300.0  # renewed after every record, so only a dead finisher lets it lapse
MAX_POLL_ERRORS = 5  # permanent status errors in a row before a job is given up
SUBMITTER = "submitter"


@dataclass(frozen=True)
class Timing:
    poll_s: float
    lease_s: float
    timeout_s: float
    gather_s: float
    gather_max_s: float
    slot_ttl_s: float
    cancel_grace_s: float
    concurrency: int


def timing(settings: AgentSettings) -> Timing:
    b = settings.memory_search.remote.batch
    poll = max(MIN_POLL_S, b.poll_interval_ms / 1000)
    lease = max(LEASE_MIN_S, 4 * poll)
    return Timing(poll_s=poll, lease_s=lease, timeout_s=float(b.timeout_minutes) * 60,
                  gather_s=min(poll, 2.0), gather_max_s=min(10 * poll, 30.0),
                  slot_ttl_s=4 * lease + 60, cancel_grace_s=max(30.0, 5 * poll),
                  concurrency=max(1, int(b.concurrency)))


def _delay_ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _state(settings: AgentSettings) -> StateBackend:
    st = open_for(settings.store_path)
    assert st is not None  # (only a read-only open finds none)
    return st


def _registry_key(settings: AgentSettings) -> str:
    return agent_key(settings.store_path)


class Who(msgspec.Struct, frozen=True):
    """Whose batch work a message is about: the pinned Context and the agent's compute spec
    (``compute.compute_spec``: no secrets, no path opened), so any compute host can act on it."""

    ctx: Context
    spec: ComputeSpec

    def settings(self) -> AgentSettings:
        return settings_from_spec(self.spec, self.ctx)

    def submit(self, token: str | None = None, delay_s: float | None = None) -> None:
        send(BatchSubmit(self.ctx, self.spec, token), delay_ms=None if delay_s is None else _delay_ms(delay_s))

    def poll(self, job_key: str, token: str, delay_s: float | None = None) -> None:
        send(BatchPoll(self.ctx, self.spec, job_key, token), delay_ms=None if delay_s is None else _delay_ms(delay_s))

    def finish(self, job_key: str, token: str) -> None:
        send(BatchFinish(self.ctx, self.spec, job_key, token))


# --- the provider side -----------------------------------------------------------------

_clients: dict[tuple[str, str], tuple[Any, BatchClient]] = {}
_clients_lock = threading.Lock()


def _target(settings: AgentSettings, *, new_work: bool = True) -> tuple[DeferringEmbedder, BatchClient] | None:
    """The agent's deferring embedder and batch client, or None when batch cannot serve it.

    ``new_work=False`` (polling a submitted job) does not require ``remote.batch.enabled``:
    a job submitted before batching was switched off is still collected.
    """
    # The store's embedding cache only on the embedded broker (one host): a compute host has no
    # store, and the file side already served cache hits when it routed the chunks here.
    inner = chunk_embedder_for(settings, cache=is_embedded())
    embedder = batch_embedder_for(settings, inner) if new_work else None
    if not new_work and inner is not None:
        p = inner.service.active_provider
        embedder = DeferringEmbedder(inner) if p is not None and supports_batch(p.id) else None
    if embedder is None:
        return None
    provider = embedder.inner.service.active_provider
    key = (settings.digest(), provider.fingerprint())
    with _clients_lock:
        hit = _clients.get(key)
        if hit is None or hit[0] is not provider:
            client = batch_client_for(provider)
            if client is None:  # (supports_batch said yes: a provider without a client is a registry bug)
                return None
            hit = _clients[key] = (provider, client)
    return embedder, hit[1]


# --- routing (called from index_files) ----------------------------------------------------

def send_to_batch(ctx: Context, settings: AgentSettings, generation: int, records: list[FileRecord],
                  embedder: DeferringEmbedder) -> list[FileRecord]:
    """Queue the records that wait for batch vectors; returns the ones ready to write now."""
    entries: list[tuple[FileRecord, list[str]]] = []
    ready: list[FileRecord] = []
    for rec in records:
        missing = embedder.missing_in(rec)
        (entries.append((rec, missing)) if missing else ready.append(rec))
    if entries:
        with _state(settings) as st:
            added = st.add_items(generation, embedder.identity.provider_key, entries)
        who = Who(ctx, compute_spec(settings))
        registry().add(_registry_key(settings), msgspec.to_builtins(who))  # read back by ``sweep``
        log.info("%s: %d file(s) with %d uncached chunk(s) handed to batch embedding (%d of them already waiting)",
                 settings.agent_id, len(entries), sum(len(m) for _, m in entries), len(entries) - added)
        who.submit()
    return ready


# --- submit ---------------------------------------------------------------------------------

@actor(BatchSubmit, time_limit=15 * 60_000, max_retries=5, min_backoff=1000, max_backoff=60_000)
def batch_submit(msg: BatchSubmit) -> None:
    who = Who(msg.ctx, msg.spec)
    settings = who.settings()
    with _state(settings) as st:
        resume_orphans(who, settings, st, send_submit=False)
        _run_submitter(who, settings, st, msg.token or bs.new_token())


def _run_submitter(who: Who, settings: AgentSettings, st: StateBackend, token: str) -> None:
    t = timing(settings)
    if not st.lease(SUBMITTER, token, time.time() + t.lease_s, time.time()):
        return  # another submitter is scheduled and will see our items

    def again(delay_s: float) -> None:
        st.lease(SUBMITTER, token, time.time() + t.lease_s + delay_s, time.time())
        who.submit(token, delay_s)

    while True:
        n, n_hashes, oldest, newest = st.queued()
        if n == 0:
            st.unlease(SUBMITTER, token)
            # Close the race with an item queued between the count and the unlease.
            if st.queued()[0] == 0 or not st.lease(SUBMITTER, token, time.time() + t.lease_s, time.time()):
                return
            continue
        target = _target(settings)
        if target is None:
            _fallback_queued(who, settings, st, "batch embedding is no longer enabled for this agent/provider")
            continue
        embedder, client = target
        dropped = st.drop_queued_except(embedder.identity.provider_key)
        if dropped:
            log.info("%s: dropped %d queued batch item(s) of an earlier provider/model", settings.agent_id, dropped)
            continue
        now = time.time()
        if (n_hashes < client.max_requests and oldest is not None and newest is not None
                and now - newest < t.gather_s and now - oldest < t.gather_max_s):
            return again(t.gather_s)  # more of this backfill is on its way: let it share the job
        job_key = bs.new_token()[:16]
        if not slots().acquire(client.provider_id, job_key, t.concurrency, t.slot_ttl_s):
            return again(t.poll_s)  # all slots busy: try again later, without blocking a worker
        if not _submit_one(who, settings, st, t, embedder, client, job_key):
            slots().release(client.provider_id, job_key)


def _fallback_queued(who: Who, settings: AgentSettings, st: StateBackend, why: str) -> None:
    """Queued items that can no longer go to a batch are embedded synchronously (as a finished job)."""
    key = bs.new_token()[:16]
    token = bs.new_token()
    st.create_job(key=key, agent=settings.agent_id, provider="-", model="-", provider_key="-", phase=bs.COLLECTED,
                  state="cancelled", outcome="unavailable", error=why, lease_token=token,
                  lease_until=time.time() + FINISH_LEASE_S)
    for pk in st.queued_provider_keys():
        st.claim(key, pk, 10**9)
    items = st.items_for(key)
    st.update(key, files=len(items))
    log.warning("%s: %s; embedding %d queued file(s) synchronously", settings.agent_id, why, len(items))
    who.finish(key, token)


def _submit_one(who: Who, settings: AgentSettings, st: StateBackend, t: Timing,
                embedder: DeferringEmbedder, client: BatchClient, job_key: str) -> bool:
    ident = embedder.identity
    items = st.claim(job_key, ident.provider_key, client.max_requests)
    if not items:
        return False
    texts: dict[str, str] = {}
    for item in items:
        wanted = set(item.missing)
        for c in item.record.chunks:
            if c.hash in wanted:
                texts.setdefault(c.hash, c.text)
    cached = embedder.inner.cached_vectors(list(texts))  # filled since routing (embedded broker only)
    todo = [h for h in texts if h not in cached]
    token = bs.new_token()
    now = time.time()
    st.create_job(key=job_key, agent=settings.agent_id, provider=client.provider_id, model=client.model,
                  provider_key=ident.provider_key, generation=max(i.generation for i in items),
                  phase=bs.SUBMITTING, state="pending", files=len(items), requests=len(todo), cached=len(cached),
                  lease_token=token, lease_until=now + SUBMIT_LEASE_S)
    if not todo:
        st.update(job_key, token, phase=bs.COLLECTED, state="completed", outcome="cached")
        slots().release(client.provider_id, job_key)
        who.finish(job_key, token)
        return True
    ids = custom_ids(todo)
    try:
        sub = client.submit([BatchRequest(cid, client.provider.prefixes.document + texts[h]) for cid, h in ids.items()], label=job_key)
    except Exception as exc:  # noqa: BLE001 - any submission failure: these chunks go the synchronous way
        msg = client.redact(str(exc))[:500]
        log.warning("%s: %s batch submission failed; embedding its %d chunk(s) synchronously: %s",
                    settings.agent_id, client.provider_id, len(todo), msg)
        st.update(job_key, token, phase=bs.COLLECTED, state="failed", outcome="submit-failed", error=msg,
                  failed=len(todo), lease_until=time.time() + FINISH_LEASE_S)
        slots().release(client.provider_id, job_key)
        who.finish(job_key, token)
        return True
    st.update(job_key, token, phase=bs.POLLING, remote_id=sub.batch_id, input_file=sub.input_file_id,
              custom_ids=json.dumps(ids), submitted_at=time.time(), deadline=time.time() + t.timeout_s,
              lease_until=time.time() + t.lease_s)
    log.info("%s: submitted %s batch %s: %d request(s) for %d file(s) (%d served from cache)", settings.agent_id,
             client.provider_id, sub.batch_id, len(todo), len(items), len(cached))
    who.poll(job_key, token, t.poll_s)
    return True


# --- poll and collect --------------------------------------------------------------------------

@actor(BatchPoll, time_limit=15 * 60_000, max_retries=5, min_backoff=1000, max_backoff=60_000)
def batch_poll(msg: BatchPoll) -> None:
    who, job_key, token = Who(msg.ctx, msg.spec), msg.job_key, msg.token
    settings = who.settings()
    with _state(settings) as st:
        job = st.job(job_key)
        if job is None or job.lease_token != token or job.phase not in (bs.POLLING, bs.CANCELLING):
            return  # superseded (a resumed poller owns it now) or already collected
        t = timing(settings)
        if not st.update(job_key, token, lease_until=time.time() + t.lease_s):
            return
        slots().renew(job.provider, job_key, t.slot_ttl_s)
        target = _target(settings, new_work=False)
        if target is None or target[0].identity.provider_key != job.provider_key:
            return _give_up(who, st, job, token, "the agent's provider/model changed while the batch ran", None)
        _poll_once(who, settings, st, t, job, token, target[1])


def _poll_once(who: Who, settings: AgentSettings, st: StateBackend, t: Timing, job: bs.Job,
               token: str, client: BatchClient) -> None:
    now = time.time()

    def again() -> None:
        who.poll(job.key, token, t.poll_s)

    try:
        status = client.status(job.remote_id)
    except ProviderError as exc:
        errors = job.poll_errors + (0 if exc.retryable else 1)
        st.update(job.key, token, poll_errors=errors, error=client.redact(str(exc))[:300])
        if errors >= MAX_POLL_ERRORS:
            return _give_up(who, st, job, token, f"status checks keep failing: {exc}", client)
        if now > (job.cancel_deadline or job.deadline or now + 1):
            return _give_up(who, st, job, token, f"timed out; last status error: {exc}", client)
        return again()
    st.update(job.key, token, state=status.state.value, remote_status=status.raw, poll_errors=0,
              completed=status.completed or 0, failed=status.failed or 0)
    if status.state.terminal:
        return _collect(who, st, t, job, token, client, status)
    if job.phase == bs.POLLING and job.deadline and now > job.deadline:
        minutes = settings.memory_search.remote.batch.timeout_minutes
        log.warning("%s: %s batch %s still %s after %g min; cancelling it", settings.agent_id, job.provider,
                    job.remote_id, status.raw, minutes)
        try:
            client.cancel(job.remote_id)
        except ProviderError as exc:
            log.warning("cancelling %s batch %s failed: %s", job.provider, job.remote_id, exc)
        st.update(job.key, token, phase=bs.CANCELLING, cancel_deadline=now + t.cancel_grace_s,
                  error=f"timed out after {minutes:g} min (state {status.raw})")
    elif job.phase == bs.CANCELLING and job.cancel_deadline and now > job.cancel_deadline:
        return _give_up(who, st, job, token, f"cancel not confirmed (state {status.raw})", client)
    again()


def _collect(who: Who, st: StateBackend, t: Timing, job: bs.Job, token: str,
             client: BatchClient, status: Any) -> None:
    """Download what the batch produced, store it, and hand the job to the finisher."""
    results = BatchResults()
    if status.output_file or status.error_file:
        try:
            results = client.results(status)
        except ProviderError as exc:
            if exc.retryable and time.time() < (job.deadline or 0) + t.cancel_grace_s:
                log.info("downloading %s batch %s results failed (%s); retrying", job.provider, job.remote_id, exc)
                who.poll(job.key, token, t.poll_s)
                return
            log.warning("%s batch %s: results unavailable (%s); its chunks are embedded synchronously",
                        job.provider, job.remote_id, exc)
    id_map = job.id_map
    dims = client.provider.dims
    if dims is None and results.vectors:
        lengths = [len(v) for v in results.vectors.values()]
        dims = max(set(lengths), key=lengths.count)
    from memindex.pipeline.embeddings.validate import l2_normalize  # lazy: numpy, only when a batch is collected

    good = {id_map[cid]: l2_normalize(vec) for cid, vec in results.vectors.items()
            if cid in id_map and is_valid(vec, dims)}
    st.put_results(job.key, good)
    failed = max(0, job.requests - len(good))
    outcome = {"completed": "collected" if failed == 0 else "partial"}.get(status.state.value, status.state.value)
    first_error = next(iter(results.errors.values()), None)
    error = status.message or (f"{failed} item(s) failed: {first_error}" if failed and first_error else None)
    st.update(job.key, token, phase=bs.COLLECTED, state=status.state.value, completed=len(good), failed=failed,
              outcome=outcome, error=job.error if job.phase == bs.CANCELLING else error,
              lease_until=time.time() + FINISH_LEASE_S)
    slots().release(job.provider, job.key)
    level = logging.INFO if failed == 0 else logging.WARNING
    log.log(level, "%s: %s batch %s %s: %d vector(s) collected, %d to embed synchronously", job.agent,
            job.provider, job.remote_id, status.raw, len(good), failed)
    who.finish(job.key, token)


def _give_up(who: Who, st: StateBackend, job: bs.Job, token: str, why: str,
             client: BatchClient | None) -> None:
    """No results will come from this job: cancel it if possible, and embed its chunks synchronously."""
    log.warning("%s: giving up on %s batch %s (%s); embedding its chunks synchronously", job.agent, job.provider,
                job.remote_id, why)
    if client is not None and job.remote_id:
        try:
            client.cancel(job.remote_id)
        except ProviderError:
            pass
    st.update(job.key, token, phase=bs.COLLECTED, outcome="abandoned", error=why[:500], failed=job.requests,
              lease_until=time.time() + FINISH_LEASE_S)
    slots().release(job.provider, job.key)
    who.finish(job.key, token)


# --- finish: fill, redo what is missing synchronously, write ------------------------------------

@actor(BatchFinish, time_limit=30 * 60_000, **RETRY)
def batch_finish(msg: BatchFinish) -> None:
    who, job_key, token = Who(msg.ctx, msg.spec), msg.job_key, msg.token
    settings = who.settings()
    with _state(settings) as st:
        job = st.job(job_key)
        if job is None or job.lease_token != token or job.phase not in (bs.COLLECTED, bs.FINISHING):
            return
        if not st.update(job_key, token, phase=bs.FINISHING, lease_until=time.time() + FINISH_LEASE_S):
            return
        items = st.items_for(job_key)
        embedder = chunk_embedder_for(settings, cache=False)
        same = embedder is not None and job.provider_key in ("-", embedder.identity.provider_key)
        if not same:
            st.delete_items([i.id for i in items])
            return _done(who, settings, st, job_key, token, 0, "the provider changed; a new sync re-plans these")
        redone = _fill_and_route(who, settings, st, job_key, token, items)
        _done(who, settings, st, job_key, token, redone, None)


def _fill_and_route(who: Who, settings: AgentSettings, st: StateBackend, job_key: str, token: str,
                    items: list[bs.Item]) -> int:
    """Fill the records from the job's results; returns how many chunks still go the synchronous way."""
    redone = 0
    batch: list[tuple[int, int, FileRecord]] = []
    for item in items:
        rec = item.record
        got = st.results(job_key, item.missing)
        redone += sum(1 for h in item.missing if h not in got)  # failed, expired, cancelled or never submitted
        dims = None
        for c in rec.chunks:
            v = got.get(c.hash)
            if not c.embedding and v:
                c.embedding = v
            if c.embedding and v:
                dims = len(v)
        if rec.embedding is not None and dims:
            rec.embedding = replace(rec.embedding, dims=dims)
        batch.append((item.id, item.generation, rec))
        st.update(job_key, token, lease_until=time.time() + FINISH_LEASE_S)
        if len(batch) >= GROUP_FILES:
            _route(who, settings, st, batch)
            batch = []
    if batch:
        _route(who, settings, st, batch)
    return redone


def _route(who: Who, settings: AgentSettings, st: StateBackend,
           batch: list[tuple[int, int, FileRecord]]) -> None:
    by_gen: dict[int, list[FileRecord]] = {}
    for _, gen, rec in batch:
        by_gen.setdefault(gen, []).append(rec)
    for gen, recs in by_gen.items():
        route_records(who.ctx, settings, gen, recs)  # complete ones to the writer, the rest to compute
    st.delete_items([i for i, _, _ in batch])  # after the send: a crash in between only rewrites


def _done(who: Who, settings: AgentSettings, st: StateBackend, job_key: str, token: str,
          redone: int, error: str | None) -> None:
    fields: dict[str, Any] = {"phase": bs.DONE, "finished_at": time.time(), "redone": redone}
    if error:
        fields["error"] = error[:500]
    st.update(job_key, token, **fields)
    st.drop_results(job_key)
    st.prune_done()
    if st.queued()[0]:
        who.submit()
    elif not st.jobs(active_only=True) and not st.pending_items():
        registry().remove(_registry_key(settings))


# --- resuming after a worker died ------------------------------------------------------------------

def resume_orphans(who: Who, settings: AgentSettings, st: StateBackend, *,
                   send_submit: bool = True) -> int:
    """Take over jobs whose owner stopped renewing its lease; returns how many."""
    now = time.time()
    t = timing(settings)
    taken = 0
    for job in st.orphans(now):
        token = bs.new_token()
        lease = FINISH_LEASE_S if job.phase in (bs.COLLECTED, bs.FINISHING) else t.lease_s
        if not st.take_over(job.key, job.lease_token, token, now + lease, now):
            continue
        taken += 1
        if job.phase == bs.SUBMITTING and not job.remote_id:
            st.requeue(job.key)
            st.update(job.key, token, phase=bs.DONE, outcome="abandoned", finished_at=now,
                      error="the worker submitting it stopped; its chunks were queued again")
            slots().release(job.provider, job.key)
            log.warning("%s: a batch submission (%s) was interrupted; its chunks are queued again", job.agent,
                        job.key)
        elif job.phase in (bs.SUBMITTING, bs.POLLING, bs.CANCELLING):
            if job.phase == bs.SUBMITTING:
                st.update(job.key, token, phase=bs.POLLING)
            slots().renew(job.provider, job.key, t.slot_ttl_s)
            log.info("%s: resuming %s batch %s (its poller stopped)", job.agent, job.provider, job.remote_id)
            who.poll(job.key, token)
        else:
            log.info("%s: resuming the write-out of %s batch %s", job.agent, job.provider, job.remote_id)
            who.finish(job.key, token)
    if send_submit and st.queued()[0] and not st.lease_alive(SUBMITTER, now):
        who.submit()
    return taken


def sweep() -> None:
    """One janitor pass over every agent with batch work."""
    for key, entry in registry().all().items():
        try:
            who = msgspec.convert(entry, Who)
            settings = who.settings()
            if not has_state(settings.store_path):  # the agent (or its batch state) is gone
                registry().remove(key)
                continue
            with _state(settings) as st:
                resume_orphans(who, settings, st)
        except Exception as exc:  # noqa: BLE001 - one broken agent must not stop the sweep
            log.warning("batch janitor: %s: %s", entry.get("ctx", {}).get("agent_id"), exc)


class _Janitor(dramatiq.Middleware):
    """Runs ``sweep`` every few seconds in each worker process that consumes ``batch`` (not in producers)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def after_worker_boot(self, broker: Any, worker: Any) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        wanted = getattr(worker, "consumer_whitelist", None)
        if wanted and BATCH_QUEUE not in wanted:
            return  # only workers that consume ``batch`` sweep (they can act on what they find)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="memindex-batch-janitor", daemon=True)
        self._thread.start()

    def before_worker_shutdown(self, broker: Any, worker: Any) -> None:
        self._stop.set()

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(JANITOR_S):
            try:
                sweep()
            except Exception as exc:  # noqa: BLE001 - a Redis blip must not end the janitor for good
                if not failing:  # once per outage, not every few seconds
                    log.warning("batch janitor: sweep failed (%s: %s); retrying every %g s",
                                type(exc).__name__, exc, JANITOR_S)
                failing = True
            else:
                if failing:
                    log.warning("batch janitor: sweeping again")
                failing = False


on_install(lambda broker: broker.add_middleware(_Janitor()))
