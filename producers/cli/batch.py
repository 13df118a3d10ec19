"""Batch commands: ``memindex batches`` and ``memindex backfill --batch``.

``backfill --batch`` is ``ops.cmd_backfill`` handing over to ``cmd_backfill_batch``.
Whether a backfill uses batch APIs is the agent's config (``remote.batch.enabled``), because
the workers that route chunks read the config, not this process's flags; ``--batch`` checks
that it applies and then follows ``remote.batch.wait``: show batch progress until the data is
searchable, or return at once and let ``memindex batches`` show the jobs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.embedder import provider_info
from memindex.producers import backfill
from memindex.producers.cli.agents import agent_contexts
from memindex.workers.batch.backend import location, open_for
from memindex.workers.batch.state import ACTIVE, IN_FLIGHT, iter_summaries

POLL_S = 0.2


# --- memindex batches -----------------------------------------------------------------------

def batch_report(settings: AgentSettings, limit: int = 20) -> dict[str, Any]:
    """One agent's batch jobs (newest first) and queued work, from its batch state (the file beside
    the store, or Redis with the Redis broker)."""
    st = open_for(settings.store_path, readonly=True)
    report: dict[str, Any] = {"agent": settings.agent_id, "state": location(settings.store_path),
                              "enabled": bool(settings.memory_search.remote.batch.enabled),
                              "queued_files": 0, "in_flight": 0, "active": 0, "jobs": []}
    if st is None:
        return report
    try:
        report["queued_files"] = st.queued()[0]
        report["jobs"] = list(iter_summaries(st, limit))
    finally:
        st.close()
    report["in_flight"] = sum(1 for j in report["jobs"] if j["phase"] in IN_FLIGHT)
    report["active"] = sum(1 for j in report["jobs"] if j["phase"] in ACTIVE)
    return report


def _age(ts: float | None) -> str:
    if not ts:
        return "-"
    s = max(0.0, time.time() - ts)
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.0f}h"


def format_report(r: dict[str, Any]) -> str:
    head = (f"{r['agent']}: {r['in_flight']} batch job(s) in flight, {r['active'] - r['in_flight']} writing, "
            f"{r['queued_files']} file(s) queued" + ("" if r["enabled"] else " (remote.batch.enabled is false)"))
    if not r["jobs"]:
        return head + "\n  no batch jobs"
    lines = [head, f"  {'job':<16} {'provider':<8} {'batch id':<22} {'state':<10} {'phase':<10} "
                   f"{'done':>11} {'failed':>7} {'redone':>7} {'files':>6} {'age':>5}  note"]
    for j in r["jobs"]:
        done = f"{j['completed']}/{j['requests']}"
        note = j.get("error") or j.get("outcome") or ""
        lines.append(f"  {j['key']:<16} {j['provider']:<8} {str(j.get('remote_id') or '-')[:22]:<22} "
                     f"{j['state']:<10} {j['phase']:<10} {done:>11} {j['failed']:>7} {j['redone']:>7} "
                     f"{j['files']:>6} {_age(j['created_at']):>5}  {note[:60]}")
    return "\n".join(lines)


def cmd_batches(args: argparse.Namespace) -> int:
    reports = [batch_report(settings_for(ctx), args.limit) for ctx in agent_contexts(args)]
    if args.json:
        print(json.dumps(reports, indent=2, default=str))
    else:
        print("\n\n".join(format_report(r) for r in reports))
    return 0


# --- memindex backfill --batch -----------------------------------------------------------------

def _batch_problem(settings: AgentSettings) -> str | None:
    if not settings.memory_search.remote.batch.enabled:
        return (f"{settings.agent_id}: batch APIs are off; set agents.defaults.memorySearch.remote.batch.enabled "
                "(or the agent's memorySearch.remote.batch.enabled) to true")
    provider = provider_info(settings)["provider"]
    if not registry.supports_batch(provider):
        *most, last = registry.batch_ids()
        have = f"{', '.join(most)} and {last} do" if most else f"{last} does"
        return f"{settings.agent_id}: provider {provider} has no batch API ({have})"
    return None


def _progress_line(agent: str | None, pending: int, landed: bool, report: dict[str, Any]) -> str:
    active = [j for j in report["jobs"] if j["phase"] != "done"]
    jobs = ", ".join(f"{j['provider']} {j.get('remote_id') or j['key']} {j['state']} ({j['phase']}) "
                     f"{j['completed']}/{j['requests']}" for j in active)
    if not jobs:
        jobs = "none in flight (collected; the writer is catching up)" if landed else "none yet"
    plan = "" if landed else " (plan not yet recorded by the writer)"
    return f"{agent}: {pending} file(s) pending{plan}; {report['queued_files']} queued for a batch; batch jobs: {jobs}"


def cmd_backfill_batch(args: argparse.Namespace) -> int:
    contexts = agent_contexts(args)
    settings = [settings_for(c) for c in contexts]
    problems = [p for p in (_batch_problem(s) for s in settings) if p]
    if problems:
        print("error: " + "\n       ".join(problems), file=sys.stderr)
        return 2
    wait = getattr(args, "wait", False) or any(s.memory_search.remote.batch.wait for s in settings)
    if not wait and backfill.must_wait():
        wait = True
        if not args.quiet:
            print("note: embedded broker (no MEMINDEX_BROKER_URL): the workers run in this process, so the "
                  "backfill waits for its batch jobs", file=sys.stderr)
    started = time.monotonic()
    runs: list[backfill.Backfill] = []
    known: dict[str | None, set[str]] = {}
    for ctx, st in zip(contexts, settings):
        known[ctx.agent_id] = {j["key"] for j in batch_report(st, limit=10_000)["jobs"]}
        b = backfill.enqueue(ctx, force=getattr(args, "force", False))
        c = b.counts
        if not args.quiet:
            print(f"{ctx.agent_id}: enqueued {c['to_index']} file(s) for batch embedding (generation "
                  f"{c['generation']}), {c['unchanged']} unchanged", flush=True)
        runs.append(b)
    if not wait:
        if not args.quiet:
            print("batch jobs run in the background; `memindex batches` shows them", flush=True)
        return 0
    return 0 if _wait_all(runs, known, args, started) else 1


def _wait_all(runs: list[backfill.Backfill], known: dict[str | None, set[str]], args: argparse.Namespace, started: float) -> bool:
    deadline = None if getattr(args, "timeout", None) is None else started + args.timeout
    last: dict[str | None, str] = {}
    left = list(runs)
    while left:
        for b in list(left):
            landed, pending = backfill.progress_of(b)
            report = batch_report(b.settings, limit=10_000)
            if landed and pending == 0:
                left.remove(b)
                if not args.quiet:
                    done = [j for j in report["jobs"] if j["key"] not in known.get(b.ctx.agent_id, set())]
                    sent = sum(j["requests"] for j in done)
                    print(f"{b.ctx.agent_id}: done in {time.monotonic() - started:.1f}s, searchable "
                          f"({len(done)} batch job(s), {sent} request(s) batched, "
                          f"{sum(j['redone'] for j in done)} embedded synchronously)", flush=True)
                continue
            line = _progress_line(b.ctx.agent_id, pending, landed, report)
            if not args.quiet and last.get(b.ctx.agent_id) != line:
                print(line, flush=True)
                last[b.ctx.agent_id] = line
        if not left:
            return True
        if deadline is not None and time.monotonic() > deadline:
            for b in left:
                print(f"{b.ctx.agent_id}: timed out ({backfill.progress_of(b)[1]} still pending); the batch jobs "
                      "keep running, `memindex batches` shows them", flush=True)
            return False
        time.sleep(POLL_S)
    return True
