"""Connection handling for ``memindex serve`` and ``memindex mcp --http`` (issue 44): deadlines for a
request's headers and body, and a cap on open connections below the descriptor limit.

uvicorn times out only idle keep-alive connections: a client that sends half a header (or half a
body, to ``mcp --http``) held its connection, and its descriptor, for as long as it liked. 300 of
them under ``ulimit -n 256`` left the server without descriptors. Here each connection has a
watchdog: no complete request head within ``MEMINDEX_SERVE_HEADER_TIMEOUT_S`` of connecting (or of
the previous response), or no complete body within ``BODY_TIMEOUT_S + 1`` of its head (``serve``
answers 408 itself at ``BODY_TIMEOUT_S``), and the connection is closed. A connection beyond
``MEMINDEX_SERVE_MAX_CONNECTIONS`` (at most the descriptor limit less ``FD_RESERVE``) is answered 503
``overloaded`` and closed at once.

Both limits are read when a server builds its protocol (``guarded_protocol``), not as this module
loads: a bad value is said when a server starts, and ``mcp`` over stdio never reads them.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import time

from uvicorn.protocols.http.h11_impl import H11Protocol

from memindex.pipeline.config import environ

log = logging.getLogger("memindex.serve")

# Descriptors kept for everything else a server opens: stores (database, WAL, shared memory), the
# config, logs, Redis, the provider's connections.
FD_RESERVE = 64
OVERLOAD_WARN_S = 10.0
REFUSED_LINGER_S = 0.5  # a refused connection stays open this long, reading nothing, so the client reads its 503


def connection_cap() -> int:
    """MEMINDEX_SERVE_MAX_CONNECTIONS, but at most the descriptors left under the soft limit (those
    open now aside) less FD_RESERVE; at least 1."""
    most = int(environ.SERVE_MAX_CONNECTIONS.get())
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return most
    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError:  # no procfs: count only what is known
        open_now = 16
    return max(1, min(most, soft - open_now - FD_RESERVE))


def _refusal(cap: int) -> bytes:
    body = json.dumps({"error": {"code": "overloaded", "message": f"the server has {cap} connections open (its "
                                 "cap); retry later"}}).encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"retry-after: 1\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


class AcceptExhausted(logging.Filter):
    """asyncio's "socket.accept() out of system resource" (EMFILE): it retries the accept a second
    later, but logs each failed accept of its backlog, with a traceback: thousands of lines a
    second. One line, without the traceback, at most every OVERLOAD_WARN_S."""

    said = float("-inf")
    held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("socket.accept() out of system resource"):
            return True
        now, cls = time.monotonic(), type(self)
        if now - cls.said < OVERLOAD_WARN_S:
            cls.held += 1
            return False
        record.msg, record.args = ("out of file descriptors: new connections wait (%d line(s) like this held back); "
                                   "lower MEMINDEX_SERVE_MAX_CONNECTIONS or raise `ulimit -n`", (cls.held,))
        record.exc_info, record.exc_text, record.levelno, record.levelname = None, None, logging.WARNING, "WARNING"
        cls.said, cls.held = now, 0
        return True


class ClientLeft(logging.Filter):
    """The MCP SDK logs "Error handling POST request" with a full traceback when a client leaves
    before its request body arrived whole (starlette's ``ClientDisconnect``): a client's own choice,
    one DEBUG line here."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or type(exc).__name__ != "ClientDisconnect":
            return True
        if not log.isEnabledFor(logging.DEBUG):
            return False
        record.msg, record.args = "a client left before its request arrived whole (%s)", (record.getMessage(),)
        record.exc_info, record.exc_text, record.levelno, record.levelname = None, None, logging.DEBUG, "DEBUG"
        return True


def quiet_client_exits(logger_name: str) -> None:
    """Install ``ClientLeft`` on ``logger_name`` (once)."""
    target = logging.getLogger(logger_name)
    if not any(isinstance(f, ClientLeft) for f in target.filters):
        target.addFilter(ClientLeft())


def guarded_protocol(body_timeout_s: float, cap: int | None = None) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the watchdog and the cap (a class per server: its settings)."""
    if not any(isinstance(f, AcceptExhausted) for f in logging.getLogger("asyncio").filters):
        logging.getLogger("asyncio").addFilter(AcceptExhausted())
    header_timeout_s = environ.SERVE_HEADER_TIMEOUT_S.get()
    limit = connection_cap() if cap is None else cap
    refusal = _refusal(limit)
    said = [float("-inf")]
    lingering = [0]  # refused connections still open for their 503 to be read

    class Guarded(H11Protocol):
        _since = 0.0  # when the current wait began: for a request head, or for its body
        _watch = None

        def connection_made(self, transport):  # type: ignore[no-untyped-def]  # uvicorn's own override is untyped
            super().connection_made(transport)
            if len(self.connections) > limit:
                now = time.monotonic()
                if now - said[0] >= OVERLOAD_WARN_S:
                    said[0] = now
                    log.warning("%d connections open (the cap, below the descriptor limit): refusing more with "
                                "503 until some close", limit)
                self._refused = True
                transport.write(refusal)
                # Closed a moment later, not at once: closing with the client's request unread in
                # the socket sends a reset, and the client never reads the 503. Not while many
                # linger already: their descriptors come out of the reserve.
                if lingering[0] < FD_RESERVE // 2:
                    lingering[0] += 1
                    transport.write_eof()
                    self.loop.call_later(REFUSED_LINGER_S, self._end_linger)
                else:
                    transport.close()
                return
            self._wait_head()

        _refused = False

        def _end_linger(self) -> None:
            lingering[0] -= 1
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if not self._refused:  # a refused connection's request is read and dropped
                super().data_received(data)

        def _wait_head(self) -> None:
            self._since = time.monotonic()
            self._arm(header_timeout_s)

        def _arm(self, after: float) -> None:
            if self._watch is not None:
                self._watch.cancel()
            self._watch = self.loop.call_later(max(0.05, after), self._check)

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not None and self.cycle is not cycle:  # a request head arrived
                self._since = time.monotonic()
                self._arm(body_timeout_s)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._wait_head()

        def _check(self) -> None:
            self._watch = None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            waiting_head = cycle is None or cycle.response_complete
            late = time.monotonic() - self._since
            if waiting_head and late >= header_timeout_s:
                log.debug("closing a connection from %s: no complete request head within %g s", self.client,
                          header_timeout_s)
                self.transport.close()
            elif not waiting_head and cycle.more_body and not cycle.response_started and late >= body_timeout_s:
                log.debug("closing a connection from %s: its request body did not arrive within %g s", self.client,
                          body_timeout_s)
                self.transport.close()
            elif waiting_head:
                self._arm(header_timeout_s - late)
            elif cycle.more_body and not cycle.response_started:
                self._arm(body_timeout_s - late)
            # else: the app is answering; the next head's wait starts with the response's end

        def connection_lost(self, exc):  # type: ignore[no-untyped-def]  # uvicorn's own override is untyped
            if self._watch is not None:
                self._watch.cancel()
                self._watch = None
            super().connection_lost(exc)

    return Guarded
