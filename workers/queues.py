"""Queue depth (P3): ready, delayed, dead-lettered and in-progress per queue."""

from __future__ import annotations

from typing import Any

from .broker import QUEUES, broker, is_embedded


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


def total_outstanding() -> int:
    return sum(v["ready"] + v["delayed"] + v["in_progress"] for v in depth().values())


def dead_letters(limit: int = 100) -> list[dict[str, Any]]:
    from dramatiq import Message

    if is_embedded(broker):
        return [_describe(m) for m in broker.dead_letters[:limit]]
    out = []
    for q in QUEUES:
        ids = broker.client.zrange(f"{broker.namespace}:{q}.XQ", 0, limit)
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
