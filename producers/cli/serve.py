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

from memindex.pipeline.config import environ
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
    given = [raw for raw in (args.token, environ.TOKEN.raw()) if raw is not None]
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


class CliServing:
    """What a ``--server`` call runs against: the server's config and agents (``MemoryTools``), and
    engines opened as the in-process CLI opens them, kept warm per agent settings. Not the
    servers' engines, which schedule a sync on search (a stat of every file every 2 s at most):
    a CLI search schedules none, and its answer and cost must be the same either way."""

    def __init__(self, tools) -> None:  # tools: MemoryTools
        from memindex.pipeline.config.agents import PerSettings

        self.tools, self.base, self.only = tools, tools.base, tools.only
        self._engines: PerSettings = PerSettings()

    def context(self, agent_id: str):
        return self.tools.context(agent_id)

    def engine(self, settings):
        from memindex.pipeline.search.backend import open_search

        return self._engines.get(settings, lambda: open_search(settings, query_embedder="auto"))


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
    from memindex.producers.cli.ops import metrics_port

    args.metrics_port = metrics_port(args)
    if args.metrics_port:  # first: a busy port is said before anything has started
        from memindex.workers.batch.backend import job_state_counts
        from memindex.workers.broker import full_probe
        from memindex.workers.metrics import serve_metrics
        from memindex.workers.queues import depth

        serve_metrics(args.metrics_port, contexts, job_state_counts, queue_depth=depth, broker_full=full_probe())
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
    from pathlib import Path

    from memindex.producers.serve import daemon

    pid_file = Path(args.pid_file).expanduser().absolute() if args.pid_file else (
        daemon.default_pid_file() if args.daemon or args.stop else None)
    if args.stop:
        if args.daemon or args.socket:
            say_error("--stop ends a running server: give it alone (with --pid-file if one was given)")
            return 2
        from memindex.producers.serve.http import DRAIN_S

        print(daemon.stop(pid_file, DRAIN_S + 5.0), file=sys.stderr)
        return 0
    if _missing_extra("serve"):
        return 2
    from memindex.producers.serve.http import (
        address_of, build_app, listen_socket, parse_bind, protect, require_token_off_loopback, run_uvicorn,
    )
    from memindex.producers.serve.tools import OperationError

    token = _token(args)
    try:
        host, port = parse_bind(f"{args.host}:{args.port}")
        if args.socket is None:
            require_token_off_loopback(host, token)
    except OperationError as exc:
        say_error(f"{exc}")
        return 2
    if pid_file is not None:
        daemon.claim_pid_file(pid_file)
    unix_path = Path(args.socket).expanduser().absolute() if args.socket is not None else None

    def bind():
        return daemon.unix_socket(unix_path) if unix_path is not None else listen_socket(host, port)

    sock, detached = None, None
    if args.daemon:
        # Bound before the fork: a busy port or a bad socket path is said by the command the user
        # ran, with its exit code; callers that connect meanwhile wait in the backlog.
        sock = bind()
        detached = daemon.Detached(pid_file.with_suffix(".log"))
        code = detached.fork()
        if code is not None:  # the command the user ran: the server started (0) or said why not
            sock.close()
            return code
    try:
        tools = _tools(args)
        if sock is None:  # in the foreground, bound once it can answer (a caller seeing the port is served)
            sock = bind()
        if pid_file is not None:
            daemon.write_pid_file(pid_file)
        serving = CliServing(tools)
        app = build_app(tools, cli=lambda argv: args.cli_runner(argv, serving))
        if detached is not None:
            detached.ready(f"memindex serve running in the background on {address_of(sock)} (pid {os.getpid()}; "
                           f"pid file {pid_file}, log {detached.log_file}); `memindex serve --stop` ends it")
        # Over a Unix socket the directory's mode is the lock; the Host check still applies (a
        # token, when one is set, too).
        run_uvicorn(protect(app, token, host if unix_path is None else "localhost"), host, port, "memindex serve",
                    sock=sock)
    finally:
        if pid_file is not None:
            daemon.remove_pid_file(pid_file)
        if unix_path is not None and sock is not None:  # ours: made by daemon.unix_socket above
            try:
                unix_path.unlink()
            except OSError:
                pass
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
                           ("memindex serve --daemon --socket /run/user/$UID/memindex/serve.sock",
                            "in the background, for `memindex search --server unix:...`"),
                           ("memindex serve --stop", "end the one --daemon started"),
                           ("MEMINDEX_TOKEN=s3cret memindex serve --host 0.0.0.0", "off-loopback: token required"),
                           description="The memory tools as a small JSON API for runtimes that are not "
                                       "Python (curl examples in the README)."))
    s.add_argument("--host", default=DEFAULT_HOST, help=f"bind address (default {DEFAULT_HOST})")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    s.add_argument("--token", help=token_help)
    s.add_argument("--socket", metavar="PATH", default=None,
                   help="listen on this Unix socket instead of HOST:PORT (made 0600; its directory must be "
                        "yours alone, 0700, and is made so when missing), e.g. $XDG_RUNTIME_DIR/memindex/serve.sock")
    s.add_argument("--daemon", action="store_true",
                   help="run in the background once ready (pid file: --pid-file, default "
                        "<runtime dir>/serve.pid; output to the pid file's .log)")
    s.add_argument("--pid-file", metavar="PATH", default=None,
                   help="write this process's pid here (removed at exit); with --stop, the server to end")
    s.add_argument("--stop", action="store_true", help="stop the server the pid file names (SIGTERM) and exit")
    s.set_defaults(func=cmd_serve)
