"""``memindex`` command line.

Heavy modules (dramatiq, provider SDKs, numpy, llama-cpp) are imported only by
the commands that need them, so ``memindex search`` starts fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, Sequence

from memindex.pipeline.config.settings import ConfigError, Context
from memindex.producers.cli.progress import Progress

log = logging.getLogger("memindex")


def _ctx(args: argparse.Namespace, agent: str | None = None) -> Context:
    return Context(agent or args.agent, args.config, args.state_dir, args.workspace)


def _settings(args: argparse.Namespace, agent: str | None = None):
    from memindex.pipeline.config.agents import settings_for

    return settings_for(_ctx(args, agent))


def _all_agents(args: argparse.Namespace) -> list[str]:
    from memindex.pipeline.config.settings import list_agent_ids, load_raw

    return list_agent_ids(load_raw(_ctx(args)))


# --- commands -----------------------------------------------------------------------

def cmd_index(args: argparse.Namespace) -> int:
    from memindex.producers.enqueue import sync_and_wait

    agents = _all_agents(args) if args.all else [args.agent]
    for agent in agents:
        ctx = _ctx(args, agent)
        bar = Progress(f"indexing {agent}", sys.stderr.isatty() and not args.quiet)
        try:
            counts = sync_and_wait(ctx, force=args.force, progress=bar)
        finally:
            bar.close()
        if not args.quiet:
            print(f"{agent}: indexed {counts['to_index']} file(s), removed {counts['to_delete']}, "
                  f"{counts['unchanged']} unchanged")
        _qmd_index(_settings(args, agent), args.quiet)
    _report_dead_letters()
    return 0


def _qmd_index(settings: Any, quiet: bool) -> None:
    """With the qmd backend, `index` also runs qmd update (+ embed when due)."""
    if settings.memory["backend"] != "qmd":
        return
    from memindex.pipeline.search.qmd.runner import QmdError
    from memindex.producers.qmd_sync import sync_qmd_now

    try:
        report = sync_qmd_now(settings)
    except QmdError as exc:
        print(f"warning: qmd update failed for {settings.agent_id}: {exc}", file=sys.stderr)
        return
    if not quiet:
        print(f"{settings.agent_id}: qmd index updated (embed: {report.get('embed')})")


def _report_dead_letters() -> None:
    if "memindex.workers.embedded" not in sys.modules:
        return  # nothing was enqueued in this process (a no-op sync never loads the broker)
    from memindex.workers.broker import is_embedded
    from memindex.workers import embedded

    if is_embedded() and embedded.dead_letters():
        print(f"warning: {len(embedded.dead_letters())} job(s) failed; see the log above", file=sys.stderr)


def _search_engine(args: argparse.Namespace, settings: Any) -> Any:
    from memindex.pipeline.search.backend import open_search

    # "auto": the query embedder resolves lazily, so a keyword-only index never
    # imports a provider SDK (CLI start-up time).
    return open_search(settings, query_embedder="auto")


def cmd_search(args: argparse.Namespace) -> int:
    settings = _settings(args)
    engine = _search_engine(args, settings)
    opts = dict(max_results=args.max_results, min_score=args.min_score, session_key=args.session_key)
    if args.queries:
        src = sys.stdin if args.queries == "-" else open(args.queries, encoding="utf-8")
        with src:
            for n, line in enumerate(src, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    item = json.loads(line)
                    qid, query = item.get("id", n), item["query"]
                except (ValueError, KeyError, AttributeError) as exc:
                    print(json.dumps({"id": n, "error": f"bad query line: {exc}"}))
                    continue
                resp = engine.search(str(query), **opts).as_dict()
                print(json.dumps({"id": qid, **resp}, ensure_ascii=False))
        return 0
    if not args.query:
        print("error: give a QUERY or --queries FILE", file=sys.stderr)
        return 2
    resp = engine.search(" ".join(args.query), **opts)
    if args.json:
        print(json.dumps(resp.as_dict(), ensure_ascii=False, indent=2))
        return 0
    if resp.warning:
        print(f"note: {resp.warning}", file=sys.stderr)
    if not resp.results:
        print("no results" + (" (indexing pending)" if resp.indexing else ""))
        return 0
    print(f"{len(resp.results)} result(s)  [{resp.mode}, provider {resp.provider}"
          + (" (fallback)" if resp.fallback else "") + "]")
    for i, r in enumerate(resp.results, 1):
        print(f"\n{i}. {r.path}:{r.startLine}-{r.endLine}  score {r.score:.3f}  [{r.source}]")
        body = r.snippet.strip().replace("\n", "\n   ")
        print(f"   {body[:400]}{'…' if len(body) > 400 else ''}")
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    from memindex.pipeline.search.get import MemoryGetError, memory_get

    settings = _settings(args)
    try:
        res = memory_get(settings, args.path, args.from_line, args.lines)
    except MemoryGetError as exc:
        if args.json:
            print(json.dumps({"path": args.path, "text": "", "error": str(exc)}))
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(res.as_dict(), ensure_ascii=False))
    else:
        sys.stdout.write(res.text + ("" if res.text.endswith("\n") or not res.text else "\n"))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from memindex.pipeline.status import format_status, index_status

    agents = _all_agents(args) if args.all else [args.agent]
    reports = []
    for agent in agents:
        settings = _settings(args, agent)
        from memindex.pipeline.embeddings.embedder import provider_info

        report = index_status(settings, provider_info(settings))
        if settings.memory["backend"] == "qmd":
            from memindex.pipeline.search.backend import open_search

            report.update(open_search(settings).status(probe=True))
        reports.append(report)
    if args.json:
        print(json.dumps(reports if args.all else reports[0], indent=2, default=str))
    else:
        print("\n\n".join(format_status(r) for r in reports))
    return 0


# --- parser ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memindex",
        description="Index and search an agent's Markdown memory (OpenClaw-compatible).",
    )
    p.add_argument("--config", help="openclaw.json (default: $OPENCLAW_CONFIG_PATH or <state>/openclaw.json)")
    p.add_argument("--state-dir", help="state dir (default: $OPENCLAW_STATE_DIR or ~/.openclaw)")
    p.add_argument("--workspace", help="override the agent's workspace directory")
    p.add_argument("--agent", default="main", help="agent id (default: main)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("index", help="sync the index now and wait for it")
    s.add_argument("--force", action="store_true", help="rebuild everything")
    s.add_argument("--all", action="store_true", help="every configured agent")
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(func=cmd_index)

    s = sub.add_parser("search", help="search memory")
    s.add_argument("query", nargs="*", help="the query text")
    s.add_argument("--json", action="store_true", help="print the memory_search payload as JSON")
    s.add_argument("--max-results", type=int, default=None)
    s.add_argument("--min-score", type=float, default=None)
    s.add_argument("--session-key", default=None, help="search on behalf of this session (scope, citations)")
    s.add_argument("--queries", metavar="FILE",
                   help='JSONL of {"id":…,"query":…}; prints one JSON line per query ("-" = stdin)')
    s.set_defaults(func=cmd_search)

    s = sub.add_parser("get", help="read a memory file (memory_get)")
    s.add_argument("path")
    s.add_argument("--from", dest="from_line", type=int, default=None, help="1-based start line")
    s.add_argument("--lines", type=int, default=None, help="number of lines")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_get)

    s = sub.add_parser("status", help="what the index holds and what serves it")
    s.add_argument("--json", action="store_true")
    s.add_argument("--all", action="store_true", help="every configured agent")
    s.set_defaults(func=cmd_status)

    from memindex.producers.cli import batch as cli_batch, ops as cli_ops

    cli_ops.register(sub)
    cli_batch.register(sub)  # batches, backfill --batch (after cli_ops)
    return p


def _setup_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if verbosity < 2:
        for noisy in ("dramatiq", "httpx", "httpcore", "watchdog"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    _setup_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        if "memindex.workers.embedded" in sys.modules:
            sys.modules["memindex.workers.embedded"].stop(idle=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
