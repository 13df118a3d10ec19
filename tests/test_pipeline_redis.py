"""The pipeline through a real Redis and real ``dramatiq`` worker processes:
convergence under the watcher, a worker SIGKILLed mid-backfill, duplicated
jobs, a Redis restart, dead letters, and the sync-requested flag."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import GGUF, REPO, Agent, run_cli

pytestmark = pytest.mark.redis


def _wait(cond, timeout: float = 20.0, poll: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(poll)
    return bool(cond())


def _kill(proc: subprocess.Popen, sig=signal.SIGTERM, timeout: float = 15) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def _spawn(url: str, logdir: Path, name: str, *args: str) -> subprocess.Popen:
    """``memindex <args>`` in its own session, logging to a file (a full pipe would block it)."""
    log = open(logdir / f"{name}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "memindex", *args], cwd=REPO,
                            env=dict(os.environ, MEMINDEX_BROKER_URL=url), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


@contextlib.contextmanager
def _workers(url: str, logdir: Path):
    procs = {"worker": _spawn(url, logdir, "worker", "worker", "--processes", "1", "--threads", "2"),
             "writer": _spawn(url, logdir, "writer", "worker", "--writer")}
    try:
        yield procs
    finally:
        for p in procs.values():
            _kill(p)


def _args(a: Agent) -> list[str]:
    return ["--config", str(a.config_path), "--state-dir", str(a.state), "--workspace", str(a.workspace)]


def _cli(a: Agent, url: str, *args: str, timeout: float = 45):
    out = run_cli(*_args(a), *args, env={"MEMINDEX_BROKER_URL": url}, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def _py(url: str, code: str, timeout: float = 30) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=dict(os.environ, MEMINDEX_BROKER_URL=url),
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _idle(url: str) -> bool:
    rep = json.loads(run_cli("queues", "--json", env={"MEMINDEX_BROKER_URL": url}).stdout)
    return all(q["ready"] + q["delayed"] + q["running"] + q["prefetched"] == 0 for q in rep["queues"].values())


def _indexed(a: Agent) -> int:
    from memindex.pipeline.store.reader import open_reader

    r = open_reader(a.settings())
    try:
        return len(r.indexed_files(1))
    finally:
        r.close()


def _populate(a: Agent, n: int) -> None:
    for i in range(n):
        a.write(f"memory/{2000 + i // 366}/{i:05d}.md", f"# day {i}\nnote {i} about topic{i % 17}\n")


def _clean_build(root: Path, populate) -> Agent:
    clean = Agent(root)
    populate(clean)
    clean.index()
    return clean


def test_watch_through_redis_converges(tmp_path, redis_server):
    """Created, edited, renamed, deleted files under memory/ follow with no manual index."""
    url = redis_server.url
    a = Agent(tmp_path / "a")
    a.memory_config({"sync": {"watchDebounceMs": 300}})
    a.write("memory/a.md", "the quick brown fox\n")
    with _workers(url, tmp_path):
        watch = _spawn(url, tmp_path, "watch", *_args(a), "watch")
        try:
            assert _wait(lambda: a.search("fox")["results"]), "initial sync"
            a.write("memory/b.md", "lorem ipsum kumquat\n")
            assert _wait(lambda: a.search("kumquat")["results"]), "created"
            a.write("memory/a.md", "the slow green turtle\n")
            assert _wait(lambda: a.search("turtle")["results"] and not a.search("fox")["results"]), "edited"
            (a.workspace / "memory" / "2027").mkdir()
            time.sleep(0.1)
            a.write("memory/2027/deep.md", "papaya in a new directory\n")
            assert _wait(lambda: a.search("papaya")["results"]), "new directory"
            os.rename(a.workspace / "memory/b.md", a.workspace / "memory/c.md")
            assert _wait(lambda: [r["path"] for r in a.search("kumquat")["results"]] == ["memory/c.md"]), "renamed"
            (a.workspace / "memory/c.md").unlink()
            assert _wait(lambda: a.search("kumquat")["results"] == []), "deleted"
        finally:
            _kill(watch)
        assert watch.returncode == 0

    def final(x: Agent) -> None:
        x.write("memory/a.md", "the slow green turtle\n")
        x.write("memory/2027/deep.md", "papaya in a new directory\n")

    assert a.store_rows() == _clean_build(tmp_path / "clean", final).store_rows()


def test_worker_sigkill_mid_backfill_then_restart_converges(tmp_path, redis_server):
    url = redis_server.url
    n = 3000
    a = Agent(tmp_path / "a")
    _populate(a, n)
    with _workers(url, tmp_path) as procs:
        import redis

        sync_queue = redis.Redis.from_url(url)
        out = _cli(a, url, "backfill")  # returns once enqueued
        assert f"enqueued {n} file(s)" in out.stdout
        groups = sync_queue.llen("memindex:sync")  # the file groups (32 files each) still waiting
        # Kill once the worker has taken a few groups (2 threads prefetch 4): not by rows in the
        # store, which the writer commits a second's writes at a time (group commit), by when a
        # fast file side may have chunked every group.
        assert _wait(lambda: sync_queue.llen("memindex:sync") <= groups - 8, timeout=30)
        _kill(procs["worker"], signal.SIGKILL)  # mid-backfill: no chance to requeue or ack
        time.sleep(1.0)  # let the writer drain what the dead worker already chunked
        assert _indexed(a) < n, "the kill came too late to test anything"
        procs["worker"] = _spawn(url, tmp_path, "worker2", "worker", "--processes", "1", "--threads", "2")
        # The dead worker's fetched messages stay unacknowledged until dramatiq's heartbeat
        # timeout; the next sync re-plans whatever is missing instead of waiting for them.
        out = _cli(a, url, "backfill", "--wait", "--timeout", "40", timeout=50)
        assert "done" in out.stdout
    assert a.store_rows() == _clean_build(tmp_path / "clean", lambda x: _populate(x, n)).store_rows()


def test_same_jobs_enqueued_twice_leave_no_duplicates(tmp_path, redis_server):
    url = redis_server.url
    a = Agent(tmp_path / "a")
    a.write("memory/a.md", "one\n\ntwo\n")
    a.write("memory/b.md", "three\n")
    with _workers(url, tmp_path):
        _cli(a, url, "backfill", "--wait", "--timeout", "30")
        a.write("memory/a.md", "one changed\n\n" + "more text here\n" * 50)
        p = a.workspace / "memory/a.md"
        st = p.stat()
        ctx = json.dumps(a.ctx.as_dict())
        job = json.dumps({"source": "memory", "path": "memory/a.md", "abs_path": str(p), "size": st.st_size,
                          "mtime_ns": st.st_mtime_ns, "kind": "markdown", "known_hash": None})
        _py(url, f"""
import json
import msgspec
from memindex.pipeline.config.settings import Context
from memindex.pipeline.index.records import FileJob
from memindex.workers.wire import IndexFiles, SyncAgent, send
ctx, job = Context(**json.loads({ctx!r})), msgspec.convert(json.loads({job!r}), FileJob)
for _ in range(2):
    send(IndexFiles(ctx, 1, [job]))
    send(SyncAgent(ctx, reason="dup"))
""")
        assert _wait(lambda: _idle(url), timeout=30)
        time.sleep(0.3)
        assert _wait(lambda: _idle(url), timeout=30)

    def final(x: Agent) -> None:
        x.write("memory/a.md", "one changed\n\n" + "more text here\n" * 50)
        x.write("memory/b.md", "three\n")

    rows = a.store_rows()
    assert len(rows) == len(set(rows))
    assert rows == _clean_build(tmp_path / "clean", final).store_rows()


def test_redis_restart_mid_run_workers_reconnect_and_next_sync_fills_the_gap(tmp_path, redis_server):
    url = redis_server.url
    n = 2000
    a = Agent(tmp_path / "a")
    _populate(a, n)
    with _workers(url, tmp_path) as procs:
        _cli(a, url, "backfill")
        assert _wait(lambda: _indexed(a) > 0, timeout=30)
        redis_server.stop()  # no persistence: every queued message is lost
        time.sleep(1.0)
        redis_server.start()  # same port
        time.sleep(1.5)
        assert all(p.poll() is None for p in procs.values()), "a worker died with Redis"
        out = _cli(a, url, "backfill", "--wait", "--timeout", "40", timeout=50)
        assert "done" in out.stdout
        # The workers (not new ones) did that work: they reconnected.
        assert all(p.poll() is None for p in procs.values())
    assert a.store_rows() == _clean_build(tmp_path / "clean", lambda x: _populate(x, n)).store_rows()


def test_dead_letters_are_listed_and_replayed(tmp_path, redis_server):
    url = redis_server.url
    a = Agent(tmp_path / "a")
    ctx = json.dumps(a.ctx.as_dict())
    with _workers(url, tmp_path):
        # A message that is no IndexFiles payload (another version's): never retried, dead-lettered with why.
        _py(url, f"""
import json
import dramatiq
from memindex.workers.broker import get_broker
get_broker().enqueue(dramatiq.Message(queue_name="sync", actor_name="index_files", kwargs={{}}, options={{}},
                                      args=(json.loads({ctx!r}), 1, [{{"not": "a job"}}])))
""")

        def dead() -> list:
            out = run_cli("dead-letters", "--json", env={"MEMINDEX_BROKER_URL": url})
            return json.loads(out.stdout)

        assert _wait(lambda: len(dead()) == 1, timeout=20)
        d = dead()[0]
        assert d["actor"] == "index_files" and d["queue"] == "sync" and d["agent"] == "main"  # file side
        assert "version of memindex" in (d["error"] or "") and "$[2][0]" in d["error"], d
        rep = json.loads(run_cli("queues", "--json", env={"MEMINDEX_BROKER_URL": url}).stdout)
        assert rep["queues"]["sync"]["dead"] == 1
        out = run_cli("dead-letters", "--replay", env={"MEMINDEX_BROKER_URL": url})
        assert "replayed 1 message(s)" in out.stderr
        # It fails again (its retry budget travels with it) and is dead-lettered once more, not lost.
        assert _wait(lambda: len(dead()) == 1 and _idle(url), timeout=20)

        # Another agent's dead letter: --agent picks, --discard drops for good, each says when it died.
        other = json.dumps(dict(a.ctx.as_dict(), agent_id="other"))
        _py(url, f"""
import json
import dramatiq
from memindex.workers.broker import get_broker
get_broker().enqueue(dramatiq.Message(queue_name="sync", actor_name="index_files", kwargs={{}}, options={{}},
                                      args=(json.loads({other!r}), 1, [{{"not": "a job"}}])))
""")
        assert _wait(lambda: len(dead()) == 2 and _idle(url), timeout=20)
        env = {"MEMINDEX_BROKER_URL": url}
        mine = json.loads(run_cli("--agent", "Other", "dead-letters", "--json", env=env).stdout)
        assert [d["agent"] for d in mine] == ["other"] and mine[0]["died"] > 0
        assert "agent=other" in run_cli("--agent", "other", "dead-letters", env=env).stdout
        out = run_cli("--agent", "main", "dead-letters", "--replay", env=env)
        assert "replayed 1 message(s)" in out.stderr
        assert _wait(lambda: len(dead()) == 2 and _idle(url), timeout=20)
        out = run_cli("--agent", "other", "dead-letters", "--discard", env=env)
        assert "discarded 1 message(s)" in out.stderr
        assert [d["agent"] for d in dead()] == ["main"]
        assert "no dead letters for agent other" in run_cli("--agent", "other", "dead-letters", env=env).stdout


def test_sync_requested_flag_lives_in_redis_and_the_sync_clears_it(tmp_path, redis_server):
    import redis

    url = redis_server.url
    a = Agent(tmp_path / "a")
    a.write("memory/a.md", "starfruit\n")
    ctx = json.dumps(a.ctx.as_dict())
    out = _py(url, f"""
import json
from memindex.pipeline.config.settings import Context
from memindex.producers import hooks
ctx = Context.from_dict(json.loads({ctx!r}))
print(hooks.on_session_start(ctx, "s1"), hooks.on_session_start(ctx, "s2"))
""")
    assert out.split() == ["True", "False"]  # no worker yet: the first request is still queued
    client = redis.Redis.from_url(url)
    from memindex.workers.flags import FLAG_TTL_S, flag_key

    key = flag_key(a.settings().store_path)
    assert client.exists(key) and 0 < client.ttl(key) <= FLAG_TTL_S
    with _workers(url, tmp_path):
        assert _wait(lambda: a.search("starfruit")["results"], timeout=30)
        assert not client.exists(key)


def test_watch_started_over_queued_work_waits_for_it_before_its_catch_up_sync(tmp_path, redis_server):
    """A Procfile stopped mid-backfill and started again: the watcher's start-up sync re-planned
    every pending file while the old messages were still queued, so each was embedded and written
    twice (6,080 writes for 3,040 files, half the throughput). It now waits for the queues."""
    url = redis_server.url
    a = Agent(tmp_path / "a")
    _populate(a, 20)
    # Work queued before the start, with no worker yet (the old messages of a stopped Procfile).
    _py(url, "from memindex.pipeline.config.settings import Context\n"
             "from memindex.producers.enqueue import request_sync\n"
             f"request_sync(Context(config={str(a.config_path)!r}, state_dir={str(a.state)!r}, "
             f"workspace={str(a.workspace)!r}))\n")
    assert not _idle(url)
    watch = _spawn(url, tmp_path, "watch", *_args(a), "watch")
    try:
        log = tmp_path / "watch.log"
        assert _wait(lambda: "their files are not planned twice" in log.read_text(errors="replace"), timeout=30), \
            log.read_text(errors="replace")
        time.sleep(3)
        rep = json.loads(run_cli("queues", "--json", env={"MEMINDEX_BROKER_URL": url}).stdout)
        assert rep["queues"]["sync"]["ready"] == 1  # no second sync planned over the queued one
        with _workers(url, tmp_path):
            assert _wait(lambda: _indexed(a) == 20 and _idle(url), timeout=90)
            # then the catch-up sync ran once the queues drained, and found nothing left to do
            worker_log = tmp_path / "worker.log"

            def syncs() -> list[str]:
                return [ln for ln in worker_log.read_text(errors="replace").splitlines() if "sync main: generation" in ln]

            assert _wait(lambda: len(syncs()) == 2, timeout=60), syncs()
            assert "20 to index" in syncs()[0] and " 0 to index" in syncs()[1], syncs()
    finally:
        _kill(watch)
    assert watch.returncode == 0


def test_status_does_not_show_failures_from_before_the_plan_files_are_pending_in(tmp_path, redis_server):
    """A healthy rebuild listed `problem: 50 file(s) ... openai: server error (503: down)` and that
    `last error`: failures of an outage fixed before the plan, matched against every pending file."""
    from memindex.pipeline.index.failures import record_failure
    from memindex.pipeline.status import index_status

    url = redis_server.url
    a = Agent(tmp_path / "a")
    _populate(a, 6)
    a.index()  # in-process
    store = a.settings().store_path
    paths = [p for _, p, *_ in a.store_rows()]
    record_failure(store, reason="openai: server error (503: down)", provider="openai", hint="",
                   paths=paths)  # an old outage
    time.sleep(0.01)
    _populate(a, 6)  # rewritten: every file changed
    for p in (a.workspace / "memory").rglob("*.md"):
        p.write_text(p.read_text() + "more\n")
    writer = _spawn(url, tmp_path, "writer", "worker", "--writer")
    try:
        _py(url, "from memindex.pipeline.config.settings import Context\n"
                 "from memindex.workers.sync import run_sync\n"
                 f"run_sync(Context(config={str(a.config_path)!r}, state_dir={str(a.state)!r}, "
                 f"workspace={str(a.workspace)!r}))\n")  # planned; no file-side worker: they stay pending
        assert _wait(lambda: index_status(a.settings())["pending"] == 6, timeout=30)
        st = index_status(a.settings())
        assert not [p for p in st["problems"] if "503" in p["error"]], st["problems"]
        assert st["lastError"] is None, st["lastError"]
    finally:
        _kill(writer)
        import redis

        redis.Redis.from_url(url).flushall()


def test_a_plan_does_not_queue_again_what_another_plan_queued(tmp_path, redis_server):
    """`memindex index` or a backfill while the watcher's sync of the same files was in flight
    planned them again: every file read, embedded and written twice (240 writes for 120 files).
    A file another plan queued as it is now is skipped, and the writer keeps it pending; a file
    edited since is queued again; each file is written once (workers/leases.py)."""
    import re

    import redis

    from memindex.producers.dispatch import pending_files

    url = redis_server.url
    a = Agent(tmp_path / "a")
    _populate(a, 40)
    client = redis.Redis.from_url(url)
    writer = _spawn(url, tmp_path, "writer", "--log-level", "debug", "worker", "--writer")
    try:
        out = _cli(a, url, "backfill")  # the writer records the plan; the file groups wait (no worker)
        assert "enqueued 40 file(s)" in out.stdout, out.stdout
        groups = client.llen("memindex:sync")
        assert groups == 2  # 32 + 8
        assert _wait(lambda: pending_files(a.settings()) == 40, timeout=30)
        a.write("memory/2000/00003.md", "# day 3\nedited while queued\n")
        out = _cli(a, url, "backfill")
        assert "enqueued 1 file(s)" in out.stdout and "39 already queued by another sync" in out.stdout, out.stdout
        assert client.llen("memindex:sync") == groups + 1
        time.sleep(1.0)  # the second plan is recorded: the 39 stay pending beside the edited one
        assert pending_files(a.settings()) == 40
        with _workers(url, tmp_path):
            assert _wait(lambda: _idle(url) and pending_files(a.settings()) == 0, timeout=90)
            time.sleep(0.5)
    finally:
        _kill(writer)
    wrote = sum(int(n) for n in re.findall(r"wrote (\d+) file\(s\)", (tmp_path / "writer.log").read_text()))
    # 39 once each; the edited file twice: its first job, queued before the edit, read it after
    # (no worker ran until then) and the second plan's job read it again. Without leases: 79.
    assert wrote == 41, wrote

    def final(x: Agent) -> None:
        _populate(x, 40)
        x.write("memory/2000/00003.md", "# day 3\nedited while queued\n")

    assert a.store_rows() == _clean_build(tmp_path / "clean", final).store_rows()


def test_index_queues_again_what_another_plan_queued_but_never_wrote(tmp_path, redis_server):
    """A file skipped as queued by another plan whose message then died (here: dead-lettered by a
    worker serving another state dir) is not left pending: the failure releases its lease, and
    `memindex index` re-plans what is still pending once nothing is in flight."""
    from memindex.producers.dispatch import pending_files

    url = redis_server.url
    a = Agent(tmp_path / "a")
    _populate(a, 10)
    writer = _spawn(url, tmp_path, "writer", "worker", "--writer")
    try:
        _cli(a, url, "backfill")
        assert _wait(lambda: pending_files(a.settings()) == 10, timeout=30)
        # A compute worker of another deployment: it refuses (dead-letters) the queued groups.
        other = tmp_path / "other-state"
        other.mkdir()
        stray = _spawn(url, tmp_path, "stray", "--state-dir", str(other), "worker", "--queues", "sync", "embed")
        try:
            assert _wait(lambda: _idle(url), timeout=30)
        finally:
            _kill(stray)
        assert pending_files(a.settings()) == 10
        # The refusal released the files' leases: a plan made while other work runs (a watcher's
        # sync) queues them again instead of taking them for queued (helper-46).
        import redis

        client = redis.Redis.from_url(url)
        assert sum(client.hlen(k) for k in client.scan_iter(match="memindex:lease:*")) == 0
        with _workers(url, tmp_path):
            out = _cli(a, url, "index", timeout=90)
        assert "indexed 10 file(s)" in out.stdout, out.stdout
        assert pending_files(a.settings()) == 0 and _indexed(a) == 10
    finally:
        _kill(writer)


@pytest.mark.skipif(not GGUF.exists(), reason="the shared GGUF model is not present")
def test_a_search_never_waits_for_the_deployments_embedding_slot(agent, redis_server):
    """helper-68: a compute worker embedding with the local model holds the deployment's one `local`
    slot in Redis; a server's search waited for it up to the local query timeout (60 s: 15-20 s
    stalls seen in a soak), and every other search of that server waited behind it. A query
    embedding now takes a slot of its own process only."""
    agent.write("memory/a.md", "the heron nests by the quarry\n")
    agent.memory_config({"provider": "local", "local": {"modelPath": str(GGUF)}})
    agent.index()  # embedded: no Redis needed to build the index
    script = textwrap.dedent('''
        import os, sys, time
        import redis
        import memindex
        import memindex.workers.broker
        memindex.workers.broker.get_broker()  # a process on Redis: the deployment-wide limiter is installed
        from memindex.pipeline.embeddings.limiter import make_limiter
        from memindex.workers.limits import RedisConcurrencyLimiter

        assert isinstance(make_limiter(4), RedisConcurrencyLimiter)
        client = redis.Redis.from_url(os.environ["MEMINDEX_BROKER_URL"])
        now_ms = int(client.time()[0]) * 1000
        client.zadd("memindex:embed-slots:local", {"a-compute-worker": now_ms + 120_000})
        settings = memindex.load_settings(memindex.Context("main", workspace=os.environ["T_WS"]))
        with memindex.open_search(settings) as engine:
            started = time.monotonic()
            resp = engine.search("where does the heron nest")
            took = time.monotonic() - started
        print(resp.mode, round(took, 1), resp.results[0].path if resp.results else None)
    ''')
    env = {**agent.env(broker_url=redis_server.url), "T_WS": str(agent.workspace)}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    mode, took, path = r.stdout.split()
    assert mode == "hybrid" and path == "memory/a.md", r.stdout
    assert float(took) < 30, r.stdout  # the slot is held for 120 s; the local query timeout is 60 s


def test_the_reference_texts_land_through_redis_workers(tmp_path, redis_server):
    """The ranking's reference texts on the real broker: the sync's first index_files group sends
    them to a compute worker process, which embeds them and hands them to the writer process, which
    caches them; `index` returns once they are in (pipeline/search/reference.py)."""
    from memindex.pipeline.search.reference import REFERENCE_HASHES
    from memindex.pipeline.store.reader import open_reader

    if not GGUF.exists():
        pytest.skip("the local GGUF model is not in ../shared/models")
    url = redis_server.url
    a = Agent(tmp_path / "a")
    a.memory_config({"provider": "local", "fallback": "none", "local": {"modelPath": str(GGUF)}})
    a.write("memory/a.md", "# A\nThe boiler in the cellar bangs when the heating starts.\n")
    with _workers(url, tmp_path):
        _cli(a, url, "index", timeout=120)
    r = open_reader(a.settings())
    try:
        c = r.conn()
        assert c is not None
        rows = c.execute(f"SELECT dims, count(*) FROM embedding_cache WHERE hash IN "
                         f"({','.join('?' * len(REFERENCE_HASHES))}) GROUP BY dims", REFERENCE_HASHES).fetchall()
    finally:
        r.close()
    assert rows == [(384, len(REFERENCE_HASHES))], rows
    assert [x["path"] for x in a.search("radiator racket")["results"]][:1] == ["memory/a.md"]
