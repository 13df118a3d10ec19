"""Log level and format for every memindex process (``--log-level``, ``--log-format``).

The CLI applies them to its own process and passes them to the dramatiq worker
processes of ``memindex worker`` through the environment (``LEVEL_ENV``,
``FORMAT_ENV``), where ``workers/lifecycle.py`` applies them at boot. HTTP
clients log one line per request at INFO; here those lines are DEBUG.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time

from memindex.pipeline.config import environ
from memindex.pipeline.display import escape_controls

LEVEL_ENV, FORMAT_ENV = environ.LOG_LEVEL.name, environ.LOG_FORMAT.name
LEVELS = environ.LOG_LEVEL.choices
FORMATS = environ.LOG_FORMAT.choices
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The HTTP clients' loggers (openai >= 3.5 vendors httpx and httpcore under the "2" names).
HTTP_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2")


# The message a worker thread is processing: (agent, message id), set by the ``WorkContext``
# middleware (workers/lifecycle.py: this module stays free of dramatiq, which the CLI need not load).
_work = threading.local()


def set_work(agent: str, message_id: str) -> None:
    """The message this thread now processes (``workers.lifecycle.WorkContext`` calls it)."""
    _work.current = (agent, message_id)


def clear_work() -> None:
    _work.current = None


class _WorkFields(logging.Filter):
    """Adds ``agent``, ``message_id`` and the text form ``work`` (" [agent=… message=…]" or "")."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the handler's to report (handleError), never the caller's
            message = None
        if message is not None:
            safe = escape_controls(message)  # a file name with a newline or an escape is still one plain line
            if safe is not message:
                record.msg, record.args = safe, None
        agent, mid = getattr(_work, "current", None) or ("", "")
        record.agent, record.message_id = agent, mid
        record.work = (f" [agent={agent} message={mid}]" if agent else f" [message={mid}]") if mid else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, pid, thread, message (and the traceback),
    plus agent and message_id on lines logged while a queue message is processed."""

    def format(self, record: logging.LogRecord) -> str:
        # ISO 8601 in UTC with milliseconds: what log pipelines parse without a format string.
        when = datetime.datetime.fromtimestamp(record.created, tz=datetime.timezone.utc)
        out = {"time": when.isoformat(timespec="milliseconds"), "level": record.levelname, "logger": record.name,
               "pid": record.process, "thread": record.threadName, "message": record.getMessage()}
        if getattr(record, "message_id", ""):
            out["agent"], out["message_id"] = getattr(record, "agent", "") or None, record.message_id  # type: ignore[attr-defined]  # set by our filter
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class _HttpAtDebug(logging.Filter):
    """httpx / httpcore request lines are DEBUG, not INFO (they were 94 % of a worker's log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


# --- Redis outages ---------------------------------------------------------------------------
# While Redis is down every consumer thread of every worker process logs a CRITICAL and an INFO
# line every 3 s, and every heartbeat a WARNING: ~12 lines a second for the Procfile's
# processes, which bury everything else. Each process says it once, then once a minute while it
# lasts, then when Redis answers again (its heartbeat succeeds), with how many lines it held back.
OUTAGE_REPORT_S = environ.OUTAGE_REPORT_S.get()
# (logger name prefix, start of the message format) of the lines one outage repeats.
_OUTAGE_LINES = (
    ("dramatiq.worker.ConsumerThread", "Consumer encountered a connection error: %s"),
    ("dramatiq.worker.ConsumerThread", "Restarting consumer in %0.2f seconds."),
    # every 5 s for each message that finished during the outage, until its ack gets through
    # (logged by the consumer thread: "dramatiq.worker.ConsumerThread(embed)")
    ("dramatiq.worker.", "Failed to post_process_message(%s) due to a connection error"),
    ("memindex.lifecycle", "heartbeat to redis failed: %s"),
    ("memindex.limits", "%s: could not release an embedding slot"),
)
_outage_log = logging.getLogger("memindex.redis")
UNREACHABLE, OOM = "unreachable", "out of memory (maxmemory reached: raise it or free memory)"


class _RedisOutage(logging.Filter):
    """Holds back the lines a Redis outage repeats (handler filter; one state per process)."""

    lock = threading.Lock()
    since: float | None = None
    reported = 0.0
    held = 0
    kind = UNREACHABLE  # what the outage is, as its first line showed it (``_outage_kind``)

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg if isinstance(record.msg, str) else ""
        if not (any(record.name.startswith(name) and msg.startswith(fmt) for name, fmt in _OUTAGE_LINES)
                or _redis_down(record)):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        # A traceback of a refused connection says nothing the line does not (~120 lines each, for
        # every message that finished while Redis was away: its ack, its retry, post-processing).
        record.exc_info, record.exc_text = None, None
        now, cls = time.monotonic(), type(self)
        with cls.lock:
            if cls.since is None:
                cls.since, cls.reported, cls.held, cls.kind = now, now, 0, _outage_kind(record, exc)
                record.msg = (f"{record.msg} (redis {cls.kind}: this process waits for it, and says so once "
                              f"every {OUTAGE_REPORT_S:.0f} s until redis answers)")
                # dramatiq's consumer says it at CRITICAL; a process that waits for Redis is not in
                # a critical state (an operator's alerting keys on the level).
                record.levelno, record.levelname = logging.WARNING, "WARNING"
                return True
            if now - cls.reported < OUTAGE_REPORT_S:
                cls.held += 1
                return False
            record.msg = f"redis still {cls.kind} after %.0f s (%d line(s) like this held back): {record.msg}"
            record.args = (now - cls.since, cls.held, *(record.args if isinstance(record.args, tuple) else ()))
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            cls.reported, cls.held = now, 0
            return True


# Set on a record whose exception was taken off it (workers/failures.py shortens a failed message's
# line to its reason) when that exception was Redis being unreachable.
REDIS_DOWN_ATTR = "memindex_redis_down"


def _redis_down(record: logging.LogRecord) -> bool:
    """A line whose exception is Redis being unreachable (dramatiq's ack, retry or post-processing
    of a message that finished during the outage)."""
    if getattr(record, REDIS_DOWN_ATTR, False):
        return True
    return is_redis_down(record.exc_info[1] if record.exc_info else None)


# What Redis says when it refuses a write for memory (redis-py keeps it, without the "OOM" code).
_OOM_TEXT = "command not allowed when used memory > 'maxmemory'"


def out_of_memory(exc: BaseException | None) -> bool:
    """Redis at its ``maxmemory`` with no eviction: it answers, and refuses every write. Not an
    outage of the connection, and "start Redis" would mislead."""
    return exc is not None and (type(exc).__name__ == "OutOfMemoryError" or _OOM_TEXT in str(exc))


def _outage_kind(record: logging.LogRecord, exc: BaseException | None) -> str:
    """What the first line of an outage shows it is: Redis out of memory (by its exception, or by its
    words in a line whose exception was taken off it), else unreachable."""
    return OOM if out_of_memory(exc) or _OOM_TEXT in record.getMessage() else UNREACHABLE


def is_redis_error(exc: BaseException) -> bool:
    """Any error of redis-py (unreachable, refused credentials, out of memory, ...), told by its
    module so that asking imports neither redis nor dramatiq."""
    return type(exc).__module__.split(".")[0] == "redis"


def is_redis_down(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    # Out of memory (maxmemory, no eviction) repeats as much: every consumer's fetch and every ack
    # logged a CRITICAL with its traceback (23,000 lines in 90 s for the Procfile).
    if out_of_memory(exc):
        return True
    # By class and module, importing nothing: this runs inside a log filter, and an import there
    # failing (EMFILE: asyncio logging "accept() out of system resource") killed the server's loop.
    return any(c.__module__ == "redis.exceptions" and c.__name__ in ("ConnectionError", "TimeoutError")
               for c in type(exc).__mro__)


def redis_answered() -> bool:
    """Redis answered this process (its heartbeat): ends an outage the logs are holding back.
    True when one ended (however short: the heartbeat then tells the watchers, see lifecycle)."""
    with _RedisOutage.lock:
        since, held, kind = _RedisOutage.since, _RedisOutage.held, _RedisOutage.kind
        _RedisOutage.since = None
    if since is not None:
        _outage_log.warning("redis %s again after %.0f s (%d line(s) about it held back)",
                            "takes writes" if kind == OOM else "answers", time.monotonic() - since, held)
    return since is not None


def configure(level: str | int, fmt: str = "text") -> None:
    """Apply a level and format to this process's root logger (its handlers, or a new stderr one)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(format=TEXT_FORMAT)
    root.setLevel(level if isinstance(level, int) else level.upper())
    for handler in root.handlers:
        # The outage filter first: it recognises lines by their message format, which _WorkFields
        # replaces with the escaped text when a line holds a control character (dramatiq's "\n").
        if not any(isinstance(f, _RedisOutage) for f in handler.filters):
            handler.filters.insert(0, _RedisOutage())
        if not any(isinstance(f, _WorkFields) for f in handler.filters):
            handler.addFilter(_WorkFields())
        if fmt == "json":
            handler.setFormatter(JsonFormatter())
            # warnings.warn writes plain text to stderr itself: through logging it is a record too
            logging.captureWarnings(True)
        elif not isinstance(handler.formatter, JsonFormatter):
            # Keep the handler's format (dramatiq's, in its worker processes) and append the work context.
            base = handler.formatter._fmt if handler.formatter and handler.formatter._fmt else TEXT_FORMAT
            if "%(work)s" not in base:
                handler.setFormatter(logging.Formatter(base + "%(work)s", handler.formatter.datefmt
                                                       if handler.formatter else None))
    for name in HTTP_LOGGERS:
        lg = logging.getLogger(name)
        if not any(isinstance(f, _HttpAtDebug) for f in lg.filters):
            lg.addFilter(_HttpAtDebug())


def configure_from_env() -> None:
    """In a worker process: what ``memindex worker --log-level/--log-format`` asked for, if anything."""
    level, fmt = environ.LOG_LEVEL.raw(), environ.LOG_FORMAT.raw()
    if level or fmt:
        configure(level or logging.getLevelName(logging.getLogger().level), fmt or "text")
    else:
        configure(logging.getLogger().level)


# The writer's INFO summary: at most one line per agent this often (a backfill writes
# hundreds of transactions a minute; one DEBUG line each, one INFO line per period).
WRITE_SUMMARY_S = environ.WRITE_SUMMARY_S.get()


class WriteSummary:
    """Per-agent totals of the writer's transactions, logged at INFO once per period: when the
    period ends (a timer), so the last burst of a backfill is reported without waiting for the
    next one."""

    def __init__(self, logger: logging.Logger, every_s: float = WRITE_SUMMARY_S) -> None:
        self.log, self.every_s = logger, every_s
        self._lock = threading.Lock()
        self._totals: dict[str, list[float]] = {}  # agent -> [transactions, files, chunks, seconds, since]
        self._timers: dict[str, threading.Timer] = {}

    def record(self, agent: str, files: int, chunks: int, seconds: float, first_path: str = "") -> None:
        self.log.debug("writer %s: wrote %d file(s), %d chunk(s) in %.0f ms (first: %s)", agent, files, chunks,
                       seconds * 1000, first_path or "-")
        now = time.monotonic()
        with self._lock:
            t = self._totals.setdefault(agent, [0, 0, 0, 0.0, now])
            t[0] += 1
            t[1] += files
            t[2] += chunks
            t[3] += seconds
            if now - t[4] < self.every_s:
                if agent not in self._timers:
                    timer = threading.Timer(self.every_s - (now - t[4]), self._flush, (agent,))
                    timer.daemon = True
                    self._timers[agent] = timer
                    timer.start()
                return
            totals = self._totals.pop(agent)
        self._emit(agent, totals, now)

    def _flush(self, agent: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._timers.pop(agent, None)
            totals = self._totals.pop(agent, None)
        if totals is not None:
            self._emit(agent, totals, now)

    def _emit(self, agent: str, totals: list[float], now: float) -> None:
        n, f, c, s, since = totals
        self.log.info("writer %s: %d file(s), %d chunk(s) in %d transaction(s), %.0f ms writing, over the last "
                      "%.0f s", agent, f, c, n, s * 1000, now - since)
