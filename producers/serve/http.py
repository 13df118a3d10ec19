"""``memindex serve``: the memory operations as a small JSON HTTP API (Starlette on uvicorn).

    POST /v1/search  {"query", "maxResults"?, "minScore"?, "agent"?, "sessionKey"?, "corpus"?} -> memory_search payload
    POST /v1/get     {"path", "from"?, "lines"?, "agent"?}                            -> memory_get payload
    GET  /v1/status[?agent=ID]                                                        -> status report
    GET  /healthz                                                -> {"ok": true} (503 {"ok": false, ...}: config)
    GET  /metrics                                                                     -> Prometheus text (searches, latency)

Errors are ``{"error": {"code", "message"}}`` with a matching HTTP status.
Anything but a loopback bind needs a bearer token (``BearerAuth``, also used
by ``memindex mcp --http``), compared in constant time; request bodies are
capped at ``MAX_BODY_BYTES``.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import signal
import socket
import sys
import threading
from typing import Any, Awaitable, Callable

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memindex.pipeline.errors import MemindexError
from memindex.pipeline.config import environ
from memindex.producers.serve import DEFAULT_HOST, TOKEN_ENV
from memindex.producers.serve.guard import guarded_protocol
from memindex.pipeline.search.aio import run_in_pool
from memindex.producers.serve.tools import (
    GET_FIELDS, SEARCH_FIELDS, STATUS_FIELDS, MemoryTools, OperationError, check_arguments, check_fields, escaped,
)

MAX_BODY_BYTES = 64 * 1024  # a query or a path: generous, yet no client can make the server buffer megabytes
UNAUTHENTICATED_PATHS = frozenset({"/healthz"})  # says only "up": safe for load balancers and probes
# A request body must arrive whole within this many seconds: a client that stalled mid-body held its
# connection (and a SIGTERM's drain) for ever.
BODY_TIMEOUT_S = environ.SERVE_BODY_TIMEOUT_S.get()
# SIGTERM / Ctrl-C waits this long for open requests, then cancels them (503): under docker's default
# 10 s stop grace the process still exits by itself, with 0, rather than being killed.
DRAIN_S = environ.SERVE_DRAIN_S.get()


def is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_token_off_loopback(host: str, token: str | None) -> None:
    """Refuse to expose memory beyond this machine without a token."""
    if not (token or "").strip() and not is_loopback(host):  # blank: no request could match it
        raise OperationError("token_required", f"binding {host} exposes memory beyond this machine: "
                             f"give --token or set {TOKEN_ENV} (or bind 127.0.0.1)"
                             + (" - the token given is blank" if token is not None else ""))


def parse_bind(value: str, default_host: str = DEFAULT_HOST) -> tuple[str, int]:
    """'[HOST:]PORT' -> (host, port); IPv6 hosts in brackets ('[::1]:8377')."""
    host, sep, port = value.rpartition(":")
    host = host if sep else default_host
    try:
        n = int(port)
    except ValueError:
        raise OperationError("bad_request", f"bad address {value!r}: expected [HOST:]PORT, e.g. 127.0.0.1:8377") from None
    if not 0 < n < 65536:
        raise OperationError("bad_request", f"bad port {n}: expected 1-65535")
    return host.strip("[]") or default_host, n


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    await JSONResponse(body, status, headers=headers)({"type": "http"}, _no_receive, send)


async def _no_receive() -> dict[str, Any]:  # a response never reads the request
    return {"type": "http.disconnect"}


class BearerAuth:
    """ASGI middleware: every HTTP request but ``UNAUTHENTICATED_PATHS`` must carry the token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = token.encode()

    def _authorized(self, headers: list[tuple[bytes, bytes]]) -> bool:
        given = [v for k, v in headers if k.lower() == b"authorization"]
        if len(given) != 1:  # none, or several (which one would a proxy have checked?)
            return False
        scheme, _, credentials = given[0].strip().partition(b" ")
        # The scheme is case-insensitive (RFC 7235); the token is compared in constant time.
        return scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(), self.expected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in UNAUTHENTICATED_PATHS:
            if not self._authorized(scope["headers"]):
                err = OperationError("unauthorized", "missing or wrong bearer token (Authorization: Bearer <token>)", 401)
                await _send_json(send, 401, err.as_dict(), {"WWW-Authenticate": "Bearer"})
                return
        await self.app(scope, receive, send)


class LoopbackHosts:
    """ASGI middleware for a loopback bind: only requests addressed to a loopback name.

    A web page can make its own host name resolve to 127.0.0.1 (DNS rebinding) and then read
    this API as same-origin; its requests still carry that name in ``Host``, so they are
    refused (421, as the MCP SDK's transport does). Any other page's requests carry its
    ``Origin``: refused too (403). It could not read the answers (no CORS headers go out), but a
    plain ``text/plain`` POST needs no preflight, so it could run searches and syncs on the
    user's behalf. Runtimes and curl send no ``Origin``; a page served from loopback may.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            host = headers.get(b"host", b"").decode("latin-1")
            if not is_loopback(_host_name(host)):
                err = OperationError("misdirected", f"Host {host!r} is not this loopback server's name "
                                                    "(use localhost or 127.0.0.1)", 421)
                await _send_json(send, 421, err.as_dict())
                return
            origin = headers.get(b"origin")
            if origin is not None and not is_loopback(_origin_host(origin.decode("latin-1"))):
                err = OperationError("forbidden_origin", f"requests from web pages ({escaped(origin.decode('latin-1'))[:200]}) "
                                                         "are refused: this server is for local runtimes", 403)
                await _send_json(send, 403, err.as_dict())
                return
        await self.app(scope, receive, send)


def _origin_host(origin: str) -> str:
    """``http://localhost:5173`` -> ``localhost``; ``null`` (a sandboxed or file: page) -> ``null``."""
    rest = origin.split("://", 1)[1] if "://" in origin else origin
    return _host_name(rest.split("/", 1)[0])


def _host_name(host: str) -> str:
    """A Host header's name without its port: ``[::1]:8377`` -> ``::1``, ``localhost:8377`` -> ``localhost``."""
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def protect(app: ASGIApp, token: str | None, bind_host: str) -> ASGIApp:
    """The token check (when there is a token) and, on a loopback bind, the Host check."""
    app = BearerAuth(app, token) if token else app
    return LoopbackHosts(app) if is_loopback(bind_host) else app


class _DuplicateKey(MemindexError, ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object with a key twice is refused: a proxy that vets the first ``agent`` while
    we took the last (json's default) would let a caller choose another agent's memory."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(f"request body has the key {key!r} twice")
        data[key] = value
    return data


def _known_query_params(request: Request, fields: dict[str, str]) -> None:
    """Refuse a parameter the route does not take, as the POST routes refuse an unknown field: a
    misspelt ``?agnet=ops`` answered the default agent's status, as if it were ops'."""
    unknown = sorted(set(request.query_params.keys()) - set(fields))
    if unknown:
        raise OperationError("bad_request", f"unknown query parameter(s) {', '.join(map(escaped, unknown))}; "
                                            f"expected {', '.join(fields)}")


def _one_query_param(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise OperationError("bad_request", f"query parameter {name!r} given {len(values)} times")
    return values[0] if values else None


async def _json_body(request: Request, max_bytes: int) -> dict[str, Any]:
    too_large = OperationError("too_large", f"request body over {max_bytes} bytes", 413)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise too_large  # refused before reading a byte
    body = bytearray()
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_bytes:
                    raise too_large
    except TimeoutError:
        raise OperationError("timeout", f"the request body did not arrive within {BODY_TIMEOUT_S:g} s", 408) from None
    except ClientDisconnect:  # the client left mid-body: nobody reads an answer, nothing to log
        raise OperationError("client_disconnected", "the client closed the connection before its body ended",
                             400) from None
    try:
        data = json.loads(body or b"{}", object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise OperationError("bad_json", str(exc)) from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: nesting thousands deep
        raise OperationError("bad_json", f"request body is not JSON: {type(exc).__name__}: {exc}") from None
    if not isinstance(data, dict):
        raise OperationError("bad_request", "request body must be a JSON object")
    return data


def build_app(tools: MemoryTools, *, max_body_bytes: int = MAX_BODY_BYTES,
              cli: Callable[[list[str]], tuple[int, str, str]] | None = None) -> Starlette:
    """The JSON API; with ``cli``, also ``POST /v1/cli`` {"argv": [...]} -> {"exit", "stdout", "stderr"}:
    a ``memindex search|get --server`` command line run by ``cli`` (producers/cli/remote.py)."""
    tools.transport = "http"
    async def search(request: Request) -> Response:
        kw = check_arguments(await _json_body(request, max_body_bytes), SEARCH_FIELDS, "query")
        return JSONResponse(await tools.search(kw.pop("query"), **kw))

    async def get(request: Request) -> Response:
        kw = check_arguments(await _json_body(request, max_body_bytes), GET_FIELDS, "path")
        return JSONResponse(await tools.get(kw.pop("path"), **kw))

    async def status(request: Request) -> Response:
        _known_query_params(request, STATUS_FIELDS)
        return JSONResponse(await tools.status(agent=_one_query_param(request, "agent")))

    async def healthz(request: Request) -> Response:
        # "up" means able to answer: with an unreadable or invalid config every request fails, so a
        # probe sees 503. Only the code: this route needs no token, the message names paths.
        try:
            tools.settings(None)
        except OperationError as exc:
            return JSONResponse({"ok": False, "error": exc.code}, 503)
        return JSONResponse({"ok": True})

    async def metrics(request: Request) -> Response:
        # Behind the token like the memory routes: labels name agents.
        # lazy: workers.metrics loads dramatiq; an app without a scraper never needs it
        from memindex.workers.metrics import exposition

        body, content_type = exposition()
        return Response(body, media_type=content_type)

    async def cli_call(request: Request) -> Response:
        assert cli is not None
        argv = check_fields(await _json_body(request, max_body_bytes), {"argv": "argv"}).get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise OperationError("bad_request", "argv must be a list of strings (a memindex command line)")
        code, out, err = await run_in_pool(cli, argv)
        # ASCII JSON: a lone surrogate the command echoed (a query's bytes) cannot be UTF-8 encoded.
        return Response(json.dumps({"exit": code, "stdout": out, "stderr": err}), media_type="application/json")

    async def operation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, OperationError)
        return JSONResponse(exc.as_dict(), exc.status)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse({"error": {"code": code, "message": f"{request.method} {request.url.path}: "
                                       f"{exc.detail}"}}, exc.status_code)

    async def internal_error(request: Request, exc: Exception) -> Response:
        # The message, never a traceback; the server's log has the rest.
        print(f"memindex serve: {request.method} {request.url.path} failed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return JSONResponse({"error": {"code": "internal", "message": f"{type(exc).__name__}: {exc}"}}, 500)

    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        OperationError: operation_error, HTTPException: http_error, Exception: internal_error}
    return Starlette(routes=[
        Route("/v1/search", search, methods=["POST"]),
        Route("/v1/get", get, methods=["POST"]),
        Route("/v1/status", status, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *([Route("/v1/cli", cli_call, methods=["POST"])] if cli is not None else []),
    ], exception_handlers=handlers)


class CannotListen(MemindexError):
    """The address to serve on cannot be bound (a port in use, a host not of this machine)."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound and listening on (host, port), made here rather than by uvicorn: uvicorn binds
    only inside ``run``, after our "listening on" line, so a busy port showed that line and then its
    own ``ERROR: [Errno 98]`` (exit 3). The same socket uvicorn makes (``Config.bind_socket``), but
    made with ``IPPROTO_TCP``: asyncio disables Nagle (TCP_NODELAY) only on a socket whose proto says
    TCP, and an accepted socket takes its listener's; without it every keep-alive answer written in
    two parts waited for the client's delayed ACK (~40 ms)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    # As uvicorn and asyncio do: a restart may take a port whose old connections are in TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog; it listens again on it, which is harmless
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()  # "address already in use", not "[Errno 98] ..."
        raise CannotListen(f"cannot listen on {_shown(host)}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


def address_of(sock: socket.socket) -> str:
    """``http://127.0.0.1:8377`` or ``unix:/path/to/sock``: what a ``--server`` client is given."""
    if sock.family == getattr(socket, "AF_UNIX", None):
        return f"unix:{sock.getsockname()}"
    host, port = sock.getsockname()[:2]
    return f"http://{_shown(host)}:{port}"


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class CancelledRequests:
    """ASGI middleware: a request the stop cancels (the drain's ``DRAIN_S`` passed, or a second
    signal) answers 503 ``shutting_down`` when nothing was answered yet, and ends quietly: uvicorn
    logged each as "Exception in ASGI application" with a CancelledError traceback."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            # Not raised on: this task is the request's own, and the server is stopping.
            if not started:
                err = OperationError("shutting_down", "the server is stopping; retry elsewhere or later", 503)
                await _send_json(send, 503, err.as_dict(), {"Connection": "close"})


class _EarlyStop:
    """A SIGTERM that comes before uvicorn takes the signals over: the port already listens (a
    supervisor or a test sees it and stops the server) while the app is still being built. With
    the default handler it killed the process (exit 143); remembered here, it stops the server as
    soon as it has started, and the exit is 0 as for any SIGTERM stop."""

    requested = False

    def handle(self, signum: int, frame: Any) -> None:
        self.requested = True

    def install(self) -> None:
        """From here on a SIGTERM is remembered (main thread only: signals cannot be set elsewhere)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.handle)


EARLY_STOP = _EarlyStop()


class _Server(uvicorn.Server):
    """uvicorn's server, where a second SIGTERM or SIGINT cancels the open requests at once, as the
    drain's end does (uvicorn waited on: only a second SIGINT forced it, skipping the app's own
    shutdown, with CancelledError tracebacks); a third forces the exit."""

    hurried = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if EARLY_STOP.requested:  # uvicorn's handlers are in place now; it came before them
            self.should_exit = True

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.should_exit and not self.hurried:
            self.hurried = True
            for task in list(self.server_state.tasks):  # each answers 503 (CancelledRequests) and ends
                task.get_loop().call_soon_threadsafe(task.cancel)
            return
        if self.should_exit:
            self.force_exit = True
        super().handle_exit(sig, frame)


def run_uvicorn(app: ASGIApp, host: str, port: int, what: str, sock: socket.socket | None = None) -> None:
    """Serve until Ctrl-C / SIGTERM: uvicorn drains open requests for up to ``DRAIN_S`` seconds,
    then cancels the rest (a second signal: at once); ``CannotListen`` before anything is served or
    said when the address cannot be bound. ``sock``: one already listening (``serve --socket``, or
    bound before ``--daemon`` detached), said as its address."""
    EARLY_STOP.install()  # (serve installed it before binding; mcp --http binds just below)
    # Header and body deadlines and a connection cap (guard.py); serve's own 408 comes first.
    protocol = guarded_protocol(BODY_TIMEOUT_S + 1)
    if sock is None:
        sock = listen_socket(host, port)
    print(f"{what} listening on {address_of(sock)}", file=sys.stderr, flush=True)
    server = _Server(uvicorn.Config(CancelledRequests(app), host=host, port=port, log_level="warning",
                                    # uvicorn annotates int but hands it to asyncio, where a
                                    # fraction (MEMINDEX_SERVE_DRAIN_S=0.5) works
                                    access_log=False, timeout_graceful_shutdown=DRAIN_S,  # type: ignore[arg-type]
                                    http=protocol))
    # uvicorn drains, restores the handlers it found, then raises the signal it caught again; with
    # the default SIGTERM handler that kills the process (exit 143 after a clean stop). A handler
    # that ignores it makes a SIGTERM stop exit 0, as `memindex watch` and the workers do.
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, EARLY_STOP.handle) if main else None
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()  # uvicorn closes it on a clean stop, not when its start-up fails
        if main:
            signal.signal(signal.SIGTERM, old)
