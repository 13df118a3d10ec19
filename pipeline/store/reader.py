"""Read-only access to a store (F6): searches, planning and ``status`` read while the writer writes (WAL).

Also what a store holds as both sides read it: its state (``StoreState``: the live generation and
any rebuild, from ``meta``) and its indexed files (``IndexedFile``). ``writer.StoreWriter`` reads
its own state with the same ``read_state``."""

from __future__ import annotations

import json
import logging
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from memindex.pipeline.store import db, health, terms
from memindex.pipeline.store.fts_budget import FtsBudget
from memindex.pipeline.store.health import (
    corrupt,
    is_corruption,
    store_problem,
    unreadable,
)
from memindex.pipeline.store.schema import (
    BUILDING_KEY,
    EMBED_PENDING,
    LAST_PLAN_KEY,
    META_KEY,
    STORE_ID_KEY,
    UNREADABLE_SQL,
    VECTORS_PENDING_SQL,
    VECTORS_QUEUED,
    VECTORS_QUEUED_SQL,
    FileKey,
    chunks_table,
    files_table,
    files_version_key,
    fts_table,
    pending_table,
    vec_table,
)
from memindex.pipeline.store.vector_mirror import VectorMirror, build_snapshot, knn
from memindex.pipeline.store.vectors import pack, unpack

log = logging.getLogger("memindex.store")
_MIN_ROWID = -(1 << 63)


# A chunk as search reads it: (rowid, chunk id, path, source, start_line, end_line, text, kind).
ChunkRow = tuple[int, str, str, str, int, int, str, str]


class IndexedFile(NamedTuple):
    """One indexed file's row, with what its codes say decoded as it is read (schema.py's
    ``*_SQL``), so a plan asks the row rather than decoding its error and hash again. A tuple: a
    sync of a huge workspace builds one per file (30,000 of them on every no-change resync), and
    a tuple is built in C. Only ``read_indexed_files`` builds them. The flags are SQLite's 0 or 1."""

    hash: str
    size: int
    mtime_ns: int
    error: str | None
    extra: str | None  # raw JSON (e.g. a session transcript's delta state)
    vectors_pending: bool  # stored keyword-only, its vectors still to come (error ``EMBED_PENDING``...)
    vectors_queued: bool  # of those, written text-first with its vectors already queued (``VECTORS_QUEUED``)
    unreadable: bool  # recorded unreadable (hash ``READ_ERROR`` and an errno): each plan checks it again


@dataclass
class StoreState:
    """What a reader sees: the live generation and any rebuild in progress."""

    live_generation: int | None
    live_fingerprint: dict[str, Any] | None
    building_generation: int | None = None
    building_fingerprint: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def last_plan_ns(self) -> int:
        """When the last plan the writer applied was made (0: none recorded)."""
        return int(self.extra.get(LAST_PLAN_KEY) or 0)

    @property
    def store_id(self) -> str | None:
        """The random id the store was given when it was created: a store deleted and rebuilt is another."""
        return self.extra.get(STORE_ID_KEY)

    @property
    def live_files_version(self) -> str | None:
        """The live generation's file-row version (its triggers count every write of a row,
        ``schema.files_version_ddl``); None without a live generation, or for one built before
        the count existed."""
        return None if self.live_generation is None else self.extra.get(files_version_key(self.live_generation))


def read_state(conn: db.Connection) -> StoreState:
    try:
        rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except db.OperationalError:
        return StoreState(None, None)
    except db.DatabaseError as exc:
        raise corrupt(db.conn_path(conn), exc) from None
    live = json.loads(rows[META_KEY]) if META_KEY in rows else None
    building = json.loads(rows[BUILDING_KEY]) if BUILDING_KEY in rows else None
    extra = {k: v for k, v in rows.items() if k not in (META_KEY, BUILDING_KEY)}
    return StoreState(
        live_generation=live["generation"] if live else None,
        live_fingerprint=live["fingerprint"] if live else None,
        building_generation=building["generation"] if building else None,
        building_fingerprint=building["fingerprint"] if building else None,
        extra=extra,
    )


def read_indexed_files(conn: db.Connection, gen: int) -> dict[FileKey, IndexedFile]:
    table = files_table(gen)
    if not db.table_exists(conn, table):
        return {}
    rows = conn.execute(f"SELECT source, path, hash, size, mtime_ns, error, extra, {VECTORS_PENDING_SQL}, "
                        f"{VECTORS_QUEUED_SQL}, {UNREADABLE_SQL} FROM {table}").fetchall()
    if not rows:
        return {}
    # Built column-wise by C iterators (no Python code per row): a no-change sync of 30,000
    # files reads all of them, and a per-row comprehension took twice as long.
    cols = list(zip(*rows))
    return dict(zip(zip(cols[0], cols[1]), map(tuple.__new__, repeat(IndexedFile), zip(*cols[2:]))))


class StoreReader:
    """Read-only access to a store; one connection per thread, reopened if the file changes."""

    def __init__(self, path: Path, *, vector_enabled: bool = True, extension_path: str | None = None,
                 setting: str = "the store path"):
        self.path = Path(path)
        self.setting = setting  # what sets the path, for messages (db.connect)
        self.vector_enabled = vector_enabled
        self.extension_path = extension_path
        self._local = threading.local()
        self.vector_error: str | None = None if vector_enabled else "disabled by config"

    def exists(self) -> bool:
        return self.path.exists()

    def conn(self) -> db.Connection | None:
        """A per-thread read-only connection (None while the store does not exist)."""
        try:
            ino = os.stat(self.path).st_ino
        except OSError:
            return None
        c: db.Connection | None = getattr(self._local, "conn", None)
        if c is not None and getattr(self._local, "ino", None) == ino:
            return c
        if c is not None:
            c.close()
            self._local.conn = None
        try:
            # (its PRAGMAs may already read a damaged file)
            c = db.connect(self.path, readonly=True, setting=self.setting)
        except db.DatabaseError as exc:
            if is_corruption(exc):
                raise corrupt(self.path, exc) from None
            raise unreadable(self.path, exc) from None
        damage = store_problem(c, self.path)
        if damage:
            c.close()
            raise corrupt(self.path, damage)
        if self.vector_enabled:
            self.vector_error = db.load_vector_extension(c, self.extension_path)
        self._local.conn, self._local.ino = c, ino
        return c

    def state(self) -> StoreState:
        c = self.conn()
        return read_state(c) if c is not None else StoreState(None, None)

    def indexed_files(self, gen: int) -> dict[FileKey, IndexedFile]:
        c = self.conn()
        try:
            return read_indexed_files(c, gen) if c is not None else {}
        except db.DatabaseError as exc:
            if is_corruption(exc):
                raise corrupt(self.path, exc) from None
            raise

    def check_invariant(self) -> dict[str, Any]:
        """The store invariant (``status --deep``): ``{"ok": bool, "problems": [...]}``.

        ``integrity_check`` passes; in the live and building generations every chunk
        belongs to a files row, every chunk has its FTS row and no FTS or vector row
        lacks its chunk, and each files row counts its chunks; every cached embedding
        is as long as its dims say.
        """
        c = self.conn()
        if c is None:
            return {"ok": True, "problems": []}
        problems: list[str] = []
        with self.snapshot():  # one read transaction: a concurrent write cannot fake an orphan
            try:
                rows = [r[0] for r in c.execute("PRAGMA integrity_check(20)")]
                if rows != ["ok"]:
                    problems.append("integrity_check: " + "; ".join(rows))
                st = read_state(c)
                for gen in sorted({g for g in (st.live_generation, st.building_generation) if g is not None}):
                    problems.extend(f"generation {gen}: {p}" for p in self._generation_problems(c, gen))
                bad = c.execute("SELECT count(*) FROM embedding_cache WHERE length(embedding) != dims * 4"
                                ).fetchone()[0] if db.table_exists(c, "embedding_cache") else 0
                if bad:
                    problems.append(f"{bad} cached embedding(s) whose length does not match their dims")
            except db.DatabaseError as exc:
                problems.append(f"unreadable: {exc}")
        return {"ok": not problems, "problems": problems}

    def _generation_problems(self, c: db.Connection, gen: int) -> list[str]:
        f, ct, ft, vt = files_table(gen), chunks_table(gen), fts_table(gen), vec_table(gen)
        if not (db.table_exists(c, f) and db.table_exists(c, ct)):
            return ["its tables are missing"]
        out: list[str] = []

        def count(sql: str, what: str) -> None:
            n = c.execute(sql).fetchone()[0]
            if n:
                out.append(f"{n} {what}")

        count(f"SELECT count(*) FROM {ct} WHERE NOT EXISTS (SELECT 1 FROM {f} "
              f"WHERE {f}.source = {ct}.source AND {f}.path = {ct}.path)", "chunk(s) of no indexed file")
        count(f"SELECT count(*) FROM {f} WHERE chunks != (SELECT count(*) FROM {ct} "
              f"WHERE {ct}.source = {f}.source AND {ct}.path = {f}.path)", "file(s) whose chunk count is wrong")
        if db.table_exists(c, ft):
            count(f"SELECT count(*) FROM {ft} WHERE rowid NOT IN (SELECT rowid FROM {ct})", "orphan FTS row(s)")
            count(f"SELECT count(*) FROM {ct} WHERE rowid NOT IN (SELECT rowid FROM {ft})", "chunk(s) without an FTS row")
            wrong = terms.count_problems(c, gen)
            if wrong:
                out.append(f"{wrong} term count(s) that differ from the FTS index")
        if self.vector_error is None and db.table_exists(c, vt):
            count(f"SELECT count(*) FROM {vt} WHERE rowid NOT IN (SELECT rowid FROM {ct})", "orphan vector row(s)")
        return out

    def pending_count(self, gen: int | None) -> int:
        """Files a sync announced for ``gen`` that are not written yet (0 if unknown)."""
        c = self.conn()
        if c is None or gen is None:
            return 0
        try:
            return db.count(c, f"SELECT count(*) FROM {pending_table(gen)}")
        except db.OperationalError:  # no such generation (yet)
            return 0

    def pending_paths(self, gen: int | None, limit: int = 1000) -> set[str]:
        """Paths of (at most ``limit``) files still pending in ``gen``."""
        c = self.conn()
        if c is None or gen is None:
            return set()
        try:
            return {r[0] for r in c.execute(f"SELECT path FROM {pending_table(gen)} LIMIT ?", (limit,))}
        except db.OperationalError:  # no such generation (yet)
            return set()

    def table_exists(self, name: str) -> bool:
        c = self.conn()
        return c is not None and db.table_exists(c, name)

    @contextmanager
    def snapshot(self) -> Iterator[ReadSnapshot]:
        """One read transaction: ``meta``'s live generation and that generation's rows, as of one instant.

        A rebuild that promotes a new generation drops the old one's tables; in WAL
        mode a read transaction keeps seeing the tables as they were when it began,
        so everything read through the snapshot agrees with the generation it names.
        Nested use in one thread shares the outer transaction. Keep it short: an open
        read transaction holds back WAL checkpoints.
        """
        c = self.conn()
        if c is None:
            yield ReadSnapshot(None, StoreState(None, None), self.vector_error)
            return
        if c.in_transaction:  # an outer snapshot in this thread already pins the view
            yield ReadSnapshot(c, read_state(c), self.vector_error)
            return
        c.execute("BEGIN")  # deferred: the read transaction starts at the first SELECT (meta)
        try:
            yield ReadSnapshot(c, read_state(c), self.vector_error)
        finally:
            try:
                c.execute("COMMIT")
            except db.Error:  # pragma: no cover - a read transaction has nothing to commit
                if c.in_transaction:
                    c.execute("ROLLBACK")

    def cached_embeddings(self, provider: str, model: str, provider_key: str, dims: int | None,
                          hashes: Sequence[str]) -> dict[str, list[float]]:
        """Embedding-cache hits: chunk hash -> vector, for one provider identity (any dims if None)."""
        c = self.conn()
        if c is None:
            return {}  # no store yet: nothing cached
        return {h: unpack(blob) for h, blob in _cache_rows(c, provider, model, provider_key, dims, hashes)}

    def close(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None


CACHE_LOOKUP_BATCH = 400  # chunk hashes per embedding-cache lookup


def _cache_rows(c: db.Connection, provider: Any, model: Any, provider_key: Any, dims: int | None,
                hashes: Sequence[str]) -> Iterator[tuple[str, bytes]]:
    """(hash, packed vector) of the embedding cache's rows for ``hashes`` under one provider
    identity, of size ``dims`` (any size if None); nothing before the cache table exists."""
    if not db.table_exists(c, "embedding_cache"):
        return
    unique = list(dict.fromkeys(hashes))
    for i in range(0, len(unique), CACHE_LOOKUP_BATCH):
        part = unique[i : i + CACHE_LOOKUP_BATCH]
        sql = ("SELECT hash, dims, embedding FROM embedding_cache WHERE provider = ? AND model = ? "
               f"AND provider_key = ? AND hash IN ({','.join('?' * len(part))})")
        for h, d, blob in c.execute(sql, [provider, model, provider_key, *part]):
            if dims is None or d == dims:
                yield h, blob
_search_log = logging.getLogger("memindex.search")


class ReadSnapshot:
    """What one read transaction sees; from ``StoreReader.snapshot()``, valid only inside its ``with``.

    ``generation`` is the live generation ``meta`` names in this snapshot (None: no
    store or no index yet); the methods read that generation's tables as of the
    same instant. Search and status read through it and write no SQL of their own.
    """

    __slots__ = ("_conn", "state", "generation", "vector_error")

    def __init__(self, conn: db.Connection | None, state: StoreState, vector_error: str | None) -> None:
        self._conn = conn
        self.state = state
        self.generation = state.live_generation
        self.vector_error = vector_error

    @property
    def fingerprint(self) -> dict[str, Any] | None:
        return self.state.live_fingerprint

    def table_exists(self, name: str) -> bool:
        return self._conn is not None and db.table_exists(self._conn, name)

    def pending_count(self) -> int:
        """Files a sync announced for the live generation that are not written yet."""
        if self._conn is None or self.generation is None:
            return 0
        try:
            return db.count(self._conn, f"SELECT count(*) FROM {pending_table(self.generation)}")
        except db.OperationalError:
            return 0

    def max_rowid(self) -> int:
        """An O(log n) upper bound of the live generation's chunk count."""
        if self._conn is None or self.generation is None:
            return 0
        return db.count(self._conn, f"SELECT max(rowid) FROM {chunks_table(self.generation)}")

    # -- search: candidate arms ------------------------------------------------------
    def keyword_hits(self, match: str, limit: int, budget: FtsBudget | None = None) -> list[tuple[int, float]]:
        """(chunk rowid, bm25) of the best FTS5 matches for a MATCH expression, best first.

        bm25() is negative, most relevant lowest. ``budget`` (an ``FtsBudget``) may drop a
        long OR query's most common phrases first, or for a query of only very common
        phrases rank the chunks holding all of them (or a sample of the newest of them);
        matches it cannot afford to rank come after the ranked ones, newest first, scored
        half the weakest ranked score (-1 and -0.5 when nothing was ranked). Empty when
        there is no FTS table.
        """
        c, gen = self._conn, self.generation
        if c is None or gen is None:
            return []
        ft = fts_table(gen)
        try:
            plan = budget.plan(c, gen, match) if budget is not None else None
            if plan is None or plan.ranked:
                # bm25() directly: ~40% cheaper than FTS5's `rank` column for the same order.
                hits = c.execute(f"SELECT rowid, bm25({ft}) AS score FROM {ft} WHERE {ft} MATCH ? "
                                 "ORDER BY score LIMIT ?", (plan.match if plan else match, limit)).fetchall()
            elif plan.sample:  # bm25 over the newest matches (newest rowids: the notes written last)
                if plan.rank_by:
                    sample = _sample_holding_every(c, ft, plan.rank_by, plan.match, max(plan.sample, limit))
                else:
                    sample = c.execute(f"SELECT rowid, bm25({ft}) FROM {ft} WHERE {ft} MATCH ? ORDER BY rowid DESC "
                                       "LIMIT ?", (plan.match, max(plan.sample, limit))).fetchall()
                hits = sorted(sample, key=lambda h: (h[1], -h[0]))[:limit]
            else:
                hits = [(r, -1.0) for (r,) in c.execute(f"SELECT rowid FROM {ft} WHERE {ft} MATCH ? "
                                                        "ORDER BY rowid DESC LIMIT ?", (plan.match, limit))]
            if plan is not None and plan.fill and len(hits) < limit:
                weakest = hits[-1][1] / 2 if hits else -0.5
                seen = {r for r, _ in hits}
                more = c.execute(f"SELECT rowid FROM {ft} WHERE {ft} MATCH ? ORDER BY rowid DESC LIMIT ?",
                                 (plan.fill, limit * 2))
                hits += [(r, weakest) for (r,) in more if r not in seen][: limit - len(hits)]
            return hits
        except db.OperationalError as exc:
            if "no such table" not in str(exc):
                _search_log.warning("keyword search failed: %s", exc)
            return []

    def vec0_available(self) -> bool:
        """sqlite-vec is loaded and the live generation has its vec0 table."""
        return (self.vector_error is None and self.generation is not None
                and self.table_exists(vec_table(self.generation)))

    def vec0_knn(self, qvec: Sequence[float], limit: int) -> list[tuple[int, float]] | None:
        """(chunk rowid, cosine) of sqlite-vec's ``limit`` nearest chunks; None when vec0 failed."""
        if self._conn is None or self.generation is None:
            return None
        try:
            return [(rid, 1.0 - dist) for rid, dist in self._conn.execute(
                f"SELECT rowid, distance FROM {vec_table(self.generation)} WHERE embedding MATCH ? AND k = ?",
                (pack(qvec), limit),
            )]
        except db.OperationalError as exc:
            _search_log.warning("sqlite-vec search failed (%s); using in-process cosine", exc)
            return None

    def observe(self, mirror: VectorMirror) -> None:
        """Tell ``mirror`` which commits this snapshot has seen (before ``mirror.fresh``)."""
        if self._conn is not None:
            mirror.observe(self._conn)

    def exact_knn(self, mirror: VectorMirror, qvec: Sequence[float], limit: int) -> list[tuple[int, float]]:
        """(chunk rowid, cosine) by brute force over ``mirror``, reloaded in this thread when stale.

        The mirror loads through its own connection; when a rebuild dropped this
        snapshot's generation meanwhile, the scan runs over this snapshot's rows instead.
        """
        gen, dims = self.generation, len(qvec)
        if gen is None:
            return []
        try:
            snap = mirror.fresh(gen, dims) or mirror.load(gen, dims)
        except (db.Error, ImportError) as exc:
            if self._conn is None or "no such table" not in str(exc):  # no numpy / unreadable store
                _search_log.warning("in-process vector search unavailable: %s", exc)
                return []
            try:
                snap = build_snapshot(self._conn, gen, dims)  # this search only; not kept
            except (db.Error, ImportError) as exc2:
                _search_log.warning("in-process vector search unavailable: %s", exc2)
                return []
        return knn(snap, qvec, limit)

    def chunk_count(self) -> int:
        """Chunks in the live generation (a full count: callers cache it per ``max_rowid``)."""
        if self._conn is None or self.generation is None:
            return 0
        return db.count(self._conn, f"SELECT count(*) FROM {chunks_table(self.generation)}")

    def term_counts(self, phrases: Sequence[str]) -> list[int]:
        """How many of the live generation's chunks hold each FTS5 phrase: the document frequencies
        keyword evidence weighs terms by. Zeros when there is no FTS table."""
        c, gen = self._conn, self.generation
        if c is None or gen is None:
            return [0] * len(phrases)
        ft = fts_table(gen)
        try:
            # The writer's counts (one lookup each, store/terms.py); a MATCH count (a walk of the
            # phrase's posting lists) for a phrase of several tokens or an older generation.
            counts = terms.phrase_counts(c, gen, phrases)
            return [n if n is not None else c.execute(f"SELECT count(*) FROM {ft} WHERE {ft} MATCH ?", (p,)).fetchone()[0]
                    for p, n in zip(phrases, counts)]
        except db.OperationalError as exc:
            if "no such table" not in str(exc):
                _search_log.warning("keyword statistics failed: %s", exc)
            return [0] * len(phrases)

    def sample_vectors(self, dims: int, limit: int) -> Any:
        """Up to ``limit`` of the live generation's vectors of size ``dims``, spread evenly over its
        rows, as unit rows of a float32 matrix (None without any): the sample a query's cosines
        against "chunks in general" come from (``ranking.cosine_background``)."""
        if self._conn is None or self.generation is None:
            return None
        table = chunks_table(self.generation)
        top = self._conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
        step = max(1, top // max(1, limit))
        rows = self._conn.execute(
            f"SELECT embedding FROM {table} WHERE rowid % ? = 0 AND length(embedding) = ? LIMIT ?",
            (step, 4 * dims, limit)).fetchall()
        return _unit_rows([r[0] for r in rows], dims)

    def cached_vectors(self, hashes: Sequence[str], dims: int) -> Any:
        """The embedding cache's vectors of ``hashes`` for the live index's provider identity and
        size ``dims``, as unit rows of a float32 matrix (None without any; non-finite ones left
        out): the search's reference texts (``search/reference.py``), in one SELECT."""
        fp = self.fingerprint
        if self._conn is None or not fp:
            return None
        return _unit_rows([blob for _, blob in _cache_rows(self._conn, fp.get("provider"), fp.get("model"),
                                                           fp.get("providerKey"), dims, hashes)], dims)

    def chunk_cosines(self, chunk_ids: Sequence[str], qvec: Sequence[float]) -> dict[str, float]:
        """chunk id -> cosine with ``qvec``, from the chunks' stored vectors (chunks without a
        vector of that size are left out): the cosine of keyword hits the vector arm's top-K
        did not reach, so hybrid ranks every candidate on both arms."""
        if not chunk_ids or self._conn is None or self.generation is None:
            return {}
        import numpy as np

        q = np.asarray(qvec, dtype=np.float32)
        norm = float(np.linalg.norm(q))
        if norm == 0:
            return {}
        rows = self._conn.execute(
            f"SELECT id, embedding FROM {chunks_table(self.generation)} "
            f"WHERE id IN ({','.join('?' * len(chunk_ids))}) AND length(embedding) = ?",
            [*chunk_ids, 4 * len(q)],
        ).fetchall()
        if not rows:
            return {}
        mat = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), len(q))
        norms = np.linalg.norm(mat, axis=1)
        sims = (mat @ q) / (np.where(norms > 0, norms, 1.0) * norm)
        return {r[0]: float(v) for r, v in zip(rows, sims)}

    # -- search: rows for candidates -----------------------------------------------------
    def chunk_rows(self, rowids: Sequence[int]) -> dict[int, ChunkRow]:
        """rowid -> (rowid, chunk id, path, source, start_line, end_line, text, kind)."""
        if not rowids or self._conn is None or self.generation is None:
            return {}
        rows = self._conn.execute(
            f"SELECT rowid, id, path, source, start_line, end_line, text, kind FROM {chunks_table(self.generation)} "
            f"WHERE rowid IN ({','.join('?' * len(rowids))})", list(rowids),
        )
        return {r[0]: r for r in rows}

    def file_mtimes(self, keys: Iterable[FileKey]) -> dict[FileKey, float]:
        """(source, path) -> the file's mtime in seconds, as last indexed."""
        return {key: ns / 1e9 for key, ns in self.file_mtimes_ns(keys).items()}

    def file_mtimes_ns(self, keys: Iterable[FileKey]) -> dict[FileKey, int]:
        """(source, path) -> the file's mtime in nanoseconds, as last indexed (exact, for whole milliseconds)."""
        if self._conn is None or self.generation is None:
            return {}
        sql = f"SELECT mtime_ns FROM {files_table(self.generation)} WHERE source = ? AND path = ?"
        out: dict[FileKey, int] = {}
        for key in dict.fromkeys(keys):
            row = self._conn.execute(sql, key).fetchone()
            if row is not None:
                out[key] = int(row[0])
        return out

    # -- status ----------------------------------------------------------------------------
    def source_counts(self) -> list[tuple[str, int, int]]:
        """(source, files, chunks) per source of the live generation."""
        if self._conn is None or self.generation is None:
            return []
        rows = self._conn.execute(
            f"SELECT source, count(*), coalesce(sum(chunks), 0) FROM {files_table(self.generation)} "
            "GROUP BY source").fetchall()
        return [(str(source), int(files), int(chunks)) for source, files, chunks in rows]

    def problems(self, limit: int = 50) -> list[tuple[str, str]]:
        """(path, error) of files indexed with an error, by path."""
        if self._conn is None or self.generation is None:
            return []
        rows = self._conn.execute(
            f"SELECT path, error FROM {files_table(self.generation)} WHERE error IS NOT NULL "
            "ORDER BY path LIMIT ?", (limit,)).fetchall()
        return [(str(path), str(error)) for path, error in rows]

    def problem_counts(self, since_ms: int = 0) -> dict[str, int]:
        """Files with a problem, in one pass: ``problems`` (any), ``skipped`` (nothing indexed: binary,
        too large, an undecodable name), ``vectorsPending`` (keyword-indexed, their vectors still to
        come) and of those ``vectorsQueued`` (written text-first, their vectors queued: nothing failed;
        the others' vectors failed, and the next sync retries them); ``skippedSince``: the skipped ones
        written since ``since_ms`` (one run's)."""
        if self._conn is None or self.generation is None:
            return {"problems": 0, "skipped": 0, "vectorsPending": 0, "vectorsQueued": 0, "skippedSince": 0}
        row = self._conn.execute(
            f"SELECT count(*), coalesce(sum(chunks = 0), 0), coalesce(sum(error LIKE '{EMBED_PENDING}%'), 0), "
            f"coalesce(sum(chunks = 0 AND indexed_at >= ?), 0), coalesce(sum(instr(error, ?) = 1), 0) "
            f"FROM {files_table(self.generation)} WHERE error IS NOT NULL", (since_ms, VECTORS_QUEUED)).fetchone()
        return {"problems": row[0], "skipped": row[1], "vectorsPending": row[2], "vectorsQueued": row[4],
                "skippedSince": row[3]}

    def unwritten_since(self, paths: Iterable[str], since_ms: int) -> set[str]:
        """Of ``paths``, those with no files row written since ``since_ms`` (a full disk rolled
        their writes back): not indexed at all, unlike a keyword-only file."""
        paths = list(dict.fromkeys(paths))
        if self._conn is None or self.generation is None:
            return set(paths)
        written: set[str] = set()
        for i in range(0, len(paths), 500):
            part = paths[i:i + 500]
            written.update(r[0] for r in self._conn.execute(
                f"SELECT path FROM {files_table(self.generation)} WHERE indexed_at >= ? AND path IN "
                f"({', '.join('?' * len(part))})", (since_ms, *part)))
        return {p for p in paths if p not in written}

    def cache_entries(self) -> int:
        """Embeddings in the cache shared by all generations."""
        if self._conn is None or not db.table_exists(self._conn, "embedding_cache"):
            return 0
        return db.count(self._conn, "SELECT count(*) FROM embedding_cache")



def _unit_rows(blobs: list[bytes], dims: int) -> Any:
    """Packed float32 vectors of size ``dims`` as unit rows of a matrix (None without any); rows
    with a non-finite value are left out (they would make every cosine NaN)."""
    import numpy as np

    blobs = [b for b in blobs if len(b) == 4 * dims]
    if not blobs:
        return None
    mat = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dims)
    mat = mat[np.isfinite(mat).all(axis=1)]
    if not len(mat):
        return None
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    return mat / np.where(norms > 0, norms, 1.0)


def _sample_holding_every(c: db.Connection, ft: str, rank_by: str, every: str, size: int) -> list[tuple[int, float]]:
    """(rowid, bm25 by ``rank_by``) of the ``size`` newest chunks matching ``rank_by`` that also
    match ``every`` (an AND of all the query's phrases, FtsPlan.rank_by), unordered.

    The same rows and scores as ranking the whole sample and keeping the chunks holding every
    phrase, for less: bm25() costs ~1 us a row, and at 30k files most of a 750-row sample lacks
    some common phrase (often all of it). The sample's rowid range is found without bm25 (the
    size-th newest match), the AND is looked up in that range, and bm25 is computed only for the
    rows it kept: ``+rowid`` is a filter SQLite applies before the result columns, not a
    constraint handed to FTS5 (``rowid IN`` there is a MATCH per value). An AND's own cost is
    FTS5's: its first match is sought from the start of the posting lists whatever the rowid
    bound (a 5,000-row range costs as much as the whole store), so it is not narrowed further.
    """
    row = c.execute(f"SELECT rowid FROM {ft} WHERE {ft} MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                    (rank_by, size - 1)).fetchone()
    lo = row[0] if row is not None else _MIN_ROWID  # fewer matches than the sample: all of them
    held = [r for (r,) in c.execute(f"SELECT rowid FROM {ft} WHERE {ft} MATCH ? AND rowid >= ?", (every, lo))]
    if not held:
        return []
    return c.execute(f"SELECT rowid, bm25({ft}) FROM {ft} WHERE {ft} MATCH ? AND rowid >= ? "
                     "AND +rowid IN (SELECT value FROM json_each(?))", (rank_by, lo, json.dumps(held))).fetchall()


def open_reader(settings: Any) -> StoreReader:
    health.open_own(settings)
    vec = settings.memory_search.store.vector
    store = StoreReader(settings.store_path, vector_enabled=vec.enabled, extension_path=vec.extension_path,
                        setting=settings.store_setting)
    health.opened(settings.store_path)
    return store
