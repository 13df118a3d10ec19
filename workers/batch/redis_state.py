"""One agent's batch bookkeeping in Redis: the same operations as ``state.BatchStateStore``.

On a Redis deployment the batch actors are compute-side (issue 18): they may run on a
host that sees neither the workspaces nor the state dir, so the items waiting for a
job, the jobs and their collected vectors live in Redis, next to the queue messages
that refer to them (the same durability: what Redis loses, the next sync re-plans from
the Markdown). The embedded broker keeps the SQLite file beside the store (one host
by definition, and it survives the process).

Keys, per agent (``<ns>`` = ``memindex:batch:<agent key>``, a hash of the store path):
``<ns>:items`` (id -> item fields without the record), ``<ns>:records`` (id -> record
message; only read when a job is claimed or filled), ``<ns>:uniq`` (generation,
provider key, file and hash -> id: a re-planned sync never queues a file twice),
``<ns>:seq``, ``<ns>:jobs`` (key -> job row), ``<ns>:results:<job>`` (chunk hash ->
float32 vector), ``<ns>:leases`` (name -> token, until).

SQLite's ``BEGIN IMMEDIATE`` becomes a short per-agent lock (``<ns>:lock``, SET NX
with an expiry): every read-modify-write (claim, take over, token-checked update,
lease) holds it, so exactly one worker wins a claim or a takeover, as with the file.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from memindex.pipeline.index.records import FileRecord
from memindex.pipeline.store.vectors import pack, unpack
from memindex.workers.wire import record_from_json, record_json
from memindex.workers.batch.state import ACTIVE, DONE, KEEP_DONE, Item, Job, job_defaults

NS = "memindex:batch"
LOCK_TTL_MS = 30_000  # a holder that died mid-operation blocks the agent's batch work this long at most
LOCK_WAIT_S = 60.0

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def agent_key(store_path: Path | str) -> str:
    """A store's batch namespace: stable across hosts for the same store path string."""
    return hashlib.sha256(str(store_path).encode()).hexdigest()[:20]


class RedisBatchState:
    """``BatchStateStore``'s interface over one agent's Redis keys (see the module doc)."""

    def __init__(self, client: Any, store_path: Path | str) -> None:
        self.client = client
        self.ns = f"{NS}:{agent_key(store_path)}"
        self._release = client.register_script(_RELEASE)

    def close(self) -> None:
        pass  # the broker owns the connection pool

    def __enter__(self) -> "RedisBatchState":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def k(self, name: str) -> str:
        return f"{self.ns}:{name}"

    def exists(self) -> bool:
        return bool(self.client.exists(self.k("jobs"), self.k("items")))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        token = uuid.uuid4().hex
        deadline = time.monotonic() + LOCK_WAIT_S
        while not self.client.set(self.k("lock"), token, nx=True, px=LOCK_TTL_MS):
            if time.monotonic() > deadline:
                raise TimeoutError(f"batch state lock {self.k('lock')} held for over {LOCK_WAIT_S:g} s")
            time.sleep(0.005)
        try:
            yield
        finally:
            self._release(keys=[self.k("lock")], args=[token])

    def _items(self) -> dict[int, dict[str, Any]]:
        return {int(i): json.loads(v) for i, v in (self.client.hgetall(self.k("items")) or {}).items()}

    # --- items ----------------------------------------------------------------------
    def add_items(self, generation: int, provider_key: str, entries: Iterable[tuple[FileRecord, Sequence[str]]]
                  ) -> int:
        now = time.time()
        entries = list(entries)
        uniqs = [json.dumps([generation, provider_key, r.source, r.path, r.hash]) for r, _ in entries]
        with self._locked():
            # Two round trips and one transaction per call, not per record (a backfill's message
            # carries GROUP_FILES records).
            known = self.client.hmget(self.k("uniq"), uniqs) if uniqs else []
            fresh = [(u, e) for u, e, k in zip(uniqs, entries, known) if k is None]
            first: dict[str, tuple[FileRecord, Sequence[str]]] = {}
            for u, e in fresh:
                first.setdefault(u, e)  # the same file twice in one call: the first, as INSERT OR IGNORE
            fresh = list(first.items())
            if not fresh:
                return 0
            last = int(self.client.incrby(self.k("seq"), len(fresh)))
            pipe = self.client.pipeline(transaction=True)
            for item_id, (uniq, (rec, missing)) in enumerate(fresh, start=last - len(fresh) + 1):
                meta = {"generation": generation, "provider_key": provider_key, "source": rec.source,
                        "path": rec.path, "file_hash": rec.hash, "missing": sorted(missing), "job": None,
                        "created_at": now, "uniq": uniq}
                pipe.hset(self.k("records"), item_id, record_json(rec))
                pipe.hset(self.k("items"), item_id, json.dumps(meta))
                pipe.hset(self.k("uniq"), uniq, item_id)
            pipe.execute()
        return len(fresh)

    def queued(self) -> tuple[int, int, float | None, float | None]:
        q = [m for m in self._items().values() if m["job"] is None]
        if not q:
            return 0, 0, None, None
        times = [m["created_at"] for m in q]
        return len(q), sum(len(m["missing"]) for m in q), min(times), max(times)

    def queued_provider_keys(self) -> list[str]:
        return sorted({m["provider_key"] for m in self._items().values() if m["job"] is None})

    def _delete(self, ids_meta: Iterable[tuple[int, dict[str, Any]]]) -> int:
        pipe = self.client.pipeline(transaction=True)
        n = 0
        for i, m in ids_meta:
            pipe.hdel(self.k("items"), i)
            pipe.hdel(self.k("records"), i)
            pipe.hdel(self.k("uniq"), m["uniq"])
            n += 1
        pipe.execute()
        return n

    def drop_queued_except(self, provider_key: str) -> int:
        with self._locked():
            return self._delete((i, m) for i, m in self._items().items()
                                if m["job"] is None and m["provider_key"] != provider_key)

    def _set_job(self, updates: dict[int, dict[str, Any]], job: str | None) -> None:
        if updates:
            for m in updates.values():
                m["job"] = job
            self.client.hset(self.k("items"), mapping={i: json.dumps(m) for i, m in updates.items()})

    def claim(self, job_key: str, provider_key: str, max_hashes: int) -> list[Item]:
        with self._locked():
            seen: set[str] = set()
            take: dict[int, dict[str, Any]] = {}
            for i, m in sorted(self._items().items()):
                if m["job"] is not None or m["provider_key"] != provider_key:
                    continue
                hashes = set(m["missing"])
                if take and len(seen | hashes) > max_hashes:
                    break
                seen |= hashes
                take[i] = m
            self._set_job(take, job_key)
        return self.items_for(job_key)

    def items_for(self, job_key: str) -> list[Item]:
        mine = sorted((i, m) for i, m in self._items().items() if m["job"] == job_key)
        if not mine:
            return []
        records = self.client.hmget(self.k("records"), [i for i, _ in mine])
        return [Item(i, m["generation"], record_from_json(r), m["missing"])
                for (i, m), r in zip(mine, records) if r is not None]

    def requeue(self, job_key: str) -> None:
        with self._locked():
            self._set_job({i: m for i, m in self._items().items() if m["job"] == job_key}, None)

    def delete_items(self, ids: Sequence[int]) -> None:
        if not ids:
            return
        with self._locked():
            metas = self.client.hmget(self.k("items"), list(ids))
            self._delete((i, json.loads(m)) for i, m in zip(ids, metas) if m is not None)

    def pending_items(self) -> int:
        return int(self.client.hlen(self.k("items")))

    # --- jobs -------------------------------------------------------------------------
    def _jobs(self) -> list[dict[str, Any]]:
        return [json.loads(v) for v in (self.client.hvals(self.k("jobs")) or [])]

    def create_job(self, **fields: Any) -> None:
        fields.setdefault("created_at", time.time())
        row = {**job_defaults(), **fields}
        with self._locked():
            if not self.client.hsetnx(self.k("jobs"), row["key"], json.dumps(row)):
                raise ValueError(f"batch job {row['key']} exists")

    def job(self, key: str) -> Any:
        raw = self.client.hget(self.k("jobs"), key)
        return None if raw is None else Job(json.loads(raw))

    def jobs(self, *, active_only: bool = False, limit: int = 100) -> list[Any]:
        rows = [r for r in self._jobs() if not active_only or r["phase"] in ACTIVE]
        rows.sort(key=lambda r: r["created_at"] or 0, reverse=True)
        return [Job(r) for r in rows[:limit]]

    def state_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self._jobs():
            out[r["state"]] = out.get(r["state"], 0) + 1
        return out

    def update(self, key: str, token: str | None = None, **fields: Any) -> bool:
        with self._locked():
            raw = self.client.hget(self.k("jobs"), key)
            if raw is None:
                return False
            row = json.loads(raw)
            if token is not None and row["lease_token"] != token:
                return False
            row.update(fields)
            self.client.hset(self.k("jobs"), key, json.dumps(row))
            return True

    def take_over(self, key: str, old_token: str | None, new_token: str, lease_until: float, now: float) -> bool:
        with self._locked():
            raw = self.client.hget(self.k("jobs"), key)
            if raw is None:
                return False
            row = json.loads(raw)
            if row["lease_token"] != old_token or (row["lease_until"] is not None and row["lease_until"] >= now):
                return False
            row.update(lease_token=new_token, lease_until=lease_until)
            self.client.hset(self.k("jobs"), key, json.dumps(row))
            return True

    def orphans(self, now: float) -> list[Any]:
        return [Job(r) for r in self._jobs()
                if r["phase"] in ACTIVE and (r["lease_until"] is None or r["lease_until"] < now)]

    def prune_done(self, keep: int = KEEP_DONE) -> None:
        with self._locked():
            done = sorted((r for r in self._jobs() if r["phase"] == DONE), key=lambda r: r["created_at"] or 0,
                          reverse=True)
            old = [r["key"] for r in done[keep:]]
            if old:
                self.client.hdel(self.k("jobs"), *old)

    # --- results ----------------------------------------------------------------------
    def put_results(self, job_key: str, vectors: dict[str, list[float]]) -> None:
        if vectors:
            self.client.hset(self.k(f"results:{job_key}"), mapping={h: pack(v) for h, v in vectors.items()})

    def results(self, job_key: str, hashes: Iterable[str]) -> dict[str, list[float]]:
        wanted = list(dict.fromkeys(hashes))
        if not wanted:
            return {}
        got = self.client.hmget(self.k(f"results:{job_key}"), wanted)
        return {h: unpack(b) for h, b in zip(wanted, got) if b is not None}

    def drop_results(self, job_key: str) -> None:
        self.client.delete(self.k(f"results:{job_key}"))

    # --- named leases -----------------------------------------------------------------
    def lease(self, name: str, token: str, until: float, now: float) -> bool:
        with self._locked():
            raw = self.client.hget(self.k("leases"), name)
            if raw is not None:
                held = json.loads(raw)
                if held["token"] != token and held["until"] >= now:
                    return False
            self.client.hset(self.k("leases"), name, json.dumps({"token": token, "until": until}))
            return True

    def lease_alive(self, name: str, now: float) -> bool:
        raw = self.client.hget(self.k("leases"), name)
        return raw is not None and json.loads(raw)["until"] >= now

    def unlease(self, name: str, token: str) -> None:
        with self._locked():
            raw = self.client.hget(self.k("leases"), name)
            if raw is not None and json.loads(raw)["token"] == token:
                self.client.hdel(self.k("leases"), name)
