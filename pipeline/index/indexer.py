"""Planning a sync: which files need (re)indexing, which deletes, which transcript deltas.

The queue layer (``workers/``) calls these; they know nothing of queues.
A sync compares disk against the store by (size, mtime) first, so a sync
that finds nothing to do reads no file contents, and one whose store and disk
listing match the no-change mark (at the end of this module) reads no file rows either.
Preparing the planned files is ``preparers.prepare_file``.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import marshal
import os
import stat
import threading
from contextlib import contextmanager
from operator import itemgetter
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.fingerprint import KEYWORD_ONLY, EmbeddingIdentity, dumps, index_fingerprint, same_index
from memindex.pipeline.index.media import extra_kind_for
from memindex.pipeline.store.schema import FileKey
from memindex.pipeline.index.records import FileJob, SessionDelta
from memindex.pipeline.index.session_text import TEXT_VERSION
from memindex.pipeline.index.workspace import (
    MEMORY_DIR, ListingFacts, MemoryFile, check_roots, indexed_path_filter, iter_discover, rel_path,
    resolve_extra_paths,
)
from memindex.pipeline.errors import StoreCorrupt
from memindex.pipeline.store.health import check_writable, confirmed_damage, disk_full, quarantine, store_full
from memindex.pipeline.store.reader import StoreReader, StoreState, open_reader

log = logging.getLogger("memindex.sync")


@dataclass
class SyncPlan:
    generation: int
    fingerprint: dict[str, Any]
    role: str  # "live" (update in place) or "building" (rebuild beside the live index)
    jobs: list[FileJob] = field(default_factory=list)
    deletes: list[FileKey] = field(default_factory=list)
    unchanged: int = 0
    pending_sessions: int = 0  # of the unchanged: transcripts grown below the delta thresholds
    unreadable: int = 0  # of the unchanged: recorded unreadable and still so (each plan looks again)
    retry_keys: set[FileKey] = field(default_factory=set)  # of the jobs: files unchanged on disk, planned again for their vectors
    session_deltas: list[SessionDelta] = field(default_factory=list)  # append only
    # Nothing to index, yet the search's reference texts are to be sent alone (set by the sync's
    # sender: search/reference.offer_reference, which this layer does not import).
    send_reference: bool = False

    @property
    def has_work(self) -> bool:
        """Anything to index or delete (else only the writer's plan is sent)."""
        return bool(self.jobs or self.deletes or self.session_deltas)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a plan is built.

    A plan of 30,000 files allocates ~100,000 tuples that form no cycles; every few
    hundred of them the collector would walk all live objects (a fifth of a no-change sync).
    The switch is process-wide: other threads only see collection deferred for the plan's
    duration, and a caller that had it off finds it off afterwards.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def plan_sync(
    settings: AgentSettings,
    reader: StoreReader,
    ident: EmbeddingIdentity = KEYWORD_ONLY,
    *,
    files: Sequence[MemoryFile] | None = None,
    force: bool = False,
    facts: ListingFacts | None = None,
) -> SyncPlan:
    """Decide the target generation and which files need work.

    Raises ``WorkspaceError`` (workspace missing or not a directory) before
    reading the store: a plan from an empty listing would delete every file.
    ``facts``: what the listing of ``files`` noticed (its unreadable directories).
    """
    with _gc_paused():
        return _plan_sync(settings, reader, ident, files=files, force=force, facts=facts or ListingFacts())


def _plan_sync(settings: AgentSettings, reader: StoreReader, ident: EmbeddingIdentity, *,
               files: Sequence[MemoryFile] | None, force: bool, facts: ListingFacts) -> SyncPlan:
    if files is None and "memory" in settings.sources:
        check_roots(settings)
    fp = index_fingerprint(settings, ident)
    st = reader.state()
    if st.live_generation is None:
        gen, role = 1, "live"
    elif (st.building_generation is not None and same_index(st.live_fingerprint, fp)
          and same_index(st.building_fingerprint, fp) and not force):
        # A rebuild of the live index as it is (`index --force`) under way: continued. Planned live,
        # it was abandoned by the next ordinary sync (a `watch` tick, a search's sync) without a word.
        gen, role = st.building_generation, "building"
    elif same_index(st.live_fingerprint, fp) and not force:
        gen, role = st.live_generation, "live"
        if st.live_fingerprint and "vectorDims" in st.live_fingerprint and "vectorDims" not in fp:
            fp["vectorDims"] = st.live_fingerprint["vectorDims"]
    elif st.building_generation is not None and same_index(st.building_fingerprint, fp) and not force:
        gen, role = st.building_generation, "building"
    else:
        gen = max(st.live_generation, st.building_generation or 0) + 1
        role = "building"
    indexed = reader.indexed_files(gen)
    on_disk = files if files is not None else iter_collect_files(settings, facts)  # streamed, not listed
    plan = SyncPlan(gen, fp, role)
    seen: set[FileKey] = set()
    for f in on_disk:
        key = (f.source, f.path)
        seen.add(key)
        prev = indexed.get(key)
        if f.source == "sessions" and prev is not None and not force:
            from memindex.pipeline.index.sessions import next_step  # lazy: transcripts only

            # Growth below the delta thresholds is left to accumulate (the
            # session-delta detector owns it); past them only the new part is indexed.
            step = next_step(settings, f, prev)
            if step in ("unchanged", "pending"):
                plan.unchanged += 1
                plan.pending_sessions += step == "pending"
                continue
            if not isinstance(step, str):  # a delta: only the new part is indexed
                plan.session_deltas.append(step)
                continue
            prev = None
        retry_vectors = prev is not None and prev.vectors_pending and ident.provider != KEYWORD_ONLY.provider
        if (prev is not None and prev.size == f.size and prev.mtime_ns == f.mtime_ns and not force
                and not retry_vectors):
            if not prev.unreadable:
                plan.unchanged += 1
                continue
            # Recorded unreadable: a chmod that fixes it changes neither size nor mtime, and the
            # file stayed unindexed (status still "Permission denied") until it changed or --force.
            if not os.access(f.abs_path, os.R_OK):
                plan.unchanged += 1
                plan.unreadable += 1
                continue
        # A file still waiting for its vectors is re-read, not touched: same bytes, new work.
        # (Not one whose vectors are on their way: another plan queued it, and its lease says so.)
        if (prev is not None and retry_vectors and prev.size == f.size
                and prev.mtime_ns == f.mtime_ns and not force and not prev.vectors_queued):
            plan.retry_keys.add(key)
        plan.jobs.append(FileJob(f.source, f.path, str(f.abs_path), f.size, f.mtime_ns, f.kind,
                                 prev.hash if prev and not retry_vectors else None))
    # A directory the walk could not read has not lost its files: what was indexed from it stays.
    hidden = tuple(rel_path(settings.workspace, Path(d)) + "/" for d, _ in facts.unreadable)
    plan.deletes = [k for k in indexed if k not in seen and not (k[0] == "memory" and k[1].startswith(hidden))]
    return plan



# Below this much free space on the store's disk not even a sync's first write fits: a plan with
# files to write is refused before anything is embedded.
WRITE_ROOM_BYTES = 256 << 10


def plan_agent(settings: AgentSettings, ident: EmbeddingIdentity = KEYWORD_ONLY, *,
               force: bool = False) -> tuple[SyncPlan, bool]:
    """(plan, nothing-to-do) for one agent, reading the store through its own reader.

    Nothing to do means no file work, no rebuild, nothing left pending and the
    live fingerprint unchanged: then a sync need not touch the writer at all (a no-change
    sync still lists the disk: one lstat per file, compared with the last listing's digest:
    the no-change mark, at the end of this module).
    """
    check_writable(settings.store_path, settings.store_setting)
    reader = open_reader(settings)
    try:
        try:
            plan, noop = _plan_agent(settings, reader, ident, force)
        except StoreCorrupt as exc:
            reader.close()
            if confirmed_damage(settings.store_path) is None:
                # The file checks out on a fresh connection: the read was this connection's (a
                # lock lost to another SQLite library's close). Planned again; never moved aside.
                log.warning("%s; but the file checks out (quick_check ok): not moved, planning again", exc)
            else:
                # The Markdown is the source of truth: a damaged store is moved aside and rebuilt.
                log.warning("%s", exc)
                quarantine(settings.store_path)
            plan, noop = _plan_agent(settings, reader, ident, force)
    finally:
        reader.close()
    if not noop and (plan.jobs or plan.session_deltas) and disk_full(settings.store_path, WRITE_ROOM_BYTES):
        # Every file would be embedded (minutes of a local model, or a paid API's tokens, the
        # cache included) and then fail to be written, again at each retry: said before any of it.
        raise store_full(settings.store_path)
    return plan, noop


def _plan_agent(settings: AgentSettings, reader: StoreReader, ident: EmbeddingIdentity,
                force: bool) -> tuple[SyncPlan, bool]:
    st = reader.state()
    key = None if force else store_key(settings, ident, st)
    files: list[MemoryFile] | None = None
    disk = ""
    if key is not None:
        # The store can vouch for its rows: list the disk once, and if neither side moved since
        # a plan that found nothing to do, this one finds nothing either (the no-change mark, below).
        if "memory" in settings.sources:
            check_roots(settings)
        mark = read_mark(settings.store_path)
        facts = ListingFacts()
        with _gc_paused():
            files = list(iter_collect_files(settings, facts))
        disk = disk_key(files)
        if _unchanged(mark, key, disk, reader, st):
            return _nothing_to_do(st, len(files), mark), True
    plan = plan_sync(settings, reader, ident, files=files, force=force, facts=facts if files is not None else None)
    st = reader.state()
    noop = (not plan.has_work and plan.role == "live"
            and st.live_fingerprint is not None and reader.pending_count(plan.generation) == 0
            and dumps(st.live_fingerprint) == dumps(plan.fingerprint))
    if noop and files is not None and key is not None and not plan.unreadable:
        write_mark(settings.store_path, key, disk, len(files), plan.pending_sessions)
    return plan, noop


def _unchanged(mark: dict[str, Any] | None, key: str, disk: str, reader: StoreReader, st: StoreState) -> bool:
    return (mark is not None and mark.get("store") == key and mark.get("disk") == disk
            and reader.pending_count(st.live_generation) == 0)


def _nothing_to_do(st: StoreState, files: int, mark: dict[str, Any] | None) -> SyncPlan:
    assert st.live_generation is not None and st.live_fingerprint is not None  # store_key checked
    pending = mark.get("pendingSessions", 0) if mark else 0
    return SyncPlan(st.live_generation, dict(st.live_fingerprint), "live", unchanged=files,
                    pending_sessions=pending if isinstance(pending, int) else 0)


def collect_files(settings: AgentSettings) -> list[MemoryFile]:
    """Every file the agent's configured sources contribute."""
    return list(iter_collect_files(settings))


def iter_collect_files(settings: AgentSettings, facts: ListingFacts | None = None) -> Iterator[MemoryFile]:
    """``collect_files`` as a stream (what a sync of a huge workspace uses)."""
    if "memory" in settings.sources:
        # + media under extraPaths (F17): only there, so with no extraPaths there is no media to look for
        media = extra_kind_for(settings) if settings.memory_search.extra_paths else None
        yield from iter_discover(settings, extra_kind=media, facts=facts)
    if "sessions" in settings.sources:
        from memindex.pipeline.index.sessions import discover_sessions  # lazy: an opt-in source

        yield from discover_sessions(settings, facts)


def still_on_disk(settings: AgentSettings, key: FileKey,
                  visible: Callable[[str, str], bool] | None = None) -> bool:
    """Is this indexed path still a file the walk lists: under a root configured now, a regular
    file (no symlink) reached through no symlinked directory below that root? Deletes are
    applied only if not. ``visible`` is ``indexed_path_filter(settings)``, made once per batch.

    A ``memory/`` (or a folder in it) moved behind a symlink stops being listed, as OpenClaw's
    walk does; checking the leaf alone followed the symlinked folder, so every such delete was
    announced ("removed 1", "40002 to delete") and dropped, and the old text stayed searchable.
    So did every file of an extraPaths entry removed from the config (OpenClaw deletes each row
    its walk did not see): it is still on disk, but no longer the agent's memory."""
    source, path = key
    if not (visible or indexed_path_filter(settings))(source, path):
        return False
    base = settings.sessions_dir.parent if source == "sessions" else settings.workspace
    candidate = Path(os.path.normpath(base / path))
    try:
        for folder in _folders_below_root(settings, source, candidate):
            if stat.S_ISLNK(os.lstat(folder).st_mode):
                return False
        st = os.lstat(candidate)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:  # cannot look (a directory without permission): not known to be gone, keep it
        return True
    return stat.S_ISREG(st.st_mode)


def _folders_below_root(settings: AgentSettings, source: str, candidate: Path) -> list[Path]:
    """The directories between ``candidate`` and the configured root it lies under, that root
    included when the walk refuses it as a symlink (``memory/``, an extraPaths entry, the agent's
    directory above its sessions; not the workspace itself, which may be one). None for a path under no root."""
    ws = Path(os.path.normpath(settings.workspace))
    if source == "sessions":
        # From agents/<id> down, as discover_sessions refuses (symlink_on_the_way): rows listed before
        # agents/<id> became a symlink are deleted, not kept because the link still reaches a file.
        roots = [(Path(os.path.normpath(settings.sessions_dir.parent)), True)]
    else:
        roots = [(Path(os.path.normpath(ws / MEMORY_DIR)), True)]
        roots += [(Path(os.path.normpath(e)), True) for e in resolve_extra_paths(settings)]
        roots.append((ws, False))
    under = [(r, own) for r, own in roots if r == candidate or r in candidate.parents]
    if not under:
        return []
    root, own = max(under, key=lambda item: len(item[0].parts))
    folders = [p for p in candidate.parents if p == root or root in p.parents]
    return [p for p in folders if own or p != root]


# --- the no-change mark --------------------------------------------------------------------------
#
# The no-change mark: how a sync knows that nothing changed without reading every file row.
#
# A sync plan is a pure function of the resolved settings, the embedding identity, the store
# (its generations, fingerprints and file rows) and the files on disk. When a plan finds nothing
# to do, the planner writes a small mark beside the store recording a digest of each of those
# inputs. The next plan walks the disk as always, and if every digest still matches it is the
# same plan again: nothing to do, decided without reading the store's file rows or comparing
# them one by one (at 30,000 files, two thirds of a no-change sync).
#
# The store side of the key is cheap because the store keeps a version of each generation's
# file rows: triggers bump it on every insert, update and delete (store/schema.py), so no write
# path can change a row and leave the version alone. With the store's random id (a store deleted
# and rebuilt is another store) and the live generation and fingerprint, equal versions mean the
# rows a previous plan compared. A store written before the triggers existed has no version and
# simply never takes this path. The mark is a cache: a missing, unreadable or stale one only
# costs the full comparison, and ``index --force`` never reads it.

# Bumped whenever what the key covers changes: an old mark then never matches.
MARK_VERSION = 1


def mark_path(store_path: Path) -> Path:
    return Path(f"{store_path}.unchanged")


def store_key(settings: AgentSettings, ident: EmbeddingIdentity, st: StoreState) -> str | None:
    """Digest of everything but the disk listing, or None when the store cannot vouch for its rows.

    The index fingerprint carries the embedding identity (provider, model, endpoint, dims)."""
    if st.live_generation is None or st.building_generation is not None:
        return None
    version, store_id = st.live_files_version, st.store_id
    if version is None or store_id is None:
        return None
    # TEXT_VERSION: rows cleaned under older transcript text rules are re-planned (sessions.stale_text);
    # a mark made before it changed vouched for them.
    parts = [MARK_VERSION, settings.digest(), dumps(index_fingerprint(settings, ident)), dumps(st.live_fingerprint),
             st.live_generation, store_id, version, TEXT_VERSION]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


def disk_key(files: Sequence[MemoryFile]) -> str:
    """Digest of a disk listing: what the plan compares (path, size, mtime) and what it records (source,
    kind). The absolute path follows from the path and the settings' roots, which the store key covers.

    Column by column with C iterators: at 30,000 files a per-file tuple pass cost a quarter of the walk itself.
    """
    h = hashlib.sha256("\0".join(map(_column("path"), files)).encode("utf-8", "surrogateescape"))
    for field in ("size", "mtime_ns", "source", "kind"):
        h.update(marshal.dumps(list(map(_column(field), files))))
    return h.hexdigest()


def _column(field: str) -> itemgetter[int]:
    return itemgetter(MemoryFile._fields.index(field))  # by index: a NamedTuple's attribute is a slower property


def read_mark(store_path: Path) -> dict[str, Any] | None:
    try:
        mark = json.loads(mark_path(store_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) else None


def write_mark(store_path: Path, store: str, disk: str, count: int, pending_sessions: int = 0) -> None:
    """Record an unchanged listing (best effort: a mark that cannot be written is only a cache miss).
    ``pending_sessions``: transcripts below the delta thresholds, which the next no-op plan reports."""
    _store_mark(store_path, {"store": store, "disk": disk, "files": count,
                             **({"pendingSessions": pending_sessions} if pending_sessions else {})})


def note_reference_checked(store_path: Path) -> None:
    """Record in the current mark that a sync with nothing to do looked for the search's reference
    texts, and sent them if they were missing (``search/reference.offer_reference``): the next
    no-change plans of this same store state neither look again nor send them again, whether that
    embedding worked or the provider failed (a failing provider would otherwise hold every
    no-change sync for its retries). A new mark, after any change, has no such note."""
    mark = read_mark(store_path)
    if mark is not None:
        _store_mark(store_path, {**mark, "referenceChecked": True})


def _store_mark(store_path: Path, mark: dict[str, Any]) -> None:
    path = mark_path(store_path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")  # per writer thread
    try:
        tmp.write_text(json.dumps(mark), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
