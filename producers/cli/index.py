"""``memindex index``: sync every agent (or ``--agent``) now and wait until it is searchable."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from memindex.pipeline.config import environ
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.embeddings.embedder import provider_info
from memindex.pipeline.errors import ConfigError, MemindexError, QmdError, QmdMissing
from memindex.pipeline.index.failures import failures_since
from memindex.producers.cli.agents import command_agents, command_context, command_settings
from memindex.producers.cli.failures import (
    print_failures, run_started, say_failures_once, skipped_files, unwritten_files,
)
from memindex.producers.cli.options import say, say_error
from memindex.producers.cli.progress import Progress
from memindex.producers.enqueue import sync_and_wait
from memindex.workers.endpoint import broker_url


def run(args: argparse.Namespace) -> int:
    """Every agent in turn: one that fails (a missing workspace, a bad extraPaths entry) is
    reported by name and the others are still indexed, as ``openclaw memory index`` does."""
    if environ.broker_configured():
        broker_url()  # a URL no broker can have is said even when nothing changed (no broker is asked then)
    say_failures_once(args)
    agents = command_agents(args)
    since = run_started()
    code, ran = 0, []
    for agent in agents:
        settings = command_settings(args, agent)
        if not settings.enabled:
            if not args.quiet:
                print(f"{agent}: memory search disabled; not indexed")
            continue
        # No bar to draw (-q, or stderr not a terminal): no progress object, so the wait
        # takes the event-driven path and never reads the store while the workers write.
        bar = Progress(f"indexing {agent}", True) if sys.stderr.isatty() and not args.quiet else None
        try:
            counts = sync_and_wait(command_context(args, agent), force=args.force, progress=bar)
        except MemindexError as exc:
            if len(agents) == 1:
                raise  # one agent: the usual one-line error and exit code
            say_error(f"memory index failed ({agent}): {exc}")
            code = max(code, 2 if isinstance(exc, ConfigError) else 1)
            continue
        finally:
            if bar is not None:
                bar.close()
        failures = failures_since(settings.store_path, since)  # read once: this line and the summary
        ran.append((settings.agent_id, failures))
        if not args.quiet:
            failed = sum(g["count"] for g in failures.values())
            skipped, skipped_now = skipped_files(settings, since)
            gone = counts.get("vanished", 0)
            # Files still pending were not written at all (a full disk rolled them back): said so,
            # never counted as indexed ("indexed 60 file(s)" with 0 rows written).
            unwritten = unwritten_files(settings, failures, since) if failed else 0
            # A file skipped is not one indexed; one another sync had queued is written by now.
            done = max(0, counts["to_index"] + counts.get("queued", 0) - gone - skipped_now - unwritten)
            # Not "indexed 99 file(s)" above "99 file(s) failed": the line says what the errors below mean.
            partly = min(max(0, failed - unwritten), done)
            note = (f" ({partly} not fully: see below)" if partly else "") + (
                f", {unwritten} not written (see below)" if unwritten else "")
            print(f"{agent}: indexed {done} file(s){note}, removed {counts['to_delete']}, "
                  f"{counts['unchanged']} unchanged" + _below_delta(settings, counts.get("pending_sessions", 0))
                  + (f", {gone} deleted or replaced while indexing" if gone else "")
                  + (f"; {skipped} skipped (binary, too large, ...: see `memindex status`)" if skipped else ""))
        _say_keyword_only(settings)
        if not _qmd_index(settings, args.quiet):
            code = max(code, 1)
    return max(code, 1 if print_failures(ran) else 0)


def _below_delta(settings: AgentSettings, pending: int) -> str:
    """Transcripts that grew too little to index yet (as OpenClaw's `memory index`: a sync takes
    a transcript's new lines once they pass a delta threshold), so "unchanged" is not all it says."""
    if not pending:
        return ""
    # lazy: the transcript indexer (chunking, embedding glue) only when transcripts wait
    from memindex.pipeline.index.sessions import thresholds

    size, lines = thresholds(settings)
    return (f" (of which {pending} transcript(s) with new lines below the delta threshold, indexed "
            f"once {lines} lines or {size:,} bytes accumulate; `--force` now)")


def _say_keyword_only(settings: AgentSettings) -> None:
    """A provider named in the config that cannot serve (no API key: keyword search, as in
    OpenClaw) is said once per `index`, even with -q; searches only carry it in `status`."""
    if settings.memory_search.provider in ("auto", "none"):
        return
    info: dict[str, Any] = provider_info(settings)
    if info["provider"] == "none" and info.get("reason"):
        say(f"{settings.agent_id}: {info['reason']}", prefix="warning")


def _qmd_index(settings: AgentSettings, quiet: bool) -> bool:
    """With the qmd backend, `index` also runs qmd update (+ embed when due); False: it failed
    (the run's exit code says so, as OpenClaw's `Memory index failed` does; searches meanwhile
    answer from the built-in store, which this run did update)."""
    if settings.memory.backend != "qmd":
        return True
    # lazy: the qmd runner and its sync loop (subprocess, the qmd manager) only with memory.backend "qmd"
    from memindex.producers.qmd_sync import sync_qmd_now

    try:
        report = sync_qmd_now(settings)
    except QmdMissing as exc:  # no qmd here: the built-in index (just updated) serves, as in OpenClaw
        print(f"warning: qmd is not available for {settings.agent_id} ({exc}); searches use the built-in "
              "index", file=sys.stderr)
        return True
    except QmdError as exc:  # a qmd that runs and fails (exits, hangs, prints garbage): a failed index
        say_error(f"qmd update failed for {settings.agent_id}: {exc} (searches fall back to the "
                  "built-in index)")
        return False
    if not quiet:
        print(f"{settings.agent_id}: qmd index updated (embed: {report.get('embed')})")
    return True
