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
import zlib

import pytest

from tests.conftest import REPO, Agent, run_cli
from tests.test_pipeline_redis import _kill, _spawn, _wait

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


def test_writer_with_the_wrong_shard_count_refuses(tmp_path, redis_server):
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
    finally:
        _kill(first)
    bad = run_cli("worker", "--shard", "0/2", env=env)
    assert bad.returncode == 2 and "--shard K/N goes with --writer" in bad.stderr
    assert run_cli("worker", "--writer", "--shard", "2/2", env=env).returncode == 2
