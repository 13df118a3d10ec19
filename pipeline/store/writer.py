"""The store's one writer (F6): plans, file writes, generations and the embedding cache."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable, Mapping, Protocol, Sequence

from memindex.pipeline.config import environ
from memindex.pipeline.display import printable
from memindex.pipeline.errors import StoreBusy, StoreError
from memindex.pipeline.store import db, health, terms
from memindex.pipeline.store import fts_totals
from memindex.pipeline.store.health import (
    is_corruption,
    is_full,
    quarantine,
    store_full,
    store_problem,
)
from memindex.pipeline.store.reader import StoreState, read_state
from memindex.pipeline.store.locks import (
    WriterLockTimeout,
    acquire_writer_lock,
    release_writer_lock,
)
from memindex.pipeline.store.schema import (
    BASE_DDL,
    BUILDING_KEY,
    EMBED_PENDING,
    VECTORS_QUEUED,
    LAST_PLAN_KEY,
    META_KEY,
    SCHEMA_VERSION,
    FileKey,
    Tables,
    chunk_id,
    drop_generation_sql,
    files_version_ddl,
    fts_config_sql,
    fts_ddl,
    generation_ddl,
    vec_ddl,
)
from memindex.pipeline.store.vectors import is_valid, pack, unpack

log = logging.getLogger("memindex.store")

# What makes one record unstorable however often it is retried (unlike a locked or full
# disk, which are OperationalErrors and retried): bad vectors, text SQLite refuses
# (surrogates), a constraint the record breaks, a number out of range.
UNSTORABLE = (StoreError, db.IntegrityError, UnicodeError, ValueError, OverflowError, TypeError)


# How long a writer waits for another process's writer of the same store before its write fails
# (StoreError; the next sync plans it again). Writers close a store after a few idle seconds
# (workers/writer.py), so this is reached only behind one that keeps writing, or is stuck.
WRITER_WAIT_S = environ.WRITER_WAIT_S.get()

# What the writer takes. The records themselves are pipeline.index.records
# (FileRecord, ChunkRecord, TouchRecord, and EmbeddingIdentity for the vector
# space); the store sits below the index layer, so it names only the fields it reads.

def _record_dims(ident: "VectorSpace | None", chunks: Sequence["ChunkWrite"]) -> int | None:
    """The dims of a record's vectors: its identity's, else its first vector's own length.

    A record whose vectors all came from the embedding cache names no dims (no request was
    made); its vectors still have one, and the generation must record it, or a later write of
    another size would be taken into the same generation."""
    if ident is not None and ident.dims:
        return int(ident.dims)
    for ch in chunks:
        v = ch.embedding
        if v:
            return len(v) // 4 if isinstance(v, bytes) else len(v)
    return None


def same_space(fp: Mapping[str, Any], emb: "VectorSpace") -> bool:
    """Whether ``emb`` is the provider, model and endpoint of fingerprint ``fp`` (its size aside)."""
    return (fp.get("provider"), fp.get("model"), fp.get("providerKey")) == (emb.provider, emb.model, emb.provider_key)


class _Dimless:
    """A record's vector space without a size: its vectors were set aside (``_Unvectored``)."""

    dims = None

    def __init__(self, emb: "VectorSpace") -> None:
        self.provider, self.model, self.provider_key = emb.provider, emb.model, emb.provider_key


class _NoVector:
    embedding = None
    cacheable = False

    def __init__(self, ch: "ChunkWrite") -> None:
        self._ch = ch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ch, name)


class _Unvectored:
    """``rec`` stored keyword-only, with ``error`` saying why its vectors were set aside."""

    cache_hits: tuple[str, ...] = ()

    def __init__(self, rec: "FileWrite", error: str) -> None:
        self._rec, self.error = rec, error
        self.embedding = _Dimless(rec.embedding) if rec.embedding is not None else None
        self.chunks = [_NoVector(ch) for ch in rec.chunks]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rec, name)


def _vector_blob(ch: "ChunkWrite", dims: int | None, path: str) -> bytes | None:
    """A chunk's vector as the stored blob (None without one); a wrong length or a NaN is refused."""
    v = ch.embedding
    if not v:
        return None
    vec = unpack(v) if isinstance(v, bytes) else v
    if not is_valid(vec, dims):
        raise StoreError(f"{path}: invalid vector for chunk {ch.start_line}-{ch.end_line}")
    return v if isinstance(v, bytes) else pack(vec)


class VectorSpace(Protocol):
    @property
    def provider(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def provider_key(self) -> str: ...
    @property
    def dims(self) -> int | None: ...


class ChunkWrite(Protocol):
    @property
    def start_line(self) -> int: ...
    @property
    def end_line(self) -> int: ...
    @property
    def hash(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def embedding(self) -> Sequence[float] | bytes | None: ...  # floats or packed float32, never base64
    @property
    def cacheable(self) -> bool: ...
    @property
    def context(self) -> str: ...  # keyword-indexed with the text, never stored as it (file_context)


class FileStat(Protocol):
    @property
    def source(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def hash(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def mtime_ns(self) -> int: ...


class FileWrite(FileStat, Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def chunks(self) -> Sequence[ChunkWrite]: ...
    @property
    def embedding(self) -> VectorSpace | None: ...
    @property
    def cache_hits(self) -> Sequence[str]: ...
    @property
    def extra(self) -> Mapping[str, Any] | None: ...
    @property
    def base_hash(self) -> str | None: ...


def identity_matches(fp: Mapping[str, Any], emb: VectorSpace | None) -> bool:
    """Does a record's embedding identity belong in an index with fingerprint ``fp``?"""
    if not fp:
        return True
    if emb is None:
        return fp.get("provider") in (None, "none")
    if not same_space(fp, emb):
        return False
    dims = fp.get("vectorDims")
    return dims is None or emb.dims is None or int(dims) == int(emb.dims)


class StoreWriter:
    """Applies index changes. One instance per store in the one writer thread."""

    cache_writes = True  # new vectors go into the embedding cache (cache.enabled; the writer sets it)

    def __init__(self, path: Path, *, vector_enabled: bool = True, extension_path: str | None = None,
                 wait_s: float | None = None, setting: str = "the store path"):
        self.path = Path(path)
        self.setting = setting  # what sets the path, for messages (db.connect)
        self._tables: dict[int, Tables] = {}  # (tables())
        self._lock_file = self._take_writer_lock(WRITER_WAIT_S if wait_s is None else wait_s)
        # Held (acknowledged, uncommitted) writes are marked beside the store while held: found at
        # open (under the writer lock), the last writer died holding them (SIGKILL, OOM) and they
        # are gone though reported done; the caller re-plans (workers/writer.py).
        self._held_mark = Path(f"{self.path}.held")
        self.lost_by_crash = self._held_mark.exists()
        try:
            self._open(vector_enabled, extension_path)
        except BaseException:
            release_writer_lock(self._lock_file)
            raise
        if self.lost_by_crash:
            self._held_mark.unlink(missing_ok=True)

    def tables(self, gen: int) -> Tables:
        """Generation ``gen``'s table names, built the first time this writer writes it (a write
        names several tables per file; they are the same strings for as long as the store lives)."""
        known = self._tables.get(gen)
        if known is None:
            known = self._tables[gen] = Tables.of(gen)
        return known

    def _take_writer_lock(self, wait_s: float) -> Path:
        """One writing process per store (pipeline/store/locks.py): wait for another one to close it."""
        where = printable(str(self.path))

        def waiting(holder: str) -> None:
            log.warning("waiting for %s to finish writing %s (one process writes a store at a time)",
                        holder, where)
        try:
            lock = acquire_writer_lock(self.path, wait_s=wait_s, on_wait=waiting)
        except WriterLockTimeout as exc:
            raise StoreBusy(f"cannot write the store {where}: {exc.holder} kept it for {wait_s:.0f} s "
                             "(is another memindex process stuck? it is retried on the next sync)") from None
        except OSError as exc:
            raise StoreError(f"cannot write the store {where}: {exc} (is the state dir read-only?)") from None
        return lock

    def _open(self, vector_enabled: bool, extension_path: str | None) -> None:
        self.conn = self._open_checked()
        db.run_script(self.conn, BASE_DDL)
        self.conn.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
        self.vector_error = (
            db.load_vector_extension(self.conn, extension_path) if vector_enabled else "disabled by config"
        )
        self.fts_error: str | None = None if db.fts5_available(self.conn) else "FTS5 not compiled in"
        if self.vector_error and vector_enabled:
            log.warning("sqlite-vec unavailable: %s (vector search falls back to in-process cosine)",
                        self.vector_error)
        self._lock = threading.RLock()
        self.held_since: float | None = None  # monotonic start of the held transaction (``hold``)
        self.lost_held = False  # SQLite rolled a held transaction back: its writes are gone
        self.full = False  # the last write or commit found the disk full (cleared by a commit that works)
        # In a held transaction, the FTS rows of new chunks wait here until the commit (see hold).
        self._fts_rows: list[tuple[int, int, str]] = []  # (generation, chunk rowid, indexed text)
        self._fts_files: set[tuple[int, str, str]] = set()  # (generation, source, path) of those chunks
        # FTS rows deleted in the current transaction: their sizes come off FTS5's totals after the
        # commit (fts_totals: a contentless_delete table never takes them off itself).
        self._fts_deleted = False
        if self.fts_error is None:
            try:
                fts_totals.recount(self.conn, [r[0] for r in self.conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%fts5%'")])
                fts_totals.settle(self.conn)  # deletes a crash left unsettled
            except db.Error as exc:  # (a full disk, a busy store): a correction, tried again on the next open
                log.warning("could not correct the keyword index's totals of %s (retried later): %s",
                            printable(str(self.path)), exc)
        self._counts_kept: dict[int, bool] = {}  # generation -> it has term counts (``_keeps_counts``)

    def _open_checked(self) -> db.Connection:
        """Open the store, moving a damaged one aside first (``quarantine``). A store that
        cannot be created or written (a read-only state dir) is one ``StoreError``.
        The checks are O(1) (header, schema read): a full quick_check would cost a big
        store seconds on every open; ``check_invariant`` is the deep one."""
        try:
            conn = None
            try:
                conn = db.connect(self.path, setting=self.setting)
                if store_problem(conn, self.path) is None:
                    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                    conn.execute("BEGIN IMMEDIATE")  # fails at once on a read-only file or dir
                    conn.execute("COMMIT")
                    return conn
            except db.DatabaseError as exc:
                if not is_corruption(exc):
                    raise
            if conn is not None:
                conn.close()
            quarantine(self.path)
            return db.connect(self.path, setting=self.setting)
        except (OSError, db.OperationalError) as exc:
            raise StoreError(f"cannot write the store {printable(str(self.path))}: {exc} "
                             "(is the state dir read-only?)") from None

    def close(self) -> None:
        try:
            self.commit()  # a held transaction's writes were reported done: keep them
        except (db.Error, StoreError) as exc:  # (a full disk is a StoreError)
            log.warning("could not commit the held writes to %s on close: %s", printable(str(self.path)), exc)
        try:
            self.conn.close()
        finally:
            release_writer_lock(self._lock_file)

    def _delete_fts(self, gen: int, rowids: list[int]) -> None:
        """Delete chunks ``rowids``' FTS rows, first taking them out of what the FTS table alone
        does not keep right: the term counts (``_uncount``) and, after the commit, FTS5's totals
        (``fts_totals``: their sizes, recorded here)."""
        ft = self.tables(gen).fts
        fts_totals.record_gone(self.conn, ft, rowids)
        self._fts_deleted = True
        self._uncount(gen, rowids)
        self.conn.execute(f"DELETE FROM {ft} WHERE rowid IN ({','.join('?' * len(rowids))})", rowids)

    def _settle_fts(self) -> None:
        """After a commit: take the rows it deleted off FTS5's totals (``fts_totals.settle``). A
        failure (a busy or full disk) leaves them recorded, for the next commit or open to settle."""
        if not self._fts_deleted or self.conn.in_transaction:
            return
        try:
            fts_totals.settle(self.conn)
            self._fts_deleted = False
        except db.Error as exc:
            log.warning("could not update the keyword index's totals of %s (retried after the next write): %s",
                        printable(str(self.path)), exc)

    # -- group commit (issue 19) -------------------------------------------------
    def hold(self) -> None:
        """Open a transaction that the following writes join, until ``commit``.

        Committing each write message (~16 files) made a cold index pay, per message, the WAL
        frames of every page it touched; the caller holds one transaction across the messages
        that are already waiting (workers/writer.py decides when to commit). Each write inside
        it still runs in its own savepoint, so one that fails takes back only its own rows.

        Inside it, the FTS rows of new chunks are inserted together just before the commit:
        FTS5 writes its pending terms out as a new segment at every savepoint and at every
        statement that keeps a statement journal (the files upsert, with its triggers), so
        inserted message by message they made a segment per ~16 files to merge later (a fifth
        of a 10,000-file cold index's writer CPU). Anything that deletes or drops FTS rows
        inserts the waiting ones first (``_flush_first``), outside any savepoint.
        """
        with self._lock:
            if not self.conn.in_transaction:
                self.conn.execute("BEGIN IMMEDIATE")
                self.held_since = time.monotonic()
                self.lost_held = False
                try:
                    self._held_mark.touch()
                except OSError:  # (a full disk: the commit says so)
                    pass

    def commit(self) -> None:
        """Commit the held transaction, if any (a failed commit rolls it back and raises)."""
        with self._lock:
            if self.held_since is None:
                return
            committed = False
            try:
                if self.conn.in_transaction:
                    self._flush_fts()
                    self.conn.execute("COMMIT")
                self.full = False
                committed = True
            except db.Error as exc:
                self.lost_held = True
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                if is_full(exc):
                    self.full = True
                    raise store_full(self.path) from exc
                raise
            finally:
                self._end_held()
            if committed:
                self._settle_fts()

    def _end_held(self) -> None:
        """No transaction is held any more: nothing waits for its commit."""
        try:
            self._held_mark.unlink(missing_ok=True)
        except OSError:
            pass
        self.held_since = None
        self._fts_rows.clear()
        self._fts_files.clear()

    @property
    def held_rows(self) -> int:
        """FTS rows waiting for the held transaction's commit."""
        return len(self._fts_rows)

    def _flush_fts(self) -> None:
        """Insert the FTS rows waiting in the held transaction. Never inside a savepoint: one
        rolled back would take the flushed rows with it."""
        rows, self._fts_rows = self._fts_rows, []
        self._fts_files.clear()
        by_gen: dict[int, list[tuple[int, str]]] = {}
        for gen, rowid, text in rows:
            by_gen.setdefault(gen, []).append((rowid, text))
        for gen, part in by_gen.items():
            self._insert_fts(gen, part)

    def _insert_fts(self, gen: int, rows: list[tuple[int, str]]) -> None:
        self.conn.executemany(f"INSERT INTO {self.tables(gen).fts}(rowid, text) VALUES (?, ?)", rows)
        if self._keeps_counts(gen):  # the term counts move with the FTS rows (store/terms.py)
            terms.count(self.conn, gen, [text for _, text in rows], 1)

    def _keeps_counts(self, gen: int) -> bool:
        """Whether ``gen`` has term counts to keep (asked once per generation)."""
        keeps = self._counts_kept.get(gen)
        if keeps is None:
            keeps = self._counts_kept[gen] = terms.keeps_counts(self.conn, gen)
        return keeps

    def _uncount(self, gen: int, rowids: list[int]) -> None:
        """Before chunks ``rowids`` (and their FTS rows) are deleted."""
        if self._keeps_counts(gen):
            terms.uncount_chunks(self.conn, gen, rowids)

    def _flush_first(self) -> None:
        """Before a write that may delete or drop FTS rows: insert the waiting ones (outside
        any savepoint), so what it deletes is really there."""
        with self._lock:
            if self._fts_rows:
                self._flush_fts()

    def _fts_mark(self) -> int:
        return len(self._fts_rows)

    def _fts_rollback(self, mark: int) -> None:
        """A savepoint rolled back: forget the FTS rows of the chunks it took back."""
        del self._fts_rows[mark:]

    def wal_lost(self) -> bool:
        """The WAL file this connection writes was deleted under it: recent writes may never
        reach the store, so the caller re-plans instead of trusting them."""
        return not os.path.exists(f"{self.path}-wal")

    # -- meta ------------------------------------------------------------------
    def state(self) -> StoreState:
        return read_state(self.conn)

    def _set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            self.conn.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            self.conn.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value)
            )

    def _ensure_generation(self, gen: int) -> None:
        db.run_script(self.conn, generation_ddl(gen))
        for stmt in files_version_ddl(gen):
            self.conn.execute(stmt)
        if self.fts_error is None:
            try:
                self.conn.execute(fts_ddl(gen, contentless=db.CONTENTLESS_DELETE))
                current = dict(self.conn.execute(f"SELECT k, CAST(v AS TEXT) FROM {self.tables(gen).fts}_config"))
                for stmt in fts_config_sql(gen, current):
                    self.conn.execute(stmt)
                # Term counts start with the generation (exact from its first chunk on); an older
                # generation's search counts by MATCH until a rebuild replaces it.
                if self.conn.execute(f"SELECT 1 FROM {self.tables(gen).chunks} LIMIT 1").fetchone() is None:
                    terms.create_tables(self.conn, gen)
                self._counts_kept.pop(gen, None)
            except db.OperationalError as exc:
                self.fts_error = str(exc)
                log.warning("fts unavailable: %s (vector-only search)", exc)

    def _ensure_vec(self, gen: int, dims: int) -> bool:
        """Create the vec0 table for this generation; refuse a second dimension."""
        have = self.vector_dims(gen)
        if have is not None and have != dims:
            raise StoreError(f"vector dims {dims} do not match this index's {have}; refusing to mix")
        if have is None:
            self._set_meta(self.tables(gen).vec_dims_key, str(dims))
        if self.vector_error is None:
            self.conn.execute(vec_ddl(gen, dims))
            return True
        return False

    # -- planning ---------------------------------------------------------------
    def plan(self, gen: int, fingerprint: Mapping[str, Any], pending: Iterable[FileKey],
             deletes: Iterable[FileKey], planned_at: int | None = None, keep: Iterable[FileKey] = ()) -> str:
        """Record what a sync will write into ``gen``; returns 'live', 'building' or 'stale'.

        ``keep``: files an earlier plan queued and this one did not queue again; those still
        pending stay pending (those written meanwhile are not pending again).

        The first generation of an empty store is live at once (partial results
        beat none). A later generation is built beside the live one and promoted
        when nothing is pending. A plan older than the last one applied (a
        message redelivered after a crash) is ignored: it would resurrect a
        pending set that newer syncs already replaced.
        """
        self._flush_first()
        with self._lock, self._tx():
            st = self.state()
            if planned_at is not None:
                if st.last_plan_ns > planned_at:
                    log.info("ignoring a plan from %d ns: a newer one was applied", planned_at)
                    return "stale"
                self._set_meta(LAST_PLAN_KEY, str(planned_at))
            if st.live_generation is None:
                self._ensure_generation(gen)
                self._set_meta(META_KEY, json.dumps({"generation": gen, "fingerprint": fingerprint}))
                role = "live"
            elif gen == st.live_generation:
                role = "live"
                if st.building_generation is not None:
                    # Config went back to the live fingerprint: abandon the rebuild.
                    self._drop_generation(st.building_generation)
                    self._set_meta(BUILDING_KEY, None)
                self._set_meta(META_KEY, json.dumps({"generation": gen, "fingerprint": fingerprint}))
            elif gen < st.live_generation:
                return "stale"
            else:
                if st.building_generation is not None and st.building_generation != gen:
                    self._drop_generation(st.building_generation)
                self._ensure_generation(gen)
                self._set_meta(BUILDING_KEY, json.dumps({"generation": gen, "fingerprint": fingerprint}))
                role = "building"
            self._ensure_generation(gen)
            # A kept file is pending still unless its write came first (one writer: no race).
            still = [k for k in keep if self.conn.execute(
                f"SELECT 1 FROM {self.tables(gen).pending} WHERE source = ? AND path = ?", tuple(k)).fetchone()]
            if still:
                pending = [*pending, *still]
            self.conn.execute(f"DELETE FROM {self.tables(gen).pending}")
            self.conn.executemany(
                f"INSERT OR IGNORE INTO {self.tables(gen).pending}(source, path) VALUES (?, ?)", list(pending)
            )
            for source, path in deletes:
                self._delete_file(gen, source, path)
            self._set_meta("last_sync_at", str(db.now_ms()))
        self.maybe_promote(gen)
        return role

    def maybe_promote(self, gen: int) -> bool:
        """Flip a complete rebuild live in one transaction and drop the old tables."""
        with self._lock:
            st = self.state()
            if st.building_generation != gen:
                return False
            left = self.conn.execute(f"SELECT count(*) FROM {self.tables(gen).pending}").fetchone()[0]
            if left:
                return False
            self._flush_first()  # the old generation's tables are dropped
            with self._tx():
                self._set_meta(META_KEY, json.dumps({"generation": gen, "fingerprint": st.building_fingerprint}))
                self._set_meta(BUILDING_KEY, None)
                if st.live_generation is not None:
                    self._drop_generation(st.live_generation)
            log.info("index rebuild complete: generation %d is live", gen)
            return True

    def _drop_generation(self, gen: int) -> None:
        for sql in drop_generation_sql(gen):
            self.conn.execute(sql)  # a table's triggers go with it
        self._counts_kept.pop(gen, None)
        self._set_meta(self.tables(gen).vec_dims_key, None)
        self._set_meta(self.tables(gen).files_version_key, None)

    # -- writes -------------------------------------------------------------------
    def _tx(self) -> _Transaction:
        return _Transaction(self)

    def generation_exists(self, gen: int) -> bool:
        return db.table_exists(self.conn, self.tables(gen).files)

    def file_mtime(self, gen: int, source: str, path: str) -> int | None:
        """The mtime a file's row in ``gen`` was indexed at (None: no row)."""
        row = self.conn.execute(f"SELECT mtime_ns FROM {self.tables(gen).files} WHERE source = ? AND path = ?",
                                (source, path)).fetchone()
        return None if row is None else int(row[0])

    def generation_fingerprint(self, gen: int) -> dict[str, Any] | None:
        st = self.state()
        if gen == st.live_generation:
            return st.live_fingerprint
        if gen == st.building_generation:
            return st.building_fingerprint
        return None

    def _insert_chunk_rows(self, gen: int, vt: str, fts_rows: list[tuple[int, str]], vec_rows: list[tuple[int, bytes]],
                           cache_rows: list[_CacheRow], contexts: list[tuple[int, str]]) -> None:
        """The FTS, vector and embedding-cache rows of chunks just inserted (both write paths);
        ``contexts``: (rowid, file context) of each, for the term counts."""
        if self.fts_error is None and fts_rows:
            if self._keeps_counts(gen):
                terms.add_contexts(self.conn, gen, contexts)
            if self.held_since is not None:
                self._fts_rows += [(gen, rowid, text) for rowid, text in fts_rows]  # see hold()
            else:
                self._insert_fts(gen, fts_rows)
        if vec_rows:
            self.conn.executemany(f"INSERT INTO {vt}(rowid, embedding) VALUES (?, ?)", vec_rows)
        if cache_rows and self.cache_writes:
            self.conn.executemany(_CACHE_UPSERT, cache_rows)

    def write_files(self, gen: int, records: Sequence[FileWrite]) -> tuple[int, list[str]]:
        """Replace each file's chunks in one transaction.

        Returns (chunks written, paths rejected). A record whose vectors come
        from another provider/model/endpoint than the generation's fingerprint
        is rejected: vectors of different spaces never mix in one index.
        """
        if not self.generation_exists(gen):
            log.info("dropping write for generation %d: it no longer exists", gen)
            return 0, [r.path for r in records]
        fp = dict(self.generation_fingerprint(gen) or {})
        have = self.vector_dims(gen)
        if have is not None and fp:
            fp["vectorDims"] = have  # the dims this generation's vectors already have
        written, rejected = 0, []
        self._replacing(gen, records)
        resized = 0
        with self._lock, self._tx():
            accepted: dict[FileKey, FileWrite] = {}
            for rec in records:
                dims = _record_dims(rec.embedding, rec.chunks)
                if fp and rec.embedding is not None and same_space(fp, rec.embedding) and dims:
                    if fp.get("vectorDims") is None:
                        fp["vectorDims"] = dims  # the batch's first vectors fix the generation's size
                    elif int(fp["vectorDims"]) != dims:
                        # Same provider, model and endpoint, vectors of another size (the endpoint
                        # changed what it serves, or the cache holds the old size): the text is
                        # still stored, keyword-searchable; the caller rebuilds for the vectors.
                        rejected.append(rec.path)
                        resized += 1
                        rec = _Unvectored(rec, f"{EMBED_PENDING} (its vectors have {dims} dims and this "
                                               f"index's {fp['vectorDims']}; a rebuild re-embeds them)")
                elif not identity_matches(fp, rec.embedding):
                    rejected.append(rec.path)
                    continue
                accepted.pop((rec.source, rec.path), None)
                accepted[(rec.source, rec.path)] = rec  # a file written twice in one batch: the last wins
            written = self._write_batch(gen, list(accepted.values()))
        if len(rejected) > resized:
            log.warning("rejected %d write(s) embedded by a different provider than generation %d expects",
                        len(rejected) - resized, gen)
        if resized:
            log.warning("%d file(s) stored without their vectors: their size differs from generation %d's "
                        "(keyword-searchable now; a rebuild re-embeds them)", resized, gen)
        self.maybe_promote(gen)
        return written, rejected

    def cache_only(self, records: Sequence[FileWrite]) -> int:
        """Upsert the records' chunk vectors into the embedding cache only: no file, chunk, FTS or
        vector rows, no pending marks (the search's reference texts, ``search/reference.py``). A
        chunk without a valid vector is left out (a later sync embeds it again). Returns the rows."""
        if not self.cache_writes:
            return 0
        ts = db.now_ms()
        rows: list[_CacheRow] = []
        for rec in records:
            ident = rec.embedding
            dims = _record_dims(ident, rec.chunks)
            if ident is None or not dims:
                continue
            for ch in rec.chunks:
                try:
                    blob = _vector_blob(ch, dims, rec.path)
                except StoreError:  # a wrong length or a NaN: left out, as said above
                    continue
                if blob is not None:
                    rows.append((ident.provider, ident.model, ident.provider_key, dims, ch.hash, blob, ts, ts))
        if not rows:
            return 0
        with self._lock, self._tx():
            self.conn.executemany(_CACHE_UPSERT, rows)
        return len(rows)

    def _replacing(self, gen: int, records: Sequence[FileStat]) -> None:
        """Before ``records`` replace their files' chunks: FTS rows of those chunks still held for
        the group commit go in first (the replacement deletes them by rowid)."""
        with self._lock:
            if self._fts_files and any((gen, r.source, r.path) in self._fts_files for r in records):
                self._flush_fts()
            if self.held_since is not None:
                self._fts_files.update((gen, r.source, r.path) for r in records)

    def write_text_first(self, gen: int, records: Sequence[FileWrite]) -> int:
        """Store the text of files whose vectors are still being made: keyword-searchable now.

        Each file stays pending, with the ``VECTORS_QUEUED`` problem; the write with its vectors
        (queued behind this one) replaces the rows. A file ``gen`` already holds with this content
        (a re-plan for its vectors) is left as it is. No vector space is checked: there are no
        vectors, and the write that brings them is checked as every write is.
        Returns how many files were written.
        """
        if not self.generation_exists(gen):
            return 0
        ft = self.tables(gen).files
        todo = []
        for rec in records:
            row = self.conn.execute(f"SELECT hash FROM {ft} WHERE source = ? AND path = ?",
                                    (rec.source, rec.path)).fetchone()
            if row is None or row[0] != rec.hash:
                todo.append(_Unvectored(rec, VECTORS_QUEUED))
        if not todo:
            return 0
        self._replacing(gen, todo)
        with self._lock, self._tx():
            self._write_batch(gen, todo, keep_pending=True)
        return len(todo)

    def append_chunks(self, gen: int, records: Sequence[FileWrite]) -> int:
        """Add each record's chunks to its file, keeping the chunks already there.

        For growing session transcripts: a record holds only the new turns and
        names the files-row ``hash`` it extends (``base_hash``). It applies only
        on top of exactly that state; a duplicated or outdated delta (the file
        was reindexed or extended meanwhile) is skipped. Returns chunks written.
        """
        if not self.generation_exists(gen):
            return 0
        fp = self.generation_fingerprint(gen) or {}
        written = 0
        self._flush_first()
        with self._lock, self._tx():
            for rec in records:
                if not identity_matches(fp, rec.embedding):
                    log.warning("rejected an append to %s embedded by a different provider", rec.path)
                    continue
                row = self.conn.execute(f"SELECT hash FROM {self.tables(gen).files} WHERE source = ? AND path = ?",
                                        (rec.source, rec.path)).fetchone()
                if row is None or row[0] != rec.base_hash:
                    log.info("skipping append to %s: it no longer extends the indexed state", rec.path)
                    continue
                written += self._write_isolated(gen, rec, replace=False)
        self.maybe_promote(gen)
        return written

    def _write_batch(self, gen: int, records: Sequence[FileWrite], keep_pending: bool = False) -> int:
        """Replace every record's file with a few statements for the whole batch (issue 19).

        Per file, the writer used to issue ~8 statements plus one per chunk; each one releases
        and re-takes the GIL, which the chunking threads hold most of the time, so a cold index
        spent a quarter of its samples waiting to get it back. Here it is ~8 per batch. If any
        record cannot be stored (an invalid vector, text SQLite refuses, ...) the batch is rolled
        back and written file by file (``_write_isolated``), so that file alone gets a problem row.
        """
        if len(records) < 2:
            return sum(self._write_isolated(gen, rec, keep_pending=keep_pending) for rec in records)
        mark = self._fts_mark()
        self.conn.execute("SAVEPOINT batch_write")
        try:
            n = self._write_many(gen, records, keep_pending)
        except UNSTORABLE:
            self.conn.execute("ROLLBACK TO batch_write")
            self.conn.execute("RELEASE batch_write")
            self._fts_rollback(mark)
            return sum(self._write_isolated(gen, rec, keep_pending=keep_pending) for rec in records)
        self.conn.execute("RELEASE batch_write")
        return n

    def _write_many(self, gen: int, records: Sequence[FileWrite], keep_pending: bool = False) -> int:
        """``_write_file(gen, rec)`` for every record, statement by statement for the whole batch.

        The same rows as the per-file path: old chunks (and their FTS and vector rows) of each
        file deleted, new chunks under fresh rowids (allocated here from max(rowid), in the
        order the per-file path would allocate them), the files row upserted, pending cleared.
        """
        ct, vt, ftab = self.tables(gen).chunks, self.tables(gen).vec, self.tables(gen).files
        old: list[int] = []
        by_source: dict[str, list[str]] = {}
        for rec in records:
            by_source.setdefault(rec.source, []).append(rec.path)
        for source, paths in by_source.items():
            for i in range(0, len(paths), _SQL_IN_MAX):
                part = paths[i : i + _SQL_IN_MAX]
                old += [r[0] for r in self.conn.execute(
                    f"SELECT rowid FROM {ct} WHERE source = ? AND path IN ({','.join('?' * len(part))})",
                    [source, *part])]
        vec_exists = self.vector_error is None and db.table_exists(self.conn, vt)
        for i in range(0, len(old), _SQL_IN_MAX):
            ids = old[i : i + _SQL_IN_MAX]
            marks = ",".join("?" * len(ids))
            if self.fts_error is None:
                self._delete_fts(gen, ids)
            if vec_exists:
                self.conn.execute(f"DELETE FROM {vt} WHERE rowid IN ({marks})", ids)
            self.conn.execute(f"DELETE FROM {ct} WHERE rowid IN ({marks})", ids)
        rowid = self.conn.execute(f"SELECT coalesce(max(rowid), 0) FROM {ct}").fetchone()[0]
        ts = db.now_ms()
        vec_ok: dict[int, bool] = {}
        chunk_rows, fts_rows, vec_rows, cache_rows, used_rows, file_rows, contexts = [], [], [], [], [], [], []
        written = 0
        for rec in records:
            source, path, ident = rec.source, rec.path, rec.embedding
            model = ident.model if ident is not None else "fts-only"
            dims = _record_dims(ident, rec.chunks)
            if dims and int(dims) not in vec_ok:
                vec_ok[int(dims)] = self._ensure_vec(gen, int(dims))
            for seq, ch in enumerate(rec.chunks):
                blob = _vector_blob(ch, dims, path)
                rowid += 1
                chunk_rows.append((rowid, chunk_id(source, path, seq, ch.start_line, ch.end_line, ch.hash, model),
                                   source, path, ch.start_line, ch.end_line, ch.hash, rec.kind, ch.text, blob, ts))
                fts_rows.append((rowid, terms.fts_text(ch.text, ch.context)))
                contexts.append((rowid, ch.context))
                if blob is not None:
                    if dims and vec_ok.get(int(dims)):
                        vec_rows.append((rowid, blob))
                    if ch.cacheable and ident is not None:
                        cache_rows.append((ident.provider, model, ident.provider_key, dims, ch.hash, blob, ts, ts))
            if rec.cache_hits and ident is not None:
                used_rows += [(ts, ident.provider, model, ident.provider_key, dims, h) for h in rec.cache_hits]
            file_rows.append((source, path, rec.hash, rec.size, rec.mtime_ns, rec.kind, len(rec.chunks), rec.error,
                              ts, json.dumps(rec.extra) if rec.extra else None))
            written += len(rec.chunks)
        # Plain INSERT: a replaced row would leave its FTS and vector rows behind as orphans.
        self.conn.executemany(
            f"INSERT INTO {ct}(rowid, id, source, path, start_line, end_line, hash, kind, text, "
            "embedding, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)", chunk_rows)
        self._insert_chunk_rows(gen, vt, fts_rows, vec_rows, cache_rows, contexts)
        if used_rows:
            self.conn.executemany(_CACHE_USED, used_rows)
        self.conn.executemany(_file_upsert(ftab), file_rows)
        if not keep_pending:
            self.conn.executemany(f"DELETE FROM {self.tables(gen).pending} WHERE source = ? AND path = ?",
                                  [(r.source, r.path) for r in records])
        return written

    def _write_isolated(self, gen: int, rec: FileWrite, replace: bool = True, keep_pending: bool = False) -> int:
        """``_write_file`` in a savepoint: a record the store cannot take (an invalid vector,
        text SQLite refuses, ...) becomes that file's problem row instead of failing, and
        endlessly retrying, the whole batch. Locked or failing disks still raise (retryable)."""
        mark = self._fts_mark()
        self.conn.execute("SAVEPOINT file_write")
        try:
            n = self._write_file(gen, rec, replace, keep_pending)
        except UNSTORABLE as exc:
            self.conn.execute("ROLLBACK TO file_write")
            self.conn.execute("RELEASE file_write")
            self._fts_rollback(mark)
            problem = f"could not be stored: {type(exc).__name__}: {exc}"
            log.warning("%s: %s", printable(rec.path), problem)
            self._write_problem(gen, rec, problem)
            return 0
        self.conn.execute("RELEASE file_write")
        return n

    def _write_problem(self, gen: int, rec: FileStat, problem: str) -> None:
        """The file's row with ``problem`` and no chunks, so status lists it and no sync retries it."""
        try:
            self._delete_file(gen, rec.source, rec.path)
            self.conn.execute(
                f"INSERT INTO {self.tables(gen).files}(source, path, hash, size, mtime_ns, chunks, error, indexed_at) "
                "VALUES (?,?,?,?,?,0,?,?) ON CONFLICT(source, path) DO UPDATE SET hash=excluded.hash, "
                "size=excluded.size, mtime_ns=excluded.mtime_ns, chunks=0, error=excluded.error, "
                "indexed_at=excluded.indexed_at",
                (rec.source, rec.path, rec.hash, rec.size, rec.mtime_ns, problem, db.now_ms()))
        except UNSTORABLE as exc:  # not even its name can be stored: the log line is all there is
            log.warning("%s: cannot record its problem either (%s); skipped", printable(rec.path), exc)

    def _write_file(self, gen: int, rec: FileWrite, replace: bool = True, keep_pending: bool = False) -> int:
        source, path = rec.source, rec.path
        ident = rec.embedding
        model = ident.model if ident is not None else "fts-only"
        dims = _record_dims(ident, rec.chunks)
        kept = 0
        if replace:
            self._delete_file(gen, source, path, keep_pending=True)
        else:
            kept = self.conn.execute(f"SELECT count(*) FROM {self.tables(gen).chunks} WHERE source = ? AND path = ?",
                                     (source, path)).fetchone()[0]
        chunks = rec.chunks
        vec_ok = False
        if dims:
            vec_ok = self._ensure_vec(gen, int(dims))
        ts = db.now_ms()
        ct, vt = self.tables(gen).chunks, self.tables(gen).vec
        fts_rows, vec_rows, cache_rows, contexts = [], [], [], []
        for seq, ch in enumerate(chunks, start=kept):
            blob = _vector_blob(ch, dims, path)
            cid = chunk_id(source, path, seq, ch.start_line, ch.end_line, ch.hash, model)
            # Plain INSERT: a replaced row would leave its FTS and vector rows behind as orphans.
            cur = self.conn.execute(
                f"INSERT INTO {ct}(id, source, path, start_line, end_line, hash, kind, text, "
                "embedding, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (cid, source, path, ch.start_line, ch.end_line, ch.hash, rec.kind, ch.text, blob, ts),
            )
            rowid = cur.lastrowid
            assert rowid is not None  # set by every INSERT that succeeded
            fts_rows.append((rowid, terms.fts_text(ch.text, ch.context)))
            contexts.append((rowid, ch.context))
            if blob is not None:
                if vec_ok:
                    vec_rows.append((rowid, blob))
                if ch.cacheable and ident is not None:
                    cache_rows.append((ident.provider, model, ident.provider_key, dims, ch.hash, blob, ts, ts))
        self._insert_chunk_rows(gen, vt, fts_rows, vec_rows, cache_rows, contexts)
        hits = rec.cache_hits
        if hits and ident is not None:
            self.conn.executemany(_CACHE_USED, [(ts, ident.provider, model, ident.provider_key, dims, h) for h in hits])
        self.conn.execute(
            _file_upsert(self.tables(gen).files),
            (source, path, rec.hash, rec.size, rec.mtime_ns, rec.kind,
             kept + len(chunks), rec.error, ts, json.dumps(rec.extra) if rec.extra else None),
        )
        if not keep_pending:
            self.conn.execute(f"DELETE FROM {self.tables(gen).pending} WHERE source = ? AND path = ?", (source, path))
        return len(chunks)

    def touch_files(self, gen: int, records: Sequence[FileStat]) -> None:
        """Content unchanged (same hash): only refresh the stat fields."""
        if not self.generation_exists(gen):
            return
        with self._lock, self._tx():
            for r in records:
                self.conn.execute(
                    f"UPDATE {self.tables(gen).files} SET size = ?, mtime_ns = ? WHERE source = ? AND path = ? "
                    "AND hash = ?", (r.size, r.mtime_ns, r.source, r.path, r.hash),
                )
                self.conn.execute(
                    f"DELETE FROM {self.tables(gen).pending} WHERE source = ? AND path = ?", (r.source, r.path)
                )
        self.maybe_promote(gen)

    def delete_files(self, gen: int, keys: Iterable[FileKey]) -> None:
        if not self.generation_exists(gen):
            return
        self._flush_first()
        with self._lock, self._tx():
            for source, path in keys:
                self._delete_file(gen, source, path)
        self.maybe_promote(gen)

    def _delete_file(self, gen: int, source: str, path: str, keep_pending: bool = False) -> None:
        ct = self.tables(gen).chunks
        rowids = [r[0] for r in self.conn.execute(
            f"SELECT rowid FROM {ct} WHERE source = ? AND path = ?", (source, path))]
        if rowids:
            marks = ",".join("?" * len(rowids))
            if self.fts_error is None:
                self._delete_fts(gen, rowids)
            if self.vector_error is None and db.table_exists(self.conn, self.tables(gen).vec):
                self.conn.execute(f"DELETE FROM {self.tables(gen).vec} WHERE rowid IN ({marks})", rowids)
            self.conn.execute(f"DELETE FROM {ct} WHERE rowid IN ({marks})", rowids)
        self.conn.execute(f"DELETE FROM {self.tables(gen).files} WHERE source = ? AND path = ?", (source, path))
        if not keep_pending:
            self.conn.execute(f"DELETE FROM {self.tables(gen).pending} WHERE source = ? AND path = ?", (source, path))

    def vector_dims(self, gen: int) -> int | None:
        """The size of generation ``gen``'s vectors (None until its first vector)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (self.tables(gen).vec_dims_key,)).fetchone()
        return int(row[0]) if row is not None else None

    def prune_cache(self, max_entries: int | None) -> int:
        """Least-recently-used pruning of the embedding cache."""
        if not max_entries or max_entries <= 0:
            return 0
        with self._lock, self._tx():
            n = db.count(self.conn, "SELECT count(*) FROM embedding_cache")
            if n <= max_entries:
                return 0
            self.conn.execute(
                "DELETE FROM embedding_cache WHERE rowid IN (SELECT rowid FROM embedding_cache "
                "ORDER BY used_at ASC LIMIT ?)", (n - max_entries,),
            )
            return n - max_entries


# (provider, model, provider_key, dims, hash, embedding, updated_at, used_at): _CACHE_UPSERT's values
_CacheRow = tuple[str, str, str, int | None, str, bytes, int, int]
_SQL_IN_MAX = 500  # values per IN (...) list: far below SQLite's variable limit on every version
_CACHE_UPSERT = (
    "INSERT INTO embedding_cache(provider, model, provider_key, dims, hash, embedding, updated_at, used_at) "
    "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT DO UPDATE SET "
    "embedding = excluded.embedding, updated_at = excluded.updated_at, used_at = excluded.used_at")
_CACHE_USED = ("UPDATE embedding_cache SET used_at = ? WHERE provider = ? AND model = ? AND "
               "provider_key = ? AND dims = ? AND hash = ?")


def _file_upsert(table: str) -> str:
    return (f"INSERT INTO {table}(source, path, hash, size, mtime_ns, kind, chunks, error, "
            "indexed_at, extra) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(source, path) DO UPDATE SET "
            "hash=excluded.hash, size=excluded.size, mtime_ns=excluded.mtime_ns, kind=excluded.kind, "
            "chunks=excluded.chunks, error=excluded.error, indexed_at=excluded.indexed_at, extra=excluded.extra")


class _Transaction:
    """One write: its own transaction, or a savepoint inside the held one (``StoreWriter.hold``),
    so a write that fails there takes back only its own rows."""

    def __init__(self, writer: StoreWriter):
        self.writer = writer
        self.conn = writer.conn
        self.mode = ""
        self.mark = 0

    def __enter__(self) -> db.Connection:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")
            self.mode = "own"
        elif self.writer.held_since is not None:
            self.conn.execute("SAVEPOINT write_op")
            self.mode = "savepoint"
            self.mark = self.writer._fts_mark()
        return self.conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if self.mode == "own":
                if exc_type is None:
                    self.conn.execute("COMMIT")
                    self.writer._settle_fts()
                elif self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
            elif self.mode == "savepoint":
                if not self.conn.in_transaction:
                    # SQLite rolled the whole held transaction back (an I/O error, a full disk):
                    # the writes already reported done in it are gone; the caller re-plans.
                    self.writer.lost_held = True
                    self.writer._end_held()  # its waiting FTS rows name chunks that are gone
                else:
                    if exc_type is not None:
                        self.conn.execute("ROLLBACK TO write_op")
                        self.writer._fts_rollback(self.mark)
                    self.conn.execute("RELEASE write_op")
        except db.Error as failed:  # the COMMIT itself found the disk full
            if not is_full(failed):
                raise
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            exc = failed
        if exc is not None and is_full(exc):
            # One clear StoreError (a write actor's message is not retried on it) instead of an
            # OperationalError that every retry and every re-plan would hit again.
            self.writer.full = True
            raise store_full(self.writer.path) from exc


def open_writer(settings: Any, *, wait_s: float | None = None) -> StoreWriter:
    health.open_own(settings)
    vec = settings.memory_search.store.vector
    store = StoreWriter(settings.store_path, vector_enabled=vec.enabled, extension_path=vec.extension_path,
                       wait_s=wait_s, setting=settings.store_setting)
    health.opened(settings.store_path)
    return store
