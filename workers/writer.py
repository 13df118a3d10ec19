"""The single writer: the only code that writes a store (consumes the ``write`` queue).

Exactly one thread per store consumes ``write`` (the embedded default runs one
writer thread; on Redis, ``memindex worker --writer``), so writes to a store are
serial and a store's plan always precedes the writes it announces.
"""

from __future__ import annotations

import logging
import os
import queue as queue_module
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings, Context
from memindex.pipeline.index.indexer import still_on_disk
from memindex.pipeline.index.preparers import is_current, snapshot_writable
from memindex.pipeline.index.records import FileRecord
from memindex.pipeline.index.workspace import indexed_path_filter
from memindex.pipeline.errors import StoreBusy, StoreError, UnknownAgent
from memindex.pipeline.store.health import store_full
from memindex.pipeline.store.schema import FileKey, embedding_pending
from memindex.pipeline.store.writer import StoreWriter, open_writer, same_space
from memindex.workers import leases, queues
from memindex.workers.broker import WRITE_QUEUE, get_broker, is_write_queue, write_queue_for
from memindex.workers.failures import note_failure, note_record_failures
from memindex.workers.lifecycle import GroupCommit
from memindex.workers.logs import WriteSummary
from memindex.workers.messages import RETRY, request_resync
from memindex.workers.wire import (Item, WriteDeletes, WriteFiles, WriteMode, WriteParts, WritePlan,
                                   WriteReference, WriteSessionAppend, WriteTextFirst, WriteTouch, actor)

log = logging.getLogger("memindex.writer")
_summary = WriteSummary(log)  # a DEBUG line per transaction, an INFO summary per agent and period
# StoreError (a read-only state dir, mixed vector dims) will not get better by retrying;
# a record the store cannot take is already its file's problem row (StoreWriter).

# Backpressure: the writer is the one serial stage. Unbounded, a backfill's
# chunked records would pile up in the write queue (in this process on the
# embedded broker, in Redis otherwise) in proportion to the workspace.
WRITE_BACKLOG_MAX = 16
WRITE_BACKLOG_WAIT_S = 120.0  # never wait forever: no writer running must not wedge the embedders
# Where one thread consumes both the file side and the write queue (the embedded broker), it
# takes a waiting write before the next file group: the backlog stays at a message or two.
# (dramatiq: lower numbers first; its default is 0.)
WRITE_PRIORITY = -10


def wait_for_writer(queue: str = WRITE_QUEUE) -> None:
    """Block (bounded) while ``queue`` (a store's write queue or shard) holds more than WRITE_BACKLOG_MAX messages."""
    if on_inline_thread():
        return  # the writer runs on this very thread, between the messages it prefers (WRITE_PRIORITY)
    queues.wait_below(queue, WRITE_BACKLOG_MAX, WRITE_BACKLOG_WAIT_S, poll_s=0.02)


# Every write actor: the write queue (or its store's shard: ``wire.send(store=)``), not retried on StoreError
# (above) nor for an agent no longer in the config, and taken before other messages by a thread that
# consumes more than writes (WRITE_PRIORITY).
WRITE_OPTIONS: dict[str, Any] = dict(time_limit=10 * 60_000, throws=(StoreError, UnknownAgent), priority=WRITE_PRIORITY,
                                     **RETRY)

# Group commit (issue 19): a write message opens (or joins) its store's held transaction, and
# after it (workers.lifecycle.GroupCommit, before the message is acknowledged) the transaction
# commits unless more work for this writer already waits (it joins the transaction) - so a
# backfill commits about once per GROUP_COMMIT_S instead of once per ~16 files, and the last
# message of a sync commits before it is acknowledged (`index --wait` returns with everything
# visible). Searches see a backfill's progress at least this often.
GROUP_COMMIT_S = 1.0


@dataclass(eq=False)
class Writers:
    """Everything this process's writer keeps between messages, in one place: the open store
    writers and what they hold. Made with the module (``state``); ``close()`` (a worker's shutdown,
    the embedded stop) commits and closes every store and forgets the rest, so the next message
    starts from nothing held."""

    lock: threading.Lock = field(default_factory=threading.Lock)  # guards opened, inodes, held
    opened: dict[str, StoreWriter] = field(default_factory=dict)  # store -> its open writer
    inodes: dict[str, int | None] = field(default_factory=dict)  # the store file each writer opened
    held: dict[str, tuple[StoreWriter, str, Context]] = field(default_factory=dict)  # store -> (writer, queue, ctx)
    # store -> the files written in its held transaction so far (named if the commit is lost)
    held_paths: dict[str, list[str]] = field(default_factory=dict)
    last_used: dict[str, float] = field(default_factory=dict)  # store -> when its writer was last used
    busy: dict[str, tuple[float, StoreBusy]] = field(default_factory=dict)  # store -> its lock's last timeout
    gone_resync: dict[str, float] = field(default_factory=dict)  # store -> last re-plan for a missing generation
    snapshotted: dict[tuple[str, str], float] = field(default_factory=dict)  # (store, path) -> last as-read write
    # (store, set id) -> (first seen, the parts of a split record that arrived so far)
    parts: dict[tuple[str, str], tuple[float, dict[int, FileRecord]]] = field(default_factory=dict)
    committer: threading.Thread | None = None  # commits late groups, closes idle stores
    # Set by the embedded broker (workers/embedded.py), which runs the writer on the thread that also
    # prepares files: that thread's work queue (dramatiq's worker threads each hold their Worker's),
    # and whether more work is queued for it besides its current message.
    inline_work_queue: queue_module.Queue[Any] | None = None
    inline_more_work: Callable[[], bool] = lambda: False

    def close(self) -> None:
        """Commit what each writer holds and close it; forget what was held."""
        with self.lock:
            for w in self.opened.values():
                w.close()
            self.opened.clear()
            self.inodes.clear()
            self.held.clear()
            self.held_paths.clear()
            self.parts.clear()


state = Writers()


def on_inline_thread() -> bool:
    """Is this the embedded thread that prepares files and also writes the stores?"""
    q = state.inline_work_queue
    return q is not None and getattr(threading.current_thread(), "work_queue", None) is q


def after_message(queue_name: str) -> None:
    """After a message this process's worker thread processed (workers.lifecycle.GroupCommit):
    a writer thread decides whether to commit (the embedded files thread after every message)."""
    if is_write_queue(queue_name) or on_inline_thread():
        settle()


def settle() -> None:
    """Commit each held transaction unless more work for its writer waits and it is younger
    than GROUP_COMMIT_S."""
    waiting: dict[str, bool] = {}
    with state.lock:
        held = list(state.held.values())
    for w, queue, ctx in held:
        since = w.held_since
        if since is None and not w.lost_held:
            continue
        if since is not None and time.monotonic() - since < GROUP_COMMIT_S:
            if queue not in waiting:
                waiting[queue] = _more_waiting(queue)
            if waiting[queue]:
                continue
        _commit(w, ctx)


def _more_waiting(queue: str) -> bool:
    """Will more writes reach this thread soon? On Redis: messages ready on the store's write
    queue (shard). Embedded: anything queued for the one thread that prepares files and writes."""
    try:
        return state.inline_more_work() if on_inline_thread() else queues.ready(queue) > 0
    except Exception:  # noqa: BLE001 - cannot tell (Redis away): commit now
        return False


def _commit(w: StoreWriter, ctx: Context) -> None:
    paths = state.held_paths.pop(str(w.path), [])
    try:
        w.commit()
    except Exception as exc:  # noqa: BLE001 - reported below; the next sync re-plans the files
        if not w.full:
            log.warning("could not commit the writes held for %s: %s", w.path, exc)
    state.last_used[str(w.path)] = time.monotonic()
    if w.lost_held:
        # Writes already acknowledged are not in the store: plan again from the Markdown on disk.
        w.lost_held = False
        if w.full:
            # Not on a full disk: the re-plan would write, fail and re-plan again, forever. The
            # files stay to do, and the failure is recorded (their messages had succeeded), so
            # `index` and `status` say so; the next sync (any change, `memindex index`) writes them.
            try:
                note_failure(settings_for(ctx), str(store_full(w.path)), paths,
                             "the held writes were rolled back")
            except Exception as exc:  # noqa: BLE001 - nothing beside the store can be written either
                log.error("%s (%d file(s) to write again; %s)", store_full(w.path), len(paths), exc)
            return
        log.warning("the writes held for %s were rolled back; re-planning from disk", w.path)
        request_resync(ctx, "rolled-back")


# A write group dropped as stale (its files edited while they were embedded) asks for a re-plan
# this much later: the groups of one edit burst are dropped one after another, and each found
# the previous re-plan already started (it clears the request flag) and asked for one more.
STALE_RESYNC_DELAY_MS = 1000
# Writes for a missing generation ask for a re-plan at most this often per store (_write_files).
GONE_RESYNC_S = 5.0


def _commit_late_groups() -> None:
    """Safety net: a held transaction whose next message never came to this thread (another
    consumer took it, middleware skipped it) is committed after 2 x GROUP_COMMIT_S anyway.
    It also closes the stores idle for IDLE_CLOSE_S (their writer lock goes with them)."""
    while True:
        time.sleep(GROUP_COMMIT_S)
        with state.lock:
            held = list(state.held.values())
        for w, _, ctx in held:
            since = w.held_since
            if since is not None and time.monotonic() - since >= 2 * GROUP_COMMIT_S:
                _commit(w, ctx)
        close_idle_writers()


# A store this process has not written for this long is closed, which gives up its writer lock
# (pipeline/store/locks.py): another process's writer of the same store (an `index` run while
# `watch` is idle) waits at most about this long. Reopening costs a few milliseconds.
IDLE_CLOSE_S = 3.0


def close_idle_writers(idle_s: float = IDLE_CLOSE_S) -> None:
    """Close each store with nothing held that no write has used for ``idle_s`` seconds."""
    now = time.monotonic()
    with state.lock:
        for key, w in list(state.opened.items()):
            if w.held_since is not None or w.lost_held or now - state.last_used.get(key, now) < idle_s:
                continue
            _forget(key)
            try:
                w.close()
            except Exception as exc:  # noqa: BLE001 - nothing was held; the next write reopens
                log.warning("could not close the idle store %s: %s", key, exc)


def _hold(key: str, w: StoreWriter, ctx: Context) -> None:
    w.hold()
    state.last_used[key] = time.monotonic()
    state.held[key] = (w, write_queue_for(key), ctx)
    if not (state.committer and state.committer.is_alive()):  # (not alive in a forked child)
        t = threading.Thread(target=_commit_late_groups, name="memindex-group-commit", daemon=True)
        t.start()
        state.committer = t


def _writer(ctx: Context) -> tuple[AgentSettings, StoreWriter]:
    settings = settings_for(ctx)
    key = str(settings.store_path)
    with state.lock:
        w = state.opened.get(key)
        if w is not None and state.inodes.get(key) != _inode(key):
            # The store was deleted or replaced under us (a manual reset): writing on
            # would go into an unlinked file nobody reads. Open the new one.
            log.info("store %s was replaced; reopening", key)
            _forget(key).close()
            w = None
        lost = w is not None and w.wal_lost()
        if lost:
            # Its WAL was deleted under it: writes since the last checkpoint may be gone
            # although they were reported done. Reopen, and have a sync re-plan from disk.
            log.warning("store %s lost its WAL; reopening and re-planning", key)
            _forget(key).close()
            w = None
        if w is not None:
            _hold(key, w, ctx)
    opened_now: StoreWriter | None = None
    if w is None:
        # Opened outside the lock: it may wait for another process's writer of this store
        # (the writer lock), and this process's other stores keep committing meanwhile.
        # After one wait ran out, the next messages for the store fail at once while it stays
        # held: a sync's plan and each of its writes waited the whole WRITER_WAIT_S in turn.
        busy = state.busy.get(key)
        if busy is not None and time.monotonic() - busy[0] >= BUSY_MEMO_S:
            busy = None
        try:
            opened = open_writer(settings, wait_s=0 if busy else None)
        except StoreBusy as exc:
            if busy is not None:
                raise busy[1] from None  # the same reason, which names the whole wait
            state.busy[key] = (time.monotonic(), exc)
            raise
        state.busy.pop(key, None)
        with state.lock:
            w = state.opened.get(key)
            if w is None:
                w = state.opened[key] = opened
                state.inodes[key] = _inode(key)
                opened_now = opened
            else:  # another thread of this process opened it first (one writer thread per store: rare)
                opened.close()
            _hold(key, w, ctx)
    if lost:
        request_resync(ctx, "wal-lost")
    if opened_now is not None and opened_now.lost_by_crash:
        # Its last writer died (SIGKILL, OOM) holding writes it had acknowledged: they are gone,
        # and their files may be leased as queued. Plan again from the Markdown on disk.
        log.warning("the last writer of %s stopped while holding acknowledged writes; re-planning from disk",
                    key)
        try:
            leases.forget_store(get_broker(), key)
        except Exception as exc:  # noqa: BLE001 - they expire (LEASE_TTL_S); the re-plan still runs
            log.warning("could not clear the queued-file leases of %s: %s", key, exc)
        request_resync(ctx, "held-writes-lost")
    # cache.enabled false: no lookups (the embedder) and no new entries, as OpenClaw's upsert returns
    # at once when the cache is off; the entries already there stay until pruned or re-enabled.
    w.cache_writes = bool(settings.memory_search.cache.enabled)
    return settings, w


# Store -> when its writer lock last ran out of waiting (above). The next message after this
# long waits the whole wait again.
BUSY_MEMO_S = 60.0


def _forget(key: str) -> StoreWriter:
    """Take ``key``'s writer out of the state's tables (under ``state.lock``); the caller closes it."""
    state.held.pop(key, None)
    state.inodes.pop(key, None)
    return state.opened.pop(key)


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def close_writers() -> None:
    """Commit what each writer holds and close it (a worker's shutdown, the embedded stop)."""
    state.close()


@actor(WritePlan, **WRITE_OPTIONS)
def write_plan(msg: WritePlan) -> None:
    settings, w = _writer(msg.ctx)
    # A delete is applied only if the file really is gone: a re-created file keeps its rows. (Most
    # plans delete nothing: then no filter is built from the settings.)
    real_deletes: list[FileKey] = []
    if msg.deletes:
        visible = indexed_path_filter(settings)
        real_deletes = [k for k in msg.deletes if not still_on_disk(settings, k, visible)]
    w.plan(msg.generation, msg.fingerprint, msg.pending, real_deletes, msg.planned_at, keep=msg.keep)


@actor(WriteFiles, **WRITE_OPTIONS)
def write_files(msg: WriteFiles) -> None:
    _write_files(msg.ctx, msg.generation, msg.records)


def _write_files(ctx: Context, generation: int, records: list[FileRecord]) -> None:
    settings, w = _writer(ctx)
    fresh: list[FileRecord] = []
    stale: list[FileRecord] = []
    for rec in records:
        (fresh if is_current(rec) else stale).append(rec)
    if fresh and not w.generation_exists(generation):
        # Replaced by a rebuild (whose plan covers these files) or not created yet (its plan
        # failed): nothing to write here. A re-plan brings them back - at most one per store
        # every GONE_RESYNC_S, and none while the disk is full: every dropped message asking
        # for one, each re-plan failing and sending its writes again, grew without end.
        log.info("dropping %d write(s) for %s: generation %d does not exist", len(fresh), ctx.agent_id,
                 generation)
        _written(w, generation, records)  # nothing writes them now: no plan may skip them as queued
        now = time.monotonic()
        if not w.full and now - state.gone_resync.get(str(w.path), -GONE_RESYNC_S) >= GONE_RESYNC_S:
            state.gone_resync[str(w.path)] = now
            request_resync(ctx, "generation-gone")
        return
    for r in fresh:  # read as the file is: a later change gets its re-plan again
        state.snapshotted.pop((str(w.path), r.path), None)
    late: list[FileRecord] = []
    if stale and w.generation_exists(generation):
        # Changed since they were read, still there: written as read (the row keeps the stat of
        # that read, so the next sync, which the change's own event asks for, takes the rest).
        late = [r for r in stale if snapshot_writable(r, w.file_mtime(generation, r.source, r.path))]
        if late:
            log.info("writing %d file(s) as read, changed since (the next sync indexes the change): %s",
                     len(late), ", ".join(r.path for r in late[:5]))
            fresh += late
            written = {id(r) for r in late}
            stale = [r for r in stale if id(r) not in written]
    if fresh:
        # Files written without their vectors (a provider failure on the compute side) or skipped:
        # noted here, where the store and its failure record are (the compute side has neither).
        note_record_failures(settings, fresh)
        started = time.perf_counter()
        _, rejected = w.write_files(generation, fresh)
        _written(w, generation, [r for r in fresh if r.path not in rejected])
        _continue_transcripts(w, ctx, [r for r in fresh if r.path not in rejected])
        if late:
            _resync_after_snapshots(w, ctx, late)  # (after the write: the re-plan must see it)
        if w.held_since is not None:  # what a rolled-back group commit would lose (_commit)
            state.held_paths.setdefault(str(w.path), []).extend(r.path for r in fresh if r.path not in rejected)
        _summary.record(ctx.agent_id or "default", len(fresh), sum(len(r.chunks) for r in fresh),
                        time.perf_counter() - started, fresh[0].path)
        if rejected:
            # Same provider, model and endpoint but other dims: the endpoint changed what
            # it serves, which a plan cannot see (dims are learnt from answers): rebuild.
            bad = [r for r in fresh if r.path in set(rejected)]
            dims_only = _only_dims_differ(w.generation_fingerprint(generation) or {}, bad)
            if dims_only:
                _say_size_changed(generation, fresh)
            request_resync(ctx, "dims-changed" if dims_only else "provider-changed", force=dims_only)
        max_entries = settings.memory_search.cache.max_entries
        if any(r.embedding is not None for r in fresh) and max_entries:
            w.prune_cache(max_entries)
    if stale:
        # The file changed after it was chunked: drop the write, re-plan from disk. Its lease ends
        # with it: kept, a file moved away and back at the same size and mtime (a move, `cp -p`, a
        # restore) read as "already queued by another sync" to every later plan, and stayed out.
        log.info("dropped %d stale write(s) for %s: %s", len(stale), ctx.agent_id,
                 ", ".join(r.path for r in stale[:5]))
        _written(w, generation, stale)
        request_resync(ctx, "stale-write", delay_ms=STALE_RESYNC_DELAY_MS)


def _say_size_changed(generation: int, records: list[FileRecord]) -> None:
    """Before the rebuild a size change asks for. The cached vectors of every size are kept (the
    cache is keyed by size and the re-plan asks the endpoint for its size): dropping all but the
    size just answered made one off-size answer from a proxy cost a re-embedding of the whole
    corpus at the real size, and again each time a proxy switched back and forth."""
    answered = sorted({int(r.embedding.dims) for r in records if r.embedding is not None and r.embedding.dims})
    log.warning("vectors of another size than generation %d's arrived (%s dims); re-planning at the size the "
                "provider answers now (cached vectors of each size are kept)", generation,
                ", ".join(map(str, answered)) or "?")


def _only_dims_differ(fp: dict[str, Any], rejected: list[FileRecord]) -> bool:
    return bool(rejected) and all(r.embedding is not None and same_space(fp, r.embedding) for r in rejected)


@actor(WriteReference, **WRITE_OPTIONS)
def write_reference(msg: WriteReference) -> None:
    _write_reference(msg.ctx, msg.generation, msg.records)


def _write_reference(ctx: Context, generation: int, records: list[FileRecord]) -> None:
    """The search's reference texts (pipeline/search/reference.py): their vectors go into the
    embedding cache only, shared by every generation; no file, chunk or pending row is touched."""
    _, w = _writer(ctx)
    n = w.cache_only(records)
    log.debug("%s: %d reference vector(s) cached", ctx.agent_id, n)


@actor(WriteTextFirst, **WRITE_OPTIONS)
def write_text_first(msg: WriteTextFirst) -> None:
    """The text of files the compute side (or a batch job) is still embedding: keyword-searchable
    at once (issue 44: a hung provider held new notes out of every search for minutes). Their
    leases, pending marks and failure records wait for the write with the vectors."""
    _, w = _writer(msg.ctx)
    # A file changed since it was read is left to that write (written as read, or dropped).
    w.write_text_first(msg.generation, [r for r in msg.records if is_current(r)])


@actor(WriteSessionAppend, **WRITE_OPTIONS)
def write_session_append(msg: WriteSessionAppend) -> None:
    _append(msg.ctx, msg.generation, msg.records)


def _append(ctx: Context, generation: int, records: list[FileRecord]) -> None:
    settings, w = _writer(ctx)
    # A transcript replaced since the read is left to the detector's rebuild.
    current = [r for r in records if is_current(r)]
    note_record_failures(settings, current)
    w.append_chunks(generation, current)
    _written(w, generation, [r for r in records if r not in current])  # dropped: their leases end
    _continue_transcripts(w, ctx, current)


# A file written as read though it changed since gets one re-plan (the change itself): an `index`
# then ends with the latest version. A file that changed again since its last such write within
# this long (appended to all the time) gets none: its own change events (the watcher), or the next
# sync, take it further; re-planning it each time kept `index` running for as long as it grew.
SNAPSHOT_RESYNC_S = 60.0


def _resync_after_snapshots(w: StoreWriter, ctx: Context, late: list[FileRecord]) -> None:
    store, now = str(w.path), time.monotonic()
    for key in [k for k, t in state.snapshotted.items() if now - t > SNAPSHOT_RESYNC_S]:
        del state.snapshotted[key]
    first = [r for r in late if (store, r.path) not in state.snapshotted]
    for r in late:
        state.snapshotted[(store, r.path)] = now
    if first:
        _resync_after_commit(w, ctx, "changed-while-indexed", delay_ms=STALE_RESYNC_DELAY_MS)


def _written(w: StoreWriter, generation: int, records: list[FileRecord]) -> None:
    """These files are written, or dropped for good (held writes included: a writer dying with
    them leaves the mark its successor acts on): their leases end, so no plan takes them for
    queued any more (dropped writes still leased kept files out of every sync for 6 h)."""
    try:
        leases.release(get_broker(), str(w.path), generation, [(r.source, r.path) for r in records])
    except Exception as exc:  # noqa: BLE001 - a lease left over only covers a file as it was written
        log.debug("could not release the leases of %d written file(s): %s", len(records), exc)


def _continue_transcripts(w: StoreWriter, ctx: Context, written: list[FileRecord]) -> None:
    """A transcript read up to the per-read cap: its next part is the next sync's delta, asked
    for now (a 100 MiB transcript took three `index` runs, each saying it was done)."""
    if any(r.continues for r in written):
        _resync_after_commit(w, ctx, "transcript-continues")


def _resync_after_commit(w: StoreWriter, ctx: Context, reason: str, delay_ms: int | None = None) -> None:
    """Ask for a sync that must see these writes: a plan reads the store through another
    connection, so writes still held for the group commit would look undone (and be planned
    again, or, leased, skipped: a transcript's next part was never read)."""
    if w.held_since is not None:
        _commit(w, ctx)
    request_resync(ctx, reason, delay_ms=delay_ms)


# Parts of a file too big for one message (workers/compute.py ``pack``), per store and set, until all
# have arrived. Only this process's writer sees a store's write queue, so memory is the right place: a
# writer restart loses the incomplete sets, whose files stay pending until the next sync re-plans them
# (the Markdown is the source of truth). A set never completed (a lost part) is dropped after PARTS_TTL_S.
PARTS_TTL_S = 3600.0


@actor(WriteParts, **WRITE_OPTIONS)
def write_parts(msg: WriteParts) -> None:
    """Collect parts of split records; the last one to arrive writes the whole record (idempotent:
    a duplicated part replaces itself, a duplicated set rewrites the same rows)."""
    store = str(settings_for(msg.ctx).store_path)
    now = time.monotonic()
    for key in [k for k, (t, _) in state.parts.items() if now - t > PARTS_TTL_S]:
        log.info("dropped the incomplete parts of a split record (%s); the next sync re-plans it", key[1])
        del state.parts[key]
    done: dict[WriteMode, list[FileRecord]] = {mode: [] for mode in WRITERS}
    complete: list[tuple[str, str]] = []
    for item in _parts_only(msg.items):
        assert item.part is not None  # (_parts_only)
        key = (store, item.part.set_id)
        _, have = state.parts.setdefault(key, (now, {}))
        have[item.part.index] = item.record
        if len(have) == item.part.count and key not in complete:
            complete.append(key)
            done[item.mode].append(_assemble([have[i] for i in range(item.part.count)]))
    for mode, write in WRITERS.items():
        if done[mode]:
            write(msg.ctx, msg.generation, done[mode])
    for key in complete:  # only once written: a retried message finds its set complete again
        state.parts.pop(key, None)


# How a write mode's whole records are written (write_parts puts split ones back together first);
# the same order as compute.MODES: the reference texts before the files.
WRITERS: dict[WriteMode, Callable[[Context, int, list[FileRecord]], None]] = {
    "reference": _write_reference, "files": _write_files, "append": _append}


def _parts_only(items: list[Item]) -> list[Item]:
    """The items that are parts (a whole record here would be a sender's bug: said, not written)."""
    whole = [i.record.path for i in items if i.part is None]
    if whole:
        log.warning("write_parts got %d whole record(s) (%s): not written; the next sync re-plans them",
                    len(whole), whole[0])
    return [i for i in items if i.part is not None]


def _assemble(parts: list[FileRecord]) -> FileRecord:
    """One record from its parts, in order (the parts themselves are left as they are)."""
    # Any part's problem (one part's embedding failed) is the file's; the identity that learnt its dims wins.
    errors = [p.error for p in parts if p.error]
    return replace(parts[0], chunks=[c for p in parts for c in p.chunks],
                   cache_hits=sorted({h for p in parts for h in p.cache_hits}),
                   error=next((e for e in errors if embedding_pending(e)), errors[0] if errors else None),
                   embedding=next((p.embedding for p in parts if p.embedding is not None and p.embedding.dims),
                                  parts[0].embedding))


@actor(WriteTouch, **WRITE_OPTIONS)
def write_touch(msg: WriteTouch) -> None:
    _, w = _writer(msg.ctx)
    w.touch_files(msg.generation, msg.records)


@actor(WriteDeletes, **WRITE_OPTIONS)
def write_deletes(msg: WriteDeletes) -> None:
    settings, w = _writer(msg.ctx)
    visible = indexed_path_filter(settings)
    w.delete_files(msg.generation, [k for k in msg.keys if not still_on_disk(settings, k, visible)])


GroupCommit.after_message = after_message
GroupCommit.on_shutdown = close_writers
