"""``memindex mcp`` and ``memindex serve``: long-lived servers for agent runtimes (hooked into main.py).

Both serve every configured agent from one process (``--agent ID``: that agent
alone), with engines and the query embedder kept loaded. They need the ``serve`` extra; without it they
say so in one line.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys

from memindex.producers.cli.agents import base_context
from memindex.producers.cli.options import examples, metrics_address, say_error
from memindex.producers.serve import DEFAULT_HOST, DEFAULT_PORT, TOKEN_ENV

EXTRA_HINT = "pip install 'memindex[serve]'"


def _missing_extra(command: str) -> bool:
    if importlib.util.find_spec("mcp") is not None:
        return False
    say_error(f"memindex {command} needs the MCP SDK and its web stack: {EXTRA_HINT}")
    return True


def _token(args: argparse.Namespace) -> str | None:
    """--token, else $MEMINDEX_TOKEN; blank is none. A request's token is compared stripped, so a
    blank one (MEMINDEX_TOKEN=" ") was taken as a token that no request could ever match, and let
    a 0.0.0.0 bind start; a padded one (" s3cret") likewise locked everyone out."""
    given = [raw for raw in (args.token, os.environ.get(TOKEN_ENV)) if raw is not None]
    for raw in given:
        if raw.strip():
            return raw.strip()
    return "" if given else None  # "": one was given, blank (refused off loopback, and said so)


def _tools(args: argparse.Namespace):  # -> MemoryTools, checked to serve at least one agent
    from memindex.producers.serve.tools import MemoryTools

    base = base_context(args)
    # --agent confines the server to that agent; without it every configured agent is served.
    tools = MemoryTools(base, only=base.agent_id if args.agent else None)
    tools.agent_ids()  # a broken config fails here, at start, with the ConfigError line
    # A long-lived server: what start-up loaded (modules, config) is never garbage, and frozen it
    # is left out of full collections, which otherwise stall every request in flight.
    gc.collect()
    gc.freeze()
    return tools


def cmd_mcp(args: argparse.Namespace) -> int:
    if _missing_extra("mcp"):
        return 2
    from memindex.producers.serve import mcp
    from memindex.producers.serve.http import parse_bind, require_token_off_loopback
    from memindex.producers.serve.tools import OperationError

    try:
        http = parse_bind(args.http) if args.http else None
        if http is not None:
            require_token_off_loopback(http[0], _token(args))
    except OperationError as exc:
        say_error(f"{exc}")
        return 2
    tools = _tools(args)
    running = None
    contexts = [tools.context(a) for a in tools.agent_ids()]
    if args.metrics_port:  # first: a busy port is said before anything has started
        from memindex.workers.batch.backend import job_state_counts
        from memindex.workers.broker import full_probe
        from memindex.workers.metrics import serve_metrics

        serve_metrics(args.metrics_port, contexts, job_state_counts, full_probe())
    if args.watch:
        from memindex.producers.cli.ops import start_producers

        # The agents the config lists as it changes (added, removed, workspace moved), as `watch --all`.
        running = start_producers(contexts, reload=lambda: [tools.context(a) for a in tools.agent_ids()])
    try:
        mcp.run(tools, http=http, token=_token(args) if http else None)
    finally:
        if running is not None:
            running.stop()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    if _missing_extra("serve"):
        return 2
    from memindex.producers.serve.http import build_app, parse_bind, protect, require_token_off_loopback, run_uvicorn
    from memindex.producers.serve.tools import OperationError

    token = _token(args)
    try:
        host, port = parse_bind(f"{args.host}:{args.port}")
        require_token_off_loopback(host, token)
    except OperationError as exc:
        say_error(f"{exc}")
        return 2
    run_uvicorn(protect(build_app(_tools(args)), token, host), host, port, "memindex serve")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    token_help = f"bearer token clients must send (default ${TOKEN_ENV}); required off 127.0.0.1"
    s = sub.add_parser("mcp", help="MCP server (memory_search, memory_get, memory_status) on stdio or HTTP",
                       **examples(
                           ("memindex mcp", "stdio, as Claude Code / Cursor start it"),
                           ("memindex mcp --http 127.0.0.1:8765 --watch", "streamable HTTP at /mcp, watcher on"),
                           ("memindex mcp --agent ops", "ops' memory only: calls naming another agent are refused"),
                           description="Serve every configured agent's memory to MCP clients (with --agent, "
                                       "that agent's alone); engines and the query embedder stay loaded "
                                       "between calls."))
    s.add_argument("--http", metavar="[HOST:]PORT",
                   help=f"streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST default {DEFAULT_HOST})")
    s.add_argument("--token", help=token_help)
    s.add_argument("--watch", action="store_true",
                   help="also run the file watcher and interval sync in this process (default: a sync is "
                        "scheduled on each search, as the runtime hooks do)")
    s.add_argument("--metrics-port", metavar="[HOST:]PORT", type=metrics_address, default=None,
                   help="serve Prometheus metrics (searches, latency, files pending per agent) on "
                        "PORT at /metrics, 127.0.0.1 unless HOST is given (off by default; see README, Operations)")
    s.set_defaults(func=cmd_mcp)

    s = sub.add_parser("serve", help="JSON HTTP API: POST /v1/search, POST /v1/get, GET /v1/status",
                       **examples(
                           ("memindex serve", "http://127.0.0.1:%d, no token needed" % DEFAULT_PORT),
                           ("MEMINDEX_TOKEN=s3cret memindex serve --host 0.0.0.0", "off-loopback: token required"),
                           description="The memory tools as a small JSON API for runtimes that are not "
                                       "Python (curl examples in the README)."))
    s.add_argument("--host", default=DEFAULT_HOST, help=f"bind address (default {DEFAULT_HOST})")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    s.add_argument("--token", help=token_help)
    s.set_defaults(func=cmd_serve)
