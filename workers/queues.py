"""Queue depth (P3): ready, delayed, dead-lettered and in-progress per queue."""

from __future__ import annotations

from typing import Any

from memindex.workers.broker import QUEUES, broker, is_embedded


def depth() -> dict[str, dict[str, int]]:
    """Per queue: ready / delayed / dead / in_progress."""
    if is_embedded(broker):
        out = {}
        for q in QUEUES:
            ready = broker.queues[q].qsize()
            delayed = broker.queues[f"{q}.DQ"].qsize()
            unfinished = broker.queues[q].unfinished_tasks + broker.queues[f"{q}.DQ"].unfinished_tasks
            out[q] = {"ready": ready, "delayed": delayed,
                      "dead": len(broker.dead_letters_by_queue.get(q, [])),
                      "in_progress": max(0, unfinished - ready - delayed)}
        return out
    client = broker.client
    ns = broker.namespace
    out = {}
    for q in QUEUES:
        in_progress = 0
        for key in client.scan_iter(match=f"{ns}:__acks__.*.{q}"):
            in_progress += client.scard(key)
        delayed = client.llen(f"{ns}:{q}.DQ")
        for key in client.scan_iter(match=f"{ns}:__acks__.*.{q}.DQ"):
            delayed += client.scard(key)
        out[q] = {"ready": client.llen(f"{ns}:{q}"), "delayed": delayed,
                  "dead": client.zcard(f"{ns}:{q}.XQ"), "in_progress": in_progress}
    return out


def ready(queue: str) -> int:
    """Messages waiting on one queue (cheap: one LLEN on Redis); the writer's backpressure."""
    if is_embedded(broker):
        return broker.queues[queue].qsize()
    return int(broker.client.llen(f"{broker.namespace}:{queue}"))


def total_outstanding() -> int:
    return sum(v["ready"] + v["delayed"] + v["in_progress"] for v in depth().values())


def dead_letters(limit: int = 100) -> list[dict[str, Any]]:
    from dramatiq import Message

    if is_embedded(broker):
        return [_describe(m) for m in broker.dead_letters[:limit]]
    out = []
    for q in QUEUES:
        ids = broker.client.zrange(f"{broker.namespace}:{q}.XQ", 0, limit - 1)  # ZRANGE's stop is inclusive
        if not ids:
            continue
        raw = broker.client.hmget(f"{broker.namespace}:{q}.XQ.msgs", ids)
        for data in raw:
            if data:
                out.append(_describe(Message.decode(data)))
    return out


def _describe(m: Any) -> dict[str, Any]:
    args = getattr(m, "args", ())
    agent = args[0].get("agent_id") if args and isinstance(args[0], dict) else None
    return {"id": m.message_id, "queue": m.queue_name, "actor": m.actor_name, "agent": agent,
            "retries": m.options.get("retries", 0),
            "error": (m.options.get("traceback") or "").strip().splitlines()[-1:] or None}


# Options a replayed message must not carry over: a fresh retry budget, a new Redis id.
_REPLAY_DROP = ("retries", "traceback", "redis_message_id", "eta")


def replay_dead_letters(limit: int = 1000) -> int:
    """Re-enqueue dead-lettered messages on their queue (retry counter reset).

    Each message is removed from the dead-letter set only after it is enqueued
    again, so a crash in between replays it twice: harmless, every actor is idempotent.
    """
    import dataclasses

    from dramatiq import Message
    from dramatiq.common import q_name

    if is_embedded(broker):
        n = 0
        for msgs in broker.dead_letters_by_queue.values():
            while msgs and n < limit:
                broker.enqueue(_fresh(dataclasses, msgs.pop(0), q_name))
                n += 1
        return n
    client, ns, n = broker.client, broker.namespace, 0
    for q in QUEUES:
        xq = f"{ns}:{q}.XQ"
        for mid in client.zrange(xq, 0, max(0, limit - n - 1)):
            data = client.hget(f"{xq}.msgs", mid)
            if data:
                broker.enqueue(_fresh(dataclasses, Message.decode(data), q_name))
            client.zrem(xq, mid)
            client.hdel(f"{xq}.msgs", mid)
            n += 1
        if n >= limit:
            break
    return n


def _fresh(dataclasses, m: Any, q_name) -> Any:
    m = getattr(m, "_message", m)  # the embedded broker keeps MessageProxy objects
    opts = {k: v for k, v in m.options.items() if k not in _REPLAY_DROP}
    return dataclasses.replace(m, queue_name=q_name(m.queue_name), options=opts)
