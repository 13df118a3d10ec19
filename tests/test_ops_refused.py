"""A message a worker refuses (it serves another config or state dir than the message names) is
dead-lettered with the reason, counted where an operator looks, and named by `backfill --wait`.

Real parts: redis-server, `memindex worker` processes (file side and writer on the agent's config,
a compute worker whose copy of the config is mounted at another path), the openai SDK against the
local provider server, and the CLI as a subprocess.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest

from tests.conftest import Agent, free_port, module_server, run_cli, wait_for
from tests.provider_server import ProviderServer
from tests.test_operations_run import _scrape
from tests.test_pipeline_redis import _kill, _spawn

server = module_server(ProviderServer)


@pytest.mark.redis
def test_a_refused_message_is_dead_lettered_counted_and_named(tmp_path, redis_server, fresh_server):
    url = redis_server.url
    a = Agent(tmp_path / "a")
    a.use_openai_at(fresh_server.base("openai"))
    for i in range(3):
        a.write(f"memory/2026-03-0{i + 1}.md", f"# day {i}\n\nthe quince note number {i}\n")
    mounted = tmp_path / "mnt" / "openclaw.json"  # the same file, seen at another path by the compute host
    mounted.parent.mkdir()
    shutil.copy(a.config_path, mounted)
    env = a.env(url)
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = [_spawn(url, logs, "worker", "--state-dir", str(a.state), "--config", str(a.config_path),
                    "worker", "--queues", "sync", "--processes", "1", "--threads", "2"),
             _spawn(url, logs, "writer", "--state-dir", str(a.state), "--config", str(a.config_path),
                    "worker", "--writer"),
             _spawn(url, logs, "compute", "--state-dir", str(a.state), "--config", str(mounted),
                    "worker", "--queues", "embed", "--processes", "1", "--threads", "2")]
    try:
        started = time.monotonic()
        back = run_cli("backfill", "--wait", "--timeout", "120", env=env, timeout=180)
        took = time.monotonic() - started
        compute_log = (logs / "compute.log").read_text()
        # backfill --wait names it (not "no progress for 30 s" and then a timeout), and exits 1
        assert back.returncode == 1, back.stdout + back.stderr
        assert "refused by a worker and dead-lettered" in back.stderr, back.stderr
        assert "this worker serves" in back.stderr and str(mounted) in back.stderr, back.stderr
        assert "timed out" not in back.stdout and took < 60, (took, back.stdout)
        # the worker dead-lettered it with the reason, and said so (not "was skipped")
        assert "dead-lettered" in compute_log and "was skipped" not in compute_log, compute_log
        dead = json.loads(run_cli("dead-letters", "--json", env=env).stdout)
        assert [d["refused"] for d in dead] == [True] * len(dead) and dead, dead
        assert all("this worker serves" in d["error"] for d in dead), dead
        # counted in `queues`, `status` and the metrics
        q = json.loads(run_cli("queues", "--json", env=env).stdout)
        assert q["queues"]["embed"]["dead"] == len(dead), q
        st = json.loads(run_cli("status", "--json", env=env).stdout)[0]["status"]
        assert st["deadLetters"]["messages"] == len(dead) and st["deadLetters"]["refused"] == len(dead), st
        assert st["deadLetters"]["files"] == 3 and "this worker serves" in st["deadLetters"]["newestError"], st
        text = run_cli("status", env=env).stdout
        assert f"Dead letters: {len(dead)} message(s) (3 file(s), {len(dead)} refused by a worker)" in text, text
        port = free_port()
        watch = _spawn(url, logs, "watch", "--state-dir", str(a.state), "--config", str(a.config_path),
                       "watch", "--no-initial-sync", "--metrics-port", str(port))
        procs.append(watch)
        key, series = ("memindex_queue_messages", (("queue", "embed"), ("state", "dead"))), {}
        assert wait_for(lambda: series.update(_scrape(port)) or key in series, 30), \
            (logs / "watch.log").read_text()
        assert series[key] == len(dead), series
        # replayed to a worker that serves the sender's paths, they are written
        _kill(procs.pop(2))
        procs.append(_spawn(url, logs, "compute2", "--state-dir", str(a.state), "--config", str(a.config_path),
                            "worker", "--queues", "embed", "--processes", "1", "--threads", "2"))
        assert run_cli("dead-letters", "--replay", env=env).returncode == 0
        assert wait_for(lambda: json.loads(run_cli("queues", "--json", env=env).stdout)["agents"]["main"]["pending"] == 0,
                        60), (logs / "compute2.log").read_text()
        assert json.loads(run_cli("status", "--json", env=env).stdout)[0]["status"]["deadLetters"]["messages"] == 0
    finally:
        for p in procs:
            _kill(p)

