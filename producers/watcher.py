"""File watcher (F8): Markdown changes mark an agent dirty; a debounced sync follows.

What is watched, per agent: the workspace directory itself (non-recursively,
for ``MEMORY.md`` / ``memory.md`` and the appearance of ``memory/``), every
directory of the ``memory/`` tree, every directory of each extraPaths tree,
and the parent of each extraPaths file (``memindex.pipeline.index.workspace.watch_roots``).

Why not one recursive watch per root: watchdog's recursive inotify watch
descends into *everything*, including ``.git``, ``node_modules`` and
virtualenvs, which is how a big extraPaths tree exhausts inotify watches.
Instead each directory this module walked itself (no symlinks, no
``IGNORED_DIRS``) gets its own non-recursive watch, new directories are added
as they appear, and the total is capped (``max_dirs``, warn when hit; a capped
agent gets a periodic catch-up sync instead).

An event marks the agent dirty and (re)starts its debounce timer
(``sync.watchDebounceMs``, 1.5 s); when the timer fires, one sync is enqueued,
so a burst of edits becomes one job. Continuous edits still sync at least
every ``MAX_DELAY_FACTOR`` debounce periods.

``ConfigReload`` polls ``openclaw.json`` (and the state dir's ``.env``) every
``MEMINDEX_CONFIG_POLL_S`` seconds; on a change it re-resolves the agents and
``Watcher.reconfigure`` starts watching new agents (with one catch-up sync) and
stops watching removed ones, each logged at INFO with the agent id.

On Redis, the debounce loop also probes every ``DATA_LOSS_PROBE_S`` whether Redis
lost its data or was unreachable for a while (``workers.lifecycle.DataLossProbe``); if so
every agent is marked dirty, and the sync that follows re-plans every file still pending
in the store.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch

from memindex.pipeline.config import environ
from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings, Context, config_stamp
from memindex.pipeline.index.media import extra_kind_for
from memindex.pipeline.index.workspace import (MEMORY_DIR, ROOT_FILES, is_ignored_dir, is_markdown_name,
                                              resolve_extra_paths, watch_roots)
from memindex.producers.enqueue import request_sync
from memindex.workers import leases
from memindex.workers.broker import get_broker, redis_broker
from memindex.workers.lifecycle import DataLossProbe
from memindex.workers.logs import REDIS_DOWN_ATTR, is_redis_down

log = logging.getLogger("memindex.watcher")

DEFAULT_MAX_DIRS = environ.WATCH_MAX_DIRS.get()
MAX_DELAY_FACTOR = 10  # a steady stream of edits still syncs every 10 debounce periods
CAPPED_RESYNC_S = 300.0  # agents with unwatched directories (cap hit) resync this often
RETRY_S = 2.0  # enqueue failed (broker down): try again after this long
ENQUEUE_REPEAT_S = 60.0  # the same enqueue failure (not Redis: a broken config) is said again after this long
# How often ConfigReload stats the config: a stat is cheap, and an operator who edits
# openclaw.json expects the new agent to be watched within seconds, not on restart.
CONFIG_POLL_S = environ.CONFIG_POLL_S.get()
# How often the watcher asks Redis whether it lost its data: one SET per period.
DATA_LOSS_PROBE_S = 2.0

# Only changes matter: opens/reads (e.g. by our own workers) never reach us.
EVENT_FILTER = [FileCreatedEvent, FileModifiedEvent, FileDeletedEvent, FileMovedEvent,
                DirCreatedEvent, DirDeletedEvent, DirMovedEvent]

Enqueue = Callable[[Context, str], object]


def _default_enqueue(ctx: Context, reason: str) -> object:
    request_sync(ctx, reason=reason)
    return None


def _forget_leases() -> None:
    """Work in flight may be gone: no plan may skip a file as queued by another (workers/leases.py)."""
    try:
        leases.forget_all(get_broker())
    except Exception as exc:  # noqa: BLE001 - Redis away again: its leases expire (LEASE_TTL_S)
        log.warning("watcher: could not clear the queued-file leases (%s); files queued before may wait "
                    "up to %.0f h for a re-plan", exc, leases.LEASE_TTL_S / 3600)


def _data_loss_probe() -> Callable[[], str | None] | None:
    """The probe for this deployment's Redis; None on the embedded broker (its queue dies with us)."""
    rb = redis_broker()
    return None if rb is None else DataLossProbe(rb.client, rb.namespace)


def _norm(p: str | os.PathLike[str]) -> str:
    return os.path.normpath(os.fspath(p))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass
class AgentWatch:
    """What one agent cares about, as normalised absolute path strings."""

    ctx: Context
    debounce_s: float
    files: set[str] = field(default_factory=set)  # exact files: MEMORY.md, memory.md, extra files
    trees: list[str] = field(default_factory=list)  # memory/ and extra dirs: *.md anywhere below
    tops: list[str] = field(default_factory=list)  # directories watched non-recursively for the above
    extra_keep: Callable[[str], str | None] | None = None  # F17: media files count under extraPaths
    digest: str = ""  # of the settings it was made from: a config edit that changes them syncs

    @classmethod
    def from_settings(cls, ctx: Context, settings: AgentSettings) -> "AgentWatch":
        ws = settings.workspace
        w = cls(ctx, settings.memory_search.sync.watch_debounce_ms / 1000.0, digest=settings.digest())
        w.files = {_norm(ws / name) for name in ROOT_FILES}
        w.trees = [_norm(ws / MEMORY_DIR)]
        w.extra_keep = extra_kind_for(settings)
        for extra in resolve_extra_paths(settings):
            if extra.is_symlink():
                continue
            if extra.is_dir():
                w.trees.append(_norm(extra))
            elif is_markdown_name(extra.name) or not extra.exists() or (w.extra_keep and w.extra_keep(extra.name)):
                # A missing path may become a file or a directory: accept both.
                w.files.add(_norm(extra))
                if not extra.exists():
                    w.trees.append(_norm(extra))
        w.tops = [_norm(p) for p in watch_roots(settings)]
        return w

    def relevant(self, path: str, is_dir: bool) -> bool:
        if not path:
            return False
        if path in self.files:
            return True
        for i, t in enumerate(self.trees):
            if _under(path, t):
                rel = path[len(t):].strip(os.sep)
                if rel and any(is_ignored_dir(part) for part in rel.split(os.sep)[:-1 if not is_dir else None]):
                    return False
                if is_dir or is_markdown_name(path):  # discovery's rule: UPPER.MD is Markdown too
                    return True
                # trees[0] is memory/: media count only under extraPaths (F17).
                return i > 0 and self.extra_keep is not None and self.extra_keep(os.path.basename(path)) is not None
        return False


class _Handler(FileSystemEventHandler):
    """Hands watchdog's events to the watcher's own thread, never taking the watcher's lock.

    watchdog dispatches holding its observer lock, and handling an event can take the
    watcher's lock and then watch a new directory (the observer lock again), while a config
    reload holds the watcher's lock and schedules watches: the two threads waited on each
    other for ever (``watch --all`` stopped syncing and ignored SIGTERM). Here watchdog's
    thread only queues.
    """

    def __init__(self, watcher: "Watcher") -> None:
        self.watcher = watcher
        self.events: queue.SimpleQueue[FileSystemEvent | None] = queue.SimpleQueue()

    def on_any_event(self, event: FileSystemEvent) -> None:
        self.events.put(event)

    def run(self) -> None:
        while (event := self.events.get()) is not None:
            try:
                self.watcher.handle(event)
            except Exception:  # noqa: BLE001 - one bad event must not stop the thread
                log.exception("watcher: failed to handle %s", event)


class Watcher:
    """Watch every given agent; enqueue one debounced sync per burst of changes."""

    def __init__(self, agents: Iterable[tuple[Context, AgentSettings]], *, enqueue: Enqueue | None = None,
                 max_dirs: int = DEFAULT_MAX_DIRS, debounce_s: float | None = None,
                 lost: Callable[[], str | None] | None | str = "auto",
                 configured: Iterable[str | None] | None = None) -> None:
        self.agents = [AgentWatch.from_settings(c, s) for c, s in agents]
        if debounce_s is not None:
            for a in self.agents:
                a.debounce_s = debounce_s
        self.enqueue = enqueue or _default_enqueue
        self.max_dirs = max_dirs
        self.observer = Observer()
        self._handler = _Handler(self)
        self._watches: dict[str, ObservedWatch] = {}  # directory -> its watch
        self._carry: dict[str, ObservedWatch] = {}  # during reconfigure: the watches before it
        self._debounce_override = debounce_s
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._due: dict[int, float] = {}  # agent index -> when to fire
        self._first: dict[int, float] = {}  # agent index -> first event of the burst
        self._changed: dict[int, set[str]] = {}  # agent index -> paths changed in this burst (for the log)
        self._capped: set[int] = set()
        self._last_capped_sync: dict[int, float] = {}
        self._cap_warned = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self._events_thread: threading.Thread | None = None
        self.enqueued = 0  # syncs enqueued (for tests and the bench)
        # Redis losing its data loses the queued work of every pending file; nothing on disk
        # changes, so only a re-plan brings it back. "auto": the broker's probe, when the
        # syncs go to it (None on the embedded broker, or with a caller's own enqueue).
        probe = (_data_loss_probe() if enqueue is None else None) if lost == "auto" else lost
        self._lost: Callable[[], str | None] | None = None if isinstance(probe, str) else probe
        self._next_probe = 0.0
        # Every agent id the config listed (watched or not) at start / the last reconfigure.
        self._listed: set[str | None] | None = None if configured is None else set(configured)
        self._enqueue_said: dict[str | None, tuple[str, float]] = {}  # agent -> (last failure said, when)

    # -- directories ------------------------------------------------------------------
    @property
    def watched_dirs(self) -> list[str]:
        with self._lock:
            return sorted(self._watches)

    def _watch_dir(self, d: str) -> bool:
        """Add one non-recursive watch; False when the cap is reached."""
        with self._lock:
            if d in self._watches:
                return True
            if len(self._watches) >= self.max_dirs:
                return False
            if d in self._carry:  # reconfigure: already watched, keep that watch
                self._watches[d] = self._carry.pop(d)
                return True
            try:
                self._watches[d] = self.observer.schedule(self._handler, d, recursive=False,
                                                          event_filter=EVENT_FILTER)
            except OSError as exc:  # vanished meanwhile, or out of inotify watches
                log.warning("watcher: cannot watch %s: %s", d, exc)
                return True
            return True

    def _unwatch_under(self, root: str) -> None:
        with self._lock:
            for d in [d for d in self._watches if _under(d, root)]:
                watch = self._watches.pop(d)
                try:
                    self.observer.unschedule(watch)
                except (KeyError, OSError):
                    pass

    def _walk_and_watch(self, root: str) -> bool:
        """Watch ``root`` and every directory below it (no symlinks, no ignored dirs).

        Returns False if the cap stopped the walk.
        """
        try:
            if os.path.islink(root) or not os.path.isdir(root):
                return True
        except OSError:
            return True
        stack = [root]
        while stack:
            d = stack.pop()
            if not self._watch_dir(d):
                return False
            try:
                with os.scandir(d) as it:
                    subdirs = [e.path for e in it
                               if not is_ignored_dir(e.name) and e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            # Names in descending order first: at the cap, dated folders (memory/2026/06/15) leave the
            # oldest unwatched, not the newest, where the agent writes (the capped rest is synced
            # every CAPPED_RESYNC_S).
            stack.extend(sorted(subdirs))
        return True

    def _cap_hit(self, idx: int, where: str) -> None:
        self._capped.add(idx)
        if not self._cap_warned:
            self._cap_warned = True
            log.warning("watcher: watching the maximum of %d directories; some directories under %s are "
                        "not watched (agent %s). Changes there are picked up by a sync every %.0f s; raise "
                        "MEMINDEX_WATCH_MAX_DIRS / --max-watch-dirs, or narrow extraPaths.",
                        self.max_dirs, where, self.agents[idx].ctx.agent_id, CAPPED_RESYNC_S)

    def _watch_towards(self, top: str) -> None:
        """A top that is not there (a workspace not created yet, deleted, or unmounted): watch its
        nearest existing ancestor, so its creation is an event (``handle``). Re-checked after each
        watch is added: ``mkdir -p`` may create the next level in between."""
        seen = None
        while True:
            anc = top
            while not os.path.isdir(anc) or os.path.islink(anc):
                parent = os.path.dirname(anc)
                if parent == anc:
                    return
                anc = parent
            if anc == top or anc == seen:
                return
            self._watch_dir(anc)
            seen = anc

    def _watch_agent(self, idx: int) -> None:
        a = self.agents[idx]
        for top in a.tops:
            self._watch_towards(top)
        for top in a.tops:
            if os.path.isdir(top) and not os.path.islink(top) and not self._watch_dir(top):
                self._cap_hit(idx, top)
        for tree in a.trees:
            if not self._walk_and_watch(tree):
                self._cap_hit(idx, tree)

    def reconfigure(self, agents: Iterable[tuple[Context, AgentSettings]],
                    configured: Iterable[str | None] | None = None) -> tuple[list[str | None], list[str | None]]:
        """Watch exactly these agents from now on: start the new ones (each gets a catch-up
        sync), stop the removed ones, re-read the kept ones' roots. Returns (added, removed) ids.
        ``configured``: every agent id the config lists (watched or not), so the log can say
        whether an agent left the config or was only disabled there."""
        new = [AgentWatch.from_settings(c, s) for c, s in agents]
        listed = None if configured is None else set(configured)
        before, self._listed = self._listed, listed
        with self._cond:
            if self._debounce_override is not None:
                for a in new:
                    a.debounce_s = self._debounce_override
            old_ids = [a.ctx.agent_id for a in self.agents]
            old_digests = {a.ctx.agent_id: a.digest for a in self.agents}
            new_ids = [a.ctx.agent_id for a in new]
            added = [i for i in new_ids if i not in old_ids]
            removed = [i for i in old_ids if i not in new_ids]
            # Debounce state is kept by agent id across the re-numbering.
            due = {old_ids[i]: t for i, t in self._due.items()}
            first = {old_ids[i]: t for i, t in self._first.items()}
            changed = {old_ids[i]: c for i, c in self._changed.items()}
            self.agents = new
            pos = {aid: i for i, aid in enumerate(new_ids)}
            self._due = {pos[k]: t for k, t in due.items() if k in pos}
            self._first = {pos[k]: t for k, t in first.items() if k in pos}
            self._changed = {pos[k]: c for k, c in changed.items() if k in pos}
            self._capped, self._last_capped_sync = set(), {}
            # Re-walk every agent; directories still needed keep their watch (watchdog watches
            # compare equal by path, so scheduling one twice and unscheduling the old would drop both).
            carry, self._watches = self._watches, {}
            self._carry = carry
            try:
                for idx in range(len(new)):
                    self._watch_agent(idx)
            finally:
                self._carry = {}
            for d, watch in carry.items():
                try:
                    self.observer.unschedule(watch)
                except (KeyError, OSError):
                    pass
        for aid in removed:
            if listed is not None and aid in listed:
                log.info("watcher: agent %s disabled in the config (memory search or sync.watch off); "
                         "no longer watched", aid)
            else:
                log.info("watcher: agent %s removed from the config; no longer watched", aid)
        for aid in added:
            how = "enabled in the config" if before is not None and aid in before else "added to the config"
            log.info("watcher: agent %s %s; watching %s", aid, how,
                     ", ".join(dict.fromkeys(new[pos[aid]].tops)) or "nothing yet")
            self.mark_dirty(pos[aid])  # what it already has gets indexed without waiting for an edit
        for a in new:
            if a.ctx.agent_id not in added and old_digests.get(a.ctx.agent_id) != a.digest:
                # Chunking, sources, provider...: the sync re-plans (a rebuild if the index depends
                # on what changed). An edit that changed nothing else waited for the next file edit.
                log.info("watcher: agent %s's settings changed; syncing it", a.ctx.agent_id)
                self.mark_dirty(pos[a.ctx.agent_id])
        if added or removed:
            log.info("watcher: %d agent(s), %d directories watched", len(new), len(self._watches))
        return added, removed

    # -- events -----------------------------------------------------------------------------
    def handle(self, event: FileSystemEvent) -> None:
        if event.event_type not in ("created", "modified", "deleted", "moved"):
            return
        src = _norm(os.fsdecode(event.src_path)) if event.src_path else ""
        dest = _norm(os.fsdecode(event.dest_path)) if getattr(event, "dest_path", "") else ""
        is_dir = event.is_directory
        if not is_dir and event.event_type in ("created", "modified") and os.path.islink(src):
            return  # symlinks are never memory
        if is_dir and event.event_type in ("deleted", "moved"):
            self._unwatch_under(src)
        if is_dir:
            self._top_events(event.event_type, src, dest)
        with self._lock:  # reconfigure swaps the agents list: indices must not change under us
            for idx, a in enumerate(self.agents):
                hit = False
                for path in (src, dest):
                    if not path or not a.relevant(path, is_dir):
                        continue
                    hit = True
                    if is_dir and path == (dest or src) and event.event_type in ("created", "moved"):
                        # A new (or moved-in) directory: watch it and everything below it.
                        if not self._walk_and_watch(path):
                            self._cap_hit(idx, path)
                if hit:
                    self.mark_dirty(idx, dest or src)

    def _top_events(self, kind: str, src: str, dest: str) -> None:
        """An agent's workspace (or a directory above it) created, deleted or moved: watch what is
        there now, and sync the agent when its workspace appeared (it was refused while missing)."""
        with self._lock:
            for idx, a in enumerate(self.agents):
                gone = kind in ("deleted", "moved") and any(_under(t, src) for t in a.tops)
                came = kind in ("created", "moved") and any(_under(t, dest or src) for t in a.tops)
                if not (gone or came):
                    continue
                self._watch_agent(idx)
                if came and os.path.isdir(a.tops[0]):  # tops[0]: the workspace (watch_roots)
                    log.info("watcher: %s appeared; syncing agent %s", a.tops[0], a.ctx.agent_id)
                    self.mark_dirty(idx, a.tops[0])

    def mark_dirty(self, idx: int, path: str | None = None) -> None:
        now = time.monotonic()
        with self._cond:
            if path:
                self._changed.setdefault(idx, set()).add(path)
            first = self._first.setdefault(idx, now)
            a = self.agents[idx]
            self._due[idx] = min(now + a.debounce_s, first + a.debounce_s * MAX_DELAY_FACTOR)
            self._cond.notify()

    # -- the debounce loop ------------------------------------------------------------------
    def _take(self, ready: list[int]) -> list[tuple["AgentWatch", list[str]]]:
        """Under the lock: the agents behind these indices and their changed paths (a
        reconfigure may renumber the agents once the lock is released)."""
        with self._lock:
            return [(self.agents[i], sorted(self._changed.pop(i, ()))) for i in ready if i < len(self.agents)]

    def _fire(self, a: "AgentWatch", changed: list[str]) -> None:
        try:
            self.enqueue(a.ctx, "watch")
            self.enqueued += 1
            # One line per change batch: agent, how many paths, the first few of them.
            log.info("watcher: sync enqueued for %s: %d changed path(s)%s", a.ctx.agent_id, len(changed),
                     (": " + ", ".join(os.path.basename(p) for p in changed[:3])
                      + (f" (+{len(changed) - 3} more)" if len(changed) > 3 else "")) if changed else "")
        except Exception as exc:  # noqa: BLE001 - broker unreachable, config broken: keep the agent dirty
            self._say_enqueue_failed(a.ctx.agent_id, exc)
            with self._cond:
                if a not in self.agents:
                    return  # removed from the config meanwhile
                idx = self.agents.index(a)
                self._changed.setdefault(idx, set()).update(changed)
                self._first.setdefault(idx, time.monotonic())
                self._due[idx] = time.monotonic() + RETRY_S

    def _say_enqueue_failed(self, agent_id: str | None, exc: Exception) -> None:
        """Redis away: the process-wide outage filter words and spaces the line (workers/logs.py).
        Anything else (a broken openclaw.json while it is being edited): said when it changes,
        else once per ENQUEUE_REPEAT_S, not every RETRY_S."""
        down = is_redis_down(exc)
        now, why = time.monotonic(), str(exc)
        last = self._enqueue_said.get(agent_id)
        if not down and last is not None and last[0] == why and now - last[1] < ENQUEUE_REPEAT_S:
            return
        self._enqueue_said[agent_id] = (why, now)
        log.warning("watcher: could not enqueue a sync for %s (%s); retrying every %.0f s",
                    agent_id, why, RETRY_S, extra={REDIS_DOWN_ATTR: down})

    def _probe_data_loss(self) -> None:
        now = time.monotonic()
        if self._lost is None or now < self._next_probe:
            return
        self._next_probe = now + DATA_LOSS_PROBE_S
        reason = self._lost()
        if reason:
            log.warning("watcher: %s; re-planning every watched agent (%s) so pending files are queued again",
                        reason, ", ".join(a.ctx.agent_id or "default" for a in self.agents))
            if getattr(self._lost, "kind", None) not in ("data_lost", "paused"):
                # Lost data took its leases along; any there now are for work queued since (a
                # start-up catch-up), and forgetting them queued those files a second time. A pause
                # lost nothing: the leases stand for work still queued.
                _forget_leases()
            with self._lock:
                for idx in range(len(self.agents)):
                    self.mark_dirty(idx)

    def _loop(self) -> None:
        while True:
            self._probe_data_loss()
            with self._cond:
                if self._stop:
                    return
                now = time.monotonic()
                for idx in self._capped:
                    if now - self._last_capped_sync.get(idx, now) >= CAPPED_RESYNC_S:
                        self._due.setdefault(idx, now)
                    self._last_capped_sync.setdefault(idx, now)
                ready = [i for i, t in self._due.items() if t <= now]
                for i in ready:
                    del self._due[i]
                    self._first.pop(i, None)
                    if i in self._capped:
                        self._last_capped_sync[i] = now
                if not ready:
                    wait = min(self._due.values(), default=now + 1.0) - now
                    self._cond.wait(timeout=max(0.01, min(wait, 1.0)))
                    continue
                batch = self._take(ready)
            for a, changed in batch:
                self._fire(a, changed)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> "Watcher":
        for idx in range(len(self.agents)):
            self._watch_agent(idx)
        self._events_thread = threading.Thread(target=self._handler.run, name="memindex-watch-events", daemon=True)
        self._events_thread.start()
        self.observer.start()
        self._thread = threading.Thread(target=self._loop, name="memindex-watch-debounce", daemon=True)
        self._thread.start()
        log.info("watcher: %d agent(s), %d directories watched", len(self.agents), len(self._watches))
        return self

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.observer.stop()
            self.observer.join(timeout=5)
        except RuntimeError:  # never started
            pass
        if self._events_thread is not None:
            self._handler.events.put(None)
            self._events_thread.join(timeout=5)

    def flush(self) -> None:
        """Fire every pending debounce now (used on shutdown and in tests)."""
        with self._cond:
            batch = self._take(list(self._due))
            self._due.clear()
            self._first.clear()
        for a, changed in batch:
            self._fire(a, changed)


def watch_agents(contexts: Iterable[Context], **kw: Any) -> Watcher:
    """Build and start a watcher for these agents (settings resolved from their config)."""
    pairs = []
    for ctx in contexts:
        settings = settings_for(ctx)
        if not settings.enabled or not settings.memory_search.sync.watch:
            log.info("watcher: %s not watched (memory search or sync.watch disabled)", ctx.agent_id)
            continue
        pairs.append((ctx, settings))
    return Watcher(pairs, **kw).start()


class ConfigReload:
    """Poll the config (and ``.env``) of ``probe``; on a change, re-resolve the agents and apply them.

    ``resolve`` returns the contexts to watch now (``--all``: every configured agent);
    ``apply`` gets them (the watch command hands them to ``Watcher.reconfigure`` and the
    interval sync). A config that fails to load is logged and the old agents stay watched.
    """

    def __init__(self, probe: Context, resolve: Callable[[], list[Context]],
                 apply: Callable[[list[Context]], object], *, every_s: float = CONFIG_POLL_S) -> None:
        self.probe, self.resolve, self.apply, self.every_s = probe, resolve, apply, every_s
        self._seen = self._stamp()
        self._failed: tuple[object, str] | None = None  # (stamp, error) of the last config that failed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reloads = 0

    def _stamp(self) -> tuple[object, ...]:
        return config_stamp(self.probe)

    def check(self) -> bool:
        """Reload if the config changed since the last check; True when it did."""
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        try:
            contexts = self.resolve()
            # Every agent's settings too, before anything is applied: a bad per-agent value
            # (maxResults "1") failed inside apply, as a traceback after "config changed".
            for ctx in contexts:
                settings_for(ctx)
        except Exception as exc:  # noqa: BLE001 - a half-written or broken config: keep what runs
            # Said once per version of the file and reason (each 2 s poll retries it quietly).
            failed = (stamp, str(exc))
            (log.debug if failed == self._failed else log.warning)(
                "watcher: config changed but cannot be loaded (%s); still watching the previous agents", exc)
            self._failed = failed
            return False  # _seen unchanged: retried at the next poll (the editor may still be writing)
        self._seen, self._failed = stamp, None
        log.info("watcher: config changed; agents now %s", ", ".join(c.agent_id or "default" for c in contexts))
        self.apply(contexts)
        self.reloads += 1
        return True

    def start(self) -> "ConfigReload":
        self._thread = threading.Thread(target=self._run, name="memindex-config-reload", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the poller must outlive any one bad reload
                log.exception("watcher: config reload failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
