"""Session-delta detector (F9): notice grown transcripts and enqueue their new part.

``check_sessions(ctx)`` is one cheap pass over an agent's transcripts: a
stat per file, and for grown ones a newline count over the unindexed tail.
Past ``sync.sessions.deltaBytes`` or ``deltaMessages`` it enqueues an
incremental index of only the new turns; a truncated or replaced transcript
is reindexed from scratch; an indexed transcript no longer listed (deleted, or
renamed to ``*.jsonl.deleted.<ts>`` / ``*.jsonl.reset.<ts>`` as OpenClaw does) gets a
sync, whose plan removes its rows. What was indexed lives in the store (files row
``extra``), so the detector keeps no state worth losing across restarts;
the only memory here is which work is already in flight, to avoid flooding
the queue while a delta waits to be written.

The watcher or an interval loop calls ``check_sessions`` (``DetectorLoop``
is a ready-made polling thread).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Iterable

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings, Context
from memindex.pipeline.errors import MemindexError
from memindex.pipeline.index.indexer import still_on_disk
from memindex.pipeline.index.records import FileJob, SessionDelta
from memindex.pipeline.index.sessions import KIND, SOURCE, discover_sessions, next_step
from memindex.pipeline.index.workspace import indexed_path_filter
from memindex.pipeline.store.reader import IndexedFile, open_reader
from memindex.pipeline.store.schema import FileKey
from memindex.producers.hooks import request_sync_once
from memindex.workers import embedded
from memindex.workers.wire import IndexFiles, IndexSessionDelta, send

log = logging.getLogger("memindex.session_delta")

# How long enqueued work suppresses an identical enqueue. After that it is sent
# again (a lost message must not stall a transcript); the writer drops duplicates.
INFLIGHT_TTL_S = 30.0

# (base hash, "full"), (base hash, "append", start byte), or the transcripts found gone
Work = tuple[str | None, str] | tuple[str | None, str, int] | tuple[tuple[str, str], ...]
_inflight: dict[tuple[str, str], tuple[Work, float]] = {}
_inflight_lock = threading.Lock()


def _claim(key: tuple[str, str], token: Work) -> bool:
    """True if this exact work is not already in flight (and marks it so)."""
    now = time.monotonic()
    with _inflight_lock:
        hit = _inflight.get(key)
        if hit is not None and hit[0] == token and now - hit[1] < INFLIGHT_TTL_S:
            return False
        _inflight[key] = (token, now)
        return True


def check_sessions(ctx: Context, *, flush: bool = False) -> int:
    """One detector pass for one agent; returns how many transcripts were enqueued.

    ``flush`` indexes any growth regardless of thresholds (a final catch-up).
    Does nothing unless sessions are opted in, or before the agent's first
    sync (that sync indexes every transcript in full).
    """
    settings = settings_for(ctx)
    if not settings.enabled or SOURCE not in settings.sources:
        return 0
    reader = open_reader(settings)
    try:
        gen = reader.state().live_generation
        indexed = reader.indexed_files(gen) if gen is not None else {}
    finally:
        reader.close()
    if gen is None:
        return 0
    embedded.start()
    sent = 0
    store = str(settings.store_path)
    listed = discover_sessions(settings)
    for f in listed:
        prev = indexed.get((f.source, f.path))
        step = next_step(settings, f, prev, flush=flush)
        if step in ("unchanged", "pending"):
            continue
        base = prev.hash if prev is not None else None
        if isinstance(step, SessionDelta):
            if not _claim((store, f.path), (base, "append", step.start_byte)):
                continue
            send(IndexSessionDelta(ctx, gen, step))
        else:
            if not _claim((store, f.path), (base, "full")):
                continue
            job = FileJob(f.source, f.path, str(f.abs_path), f.size, f.mtime_ns, KIND)
            send(IndexFiles(ctx, gen, [job]))
        sent += 1
        log.debug("%s %s: enqueued %s", ctx.agent_id, f.path, "delta" if isinstance(step, SessionDelta) else "full")
    return sent + _sync_if_gone(ctx, settings, indexed, {(f.source, f.path) for f in listed})


def _sync_if_gone(ctx: Context, settings: AgentSettings, indexed: dict[FileKey, IndexedFile],
                  listed: set[FileKey]) -> int:
    """Indexed transcripts that vanished (deleted, renamed to ``.deleted.<ts>``, the directory
    gone or refused): the watcher sees only Markdown, and deltas never remove rows, so they stayed
    searchable until a one-shot `index`. A sync's plan removes them (only the writer writes);
    1 when one was asked for. A row kept because its directory cannot be read is not gone."""
    missing = [k for k in indexed if k[0] == SOURCE and k not in listed]
    if not missing:
        return 0
    visible = indexed_path_filter(settings)  # made once, not per transcript
    gone = sorted(k for k in missing if not still_on_disk(settings, k, visible))
    if not gone or not _claim((str(settings.store_path), "\0gone"), tuple(gone)):
        return 0
    request_sync_once(ctx, "sessions-gone", settings)  # False: a queued sync, not yet started, covers it
    log.info("%s: %d indexed transcript(s) gone from disk (%s); sync enqueued to remove them",
             ctx.agent_id, len(gone), ", ".join(p for _, p in gone[:3]) + (" ..." if len(gone) > 3 else ""))
    return 1


class DetectorLoop:
    """Poll ``check_sessions`` for some agents every ``interval`` seconds on a thread."""

    def __init__(self, ctxs: Iterable[Context], interval: float = 0.5):
        self.ctxs = list(ctxs)
        self.interval = interval
        self.checks = 0
        self.enqueued = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="session-delta", daemon=True)

    def start(self) -> "DetectorLoop":
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        said: dict[str | None, str] = {}  # agent -> the failure last logged
        while not self._stop.is_set():
            for ctx in self.ctxs:
                try:
                    self.enqueued += check_sessions(ctx)
                    said.pop(ctx.agent_id, None)
                except Exception as exc:  # noqa: BLE001 - a bad pass must not end the loop
                    # Said once per agent and reason, not every second: a config being edited
                    # (or broken) fails each pass the same way until it is fixed.
                    why = f"{type(exc).__name__}: {exc}"
                    if said.get(ctx.agent_id) == why:
                        log.debug("session check failed for %s again: %s", ctx.agent_id, why)
                    elif isinstance(exc, MemindexError):
                        log.warning("session check of %s failed: %s (retried every %g s; said again when "
                                    "the reason changes)", ctx.agent_id, exc, self.interval)
                    else:
                        log.exception("session check failed for %s", ctx.agent_id)
                    said[ctx.agent_id] = why
            self.checks += 1
            self._stop.wait(self.interval)
