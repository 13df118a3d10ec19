"""The end of ``index`` and ``backfill --wait``: what failed in this run, grouped by reason."""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, TextIO


def run_started() -> int:
    """The timestamp (ms) a run's failures are counted from."""
    return int(time.time() * 1000)


def report_failures(settings: Iterable[Any], since_ms: int, out: TextIO | None = None) -> int:
    """Print one summary line per (agent, reason) failed since ``since_ms``; returns the files failed."""
    from memindex.pipeline.index.failures import failures_since

    return print_failures(((s.agent_id, failures_since(s.store_path, since_ms)) for s in settings), out)


def print_failures(groups: Iterable[tuple[str, dict[str, dict[str, Any]]]], out: TextIO | None = None) -> int:
    """``report_failures`` for groups already read: (agent id, ``failures_since``'s answer) pairs."""
    out = out or sys.stderr
    total = 0
    for agent_id, by_reason in groups:
        for reason, g in sorted(by_reason.items(), key=lambda kv: -kv[1]["count"]):
            total += g["count"]
            print(f"error: {agent_id}: {g['count']} file(s) failed: {reason} ({g['hint']})", file=out)
    if total:
        print(f"{total} file(s) not fully indexed (at most keyword-searchable); the next sync retries them "
              "(see `memindex status`)", file=out)
    return total
