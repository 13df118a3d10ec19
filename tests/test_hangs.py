"""Nothing hangs (issue 44): hung dependencies, exhausted resources, values out of range."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import REPO, run_cli, wait_for


def silent_endpoint() -> socket.socket:
    """A TCP endpoint that accepts connections (into its backlog) and never answers a byte."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s


# --- 1. keyword indexing never waits for vectors --------------------------------------------------

def test_a_provider_that_never_answers_delays_no_keyword_search(agent):
    hung = silent_endpoint()
    timeout_s = 2
    agent.write_config({"agents": {"defaults": {"workspace": str(agent.workspace), "memorySearch": {
        "provider": "openai", "fallback": "none",
        "remote": {"baseUrl": f"http://127.0.0.1:{hung.getsockname()[1]}/v1", "apiKey": "sk-test-123"},
        "sync": {"embeddingBatchTimeoutSeconds": timeout_s}}}}})
    for i in range(3):
        agent.write(f"memory/2026-01-0{i + 1}.md", f"# Day {i}\n\nthe wombat{i} ate carrots\n")
    try:
        # A first search pays the query timeout once and opens the shared query breaker, as a
        # runtime's first search would; what is measured below is the index's own delay.
        run_cli("search", "wombat0", env=agent.env())
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "memindex", "index"], env=agent.env(), cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # When a search that finds the new note started (a search may itself wait up to the
            # query timeout once, then the breaker answers keyword-only: not the index's delay).
            searchable_s = None
            while searchable_s is None and time.monotonic() - started < 5:
                t = time.monotonic() - started
                if any(r["path"] == "memory/2026-01-03.md" for r in agent.search("wombat2")["results"]):
                    searchable_s = t
                time.sleep(0.1)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        index_s = time.monotonic() - started
    finally:
        hung.close()
    assert searchable_s is not None, "not keyword-searchable 5 s after index started"
    assert proc.returncode == 1, (out, err)
    assert "3 file(s) not fully indexed" in out + err, (out, err)
    # README "Retries and limits": a request that never answers is tried at most twice, 0.5-0.6 s
    # apart (the second try only while it fits the 180 s budget); a few seconds of start-up on top.
    assert index_s < 2 * timeout_s + 0.6 + 10, index_s
    print(f"searchable after {searchable_s:.2f} s, index exited 1 after {index_s:.2f} s")


# --- 2. a hung Redis never holds the runtime hook ---------------------------------------------------

def test_a_stopped_redis_holds_the_session_hook_under_a_second_and_no_search(agent, redis_server, tmp_path):
    for i in range(20):
        agent.write(f"memory/n{i}.md", f"alpaca note {i}\n")
    agent.index()  # (embedded) the store exists; the broker below only carries sync requests
    script = tmp_path / "hook.py"
    script.write_text(f"""
import json, os, signal, sys, time
import memindex
ctx = memindex.Context("main", {str(agent.config_path)!r}, {str(agent.state)!r}, {str(agent.workspace)!r})
engine = memindex.open_search(memindex.load_settings(ctx), schedule_sync=memindex.schedule_sync)
engine.search("alpaca")  # warm: Redis answers
os.kill({redis_server.proc.pid}, signal.SIGSTOP)
out = {{}}
for i in range(3):
    t = time.monotonic()
    try:
        memindex.on_session_start(ctx, "agent:main:direct:bob")
        out[f"hook{{i}}"] = ["returned", time.monotonic() - t]
    except memindex.BrokerUnavailable as exc:
        out[f"hook{{i}}"] = [str(exc), time.monotonic() - t]
t = time.monotonic()
hits = [len(engine.search("alpaca").results) for _ in range(20)]
out["search"] = [min(hits), time.monotonic() - t]
print(json.dumps(out), flush=True)
os._exit(0)
""")
    env = agent.env(redis_server.url)
    try:
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        started = time.monotonic()
        noop = run_cli("--workspace", str(agent.workspace), "index", env=env, timeout=120)
        noop_s = time.monotonic() - started
    finally:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
    for i in range(3):
        what, took = out[f"hook{i}"]
        assert took < 1.0, out
        assert what == "returned" or "did not answer" in what or "not answered" in what, out
    found, took = out["search"]
    assert found > 0 and took < 1.0, out  # 20 searches, none waiting on the hung broker
    # A no-op index asks nothing of the broker (README "Using it").
    assert noop.returncode == 0 and noop_s < 10, (noop_s, noop.stdout, noop.stderr)
    print(out, f"no-op index {noop_s:.2f} s")
