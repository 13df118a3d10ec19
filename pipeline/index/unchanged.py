"""The no-change mark: how a sync knows that nothing changed without reading every file row.

A sync plan is a pure function of the resolved settings, the embedding identity, the store
(its generations, fingerprints and file rows) and the files on disk. When a plan finds nothing
to do, the planner writes a small mark beside the store recording a digest of each of those
inputs. The next plan walks the disk as always, and if every digest still matches it is the
same plan again: nothing to do, decided without reading the store's file rows or comparing
them one by one (at 30,000 files, two thirds of a no-change sync).

The store side of the key is cheap because the store keeps a version of each generation's
file rows: triggers bump it on every insert, update and delete (store/schema.py), so no write
path can change a row and leave the version alone. With the store's random id (a store deleted
and rebuilt is another store) and the live generation and fingerprint, equal versions mean the
rows a previous plan compared. A store written before the triggers existed has no version and
simply never takes this path. The mark is a cache: a missing, unreadable or stale one only
costs the full comparison, and ``index --force`` never reads it.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import threading
from operator import itemgetter
from pathlib import Path
from typing import Any, Sequence

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.fingerprint import EmbeddingIdentity, dumps, index_fingerprint
from memindex.pipeline.index.session_text import TEXT_VERSION
from memindex.pipeline.index.workspace import MemoryFile
from memindex.pipeline.store.reader import StoreState

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


def read(store_path: Path) -> dict[str, Any] | None:
    try:
        mark = json.loads(mark_path(store_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) else None


def write(store_path: Path, store: str, disk: str, count: int, pending_sessions: int = 0) -> None:
    """Record an unchanged listing (best effort: a mark that cannot be written is only a cache miss).
    ``pending_sessions``: transcripts below the delta thresholds, which the next no-op plan reports."""
    _store(store_path, {"store": store, "disk": disk, "files": count,
                        **({"pendingSessions": pending_sessions} if pending_sessions else {})})


def note_reference_checked(store_path: Path) -> None:
    """Record in the current mark that a sync with nothing to do looked for the search's reference
    texts, and sent them if they were missing (``search/reference.offer_reference``): the next
    no-change plans of this same store state neither look again nor send them again, whether that
    embedding worked or the provider failed (a failing provider would otherwise hold every
    no-change sync for its retries). A new mark, after any change, has no such note."""
    mark = read(store_path)
    if mark is not None:
        _store(store_path, {**mark, "referenceChecked": True})


def _store(store_path: Path, mark: dict[str, Any]) -> None:
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
