"""``memindex`` command line (the console script is this module's ``main``).

Every import beyond the standard library happens in the function that needs it: heavy
modules (dramatiq, provider SDKs, numpy, llama-cpp) only in the commands that use them, and
a ``--server`` call imports this module and its client (producers/cli/remote.py), no more.
Nothing outlives a command but what the user asked to run (``serve``, ``mcp``, ``watch``,
``worker``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Sequence

from memindex.pipeline.config import defaults as D  # (no imports of its own)
from memindex.pipeline.config import environ  # (defaults and the error root only)

if TYPE_CHECKING:
    from memindex.pipeline.config.settings import Context


def _ctx(args: argparse.Namespace, agent: str | None = None) -> Context:
    from memindex.producers.cli.agents import base_context, context_for

    ctx = context_for(args, agent) if agent else base_context(args)
    serving = getattr(args, "serving", None)  # run by `memindex serve` for a --server caller
    return ctx if serving is None else serving.context(ctx.agent_id)


def _settings(args: argparse.Namespace, agent: str | None = None):
    from memindex.pipeline.config.agents import settings_for

    return settings_for(_ctx(args, agent))


def _command_agents(args: argparse.Namespace) -> list[str]:
    """``--agent``, else every configured agent (``openclaw memory status|index``)."""
    from memindex.producers.cli.agents import agent_contexts

    return [c.agent_id for c in agent_contexts(args, all_by_default=True)]


# --- commands -----------------------------------------------------------------------

def cmd_index(args: argparse.Namespace) -> int:
    """Every agent in turn: one that fails (a missing workspace, a bad extraPaths entry) is
    reported by name and the others are still indexed, as ``openclaw memory index`` does."""
    from memindex.pipeline.index.failures import failures_since
    from memindex.producers.cli.failures import (
        print_failures, run_started, say_failures_once, skipped_files, unwritten_files,
    )
    from memindex.pipeline.config.settings import ConfigError
    from memindex.pipeline.errors import MemindexError
    from memindex.producers.cli.options import say_error
    from memindex.producers.cli.progress import Progress
    from memindex.producers.enqueue import sync_and_wait

    if environ.broker_configured():
        from memindex.workers.broker import broker_url

        broker_url()  # a URL no broker can have is said even when nothing changed (no broker is asked then)
    say_failures_once(args)
    agents = _command_agents(args)
    since = run_started()
    code, ran = 0, []
    for agent in agents:
        settings = _settings(args, agent)
        if not settings.enabled:
            if not args.quiet:
                print(f"{agent}: memory search disabled; not indexed")
            continue
        # No bar to draw (-q, or stderr not a terminal): no progress object, so the wait
        # takes the event-driven path and never reads the store while the workers write.
        bar = Progress(f"indexing {agent}", True) if sys.stderr.isatty() and not args.quiet else None
        try:
            counts = sync_and_wait(_ctx(args, agent), force=args.force, progress=bar)
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


def _below_delta(settings: Any, pending: int) -> str:
    """Transcripts that grew too little to index yet (as OpenClaw's `memory index`: a sync takes
    a transcript's new lines once they pass a delta threshold), so "unchanged" is not all it says."""
    if not pending:
        return ""
    from memindex.pipeline.index.sessions import thresholds

    size, lines = thresholds(settings)
    return (f" (of which {pending} transcript(s) with new lines below the delta threshold, indexed "
            f"once {lines} lines or {size:,} bytes accumulate; `--force` now)")


def _say_keyword_only(settings: Any) -> None:
    """A provider named in the config that cannot serve (no API key: keyword search, as in
    OpenClaw) is said once per `index`, even with -q; searches only carry it in `status`."""
    if settings.memory_search.provider in ("auto", "none"):
        return
    from memindex.pipeline.embeddings.embedder import provider_info
    from memindex.producers.cli.options import say

    info = provider_info(settings)
    if info["provider"] == "none" and info.get("reason"):
        say(f"{settings.agent_id}: {info['reason']}", prefix="warning")


def _qmd_index(settings: Any, quiet: bool) -> bool:
    """With the qmd backend, `index` also runs qmd update (+ embed when due); False: it failed
    (the run's exit code says so, as OpenClaw's `Memory index failed` does; searches meanwhile
    answer from the built-in store, which this run did update)."""
    if settings.memory.backend != "qmd":
        return True
    from memindex.pipeline.search.qmd.runner import QmdError, QmdMissing
    from memindex.producers.cli.options import say_error
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


def _search_engine(args: argparse.Namespace, settings: Any) -> Any:
    serving = getattr(args, "serving", None)
    if serving is not None:  # the server's warm engine for this agent
        return serving.engine(settings)
    from memindex.pipeline.search.backend import open_search

    # "auto": the query embedder resolves lazily, so a keyword-only index never
    # imports a provider SDK (CLI start-up time).
    return open_search(settings, query_embedder="auto")


def cmd_search(args: argparse.Namespace) -> int:
    from memindex.pipeline.config.paths import validate_agent_id
    from memindex.pipeline.search.engine import query_problem
    from memindex.pipeline.search.scope import agent_from_key
    from memindex.producers.cli.agents import configured_agents
    from memindex.producers.cli.openclaw_format import search_text
    from memindex.producers.cli.options import say, say_error

    keyed = agent_from_key(args.session_key)
    if keyed is not None:  # the session's agent, as OpenClaw picks it (and MCP / HTTP do)
        keyed_id = validate_agent_id(keyed, "--session-key")
        if args.agent and validate_agent_id(args.agent, "--agent") != keyed_id:
            say_error(f"--agent {args.agent} does not match the session key's agent {keyed!r}")
            return 2
        configured = configured_agents(args)
        if keyed_id not in configured:
            say_error(f"invalid option: --session-key: unknown agent {keyed!r}; configured: {', '.join(configured)}")
            return 2
        args.agent = keyed_id
    settings = _settings(args)
    engine = _search_engine(args, settings)
    opts = dict(max_results=args.max_results, min_score=args.min_score, session_key=args.session_key,
                corpus=args.corpus)
    if args.query_text is not None:  # `--query TEXT`, openclaw memory search's alternative to QUERY
        if args.query:
            say_error(f"give the query once: as QUERY or --query, not both ({' '.join(args.query)!r} was given too)")
            return 2
        args.query = [args.query_text]
    if args.queries:
        if args.query:  # they were ignored, with exit 0
            say_error(f"give either a QUERY or --queries FILE, not both ({' '.join(args.query)!r} was given too)")
            return 2
        bad = 0  # lines answered with an error: exit 1 once every line has had its answer
        src = sys.stdin if args.queries == "-" else open(args.queries, encoding="utf-8")
        with src:
            for n, line in enumerate(src, 1):
                line = line.strip()
                if not line:
                    continue
                # A bad line answers with the line's own id when it has one (else null) and its
                # line number: never a line number in the id field, where it could be a user's id.
                try:
                    item = json.loads(line)
                except ValueError as exc:
                    print(json.dumps({"id": None, "line": n, "error": f"line {n} is not JSON: {exc}"}))
                    bad += 1
                    continue
                if not isinstance(item, dict):
                    print(json.dumps({"id": None, "line": n, "error": f"line {n} is not a JSON object"}))
                    bad += 1
                    continue
                qid, query = item.get("id", n), item.get("query")
                unknown = sorted(set(item) - {"id", "query"})
                if unknown:  # `"agent"` or `"maxResults"` were silently dropped: another agent's answer
                    print(json.dumps({"id": item.get("id"), "line": n, "error": (
                        f"line {n} has field(s) {', '.join(map(repr, unknown))} that --queries does not take; a line "
                        "takes \"id\" and \"query\" (give --agent, --max-results, --min-score on the command)")},
                        ensure_ascii=False))
                    bad += 1
                    continue
                if not isinstance(query, str) or not query.strip():
                    what = ("has no \"query\"" if query is None else "has an empty query" if isinstance(query, str)
                            else f"has a {type(query).__name__} query, not a string")
                    print(json.dumps({"id": qid, "line": n, "error": f"line {n} {what}"}, ensure_ascii=False))
                    bad += 1
                    continue
                resp = engine.search(query, **opts).as_dict()
                print(json.dumps({"id": qid, **resp}, ensure_ascii=False))
                bad += bool(resp.get("unavailable"))  # answered, but the search failed
        if bad:
            say_error(f"{bad} line(s) of {args.queries} could not be searched (their answers say why)")
        return 1 if bad else 0
    if not args.query:
        say_error("give a QUERY or --queries FILE")
        return 2
    args.query = [_arg_text(q) for q in args.query]
    why = query_problem(" ".join(args.query))  # `search ""` answered "No matches." where no query is a usage error
    if why:
        say_error(why)
        return 2
    resp = engine.search(" ".join(args.query), **opts)
    if not args.session_key:  # OpenClaw's CLI prints no citations (they are the chat tool's)
        from memindex.producers.cli.openclaw_format import without_citations

        without_citations(resp.results)
    failed = bool(resp.extra.get("unavailable"))  # "No matches." said a failed search found nothing
    if args.json:
        print(json.dumps(resp.as_dict(), ensure_ascii=False, indent=2))
        return 1 if failed else 0
    if failed:
        say_error(f"memory search is unavailable: {resp.extra.get('error')}")
        return 1
    # stdout is OpenClaw's shape exactly; what it does not print goes to stderr.
    if resp.extra.get("disabled"):  # OpenClaw's CLI line when the agent has no memory manager
        print("Memory search disabled.")
        return 0
    if resp.warning:
        say(resp.warning)
    if resp.indexing:
        say("indexing is pending; results may be incomplete")
    if args.verbose and resp.results:
        import logging

        say(f"{len(resp.results)} result(s) [{resp.mode}, provider {resp.provider}"
            + (" (fallback)" if resp.fallback else "") + "]", prefix=None, level=logging.INFO)
    print(search_text(resp.results))
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    from memindex.pipeline.search.get import MemoryGetError, memory_get
    from memindex.producers.cli.options import say, say_error

    settings = _settings(args)
    try:
        res = memory_get(settings, args.path, args.from_line, args.lines)
    except MemoryGetError as exc:
        if args.json:
            print(json.dumps({"path": args.path, "text": "", "disabled": True, "error": str(exc)}))  # OpenClaw's tool error
        else:
            say_error(f"{exc}")
        return 1
    if args.json:
        print(json.dumps(res.as_dict(), ensure_ascii=False))
    else:
        if res.missing:  # not an error (nothing recorded yet, as in OpenClaw), but not silence either
            say(f"{res.path} does not exist ({res.warning or 'nothing recorded yet'})")
        sys.stdout.write(res.text + ("" if res.text.endswith("\n") or not res.text else "\n"))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """``openclaw memory status``: every configured agent unless ``--agent``; ``--deep`` adds an
    embedding probe, ``--index`` syncs first (and implies ``--deep``)."""
    from memindex.pipeline.embeddings.embedder import provider_info
    from memindex.pipeline.status import (
        embedding_probe, format_status, index_status, note_probe, source_scan, status_entry,
    )
    from memindex.producers.cli.batch import batch_report

    entries, texts, failed = [], [], False
    for agent in _command_agents(args):
        settings = _settings(args, agent)
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
            from memindex.pipeline.search.backend import open_search

            report.update(open_search(settings).status(probe=True))
        scan = source_scan(settings)
        _note_disk_changes(args, agent, report)
        try:
            jobs = batch_report(settings, limit=50)["jobs"]
            report["deadLetters"] = _dead_letters(agent)
        except Exception as exc:  # noqa: BLE001 - Redis down: the store's view is what an operator needs now
            from memindex.workers.logs import is_redis_error

            if not is_redis_error(exc):
                raise
            jobs, report["brokerError"] = None, _one_line_error(exc)
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
    from memindex.workers.broker import is_embedded

    if is_embedded():
        return None
    from memindex.workers.queues import dead_summary

    return dead_summary(agent)


def _dead_letters_text(dead: dict[str, Any] | None) -> str:
    if not dead or not dead["messages"]:
        return ""
    refused = f", {dead['refused']} refused by a worker" if dead["refused"] else ""
    return (f"\nDead letters: {dead['messages']} message(s) ({dead['files']} file(s){refused}); newest: "
            f"{dead['newestError']} (`memindex dead-letters`)")


def _config_refuses(settings: Any) -> bool:
    if not (settings.enabled and "memory" in settings.sources):
        return False
    from memindex.pipeline.errors import ConfigError, MemindexError
    from memindex.pipeline.index.workspace import check_roots

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
    from memindex.workers.broker import broker, oom_line, redis_full

    return oom_line() if redis_full(broker.client) else None


def _note_disk_changes(args: argparse.Namespace, agent: str, report: dict[str, Any]) -> None:
    """Files changed on disk since the last sync make the index dirty. OpenClaw's status says
    "dirty: no" then (its status manager is dirty only before the first index); with no watcher
    running, that read as "fresh" while searches missed the new notes. The plan a sync would
    make answers it (the listing `scan` also walks; nothing is sent)."""
    if not report.get("indexed") or not report.get("enabled", True) or report.get("indexRefused"):
        return
    from memindex.producers.enqueue import plan_now

    try:
        plan, noop = plan_now(_ctx(args, agent), probe=False)  # plain status calls no provider
    except Exception as exc:  # noqa: BLE001 - status reports; the sync itself says what is wrong
        import logging

        logging.getLogger("memindex").debug("dry plan for %s failed: %s", agent, exc)
        return
    if noop or plan.role != "live":  # a rebuild is already said (configChanged / rebuilding)
        return
    # Files re-planned only for their vectors did not change: status says "keyword-only" for them.
    # Files a sync already queued (pending in the store) are said as pending, not as changes that
    # `memindex index` must take (on Redis, while the workers indexed them, it said just that).
    from memindex.pipeline.config.agents import settings_for
    from memindex.pipeline.store.reader import open_reader

    reader = open_reader(settings_for(_ctx(args, agent)))
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
    from memindex.pipeline.errors import MemindexError
    from memindex.producers.cli.failures import report_failures, run_started, say_failures_once
    from memindex.producers.cli.progress import Progress
    from memindex.producers.enqueue import sync_and_wait

    say_failures_once(args)
    since = run_started()
    # The bar `index` draws (only on a terminal: the event-driven wait otherwise).
    bar = Progress(f"indexing {agent}", True) if sys.stderr.isatty() else None
    try:
        sync_and_wait(_ctx(args, agent), force=args.force, progress=bar)
    except MemindexError as exc:
        print(f"Memory index failed ({agent}): {exc}", file=sys.stderr)
        return str(exc)
    finally:
        if bar is not None:
            bar.close()
    failed = report_failures([_settings(args, agent)], since)
    return f"{failed} file(s) failed to index" if failed else None


# --- parser ---------------------------------------------------------------------------

class _Version(argparse.Action):
    """``--version``, reading the installed version only when asked (start-up time)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the memindex version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import version

        print(f"memindex {version('memindex')}")
        parser.exit(0)


def _add_index(sub: argparse._SubParsersAction) -> None:
    from memindex.producers.cli.options import examples

    s = sub.add_parser("index", help="sync the index now and wait for it", **examples(
        ("memindex index", "every configured agent"),
        ("memindex index --agent ops --force", "rebuild agent ops from scratch"),
        description="Bring the index up to date with the Markdown on disk and wait until it is "
                    "searchable. Without --agent, every configured agent (as `openclaw memory index`)."))
    s.add_argument("--force", action="store_true", help="re-index every file, not only changed ones")
    s.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    s.set_defaults(func=cmd_index)


def _add_search(sub: argparse._SubParsersAction) -> None:
    from memindex.producers.cli.options import at_least_one, examples

    s = sub.add_parser("search", help="search memory", **examples(
        ('memindex search "router VLAN"', "score path:lines and the snippet per result"),
        ('memindex search --json --max-results 3 "kafka"', "the memory_search payload"),
        ("memindex search --queries q.jsonl", "one JSON line per query"),
        description="Hybrid (vector + keyword) search of one agent's memory, the default agent "
                    "unless --agent. Text output is `openclaw memory search`'s."))
    s.add_argument("query", nargs="*", help="the query text (words are joined with spaces)")
    s.add_argument("--query", dest="query_text", metavar="TEXT", default=None,
                   help="the query text (instead of QUERY, as `openclaw memory search --query`)")
    s.add_argument("--corpus", choices=("memory", "sessions", "all", "wiki"), default=None,
                   help="search only memory files or session transcripts (default: all the agent's "
                        "search sources; wiki is not indexed by memindex)")
    s.add_argument("--json", action="store_true", help="print the memory_search payload as JSON")
    s.add_argument("--max-results", metavar="N", type=at_least_one, default=None,
                   help=f"at most N results (default: query.maxResults, {D.MAX_RESULTS})")
    s.add_argument("--min-score", metavar="X", type=_finite, default=None,
                   help=f"drop results scoring below X (default: query.minScore, {D.MIN_SCORE})")
    s.add_argument("--session-key", default=None, metavar="KEY",
                   help="search on behalf of this session key (its agent:<id>: picks the agent "
                        "unless --agent; session warm-up, citations)")
    s.add_argument("--queries", metavar="FILE",
                   help='JSONL of {"id":…,"query":…}; prints one JSON line per query ("-" = stdin)')
    _add_server_options(s)
    s.set_defaults(func=cmd_search)


def _add_server_options(s: argparse.ArgumentParser) -> None:
    """--server / --server-timeout, for the help: main() takes them out of the command line and
    sends the rest to the server (producers/cli/remote.py) before any parser is built."""
    from memindex.producers.cli.remote import SERVER_ENV, TIMEOUT_ENV

    s.add_argument("--server", metavar="URL", default=argparse.SUPPRESS,
                   help=f"have a running `memindex serve` answer (unix:/path/to/sock or http://127.0.0.1:PORT, "
                        f"token from $MEMINDEX_TOKEN; default ${SERVER_ENV}): the same output and exit code, "
                        "from its warm process; an unreachable server is an error, never a silent in-process run")
    s.add_argument("--server-timeout", metavar="S", default=argparse.SUPPRESS,
                   help=f"with --server: seconds to wait for the whole answer (default ${TIMEOUT_ENV}, "
                        f"else {D.SERVER_TIMEOUT_S:g})")


def _finite(text: str) -> float:
    """``--min-score``: a number from 0 to 1, as the servers' minScore (one check, ``min_score_problem``)."""
    from memindex.pipeline.search.engine import min_score_problem

    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    why = min_score_problem(x)
    if why:
        raise argparse.ArgumentTypeError(why)
    return x


def _add_get(sub: argparse._SubParsersAction) -> None:
    from memindex.producers.cli.options import examples, non_negative

    s = sub.add_parser("get", help="read a memory file (memory_get)", **examples(
        ("memindex get memory/2026-02-10.md --from 3 --lines 5", "five lines from line 3"),
        ("memindex get ../team/plan.md", "a file of an extraPaths directory, as search names it"),
        description="Read a memory Markdown file the way the memory_get tool does: MEMORY.md, "
                    "memory/**.md and extraPaths only; symlinks and traversal are refused."))
    s.add_argument("path", help="a path as search returns it (workspace-relative) or an absolute path")
    s.add_argument("--from", dest="from_line", metavar="LINE", type=non_negative, default=None,
                   help="1-based start line")
    s.add_argument("--lines", metavar="N", type=non_negative, default=None, help="number of lines to return")
    s.add_argument("--json", action="store_true", help="print {path, text, ...} as JSON")
    _add_server_options(s)
    s.set_defaults(func=cmd_get)


def _add_status(sub: argparse._SubParsersAction) -> None:
    from memindex.producers.cli.options import examples

    s = sub.add_parser("status", help="what the index holds and what serves it", **examples(
        ("memindex status", "every configured agent"),
        ("memindex status --deep --agent ops", "also send one embedding request and time it"),
        ("memindex status --index --json", "sync first, then OpenClaw's JSON shape"),
        description="Files, chunks, provider, vector and FTS state per agent; without --agent every "
                    "configured agent. --json prints `openclaw memory status --json`'s shape."))
    s.add_argument("--json", action="store_true",
                   help="print [{agentId, status, embeddingProbe, indexError, scan}] as JSON")
    s.add_argument("--deep", action="store_true", help="probe the embedding provider with one real request")
    s.add_argument("--index", action="store_true", help="sync the index first (implies --deep)")
    s.add_argument("--force", action="store_true", help="with --index: re-index every file")
    s.set_defaults(func=cmd_status)


def _add_completion(sub: argparse._SubParsersAction) -> None:
    from memindex.producers.cli.options import examples

    s = sub.add_parser("completion", help="print a shell completion script", **examples(
        ('eval "$(memindex completion bash)"', "enable completion in this bash session"),
        ("memindex completion zsh > ~/.zfunc/_memindex", "install it for zsh"),
        description="Tab completion for commands and options (argcomplete)."))
    s.add_argument("shell", choices=("bash", "zsh", "fish", "tcsh"), help="the shell to print it for")
    s.set_defaults(func=cmd_completion)


# The commands defined in this module, each adding its own sub-parser. A run of one of them
# builds a parser with only that one (not the other modules' commands - ops, batch, serve -
# whose imports and ~20 sub-parsers were a fifth of a `memindex search`, issue 19). Help and
# completion always get the full parser.
CORE_PARSERS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "index": _add_index,
    "search": _add_search,
    "get": _add_get,
    "status": _add_status,
    "completion": _add_completion,
}
CORE_COMMANDS = tuple(CORE_PARSERS)


def core_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names when it is one of CORE_COMMANDS, found without a parser (None:
    another command, none, or a form only the full parser can read, e.g. an abbreviated option)."""
    from memindex.producers.cli.remote import command_of

    command = command_of(list(argv))
    return command if command in CORE_COMMANDS else None


@functools.lru_cache(maxsize=None)  # built once per process (`memindex serve` runs --server calls with it)
def build_parser(full: bool = True, only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser: every command (``full``), the core ones, or just the core command ``only``
    (a `memindex search` needs no other sub-parser)."""
    from memindex.producers.cli.options import add_global_options, examples, share_global_options

    p = argparse.ArgumentParser(
        prog="memindex",
        description="Index and search an agent's Markdown memory; reads OpenClaw's openclaw.json "
                    "and mirrors `openclaw memory status|index|search`.",
        **{k: v for k, v in examples(
            ('memindex index', "sync every configured agent now"),
            ('memindex search "deployment notes"', "search the default agent's memory"),
            ('memindex status --json', "status in OpenClaw's JSON shape"),
            ('memindex --agent ops get MEMORY.md', "read a memory file of agent ops"),
        ).items() if k != "description"},
    )
    p.add_argument("--version", action=_Version)
    add_global_options(p)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    for name, add in CORE_PARSERS.items():
        if only in (None, name):
            add(sub)

    if full:
        from memindex.producers.cli import batch as cli_batch, ops as cli_ops

        cli_ops.register(sub)
        cli_batch.register(sub)  # batches, backfill --batch (after cli_ops)
        from memindex.producers.cli import serve as cli_serve

        cli_serve.register(sub)  # mcp, serve
        # serve answers --server calls with this module's own command code (it cannot import it:
        # this module imports it)
        sub.choices["serve"].set_defaults(cli_runner=run_for_server)
    share_global_options(sub)
    # No prefixes of long options: `--max-result` (a typo) was taken silently as --max-results,
    # and a prefix a later option would make ambiguous breaks scripts.
    for parser in (p, *sub.choices.values()):
        parser.allow_abbrev = False
    return p


def cmd_completion(args: argparse.Namespace) -> int:
    import argcomplete

    sys.stdout.write(argcomplete.shellcode(["memindex"], shell=args.shell))
    return 0


def _unrecognized(command: argparse.ArgumentParser, extra: list[str]) -> None:
    import difflib

    flags = sorted({f for f in command._option_string_actions if f.startswith("--")})
    hints = [f"{x} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(x.split("=")[0], flags, 1, 0.7))
             else x for x in extra]
    plain = [x for x, h in zip(extra, hints) if x.startswith("-") and x == h]  # no option it resembles
    if command.prog.endswith(" search") and plain:
        # A query that starts with "-" (an agent passing its text through) reads as an option.
        hints.append(f"(to search for text starting with '-', put -- before it: {command.prog} -- {plain[0]})")
    command.error(f"unrecognized arguments: {' '.join(hints)}")


def _check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What argparse cannot express: a --json or --all that the command does not take, an option
    that means something only with another (said with the command's own usage)."""
    from memindex.producers.cli.options import command_parsers, has_option

    command = dict(command_parsers(parser))[args.command]
    if args.json and not has_option(command, "--json"):
        command.error(f"--json does not apply to {args.command}")
    if getattr(args, "all", False) and args.agent:
        command.error("give --agent ID or --all, not both")
    if args.command == "status" and args.force and not args.index:
        # It was ignored: a user asking for a rebuild got the status of the old index, exit 0.
        command.error("status --force goes with --index (re-index every file, then show the status)")
    # Options that mean something only with another were taken and ignored, without a word.
    if args.command == "backfill" and args.timeout is not None and not args.wait:
        command.error("backfill --timeout goes with --wait (it bounds the wait; without --wait nothing waits)")
    if args.command == "queues" and args.interval is not None and not args.watch:
        command.error("queues --interval goes with --watch (seconds between refreshes)")


def _blank_path(args: argparse.Namespace) -> str | None:
    """The one-line usage error for an empty --config/--state-dir/--workspace (None: none is). An
    empty --config read as "no config file" and ran on defaults, silently (the shell's unset
    variable in `--config "$CFG"`); the others failed with the library's Context wording."""
    for dest in ("config", "state_dir", "workspace"):
        value = getattr(args, dest, None)
        if value is not None and not value.strip():
            return f"--{dest.replace('_', '-')} must name a path, not an empty string"
    return None


# Processes an operator runs for hours log what they do (a sync enqueued, an agent added) at INFO,
# as the dramatiq workers beside them do; one-shot commands stay quiet unless -v.
LONG_RUNNING = frozenset(("watch", "worker", "serve", "mcp"))


def _log_choice(args: argparse.Namespace) -> int:
    """Level: --log-level, else $MEMINDEX_LOG_LEVEL (the Procfile's .env), else INFO for the
    long-running commands and WARNING for the rest (-v INFO, -vv DEBUG). Format likewise:
    --log-format, else $MEMINDEX_LOG_FORMAT, else text (set on ``args``). A variable is held to
    the flag's choices (``EnvError``): ``verbose`` was ignored without a word."""
    import logging

    args.log_level = args.log_level or environ.LOG_LEVEL.get()
    args.log_format = args.log_format or environ.LOG_FORMAT.get()
    quiet = logging.INFO if args.command in LONG_RUNNING else logging.WARNING
    level = quiet if args.verbose == 0 else min(quiet, logging.INFO) if args.verbose == 1 else logging.DEBUG
    if args.log_level:
        level = logging.getLevelName(args.log_level.upper())
    return level


def _setup_logging(args: argparse.Namespace) -> None:
    """This process's logging as ``_log_choice`` reads it, resolved once here so the worker
    processes ``memindex worker`` starts receive exactly what this process uses."""
    import logging

    from memindex.workers.logs import HTTP_LOGGERS, configure

    level = _log_choice(args)
    configure(level, args.log_format)
    if level > logging.DEBUG:
        for noisy in ("dramatiq", "watchdog", *HTTP_LOGGERS):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.command not in LONG_RUNNING and level >= logging.WARNING:
        # A one-shot command says "qmd unavailable" itself (search's note:, status' fallback:,
        # index's warning:); the backend's log line for long-running processes repeated it.
        logging.getLogger("memindex.backend").setLevel(logging.ERROR)


def _one_line_error(exc: BaseException) -> str | None:
    """The one line for an error the user can act on (a file they named, the broker); None: a bug."""
    from memindex.workers.logs import is_redis_error

    if is_redis_error(exc):  # broker unreachable, hung or refusing
        from memindex.workers.broker import broker_error_line

        return broker_error_line(exc)
    if isinstance(exc, UnicodeDecodeError):
        return f"input is not valid UTF-8 ({exc.reason} at byte {exc.start})"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return None


def _lenient_streams() -> None:
    """A terminal that is not UTF-8 (an ISO-8859-1 locale, PYTHONIOENCODING=ascii) gets ``\\u…``
    for what it cannot show: an emoji in a note made `search` and `get` die with
    UnicodeEncodeError and print nothing."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("_", "-")
        if encoding not in ("utf-8", "utf8") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a stream that cannot change now: left as it is
                pass


def _arg_text(text: str) -> str:
    """A command-line argument as the UTF-8 the user typed: Python without UTF-8 mode in the C
    locale hands non-ASCII bytes over as surrogates, and a query holding them failed to embed
    (and matched nothing)."""
    if not any("\udc80" <= ch <= "\udcff" for ch in text):
        return text
    return os.fsencode(text).decode("utf-8", "replace")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``memindex`` console script. A search or get with ``--server`` (or ``$MEMINDEX_SERVER``)
    is answered by that server (producers/cli/remote.py); everything else runs here."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "_ARGCOMPLETE" not in os.environ:
        from memindex.producers.cli import remote

        if remote.command_of(argv) in remote.REMOTE_COMMANDS:
            try:
                url, timeout, rest = remote.split_server(argv)
            except remote.RemoteError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            if url is not None:
                _lenient_streams()
                return remote.run(url, timeout, rest)
    from memindex.pipeline.errors import ConfigError

    try:
        return _run(argv)
    except ConfigError as exc:  # a variable the CLI's modules read as they load (MEMINDEX_POLL_MS=abc)
        print(f"error: {exc}", file=sys.stderr)
        return 2


def run_for_server(argv: list[str], serving: Any) -> tuple[int, str, str]:
    """``memindex <argv>`` run inside ``memindex serve`` for a ``--server`` caller: (exit code,
    stdout, stderr) exactly as an in-process run prints them, from the server's warm engines.
    ``serving``: the server's config, agents and engines (producers/cli/serve.py ``CliServing``)."""
    import logging

    from memindex.producers.cli import capture

    capture.install()
    with capture.captured(logging.WARNING, "text") as cap:
        try:
            code = _run(argv, serving)
        except SystemExit as exc:  # argparse: usage errors (2), --help (0)
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        except Exception as exc:  # noqa: BLE001 - a bug: the caller gets its one line, the server the traceback
            logging.getLogger("memindex.serve").exception("--server call %r failed", argv)
            print(f"error: memindex serve failed on this call: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = 1
        return code, cap.out.getvalue(), cap.err.getvalue()


def _serving_problem(args: argparse.Namespace, serving: Any) -> str | None:
    """Why a server will not run this command line (None: it will), and otherwise points ``args``
    at the server's own config: it serves the agents it was started with, not the caller's files."""
    from memindex.producers.cli.remote import REMOTE_COMMANDS

    if args.command not in REMOTE_COMMANDS:
        return f"memindex serve answers only {' and '.join(REMOTE_COMMANDS)} (run `memindex {args.command}` here)"
    given = [f"--{d.replace('_', '-')}" for d in ("config", "state_dir", "workspace") if getattr(args, d, None)]
    if given:
        return (f"{', '.join(given)} cannot go to a server: it serves the config it was started with "
                "(give them to `memindex serve`, or leave out --server)")
    if getattr(args, "queries", None):
        return "--queries is not sent to a server (run it without --server, or POST /v1/search per query)"
    args.config, args.state_dir = serving.base.config, serving.base.state_dir
    if serving.only is not None and args.agent and args.agent.strip().lower() != serving.only:
        return f"this server serves only agent {serving.only!r} (started with --agent)"
    args.agent = args.agent or serving.only
    args.serving = serving
    return None


def _run(argv: list[str], serving: Any = None) -> int:
    import logging

    from memindex.pipeline.config.settings import ConfigError
    from memindex.pipeline.errors import MemindexError
    from memindex.producers.cli.options import command_parsers, say_error

    completing = "_ARGCOMPLETE" in os.environ
    command = None if completing else core_command(argv)
    parser = build_parser(full=command is None, only=command)
    if completing:  # the shell asks for completions (see `memindex completion`)
        import argcomplete

        argcomplete.autocomplete(parser)
    args, extra = parser.parse_known_args(argv)
    if not args.command:
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        parser.print_help()
        return 2
    if extra:  # said with the command's usage (it printed the top-level one), and a likely flag
        _unrecognized(dict(command_parsers(parser))[args.command], extra)
    _check_usage(parser, args)
    blank = _blank_path(args)
    if blank:
        say_error(blank)
        return 2
    if serving is not None:
        from memindex.producers.cli.capture import current

        why = _serving_problem(args, serving)
        if why:
            say_error(why)
            return 2
    else:
        _lenient_streams()
    try:
        if serving is None:
            _setup_logging(args)  # (a bad $MEMINDEX_LOG_LEVEL is a ConfigError, said below)
            from memindex.pipeline.store.locks import set_process_label

            set_process_label(f"memindex {args.command}")  # who holds a store, in another writer's wait line
        else:  # the server's logging stays; the caller's level and format shape its own lines
            cap = current()
            cap.level, cap.fmt = _log_choice(args), args.log_format
        return int(args.func(args) or 0)
    except ConfigError as exc:
        say_error(str(exc))
        return 2
    except MemindexError as exc:  # e.g. no API key for the configured provider: one line, no traceback
        say_error(str(exc))
        return 1
    except BrokenPipeError:  # `memindex status --json | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - the failures a user causes or can fix get one line
        line = _one_line_error(exc)
        if line is None:
            raise
        say_error(line)
        return 1
    except KeyboardInterrupt:
        if args.command in ("index", "backfill") or getattr(args, "index", False):  # say what it left
            from memindex.workers.broker import broker_url

            if broker_url():  # the work is on the broker: its workers go on without this process
                print("interrupted: the work already queued is still done by the workers; "
                      "`memindex status` shows what is pending", file=sys.stderr)
            else:
                print("interrupted: what was written is kept; `memindex index` finishes the rest", file=sys.stderr)
        # That line is the whole story: the stopping in-process workers would add an INFO line
        # per message they hand back ("retried later"), which this exiting process never does.
        for handler in logging.getLogger().handlers:
            handler.setLevel(max(handler.level, logging.WARNING))
        return 130
    finally:
        if serving is None and "memindex.workers.embedded" in sys.modules:
            try:
                sys.modules["memindex.workers.embedded"].stop(idle=True)
            except KeyboardInterrupt:
                # A second Ctrl-C while the workers stop (impatient users press it twice): the
                # "interrupted" line is said; a traceback from dramatiq's join adds nothing. (What
                # the writer committed is kept; an uncommitted transaction rolls back.)
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:  # noqa: BLE001 - exiting anyway
                        pass
                os._exit(130)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
