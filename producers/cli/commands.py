"""Every ``memindex`` command: a light spec each, and the one place command code is loaded.

A spec holds what the parser needs (the name, help, examples and the function adding its
options, from ``arguments.py``) and names the code that runs it as ``"module:function"``. That
module is imported with importlib when the command runs (``Run``), never before: a `memindex
search` loads the search module and not the queue, vector or web code other commands need, and
``--help``, ``--version`` and completion load no command code at all. Command modules import
what they need at their top.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from memindex.producers.cli import arguments as A
from memindex.producers.cli.options import examples
from memindex.producers.cli.remote import command_of
from memindex.producers.serve import DEFAULT_PORT

_CLI = "memindex.producers.cli"


class Handler(Protocol):
    def __call__(self, args: argparse.Namespace) -> int: ...


@dataclass(frozen=True)
class Run:
    """A command's run function, imported when called (the CLI's one lazy import of its own code)."""

    target: str  # "package.module:function"

    def __call__(self, args: argparse.Namespace) -> int:
        module, _, name = self.target.partition(":")
        handler: Handler = getattr(importlib.import_module(module), name)
        return handler(args)


@dataclass(frozen=True)
class Command:
    name: str
    run: str  # "package.module:function", imported only when the command runs
    help: str
    description: str
    examples: tuple[tuple[str, str], ...]
    arguments: Callable[[argparse.ArgumentParser], None]

    def add_to(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
        s = sub.add_parser(self.name, help=self.help, **examples(*self.examples, description=self.description))
        self.arguments(s)
        s.set_defaults(func=Run(self.run))
        return s


# In the order `memindex --help` lists them.
COMMANDS: tuple[Command, ...] = (
    Command("index", f"{_CLI}.index:run", "sync the index now and wait for it",
            "Bring the index up to date with the Markdown on disk and wait until it is searchable. Without "
            "--agent, every configured agent (as `openclaw memory index`).",
            (("memindex index", "every configured agent"),
             ("memindex index --agent ops --force", "rebuild agent ops from scratch")),
            A.index),
    Command("search", f"{_CLI}.search:run", "search memory",
            "Hybrid (vector + keyword) search of one agent's memory, the default agent unless --agent. Text "
            "output is `openclaw memory search`'s.",
            (('memindex search "router VLAN"', "score path:lines and the snippet per result"),
             ('memindex search --json --max-results 3 "kafka"', "the memory_search payload"),
             ("memindex search --queries q.jsonl", "one JSON line per query")),
            A.search),
    Command("get", f"{_CLI}.get:run", "read a memory file (memory_get)",
            "Read a memory Markdown file the way the memory_get tool does: MEMORY.md, memory/**.md and "
            "extraPaths only; symlinks and traversal are refused.",
            (("memindex get memory/2026-02-10.md --from 3 --lines 5", "five lines from line 3"),
             ("memindex get ../team/plan.md", "a file of an extraPaths directory, as search names it")),
            A.get),
    Command("status", f"{_CLI}.status:run", "what the index holds and what serves it",
            "Files, chunks, provider, vector and FTS state per agent; without --agent every configured "
            "agent. --json prints `openclaw memory status --json`'s shape.",
            (("memindex status", "every configured agent"),
             ("memindex status --deep --agent ops", "also send one embedding request and time it"),
             ("memindex status --index --json", "sync first, then OpenClaw's JSON shape")),
            A.status),
    Command("completion", f"{_CLI}.runner:cmd_completion", "print a shell completion script",
            "Tab completion for commands and options (argcomplete).",
            (('eval "$(memindex completion bash)"', "enable completion in this bash session"),
             ("memindex completion zsh > ~/.zfunc/_memindex", "install it for zsh")),
            A.completion),
    Command("watch", f"{_CLI}.ops:cmd_watch", "keep the index fresh: watcher + interval sync (+ in-process workers)",
            "Sync once, then watch the memory files and sync on change; without MEMINDEX_BROKER_URL the "
            "workers run in this process.",
            (("memindex watch", "the default agent, until Ctrl-C"),
             ("memindex watch --all", "every configured agent (the Procfile's watcher)")),
            A.watch),
    Command("backfill", f"{_CLI}.ops:cmd_backfill", "enqueue a whole workspace in bulk",
            "Plan the agent's files (the default agent, --agent ID, or --all for every configured one) and "
            "stream them into the queue in groups; with Redis it returns once enqueued (the workers index), "
            "embedded it waits.",
            (("memindex backfill --all", "enqueue every configured agent and return"),
             ("memindex backfill --wait --timeout 600", "enqueue, then follow progress to the end"),
             ("memindex backfill --batch", "embed through the provider's batch API")),
            A.backfill),
    Command("queues", f"{_CLI}.ops:cmd_queues", "queue depth per queue and pending work per agent",
            "Queue depths on the broker and pending files per agent (every configured agent unless --agent).",
            (("memindex queues", "messages ready / delayed / running / prefetched / dead per queue"),
             ("memindex queues --watch --interval 5", "refresh every 5 s until Ctrl-C")),
            A.queues),
    Command("health", f"{_CLI}.ops:cmd_health", "exit non-zero unless this host's memindex processes are consuming",
            "Reads the heartbeats that worker processes and `memindex watch` keep on Redis: fails when one is "
            "stale (stopped, paused, hung) or when its queue has messages but nothing was consumed.",
            (("memindex health", "every worker and watcher on this host (compose healthcheck)"),
             ("memindex health --stall-seconds 60", "stricter: queue not moving for 60 s")),
            A.health),
    Command("dead-letters", f"{_CLI}.ops:cmd_dead_letters", "jobs that failed after all retries",
            "Messages that exhausted their retries on the Redis broker (with --agent, that agent's).",
            (("memindex dead-letters", "what failed, for which agent, the last error"),
             ("memindex dead-letters --replay", "re-enqueue them with a fresh retry budget"),
             ("memindex --agent ops dead-letters --discard", "drop ops' for good (work that can never succeed)")),
            A.dead_letters),
    Command("worker", f"{_CLI}.ops:cmd_worker", "run dramatiq workers on MEMINDEX_BROKER_URL",
            "Exec `dramatiq memindex.workers.actors:get_broker` with the right queues (the Procfile's worker, compute, "
            "batch and writer processes). sync is file-side (it reads the workspaces and stores); embed and "
            "batch are compute-side and may run on another host.",
            (("memindex worker --queues sync --processes 1", "file side: plan syncs, read and chunk files"),
             ("memindex worker --queues embed --processes 4", "compute side: embed only, no filesystem needed"),
             ("memindex worker --queues batch --threads 2", "compute side: batch-API jobs (state in Redis)"),
             ("memindex worker --writer", "the single writer process"),
             ("memindex worker --writer --shard 0/2", "writer of shard 0 of 2 (write.0)")),
            A.worker),
    Command("batches", f"{_CLI}.batch:cmd_batches", "batch embedding jobs: in flight, state and counts",
            "Provider batch jobs (remote.batch.enabled): id, state, phase, done/requests, failed and redone "
            "items.",
            (("memindex batches", "the default agent's batch jobs"),
             ("memindex batches --all --json", "every configured agent, as JSON")),
            A.batches),
    Command("mcp", f"{_CLI}.serve:cmd_mcp", "MCP server (memory_search, memory_get, memory_status, memory_index) on stdio or HTTP",
            "Serve every configured agent's memory to MCP clients (with --agent, that agent's alone); engines "
            "and the query embedder stay loaded between calls.",
            (("memindex mcp", "stdio, as Claude Code / Cursor start it"),
             ("memindex mcp --http 127.0.0.1:8765 --watch", "streamable HTTP at /mcp, watcher on"),
             ("memindex mcp --agent ops", "ops' memory only: calls naming another agent are refused")),
            A.mcp),
    Command("serve", f"{_CLI}.serve:cmd_serve", "JSON HTTP API: POST /v1/search, POST /v1/get, GET /v1/status",
            "The memory tools as a small JSON API for runtimes that are not Python (curl examples in "
            "docs/servers.md).",
            (("memindex serve", f"http://127.0.0.1:{DEFAULT_PORT}, no token needed"),
             ("memindex serve --daemon --socket /run/user/$UID/memindex/serve.sock",
              "in the background, for `memindex search --server unix:...`"),
             ("memindex serve --stop", "end the one --daemon started"),
             ("MEMINDEX_TOKEN=s3cret memindex serve --host 0.0.0.0", "off-loopback: token required")),
            A.serve),
)
BY_NAME = {c.name: c for c in COMMANDS}


def command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, found without a parser (None: none, or a form only the full
    parser can read: ``--help`` first, an unknown word)."""
    command = command_of(list(argv))
    return command if command in BY_NAME else None
