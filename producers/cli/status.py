"""``memindex status``: what each agent's index holds and what serves it, as ``openclaw memory
status`` reports it (``--deep`` probes the provider, ``--index`` syncs first)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from dramatiq.brokers.redis import RedisBroker

from memindex.pipeline.config import environ
from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.embeddings.embedder import provider_info
from memindex.pipeline.errors import ConfigError, MemindexError
from memindex.pipeline.index.workspace import check_roots
from memindex.pipeline.search.backend import open_search
from memindex.pipeline.status import (
    embedding_probe, format_status, index_status, note_probe, source_scan, status_entry,
)
from memindex.pipeline.store.reader import open_reader
from memindex.producers.cli.agents import command_agents, command_context, command_settings
from memindex.producers.cli.batch import batch_report
from memindex.producers.cli.failures import report_failures, run_started, say_failures_once
from memindex.producers.cli.options import one_line_error
from memindex.producers.cli.progress import Progress
from memindex.producers.enqueue import plan_now, sync_and_wait
from memindex.workers.broker import broker, is_embedded, oom_line, redis_full
from memindex.workers.logs import is_redis_error
from memindex.workers.queues import dead_summary


def run(args: argparse.Namespace) -> int:
    """``openclaw memory status``: every configured agent unless ``--agent``; ``--deep`` adds an
    embedding probe, ``--index`` syncs first (and implies ``--deep``)."""
    entries, texts, failed = [], [], False
    for agent in command_agents(args):
        settings = command_settings(args, agent)
        index_error = None
        if args.index:
            index_error = _status_index(args, agent)
            failed = failed or index_error is not None
        probe = embedding_probe(settings) if args.deep or args.index else None
        report = index_status(settings, provider_info(settings), invariant=args.deep)
        # An index its own config refuses (an extraPaths entry that is "/", which OpenClaw would walk
        # whole): every sync of the agent fails, so status, which says why under issue:, exits 1 too
        # (it said so and exited 0). A missing workspace is the workspace's state, not a config error.
        failed = failed or _config_refuses(settings)
        note_probe(report, probe)
        if settings.memory.backend == "qmd":
            report.update(open_search(settings).status(probe=True))
        scan = source_scan(settings)
        _note_disk_changes(args, agent, report)
        try:
            jobs = batch_report(settings, limit=50)["jobs"]
            report["deadLetters"] = _dead_letters(agent)
        except Exception as exc:  # noqa: BLE001 - Redis down: the store's view is what an operator needs now
            if not is_redis_error(exc):
                raise
            jobs, report["brokerError"] = None, one_line_error(exc)
        else:
            full = _broker_full()
            if full:
                report["brokerFull"] = full
        entries.append(status_entry(report, embedding_probe=probe, index_error=index_error, scan=scan,
                                    batch_jobs=jobs))
        texts.append(format_status(report, probe=probe, index_error=index_error, scan=scan)
                     + _dead_letters_text(report.get("deadLetters")))
    print(json.dumps(entries, indent=2, default=str) if args.json else "\n\n".join(texts))
    return 1 if failed else 0


def _dead_letters(agent: str) -> dict[str, Any] | None:
    """This agent's dead letters on the Redis broker (None on the embedded one: its failures are
    the store's, which status reports already)."""
    if is_embedded():
        return None
    return dead_summary(agent)


def _dead_letters_text(dead: dict[str, Any] | None) -> str:
    if not dead or not dead["messages"]:
        return ""
    refused = f", {dead['refused']} refused by a worker" if dead["refused"] else ""
    return (f"\nDead letters: {dead['messages']} message(s) ({dead['files']} file(s){refused}); newest: "
            f"{dead['newestError']} (`memindex dead-letters`)")


def _config_refuses(settings: AgentSettings) -> bool:
    if not (settings.enabled and "memory" in settings.sources):
        return False
    try:
        check_roots(settings)
    except ConfigError:
        return True
    except MemindexError:  # (a missing workspace: its own issue line)
        return False
    return False


def _broker_full() -> str | None:
    """The line saying the deployment's Redis is out of memory (its workers can move nothing on), or
    None: no Redis, or it takes writes."""
    if not environ.broker_configured():
        return None
    return oom_line() if isinstance(broker, RedisBroker) and redis_full(broker.client) else None


def _note_disk_changes(args: argparse.Namespace, agent: str, report: dict[str, Any]) -> None:
    """Files changed on disk since the last sync make the index dirty. OpenClaw's status says
    "dirty: no" then (its status manager is dirty only before the first index); with no watcher
    running, that read as "fresh" while searches missed the new notes. The plan a sync would
    make answers it (the listing `scan` also walks; nothing is sent)."""
    if not report.get("indexed") or not report.get("enabled", True) or report.get("indexRefused"):
        return
    try:
        plan, noop = plan_now(command_context(args, agent), probe=False)  # plain status calls no provider
    except Exception as exc:  # noqa: BLE001 - status reports; the sync itself says what is wrong
        logging.getLogger("memindex").debug("dry plan for %s failed: %s", agent, exc)
        return
    if noop or plan.role != "live":  # a rebuild is already said (configChanged / rebuilding)
        return
    # Files re-planned only for their vectors did not change: status says "keyword-only" for them.
    # Files a sync already queued (pending in the store) are said as pending, not as changes that
    # `memindex index` must take (on Redis, while the workers indexed them, it said just that).
    reader = open_reader(settings_for(command_context(args, agent)))
    try:
        queued = reader.pending_paths(plan.generation, limit=len(plan.jobs) + 1)
    finally:
        reader.close()
    changed = (sum(1 for j in plan.jobs if j.path not in queued and (j.source, j.path) not in plan.retry_keys)
               + len(plan.session_deltas))
    deleted = len(plan.deletes)
    if changed or deleted:
        report["diskChanges"] = {"toIndex": changed, "toDelete": deleted}
        report["dirty"] = True


def _status_index(args: argparse.Namespace, agent: str) -> str | None:
    """``status --index``: sync and wait, as ``index`` does; the error text, or None."""
    say_failures_once(args)
    since = run_started()
    # The bar `index` draws (only on a terminal: the event-driven wait otherwise).
    bar = Progress(f"indexing {agent}", True) if sys.stderr.isatty() else None
    try:
        sync_and_wait(command_context(args, agent), force=args.force, progress=bar)
    except MemindexError as exc:
        print(f"Memory index failed ({agent}): {exc}", file=sys.stderr)
        return str(exc)
    finally:
        if bar is not None:
            bar.close()
    failed = report_failures([command_settings(args, agent)], since)
    return f"{failed} file(s) failed to index" if failed else None
