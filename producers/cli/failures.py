"""The end of ``index`` and ``backfill --wait``: what failed in this run, grouped by reason."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Iterable, TextIO

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.failures import SKIPPED_NOTE, SUMMARISED, failures_since
from memindex.pipeline.store.reader import open_reader


class _Summarised(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, SUMMARISED, False)


def say_failures_once(args: Any) -> None:
    """This command prints its run's failures at the end (``print_failures``). On the embedded
    broker its workers run in this process and log the same failures as they happen: without -v
    (or a --log-level) those lines are hidden, so the user reads each reason once, in the summary."""
    if args.verbose or args.log_level:
        return
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _Summarised) for f in handler.filters):
            handler.addFilter(_Summarised())


def run_started() -> int:
    """The timestamp (ms) a run's failures are counted from."""
    return int(time.time() * 1000)


def report_failures(settings: Iterable[AgentSettings], since_ms: int, out: TextIO | None = None) -> int:
    """Print one summary line per (agent, reason) failed since ``since_ms``; returns the files failed."""
    return print_failures(((s.agent_id, failures_since(s.store_path, since_ms)) for s in settings), out)


def skipped_files(settings: AgentSettings, since_ms: int) -> tuple[int, int]:
    """Files the index holds nothing of (binary, too large, an undecodable name), in all and among
    those written since ``since_ms``: the ``index`` line says how many, so that a clean-looking run
    does not hide them, and does not count this run's among the files it indexed."""
    reader = open_reader(settings)
    try:
        with reader.snapshot() as snap:
            counts = snap.problem_counts(since_ms)
            return counts["skipped"], counts["skippedSince"]
    except Exception:  # noqa: BLE001 - a count for one line; `status` reports a damaged store
        return 0, 0
    finally:
        reader.close()


def unwritten_files(settings: AgentSettings, failures: dict[str, dict[str, Any]], since_ms: int) -> int:
    """How many of the files that failed since ``since_ms`` were not written at all (no row since:
    a full disk rolled their writes back), as opposed to written keyword-only."""
    paths = [p for g in failures.values() for p in g.get("paths", [])]
    if not paths:
        return 0
    reader = open_reader(settings)
    try:
        with reader.snapshot() as snap:
            return len(snap.unwritten_since(paths, since_ms))
    except Exception:  # noqa: BLE001 - a count for one line; `status` reports a damaged store
        return 0
    finally:
        reader.close()


def print_failures(groups: Iterable[tuple[str, dict[str, dict[str, Any]]]], out: TextIO | None = None) -> int:
    """``report_failures`` for groups already read: (agent id, ``failures_since``'s answer) pairs."""
    out = out or sys.stderr
    total = skipped = 0
    for agent_id, by_reason in groups:
        for reason, g in sorted(by_reason.items(), key=lambda kv: -kv[1]["count"]):
            total += g["count"]
            skipped += g["count"] if reason.endswith(SKIPPED_NOTE) else 0
            print(f"error: {agent_id}: {g['count']} file(s) failed: {reason} ({g['hint']})", file=out)
    if total - skipped:
        print(f"{total - skipped} file(s) not fully indexed (at most keyword-searchable); the next sync retries "
              "them (see `memindex status`)", file=out)
    if skipped:
        print(f"{skipped} file(s) skipped for their content; indexed once they change (see `memindex status`)",
              file=out)
    return total
