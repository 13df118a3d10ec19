"""Write-queue sharding through a real Redis (issue 18): 20 agents, 4 writer shards
(`memindex worker --writer --shard K/4`), converging to the embedded default's stores,
also after one writer is SIGKILLed mid-run and restarted; a writer started with the
wrong N refuses to consume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib

import pytest

from tests.conftest import REPO, Agent, run_cli
from tests.test_pipeline_redis import _args, _kill, _spawn, _wait

pytestmark = pytest.mark.redis

AGENTS, FILES, SHARDS = 20, 40, 4


def _populate(a: Agent) -> None:
    for i in range(FILES):
        a.write(f"memory/2026-01-{i:03d}.md", f"# {a.root.name} day {i}\nnote {i} about topic{i % 7} {a.root.name}\n")


def _sync_all(url: str, agents: list[Agent]) -> None:
    """Plan every agent's sync from one process (what the watcher does), routed to the shards."""
    ctxs = [[a.agent_id, str(a.config_path), str(a.state), str(a.workspace)] for a in agents]
    code = ("import json,sys\nfrom memindex.pipeline.config.settings import Context\n"
            "from memindex.workers.sync import run_sync\n"
            "for c in json.loads(sys.argv[1]): run_sync(Context(*c))\n")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(ctxs)], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, MEMINDEX_BROKER_URL=url, MEMINDEX_WRITE_SHARDS=str(SHARDS)),
                         timeout=120)
    assert out.returncode == 0, out.stderr


def _queues(url: str) -> dict:
    out = run_cli("queues", "--json", env={"MEMINDEX_BROKER_URL": url, "MEMINDEX_WRITE_SHARDS": str(SHARDS)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _idle(url: str) -> bool:
    return all(q["ready"] + q["delayed"] + q["running"] + q["prefetched"] == 0
               for q in _queues(url)["queues"].values())


def _writer(url: str, logdir, k: int, tag: str = "") -> subprocess.Popen:
    return _spawn(url, logdir, f"writer{k}{tag}", "worker", "--writer", "--shard", f"{k}/{SHARDS}")


def test_twenty_agents_four_writer_shards_converge_with_a_writer_killed(tmp_path, redis_server):
    url = redis_server.url
    os.environ["MEMINDEX_WRITE_SHARDS"] = str(SHARDS)  # _spawn copies os.environ into every process
    try:
        agents = [Agent(tmp_path / f"agent{i:02d}") for i in range(AGENTS)]
        for a in agents:
            _populate(a)
        shard_of = {a.root.name: zlib.crc32(str(a.settings().store_path).encode()) % SHARDS for a in agents}
        assert len(set(shard_of.values())) == SHARDS, "20 stores should spread over all 4 shards"
        victim = next(a for a in agents if shard_of[a.root.name] == 0)
        procs = {f"w{k}": _writer(url, tmp_path, k) for k in range(SHARDS)}
        procs["worker"] = _spawn(url, tmp_path, "worker", "worker", "--processes", "1", "--threads", "2")
        try:
            assert _wait(lambda: {w["kind"] for w in _queues(url)["workers"]} == {"writer", "worker"}, timeout=30)
            kinds = _queues(url)["workers"]
            assert sorted(q for w in kinds if w["kind"] == "writer" for q in w["queues"]) == \
                [f"write.{k}" for k in range(SHARDS)]
            _sync_all(url, agents)
            # SIGKILL shard 0's writer once its first store has rows: mid-run, nothing acked or requeued.
            assert _wait(lambda: victim.store_rows() != [], timeout=60)
            _kill(procs["w0"], signal.SIGKILL)
            assert set(_queues(url)["queues"]) >= {f"write.{k}" for k in range(SHARDS)}
            procs["w0"] = _writer(url, tmp_path, 0, "-restarted")
            # The dead writer's unacked messages come back after dramatiq's heartbeat timeout;
            # a later sync re-plans whatever is still missing. Either way the stores converge.
            assert _wait(lambda: _idle(url), timeout=90)
            _sync_all(url, agents)
            assert _wait(lambda: _idle(url) and all(len(a.store_rows()) == FILES for a in agents), timeout=90)
        finally:
            for p in procs.values():
                _kill(p)
    finally:
        os.environ.pop("MEMINDEX_WRITE_SHARDS", None)
    for a in agents:
        clean = Agent(tmp_path / "clean" / a.root.name)
        _populate(clean)
        clean.index()  # the embedded default: one in-process writer, no shards
        assert a.store_rows() == clean.store_rows(), a.root.name


def test_a_writer_refuses_a_wrong_shard_count_or_a_live_writers_queue(tmp_path, redis_server):
    url = redis_server.url
    env = {"MEMINDEX_BROKER_URL": url}
    first = _spawn(url, tmp_path, "w0of2", "worker", "--writer", "--shard", "0/2")
    try:
        assert _wait(lambda: any(w["kind"] == "writer" for w in _queues(url)["workers"]), timeout=30)
        wrong = run_cli("worker", "--writer", "--shard", "1/3", env=env, timeout=30)
        assert wrong.returncode == 2
        assert "run 2 shard(s)" in wrong.stderr and "refusing to consume" in wrong.stderr
        plain = run_cli("worker", "--writer", env=env, timeout=30)  # N = 1 is a wrong N too
        assert plain.returncode == 2 and "refusing" in plain.stderr
        # The right N, but the queue of a live writer: it started silently beside the first (only
        # `health` saw two writers). A writer restarted after a kill is not refused by its own
        # last heartbeat.
        second = run_cli("worker", "--writer", "--shard", "0/2", env=env, timeout=60)
        assert second.returncode == 2 and "queue write.0 already has a writer (pid " in second.stderr, second.stderr
        _kill(first, signal.SIGKILL)  # its heartbeat stays behind for a few seconds
        first = _spawn(url, tmp_path, "w0-again", "worker", "--writer", "--shard", "0/2")
        time.sleep(8)  # past its check of the old heartbeat
        assert first.poll() is None  # consuming, not refused
        assert any("write.0" in w["queues"] for w in _queues(url)["workers"] if w["kind"] == "writer")
    finally:
        _kill(first)
    bad = run_cli("worker", "--shard", "0/2", env=env)
    assert bad.returncode == 2 and "--shard K/N goes with --writer" in bad.stderr
    assert run_cli("worker", "--writer", "--shard", "2/2", env=env).returncode == 2


def test_a_process_with_another_shard_count_is_refused_or_follows_the_writers(tmp_path, redis_server):
    """A compute host with an old .env (MEMINDEX_WRITE_SHARDS=4 beside writers of 2) routed writes
    to write.2 / write.3, which no writer consumes, while `index` said "indexed 3 file(s)", `queues`
    showed every queue empty and `health` said healthy. Now a worker with another N refuses to
    start, any other process routes by the N the writers recorded (and warns), and messages left in
    a shard outside N are counted and named."""
    import redis as redis_lib

    url = redis_server.url
    a = Agent(tmp_path / "agent")
    for i in range(3):
        a.write(f"memory/2026-03-0{i + 1}.md", f"# Day {i}\nthe wombat{i} burrow is mapped\n")
    os.environ["MEMINDEX_WRITE_SHARDS"] = "2"  # _spawn copies os.environ into every process
    try:
        procs = [_spawn(url, tmp_path, f"w{k}", "worker", "--writer", "--shard", f"{k}/2") for k in (0, 1)]
        procs.append(_spawn(url, tmp_path, "worker", "worker", "--processes", "1", "--threads", "2"))
    finally:
        os.environ.pop("MEMINDEX_WRITE_SHARDS", None)
    env4 = {"MEMINDEX_BROKER_URL": url, "MEMINDEX_WRITE_SHARDS": "4"}
    try:
        assert _wait(lambda: sorted(w["kind"] for w in _queues(url)["workers"]) == ["worker", "writer", "writer"],
                     timeout=60)
        compute = run_cli("worker", "--queues", "embed", env=env4, timeout=60)
        assert compute.returncode == 2, compute.stderr
        assert "writers run 2 write shard(s) but MEMINDEX_WRITE_SHARDS=4 here; refusing to start" in compute.stderr
        out = run_cli(*_args(a), "index", env=env4, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "MEMINDEX_WRITE_SHARDS=4 here, but this deployment's writers run 2" in out.stderr, out.stderr
        assert len(a.store_rows()) == 3  # indexed for real: routed to the writers' shards
        client = redis_lib.Redis.from_url(url)
        # What such a process left behind before this fix: a message in a shard no writer reads.
        client.hset("memindex:write.3.msgs", "m1", b"{}")
        client.rpush("memindex:write.3", "m1")
        health = run_cli("health", env={"MEMINDEX_BROKER_URL": url}, timeout=60)
        assert health.returncode == 1 and "write.3" in health.stdout + health.stderr, health.stdout + health.stderr
        assert _queues(url)["queues"]["write.3"]["ready"] == 1
    finally:
        for p in procs:
            _kill(p)


def test_two_writers_started_at_the_same_instant_one_is_refused(tmp_path, redis_server):
    """Neither beat yet when both checked for a live writer, so both ran (only `health` saw two
    writers of one shard taking turns on each store). Now the start itself is claimed in Redis."""
    url = redis_server.url
    procs = [_spawn(url, tmp_path, f"same{i}", "worker", "--writer") for i in range(2)]
    try:
        assert _wait(lambda: any(p.poll() is not None for p in procs), timeout=60)
        time.sleep(3)  # the other one is consuming, not refused a little later
        codes = sorted(p.poll() for p in procs if p.poll() is not None)
        assert codes == [2], codes
        refused = next(i for i, p in enumerate(procs) if p.poll() is not None)
        log = (tmp_path / f"same{refused}.log").read_text()
        assert "queue write already has a writer (pid " in log, log
        assert _wait(lambda: any(w["kind"] == "writer" for w in _queues(url)["workers"]), timeout=30)
    finally:
        for p in procs:
            _kill(p)


def test_the_shard_count_survives_redis_losing_it(tmp_path, redis_server):
    """Redis restarted without its data lost `memindex:write-shards`: it was recorded only when a
    writer started, and a process routing by it sent writes to `write`, which no writer reads."""
    import redis as redis_lib

    url = redis_server.url
    client = redis_lib.Redis.from_url(url)
    w = _spawn(url, tmp_path, "w0of2", "worker", "--writer", "--shard", "0/2")
    try:
        assert _wait(lambda: client.get("memindex:write-shards") == b"2", timeout=30)
        client.delete("memindex:write-shards")  # what FLUSHALL / a restart without persistence does
        assert _wait(lambda: client.get("memindex:write-shards") == b"2", timeout=30)  # a heartbeat put it back
    finally:
        _kill(w)
    # A process without MEMINDEX_WRITE_SHARDS keeps the N it read while the key is missing.
    code = ("import redis, sys\nfrom memindex.workers import broker as b\nb.get_broker()\n"
            "c = redis.Redis.from_url(sys.argv[1]); c.set(b.SHARDS_KEY, 2)\n"
            "first = b.write_shards(); c.delete(b.SHARDS_KEY); b._shards_seen[0] = 0.0\n"
            "print(first, b.write_shards())\n")
    env = {k: v for k, v in os.environ.items() if k != "MEMINDEX_WRITE_SHARDS"}
    out = subprocess.run([sys.executable, "-c", code, url], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env=dict(env, MEMINDEX_BROKER_URL=url))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "2"], out.stdout


def test_a_writer_and_the_watcher_started_before_redis_wait_for_it(agent, tmp_path, redis_server):
    """The Procfile starts every process at once: the writers and `watch` exited on a Redis not
    up yet ("cannot reach the broker"), and honcho took the whole deployment down with them."""
    from tests.conftest import RedisServer, free_port

    agent.write_config({"agents": {"defaults": {"workspace": str(agent.workspace)}}})
    agent.write("memory/a.md", "the heron flies over the quarry\n")
    late = RedisServer(free_port())
    env = dict(agent.env(late.url))
    env.pop("MEMINDEX_WRITE_SHARDS", None)
    procs = [subprocess.Popen([sys.executable, "-m", "memindex", *argv], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
             for argv in (["worker", "--writer"], ["watch"])]
    try:
        time.sleep(4)
        assert [p.poll() for p in procs] == [None, None]  # still there, waiting
        late.start()
        assert _wait(lambda: {w["kind"] for w in _queues(late.url)["workers"]} >= {"writer"}, timeout=60)
    finally:
        for p in procs:
            _kill(p)
        late.stop()
    for p in procs:
        err = p.stderr.read()
        assert "does not answer" in err and "waiting for it" in err and "redis answers after" in err, err
        assert "cannot reach the broker" not in err and "Traceback" not in err, err
