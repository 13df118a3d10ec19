"""``memindex mcp`` and ``memindex serve``: long-lived servers for agent runtimes.

Both serve every configured agent from one process (``--agent ID``: that agent
alone), with engines and the query embedder kept loaded. They need the ``serve`` extra; without it they
say so in one line.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import socket
import sys
from pathlib import Path

from memindex.pipeline.config import environ
from memindex.pipeline.config.agents import PerSettings
from memindex.pipeline.config.settings import AgentSettings, Context
from memindex.pipeline.search.backend import SearchEngine, open_search
from memindex.pipeline.config.paths import validate_agent_id
from memindex.pipeline.errors import ConfigError, EnvError
from memindex.producers.cli.agents import base_context
from memindex.producers.cli.runner import run_for_server
from memindex.producers.cli.ops import Producers, metrics_port, start_producers
from memindex.producers.cli.options import say, say_error
from memindex.producers.serve import TOKEN_ENV, daemon
from memindex.producers.serve.tools import MemoryTools, OperationError
from memindex.workers.batch.backend import job_state_counts
from memindex.workers.broker import full_probe
from memindex.workers.metrics import serve_metrics
from memindex.workers.queues import depth

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


def _tools(args: argparse.Namespace, *, broken_ok: bool = True) -> MemoryTools:
    """The memory tools, checked to serve at least one agent. A config that cannot be loaded (not
    JSON5, unreadable, a bad value) is served as one that turns bad while the server runs: every
    call answers its error (config_error) and /healthz 503, until it is fixed; one warning line says
    so now. A bad --agent (a flag of this command line, not the config) still stops the start, and
    so does any config error without ``broken_ok``."""
    try:
        base = base_context(args)
    except ConfigError as exc:
        # --agent (an id no config can make valid, or one it does not list) and a MEMINDEX_* variable
        # are this start's own arguments, not the config file: they still stop it.
        if exc.key.startswith("-") or isinstance(exc, EnvError) or not broken_ok:
            raise
        # The agent as --agent names it (checked as the CLI checks it), else the default agent, as
        # the config reads on each call once it loads.
        agent = validate_agent_id(args.agent) if args.agent is not None else None
        base = Context(agent, args.config, args.state_dir, args.workspace)  # (context_for's, with no agent)
    # --agent confines the server to that agent; without it every configured agent is served.
    tools = MemoryTools(base, only=base.agent_id if args.agent else None)
    try:
        tools.agent_ids()
    except ConfigError as exc:
        if isinstance(exc, EnvError) or not broken_ok:
            raise
        say(f"{exc}; serving anyway: every call answers this error until the config is fixed",
            prefix="warning")
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

    def __init__(self, tools: MemoryTools) -> None:
        self.tools, self.base, self.only = tools, tools.base, tools.only
        self._engines: PerSettings[SearchEngine] = PerSettings()

    def context(self, agent_id: str) -> Context:
        return self.tools.context(agent_id)

    def engine(self, settings: AgentSettings) -> SearchEngine:
        return self._engines.get(settings, lambda: open_search(settings, query_embedder="auto"))


def cmd_mcp(args: argparse.Namespace) -> int:
    if _missing_extra("mcp"):
        return 2
    # lazy: the serve extra (MCP SDK, Starlette, uvicorn) may be absent, which _missing_extra said
    from memindex.producers.serve import mcp
    from memindex.producers.serve.http import parse_bind, require_token_off_loopback

    try:
        http = parse_bind(args.http) if args.http else None
        if http is not None:
            require_token_off_loopback(http[0], _token(args))
    except OperationError as exc:
        say_error(f"{exc}")
        return 2
    # --watch: the watcher needs the config to know what to watch, so one it cannot load stops the start.
    tools = _tools(args, broken_ok=not args.watch)
    running: Producers | None = None
    try:
        contexts = [tools.context(a) for a in tools.agent_ids()]
    except ConfigError:
        contexts = []  # (the metrics' gauges: none until the config loads)
    args.metrics_port = metrics_port(args)
    if args.metrics_port:  # first: a busy port is said before anything has started
        serve_metrics(args.metrics_port, contexts, job_state_counts, queue_depth=depth, broker_full=full_probe())
    if args.watch:
        # The agents the config lists as it changes (added, removed, workspace moved), as `watch --all`.
        running = start_producers(contexts, reload=lambda: [tools.context(a) for a in tools.agent_ids()])
    try:
        mcp.run(tools, http=http, token=_token(args) if http else None)
    finally:
        if running is not None:
            running.stop()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    pid_file = Path(args.pid_file).expanduser().absolute() if args.pid_file else (
        daemon.default_pid_file() if args.daemon or args.stop else None)
    if args.stop:
        if args.daemon or args.socket:
            say_error("--stop ends a running server: give it alone (with --pid-file if one was given)")
            return 2
        assert pid_file is not None  # (--stop: the default pid file when none is given)
        # (the server's drain, as http.py reads it: without importing the web stack to stop one)
        print(daemon.stop(pid_file, environ.SERVE_DRAIN_S.get() + 5.0), file=sys.stderr)
        return 0
    if _missing_extra("serve"):
        return 2
    # lazy: the serve extra (Starlette, uvicorn) may be absent, which _missing_extra said
    from memindex.producers.serve.http import (
        EARLY_STOP, address_of, build_app, listen_socket, parse_bind, protect, require_token_off_loopback, run_uvicorn,
    )

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
    EARLY_STOP.install()  # a SIGTERM once the port listens, before uvicorn runs, still stops with exit 0
    unix_path = Path(args.socket).expanduser().absolute() if args.socket is not None else None

    def bind() -> socket.socket:
        return daemon.unix_socket(unix_path) if unix_path is not None else listen_socket(host, port)

    sock: socket.socket | None = None
    detached: daemon.Detached | None = None
    if args.daemon:
        assert pid_file is not None  # (--daemon: the default pid file when none is given)
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
        app = build_app(tools, cli=lambda argv: run_for_server(argv, serving))
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
