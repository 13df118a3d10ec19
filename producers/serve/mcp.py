"""``memindex mcp``: the memory tools on the official MCP SDK, over stdio or streamable HTTP.

Tools ``memory_search``, ``memory_get``, ``memory_status`` (and ``memory_index``, a sync that
waits) answer with the
in-process API's payloads (as structured content, and as JSON text for
clients that read only text); a refusal (unknown agent, a path outside
memory, bad arguments) is a tool error (``is_error``) whose message says why.
"""

from __future__ import annotations

import inspect
import os
import selectors
import signal
import threading
from typing import Annotated, Any, Awaitable, Literal, cast

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from memindex import __version__
from memindex.pipeline.config import defaults as D
from memindex.producers.serve.guard import quiet_client_exits
from memindex.producers.serve.http import protect, run_uvicorn
from memindex.producers.serve.tools import (
    GET_FIELDS, INDEX_FIELDS, SEARCH_FIELDS, STATUS_FIELDS, MemoryTools, OperationError, check_arguments,
)

INSTRUCTIONS = (
    "Long-term memory for this agent: Markdown notes (MEMORY.md, memory/YYYY-MM-DD.md, and "
    "optionally past session transcripts). Use memory_search before answering anything about prior "
    "work, decisions, dates, people or preferences; then memory_get to read around a hit."
)

SEARCH_DESCRIPTION = (
    "Search the agent's long-term memory (Markdown notes and, when enabled, past session transcripts) "
    "for what is relevant to a question: earlier decisions, preferences, people, dates, fixes, todos. "
    "Call it before answering anything about prior work or what the user said before. Returns the "
    f"best-matching snippets (up to ~{D.SNIPPET_CHARS} characters each), best first, each with path, startLine, "
    "endLine, score (0-1) and source ('memory' or 'sessions'); read more of a file with memory_get "
    "using that path and line range. An empty result list means nothing relevant is recorded. "
    "A file written seconds ago may not be searchable yet."
)
GET_DESCRIPTION = (
    "Read a memory file: MEMORY.md, memory/YYYY-MM-DD.md, or any path memory_search returned. "
    "Give 'from' (1-based line) and 'lines' to read only a window, e.g. around a search hit's "
    "startLine. Only Markdown memory files can be read: other paths are refused with the reason. "
    "A memory file that does not exist yet returns empty text (nothing recorded), not an error."
)
STATUS_DESCRIPTION = (
    "What the memory index holds for an agent: files and chunks indexed, the embedding provider and "
    "search mode (hybrid or keyword-only), files still waiting to be indexed, problems, and the list "
    "of configured agents. Use it when memory_search unexpectedly finds nothing."
)

Agent = Annotated[str | None, Field(description="Which agent's memory (default: the server's agent). "
                                    "memory_status lists the configured agents.")]
INDEX_DESCRIPTION = (
    "Sync the memory index now and wait until it is written (what `openclaw memory index` runs through "
    "the OpenClaw plugin): files changed since the last sync are re-indexed, deleted ones removed; "
    "force=true rebuilds it whole. Answers the counts and the status it leaves. Searches already sync "
    "on their own: this is for an operator, rarely for a conversation."
)
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# Writes only memindex's own index, and a second call with nothing changed does nothing.
INDEXING = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


async def _answer(name: str, call: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """The tool's payload; a failed search's is a CallToolResult, which the SDK passes through as it
    is (the tools' ``dict`` annotation is their output schema, which a tool error does not follow)."""
    try:
        return await call
    except OperationError as exc:
        if exc.payload is not None:  # a failed search: a tool error that keeps OpenClaw's payload
            return cast("dict[str, Any]", CallToolResult(content=[TextContent(type="text", text=f"{name}: {exc}")],
                                                         structured_content=exc.payload, is_error=True))
        raise ToolError(str(exc)) from None  # the model reads the reason and can correct its call


_TOOL_FIELDS = {"memory_search": (SEARCH_FIELDS, "query"), "memory_get": (GET_FIELDS, "path"),
                "memory_status": (STATUS_FIELDS, None), "memory_index": (INDEX_FIELDS, None)}


class _StrictServer(MCPServer):
    """The SDK drops arguments its schema does not name (a misspelt ``maxresults`` would then
    quietly mean the default) and coerces the others (``"3"``, ``true``). Both are refused first,
    by the JSON API's rules and in its words, with the names expected."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        spec = _TOOL_FIELDS.get(name)
        if spec is not None and isinstance(arguments, dict):
            try:
                check_arguments(arguments, *spec)
            except OperationError as exc:
                raise ToolError(f"{name}: {exc}") from None
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            # One shape for every error of a tool: "<tool>: <why>" (the SDK says "Error executing
            # tool <tool>: <why>" for the ones raised inside the tool, ours the shorter form).
            text = str(exc)
            sdk = f"Error executing tool {name}: "
            if text.startswith(sdk):
                raise ToolError(f"{name}: {text[len(sdk):]}") from None
            raise


def build_server(tools: MemoryTools) -> MCPServer:
    tools.transport = "mcp"
    server: MCPServer = _StrictServer("memindex", instructions=INSTRUCTIONS, version=__version__,
                                      log_level="WARNING")

    async def memory_search(
        query: Annotated[str, Field(description="What to look for, in natural language or keywords.")],
        maxResults: Annotated[int | None, Field(ge=1, description="At most this many results "
                                                "(default: the agent's query.maxResults, 6).")] = None,
        minScore: Annotated[float | None, Field(description="Drop results scoring below this (0-1; "
                                                "default: the agent's query.minScore).")] = None,
        agent: Agent = None,
        sessionKey: Annotated[str | None, Field(description="The calling session's key "
                                                "(agent:<id>:<channel>:...): its agent is searched when "
                                                "`agent` is not given; decides citations and scope.")] = None,
        corpus: Annotated[Literal["memory", "wiki", "all", "sessions"] | None, Field(
            description="Which corpus to search: memory files, session transcripts, all (the default) "
                        "or wiki (not indexed by memindex).")] = None,
    ) -> dict[str, Any]:
        return await _answer("memory_search", tools.search(query, max_results=maxResults, min_score=minScore,
                                                           agent=agent, session_key=sessionKey, corpus=corpus))

    async def memory_get(**args: Any) -> dict[str, Any]:
        return await _answer("memory_get", tools.get(args["path"], from_line=args.get("from"),
                                                     lines=args.get("lines"), agent=args.get("agent")))

    # "from" is a Python keyword, so the signature the SDK derives the input schema from is built
    # by hand; the SDK then calls the function with the wire names, which **args receives as is.
    kw = inspect.Parameter.KEYWORD_ONLY
    memory_get.__signature__ = inspect.Signature([  # type: ignore[attr-defined]  # read by inspect, unknown to mypy
        inspect.Parameter("path", kw, annotation=Annotated[str, Field(
            description="Workspace-relative memory file, e.g. memory/2026-02-10.md or a search result's path.")]),
        inspect.Parameter("from_", kw, default=None, annotation=Annotated[int | None, Field(
            alias="from", ge=0, description="First line to read (1-based); default: the whole file.")]),
        inspect.Parameter("lines", kw, default=None, annotation=Annotated[int | None, Field(
            ge=0, description="How many lines to read from 'from' (default: to the end).")]),
        inspect.Parameter("agent", kw, default=None, annotation=Agent),
    ], return_annotation=dict[str, Any])

    async def memory_status(agent: Agent = None) -> dict[str, Any]:
        return await _answer("memory_status", tools.status(agent=agent))

    # null is "not given" (false), as the JSON API reads it: typed plain bool, the SDK refused it in pydantic's words.
    async def memory_index(agent: Agent = None, force: Annotated[bool | None, Field(
            description="Rebuild the whole index, not only what changed.")] = None) -> dict[str, Any]:
        return await _answer("memory_index", tools.index(agent=agent, force=force))

    for fn, desc in ((memory_search, SEARCH_DESCRIPTION), (memory_get, GET_DESCRIPTION),
                     (memory_status, STATUS_DESCRIPTION)):
        server.add_tool(fn, name=fn.__name__, description=desc, annotations=READ_ONLY)
    server.add_tool(memory_index, name="memory_index", description=INDEX_DESCRIPTION, annotations=INDEXING)
    return server


def run(tools: MemoryTools, *, http: tuple[str, int] | None = None, token: str | None = None) -> None:
    """stdio (the default) or streamable HTTP at ``http`` = (host, port), endpoint ``/mcp``."""
    server = build_server(tools)
    if http is None:
        _run_stdio(server)
        return
    host, port = http

    quiet_client_exits("mcp.server.streamable_http")
    run_uvicorn(protect(server.streamable_http_app(host=host), token, host), host, port, "memindex mcp (endpoint /mcp)")


def _run_stdio(server: MCPServer) -> None:
    """The stdio session until the client closes stdin, Ctrl-C, or SIGTERM. SIGTERM ends it as
    Ctrl-C does (the session is cancelled) but returns, so the caller's clean stop runs and the exit
    is 0, as for ``serve`` and ``mcp --http``: the default action killed the process (143), and with
    ``--watch`` its embedded workers mid-work."""
    lowlevel = getattr(server, "_lowlevel_server", None)
    if threading.current_thread() is not threading.main_thread() or lowlevel is None:
        server.run("stdio")  # (no signals off the main thread)
        return

    async def serve() -> None:
        wire = _claim_stdin()
        try:
            async with anyio.create_task_group() as group:
                async def stop_on_sigterm() -> None:
                    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                        async for _ in signals:
                            group.cancel_scope.cancel()
                            return

                group.start_soon(stop_on_sigterm)
                stdin = _WireLines(wire) if wire is not None else None
                # The SDK only iterates the lines of its stdin: _WireLines is that, not an AsyncFile.
                async with stdio_server(stdin=stdin) as (read, write):  # type: ignore[arg-type]
                    await lowlevel.run(read, write, lowlevel.create_initialization_options())
                group.cancel_scope.cancel()  # the client closed stdin: stop watching for SIGTERM too
        finally:
            if wire is not None:
                os.dup2(wire, 0)
                os.close(wire)

    anyio.run(serve)


def _claim_stdin() -> int | None:
    """The wire's descriptor, moved off fd 0 (which then reads the null device, as the SDK's own
    claim does: a handler or child process must not read the client's messages). None when stdin
    cannot be waited on (a regular file, or the null device a service manager or ``nohup`` gives:
    the event loop refuses both with EPERM, and both are never "not ready": the SDK's reader ends
    at their EOF)."""
    if not _pollable(0):
        return None
    wire = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return wire


def _pollable(fd: int) -> bool:
    probe = selectors.DefaultSelector()
    try:
        probe.register(fd, selectors.EVENT_READ)
    except (OSError, ValueError):
        return False
    finally:
        probe.close()
    return True


class _WireLines:
    """The client's lines from ``fd``, read when the event loop says it is readable. The SDK reads
    stdin in a worker thread, which no cancellation interrupts: a SIGTERM (or Ctrl-C) while the
    client kept stdin open left the process waiting for a line that never came."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf, self.eof = fd, b"", False
        os.set_blocking(fd, False)

    def __aiter__(self) -> "_WireLines":
        return self

    async def __anext__(self) -> str:
        while True:
            end = self.buf.find(b"\n")
            if end >= 0 or (self.eof and self.buf):
                cut = end + 1 if end >= 0 else len(self.buf)
                line, self.buf = self.buf[:cut], self.buf[cut:]
                return line.decode("utf-8", "replace")
            if self.eof:
                raise StopAsyncIteration
            await anyio.wait_readable(self.fd)
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                continue
            self.eof = not chunk
            self.buf += chunk
