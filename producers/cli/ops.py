"""Operating the pipeline from the command line: ``watch``, ``backfill``,
``queues``, ``dead-letters`` and ``worker`` (hooked into ``memindex.producers.cli.main``).

``memindex watch`` is the one command that keeps a workspace fresh: the file
watcher, interval sync and the session-delta detector (and, on the embedded
default with no Redis, the in-process workers too).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from memindex.pipeline.config.settings import Context
from memindex.producers.cli.agents import add_agent_opts, agent_contexts
from memindex.producers.cli.progress import Progress

log = logging.getLogger("memindex.ops")


def _progress(desc: str, enabled: bool) -> Progress:
    return Progress(desc, enabled)


def _tty() -> bool:
    return sys.stderr.isatty()


class _Stop:
    """Ctrl-C or SIGTERM (honcho, docker stop) ends a long-running command cleanly."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._old = signal.getsignal(signal.SIGTERM)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self.event.set())

    def wait(self, timeout: float) -> bool:
        try:
            return self.event.wait(timeout)
        except KeyboardInterrupt:
            self.event.set()
            return True

    def restore(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old)


# --- watch ----------------------------------------------------------------------------

def cmd_watch(args: argparse.Namespace) -> int:
    from memindex.pipeline.config.agents import settings_for
    from memindex.producers.interval import IntervalSync
    from memindex.producers.enqueue import request_sync
    from memindex.producers.watcher import Watcher
    from memindex.workers import embedded
    from memindex.workers.broker import broker_url, is_embedded, redact

    contexts = agent_contexts(args)
    embedded.start()  # no-op on Redis: the Procfile / compose run the workers
    where = "embedded broker (in-process workers)" if is_embedded() else f"redis at {redact(broker_url() or '')}"
    pairs, loops = [], []
    for ctx in contexts:
        settings = settings_for(ctx)
        if not settings.enabled:
            print(f"{ctx.agent_id}: memory search disabled; not watched", file=sys.stderr)
            continue
        if not args.no_initial_sync:
            request_sync(ctx, reason="watch-start")  # catch up on what changed while nobody watched
        if settings.memory_search["sync"]["watch"]:
            pairs.append((ctx, settings))
        loops.extend(_side_loops(ctx, settings))
    watcher = Watcher(pairs, max_dirs=args.max_watch_dirs,
                      debounce_s=None if args.debounce_ms is None else args.debounce_ms / 1000).start()
    interval = IntervalSync(contexts).start()
    print(f"watching {len(pairs)} agent(s), {len(watcher.watched_dirs)} directories; {where}. "
          "Ctrl-C to stop.", file=sys.stderr, flush=True)
    stop = _Stop()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        stop.restore()
        watcher.stop()
        interval.stop()
        for loop in loops:
            loop.stop()
        watcher.flush()  # edits inside the debounce window still get their sync
        if is_embedded():
            embedded.wait_idle(timeout=args.drain_timeout)  # the queue dies with this process
        print("stopped", file=sys.stderr)
    return 0


def _side_loops(ctx: Context, settings: Any) -> list:
    """Other producers that belong to a long-running process, when this agent uses them."""
    loops: list = []
    if "sessions" in settings.sources:
        try:
            from memindex.producers.session_delta import DetectorLoop

            loops.append(DetectorLoop([ctx], interval=1.0).start())
        except ImportError:
            pass
    if settings.memory.get("backend") == "qmd":
        try:
            from memindex.producers.qmd_sync import start_qmd_sync

            loop = start_qmd_sync(settings)
            if loop is not None:
                loops.append(loop)
        except ImportError:
            pass
    return loops


# --- backfill ---------------------------------------------------------------------------

def cmd_backfill(args: argparse.Namespace) -> int:
    from memindex.producers import backfill

    contexts = agent_contexts(args)
    bar_on = _tty() and not args.quiet
    wait = args.wait or backfill.must_wait()
    if wait and not args.wait and not args.quiet:
        print("note: embedded broker (no MEMINDEX_BROKER_URL): the workers run in this process, "
              "so backfill waits for them", file=sys.stderr)
    started = time.monotonic()
    jobs = []
    for ctx in contexts:
        bar = _progress(f"enqueue {ctx.agent_id}", bar_on)
        try:
            b = backfill.enqueue(ctx, force=args.force, progress=bar)
        finally:
            bar.close()
        c = b.counts
        if not args.quiet:
            print(f"{ctx.agent_id}: enqueued {c['to_index']} file(s) (generation {c['generation']}), "
                  f"{c['to_delete']} to delete, {c['unchanged']} unchanged", flush=True)
        jobs.append(b)
    if not wait:
        return 0
    ok = True
    for b in jobs:
        bar = _progress(f"indexing {b.ctx.agent_id}", bar_on)
        try:
            done = backfill.wait(b, progress=bar, timeout=args.timeout)
        finally:
            bar.close()
        ok = ok and done
        if not args.quiet:
            state = "done" if done else f"timed out ({backfill.progress_of(b)[1]} still pending)"
            print(f"{b.ctx.agent_id}: {state} in {time.monotonic() - started:.1f}s", flush=True)
    return 0 if ok else 1


# --- queues -----------------------------------------------------------------------------

def queue_report(contexts: list[Context]) -> dict[str, Any]:
    from memindex.pipeline.config.agents import settings_for
    from memindex.producers.enqueue import pending_files
    from memindex.workers import queues
    from memindex.workers.broker import broker_url, is_embedded, redact

    agents = {}
    for ctx in contexts:
        try:
            agents[ctx.agent_id] = {"pending": pending_files(settings_for(ctx))}
        except Exception as exc:  # noqa: BLE001 - one unreadable store must not hide the rest
            agents[ctx.agent_id] = {"pending": None, "error": str(exc)}
    return {"broker": "embedded" if is_embedded() else redact(broker_url() or ""),
            "queues": queues.depth(), "agents": agents}


def _format_report(r: dict[str, Any]) -> str:
    lines = [f"broker: {r['broker']}"]
    if r["broker"] == "embedded":
        lines.append("  (embedded: queues live inside the process running the workers; set "
                     "MEMINDEX_BROKER_URL to inspect a shared Redis broker)")
    lines.append(f"{'queue':<8} {'ready':>8} {'delayed':>8} {'dead':>8} {'in_progress':>12}")
    for q, d in r["queues"].items():
        lines.append(f"{q:<8} {d['ready']:>8} {d['delayed']:>8} {d['dead']:>8} {d['in_progress']:>12}")
    lines.append(f"{'agent':<16} {'pending files':>14}")
    for a, d in r["agents"].items():
        lines.append(f"{a:<16} {d['pending'] if d['pending'] is not None else 'error':>14}")
    return "\n".join(lines)


def cmd_queues(args: argparse.Namespace) -> int:
    from memindex.pipeline.config.settings import list_agent_ids, load_raw

    base = Context(args.agent, args.config, args.state_dir, args.workspace)
    contexts = [base.with_agent(a) for a in list_agent_ids(load_raw(base))]
    stop = _Stop() if args.watch else None
    try:
        while True:
            try:
                report = queue_report(contexts)
            except Exception as exc:  # noqa: BLE001 - e.g. redis unreachable: a clear message, exit 1
                print(f"error: cannot read the queues: {type(exc).__name__}: {exc}", file=sys.stderr)
                if stop is None:
                    return 1
                stop.wait(args.interval)
                continue
            if args.json:
                print(json.dumps(report, indent=None if args.watch else 2), flush=True)
            else:
                if args.watch and sys.stdout.isatty():
                    sys.stdout.write("\x1b[H\x1b[2J")
                print(_format_report(report), flush=True)
            if stop is None or stop.wait(args.interval):
                return 0
            if not args.json and not sys.stdout.isatty():
                print()
    finally:
        if stop is not None:
            stop.restore()


# --- dead letters -----------------------------------------------------------------------------

def cmd_dead_letters(args: argparse.Namespace) -> int:
    from memindex.workers import queues
    from memindex.workers.broker import is_embedded

    if is_embedded():
        print("embedded broker: failed jobs are reported by the process that ran them (memindex index / "
              "watch); set MEMINDEX_BROKER_URL to inspect a shared Redis broker", file=sys.stderr)
        if args.json:
            print("[]")
        return 0
    dead = queues.dead_letters(limit=args.limit)
    if args.json:
        print(json.dumps(dead, indent=2))
    elif not dead:
        print("no dead letters")
    else:
        for d in dead:
            err = (d.get("error") or [""])[0] if isinstance(d.get("error"), list) else d.get("error")
            print(f"{d['queue']:<6} {d['actor']:<20} agent={d['agent'] or '-':<12} "
                  f"retries={d['retries']:<3} {d['id']}  {err or ''}")
    if args.replay:
        n = queues.replay_dead_letters(limit=args.limit)
        print(f"replayed {n} message(s)", file=sys.stderr)
    return 0


# --- worker ---------------------------------------------------------------------------------

def cmd_worker(args: argparse.Namespace) -> int:
    """exec ``dramatiq memindex.workers.actors`` with the right queues (Procfile / compose use this)."""
    from memindex.workers.broker import BROKER_ENV, QUEUES

    if not os.environ.get(BROKER_ENV):
        print(f"error: a worker process needs {BROKER_ENV} (redis://...). On one machine without Redis, "
              "`memindex watch` runs the workers in-process.", file=sys.stderr)
        return 2
    if args.writer:
        # Exactly one thread consumes the write queue: each store has one writer.
        processes, threads, qs = 1, 1, ["write"]
    else:
        processes, threads = args.processes, args.threads
        qs = args.queues or [q for q in QUEUES if q != "write"]
        if "write" in qs and (processes, threads) != (1, 1):
            print("error: the write queue must be consumed by exactly one thread (use --writer)",
                  file=sys.stderr)
            return 2
    argv = [sys.executable, "-m", "dramatiq", "memindex.workers.actors", "--processes", str(processes),
            "--threads", str(threads), "--queues", *qs]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return 0  # pragma: no cover


# --- registration ---------------------------------------------------------------------------

def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("watch", help="keep the index fresh: watcher + interval sync (+ in-process workers)")
    add_agent_opts(s)
    s.add_argument("--no-initial-sync", action="store_true", help="do not sync once at start")
    s.add_argument("--max-watch-dirs", type=int, default=None,
                   help="cap on watched directories (default $MEMINDEX_WATCH_MAX_DIRS or 512)")
    s.add_argument("--debounce-ms", type=int, default=None, help="override sync.watchDebounceMs")
    s.add_argument("--drain-timeout", type=float, default=30.0,
                   help="embedded: seconds to let queued work finish on exit")
    s.set_defaults(func=_with_default_cap(cmd_watch))

    s = sub.add_parser("backfill", help="enqueue a whole workspace in bulk (P2)")
    add_agent_opts(s)
    s.add_argument("--wait", action="store_true", help="wait until everything is indexed, with progress")
    s.add_argument("--force", action="store_true", help="rebuild everything")
    s.add_argument("--timeout", type=float, default=None, help="with --wait: give up after this many seconds")
    s.add_argument("-q", "--quiet", action="store_true")
    s.set_defaults(func=cmd_backfill)

    s = sub.add_parser("queues", help="queue depth per queue and pending work per agent (P3)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    s.add_argument("--interval", type=float, default=2.0, help="with --watch: seconds between refreshes")
    s.set_defaults(func=cmd_queues)

    s = sub.add_parser("dead-letters", help="jobs that failed after all retries")
    s.add_argument("--replay", action="store_true", help="re-enqueue them (retry counters reset)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--limit", type=int, default=1000)
    s.set_defaults(func=cmd_dead_letters)

    s = sub.add_parser("worker", help="run dramatiq workers on MEMINDEX_BROKER_URL")
    s.add_argument("--writer", action="store_true", help="the single writer: --processes 1 --threads 1 -Q write")
    s.add_argument("--processes", type=int, default=2)
    s.add_argument("--threads", type=int, default=4)
    s.add_argument("--queues", nargs="+", default=None, help="default: sync embed batch")
    s.set_defaults(func=cmd_worker)


def _with_default_cap(fn):
    def run(args: argparse.Namespace) -> int:
        if args.max_watch_dirs is None:
            from memindex.producers.watcher import DEFAULT_MAX_DIRS

            args.max_watch_dirs = DEFAULT_MAX_DIRS
        return fn(args)

    return run
