"""``memindex health`` beyond SIGSTOP (issue 15): a worker whose queue has messages ready
but which has started or finished none for the stall period is unhealthy (here: its one
thread hangs in a slow provider request), and healthy again once it consumes; on the
embedded broker ``health`` has nothing to check and says so (exit 2, not "healthy").

Real parts: redis-server, ``memindex worker`` subprocesses, the OpenAI SDK against
tests/provider_server.py.
"""

from __future__ import annotations

import subprocess
import time
import sys

import pytest

from tests.conftest import REPO, Agent, module_server, run_cli, kill_groups, wait_for
from tests.provider_server import ProviderServer


server = module_server(ProviderServer)


def test_health_on_the_embedded_broker_is_not_a_verdict(tmp_path):
    a = Agent(tmp_path / "a")
    env = {"OPENCLAW_STATE_DIR": str(a.state), "OPENCLAW_CONFIG_PATH": str(a.config_path)}
    out = run_cli("health", env=env)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "MEMINDEX_BROKER_URL" in out.stderr and "healthy" not in out.stdout, out.stderr


@pytest.mark.redis
def test_health_fails_when_the_queue_does_not_move_while_non_empty(tmp_path, redis_server, server):
    a = Agent(tmp_path / "a")
    a.use_openai_at(server.base("openai"))
    for i in range(100):  # four embed messages: one running, one prefetched, the rest ready in Redis
        a.write(f"memory/n-{i}.md", f"# Note {i}\nThe Omada router VLAN {i} serves device {i}.\n")
    server.reset()
    server.always("openai", {"kind": "delay", "seconds": 6.0})  # the one thread hangs this long per request
    env = a.env(redis_server.url)
    procs = [subprocess.Popen([sys.executable, "-m", "memindex", *args], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
             for args in (("worker", "--writer"), ("worker", "--queues", "sync", "--processes", "1", "--threads", "1"),
                          ("worker", "--queues", "embed", "--processes", "1", "--threads", "1"))]

    def health() -> subprocess.CompletedProcess:
        return run_cli("health", "--stall-seconds", "3", env=env)

    try:
        assert wait_for(lambda: health().returncode == 0, 60, step=0.5)
        assert run_cli("backfill", "--all", env=env).returncode == 0
        # Heartbeats keep coming (the process is alive), but the queue does not move.
        seen: list[subprocess.CompletedProcess] = []

        def stalled() -> bool:
            seen.append(health())
            return "ready but none started or finished" in seen[-1].stderr

        assert wait_for(stalled, 60, step=0.5), seen[-1].stdout
        assert seen[-1].returncode == 1 and "unhealthy" in seen[-1].stderr, seen[-1].stderr
        server.always("openai", None)  # the provider answers again: the worker consumes
        assert wait_for(lambda: run_cli("queues", "--json", env=env).stdout.count('"pending": 0') == 1, 120,
                         step=1.0)
        assert wait_for(lambda: health().returncode == 0, 30, step=0.5), health().stderr
    finally:
        kill_groups(procs)


@pytest.mark.redis
def test_health_fails_while_a_queue_with_work_has_no_live_consumer(tmp_path, redis_server):
    """A writer killed outright is forgotten once its heartbeat record expires; its queue's
    waiting work still makes the deployment unhealthy, naming the queue, until a writer runs."""
    a = Agent(tmp_path / "a")
    a.write_config({"agents": {"defaults": {"workspace": str(a.workspace)}}})
    for i in range(5):
        a.write(f"memory/n-{i}.md", f"# Note {i}\nThe kumquat ledger {i}.\n")
    env = a.env(redis_server.url)
    procs = [subprocess.Popen([sys.executable, "-m", "memindex", "worker", "--queues", "sync", "--processes", "1",
                               "--threads", "1"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)]  # no writer at all
    try:
        assert wait_for(lambda: run_cli("health", env=env).returncode == 0, 60, step=0.5)
        assert run_cli("backfill", "--all", env=env).returncode == 0  # sync plans; its writes wait

        def down() -> bool:
            out = run_cli("health", env=env)
            return out.returncode == 1 and "queue write" in out.stderr and "no live memindex process" in out.stderr

        assert wait_for(down, 60, step=0.5), run_cli("health", env=env).stderr
        procs.append(subprocess.Popen([sys.executable, "-m", "memindex", "worker", "--writer"], cwd=REPO, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        assert wait_for(lambda: run_cli("health", env=env).returncode == 0, 60, step=0.5), \
            run_cli("health", env=env).stderr
    finally:
        kill_groups(procs)


@pytest.mark.redis
def test_health_fails_while_two_writers_consume_one_write_queue(tmp_path, redis_server):
    a = Agent(tmp_path / "a")
    env = a.env(redis_server.url)
    procs = [subprocess.Popen([sys.executable, "-m", "memindex", "worker", "--writer"], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)]
    try:
        assert wait_for(lambda: run_cli("health", env=env).returncode == 0, 60, step=0.5)
        # `memindex worker --writer` refuses a second writer of a live one's queue (test_scale_shards);
        # dramatiq started by hand does not ask, and health still says so.
        procs.append(subprocess.Popen([sys.executable, "-m", "dramatiq", "memindex.workers.actors:get_broker", "--processes",
                                       "1", "--threads", "1", "--queues", "write"], cwd=REPO, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))

        def two() -> bool:
            out = run_cli("health", env=env)
            return out.returncode == 1 and "queue write: 2 writers" in out.stderr and "only one may write" in out.stderr

        assert wait_for(two, 60, step=0.5), run_cli("health", env=env).stderr
        kill_groups(procs[1:])
        assert wait_for(lambda: run_cli("health", env=env).returncode == 0, 60, step=0.5), \
            run_cli("health", env=env).stderr
    finally:
        kill_groups(procs)


def test_a_message_that_ended_while_redis_was_down_stops_counting_as_running(redis_server):
    """Its HDEL failed and was dropped: `queues` and `health` showed it running for the life of
    the process. The next heartbeat that gets through clears it."""
    import redis

    from memindex.workers.lifecycle import Heartbeat, processes
    from tests.conftest import free_port

    client = redis.Redis.from_url(redis_server.url)
    hb = Heartbeat(client, "memindex-t", "worker", ["embed"])
    hb.beat()
    hb.began("m1", "embed")
    hb.began("m2", "embed")
    assert processes(client, "memindex-t")[0]["running"] == ["embed", "embed"]
    hb.client = redis.Redis(port=free_port(), socket_connect_timeout=0.2)  # Redis unreachable meanwhile
    hb.ended("m1")
    hb.client = client
    hb.ended("m2")
    assert processes(client, "memindex-t")[0]["running"] == ["embed"]  # m1 still counted
    hb.beat()
    assert processes(client, "memindex-t")[0]["running"] == []
    hb.stop()


@pytest.mark.redis
def test_a_redis_out_of_memory_is_said_as_such(tmp_path, redis_server):
    """helper-60: Redis at maxmemory (noeviction) answers and refuses every write. `index` said "cannot
    reach the broker ... start Redis", `health` "no memindex process has a live heartbeat (none
    running ...)", and the workers' lines "(redis unreachable: ...)"."""
    import redis

    a = Agent(tmp_path / "a")
    a.write_config({"agents": {"defaults": {"workspace": str(a.workspace)}}})
    a.write("memory/n.md", "# Note\nThe kumquat ledger.\n")
    env = a.env(redis_server.url)
    client = redis.Redis.from_url(redis_server.url)
    client.set("ballast", b"x" * (2 << 20))
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1 << 20)  # below the ballast: every write is refused
    for cmd in ("index", "health"):
        out = run_cli(cmd, env=env)
        assert out.returncode == 1 and "Traceback" not in out.stderr, (cmd, out.stderr)
        assert "is out of memory (Redis's maxmemory reached, no eviction)" in out.stderr, (cmd, out.stderr)
        assert "start Redis" not in out.stderr and "none running" not in out.stderr, (cmd, out.stderr)


def test_an_oom_line_is_held_back_as_an_outage_and_named(caplog):
    """The workers' outage filter took only connection errors: an OOM logged a CRITICAL traceback per
    consumer fetch and ack, and its one line said "redis unreachable"."""
    import logging

    from redis.exceptions import OutOfMemoryError

    from memindex.workers import logs

    handler = logging.Handler()
    seen: list[logging.LogRecord] = []
    handler.emit = seen.append  # type: ignore[method-assign]
    handler.addFilter(logs._RedisOutage())
    log = logging.getLogger("dramatiq.worker.ConsumerThread(embed)")
    log.addHandler(handler)
    try:
        for _ in range(5):
            try:
                raise OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'.")
            except OutOfMemoryError:
                log.critical("Consumer encountered an unexpected error.", exc_info=True)
        assert len(seen) == 1 and seen[0].levelno == logging.WARNING and seen[0].exc_info is None
        assert "redis out of memory (maxmemory reached" in seen[0].getMessage()
    finally:
        log.removeHandler(handler)
        logs.redis_answered()


@pytest.mark.redis
def test_a_stopped_worker_is_unhealthy_after_its_heartbeat_record_expired(tmp_path, redis_server):
    """helper-60: `kill -STOP` on a worker, then `health` past the record's TTL said "healthy" (exit 0)
    without listing it: the record had expired and the paused process was forgotten."""
    import os
    import signal

    a = Agent(tmp_path / "a")
    a.write_config({"agents": {"defaults": {"workspace": str(a.workspace)}}})
    env = {**a.env(redis_server.url), "MEMINDEX_PROC_TTL_S": "1", "MEMINDEX_HEARTBEAT_S": "0.2"}
    procs = [subprocess.Popen([sys.executable, "-m", "memindex", "worker", *args], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
             for args in (["--queues", "sync", "embed", "--processes", "1", "--threads", "1"], ["--writer"])]
    try:
        assert wait_for(lambda: run_cli("health", env=env).returncode == 0, 60, step=0.5), \
            run_cli("health", env=env).stderr
        os.killpg(procs[0].pid, signal.SIGSTOP)
        try:
            def stopped() -> bool:
                out = run_cli("health", env=env)
                return out.returncode == 1 and "stopped (SIGSTOP" in out.stderr

            time.sleep(3)  # past the record's TTL: the paused worker has no record any more
            assert wait_for(stopped, 30, step=0.5), run_cli("health", env=env)
        finally:
            os.killpg(procs[0].pid, signal.SIGCONT)
        assert wait_for(lambda: run_cli("health", env=env).returncode == 0, 60, step=0.5), \
            run_cli("health", env=env).stderr
    finally:
        kill_groups(procs)
