"""Durable bookkeeping of one agent's batch work: ``<store>.batches.sqlite`` (embedded broker).

With the Redis broker the same operations run on Redis keys instead
(``redis_state.py``: the batch actors are compute-side there and see no file);
``backend.open_for`` picks. The file sits beside the agent's store (``<state>/memory/<agentId>.batches.sqlite``
by default) and is written only by the batch actors, never by the store's
writer. Why a separate file rather than writer messages into the store:
the batch actors need synchronous, atomic answers (claim these queued items,
take over this job only if its lease expired, is this poll message still the
owner?) that a fire-and-forget message to the single writer cannot give, and
the pending records (chunk texts, a backfill's worth) would otherwise clog
the one serial write queue. On the embedded broker every worker is a thread
of one process on the host of the stores (or a CLI process reading it); SQLite (WAL, busy timeout) serialises
their short transactions.

Three tables:
- ``items``: writer records waiting for vectors. ``job`` NULL = queued for the
  next submission; a record is unique per (generation, provider key, file,
  content hash), so a re-planned sync never queues the same file twice.
- ``jobs``: one row per submitted batch: ids, provider, state, counts, and a
  lease (``lease_token`` / ``lease_until``). Only the holder of the current
  token acts on a job; an expired lease is taken over by the janitor, which
  is how a restarted worker resumes a poll instead of resubmitting.
- ``results``: vectors collected from a finished batch, until written.
"""

from __future__ import annotations

import functools
import json
import sqlite3 as stdlib_sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Sequence

from memindex.pipeline.index.records import FileRecord
from memindex.pipeline.store import db
from memindex.pipeline.store.vectors import pack, unpack
from memindex.workers.wire import record_from_json, record_json

DDL = """
CREATE TABLE IF NOT EXISTS items (
  id INTEGER PRIMARY KEY,
  generation INTEGER NOT NULL,
  provider_key TEXT NOT NULL,
  source TEXT NOT NULL,
  path TEXT NOT NULL,
  file_hash TEXT NOT NULL,
  record TEXT NOT NULL,
  missing TEXT NOT NULL,
  job TEXT,
  created_at REAL NOT NULL,
  UNIQUE (generation, provider_key, source, path, file_hash)
);
CREATE INDEX IF NOT EXISTS idx_items_job ON items(job);
CREATE TABLE IF NOT EXISTS jobs (
  key TEXT PRIMARY KEY,
  agent TEXT NOT NULL,
  provider TEXT NOT NULL,
  model TEXT NOT NULL,
  provider_key TEXT NOT NULL,
  generation INTEGER,
  phase TEXT NOT NULL,
  state TEXT NOT NULL,
  remote_status TEXT,
  remote_id TEXT,
  input_file TEXT,
  custom_ids TEXT,
  files INTEGER NOT NULL DEFAULT 0,
  requests INTEGER NOT NULL DEFAULT 0,
  cached INTEGER NOT NULL DEFAULT 0,
  completed INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0,
  redone INTEGER NOT NULL DEFAULT 0,
  poll_errors INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL,
  submitted_at REAL,
  deadline REAL,
  cancel_deadline REAL,
  finished_at REAL,
  lease_token TEXT,
  lease_until REAL,
  outcome TEXT,
  error TEXT
);
CREATE TABLE IF NOT EXISTS results (
  job TEXT NOT NULL,
  hash TEXT NOT NULL,
  vector BLOB NOT NULL,
  PRIMARY KEY (job, hash)
);
CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, token TEXT NOT NULL, until REAL NOT NULL);
"""

# Phases, in order. A job is "in flight" (holds a provider slot) while submitting/polling/cancelling.
SUBMITTING, POLLING, CANCELLING, COLLECTED, FINISHING, DONE = (
    "submitting", "polling", "cancelling", "collected", "finishing", "done")
IN_FLIGHT = (SUBMITTING, POLLING, CANCELLING)
ACTIVE = IN_FLIGHT + (COLLECTED, FINISHING)
KEEP_DONE = 50  # finished jobs kept for `memindex batches`


@functools.cache
def job_defaults() -> dict[str, Any]:
    """Every column of ``jobs`` with its default (None where it has none), read from ``DDL``
    itself: the Redis backend's job rows take exactly this shape, so a job reads the same
    from either backend."""
    conn = stdlib_sqlite3.connect(":memory:")  # only to read DDL's columns: any driver does
    try:
        conn.executescript(DDL)
        cols = conn.execute("PRAGMA table_info(jobs)").fetchall()  # cid, name, type, notnull, default, pk
        return {name: (None if default is None else conn.execute(f"SELECT {default}").fetchone()[0])
                for _, name, _, _, default, _ in cols}
    finally:
        conn.close()


def new_token() -> str:
    return uuid.uuid4().hex


def state_path(store_path: Path) -> Path:
    return Path(store_path).with_name(Path(store_path).stem + ".batches.sqlite")


@dataclass
class Item:
    id: int
    generation: int
    record: FileRecord
    missing: list[str]


@dataclass
class Job:
    row: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.row[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def id_map(self) -> dict[str, str]:
        ids: dict[str, str] = json.loads(self.row["custom_ids"] or "{}")
        return ids


class BatchStateStore:
    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.conn = db.connect(self.path, readonly=readonly)
        if not readonly:
            with self._tx():  # one transaction: a reader never sees half the tables
                for stmt in DDL.split(";"):
                    if stmt.strip():
                        self.conn.execute(stmt)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "BatchStateStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _tx(self) -> "_Tx":
        return _Tx(self.conn)

    # --- items ----------------------------------------------------------------------
    def add_items(self, generation: int, provider_key: str, entries: Iterable[tuple[FileRecord, Sequence[str]]]
                  ) -> int:
        """Queue records (with their missing chunk hashes); duplicates are ignored. Returns rows added."""
        now = time.time()
        # Stored in their queue-message form (JSON-safe): the file outlives this process.
        rows = [(generation, provider_key, r.source, r.path, r.hash, record_json(r), json.dumps(sorted(m)),
                 now) for r, m in entries]
        with self._tx():
            before = self.conn.total_changes
            self.conn.executemany(
                "INSERT OR IGNORE INTO items(generation, provider_key, source, path, file_hash, record, missing, "
                "created_at) VALUES (?,?,?,?,?,?,?,?)", rows)
            return self.conn.total_changes - before

    def queued(self) -> tuple[int, int, float | None, float | None]:
        """(items, missing hashes incl. duplicates, oldest created_at, newest created_at) of queued items."""
        n, hashes, oldest, newest = self.conn.execute(
            "SELECT count(*), coalesce(sum(json_array_length(missing)), 0), min(created_at), max(created_at) "
            "FROM items WHERE job IS NULL").fetchone()
        return int(n), int(hashes), oldest, newest

    def queued_provider_keys(self) -> list[str]:
        return [k for (k,) in self.conn.execute("SELECT DISTINCT provider_key FROM items WHERE job IS NULL")]

    def drop_queued_except(self, provider_key: str) -> int:
        """Forget queued items embedded for another provider/model (the config changed)."""
        with self._tx():
            cur = self.conn.execute("DELETE FROM items WHERE job IS NULL AND provider_key != ?", (provider_key,))
            return cur.rowcount

    def claim(self, job_key: str, provider_key: str, max_hashes: int) -> list[Item]:
        """Attach queued items to a job, in arrival order, up to ``max_hashes`` distinct chunk hashes."""
        with self._tx():
            rows = self.conn.execute(
                "SELECT id, generation, missing FROM items WHERE job IS NULL AND provider_key = ? ORDER BY id",
                (provider_key,)).fetchall()
            seen: set[str] = set()
            take: list[int] = []
            for item_id, _gen, missing in rows:
                hashes = set(json.loads(missing))
                if take and len(seen | hashes) > max_hashes:
                    break
                seen |= hashes
                take.append(item_id)
            for i in range(0, len(take), 500):
                part = take[i:i + 500]
                self.conn.execute(f"UPDATE items SET job = ? WHERE id IN ({','.join('?' * len(part))})",
                                  [job_key, *part])
        return self.items_for(job_key)

    def items_for(self, job_key: str) -> list[Item]:
        return [Item(i, g, record_from_json(rec), json.loads(m)) for i, g, rec, m in self.conn.execute(
            "SELECT id, generation, record, missing FROM items WHERE job = ? ORDER BY id", (job_key,))]

    def requeue(self, job_key: str) -> None:
        with self._tx():
            self.conn.execute("UPDATE items SET job = NULL WHERE job = ?", (job_key,))

    def delete_items(self, ids: Sequence[int]) -> None:
        with self._tx():
            self.conn.executemany("DELETE FROM items WHERE id = ?", [(i,) for i in ids])

    def pending_items(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM items").fetchone()[0])

    # --- jobs -------------------------------------------------------------------------
    def create_job(self, **fields: Any) -> None:
        fields.setdefault("created_at", time.time())
        cols = ",".join(fields)
        with self._tx():
            self.conn.execute(f"INSERT INTO jobs({cols}) VALUES ({','.join('?' * len(fields))})",
                              list(fields.values()))

    def job(self, key: str) -> Job | None:
        cur = self.conn.execute("SELECT * FROM jobs WHERE key = ?", (key,))
        row = cur.fetchone()
        if row is None:
            return None
        return Job(dict(zip([d[0] for d in cur.description], row)))

    def jobs(self, *, active_only: bool = False, limit: int = 100) -> list[Job]:
        where = f"WHERE phase IN ({','.join('?' * len(ACTIVE))})" if active_only else ""
        cur = self.conn.execute(f"SELECT * FROM jobs {where} ORDER BY created_at DESC LIMIT ?",
                                [*(ACTIVE if active_only else ()), limit])
        cols = [d[0] for d in cur.description]
        return [Job(dict(zip(cols, r))) for r in cur.fetchall()]

    def state_counts(self) -> dict[str, int]:
        """Job count by state over every job kept (active ones, and the last KEEP_DONE finished)."""
        return dict(self.conn.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())

    def update(self, key: str, token: str | None = None, **fields: Any) -> bool:
        """Set fields; with ``token`` only while that token still owns the job. True when applied."""
        sets = ",".join(f"{k} = ?" for k in fields)
        sql, args = f"UPDATE jobs SET {sets} WHERE key = ?", [*fields.values(), key]
        if token is not None:
            sql += " AND lease_token = ?"
            args.append(token)
        with self._tx():
            return self.conn.execute(sql, args).rowcount == 1

    def take_over(self, key: str, old_token: str | None, new_token: str, lease_until: float, now: float) -> bool:
        """Become the owner of a job whose lease expired (exactly one caller wins)."""
        with self._tx():
            return self.conn.execute(
                "UPDATE jobs SET lease_token = ?, lease_until = ? WHERE key = ? AND lease_token IS ? "
                "AND (lease_until IS NULL OR lease_until < ?)", (new_token, lease_until, key, old_token, now)
            ).rowcount == 1

    def orphans(self, now: float) -> list[Job]:
        cur = self.conn.execute(
            f"SELECT * FROM jobs WHERE phase IN ({','.join('?' * len(ACTIVE))}) AND "
            "(lease_until IS NULL OR lease_until < ?)", [*ACTIVE, now])
        cols = [d[0] for d in cur.description]
        return [Job(dict(zip(cols, r))) for r in cur.fetchall()]

    def prune_done(self, keep: int = KEEP_DONE) -> None:
        with self._tx():
            self.conn.execute(
                "DELETE FROM jobs WHERE phase = ? AND key NOT IN (SELECT key FROM jobs WHERE phase = ? "
                "ORDER BY created_at DESC LIMIT ?)", (DONE, DONE, keep))

    # --- results ----------------------------------------------------------------------
    def put_results(self, job_key: str, vectors: dict[str, list[float]]) -> None:
        with self._tx():
            self.conn.executemany("INSERT OR REPLACE INTO results(job, hash, vector) VALUES (?,?,?)",
                                  [(job_key, h, pack(v)) for h, v in vectors.items()])

    def results(self, job_key: str, hashes: Iterable[str]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        wanted = list(dict.fromkeys(hashes))
        for i in range(0, len(wanted), 500):
            part = wanted[i:i + 500]
            for h, blob in self.conn.execute(
                    f"SELECT hash, vector FROM results WHERE job = ? AND hash IN ({','.join('?' * len(part))})",
                    [job_key, *part]):
                out[h] = unpack(blob)
        return out

    def drop_results(self, job_key: str) -> None:
        with self._tx():
            self.conn.execute("DELETE FROM results WHERE job = ?", (job_key,))

    # --- named leases (the one scheduled submitter per agent) ------------------------------
    def lease(self, name: str, token: str, until: float, now: float) -> bool:
        """Take or renew a named lease: free, expired, or already ours."""
        with self._tx():
            row = self.conn.execute("SELECT token, until FROM leases WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] != token and row[1] >= now:
                return False
            self.conn.execute("INSERT INTO leases(name, token, until) VALUES (?,?,?) ON CONFLICT(name) DO UPDATE "
                              "SET token = excluded.token, until = excluded.until", (name, token, until))
            return True

    def lease_alive(self, name: str, now: float) -> bool:
        row = self.conn.execute("SELECT until FROM leases WHERE name = ?", (name,)).fetchone()
        return row is not None and row[0] >= now

    def unlease(self, name: str, token: str) -> None:
        with self._tx():
            self.conn.execute("DELETE FROM leases WHERE name = ? AND token = ?", (name, token))


class _Tx:
    """BEGIN IMMEDIATE ... COMMIT: claims and takeovers are atomic across processes."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.owner = False

    def __enter__(self) -> Any:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")
            self.owner = True
        return self.conn

    def __exit__(self, exc_type: Any, *rest: Any) -> Literal[False]:
        if self.owner:
            self.conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
        return False


def open_state(store_path: Path, *, readonly: bool = False) -> BatchStateStore | None:
    """The agent's batch state file (None when read-only and there is none yet)."""
    path = state_path(store_path)
    if readonly and not path.exists():
        return None
    st = BatchStateStore(path, readonly=readonly)
    if readonly and st.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'jobs'").fetchone() is None:
        st.close()  # created this instant, tables not committed yet
        return None
    return st


def iter_summaries(store: Any, limit: int = 20) -> Iterator[dict[str, Any]]:
    """Jobs, newest first, as plain dicts for display (no vectors, no ids map)."""
    for j in store.jobs(limit=limit):
        row = dict(j.row)
        row.pop("custom_ids", None)
        row.pop("lease_token", None)
        yield row
