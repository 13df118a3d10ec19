"""``memindex backfill --batch``: a backfill whose embeddings go through the provider's batch API.

``backfill --batch`` is ``ops.cmd_backfill`` handing over to ``cmd_backfill_batch``.
Whether a backfill uses batch APIs is the agent's config (``remote.batch.enabled``), because
the workers that route chunks read the config, not this process's flags; ``--batch`` checks
that it applies and then follows ``remote.batch.wait``: show batch progress until the data is
searchable, or return at once and let ``memindex batches`` show the jobs.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.embedder import provider_info
from memindex.producers import backfill
from memindex.producers.cli.agents import agent_contexts
from memindex.producers.cli.batch import batch_report
from memindex.producers.cli.options import say_error

POLL_S = 0.2


# --- memindex backfill --batch -----------------------------------------------------------------

def _batch_problem(settings: AgentSettings) -> str | None:
    if not settings.memory_search.remote.batch.enabled:
        return (f"{settings.agent_id}: batch APIs are off; set {settings.keys.to_set('remote.batch.enabled')} "
                "to true")
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
            if b.replaced:
                say_error(f"{b.ctx.agent_id}: stopped: its store was replaced while it ran (moved aside as damaged, "
                          "or deleted); `memindex index` plans it again")
                return False
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
