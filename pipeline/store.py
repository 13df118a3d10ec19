"""The per-agent SQLite store: one writer, many read-only readers (F6).

``StoreWriter`` is used only by the writer actor. ``StoreReader`` opens the
file read-only (WAL lets it read while the writer writes) and is what search,
sync planning and ``status`` use.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from . import db
from .chunking import sha256_hex
from .fingerprint import dumps as fp_dumps
from .fts_text import index_text
from .schema import (
    BASE_DDL,
    BUILDING_KEY,
    META_KEY,
    SCHEMA_VERSION,
    chunks_table,
    drop_generation_sql,
    files_table,
    fts_ddl,
    fts_table,
    generation_ddl,
    pending_table,
    vec_ddl,
    vec_table,
)
from .vectors import from_b64, is_valid, pack

log = logging.getLogger("memindex.store")

FileKey = tuple[str, str]  # (source, path)


def chunk_id(source: str, path: str, start: int, end: int, chunk_hash: str, model: str) -> str:
    return sha256_hex(f"{source}:{path}:{start}:{end}:{chunk_hash}:{model}")


def now_ms() -> int:
    return int(time.time() * 1000)


class StoreError(RuntimeError):
    pass


@dataclass(slots=True)  # slots: a sync of a huge workspace holds one per file
class IndexedFile:
    hash: str
    size: int
    mtime_ns: int
    error: str | None = None
    extra: str | None = None  # raw JSON (e.g. a session transcript's delta state)


@dataclass
class StoreState:
    """What a reader sees: the live generation and any rebuild in progress."""

    live_generation: int | None
    live_fingerprint: dict[str, Any] | None
    building_generation: int | None = None
    building_fingerprint: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _read_state(conn: db.Connection) -> StoreState:
    try:
        rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except db.OperationalError:
        return StoreState(None, None)
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


def _table_exists(conn: db.Connection, name: str) -> bool:
    return conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = ? AND type IN ('table','view')", (name,)
    ).fetchone() is not None


def _run_script(conn: db.Connection, script: str) -> None:
    """Run DDL statement by statement: ``executescript`` would COMMIT an open transaction."""
    for stmt in script.split(";"):
        if stmt.strip():
            conn.execute(stmt)


def read_indexed_files(conn: db.Connection, gen: int) -> dict[FileKey, IndexedFile]:
    if not _table_exists(conn, files_table(gen)):
        return {}
    rows = conn.execute(f"SELECT source, path, hash, size, mtime_ns, error, extra FROM {files_table(gen)}")
    return {(s, p): IndexedFile(h, sz, mt, err, ex) for s, p, h, sz, mt, err, ex in rows}


def identity_matches(fp: Mapping[str, Any], emb: Mapping[str, Any] | None) -> bool:
    """Does a record's embedding identity belong in an index with fingerprint ``fp``?"""
    if not fp:
        return True
    if emb is None:
        return fp.get("provider") in (None, "none")
    if (fp.get("provider"), fp.get("model"), fp.get("providerKey")) != (
        emb.get("provider"), emb.get("model"), emb.get("provider_key")
    ):
        return False
    dims = fp.get("vectorDims")
    return dims is None or emb.get("dims") is None or int(dims) == int(emb["dims"])


class StoreWriter:
    """Applies index changes. One instance per store in the one writer thread."""

    def __init__(self, path: Path, *, vector_enabled: bool = True, extension_path: str | None = None):
        self.path = Path(path)
        self.conn = db.connect(self.path)
        _run_script(self.conn, BASE_DDL)
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

    def close(self) -> None:
        self.conn.close()

    # -- meta ------------------------------------------------------------------
    def state(self) -> StoreState:
        return _read_state(self.conn)

    def _set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            self.conn.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            self.conn.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value)
            )

    def _ensure_generation(self, gen: int) -> None:
        _run_script(self.conn, generation_ddl(gen))
        if self.fts_error is None:
            try:
                self.conn.execute(fts_ddl(gen))
            except db.OperationalError as exc:
                self.fts_error = str(exc)
                log.warning("fts unavailable: %s (vector-only search)", exc)

    def _ensure_vec(self, gen: int, dims: int) -> bool:
        """Create the vec0 table for this generation; refuse a second dimension."""
        key = f"vec_dims_g{gen}"
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if row is not None and int(row[0]) != dims:
            raise StoreError(f"vector dims {dims} do not match this index's {row[0]}; refusing to mix")
        if row is None:
            self._set_meta(key, str(dims))
        if self.vector_error is None:
            self.conn.execute(vec_ddl(gen, dims))
            return True
        return False

    # -- planning ---------------------------------------------------------------
    def plan(self, gen: int, fingerprint: Mapping[str, Any], pending: Iterable[FileKey],
             deletes: Iterable[FileKey], planned_at: int | None = None) -> str:
        """Record what a sync will write into ``gen``; returns 'live', 'building' or 'stale'.

        The first generation of an empty store is live at once (partial results
        beat none). A later generation is built beside the live one and promoted
        when nothing is pending. A plan older than the last one applied (a
        message redelivered after a crash) is ignored: it would resurrect a
        pending set that newer syncs already replaced.
        """
        with self._lock, self._tx():
            st = self.state()
            if planned_at is not None:
                last = st.extra.get("last_plan_ns")
                if last is not None and int(last) > planned_at:
                    log.info("ignoring a plan from %d ns: a newer one was applied", planned_at)
                    return "stale"
                self._set_meta("last_plan_ns", str(planned_at))
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
            self.conn.execute(f"DELETE FROM {pending_table(gen)}")
            self.conn.executemany(
                f"INSERT OR IGNORE INTO {pending_table(gen)}(source, path) VALUES (?, ?)", list(pending)
            )
            for source, path in deletes:
                self._delete_file(gen, source, path)
            self._set_meta("last_sync_at", str(now_ms()))
        self.maybe_promote(gen)
        return role

    def maybe_promote(self, gen: int) -> bool:
        """Flip a complete rebuild live in one transaction and drop the old tables."""
        with self._lock:
            st = self.state()
            if st.building_generation != gen:
                return False
            left = self.conn.execute(f"SELECT count(*) FROM {pending_table(gen)}").fetchone()[0]
            if left:
                return False
            with self._tx():
                self._set_meta(META_KEY, json.dumps({"generation": gen, "fingerprint": st.building_fingerprint}))
                self._set_meta(BUILDING_KEY, None)
                if st.live_generation is not None:
                    self._drop_generation(st.live_generation)
            log.info("index rebuild complete: generation %d is live", gen)
            return True

    def _drop_generation(self, gen: int) -> None:
        for sql in drop_generation_sql(gen):
            self.conn.execute(sql)
        self._set_meta(f"vec_dims_g{gen}", None)

    # -- writes -------------------------------------------------------------------
    def _tx(self):
        return _Transaction(self.conn)

    def generation_exists(self, gen: int) -> bool:
        return _table_exists(self.conn, files_table(gen))

    def generation_fingerprint(self, gen: int) -> dict[str, Any] | None:
        st = self.state()
        if gen == st.live_generation:
            return st.live_fingerprint
        if gen == st.building_generation:
            return st.building_fingerprint
        return None

    def write_files(self, gen: int, records: Sequence[Mapping[str, Any]]) -> tuple[int, list[str]]:
        """Replace each file's chunks in one transaction.

        Returns (chunks written, paths rejected). A record whose vectors come
        from another provider/model/endpoint than the generation's fingerprint
        is rejected: vectors of different spaces never mix in one index.
        """
        if not self.generation_exists(gen):
            log.info("dropping write for generation %d: it no longer exists", gen)
            return 0, [r["path"] for r in records]
        fp = dict(self.generation_fingerprint(gen) or {})
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (f"vec_dims_g{gen}",)).fetchone()
        if row is not None and fp:
            fp["vectorDims"] = int(row[0])  # the dims this generation's vectors already have
        written, rejected = 0, []
        with self._lock, self._tx():
            for rec in records:
                if not identity_matches(fp, rec.get("embedding")):
                    rejected.append(rec["path"])
                    continue
                written += self._write_file(gen, rec)
        if rejected:
            log.warning("rejected %d write(s) embedded by a different provider than generation %d expects",
                        len(rejected), gen)
        self.maybe_promote(gen)
        return written, rejected

    def append_chunks(self, gen: int, records: Sequence[Mapping[str, Any]]) -> int:
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
        with self._lock, self._tx():
            for rec in records:
                if not identity_matches(fp, rec.get("embedding")):
                    log.warning("rejected an append to %s embedded by a different provider", rec["path"])
                    continue
                row = self.conn.execute(f"SELECT hash FROM {files_table(gen)} WHERE source = ? AND path = ?",
                                        (rec["source"], rec["path"])).fetchone()
                if row is None or row[0] != rec["base_hash"]:
                    log.info("skipping append to %s: it no longer extends the indexed state", rec["path"])
                    continue
                written += self._write_file(gen, rec, replace=False)
        self.maybe_promote(gen)
        return written

    def _write_file(self, gen: int, rec: Mapping[str, Any], replace: bool = True) -> int:
        source, path = rec["source"], rec["path"]
        ident = rec.get("embedding") or {}
        model = ident.get("model") or "fts-only"
        dims = ident.get("dims")
        kept = 0
        if replace:
            self._delete_file(gen, source, path, keep_pending=True)
        else:
            kept = self.conn.execute(f"SELECT count(*) FROM {chunks_table(gen)} WHERE source = ? AND path = ?",
                                     (source, path)).fetchone()[0]
        chunks = rec.get("chunks") or []
        vec_ok = False
        if dims:
            vec_ok = self._ensure_vec(gen, int(dims))
        ts = now_ms()
        ct, ft, vt = chunks_table(gen), fts_table(gen), vec_table(gen)
        fts_rows, vec_rows, cache_rows = [], [], []
        for ch in chunks:
            blob = None
            if ch.get("embedding"):
                vec = from_b64(ch["embedding"])
                if not is_valid(vec, dims):
                    raise StoreError(f"{path}: invalid vector for chunk {ch['start_line']}-{ch['end_line']}")
                blob = pack(vec)
            cid = chunk_id(source, path, ch["start_line"], ch["end_line"], ch["hash"], model)
            cur = self.conn.execute(
                f"INSERT OR REPLACE INTO {ct}(id, source, path, start_line, end_line, hash, kind, text, "
                "embedding, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (cid, source, path, ch["start_line"], ch["end_line"], ch["hash"],
                 rec.get("kind", "markdown"), ch["text"], blob, ts),
            )
            rowid = cur.lastrowid
            fts_rows.append((rowid, index_text(ch.get("fts_text") or ch["text"])))
            if blob is not None:
                if vec_ok:
                    vec_rows.append((rowid, blob))
                if ch.get("cacheable", True):
                    cache_rows.append((ident["provider"], model, ident.get("provider_key", ""), dims,
                                       ch["hash"], blob, ts, ts))
        if self.fts_error is None and fts_rows:
            self.conn.executemany(f"INSERT INTO {ft}(rowid, text) VALUES (?, ?)", fts_rows)
        if vec_rows:
            self.conn.executemany(f"INSERT INTO {vt}(rowid, embedding) VALUES (?, ?)", vec_rows)
        if cache_rows:
            self.conn.executemany(
                "INSERT INTO embedding_cache(provider, model, provider_key, dims, hash, embedding, "
                "updated_at, used_at) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT DO UPDATE SET "
                "embedding = excluded.embedding, updated_at = excluded.updated_at, used_at = excluded.used_at",
                cache_rows,
            )
        hits = rec.get("cache_hits") or []
        if hits and ident:
            self.conn.executemany(
                "UPDATE embedding_cache SET used_at = ? WHERE provider = ? AND model = ? AND "
                "provider_key = ? AND dims = ? AND hash = ?",
                [(ts, ident["provider"], model, ident.get("provider_key", ""), dims, h) for h in hits],
            )
        self.conn.execute(
            f"INSERT INTO {files_table(gen)}(source, path, hash, size, mtime_ns, kind, chunks, error, "
            "indexed_at, extra) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(source, path) DO UPDATE SET "
            "hash=excluded.hash, size=excluded.size, mtime_ns=excluded.mtime_ns, kind=excluded.kind, "
            "chunks=excluded.chunks, error=excluded.error, indexed_at=excluded.indexed_at, extra=excluded.extra",
            (source, path, rec["hash"], rec["size"], rec["mtime_ns"], rec.get("kind", "markdown"),
             kept + len(chunks), rec.get("error"), ts, json.dumps(rec["extra"]) if rec.get("extra") else None),
        )
        self.conn.execute(f"DELETE FROM {pending_table(gen)} WHERE source = ? AND path = ?", (source, path))
        return len(chunks)

    def touch_files(self, gen: int, records: Sequence[Mapping[str, Any]]) -> None:
        """Content unchanged (same hash): only refresh the stat fields."""
        if not self.generation_exists(gen):
            return
        with self._lock, self._tx():
            for r in records:
                self.conn.execute(
                    f"UPDATE {files_table(gen)} SET size = ?, mtime_ns = ? WHERE source = ? AND path = ? "
                    "AND hash = ?", (r["size"], r["mtime_ns"], r["source"], r["path"], r["hash"]),
                )
                self.conn.execute(
                    f"DELETE FROM {pending_table(gen)} WHERE source = ? AND path = ?", (r["source"], r["path"])
                )
        self.maybe_promote(gen)

    def delete_files(self, gen: int, keys: Iterable[FileKey]) -> None:
        if not self.generation_exists(gen):
            return
        with self._lock, self._tx():
            for source, path in keys:
                self._delete_file(gen, source, path)
        self.maybe_promote(gen)

    def _delete_file(self, gen: int, source: str, path: str, keep_pending: bool = False) -> None:
        ct = chunks_table(gen)
        rowids = [r[0] for r in self.conn.execute(
            f"SELECT rowid FROM {ct} WHERE source = ? AND path = ?", (source, path))]
        if rowids:
            marks = ",".join("?" * len(rowids))
            if self.fts_error is None:
                self.conn.execute(f"DELETE FROM {fts_table(gen)} WHERE rowid IN ({marks})", rowids)
            if self.vector_error is None and _table_exists(self.conn, vec_table(gen)):
                self.conn.execute(f"DELETE FROM {vec_table(gen)} WHERE rowid IN ({marks})", rowids)
            self.conn.execute(f"DELETE FROM {ct} WHERE rowid IN ({marks})", rowids)
        self.conn.execute(f"DELETE FROM {files_table(gen)} WHERE source = ? AND path = ?", (source, path))
        if not keep_pending:
            self.conn.execute(f"DELETE FROM {pending_table(gen)} WHERE source = ? AND path = ?", (source, path))

    def prune_cache(self, max_entries: int | None) -> int:
        """Least-recently-used pruning of the embedding cache."""
        if not max_entries or max_entries <= 0:
            return 0
        with self._lock, self._tx():
            n = self.conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
            if n <= max_entries:
                return 0
            self.conn.execute(
                "DELETE FROM embedding_cache WHERE rowid IN (SELECT rowid FROM embedding_cache "
                "ORDER BY used_at ASC LIMIT ?)", (n - max_entries,),
            )
            return n - max_entries

    def set_meta(self, key: str, value: str | None) -> None:
        with self._lock, self._tx():
            self._set_meta(key, value)


class _Transaction:
    def __init__(self, conn: db.Connection):
        self.conn = conn
        self.depth_owner = False

    def __enter__(self):
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")
            self.depth_owner = True
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        if not self.depth_owner:
            return False
        if exc_type is None:
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("ROLLBACK")
        return False


class StoreReader:
    """Read-only access to a store; one connection per thread, reopened if the file changes."""

    def __init__(self, path: Path, *, vector_enabled: bool = True, extension_path: str | None = None):
        self.path = Path(path)
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
        c = getattr(self._local, "conn", None)
        if c is not None and getattr(self._local, "ino", None) == ino:
            return c
        if c is not None:
            c.close()
        c = db.connect(self.path, readonly=True)
        if self.vector_enabled:
            self.vector_error = db.load_vector_extension(c, self.extension_path)
        self._local.conn, self._local.ino = c, ino
        return c

    def state(self) -> StoreState:
        c = self.conn()
        return _read_state(c) if c is not None else StoreState(None, None)

    def indexed_files(self, gen: int) -> dict[FileKey, IndexedFile]:
        c = self.conn()
        return read_indexed_files(c, gen) if c is not None else {}

    def pending_count(self, gen: int | None) -> int:
        """Files a sync announced for ``gen`` that are not written yet (0 if unknown)."""
        c = self.conn()
        if c is None or gen is None:
            return 0
        try:
            return c.execute(f"SELECT count(*) FROM {pending_table(gen)}").fetchone()[0]
        except db.OperationalError:  # no such generation (yet)
            return 0

    def table_exists(self, name: str) -> bool:
        c = self.conn()
        return c is not None and _table_exists(c, name)

    def close(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None


def open_writer(settings: Any) -> StoreWriter:
    vec = settings.memory_search["store"]["vector"]
    return StoreWriter(settings.store_path, vector_enabled=vec["enabled"], extension_path=vec["extensionPath"])


def open_reader(settings: Any) -> StoreReader:
    vec = settings.memory_search["store"]["vector"]
    return StoreReader(settings.store_path, vector_enabled=vec["enabled"], extension_path=vec["extensionPath"])


def fingerprint_json(fp: Mapping[str, Any]) -> str:
    return fp_dumps(fp)
