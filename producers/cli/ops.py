"""Operating the pipeline from the command line: ``watch``, ``backfill``, ``queues``, ``health``,
``dead-letters`` and ``worker`` (their options: ``arguments.py``; the table: ``commands.py``).

``memindex watch`` is the one command that keeps a workspace fresh: the file
watcher, interval sync and the session-delta detector (and, on the embedded
default with no Redis, the in-process workers too).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, Callable, Protocol

import redis
from dramatiq.brokers.redis import RedisBroker

from memindex.pipeline.config import environ
from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.environ import BROKER_ENV
from memindex.pipeline.config.paths import validate_agent_id
from memindex.pipeline.config.settings import AgentSettings, Context
from memindex.pipeline.embeddings.providers.local import threads_default
from memindex.pipeline.errors import ConfigError, EnvError, MemindexError, WorkspaceError
from memindex.pipeline.index.workspace import display_path
from memindex.pipeline.store.locks import LABEL_ENV
from memindex.producers import backfill
from memindex.producers.cli.agents import agent_contexts, configured_agents
from memindex.producers.cli.arguments import METRICS_ENV, QUEUES_INTERVAL_S
from memindex.producers.cli.backfill_batch import cmd_backfill_batch
from memindex.producers.cli.failures import report_failures, run_started, say_failures_once
from memindex.producers.cli.options import metrics_address, say, say_error
from memindex.producers.cli.progress import Progress
from memindex.producers.dispatch import pending_files
from memindex.producers.enqueue import request_sync
from memindex.producers.interval import IntervalSync
from memindex.producers.qmd_sync import start_qmd_sync
from memindex.producers.session_delta import DetectorLoop
from memindex.producers.watcher import DEFAULT_MAX_DIRS, ConfigReload, Watcher
from memindex.workers import embedded, health, queues
from memindex.workers.batch.backend import job_state_counts
from memindex.workers.broker import (
    QUEUES, SHARDS_ENV, WRITE_QUEUE, broker, broker_url, configured_shards, full_probe, is_embedded,
    is_write_queue, recorded_write_shards, redact, refused_credentials,
)
from memindex.workers.lifecycle import BEAT_S, Heartbeat, pid_alive, processes
from memindex.workers.logs import FORMAT_ENV, LEVEL_ENV
from memindex.workers.messages import GROUP_FILES
from memindex.workers.metrics import check_port, serve_metrics, worker_env
from memindex.workers.queues import claim_shard_count, depth
from memindex.workers.supervisor import stop_with_supervisor

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

class Loop(Protocol):
    """A producer running beside the others until stopped (detector, qmd schedule, config reload)."""

    def stop(self) -> None: ...


def _redis() -> RedisBroker:
    """The deployment's Redis broker: only commands that found it is not the embedded one ask."""
    assert isinstance(broker, RedisBroker), "the embedded broker has no Redis"
    return broker


class Producers:
    """The watcher, interval sync and side loops of one long-running process (watch, mcp --watch)."""

    def __init__(self, watcher: Watcher, interval: IntervalSync, loops: list[Loop], agents: int) -> None:
        self.watcher, self.interval, self.loops, self.agents = watcher, interval, loops, agents

    def stop(self) -> None:
        self.watcher.stop()
        self.interval.stop()
        for loop in self.loops:
            loop.stop()
        self.watcher.flush()  # edits inside the debounce window still get their sync


CATCH_UP_WAIT_S = 600.0  # the longest a start-up sync waits for the work queued before it


class _CatchUp:
    """The start-up sync of each watched agent. On Redis, work queued before this start (a
    Procfile stopped mid-backfill and started again) is still there and is done by the workers:
    a sync planned now re-planned all of its files (every pending file embedded and written twice,
    half the throughput), so the sync waits until the queues have drained (at most
    ``CATCH_UP_WAIT_S``) and plans only what is left then."""

    def __init__(self, contexts: list[Context]) -> None:
        self.contexts = contexts
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "_CatchUp":
        queued = 0 if is_embedded() else queues.total_outstanding()
        if not queued:
            self._sync()
            return self
        log.info("watch: %d message(s) queued before this start; the start-up sync of %s waits for the "
                 "workers to finish them (up to %.0f s), so their files are not planned twice", queued,
                 ", ".join(c.agent_id or "default" for c in self.contexts), CATCH_UP_WAIT_S)
        self._thread = threading.Thread(target=self._run, name="memindex-catch-up", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + CATCH_UP_WAIT_S
        while time.monotonic() < deadline:
            try:
                if queues.total_outstanding() == 0:
                    break
            except Exception:  # noqa: BLE001 - Redis away a moment: keep waiting, then sync anyway
                pass
            if self._stop.wait(2.0):
                return
        self._sync()

    def _sync(self) -> None:
        for ctx in self.contexts:
            try:
                request_sync(ctx, reason="watch-start")
            except Exception as exc:  # noqa: BLE001 - the watcher and the interval sync go on
                log.warning("watch: the start-up sync of %s could not be enqueued: %s", ctx.agent_id, exc)

    def stop(self) -> None:
        self._stop.set()


def start_producers(contexts: list[Context], *, initial_sync: bool = True, max_dirs: int | None = None,
                    debounce_ms: int | None = None, reload: Callable[[], list[Context]] | None = None,
                    need_a_workspace: bool = False) -> Producers:
    """Start watching ``contexts``. ``need_a_workspace`` (``memindex watch``): refuse, with the
    paths, when no enabled agent's workspace exists (a server keeps serving instead)."""
    enabled = [(ctx, settings_for(ctx)) for ctx in contexts]
    missing = {ctx.agent_id: f"workspace {display_path(str(s.workspace))} does not exist"
               for ctx, s in enabled if s.enabled and not s.workspace.is_dir()}
    if need_a_workspace and missing and len(missing) == sum(1 for _, s in enabled if s.enabled):
        # Nothing to watch at all: most likely a wrong path in the config (or an unmounted disk).
        raise WorkspaceError("; ".join(f"{aid}: {why}" for aid, why in missing.items())
                             + "; nothing to watch (fix the path, or create the workspace first)")
    embedded.start()  # no-op on Redis: the Procfile / compose run the workers
    pairs, catch_up = [], []
    side = _SideLoops()
    loops: list[Loop] = [side]
    for ctx, settings in enabled:
        if not settings.enabled:
            say(f"{ctx.agent_id}: memory search disabled; not watched", prefix=None, level=logging.INFO)
            continue
        if ctx.agent_id in missing:
            # Watched all the same (its nearest existing parent): indexed once the workspace appears.
            say(f"{ctx.agent_id}: {missing[ctx.agent_id]}; indexed once it appears", prefix=None)
        elif initial_sync:
            catch_up.append(ctx)  # catch up on what changed while nobody watched
        if settings.memory_search.sync.watch:
            pairs.append((ctx, settings))
    side.set([(ctx, s) for ctx, s in enabled if s.enabled])
    if catch_up:
        loops.append(_CatchUp(catch_up).start())
    watcher = Watcher(pairs, max_dirs=DEFAULT_MAX_DIRS if max_dirs is None else max_dirs,
                      debounce_s=None if debounce_ms is None else debounce_ms / 1000,
                      configured=[ctx.agent_id for ctx in contexts]).start()
    interval = IntervalSync(contexts).start()
    if reload is not None and contexts:
        def apply(now: list[Context]) -> None:  # a changed openclaw.json: watch the agents it lists now
            on = [(ctx, s) for ctx in now if (s := settings_for(ctx)).enabled]
            watcher.reconfigure([(ctx, s) for ctx, s in on if s.memory_search.sync.watch],
                                configured=[ctx.agent_id for ctx in now])
            interval.set_contexts(now)
            side.set(on)  # transcript detectors and qmd schedules follow the agents too

        loops.append(ConfigReload(contexts[0], reload, apply).start())
    return Producers(watcher, interval, loops, len(pairs))


def _others_hint(args: argparse.Namespace, contexts: list[Context]) -> str:
    """" (agent a of 3 configured; --all watches every one)" when the default agent alone is
    watched and the config lists others: they would silently go stale."""
    if args.agent or getattr(args, "all", False) or not contexts:
        return ""
    try:
        agents = configured_agents(args)
    except MemindexError:  # only a hint; the watch itself already loaded the config
        return ""
    if len(agents) <= 1:
        return ""
    return f" (agent {contexts[0].agent_id} of {len(agents)} configured; --all watches every one)"


def cmd_watch(args: argparse.Namespace) -> int:
    stop_with_supervisor()  # SIGKILLed, honcho left the watcher running beside the next one's
    args.metrics_port = metrics_port(args)
    contexts = agent_contexts(args)
    if not is_embedded():
        refused = _credentials_refused(wait=True)  # started before Redis (Procfile order): wait
        if refused:
            say_error(refused)
            return 2
    if args.metrics_port:  # first: a busy port is said before anything has started

        serve_metrics(args.metrics_port, contexts, job_state_counts, queue_depth=depth, broker_full=full_probe())
    running = start_producers(contexts, initial_sync=not args.no_initial_sync,
                              max_dirs=args.max_watch_dirs, debounce_ms=args.debounce_ms,
                              reload=lambda: agent_contexts(args), need_a_workspace=True)
    where = "embedded broker (in-process workers)" if is_embedded() else f"redis at {redact(broker_url() or '')}"
    # A banner for the terminal, a JSON record under --log-format json (it was the one plain line there).
    say(f"watching {running.agents} agent(s){_others_hint(args, contexts)}, "
        f"{len(running.watcher.watched_dirs)} directories; {where}. Ctrl-C to stop.", prefix=None, level=logging.INFO)
    heartbeat = _heartbeat("watch")
    stop = _Stop()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        stop.restore()
        running.stop()
        if heartbeat is not None:
            heartbeat.stop()
        if is_embedded():  # the queue dies with this process: finish what is in flight, saying so

            if queues.total_outstanding():
                say(f"stopping: finishing the work in flight (up to {args.drain_timeout:g} s; Ctrl-C again "
                    "to stop now, the next start plans the rest)", prefix=None, level=logging.INFO)
            embedded.wait_idle(timeout=args.drain_timeout)
        say("stopped", prefix=None, level=logging.INFO)
    return 0


def _heartbeat(kind: str) -> Any:
    """This process's heartbeat on Redis, for ``memindex health`` (None on the embedded broker)."""
    return None if is_embedded() else Heartbeat(_redis().client, _redis().namespace, kind, ()).start()


class _SideLoops:
    """The other producers of a long-running process, per agent: the transcript delta detector
    (sessions on) and the qmd schedule (backend qmd). ``set`` follows a reloaded config: an
    agent removed, disabled or changed stops its loops (they polled a removed agent's transcripts
    every second, each pass a traceback), and an agent added or changed gets its own."""

    def __init__(self) -> None:
        self._running: dict[str, tuple[str, list[Loop]]] = {}  # agent id -> (settings digest, loops)

    def set(self, agents: list[tuple[Context, AgentSettings]]) -> None:
        now = {ctx.agent_id or "": (ctx, s) for ctx, s in agents}
        for aid in [a for a in self._running if a not in now or self._running[a][0] != now[a][1].digest()]:
            for loop in self._running.pop(aid)[1]:
                loop.stop()
        for aid, (ctx, s) in now.items():
            if aid not in self._running:
                self._running[aid] = (s.digest(), _side_loops(ctx, s))

    def stop(self) -> None:
        for _, loops in self._running.values():
            for loop in loops:
                loop.stop()
        self._running.clear()


def _side_loops(ctx: Context, settings: AgentSettings) -> list[Loop]:
    """Other producers that belong to a long-running process, when this agent uses them."""
    loops: list[Loop] = []
    if "sessions" in settings.sources:
        loops.append(DetectorLoop([ctx], interval=1.0).start())
    if settings.memory.backend == "qmd":
        loop = start_qmd_sync(settings)
        if loop is not None:
            loops.append(loop)
    return loops


# --- backfill ---------------------------------------------------------------------------

def cmd_backfill(args: argparse.Namespace) -> int:
    if args.batch:  # backfill --batch: through the provider's batch API
        return cmd_backfill_batch(args)
    say_failures_once(args)
    contexts = agent_contexts(args)
    since = run_started()
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
                  + (f"{c['queued']} already queued by another sync, " if c.get("queued") else "")
                  + f"{c['to_delete']} to delete, {c['unchanged']} unchanged", flush=True)
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
        ok = ok and done and not b.refused
        if not args.quiet:
            state = ("done" if done else "stopped: its store was replaced while it ran (moved aside as damaged, "
                     "or deleted); `memindex index` plans it again" if b.replaced
                     else f"timed out ({backfill.progress_of(b)[1]} still pending)")
            print(f"{b.ctx.agent_id}: {state} in {time.monotonic() - started:.1f}s", flush=True)
        if b.refused:  # (said even with --quiet, as the failures below are)
            say_error(f"{b.ctx.agent_id}: {backfill.refused_line(b)}")
    failed = report_failures([b.settings for b in jobs], since)
    return 0 if ok and not failed else 1


# --- queues -----------------------------------------------------------------------------

def queue_report(contexts: list[Context]) -> dict[str, Any]:
    agents: dict[str | None, dict[str, Any]] = {}
    for ctx in contexts:
        try:
            agents[ctx.agent_id] = {"pending": pending_files(settings_for(ctx))}
        except Exception as exc:  # noqa: BLE001 - one unreadable store must not hide the rest
            agents[ctx.agent_id] = {"pending": None, "error": str(exc)}
    return {"broker": "embedded" if is_embedded() else redact(broker_url() or ""),
            "queues": queues.depth(), "workers": queues.worker_kinds(), "agents": agents}


def _format_report(r: dict[str, Any]) -> str:
    lines = [f"broker: {r['broker']}"]
    if r["broker"] == "embedded":
        lines.append("  (embedded: queues live inside the process running the workers; set "
                     "MEMINDEX_BROKER_URL to inspect a shared Redis broker)")

    lines.append(f"messages (a sync request, or a group of up to {GROUP_FILES} files):")
    cols = ("ready", "delayed", "running", "prefetched", "dead")
    lines.append(f"{'queue':<8}" + "".join(f"{c:>11}" for c in cols))
    for q, d in r["queues"].items():
        lines.append(f"{q:<8}" + "".join(f"{d[c]:>11}" for c in cols))  # write.<k>: one row per shard
    if r.get("workers"):
        lines.append(f"{'worker kind':<12} {'processes':>9}  queues")
        for w in r["workers"]:
            lines.append(f"{w['kind']:<12} {w['processes']:>9}  {' '.join(w['queues'])}")
    lines.append(f"{'agent':<16} {'pending files':>14}")
    for a, d in r["agents"].items():
        lines.append(f"{a:<16} {d['pending'] if d['pending'] is not None else 'error':>14}")
    return "\n".join(lines)


def cmd_queues(args: argparse.Namespace) -> int:
    contexts = agent_contexts(args, all_by_default=True)
    stop = _Stop() if args.watch else None
    try:
        while True:
            try:
                report = queue_report(contexts)
            except ConfigError:
                raise  # the one config line and exit 2, as every command gives
            except Exception as exc:  # noqa: BLE001 - e.g. redis unreachable: a clear message, exit 1

                say_error(refused_credentials(exc) or f"cannot read the queues: {type(exc).__name__}: {exc}")
                if stop is None:
                    return 1
                stop.wait(args.interval or QUEUES_INTERVAL_S)
                continue
            if args.json:
                print(json.dumps(report, indent=None if args.watch else 2), flush=True)
            else:
                if args.watch and sys.stdout.isatty():
                    sys.stdout.write("\x1b[H\x1b[2J")
                print(_format_report(report), flush=True)
            if stop is None or stop.wait(args.interval or QUEUES_INTERVAL_S):
                return 0
            if not args.json and not sys.stdout.isatty():
                print()
    finally:
        if stop is not None:
            stop.restore()


# --- health ---------------------------------------------------------------------------------

def cmd_health(args: argparse.Namespace) -> int:
    if is_embedded():
        say_error("health reads the heartbeats on a shared Redis broker; set MEMINDEX_BROKER_URL "
                  "(on the embedded broker the workers live and die with `memindex watch` itself)")
        return 2
    host = args.host or socket.gethostname()
    try:
        ok, lines = health.check(_redis().client, _redis().namespace, host, stall_s=args.stall_seconds)
    except Exception as exc:  # noqa: BLE001 - redis unreachable: unhealthy, one line

        print(f"unhealthy: {refused_credentials(exc) or f'cannot read the heartbeats: {type(exc).__name__}: {exc}'}",
              file=sys.stderr)
        return 1
    print(f"{'healthy' if ok else 'unhealthy'}: {host}", file=sys.stdout if ok else sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


# --- dead letters -----------------------------------------------------------------------------

def cmd_dead_letters(args: argparse.Namespace) -> int:
    if is_embedded():
        print("embedded broker: failed jobs are reported by the process that ran them (memindex index / "
              "watch); set MEMINDEX_BROKER_URL to inspect a shared Redis broker", file=sys.stderr)
        if args.json:
            print("[]")
        return 0
    agent = None
    if args.agent:  # any id a message may carry, configured or not (an agent since removed)

        agent = validate_agent_id(args.agent)
    dead = queues.dead_letters(limit=args.limit, agent=agent)
    if args.json:
        print(json.dumps(dead, indent=2))
    elif not dead:
        print("no dead letters" + (f" for agent {agent}" if agent else ""))
    else:
        for d in dead:
            err = d.get("error")
            died = (dt.datetime.fromtimestamp(d["died"] / 1000, tz=dt.timezone.utc).isoformat(timespec="seconds")
                    if d.get("died") else "-")
            print(f"{died}  {d['queue']:<6} {d['actor']:<20} agent={d['agent'] or '-':<12} "
                  f"retries={d['retries']:<3} {d['id']}  {err or ''}")
    if args.replay:
        n = queues.replay_dead_letters(limit=args.limit, agent=agent)
        print(f"replayed {n} message(s)", file=sys.stderr)
    elif args.discard:
        n = queues.discard_dead_letters(limit=args.limit, agent=agent)
        print(f"discarded {n} message(s); the next sync plans whatever they held from the files", file=sys.stderr)
    return 0


# --- worker ---------------------------------------------------------------------------------

def _credentials_refused(wait: bool = False) -> str | None:
    """The one line when Redis answers but refuses this URL's credentials; None otherwise.

    ``wait``: while Redis does not answer at all, wait for it (saying so once): the Procfile
    starts every process at once, Redis may come up later, and a writer or watcher that
    exited on it took the whole Procfile down (dramatiq's own consumers already wait)."""

    client = redis.Redis.from_url(broker_url() or "", socket_connect_timeout=2, socket_timeout=2)
    said = 0.0
    while True:
        try:
            client.ping()
        except Exception as exc:  # noqa: BLE001 - only a refusal of the credentials is decided here
            refused = refused_credentials(exc)
            if refused or not wait:
                return refused
            if not said:
                said = time.monotonic()
                say(f"redis at {redact(broker_url() or '?')} does not answer ({exc}); waiting for it "
                    "(Ctrl-C to stop)", prefix=None)
            time.sleep(REDIS_WAIT_POLL_S)
            continue
        if said:
            say(f"redis answers after {time.monotonic() - said:.0f} s; starting", prefix=None, level=logging.INFO)
        return None


REDIS_WAIT_POLL_S = 1.0  # how often a starting writer or watcher looks for Redis again


def _other_writer(queue: str) -> str | None:
    """A live process already consuming ``queue``, as ``pid N on host H``; None when there is none.
    Live = its heartbeat (workers/lifecycle.py) moves on within two beats. A writer being restarted
    leaves a heartbeat that outlives it by up to PROC_TTL_S and no longer moves: not counted (nor
    one of a pid gone from this host, at once)."""

    def seen() -> dict[str, int]:
        out = {}
        for proc in processes(_redis().client, _redis().namespace):
            if queue not in {q.removesuffix(".DQ") for q in proc["queues"]}:
                continue
            if proc["host"] == socket.gethostname() and not pid_alive(proc["pid"]):
                continue
            out[f"pid {proc['pid']} on host {proc['host']}"] = proc["beat"]
        return out

    first = seen()
    deadline = time.monotonic() + 2 * BEAT_S + 0.5
    while first and time.monotonic() < deadline:
        time.sleep(0.25)
        live = [who for who, beat in seen().items() if beat > first.get(who, beat)]
        if live:
            return ", ".join(live)
    return None


WRITER_START_S = 15  # covers a starting writer until its first heartbeat (dramatiq start-up)


def _claim_writer_start(queue: str) -> str | None:
    """Claim ``queue``'s writer start in Redis (SET NX): the heartbeat check cannot see a writer
    started at the same instant (neither beats yet), and both ran. Returns the other starter as
    ``pid N on host H`` when it holds the claim; a claim left by a dead pid of this host (a writer
    killed and restarted at once) or by this very pid is taken over."""

    key = f"memindex:writer-start:{queue}"
    me = f"pid {os.getpid()} on host {socket.gethostname()}"  # exec keeps the pid: it is the writer's
    client = _redis().client
    for _ in range(3):
        if client.set(key, me, nx=True, ex=WRITER_START_S):
            return None
        held = client.get(key)
        if held is None:  # expired between the two calls
            continue
        other = held.decode("utf-8", "replace") if isinstance(held, bytes) else str(held)
        pid, _, host = other.removeprefix("pid ").partition(" on host ")
        if other != me and (host != socket.gethostname() or not pid.isdigit() or pid_alive(int(pid))):
            return other
        # That starter died (a restart), or it was this pid: a restarted container's writer is
        # pid 1 on the same host name again. Take its claim over.
        client.delete(key)
    return None


def cmd_worker(args: argparse.Namespace) -> int:
    """exec dramatiq (``workers/run.py``) on ``memindex.workers.actors:get_broker`` with the right queues (Procfile / compose use this)."""
    if not environ.BROKER_URL.raw():
        say_error(f"a worker process needs {BROKER_ENV} (redis://...). On one machine without Redis, "
                  "`memindex watch` runs the workers in-process.")
        return 2
    refused = _credentials_refused(wait=True)
    if refused:  # an unreachable Redis is waited for (Procfile start order); a wrong password never heals
        say_error(refused)
        return 2
    if args.shard and not args.writer:
        say_error("--shard K/N goes with --writer")
        return 2
    if args.writer:
        # Exactly one thread consumes the write queue (or one shard of it): each store has one writer.
        try:
            k, n = parse_shard(args.shard or "0/1")
        except ValueError as exc:
            say_error(f"--shard {args.shard}: {exc}")
            return 2

        other = claim_shard_count(n)
        if other is not None:
            say_error(f"this deployment's writers run {other} shard(s) but this one was started with "
                      f"--shard {k}/{n}; refusing to consume (to change N: stop every writer, drain the write "
                      "queues, then `redis-cli DEL memindex:write-shards`)")
            return 2

        os.environ[SHARDS_ENV] = str(n)  # the dramatiq process declares write.0 .. write.<N-1>
        processes, threads, qs = 1, 1, [WRITE_QUEUE if n == 1 else f"{WRITE_QUEUE}.{k}"]
        holder = _other_writer(qs[0]) or _claim_writer_start(qs[0])
        if holder is not None:
            say_error(f"queue {qs[0]} already has a writer ({holder}); one writer per shard: a second one "
                      "would only take turns with it on each store. Stop that one first, or start this "
                      "one with another --shard K/N")
            return 2
    else:
        mine, recorded = configured_shards(), recorded_write_shards()
        if mine is not None and recorded is not None and mine != recorded:
            # Its sends would go to shards no writer consumes (they now follow the recorded N, with
            # a warning): refused at start, where the operator sees it, like a writer's mismatch.
            say_error(f"this deployment's writers run {recorded} write shard(s) but {SHARDS_ENV}={mine} here; "
                      f"refusing to start (set {SHARDS_ENV}={recorded} where this process starts, e.g. its .env)")
            return 2
        processes, threads = args.processes, args.threads
        qs = args.queues or [q for q in QUEUES if q != "write"]
        unknown = [q for q in qs if q not in QUEUES and not is_write_queue(q)]
        if unknown:  # dramatiq would start a worker that consumes nothing, and say nothing
            say_error(f"no queue named {', '.join(unknown)}; the queues are {', '.join(QUEUES)} "
                      "(and write.K with sharded writers, through --writer --shard K/N)")
            return 2
        if "write" in qs and (processes, threads) != (1, 1):
            say_error("the write queue must be consumed by exactly one thread (use --writer)")
            return 2

    args.metrics_port = metrics_port(args)
    if args.log_level:
        os.environ[LEVEL_ENV] = args.log_level
    os.environ[FORMAT_ENV] = args.log_format
    # --state-dir / --config name what this worker serves, as the variables do (its actors read
    # the variables: the flags alone were ignored, and the worker served the producer's state dir).
    for flag, var in ((args.state_dir, "OPENCLAW_STATE_DIR"), (args.config, "OPENCLAW_CONFIG_PATH")):
        if flag:
            os.environ[var] = os.path.abspath(os.path.expanduser(flag))
    if args.metrics_port:
        check_port(args.metrics_port)  # a busy port: this command's one line (MetricsPortError), before anything starts
        os.environ.update(worker_env(*args.metrics_port))
    # What another writer of the same store names while it waits for this one (dramatiq's child
    # would say "__main__.py").
    os.environ[LABEL_ENV] = ("memindex worker --writer" + (f" --shard {args.shard}" if args.shard else "")
                             if args.writer else "memindex worker --queues " + " ".join(qs))
    # What the worker processes import, imported here first: a MEMINDEX_* number they read that
    # is not one (MEMINDEX_BATCH_LEASE_S=abc) is this command's one line, not a traceback from each.
    # lazy: after the variables above are set (the actors read them as they load), and only here:
    # loading the actors costs a third of a second that no other command pays
    import memindex.workers.actors  # noqa: F401
    threads_default()  # MEMINDEX_LOCAL_THREADS too (read when a local model first loads)

    # dramatiq's command line, wrapped (workers/run.py): its own processes log in our format, and
    # the command stops when its supervisor dies.
    argv = [sys.executable, "-m", "memindex.workers.run", "memindex.workers.actors:get_broker", "--processes", str(processes),
            "--threads", str(threads), "--queues", *qs]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return 0  # pragma: no cover


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N) with 0 <= K < N."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError("expected K/N, e.g. 0/2") from None
    if n < 1 or not 0 <= k < n:
        raise ValueError("needs 0 <= K < N")
    return k, n


# --- --metrics-port -------------------------------------------------------------------------

def metrics_port(args: argparse.Namespace) -> tuple[str, int] | None:
    """``--metrics-port``, else ``$MEMINDEX_METRICS_ADDRESS`` (read as the command runs: the parser
    is built once and cached); a bad value is the variable's one line (``EnvError``)."""
    raw = environ.METRICS_ADDRESS.text()
    given: tuple[str, int] | None = args.metrics_port
    if given or not raw:
        return given
    try:
        return metrics_address(raw)
    except argparse.ArgumentTypeError:
        raise EnvError(METRICS_ENV, f"must be [HOST:]PORT, e.g. 9191 or 0.0.0.0:9191, not {raw!r}") from None
