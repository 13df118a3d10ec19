"""``memindex batches``: each agent's batch embedding jobs, from its batch state.

``batch_report`` is also a part of ``memindex status``; neither sends work, so this module loads
no queue code (``backfill --batch`` is in ``backfill_batch.py``).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings
from memindex.producers.cli.agents import agent_contexts
from memindex.workers.batch.backend import location, open_for
from memindex.workers.batch.state import ACTIVE, IN_FLIGHT, iter_summaries


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
