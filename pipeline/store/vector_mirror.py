"""An in-memory float32 copy of one generation's vectors for brute-force KNN.

Why it exists: sqlite-vec's ``vec0`` KNN is a scalar scan (the PyPI build has
no SIMD; ``vec_debug()`` lists no build flags): ~0.42 us per 384-dim vector,
~42 ms of CPU per query at 100,000 chunks whatever the metric, chunk size or
int8/bit quantisation. numpy scans the same matrix in ~7 ms. Search
uses the mirror (a) as the in-process fallback when sqlite-vec is missing or
disabled (F6) and (b) with sqlite-vec for large generations, where ``vec0``
keeps answering until the mirror has loaded in the background. Both are
exact cosine, so the two paths rank alike.

Freshness. ``PRAGMA data_version`` changes when another connection commits,
but its values are per connection, so a snapshot cannot be stamped with one.
Instead every search reports its connection's version (:meth:`observe`); a
change bumps a shared epoch, and a snapshot is fresh for a thread when its
load *started* at or after the epoch of that thread's last observed change
(the load reads in its own transaction, begun after it took the epoch, so it
sees every commit observed before). Reloads are incremental: chunk ids are
content hashes, so only chunks with new ids are read.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from memindex.pipeline.store import db
from memindex.pipeline.store.schema import chunks_table

log = logging.getLogger("memindex.search")

FETCH_BATCH = 500
RETRY_AFTER_S = 30.0  # back-off after a failed background load


@dataclass(frozen=True)
class _Snapshot:
    gen: int
    dims: int
    rowids: Any  # np.ndarray[int64], row i of ``mat`` belongs to rowids[i]
    mat: Any  # np.ndarray[float32] (n, dims), rows L2-normalised
    pos: dict[str, int]  # chunk id -> row in ``mat``; -1 for chunks without a usable vector


class VectorMirror:
    """One store's mirror. Thread-safe; searches never wait for a background load."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._snap: _Snapshot | None = None
        self._epoch = 0  # bumped whenever a search sees a commit it had not seen
        self._snap_epoch = -1  # epoch taken when the current snapshot's load started
        self._seen = threading.local()
        self._loading = False
        self._failed_at = 0.0

    # -- freshness ----------------------------------------------------------------
    def observe(self, conn: db.Connection) -> None:
        """Record this thread's view of the store (call once per search, before :meth:`fresh`)."""
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        seen = self._seen
        # Holding the connection object (not its id) means a reopened store always counts as a change.
        if getattr(seen, "conn", None) is conn and seen.version == version:
            return
        with self._lock:
            self._epoch += 1
            seen.conn, seen.version, seen.epoch = conn, version, self._epoch

    def fresh(self, gen: int, dims: int) -> _Snapshot | None:
        """The snapshot, if it is of ``gen`` and holds every commit this thread has observed."""
        with self._lock:
            snap, snap_epoch = self._snap, self._snap_epoch
        if snap is None or snap.gen != gen or snap.dims != dims:
            return None
        return snap if snap_epoch >= getattr(self._seen, "epoch", 1 << 62) else None

    # -- loading ------------------------------------------------------------------
    def load(self, gen: int, dims: int) -> _Snapshot:
        """(Re)load now, in this thread; returns the new snapshot."""
        with self._lock:
            start_epoch = self._epoch
            prev = self._snap
        if prev is not None and (prev.gen, prev.dims) != (gen, dims):
            prev = None
        conn = db.connect(self.path, readonly=True)
        try:
            conn.execute("BEGIN")  # one read snapshot for the id listing and the blob reads
            snap = build_snapshot(conn, gen, dims, prev)
            conn.execute("COMMIT")
        finally:
            conn.close()
        with self._lock:
            if start_epoch >= self._snap_epoch:
                self._snap, self._snap_epoch = snap, start_epoch
        return snap

    def load_in_background(self, gen: int, dims: int) -> None:
        with self._lock:
            if self._loading or time.monotonic() - self._failed_at < RETRY_AFTER_S:
                return
            self._loading = True
        threading.Thread(target=self._bg_load, args=(gen, dims), name="memindex-vector-mirror", daemon=True).start()

    def _bg_load(self, gen: int, dims: int) -> None:
        try:
            t0 = time.perf_counter()
            snap = self.load(gen, dims)
            log.debug("vector mirror of %s generation %d: %d vectors in %.2fs", self.path, gen,
                      0 if snap is None else len(snap.rowids), time.perf_counter() - t0)
        except Exception as exc:  # noqa: BLE001 - vec0 keeps answering; try again later
            log.warning("could not load the in-memory vector mirror of %s: %s", self.path, exc)
            with self._lock:
                self._failed_at = time.monotonic()
        finally:
            with self._lock:
                self._loading = False

    def drop(self) -> None:
        with self._lock:
            self._snap, self._snap_epoch = None, -1


def knn(snap: _Snapshot, qvec: Sequence[float], k: int) -> list[tuple[int, float]]:
    """Top-``k`` (rowid, cosine) of the snapshot, best first."""
    import numpy as np

    n = len(snap.rowids)
    if n == 0 or k <= 0:
        return []
    q = np.asarray(qvec, dtype=np.float32)
    norm = float(np.linalg.norm(q))
    if norm == 0:
        return []
    # einsum: numpy's own single-threaded SIMD loop. The scan is memory-bound, and BLAS's
    # worker threads only add spinning (2x the CPU, slower under load on 2 cores).
    sims = np.einsum("ij,j->i", snap.mat, q / norm)
    k = min(k, n)
    top = np.argpartition(sims, n - k)[n - k:] if k < n else np.arange(n)
    top = top[np.lexsort((snap.rowids[top], -sims[top]))]  # score desc, then rowid: deterministic
    return [(int(snap.rowids[i]), float(sims[i])) for i in top]


def build_snapshot(conn: db.Connection, gen: int, dims: int, prev: _Snapshot | None = None) -> _Snapshot:
    """A snapshot of generation ``gen``, reusing ``prev``'s rows for chunk ids it already has."""
    import numpy as np

    ct = chunks_table(gen)
    listing = conn.execute(f"SELECT id, rowid FROM {ct}").fetchall()  # covering index on id: no blob reads
    old_pos = prev.pos if prev is not None else {}
    keep_rows: list[int] = []  # rows of prev.mat to carry over
    keep_rowids: list[int] = []
    pos: dict[str, int] = {}
    fetch: dict[int, str] = {}  # rowid -> chunk id, for chunks not in prev
    for cid, rowid in listing:
        p = old_pos.get(cid)
        if p is None:
            fetch[rowid] = cid
        elif p < 0:
            pos[cid] = -1  # known to have no usable vector
        else:
            pos[cid] = len(keep_rows)
            keep_rows.append(p)
            keep_rowids.append(rowid)

    total = len(keep_rows) + len(fetch)
    mat = np.empty((total, dims), dtype=np.float32)
    rowids = np.empty(total, dtype=np.int64)
    n = len(keep_rows)
    if prev is not None and n:  # take() into the new buffer: no temporary copy of the old matrix
        np.take(prev.mat, np.asarray(keep_rows, dtype=np.int64), axis=0, out=mat[:n])
        rowids[:n] = keep_rowids
    want = dims * 4
    ids = sorted(fetch)  # rowid order: sequential table pages
    for i in range(0, len(ids), FETCH_BATCH):
        part = ids[i : i + FETCH_BATCH]
        marks = ",".join("?" * len(part))
        for rowid, blob in conn.execute(f"SELECT rowid, embedding FROM {ct} WHERE rowid IN ({marks})", part):
            cid = fetch[rowid]
            if blob is None or len(blob) != want:
                pos[cid] = -1
                continue
            mat[n] = np.frombuffer(blob, dtype="<f4")
            rowids[n] = rowid
            pos[cid] = n
            n += 1
    mat, rowids = mat[:n], rowids[:n]
    fresh = mat[len(keep_rows):]
    if len(fresh):
        norms = np.sqrt(np.einsum("ij,ij->i", fresh, fresh))  # linalg.norm would square a full-size copy
        norms[norms == 0] = 1.0
        fresh /= norms[:, None]
    return _Snapshot(gen, dims, rowids, mat, pos)
