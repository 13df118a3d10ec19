"""Every ``MEMINDEX_*`` environment variable, in one table, and their one reader.

Each variable is a ``Var`` below with its default, its bounds and a line saying what it does; a
module reads it through that object (``POLL_MS.get()``, ``TOKEN.text()``), never through
``os.environ`` with the name (``tests/test_env_table.py`` greps the package for that). A value a
variable cannot take is one ``EnvError`` (a ``ConfigError``) naming the variable, the value and
what it takes, said by the CLI in its one ``error:`` line (exit 2), never a ``ValueError``
traceback from an ``int()`` at import. Unset or blank is the default (an ``.env`` line
``MEMINDEX_POLL_MS=``). ``python -m memindex.pipeline.config.environ`` prints the table.

Variables marked internal are set by one memindex process for the processes it starts; they are
listed so that the name is defined here too, not to be set by hand.
"""

from __future__ import annotations

import math
import os
from typing import Generic, Mapping, Sequence, TypeVar

from memindex.pipeline.config import defaults as D
from memindex.pipeline.errors import EnvError

N = TypeVar("N", int, float, "int | None", "float | None")


def env_number(name: str, default: N, *, whole: bool | None = None, minimum: float | None = None,
               above: float | None = None, env: Mapping[str, str] | None = None) -> N:
    """``name`` as a number (a whole one when ``whole``, which a default of type int implies), at
    least ``minimum`` or more than ``above`` (one bound, or none); ``default`` when unset or blank.
    ``env`` replaces os.environ (a provider's environment)."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    whole = isinstance(default, int) if whole is None else whole
    what = "a whole number" if whole else "a number"
    bound = f" of at least {minimum:g}" if minimum is not None else f" above {above:g}" if above is not None else ""
    try:
        value: float = int(raw) if whole else float(raw)
    except ValueError:
        raise EnvError(name, f"must be {what}{bound}, not {raw!r}") from None
    # nan passes every comparison, and inf overflows the timers these values feed
    if (not math.isfinite(value) or (minimum is not None and value < minimum)
            or (above is not None and value <= above)):
        raise EnvError(name, f"must be {what}{bound}, not {raw!r}")
    return value  # type: ignore[return-value]  # an int or float as ``whole`` says, which N stands for


def env_choice(name: str, choices: Mapping[str, str] | Sequence[str], default: str | None = None, *,
               env: Mapping[str, str] | None = None) -> str | None:
    """``name`` (case and surrounding blanks aside) when it is one of ``choices``, else an ``EnvError``
    listing them; ``default`` when unset or blank. A mapping's keys are the spellings accepted and
    its values what each means (the error lists those): ``{"0": "off", "off": "off", ...}``."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    table = choices if isinstance(choices, Mapping) else {c: c for c in choices}
    meaning = table.get(raw.lower())
    if meaning is None:
        raise EnvError(name, f"must be one of {', '.join(dict.fromkeys(table.values()))}, not {raw!r}")
    return meaning


# --- the table --------------------------------------------------------------------------------

VARS: dict[str, "Var"] = {}


class Var:
    """A variable taken as text: its value as set (``raw``) or stripped (``text``).

    Plain classes, not dataclasses: the ``--server`` client reads its variables here, and
    ``dataclasses`` imports ``inspect`` (tests/test_no_daemon.py keeps that path light)."""

    __slots__ = ("name", "meaning", "internal")
    name: str
    meaning: str
    internal: bool

    def __init__(self, name: str, meaning: str, *, internal: bool = False) -> None:
        if not name.startswith("MEMINDEX_") or name in VARS:
            raise ValueError(f"{name}: not a MEMINDEX_ name, or defined twice")
        self.name, self.meaning = name, meaning
        self.internal = internal  # set by memindex for the processes it starts, not by an operator
        VARS[name] = self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"

    def raw(self, env: Mapping[str, str] | None = None) -> str | None:
        """The value exactly as set; None when unset. ``env`` replaces os.environ."""
        return (os.environ if env is None else env).get(self.name)

    def text(self, env: Mapping[str, str] | None = None) -> str:
        """The value without surrounding blanks; ``""`` when unset or blank."""
        return (self.raw(env) or "").strip()

    def default_text(self) -> str:
        return "unset"


class Number(Var, Generic[N]):
    """A number, refused (``EnvError``) when not one or out of bounds; ``default`` when unset.
    ``whole`` None: whole when the default is an int; ``default_note``: what applies when the
    default is None (the reader computes it)."""

    __slots__ = ("default", "whole", "minimum", "above", "default_note")
    default: N
    whole: bool | None
    minimum: float | None
    above: float | None
    default_note: str

    def __init__(self, name: str, meaning: str, default: N, *, whole: bool | None = None,
                 minimum: float | None = None, above: float | None = None, default_note: str = "",
                 internal: bool = False) -> None:
        super().__init__(name, meaning, internal=internal)
        self.default, self.whole, self.minimum, self.above = default, whole, minimum, above
        self.default_note = default_note

    def get(self, env: Mapping[str, str] | None = None) -> N:
        return env_number(self.name, self.default, whole=self.whole, minimum=self.minimum, above=self.above,
                          env=env)

    def default_text(self) -> str:
        if self.default_note or self.default is None:
            return self.default_note or "unset"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)


class Choice(Var):
    """One of ``choices`` (case aside), else an ``EnvError`` listing them."""

    __slots__ = ("choices", "default", "default_note")
    choices: tuple[str, ...]
    default: str | None
    default_note: str

    def __init__(self, name: str, meaning: str, *, choices: tuple[str, ...], default: str | None = None,
                 default_note: str = "") -> None:
        super().__init__(name, meaning)
        self.choices, self.default, self.default_note = choices, default, default_note

    def get(self, env: Mapping[str, str] | None = None) -> str | None:
        return env_choice(self.name, self.choices, self.default, env=env)

    def default_text(self) -> str:
        return self.default_note or (self.default or "unset")


class Flag(Var):
    """On when set to 1, true or yes (case aside); anything else is off."""

    __slots__ = ()

    def on(self, env: Mapping[str, str] | None = None) -> bool:
        return self.text(env).lower() in ("1", "true", "yes")

    def default_text(self) -> str:
        return "off"


# Deployment: where the queue and the stores are.
BROKER_URL = Var("MEMINDEX_BROKER_URL", "the Redis every process of a deployment shares (redis://, rediss://, "
                 "unix://); unset: the embedded broker, workers in the process")
STORE_PATH = Var("MEMINDEX_STORE_PATH", "memindex's store path for every agent ({agentId}, ~; relative to the "
                 "state dir), over the config's store.path (memorySearch.store.path; 2026.9: memory.search.store.path): "
                 "to run beside OpenClaw's own index")
WRITE_SHARDS = Number[int | None]("MEMINDEX_WRITE_SHARDS", "write shards (writer queues) of this deployment; the "
                                  "number the writers recorded in Redis wins", None, whole=True, minimum=1,
                                  default_note="1")
ALLOW_BROAD_EXTRA_PATHS = Flag("MEMINDEX_ALLOW_BROAD_EXTRA_PATHS", "index an extraPaths entry that is /, the home "
                               "or the state dir (refused otherwise)")

# Logging and metrics.
LOG_LEVEL = Choice("MEMINDEX_LOG_LEVEL", "log level when --log-level is not given",
                   choices=("debug", "info", "warning", "error"),
                   default_note="info for watch, worker and serve; warning otherwise")
LOG_FORMAT = Choice("MEMINDEX_LOG_FORMAT", "log lines as text or one JSON object each, when --log-format is not "
                    "given", choices=("text", "json"), default="text")
METRICS_ADDRESS = Var("MEMINDEX_METRICS_ADDRESS", "[HOST:]PORT for Prometheus metrics when --metrics-port is not "
                      "given (HOST: 127.0.0.1)")
OUTAGE_REPORT_S = Number("MEMINDEX_OUTAGE_REPORT_S", "seconds between the lines saying Redis is still unreachable",
                         60.0, minimum=0)
WRITE_SUMMARY_S = Number("MEMINDEX_WRITE_SUMMARY_S", "seconds between a writer's INFO summary lines per agent",
                         10.0, minimum=0)

# Queue and workers.
POLL_MS = Number("MEMINDEX_POLL_MS", "longest idle poll of a queue, in ms (write-to-searchable latency)", 100,
                 minimum=1)
SLOT_LEASE_MS = Number("MEMINDEX_SLOT_LEASE_MS", "ms after which a dead holder's embedding-concurrency slot comes "
                       "back", 30000, minimum=1)
HEARTBEAT_S = Number("MEMINDEX_HEARTBEAT_S", "seconds between a process's heartbeats in Redis", 2.0, above=0)
PROC_TTL_S = Number("MEMINDEX_PROC_TTL_S", "seconds a silent process's heartbeat entries live on", 10.0, minimum=1)
HEALTH_STALL_S = Number("MEMINDEX_HEALTH_STALL_S", "seconds a queue may hold ready work with nothing consumed "
                        "before `memindex health` calls it stalled", 300.0, above=0)
SUPERVISOR_POLL_S = Number("MEMINDEX_SUPERVISOR_POLL_S", "seconds between a worker's checks that its supervisor "
                           "still runs", 1.0, above=0)
BATCH_LEASE_S = Number("MEMINDEX_BATCH_LEASE_S", "seconds after which a silent batch-job poller is presumed dead",
                       30.0, above=0)
BATCH_JANITOR_S = Number[float | None]("MEMINDEX_BATCH_JANITOR_S", "seconds between sweeps for batch jobs whose "
                                       "poller died", None, whole=False, above=0,
                                       default_note="half of MEMINDEX_BATCH_LEASE_S, within 0.5-5")
EMBED_MSG_CHUNKS = Number("MEMINDEX_EMBED_MSG_CHUNKS", "most chunks in one embed or write message", 256, minimum=1)
EMBED_MSG_BYTES = Number("MEMINDEX_EMBED_MSG_BYTES", "about the most bytes in one embed or write message",
                         1024 * 1024, minimum=1)
WRITER_WAIT_S = Number("MEMINDEX_WRITER_WAIT_S", "seconds a writer waits for another process's writer of the same "
                       "store before its write fails (the next sync retries)", 600.0, minimum=0)
VECTOR_RETRY_S = Number("MEMINDEX_VECTOR_RETRY_S", "first delay, in seconds, before a sync retries chunks left "
                        "without vectors (doubles while they keep failing)", 120.0, above=0)

# Embedding.
RETRY_BASE_DELAY_S = Number[float | None]("MEMINDEX_RETRY_BASE_DELAY_S", "first delay of a provider request's "
                                          "retries, in seconds", None, whole=False, minimum=0,
                                          default_note="the retry policy's")
RETRY_ATTEMPTS = Number[int | None]("MEMINDEX_RETRY_ATTEMPTS", "attempts of a provider request", None, whole=True,
                                    minimum=1, default_note="the retry policy's")
LOCAL_THREADS = Number[int | None]("MEMINDEX_LOCAL_THREADS", "llama.cpp threads per local model", None, whole=True,
                                   minimum=1, default_note="the CPUs available shared by the worker processes")
WORKER_PROCESSES = Number("MEMINDEX_WORKER_PROCESSES", "worker processes sharing the CPUs (memindex worker "
                          "--processes sets it)", 1, minimum=1, internal=True)
HASH_EMBED_DELAY = Number("MEMINDEX_HASH_EMBED_DELAY", "seconds the test-only hash provider sleeps per request",
                          0.0, minimum=0)

# Watching.
WATCH_MAX_DIRS = Number("MEMINDEX_WATCH_MAX_DIRS", "cap on the directories `memindex watch` watches "
                        "(--max-watch-dirs)", 512, minimum=1)
CONFIG_POLL_S = Number("MEMINDEX_CONFIG_POLL_S", "seconds between a long-running process's checks of the config "
                       "for changes", 2.0, above=0)

# Serving.
TOKEN = Var("MEMINDEX_TOKEN", "bearer token `memindex serve` requires (--token) and `--server` clients send")
SERVER = Var("MEMINDEX_SERVER", "default URL of `memindex search|get --server`")
SERVER_TIMEOUT_S = Number("MEMINDEX_SERVER_TIMEOUT_S", "seconds `--server` waits for the whole answer "
                          "(--server-timeout)", D.SERVER_TIMEOUT_S, above=0)
SERVE_HEADER_TIMEOUT_S = Number("MEMINDEX_SERVE_HEADER_TIMEOUT_S", "seconds a request's headers may take to arrive",
                                10.0, above=0)
SERVE_BODY_TIMEOUT_S = Number("MEMINDEX_SERVE_BODY_TIMEOUT_S", "seconds a request's body may take to arrive",
                              10.0, above=0)
SERVE_DRAIN_S = Number("MEMINDEX_SERVE_DRAIN_S", "seconds SIGTERM waits for open requests before cancelling them",
                       5.0, minimum=0)
SERVE_MAX_CONNECTIONS = Number("MEMINDEX_SERVE_MAX_CONNECTIONS", "most open connections of one server", 1000,
                               minimum=1)
ASYNC_THREADS = Number("MEMINDEX_ASYNC_THREADS", "threads running searches for async callers (the servers)", 1,
                       minimum=1)
ASYNC_WAIT_THREADS = Number("MEMINDEX_ASYNC_WAIT_THREADS", "threads for async calls that wait on another process "
                            "(qmd)", 4, minimum=1)
ASYNC_EMBED_THREADS = Number("MEMINDEX_ASYNC_EMBED_THREADS", "threads per agent for async searches whose query "
                             "vector is a remote request", 2, minimum=1)

# Set by memindex for its own child processes.
PROCESS_LABEL = Var("MEMINDEX_PROCESS_LABEL", "the name a process gives in a store's lock file", internal=True)
SUPERVISOR = Var("MEMINDEX_SUPERVISOR", "<pid>:<start time> of the process a worker dies with", internal=True)
WORKER_PARENT = Var("MEMINDEX_WORKER_PARENT", "pid of dramatiq's parent process, for its children", internal=True)
METRICS_PORT = Var("MEMINDEX_METRICS_PORT", "the metrics port a worker process serves on", internal=True)

# Older names of the table's entries, kept for their importers.
BROKER_ENV = BROKER_URL.name


def broker_configured() -> bool:
    """Does this process use Redis (``MEMINDEX_BROKER_URL`` set), as the broker module decides?"""
    return bool(BROKER_URL.text())


def describe() -> str:
    """The table as text: name, default, meaning (for the docs and ``python -m``)."""
    rows = [(v.name, v.default_text(), v.meaning + (" (internal)" if v.internal else "")) for v in VARS.values()]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{n:<{width}}  {m} (default: {d})" for n, d, m in rows)


if __name__ == "__main__":
    print(describe())
