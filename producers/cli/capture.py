"""A CLI command run inside ``memindex serve`` for a ``--server`` caller (producers/cli/remote.py):
what the command prints - stdout, stderr, and the log lines a one-shot command would show - is
kept per call and sent back, so the caller prints exactly what an in-process run prints.

The server's ``sys.stdout``/``sys.stderr`` become routers (``install``): a write from the thread
running a captured call goes to that call's buffers, every other write to the real stream. The
call is marked by a context variable set in the thread that runs it, so concurrent calls never
mix their output.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import logging
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, TextIO

from memindex.workers.logs import TEXT_FORMAT, JsonFormatter


@dataclass
class Capture:
    level: int  # the log level the command line asked for (as a one-shot run would configure)
    fmt: str  # "text" or "json" (--log-format)
    out: io.StringIO = field(default_factory=io.StringIO)
    err: io.StringIO = field(default_factory=io.StringIO)

    def shows(self, record: logging.LogRecord) -> bool:
        # A one-shot command leaves the backend's "qmd unavailable" to its own line (runner._setup_logging).
        floor = logging.ERROR if record.name.startswith("memindex.backend") and self.level >= logging.WARNING \
            else self.level
        return record.levelno >= floor


_current: contextvars.ContextVar[Capture | None] = contextvars.ContextVar("memindex_cli_capture", default=None)


def current() -> Capture | None:
    return _current.get()


class _Routed(io.TextIOBase):
    """A standard stream of the server: the current call's buffer when one is captured."""

    def __init__(self, real: TextIO, which: str) -> None:
        self._real, self._which = real, which

    def _target(self) -> TextIO | io.StringIO:
        cap = _current.get()
        if cap is None:
            return self._real
        buffer: io.StringIO = getattr(cap, self._which)
        return buffer

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    # typeshed has these as plain attributes; CPython's TextIOBase makes them read-only, so a
    # subclass can only override them with properties.
    @property
    def encoding(self) -> str:  # type: ignore[override]  # (io.TextIOBase would say None)
        return self._real.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]  # read-only in TextIOBase's stub; computed here
        return self._real.errors

    def __getattr__(self, name: str) -> Any:  # fileno, buffer, reconfigure: the real stream's
        return getattr(self._real, name)


class _Forward(logging.Handler):
    """Log records of a captured call, formatted as that command line asked, into its stderr."""

    def __init__(self) -> None:
        super().__init__()
        self._text: logging.Formatter | None = None
        self._json: logging.Formatter | None = None

    def emit(self, record: logging.LogRecord) -> None:
        cap = _current.get()
        if cap is None or not cap.shows(record):
            return
        try:
            cap.err.write(self._formatter(cap.fmt).format(record) + "\n")
        except Exception:  # noqa: BLE001 - a line that cannot be formatted is logging's own business
            self.handleError(record)

    def _formatter(self, fmt: str) -> logging.Formatter:
        if fmt == "json":
            self._json = self._json or JsonFormatter()
            return self._json
        self._text = self._text or logging.Formatter(TEXT_FORMAT)
        return self._text


_installed = threading.Lock()
_done: list[bool] = []


def install() -> None:
    """Route this process's standard streams and log records through captured calls (once)."""
    with _installed:
        if _done:
            return
        sys.stdout = _Routed(sys.stdout, "out")
        sys.stderr = _Routed(sys.stderr, "err")
        logging.getLogger().addHandler(_Forward())
        _done.append(True)


@contextlib.contextmanager
def captured(level: int, fmt: str) -> Iterator[Capture]:
    cap = Capture(level, fmt)
    token = _current.set(cap)
    try:
        yield cap
    finally:
        _current.reset(token)
