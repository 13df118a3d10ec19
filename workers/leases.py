"""Leases on queued files: a plan skips a file another plan of the same index already queued.

Two syncs of one agent close together (``memindex index`` or a backfill while the watcher's
sync of the same files is in flight) each found the files unindexed and queued them: every
file was read, embedded and written twice (240 writes for 120 files). Each ``index_files``
group now leaves a lease per file beside the messages: the file's size and mtime as planned,
in that generation. A later plan of the generation skips a file whose lease matches the file
as it is now, and asks the writer to keep it pending (``write_plan``'s ``keep``) until the
write the first plan queued arrives.

A lease never outlives the work it stands for, so the Markdown still converges:
- it lives where the messages live (Redis; this process on the embedded broker), so a broker
  that loses its data loses both, and none holds while the broker has nothing queued or running
  (``dispatch_plan`` asks);
- a message that fails for good releases its files (``workers/failures.py``), a watcher whose
  probe says work in flight may have been dropped (an outage) forgets every lease, and a writer
  that finds its predecessor died holding acknowledged writes forgets the store's
  (``workers/writer.py``);
- it expires after ``LEASE_TTL_S``;
- a file changed since (other size or mtime), a file the store holds at that stat already (a
  re-plan for its vectors), a forced re-index and a rebuild (another generation) are planned
  as before.

Functions take the broker (dramatiq's) rather than importing ``workers.broker``: the failure
reporter that releases leases is imported by the broker module.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any, Iterable, Sequence

from memindex.pipeline.index.records import FileJob

# Longest a queued file stays skipped by other plans when nothing releases its lease. A backfill
# of 10,000 files on a local model takes about an hour; past this a re-plan queues it again.
LEASE_TTL_S = 6 * 3600
_CHUNK = 1000  # fields per HMGET / HSET

_local: dict[str, dict[str, tuple[str, float]]] = {}  # embedded broker: key -> field -> (value, expiry)
_local_lock = threading.Lock()


def _key(broker: Any, store_path: Any, gen: int | str) -> str:
    digest = hashlib.sha1(str(store_path).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{getattr(broker, 'namespace', 'memindex')}:lease:{digest}:{gen}"


def _field(source: str, path: str) -> str:
    return f"{source}\0{path}"


def _value(job: FileJob) -> str:
    return f"{job.size}:{job.mtime_ns}"


def _redis(broker: Any) -> Any:
    return getattr(broker, "client", None)


def held(broker: Any, store_path: Any, gen: int, jobs: Sequence[FileJob]) -> set[tuple[str, str]]:
    """Keys of ``jobs`` another plan of ``gen`` queued at the same size and mtime (see module)."""
    if not jobs:
        return set()
    key = _key(broker, store_path, gen)
    client = _redis(broker)
    out: set[tuple[str, str]] = set()
    if client is None:
        now = time.monotonic()
        with _local_lock:
            leases = _local.get(key, {})
            for j in jobs:
                got = leases.get(_field(j.source, j.path))
                if got is not None and got[1] > now and got[0] == _value(j):
                    out.add((j.source, j.path))
        return out
    for i in range(0, len(jobs), _CHUNK):
        part = jobs[i:i + _CHUNK]
        values = client.hmget(key, [_field(j.source, j.path) for j in part])
        for j, v in zip(part, values):
            if v is not None and v.decode("utf-8", "replace") == _value(j):
                out.add((j.source, j.path))
    return out


def grant(broker: Any, store_path: Any, gen: int, jobs: Iterable[FileJob]) -> None:
    """Lease ``jobs`` (just queued) for ``LEASE_TTL_S``."""
    mapping = {_field(j.source, j.path): _value(j) for j in jobs}
    if not mapping:
        return
    key = _key(broker, store_path, gen)
    client = _redis(broker)
    if client is None:
        expiry = time.monotonic() + LEASE_TTL_S
        with _local_lock:
            leases = _local.setdefault(key, {})
            for f, v in mapping.items():
                leases[f] = (v, expiry)
        return
    items = list(mapping.items())
    pipe = client.pipeline(transaction=False)
    for i in range(0, len(items), _CHUNK):
        pipe.hset(key, mapping=dict(items[i:i + _CHUNK]))
    pipe.expire(key, LEASE_TTL_S)
    pipe.execute()


def release(broker: Any, store_path: Any, gen: int, keys: Iterable[tuple[str, str]]) -> None:
    """End the leases of ``keys`` (their message failed for good: nothing will write them)."""
    fields = [_field(s, p) for s, p in keys]
    if not fields:
        return
    key = _key(broker, store_path, gen)
    client = _redis(broker)
    if client is None:
        with _local_lock:
            leases = _local.get(key, {})
            for f in fields:
                leases.pop(f, None)
        return
    for i in range(0, len(fields), _CHUNK):
        client.hdel(key, *fields[i:i + _CHUNK])


def forget_store(broker: Any, store_path: Any) -> int:
    """End every lease on one store (its writer died holding acknowledged writes: files leased
    as queued may never be written). Returns how many keys went."""
    pattern = _key(broker, store_path, "*")
    client = _redis(broker)
    if client is None:
        prefix = pattern[:-1]
        with _local_lock:
            gone = [k for k in _local if k.startswith(prefix)]
            for k in gone:
                del _local[k]
        return len(gone)
    keys = list(client.scan_iter(match=pattern, count=500))
    if keys:
        client.delete(*keys)
    return len(keys)


def forget_all(broker: Any) -> int:
    """End every lease (work in flight may have been dropped); returns how many keys went."""
    client = _redis(broker)
    if client is None:
        with _local_lock:
            n = len(_local)
            _local.clear()
        return n
    keys = list(client.scan_iter(match=f"{getattr(broker, 'namespace', 'memindex')}:lease:*", count=500))
    for i in range(0, len(keys), _CHUNK):
        client.delete(*keys[i:i + _CHUNK])
    return len(keys)
