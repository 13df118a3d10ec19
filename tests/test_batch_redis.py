"""Batch jobs across real ``dramatiq memindex.workers.actors`` processes on a real Redis:
a worker killed mid-poll is resumed (same job, not resubmitted), and the
in-flight limit per provider holds across four worker processes."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.batch_server import BatchServer, Plan
from tests.conftest import Agent, module_server, run_cli, start_workers
from memindex.pipeline.search.reference import REFERENCE_TEXTS

pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("fresh_server")]

FAST = {"MEMINDEX_BATCH_LEASE_S": "2", "MEMINDEX_BATCH_JANITOR_S": "0.3"}


server = module_server(BatchServer)


def _stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(20)
        except Exception:  # noqa: BLE001
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _agent(root, server, n_files, **batch):
    a = Agent(root)
    for i in range(n_files):
        a.write(f"memory/note-{i}.md", f"# Note {i}\n{root.name} fact {i}: the relay in rack {i} is blue.\n")
    b = {"enabled": True, "pollIntervalMs": 100, **batch}
    a.memory_config({"provider": "openai",
                     "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-redis-batch", "batch": b}})
    return a


def _cli(a, redis, *args):
    return run_cli("--config", str(a.config_path), "--state-dir", str(a.state), "--workspace", str(a.workspace),
                   *args, env={"MEMINDEX_BROKER_URL": redis.url})


def _searchable(a, n_chunks):
    from memindex.producers.dispatch import pending_files
    from memindex.pipeline.store.reader import open_reader

    r = open_reader(a.settings())
    try:
        gen = r.state().live_generation
        if gen is None:
            return False
        rows = r.conn().execute(f"SELECT embedding FROM chunks_g{gen}").fetchall()
    finally:
        r.close()
    return len(rows) == n_chunks and all(e is not None for (e,) in rows) and pending_files(a.settings()) == 0


def _wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _sync_requests(server):
    """Direct embedding requests, but the search's reference texts' (search/reference.py: never batched)."""
    return [r for r in server.log_for("openai") if r.path.endswith("/embeddings")
            and (r.body or {}).get("input") != list(REFERENCE_TEXTS)]


def test_worker_killed_mid_poll_is_resumed_not_resubmitted(tmp_path, redis_server, server):
    a = _agent(tmp_path / "killed", server, 6, wait=False)
    server.plan("openai", Plan(hold=True))
    writer = start_workers(redis_server.url, queues=("write",), threads=1)
    worker = start_workers(redis_server.url, extra_env=FAST)
    replacement = None
    try:
        out = _cli(a, redis_server, "backfill", "--batch")  # wait false: returns once enqueued
        assert out.returncode == 0, out.stderr
        assert "memindex batches" in out.stdout
        _wait(lambda: len(server.created("openai")) == 1 and server.created("openai")[0].polls >= 2, 30,
              "the batch to be created and polled")
        os.killpg(worker.pid, signal.SIGKILL)  # mid-poll: its next poll is a delayed message it held
        worker.wait(10)
        polls = server.created("openai")[0].polls
        time.sleep(0.5)
        assert server.created("openai")[0].polls == polls  # nobody polls now

        report = _cli(a, redis_server, "batches", "--json")
        assert report.returncode == 0, report.stderr
        [job] = json.loads(report.stdout)[0]["jobs"]
        assert job["phase"] == "polling" and job["state"] == "running"

        replacement = start_workers(redis_server.url, extra_env=FAST)
        _wait(lambda: server.created("openai")[0].polls > polls, 30, "the restarted worker to resume polling")
        server.release()
        _wait(lambda: _searchable(a, 6), 30, "the batch results to be written")
    finally:
        for p in (worker, replacement, writer):
            if p is not None:
                _stop(p)
    assert server.count_events("openai", "create") == 1 and server.count_events("openai", "upload") == 1
    assert _sync_requests(server) == []  # collected from the same job, nothing redone synchronously
    report = json.loads(_cli(a, redis_server, "batches", "--json").stdout)[0]
    assert [(j["remote_id"], j["outcome"], j["completed"]) for j in report["jobs"]] == [
        (server.created("openai")[0].id, "collected", 6)]


def test_in_flight_limit_holds_across_four_workers(tmp_path, redis_server, server):
    server.set_default("openai", Plan(run_s=2.0))
    agents = [_agent(tmp_path / f"agent{i}", server, 3, concurrency=2) for i in range(4)]
    writer = start_workers(redis_server.url, queues=("write",), threads=1)
    workers = [start_workers(redis_server.url, threads=2, extra_env=FAST) for _ in range(4)]
    try:
        with ThreadPoolExecutor(4) as pool:  # four backfills at once, contending for two slots
            for out in pool.map(lambda a: _cli(a, redis_server, "backfill"), agents):
                assert out.returncode == 0, out.stderr
        _wait(lambda: all(_searchable(a, 3) for a in agents), 50, "every agent to be indexed")
    finally:
        for p in (*workers, writer):
            _stop(p)
    created = server.created("openai")
    assert len(created) >= 4  # one job per agent at least, so the limit was contended
    assert server.max_concurrent("openai") == 2  # used, and never exceeded
    assert _sync_requests(server) == []


def test_the_batch_janitor_outlives_a_redis_outage(tmp_path, redis_server):
    """A Redis restart killed the janitor thread for good (its sweep raised out of the loop), so
    orphaned batch jobs were never resumed until the batch worker was restarted."""
    import subprocess
    import sys

    code = (
        "import sys, time, threading\n"
        "from memindex.workers.batch import actors\n"
        "j = actors._Janitor()\n"
        "j._thread = threading.Thread(target=j._run, daemon=True); j._thread.start()\n"
        "print('started', flush=True)\n"
        "sys.stdin.readline()\n"  # the test stops and restarts Redis meanwhile
        "time.sleep(1.0)\n"
        "print('alive' if j._thread.is_alive() else 'dead', flush=True)\n"
    )
    env = dict(os.environ, MEMINDEX_BROKER_URL=redis_server.url, MEMINDEX_BATCH_JANITOR_S="0.1")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        assert proc.stdout.readline().strip() == "started"
        time.sleep(0.5)  # a few sweeps against a live Redis
        redis_server.stop()
        time.sleep(1.0)  # sweeps against no Redis at all
        redis_server.start()
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "alive", proc.stderr.read()
    finally:
        proc.kill()
        proc.wait(10)
    assert "sweep failed" in proc.stderr.read()
