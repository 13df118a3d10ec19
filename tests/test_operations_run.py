"""Operating the pipeline under a supervisor (issue 15): one stop signal drains and
gives back every embedding slot, ``queues`` counts only what live workers run,
and ``memindex health`` notices a worker that stopped consuming.

Real parts: honcho running the repo's Procfile, dramatiq worker subprocesses, a
real redis-server, the OpenAI SDK against tests/provider_server.py made slow.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import REPO, Agent, module_server, run_cli, kill_groups, wait_for
from tests.provider_server import ProviderServer

server = module_server(ProviderServer)
SLOTS = "memindex:embed-slots:openai"  # workers/limits.py lease_key("openai")


def _slow_agent(root: Path, server: ProviderServer, files: int = 120) -> Agent:
    a = Agent(root)
    a.write_config({"agents": {"defaults": {"workspace": str(a.workspace), "memorySearch": {
        "provider": "openai", "fallback": "none", "sync": {"watchDebounceMs": 300},
        "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-test-123"}}}}})
    for i in range(files):
        a.write(f"memory/2026-01-{i % 28 + 1:02d}-{i}.md", f"# Note {i}\nThe Omada router VLAN {i} serves device {i}.\n")
    server.reset()
    server.always("openai", {"kind": "delay", "seconds": 1.0})
    return a


def _env(a: Agent, url: str) -> dict:
    bindir = str(Path(sys.executable).parent)
    return dict(os.environ, MEMINDEX_BROKER_URL=url, OPENCLAW_STATE_DIR=str(a.state),
                OPENCLAW_CONFIG_PATH=str(a.config_path), PATH=bindir + os.pathsep + os.environ.get("PATH", ""))


def _pids_with(marker: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marker.encode() in (d / "environ").read_bytes():
                    pids.append(int(d.name))
    return pids


def _kill_all(marker: str) -> None:
    for pid in _pids_with(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _queues(env: dict) -> dict:
    out = run_cli("queues", "--json", env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.redis
def test_one_sigint_to_honcho_drains_and_releases_every_slot(tmp_path, redis_server, server):
    pytest.importorskip("honcho")
    # this interpreter's honcho: a pyenv shim's put another installation's `memindex` first on PATH
    honcho = [sys.executable, "-m", "honcho"]
    a = _slow_agent(tmp_path / "a", server)
    env = _env(a, redis_server.url)
    envfile = tmp_path / "empty.env"
    envfile.write_text("")
    client = redis.Redis.from_url(redis_server.url)
    log_path = tmp_path / "honcho.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([*honcho, "-f", str(REPO / "Procfile"), "-e", str(envfile), "start"], cwd=REPO,
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            # The watcher's initial sync starts the indexing; wait until embedding requests are in flight.
            assert wait_for(lambda: client.zcard(SLOTS) > 0, 60, step=0.1), log_path.read_text()
            assert wait_for(lambda: sum(q["running"] for q in _queues(env)["queues"].values()) > 0, 30)
            proc.send_signal(signal.SIGINT)  # Ctrl-C: honcho alone, it signals its children
            proc.wait(60)
            assert wait_for(lambda: not _pids_with(f"MEMINDEX_BROKER_URL={redis_server.url}"), 30, step=0.1)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            _kill_all(f"MEMINDEX_BROKER_URL={redis_server.url}")
    text = log_path.read_text(errors="replace")
    # Every slot was given back (not left to expire: a lease lives 30 s, the set 60 s) - unless
    # honcho's fixed 5 s ran out first on a loaded machine and it SIGKILLed a worker mid-stop
    # (README, Operations): then what that worker held must expire within one lease.
    left = client.zrange(SLOTS, 0, -1, withscores=True)
    if left and "sending SIGKILL" in text:
        now_ms = time.time() * 1000
        assert all(score - now_ms <= 31_000 for _, score in left), (left, text)
    else:
        assert not left, (left, text)
    assert "Stopping worker process" in text, text
    assert "Killing worker process" not in text, text  # one stop per signal
    assert "unhandled exception" not in text, text  # interrupted embed messages are handed back, not failed
    assert "Traceback" not in text, text


@pytest.mark.redis
def test_queues_counts_running_from_live_workers_only(tmp_path, redis_server, server):
    a = _slow_agent(tmp_path / "a", server)
    env = _env(a, redis_server.url)
    marker = f"MEMINDEX_BROKER_URL={redis_server.url}"
    worker = subprocess.Popen([sys.executable, "-m", "memindex", "worker", "--queues", "sync", "embed",
                               "--processes", "1", "--threads", "2"], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert run_cli("backfill", "--all", env=env).returncode == 0
        assert wait_for(lambda: _queues(env)["queues"]["embed"]["running"] > 0, 60, step=0.1)
        rep = _queues(env)
        assert rep["queues"]["embed"]["running"] <= 2  # two threads: prefetched messages are not running
        assert "main" in rep["agents"]
        os.killpg(worker.pid, signal.SIGKILL)  # mid-run: no chance to say goodbye
        worker.wait(10)
        # The dead process's entries expire (workers/lifecycle.py PROC_TTL_S = 10 s).
        assert wait_for(lambda: all(q["running"] == 0 and q["prefetched"] == 0
                                     for q in _queues(env)["queues"].values()), 40, step=1.0)
        text = run_cli("queues", env=env).stdout
        assert "running" in text and "pending files" in text and "group of up to 32 files" in text
    finally:
        _kill_all(marker)


@pytest.mark.redis
def test_health_fails_for_a_paused_worker_and_passes_again(tmp_path, redis_server, server):
    a = _slow_agent(tmp_path / "a", server, files=3)
    env = _env(a, redis_server.url)
    worker = subprocess.Popen([sys.executable, "-m", "memindex", "worker", "--queues", "sync", "embed",
                               "--processes", "1", "--threads", "1"], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def healthy() -> bool:
        return run_cli("health", env=env).returncode == 0

    try:
        assert wait_for(healthy, 60, step=0.5)
        out = run_cli("health", env=env)
        assert "worker pid" in out.stdout and "(embed, sync)" in out.stdout, out.stdout
        os.killpg(worker.pid, signal.SIGSTOP)
        assert wait_for(lambda: not healthy(), 40, step=0.5)
        out = run_cli("health", env=env)
        assert out.returncode == 1 and "unhealthy" in out.stderr and "Traceback" not in out.stderr, out.stderr
        os.killpg(worker.pid, signal.SIGCONT)
        assert wait_for(healthy, 40, step=0.5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGCONT)
            os.killpg(worker.pid, signal.SIGKILL)
        _kill_all(f"MEMINDEX_BROKER_URL={redis_server.url}")


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    """name and sorted labels -> value, from a live /metrics endpoint (empty if not up yet)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.mark.redis
def test_metrics_endpoints_serve_what_the_processes_did(tmp_path, redis_server, server):
    from tests.conftest import free_port

    a = _slow_agent(tmp_path / "a", server, files=3)
    server.always("openai", None)  # fast again
    env = _env(a, redis_server.url)
    watch_port, writer_port, embed_port = free_port(), free_port(), free_port()
    procs = []

    def start(*args: str) -> None:
        procs.append(subprocess.Popen([sys.executable, "-m", "memindex", *args], cwd=REPO, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))

    pending = ("memindex_files_pending", (("agent", "main"),))
    try:
        # No embed worker yet: the sync plans 3 files and they stay pending.
        start("worker", "--writer", "--metrics-port", str(writer_port))
        start("worker", "--queues", "sync", "--processes", "1", "--threads", "1")
        start("watch", "--all", "--metrics-port", str(watch_port))
        assert wait_for(lambda: _scrape(watch_port).get(pending) == 3.0, 60, step=0.5), _scrape(watch_port)
        time.sleep(1.5)
        assert _scrape(watch_port)[("memindex_oldest_pending_seconds", (("agent", "main"),))] >= 1.0
        start("worker", "--queues", "embed", "--processes", "2", "--threads", "1",
              "--metrics-port", str(embed_port))
        assert wait_for(lambda: _scrape(watch_port).get(pending) == 0.0, 60, step=0.5)
        assert _scrape(watch_port)[("memindex_oldest_pending_seconds", (("agent", "main"),))] == 0.0
        embed = _scrape(embed_port)  # both forked processes, summed by dramatiq's exposition server
        sent = server.count("openai")
        assert sent > 0 and embed[("memindex_embedding_requests_total", (("provider", "openai"),))] == sent
        assert embed[("memindex_embedding_request_seconds_count", (("provider", "openai"),))] == sent
        assert embed.get(("memindex_embedding_errors_total", (("error", "ProviderError"), ("provider", "openai"))),
                         0) == 0
        done = sum(v for (name, labels), v in embed.items()
                   if name == "dramatiq_messages_total" and ("queue_name", "embed") in labels)
        assert done >= 1
        writer = _scrape(writer_port)
        assert writer[("memindex_writer_transaction_seconds_count", ())] >= 2  # the plan, then the files
    finally:
        kill_groups(procs, signal.SIGTERM, wait_s=20)
        _kill_all(f"MEMINDEX_BROKER_URL={redis_server.url}")


def test_log_level_and_json_format_with_http_lines_at_debug(tmp_path, server):
    def lines(name: str, *opts: str) -> list[dict]:
        a = _slow_agent(tmp_path / name, server, files=2)  # a fresh store: requests, not cache hits
        server.always("openai", None)
        out = run_cli(*opts, "index", env={"OPENCLAW_STATE_DIR": str(a.state),
                                           "OPENCLAW_CONFIG_PATH": str(a.config_path)}, cwd=a.root)
        assert out.returncode == 0 and server.count("openai") > 0, out.stderr
        assert all(ln.startswith("{") for ln in out.stderr.splitlines() if ln.strip()), out.stderr
        return [json.loads(ln) for ln in out.stderr.splitlines() if ln.strip()]

    info = lines("info", "--log-format", "json", "--log-level", "info")
    assert info and all({"time", "level", "logger", "message"} <= set(r) for r in info)
    assert not any(r["logger"].startswith("httpx") for r in info)  # one line per request: DEBUG only
    debug = lines("debug", "--log-format", "json", "--log-level", "debug")
    http = [r for r in debug if r["logger"].startswith("httpx") and "HTTP Request" in r["message"]]
    assert http and all(r["level"] == "DEBUG" for r in http)
