"""``memindex search|get --server URL``: the call answered by a running ``memindex serve``.

An agent runtime that shells out per tool call pays the interpreter's start-up plus the CLI's
imports on every call. With ``--server`` (or ``$MEMINDEX_SERVER``) the command line goes, as it
is, to a ``memindex serve`` the user started (``unix:/path/to/sock`` or ``http://127.0.0.1:PORT``):
the server runs the very command code the CLI runs, on its warm engines, and answers with the
stdout, stderr and exit code of that run, which this side prints unchanged. Nothing falls back
in-process: a server that cannot be reached, refuses the call or does not answer within the
timeout (``--server-timeout``, ``$MEMINDEX_SERVER_TIMEOUT_S``) is one ``error:`` line and exit 1.

Who answers is checked, not trusted: a Unix socket must be owned by this user, and so must the
process listening on it (``SO_PEERCRED``), so a process squatting on the socket's name cannot
feed a caller forged memory. Over HTTP the server's bearer token (``$MEMINDEX_TOKEN``) is sent.

Standard library only, and little of it (with the one error root): this module runs before the
CLI's own imports, and an in-process run imports only ``command_of`` and ``split_server`` from it
(the socket machinery is imported by a call).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from memindex.pipeline.config.defaults import SERVER_TIMEOUT_S  # (a module with no imports)
from memindex.pipeline.config import environ
from memindex.pipeline.errors import MemindexError  # (the standard library's functools and re besides)

if TYPE_CHECKING:
    import socket

SERVER_ENV = environ.SERVER.name
TIMEOUT_ENV = environ.SERVER_TIMEOUT_S.name
TOKEN_ENV = environ.TOKEN.name  # the one `memindex serve` reads (producers/serve/__init__.py says it too)
CLI_PATH = "/v1/cli"
# The commands a server answers: what an agent runtime shells out to per tool call.
REMOTE_COMMANDS = ("search", "get")
# Options of those commands (and the global ones) that take a value: the token after them is never
# read as --server, as the command name, or as the end of options.
_VALUE_OPTIONS = frozenset(("--config", "--state-dir", "--workspace", "--agent", "--log-level", "--log-format",
                            "--max-results", "--min-score", "--session-key", "--queries", "--from", "--lines",
                            "--server", "--server-timeout"))
_MAX_ANSWER_BYTES = 64 << 20  # a get of a large file, with room; a server sending more is not ours


class RemoteError(MemindexError):
    """The call could not be made or answered; the message is the one line said (exit 1)."""


class UsageError(RemoteError):
    """A --server, --server-timeout or variable that cannot be used as given (exit 2, as usage errors)."""


def command_of(argv: list[str] | tuple[str, ...]) -> str | None:
    """The first token of ``argv`` that names a command (None: none, or ``--``/``--help`` first)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUE_OPTIONS:
            skip = True
        elif arg == "--" or arg in ("-h", "--help"):
            return None
        elif not arg.startswith("-"):
            return arg
    return None


def split_server(argv: list[str]) -> tuple[str | None, str | None, list[str]]:
    """(``--server`` URL, ``--server-timeout`` text, the rest of ``argv``): both taken out wherever
    they stand before ``--``; the URL defaults to ``$MEMINDEX_SERVER``."""
    url = timeout = None
    rest: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "--":
            rest.append(arg)
            rest.extend(it)
            break
        name, eq, value = arg.partition("=")
        if name in ("--server", "--server-timeout"):
            if not eq:
                value = next(it, None)  # type: ignore[assignment]  # None: the flag ended argv (said below)
                if value is None:
                    raise UsageError(f"{name} needs a value")
            if name == "--server":
                url = value
            else:
                timeout = value
            continue
        rest.append(arg)
        if arg in _VALUE_OPTIONS:  # its value is copied as is, whatever it looks like
            nxt = next(it, None)
            if nxt is not None:
                rest.append(nxt)
    if url is None:
        url = environ.SERVER.raw() or None
    return url, timeout, rest


def timeout_s(text: str | None) -> float:
    source = "--server-timeout"
    if text is None:
        text, source = environ.SERVER_TIMEOUT_S.raw(), TIMEOUT_ENV
        if not text:
            return SERVER_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise UsageError(f"{source} must be a number of seconds above 0, not {text!r}")
    return value


def _unix_path(url: str) -> str:
    path = url[len("unix:"):]
    return path[2:] if path.startswith("//") else path


def _connect(url: str, deadline: float) -> tuple[socket.socket, str]:
    """A connected socket to ``url`` and the Host header to send; ``RemoteError`` when it cannot be had."""
    import socket
    import stat
    import struct
    import time

    if url.startswith("unix:"):
        path = _unix_path(url)
        if not path:
            raise UsageError(f"bad --server {url!r}: expected unix:/path/to/socket")
        try:
            st = os.stat(path)
        except OSError as exc:
            raise RemoteError(f"cannot reach memindex serve at {url}: {exc.strerror or exc}") from None
        if not stat.S_ISSOCK(st.st_mode):
            raise RemoteError(f"cannot reach memindex serve at {url}: not a socket")
        _check_owner(url, "the socket is owned by", st.st_uid)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.connect(path)
            peer = getattr(socket, "SO_PEERCRED", None)
            if peer is not None:  # who listens, not who made the file: a squatter is refused
                _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, peer, struct.calcsize("3i")))
                _check_owner(url, "the process listening on it runs as", uid)
        except BaseException:
            sock.close()
            raise
        return sock, "localhost"
    if not url.startswith("http://"):
        raise UsageError(f"bad --server {url!r}: expected unix:/path/to/socket or http://127.0.0.1:PORT")
    hostport = url[len("http://"):].split("/", 1)[0]
    if "@" in hostport:  # a token in the URL ends up in `ps` and shell history
        raise UsageError(f"bad --server: give the token in ${TOKEN_ENV}, not in the URL")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise UsageError(f"bad --server {url!r}: expected http://HOST:PORT, e.g. http://127.0.0.1:8377")
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=max(0.001, deadline - time.monotonic()))
    except OSError as exc:
        raise RemoteError(f"cannot reach memindex serve at {url}: {_reason(exc)}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock, hostport


def _check_owner(url: str, what: str, uid: int) -> None:
    if uid != os.getuid():
        raise RemoteError(f"refusing memindex serve at {url}: {what} uid {uid}, not this user's ({os.getuid()})")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):  # (socket.timeout is TimeoutError)
        return "timed out"
    return (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__).lower()


def _exchange(sock: socket.socket, request: bytes, deadline: float) -> bytes:
    import time

    sock.settimeout(max(0.001, deadline - time.monotonic()))
    sock.sendall(request)
    parts: list[bytes] = []
    size = 0
    while True:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = sock.recv(1 << 16)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
        if size > _MAX_ANSWER_BYTES:
            raise RemoteError("the answer is larger than any memindex serve sends")


def _parse(raw: bytes) -> tuple[int, dict[str, Any]]:
    import json

    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise RemoteError("the answer is not HTTP") from None
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower()] = v.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = _unchunk(body)
    try:
        data = json.loads(body)
    except ValueError:
        raise RemoteError(f"the answer is not memindex serve's (HTTP {status}, not JSON)") from None
    if not isinstance(data, dict):
        raise RemoteError(f"the answer is not memindex serve's (HTTP {status})")
    return status, data


def _unchunk(body: bytes) -> bytes:
    out, rest = [], body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        n = int(size_line.split(b";")[0], 16)
        if n == 0:
            break
        out.append(rest[:n])
        rest = rest[n + 2:]
    return b"".join(out)


def call(url: str, argv: list[str], timeout: float) -> dict[str, Any]:
    """``argv`` run by the server at ``url``: {"exit", "stdout", "stderr"}; ``RemoteError`` otherwise."""
    import json
    import time

    deadline = time.monotonic() + timeout
    body = json.dumps({"argv": argv}).encode()
    sock, host = _connect(url, deadline)
    token = environ.TOKEN.text()
    request = (f"POST {CLI_PATH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n"
               + (f"Authorization: Bearer {token}\r\n" if token else "") + "\r\n").encode("latin-1") + body
    try:
        raw = _exchange(sock, request, deadline)
    except TimeoutError:
        raise RemoteError(f"memindex serve at {url} did not answer within {timeout:g} s "
                          f"(--server-timeout, ${TIMEOUT_ENV})") from None
    except OSError as exc:
        raise RemoteError(f"memindex serve at {url} failed: {_reason(exc)}") from None
    finally:
        sock.close()
    if not raw:
        raise RemoteError(f"memindex serve at {url} closed the connection without an answer")
    try:
        status, data = _parse(raw)
    except RemoteError as exc:
        raise RemoteError(f"{url}: {exc}") from None
    if status == 200 and isinstance(data.get("exit"), int):
        return data
    err = data.get("error")
    message = (err.get("message") if isinstance(err, dict) else None) or f"HTTP {status}"
    if status == 404:
        message += " (not a memindex serve, or one older than --server)"
    raise RemoteError(f"memindex serve at {url} refused the call: {message}")


def lenient_streams() -> None:
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


def run(url: str, timeout_text: str | None, argv: list[str]) -> int:
    """Print what the server's run printed and return its exit code (1 and one line: no answer)."""
    try:
        answer = call(url, argv, timeout_s(timeout_text))
    except RemoteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    except KeyboardInterrupt:
        return 130
    # stderr first: what a command says there (a note, a warning) comes before its results.
    for stream, key in ((sys.stderr, "stderr"), (sys.stdout, "stdout")):
        text = answer.get(key)
        if isinstance(text, str) and text:
            try:
                stream.write(text)
                stream.flush()
            except BrokenPipeError:  # `... | head`: the reader left, not an error
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    code: int = answer["exit"]  # (call checked it is an int)
    return code
