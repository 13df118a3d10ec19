"""Queue depth (P3), in messages: ready, delayed, running, prefetched and dead per queue.

A message carries one sync request or a group of up to ``messages.GROUP_FILES``
files; files pending per agent come from the stores (``producers.enqueue.pending_files``).
On Redis, ``running`` is what live worker processes say they are processing
(``workers/lifecycle.py``: entries of a dead process expire), and ``prefetched``
what live consumers took off the queue but have not started; a dead consumer's
messages count as neither (dramatiq redelivers them, see ``broker.HEARTBEAT_TIMEOUT_MS``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, cast

from dramatiq import Message
from dramatiq.common import q_name

from memindex.workers.failures import message_keys
from memindex.workers.guard import REFUSED
from memindex.workers.lifecycle import STOPPING, processes
from memindex.workers.broker import (BATCH_QUEUE, EMBED_QUEUE, HEARTBEAT_TIMEOUT_MS, QUEUES, SHARDS_KEY, get_broker, is_write_queue,
                                     redis_of, shard_queues, stub_broker)

log = logging.getLogger("memindex.queues")


# Write shards ``write.<k>`` looked for beyond the deployment's N (one pipelined EXISTS each).
STRANDED_PROBE = 64


def all_queues() -> tuple[str, ...]:
    """Every queue of this deployment: the four named ones, the write shards ``write.<k>``, and
    any other ``write.<k>`` that holds messages (a process that routed by another shard count
    left them where no writer looks: counted, so `index` does not say done and `health` names it)."""
    shards = shard_queues()
    return (*QUEUES, *shards, *_stranded(set(shards)))


def _stranded(known: set[str]) -> list[str]:
    broker = get_broker()
    stub = stub_broker(broker)
    if stub is not None:
        return []
    rb = redis_of(broker)
    names = [f"write.{k}" for k in range(STRANDED_PROBE) if f"write.{k}" not in known]
    pipe = rb.client.pipeline(transaction=False)
    for q in names:
        pipe.exists(f"{rb.namespace}:{q}.msgs")
    return [q for q, there in zip(names, pipe.execute()) if there]


def _dead(queue: str) -> int:
    """Dead-lettered messages of one queue (dramatiq's ``<ns>:<queue>.XQ`` on Redis)."""
    broker = get_broker()
    stub = stub_broker(broker)
    if stub is not None:
        return len(stub.dead_letters_by_queue.get(queue, []))
    rb = redis_of(broker)
    return rb.client.zcard(f"{rb.namespace}:{queue}.XQ")


def depth() -> dict[str, dict[str, int]]:
    """Per queue, in messages: ready / delayed / running / prefetched / dead."""
    broker = get_broker()
    stub = stub_broker(broker)
    if stub is not None:
        out = {}
        for q in QUEUES:
            ready = stub.queues[q].qsize()
            delayed = stub.queues[f"{q}.DQ"].qsize()
            unfinished = stub.queues[q].unfinished_tasks + stub.queues[f"{q}.DQ"].unfinished_tasks
            out[q] = {"ready": ready, "delayed": delayed,
                      "running": max(0, unfinished - ready - delayed), "prefetched": 0,
                      "dead": _dead(q)}
        return out
    rb = redis_of(broker)
    client, ns = rb.client, rb.namespace
    qs = all_queues()
    running = {q: 0 for q in qs}
    for proc in processes(client, ns):
        for q in proc["running"]:
            base = q.removesuffix(".DQ")
            if base in running:
                running[base] += 1
    # dramatiq's private layout (pinned; tests/test_operations.py checks it): a consumer's
    # claimed messages sit in <ns>:__acks__.<consumer>.<queue> while its heartbeat is fresh.
    beats = cast(list[bytes], client.zrangebyscore(f"{ns}:__heartbeats__",
                                                   int(time.time() * 1000) - HEARTBEAT_TIMEOUT_MS, "+inf"))
    live = [w.decode() for w in beats]
    out = {}
    for q in qs:
        claimed = sum(client.scard(f"{ns}:__acks__.{w}.{q}") for w in live)
        held_back = sum(client.scard(f"{ns}:__acks__.{w}.{q}.DQ") for w in live)  # waiting for their eta
        out[q] = {"ready": client.llen(f"{ns}:{q}"), "delayed": client.llen(f"{ns}:{q}.DQ") + held_back,
                  "running": running[q], "prefetched": max(0, claimed - running[q]),
                  "dead": _dead(q)}
    return out


def ready(queue: str) -> int:
    """Messages waiting on one queue (cheap: one LLEN on Redis); the writer's backpressure."""
    broker = get_broker()
    stub = stub_broker(broker)
    if stub is not None:
        return int(stub.queues[queue].qsize())
    rb = redis_of(broker)
    return int(rb.client.llen(f"{rb.namespace}:{queue}"))


def wait_below(queue: str, limit: int, wait_s: float, poll_s: float, stuck_s: float | None = None) -> None:
    """Backpressure: block, at most ``wait_s``, while ``queue`` holds more than ``limit`` ready
    messages; with ``stuck_s``, stop waiting once the backlog has not shrunk for that long (no
    consumer runs). A broker that cannot say its depth ends the wait: the caller just sends.
    A stopping worker stops waiting too: a file-side message held here (up to 120 s behind a
    full embed queue) outlived honcho's 5 s grace and got the process SIGKILLed."""
    deadline = time.monotonic() + wait_s
    best, since = None, time.monotonic()
    try:
        while time.monotonic() < deadline and not STOPPING.is_set():
            n = ready(queue)
            if n <= limit:
                return
            if stuck_s is not None:
                if best is None or n < best:
                    best, since = n, time.monotonic()
                elif time.monotonic() - since > stuck_s:
                    return
            STOPPING.wait(poll_s)
    except Exception as exc:  # noqa: BLE001 - depth unknown (broker hiccup)
        log.debug("backlog check of %s failed: %s", queue, exc)


def unconsumed_queues() -> list[str]:
    """Queues holding ready messages that no live worker process consumes (Redis only)."""
    broker = get_broker()
    stub = stub_broker(broker)
    if stub is not None:
        return []  # the embedded workers run in this process
    rb = redis_of(broker)
    consumed = {q.removesuffix(".DQ") for proc in processes(rb.client, rb.namespace)
                for q in proc["queues"]}
    return sorted(q for q, d in depth().items() if d["ready"] and q not in consumed)


def total_outstanding() -> int:
    return sum(v["ready"] + v["delayed"] + v["running"] + v["prefetched"] for v in depth().values())


def dead_count() -> int:
    """Dead-lettered messages, every queue (``depth``'s "dead" alone: one ZCARD per queue, no
    worker or heartbeat reads - a sync asks before and after its work)."""
    return sum(map(_dead, QUEUES if stub_broker() is not None else all_queues()))


def dead_letters(limit: int = 100, *, newest: bool = False, agent: str | None = None) -> list[dict[str, Any]]:
    """Up to ``limit`` dead letters per queue (``agent``: that agent's only), oldest first
    (``newest``: the latest first)."""
    broker = get_broker()
    stub = stub_broker(broker)
    if stub is not None:
        letters = list(reversed(stub.dead_letters)) if newest else stub.dead_letters
        described = [_describe(m) for m in letters]
        return [d for d in described if agent is None or d["agent"] == agent][:limit]
    rb = redis_of(broker)
    out = []
    for q in all_queues():
        key = f"{rb.namespace}:{q}.XQ"
        # The score is the time the message died (ms). Filtered by agent, the whole set is read.
        stop = -1 if agent is not None else limit - 1
        pairs = cast(list[tuple[bytes, float]],
                     (rb.client.zrevrange if newest else rb.client.zrange)(key, 0, stop, withscores=True))
        if not pairs:
            continue
        raw = cast(list[bytes | None], rb.client.hmget(f"{rb.namespace}:{q}.XQ.msgs", [mid for mid, _ in pairs]))
        found = [dict(_describe(Message.decode(data)), died=int(score))
                 for (_, score), data in zip(pairs, raw) if data]
        out += [d for d in found if agent is None or d["agent"] == agent][:limit]
    return out


def _agent_of(m: Any) -> str | None:
    args = getattr(m, "args", ())
    return args[0].get("agent_id") if args and isinstance(args[0], dict) else None


def _describe(m: Any) -> dict[str, Any]:
    return {"id": m.message_id, "queue": m.queue_name, "actor": m.actor_name, "agent": _agent_of(m),
            "retries": m.options.get("retries", 0), "files": sum(1 for _ in message_keys(m.args[1:])),
            # refused by a worker serving another config or state dir (workers/guard.py)
            "refused": bool(m.options.get(REFUSED)),
            # "error": set when the message failed for good (workers/failures.py); older
            # dead letters only have the last retry's traceback.
            "error": m.options.get("error")
            or next(iter((m.options.get("traceback") or "").strip().splitlines()[-1:]), None)}


# Options a replayed message must not carry over: a fresh retry budget, a new Redis id, no refusal.
_REPLAY_DROP = ("retries", "traceback", "redis_message_id", "eta", "refused")


def refused_since(agent: str, since_ms: int) -> list[dict[str, Any]]:
    """This agent's dead letters that a worker refused (``refused``) since ``since_ms``, newest
    first: their files wait for nothing (``backfill --wait`` names them)."""
    broker = get_broker()
    stub = stub_broker(broker)
    if stub is not None:
        return []  # the embedded broker's workers are the sender's own: nothing is refused
    return [d for d in dead_letters(10_000, newest=True, agent=agent) if d["refused"] and d["died"] >= since_ms]


def dead_summary(agent: str) -> dict[str, Any]:
    """``status``'s ``deadLetters``: how many of this agent's messages are dead-lettered, how many
    of them refused, and the newest one's error."""
    dead = dead_letters(10_000, newest=True, agent=agent)
    return {"messages": len(dead), "refused": sum(d["refused"] for d in dead),
            "files": sum(d["files"] for d in dead), "newestError": dead[0]["error"] if dead else None}


def replay_dead_letters(limit: int = 1000, *, agent: str | None = None) -> int:
    """Re-enqueue dead-lettered messages (``agent``: that agent's only) on their queue, retry
    counter reset.

    Each message is removed from the dead-letter set only after it is enqueued
    again, so a crash in between replays it twice: harmless, every actor is idempotent.
    """
    return _take_dead_letters(limit, agent, requeue=True)


def discard_dead_letters(limit: int = 1000, *, agent: str | None = None) -> int:
    """Drop dead-lettered messages for good (``agent``: that agent's only): work that can never
    succeed as sent. The Markdown stays the source of truth: the next sync plans what is missing."""
    return _take_dead_letters(limit, agent, requeue=False)


def _take_dead_letters(limit: int, agent: str | None, *, requeue: bool) -> int:
    broker = get_broker()
    stub = stub_broker(broker)
    if stub is not None:
        n = 0
        for msgs in stub.dead_letters_by_queue.values():
            for m in [m for m in msgs if agent is None or _agent_of(m) == agent]:
                if n >= limit:
                    break
                msgs.remove(m)
                if requeue:
                    stub.enqueue(_fresh(m))
                n += 1
        return n
    rb = redis_of(broker)
    client, ns, n = rb.client, rb.namespace, 0
    for q in all_queues():
        xq = f"{ns}:{q}.XQ"
        for mid in cast(list[bytes], client.zrange(xq, 0, -1 if agent is not None else max(0, limit - n - 1))):
            if n >= limit:
                break
            data = cast(bytes | None, client.hget(f"{xq}.msgs", mid))
            msg: Message[Any] | None = Message.decode(data) if data else None
            if msg is not None and agent is not None and _agent_of(msg) != agent:
                continue
            if msg is not None and requeue:
                rb.enqueue(_fresh(msg))
            client.zrem(xq, mid)
            client.hdel(f"{xq}.msgs", mid)
            n += 1
        if n >= limit:
            break
    return n


def _fresh(m: Any) -> Message[Any]:
    m = getattr(m, "_message", m)  # the embedded broker keeps MessageProxy objects
    opts = {k: v for k, v in m.options.items() if k not in _REPLAY_DROP}
    return dataclasses.replace(m, queue_name=q_name(m.queue_name), options=opts)




def claim_shard_count(n: int) -> int | None:
    """Record this deployment's write-shard count N in Redis (first writer wins); returns the
    recorded count when it differs from ``n`` (that writer must refuse), else None.

    Senders route by ``MEMINDEX_WRITE_SHARDS``: a writer with another N would consume a
    queue that stores were never (or only partly) routed to, splitting a store's FIFO.
    """
    broker = get_broker()
    stub = stub_broker(broker)
    if stub is not None:
        return None

    rb = redis_of(broker)
    key = SHARDS_KEY
    rb.client.set(key, n, nx=True)
    got = int(rb.client.get(key) or n)
    return got if got != n else None


def _kind(qs: list[str]) -> str:
    names = {q.removesuffix(".DQ") for q in qs}
    if names and all(map(is_write_queue, names)):
        return "writer"
    # ``embed`` and ``batch`` need no filesystem (workers/compute.py, workers/batch): a compute
    # process, runnable anywhere Redis and the provider are reachable. Planning and chunking read files.
    if names and names <= {EMBED_QUEUE, BATCH_QUEUE}:
        return "compute"
    return "worker"


def worker_kinds() -> list[dict[str, Any]]:
    """Live worker processes grouped by kind (``writer``, ``compute``: embed/batch only, ``worker``: file side)
    and queues (Redis only)."""
    broker = get_broker()
    stub = stub_broker(broker)
    if stub is not None:
        return []
    rb = redis_of(broker)
    groups: dict[tuple[str, tuple[str, ...]], int] = {}
    for proc in processes(rb.client, rb.namespace):
        qs = tuple(sorted({q.removesuffix(".DQ") for q in proc["queues"]}))
        if not qs:
            continue  # a watcher beats too; it consumes nothing
        key = (_kind(list(qs)), qs)
        groups[key] = groups.get(key, 0) + 1
    return [{"kind": k, "queues": list(qs), "processes": n} for (k, qs), n in sorted(groups.items())]
