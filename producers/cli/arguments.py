"""Each command's options, for its sub-parser (``commands.py`` names which function is whose).

Light on purpose: ``memindex --help``, ``--version``, completion and every command build their
parser from here before any command code is imported, so this module imports argparse, the
shared option helpers and a few constants, and nothing that reads a store or a queue.
"""

from __future__ import annotations

import argparse

from memindex.pipeline.config import defaults as D  # (no imports of its own)
from memindex.pipeline.config import environ  # (defaults and the error root only)
from memindex.producers.cli import complete
from memindex.producers.cli.options import at_least_one, metrics_address, non_negative
from memindex.producers.cli.remote import SERVER_ENV, TIMEOUT_ENV
from memindex.producers.serve import DEFAULT_HOST, DEFAULT_PORT, TOKEN_ENV

# --metrics-port's default: docker-compose.yml sets it for every service.
METRICS_ENV = environ.METRICS_ADDRESS.name
# `queues --watch`: seconds between refreshes unless --interval says.
QUEUES_INTERVAL_S = 2.0


def add_all_opt(s: argparse.ArgumentParser) -> None:
    s.add_argument("--all", action="store_true", help="every configured agent (instead of --agent)")


def _quiet(s: argparse.ArgumentParser) -> None:
    s.add_argument("-q", "--quiet", action="store_true", help="no summary and no progress bar: warnings and errors only")


def _force(s: argparse.ArgumentParser) -> None:
    s.add_argument("--force", action="store_true", help="re-index every file, not only changed ones")


def _finite(text: str) -> float:
    """``--min-score``: a number from 0 to 1, as the servers' minScore (one check, ``min_score_problem``)."""
    # lazy: the search engine module loads the store and ranking code; a --help must not
    from memindex.pipeline.search.engine import min_score_problem

    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    why = min_score_problem(x)
    if why:
        raise argparse.ArgumentTypeError(why)
    return x


def _server_options(s: argparse.ArgumentParser) -> None:
    """--server / --server-timeout, for the help: main() takes them out of the command line and
    sends the rest to the server (producers/cli/remote.py) before any parser is built."""
    s.add_argument("--server", metavar="URL", default=argparse.SUPPRESS,
                   help=f"have a running `memindex serve` answer (unix:/path/to/sock or http://127.0.0.1:PORT, "
                        f"token from $MEMINDEX_TOKEN; default ${SERVER_ENV}): the same output and exit code, "
                        "from its warm process; an unreachable server is an error, never a silent in-process run")
    s.add_argument("--server-timeout", metavar="S", default=argparse.SUPPRESS,
                   help=f"with --server: seconds to wait for the whole answer (default ${TIMEOUT_ENV}, "
                        f"else {D.SERVER_TIMEOUT_S:g})")


def _metrics_opt(s: argparse.ArgumentParser) -> None:
    s.add_argument("--metrics-port", metavar="[HOST:]PORT", type=metrics_address, default=None,
                   help=f"serve Prometheus metrics on PORT, 127.0.0.1 unless HOST is given (default ${METRICS_ENV}, "
                        "else off; see README, Operations)")


# --- the one-shot commands -----------------------------------------------------------------

def index(s: argparse.ArgumentParser) -> None:
    _force(s)
    _quiet(s)


def search(s: argparse.ArgumentParser) -> None:
    s.add_argument("query", nargs="*", help="the query text (words are joined with spaces)")
    s.add_argument("--query", dest="query_text", metavar="TEXT", default=None,
                   help="the query text (instead of QUERY, as `openclaw memory search --query`)")
    s.add_argument("--corpus", choices=("memory", "sessions", "all", "wiki"), default=None,
                   help="search only memory files or session transcripts (default: all the agent's "
                        "search sources; wiki is not indexed by memindex)")
    s.add_argument("--json", action="store_true", help="print the memory_search payload as JSON")
    s.add_argument("--max-results", metavar="N", type=at_least_one, default=None,
                   help=f"at most N results (default: query.maxResults, {D.MAX_RESULTS})")
    s.add_argument("--min-score", metavar="X", type=_finite, default=None,
                   help=f"drop results scoring below X (default: query.minScore, {D.MIN_SCORE})")
    s.add_argument("--session-key", default=None, metavar="KEY",
                   help="search on behalf of this session key (its agent:<id>: picks the agent "
                        "unless --agent; session warm-up, citations)")
    s.add_argument("--queries", metavar="FILE",
                   help='JSONL of {"id":…,"query":…}; prints one JSON line per query ("-" = stdin)')
    _server_options(s)


def get(s: argparse.ArgumentParser) -> None:
    s.add_argument("path", help="a path as search returns it (workspace-relative) or an absolute path"
                   ).completer = complete.memory_paths  # type: ignore[attr-defined]  # argcomplete's hook
    s.add_argument("--from", dest="from_line", metavar="LINE", type=non_negative, default=None,
                   help="1-based start line")
    s.add_argument("--lines", metavar="N", type=non_negative, default=None, help="number of lines to return")
    s.add_argument("--json", action="store_true", help="print {path, text, ...} as JSON")
    _server_options(s)


def status(s: argparse.ArgumentParser) -> None:
    s.add_argument("--json", action="store_true",
                   help="print [{agentId, status, embeddingProbe, indexError, scan}] as JSON")
    s.add_argument("--deep", action="store_true", help="probe the embedding provider with one real request")
    s.add_argument("--index", action="store_true", help="sync the index first (implies --deep)")
    s.add_argument("--force", action="store_true", help="with --index: re-index every file")


def completion(s: argparse.ArgumentParser) -> None:
    s.add_argument("shell", choices=("bash", "zsh", "fish", "tcsh"), help="the shell to print it for")


# --- operating the pipeline ----------------------------------------------------------------

def watch(s: argparse.ArgumentParser) -> None:
    add_all_opt(s)
    s.add_argument("--no-initial-sync", action="store_true", help="do not sync once at start")
    s.add_argument("--max-watch-dirs", metavar="N", type=at_least_one, default=None,
                   help="cap on watched directories (default $MEMINDEX_WATCH_MAX_DIRS or 512)")
    s.add_argument("--debounce-ms", metavar="MS", type=non_negative, default=None, help="override sync.watchDebounceMs")
    s.add_argument("--drain-timeout", metavar="S", type=float, default=30.0,
                   help="embedded: seconds to let queued work finish on exit")
    _metrics_opt(s)


def backfill(s: argparse.ArgumentParser) -> None:
    add_all_opt(s)
    s.add_argument("--wait", action="store_true", help="wait until everything is indexed, with progress")
    _force(s)
    s.add_argument("--timeout", metavar="S", type=float, default=None,
                   help="with --wait: give up after S seconds")
    _quiet(s)
    s.add_argument("--batch", action="store_true",
                   help="embed through the provider's batch API (needs remote.batch.enabled); waits per "
                        "remote.batch.wait, showing batch progress until the data is searchable")


def queues(s: argparse.ArgumentParser) -> None:
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    s.add_argument("--interval", metavar="S", type=float, default=None,
                   help=f"with --watch: seconds between refreshes (default {QUEUES_INTERVAL_S:g})")


def health(s: argparse.ArgumentParser) -> None:
    s.add_argument("--host", default=None, help="check another host's processes (default: this hostname)")
    s.add_argument("--stall-seconds", metavar="S", type=float, default=None,
                   help="queue ready but nothing consumed for S seconds is unhealthy "
                        "(default $MEMINDEX_HEALTH_STALL_S or 300)")


def dead_letters(s: argparse.ArgumentParser) -> None:
    act = s.add_mutually_exclusive_group()
    act.add_argument("--replay", action="store_true", help="re-enqueue them (retry counters reset)")
    act.add_argument("--discard", action="store_true",
                     help="delete them for good; the Markdown stays the source of truth and the next sync "
                          "plans what is missing")
    s.add_argument("--json", action="store_true", help="print them as JSON")
    s.add_argument("--limit", metavar="N", type=int, default=1000, help="at most N messages (default 1000)")


def worker(s: argparse.ArgumentParser) -> None:
    s.add_argument("--writer", action="store_true", help="the single writer: --processes 1 --threads 1 -Q write")
    s.add_argument("--shard", metavar="K/N", default=None,
                   help="with --writer: consume write shard K of N (write.K); every process needs "
                        "MEMINDEX_WRITE_SHARDS=N, and a writer whose N differs from the deployment's refuses")
    s.add_argument("--processes", metavar="N", type=int, default=2, help="worker processes (default 2)")
    s.add_argument("--threads", metavar="N", type=int, default=4, help="threads per process (default 4)")
    s.add_argument("--queues", nargs="+", default=None, help="queues to consume (default: sync embed batch)")
    _metrics_opt(s)


def batches(s: argparse.ArgumentParser) -> None:
    add_all_opt(s)
    s.add_argument("--json", action="store_true", help="print the reports as JSON")
    s.add_argument("--limit", metavar="N", type=int, default=20, help="jobs per agent, newest first (default 20)")


# --- the servers ---------------------------------------------------------------------------

_TOKEN_HELP = f"bearer token clients must send (default ${TOKEN_ENV}); required off 127.0.0.1"


def mcp(s: argparse.ArgumentParser) -> None:
    s.add_argument("--http", metavar="[HOST:]PORT",
                   help=f"streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST default {DEFAULT_HOST})")
    s.add_argument("--token", help=_TOKEN_HELP)
    s.add_argument("--watch", action="store_true",
                   help="also run the file watcher and interval sync in this process (default: a sync is "
                        "scheduled on each search, as the runtime hooks do)")
    s.add_argument("--metrics-port", metavar="[HOST:]PORT", type=metrics_address, default=None,
                   help="serve Prometheus metrics (searches, latency, files pending per agent) on "
                        "PORT at /metrics, 127.0.0.1 unless HOST is given (off by default; see README, Operations)")


def serve(s: argparse.ArgumentParser) -> None:
    s.add_argument("--host", default=DEFAULT_HOST, help=f"bind address (default {DEFAULT_HOST})")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    s.add_argument("--token", help=_TOKEN_HELP)
    s.add_argument("--socket", metavar="PATH", default=None,
                   help="listen on this Unix socket instead of HOST:PORT (made 0600; its directory must be "
                        "yours alone, 0700, and is made so when missing), e.g. $XDG_RUNTIME_DIR/memindex/serve.sock")
    s.add_argument("--daemon", action="store_true",
                   help="run in the background once ready (pid file: --pid-file, default "
                        "<runtime dir>/serve.pid; output to the pid file's .log)")
    s.add_argument("--pid-file", metavar="PATH", default=None,
                   help="write this process's pid here (removed at exit); with --stop, the server to end")
    s.add_argument("--stop", action="store_true", help="stop the server the pid file names (SIGTERM) and exit")
