"""Search metrics of a serving process (issue 15): ``memindex serve`` counts the searches it
answered and their latency, per agent, at ``GET /metrics``; the test checks the values
against the searches it made. Real parts: the ``memindex serve`` subprocess, httpx.
"""

from __future__ import annotations

import time

import httpx
import pytest

pytest.importorskip("uvicorn", reason="the serve extra is not installed")

from tests.conftest import Agent  # noqa: E402
from tests.test_serve import serve  # noqa: E402


def _samples(url: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    r = httpx.get(f"{url}/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def test_serve_counts_searches_and_their_latency(tmp_path):
    a = Agent(tmp_path / "a")
    a.write("memory/2026-02-10.md", "Configured VLAN 10 for IoT devices.\n")
    a.index()
    proc, url = serve(a, tmp_path)
    try:
        before = _samples(url)
        assert ("memindex_searches_total", (("agent", "main"), ("outcome", "ok"), ("transport", "http"))) not in before
        wall = 0.0
        for q in ("VLAN", "IoT devices", "nothing matches this"):
            t = time.perf_counter()
            assert httpx.post(f"{url}/v1/search", json={"query": q}, timeout=30).status_code == 200
            wall += time.perf_counter() - t
        assert httpx.post(f"{url}/v1/search", json={"query": 7}, timeout=30).status_code == 400  # not a search
        after = _samples(url)
        assert after[("memindex_searches_total", (("agent", "main"), ("outcome", "ok"), ("transport", "http")))] == 3
        assert after[("memindex_search_seconds_count", (("agent", "main"), ("transport", "http")))] == 3
        assert 0 < after[("memindex_search_seconds_sum", (("agent", "main"), ("transport", "http")))] <= wall  # inside the requests
    finally:
        proc.terminate()
        proc.wait(30)


def test_watch_serves_batch_jobs_by_state(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO, free_port
    from tests.test_operations_run import _scrape
    from tests.conftest import wait_for
    from memindex.workers.batch import state as bs

    a = Agent(tmp_path / "a")
    a.write("memory/2026-02-10.md", "Configured VLAN 10 for IoT devices.\n")
    # The batch state as the batch actors leave it: two jobs polling, one completed, one failed.
    with bs.open_state(a.settings().store_path) as st:
        for i, (phase, state) in enumerate([(bs.POLLING, "in_progress"), (bs.POLLING, "in_progress"),
                                            (bs.COLLECTED, "completed"), (bs.COLLECTED, "failed")]):
            st.create_job(key=f"job-{i}", agent="main", provider="openai", model="text-embedding-3-small",
                          provider_key="openai:text-embedding-3-small", phase=phase, state=state)
    port = free_port()
    env = dict(os.environ, OPENCLAW_STATE_DIR=str(a.state), OPENCLAW_CONFIG_PATH=str(a.config_path))
    env.pop("MEMINDEX_BROKER_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "memindex", "--workspace", str(a.workspace), "watch",
                             "--metrics-port", str(port)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        key = ("memindex_batch_jobs", (("agent", "main"), ("state", "in_progress")))
        assert wait_for(lambda: key in _scrape(port), 60, step=0.5)
        got = {k[1][1][1]: v for k, v in _scrape(port).items() if k[0] == "memindex_batch_jobs"}
        assert got == {"in_progress": 2, "completed": 1, "failed": 1}, got
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(30)


def test_mcp_serves_its_metrics_on_a_port_of_its_own(tmp_path):
    """stdio MCP has no HTTP to share: ``--metrics-port`` scrapes the searches it answered and the
    files pending per agent it serves."""
    import asyncio
    import sys

    pytest.importorskip("mcp", reason="the serve extra (mcp SDK) is not installed")
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from tests.conftest import free_port
    from tests.test_mcp import cli_args

    a = Agent(tmp_path / "a")
    a.write("memory/2026-02-10.md", "Configured VLAN 10 for IoT devices.\n")
    a.index()
    port = free_port()
    params = StdioServerParameters(command=sys.executable,
                                   args=[*cli_args(a), "mcp", "--metrics-port", str(port)], cwd=str(tmp_path))
    url = f"http://127.0.0.1:{port}"

    async def main() -> dict[tuple[str, tuple], float]:
        async with Client(params) as client:
            for q in ("VLAN", "IoT devices"):
                assert not (await client.call_tool("memory_search", {"query": q})).is_error
            assert (await client.call_tool("memory_search", {"query": "x", "agent": "nobody"})).is_error
            return await asyncio.to_thread(_samples, url)

    got = asyncio.run(main())
    assert got[("memindex_searches_total", (("agent", "main"), ("outcome", "ok"), ("transport", "mcp")))] == 2
    assert got[("memindex_search_seconds_count", (("agent", "main"), ("transport", "mcp")))] == 2
    assert got[("memindex_files_pending", (("agent", "main"),))] == 0


def test_writer_timing_covers_every_write_shard():
    """It compared the queue name with "write", so the Procfile's sharded writers (write.0,
    write.1) never recorded a transaction."""
    from types import SimpleNamespace

    from memindex.workers.broker import is_write_queue
    from memindex.workers.metrics import WriterTiming

    timing = WriterTiming(is_write_queue)
    for i, queue in enumerate(("write", "write.0", "write.1", "sync", "embed")):
        timing.before_process_message(None, SimpleNamespace(queue_name=queue, message_id=str(i)))
    assert sorted(timing._started) == ["0", "1", "2"]


def test_worker_metrics_dir_is_reused_per_port_and_keeps_live_processes_only(tmp_path, monkeypatch):
    """``memindex worker --metrics-port`` execs dramatiq, so nothing of ours runs at its exit: a
    fresh temp dir per start left one directory of sample files behind per run (44 after a day of
    tests). One directory per user and port is reused; files of processes that are gone go."""
    import os
    import subprocess
    import tempfile

    from memindex.workers.metrics import worker_env

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    env = worker_env("127.0.0.1", 9431)
    db = env["PROMETHEUS_MULTIPROC_DIR"]
    assert env["dramatiq_prom_db"] == db and os.path.dirname(db) == str(tmp_path)
    assert os.stat(db).st_mode & 0o777 == 0o700
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in (f"counter_{dead.pid}.db", f"gauge_livesum_{dead.pid}.db", f"counter_{os.getpid()}.db", "notes.txt"):
        (tmp_path / os.path.basename(db) / name).write_bytes(b"x")
    assert worker_env("127.0.0.1", 9431)["PROMETHEUS_MULTIPROC_DIR"] == db  # the same directory again
    assert sorted(os.listdir(db)) == [f"counter_{os.getpid()}.db", "notes.txt"]
    assert worker_env("127.0.0.1", 9432)["PROMETHEUS_MULTIPROC_DIR"] != db  # another port, another directory
    # A path that is not ours to use (here: readable by others) is not used.
    other = tmp_path / f"memindex-metrics-{os.getuid()}-9433"
    other.mkdir(mode=0o755)
    os.chmod(other, 0o755)
    assert worker_env("127.0.0.1", 9433)["PROMETHEUS_MULTIPROC_DIR"] != str(other)


def _listening_on(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp has them) listening on ``port``."""
    from pathlib import Path

    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, hexport = local.split(":")
        if int(hexport, 16) == port and state == "0A":  # LISTEN
            found.add(addr)
    return found


def test_the_metrics_port_is_loopback_unless_a_host_is_given_and_a_busy_one_is_one_line(tmp_path, redis_server):
    """helper-62: `mcp --metrics-port P` listened on 0.0.0.0 with no token (the series name agents;
    `serve` refuses a non-loopback bind without one), and a port in use ended in a traceback."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    from tests.conftest import REPO, free_port, wait_for

    a = Agent(tmp_path / "a")
    a.write("memory/2026-02-10.md", "Configured VLAN 10 for IoT devices.\n")
    env = dict(os.environ, OPENCLAW_STATE_DIR=str(a.state), OPENCLAW_CONFIG_PATH=str(a.config_path))
    env.pop("MEMINDEX_BROKER_URL", None)
    for given, expected in (("{port}", {"0100007F"}), ("0.0.0.0:{port}", {"00000000"})):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "memindex", "--workspace", str(a.workspace), "watch",
                                 "--metrics-port", given.format(port=port)], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            assert wait_for(lambda: _listening_on(port), 60, step=0.2)
            assert _listening_on(port) == expected
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(30)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "memindex", "--workspace", str(a.workspace), "watch",
                            "--metrics-port", str(port)], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [f"error: cannot serve metrics on 127.0.0.1:{port}: "
                                             "Address already in use"], r.stderr
    # helper-20: a worker's busy port killed dramatiq's exposition process with a traceback (plain
    # text under the JSON log format) while the worker ran on unmonitored: one line, exit 1, first.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "memindex", "worker", "--queues", "batch", "--processes", "1",
                            "--threads", "1", "--metrics-port", str(port)], cwd=REPO, timeout=120,
                           env=dict(env, MEMINDEX_BROKER_URL=redis_server.url), capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        f"error: cannot serve metrics on 127.0.0.1:{port}: Address already in use"], r.stderr
    r = subprocess.run([sys.executable, "-m", "memindex", "watch", "--metrics-port", "nine"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "expected [HOST:]PORT" in r.stderr, r.stderr
