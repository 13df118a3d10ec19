"""Nothing hangs (issue 44): hung dependencies, exhausted resources, values out of range."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

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
import memindex.workers.actors  # (a process's first hook call imports the queue layer: README)
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


# --- 3. Redis out of memory: said, and recovered from without a hand ------------------------------

def _spawn(agent, url: str, logdir, name: str, *args: str) -> subprocess.Popen:
    log = open(logdir / f"{name}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "memindex", *args], cwd=REPO, env=agent.env(url),
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _status(agent, url: str) -> dict:
    out = run_cli("status", "--json", env=agent.env(url))
    return json.loads(out.stdout)[0]["status"]


@pytest.mark.redis
def test_redis_out_of_memory_is_said_within_10s_and_the_pipeline_converges_once_it_has_room(agent, redis_server,
                                                                                             tmp_path):
    import redis

    from conftest import kill_groups

    url = redis_server.url
    client = redis.Redis.from_url(url)
    agent.write_config({"agents": {"defaults": {"workspace": str(agent.workspace)}}})  # keyword-only
    agent.write("memory/first.md", "# First\nthe first note\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = [_spawn(agent, url, logs, "worker", "worker", "--processes", "1", "--threads", "2"),
             _spawn(agent, url, logs, "writer", "worker", "--writer"),
             _spawn(agent, url, logs, "watch", "watch", "--metrics-port", f"127.0.0.1:{7400}")]
    try:
        assert run_cli("index", env=agent.env(url), timeout=60).returncode == 0
        client.set("ballast", b"x" * (4 << 20))
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", 2 << 20)  # below the ballast: every write is refused
        for i in range(40):
            agent.write(f"memory/n{i:02d}.md", f"# Note {i}\nthe quince{i} ledger\n")
        started = time.monotonic()
        out = run_cli("index", env=agent.env(url), timeout=60)
        took = time.monotonic() - started
        said = "is out of memory (Redis's maxmemory reached, no eviction)"
        assert out.returncode != 0 and said in out.stderr and took < 10, (took, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr
        health = run_cli("health", env=agent.env(url))
        assert health.returncode == 1 and said in health.stdout + health.stderr, health
        assert said in _status(agent, url).get("brokerFull", "")
        import urllib.request

        metrics = urllib.request.urlopen("http://127.0.0.1:7400/metrics", timeout=10).read().decode()
        assert "memindex_broker_out_of_memory 1.0" in metrics
        # Room again: nobody runs anything; the watcher and workers finish the job themselves.
        client.delete("ballast")
        client.config_set("maxmemory", 0)
        freed = time.monotonic()
        converged = wait_for(lambda: _status(agent, url)["files"] == 41 and not _status(agent, url)["dirty"],
                             30, step=1)
        assert converged, (_status(agent, url), (logs / "watch.log").read_text()[-3000:])
        print(f"said after {took:.1f} s; converged {time.monotonic() - freed:.1f} s after the limit was lifted")
        assert any(r["path"] == "memory/n39.md" for r in agent.search("quince39")["results"])
        metrics = urllib.request.urlopen("http://127.0.0.1:7400/metrics", timeout=10).read().decode()
        assert "memindex_broker_out_of_memory 0.0" in metrics
    finally:
        kill_groups(procs, signal.SIGTERM, 20)


# --- 4. servers: header and body deadlines, a connection cap, no exit on EMFILE -------------------

def _limit_fds(n: int):
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


@pytest.mark.parametrize("command", [["serve", "--port"], ["mcp", "--http"]])
def test_twice_the_connection_cap_of_half_sent_requests_leaves_the_server_answering(agent, command):
    import http.client

    from conftest import free_port

    agent.write("memory/a.md", "the persimmon ledger\n")
    agent.index()
    port = free_port()
    # 128 descriptors: the cap is what is left of them less 64 (about 35 connections); 2 s for a head.
    env = dict(agent.env(), MEMINDEX_SERVE_HEADER_TIMEOUT_S="2", MEMINDEX_SERVE_BODY_TIMEOUT_S="2")
    proc = subprocess.Popen([sys.executable, "-m", "memindex", "--workspace", str(agent.workspace), *command,
                             str(port)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_limit_fds(128))
    socks: list[socket.socket] = []
    try:
        assert wait_for(lambda: _connects(port), 30), proc.stderr.read() if proc.poll() is not None else ""
        refused = 0
        for i in range(128):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            # half a request: a head that never ends, or (every 4th) a head whose body never comes
            s.sendall(b"POST /v1/search HTTP/1.1\r\nHost: x\r\ncontent-length: 100\r\n\r\n{" if i % 4 == 0
                      else b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        time.sleep(0.5)
        for s in socks:  # beyond the cap: answered 503 and closed at once
            s.settimeout(0.05)
            try:
                data = s.recv(4096)
            except (socket.timeout, OSError):
                continue
            refused += b" 503 " in data and b"overloaded" in data
        if proc.poll() is not None:
            open("/tmp/hangs/serve_err.txt", "w").write(proc.stderr.read())
        assert refused >= 40, (refused, proc.poll())
        # The half-sent ones time out (2 s + the watchdog's slack); then a normal request is answered.
        closed = wait_for(lambda: all(_closed(s) for s in socks), 15, step=0.2)  # (accepts pause on EMFILE)
        assert closed, [i for i, s in enumerate(socks) if not _closed(s)]
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        took = time.monotonic() - started
        assert resp.status in (200, 404) and took < 1.0, (resp.status, took)  # (mcp --http has no /healthz)
        assert proc.poll() is None
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert "Traceback" not in err, err
    assert "Too many open files" not in err, err


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _closed(s: socket.socket) -> bool:
    s.settimeout(0.01)
    try:
        return s.recv(4096, socket.MSG_PEEK) == b"" or False
    except socket.timeout:
        return False
    except OSError:
        return True


# --- 5. credentials in remote.baseUrl --------------------------------------------------------------

from provider_server import ProviderServer  # noqa: E402

from conftest import module_server  # noqa: E402

server = module_server(ProviderServer)


def test_a_password_in_the_base_url_is_never_shown_and_the_api_key_is_still_sent(agent, fresh_services, server):
    import base64

    password = "urlpass-3141x"
    basic = base64.b64encode(f"proxyuser:{password}".encode()).decode()
    base = server.base("openai").replace("http://", f"http://proxyuser:{password}@")
    agent.write("MEMORY.md", "the router is an Omada ER605\n")
    agent.memory_config({"provider": "openai", "fallback": "none", "remote": {"baseUrl": base, "apiKey": "sk-test-123"}})
    out = []
    for args in (("-vv", "index"), ("-vv", "search", "router"), ("status", "--json", "--deep"), ("-vv", "status")):
        proc = run_cli("--workspace", str(agent.workspace), *args, env=agent.env())
        out.append(proc.stdout + proc.stderr)
    text = "\n".join(out)
    assert "HTTP Request: POST" in text  # httpx's line, with the URL, was logged
    assert password not in text and basic not in text and "proxyuser" not in text, text
    sent = [r.headers.get("Authorization") or r.headers.get("authorization") for r in server.log_for("openai")]
    assert sent and all(h == "Bearer sk-test-123" for h in sent), sent


def test_the_base_url_credentials_are_sent_as_basic_auth_without_an_api_key():
    from memindex.pipeline.embeddings.providers.ollama import OllamaProvider

    p = OllamaProvider("nomic-embed-text", base_url="http://u:p%40ss@ollama.example:11434")
    assert p.base_url == "http://ollama.example:11434"
    assert p._client.headers["authorization"] == "Basic dTpwQHNz"  # u:p@ss
    keyed = OllamaProvider("nomic-embed-text", base_url="http://u:pass@ollama.example:11434", api_key="sk-xyz1")
    assert keyed._client.headers["authorization"] == "Bearer sk-xyz1"


# --- 6. every numeric setting has a range ---------------------------------------------------------

def _numeric_leaves(schema: dict, prefix: str) -> list[str]:
    """Schema paths whose check takes a plain number (1): the numeric settings."""
    from memindex.pipeline.config.settings import F, Ignored

    out = []
    for k, sub in schema.items():
        path = f"{prefix}.{k}"
        if isinstance(sub, Ignored):
            sub = sub.schema
        if isinstance(sub, dict):
            out += _numeric_leaves(sub, path)
            continue
        check = sub.check if isinstance(sub, F) else sub
        try:
            check(path, 1)
        except Exception:  # noqa: BLE001 - not a number's key (a bool, a string, a list ...)
            continue
        try:
            check(path, "many")
        except Exception:  # noqa: BLE001 - a number's key: a word is refused
            out.append(path)
    return out


def test_every_numeric_setting_is_in_the_ranges_table():
    from memindex.pipeline.config import ranges
    from memindex.pipeline.config.settings import MEMORY, MEMORY_SEARCH

    numeric = _numeric_leaves(MEMORY_SEARCH, "memorySearch") + _numeric_leaves(MEMORY, "memory")
    assert "memorySearch.query.maxResults" in numeric and "memorySearch.outputDimensionality" in numeric
    missing = [k for k in numeric if k not in ranges.RANGES]
    assert not missing, missing


def _load(cfg, tmp_path):
    """load_settings, leaving the process's once-per-process warnings as they were (an ignored
    OpenClaw key loaded here must still be warned about by the tests that check that warning)."""
    from memindex.pipeline.config import settings as settings_module

    said = set(settings_module._warned)
    try:
        return settings_module.load_settings(settings_module.Context("main", str(cfg), str(tmp_path), str(tmp_path)))
    finally:
        settings_module._warned.clear()
        settings_module._warned.update(said)


def _config_with(key: str, value) -> dict:
    head, *rest = key.split(".")
    leaf: dict = {}
    node = leaf
    for part in rest[:-1]:
        node = node.setdefault(part, {})
    node[rest[-1]] = value
    if head == "memorySearch":
        return {"agents": {"defaults": {"memorySearch": leaf}}}
    return {"memory": leaf}


@st.composite
def _out_of_range(draw):
    from memindex.pipeline.config import ranges

    key = draw(st.sampled_from(sorted(ranges.RANGES)))
    lo, hi = ranges.RANGES[key]
    below = st.integers(max_value=int(math.ceil(lo)) - 1) if lo is not None else st.nothing()
    above = st.integers(min_value=int(math.floor(hi)) + 1) if hi is not None else st.nothing()
    fractional = (st.floats(max_value=lo, exclude_max=True, allow_nan=False, allow_infinity=False)
                  if lo is not None else st.nothing())
    return key, draw(st.one_of(below, above, fractional))


@given(_out_of_range())
@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_an_out_of_range_value_of_any_numeric_setting_is_refused_naming_its_key(tmp_path, case):
    from memindex.pipeline.errors import ConfigError

    key, value = case
    cfg = tmp_path / "openclaw.json"
    cfg.write_text(json.dumps(_config_with(key, value)))
    with pytest.raises(ConfigError) as err:
        _load(cfg, tmp_path)
    assert key.split(".", 1)[1] in str(err.value), (key, value, str(err.value))
    assert "\n" not in str(err.value)


def test_in_range_values_load_and_the_overlap_stays_below_the_tokens(tmp_path):
    from memindex.pipeline.config import ranges
    from memindex.pipeline.errors import ConfigError

    cfg = tmp_path / "openclaw.json"
    for key, (lo, hi) in ranges.RANGES.items():
        if key.endswith(".overlap"):
            continue  # (below the default tokens: its own case)
        for value in (lo, hi):
            if value is not None:
                cfg.write_text(json.dumps(_config_with(key, value)))
                _load(cfg, tmp_path)
    cfg.write_text(json.dumps(_config_with("memorySearch.chunking", {"tokens": 50, "overlap": 50})))
    with pytest.raises(ConfigError, match="chunking.overlap"):
        _load(cfg, tmp_path)
    cfg.write_text(json.dumps(_config_with("memorySearch.chunking", {"tokens": 50})))  # the default 80 follows
    assert _load(cfg, tmp_path).memory_search.chunking.overlap == 49


def test_a_client_leaving_mid_request_is_no_traceback_for_mcp_http(agent):
    from conftest import free_port

    agent.index()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "memindex", "--workspace", str(agent.workspace), "mcp", "--http",
                             str(port)], cwd=REPO, env=agent.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert wait_for(lambda: _connects(port), 30)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                      b"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n"
                      % (port, len(body) + 50) + body[:20])
            time.sleep(0.3)
            s.close()
        time.sleep(1)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert "Traceback" not in err and "ClientDisconnect" not in err, err


# --- 7. the smaller ones ----------------------------------------------------------------------------

def test_a_fifo_at_the_query_breaker_path_does_not_hang_a_search(agent):
    agent.memory_config({"provider": "hash"})
    agent.write("memory/a.md", "the tamarind ledger\n")
    agent.index()
    fifo = f"{agent.settings().store_path}.query-breaker.json"
    os.mkfifo(fifo)
    out = run_cli("--workspace", str(agent.workspace), "search", "tamarind", env=agent.env(), timeout=30)
    assert out.returncode == 0 and "memory/a.md" in out.stdout, out


def test_a_lone_surrogate_in_a_query_is_searched_not_a_failed_embedding(agent, caplog):
    import logging

    agent.memory_config({"provider": "hash"})
    agent.write("memory/a.md", "the tamarind ledger\n")
    agent.index()
    with caplog.at_level(logging.INFO):
        res = agent.search("tamarind \ud800")
    assert [r["path"] for r in res["results"]] == ["memory/a.md"]
    assert "query embedding failed" not in caplog.text and not res.get("warning"), (caplog.text, res)
    assert res.get("mode") != "fts-only"


def test_status_exits_1_for_an_extra_path_the_index_refuses(agent):
    """OpenClaw would walk all of "/"; memindex refuses it (README "Workspaces"), so every sync of
    the agent fails: status says why under issue: and exits 1, as index does (with 2, a config error)."""
    agent.write("memory/a.md", "fox\n")
    agent.memory_config({"extraPaths": ["/"]})
    out = run_cli("--workspace", str(agent.workspace), "status", env=agent.env())
    assert out.returncode == 1 and "too broad" in out.stdout, out
    agent.memory_config({"extraPaths": []})
    assert run_cli("--workspace", str(agent.workspace), "status", env=agent.env()).returncode == 0


def test_a_store_under_proc_is_not_called_a_full_disk(agent):
    env = dict(agent.env(), OPENCLAW_STATE_DIR="/proc/self")
    for cmd in ("index", "status"):
        out = run_cli("--workspace", str(agent.workspace), cmd, env=env)
        text = out.stdout + out.stderr
        assert "full" not in text and "0 bytes free" not in text and "Traceback" not in text, (cmd, text)
    out = run_cli("--workspace", str(agent.workspace), "index", env=env)
    assert out.returncode != 0 and "read-only" in out.stderr, out


def test_a_wal_deleted_during_index_never_ends_in_success_with_files_pending(agent):
    for i in range(3000):
        agent.write(f"memory/{i // 100:02d}/n{i:04d}.md", f"# Note {i}\nthe walnut {i} entry\n" + "filler text " * 40)
    store = agent.settings().store_path
    wal = f"{store}-wal"
    proc = subprocess.Popen([sys.executable, "-m", "memindex", "--workspace", str(agent.workspace), "index"],
                            cwd=REPO, env=agent.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deleted = 0
    try:
        while proc.poll() is None and deleted < 2:
            if os.path.exists(wal) and os.path.getsize(wal) > 256 * 1024:
                os.unlink(wal)  # mid-index, with writes in it not yet checkpointed
                deleted += 1
                time.sleep(0.5)
            time.sleep(0.02)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    status = json.loads(run_cli("--workspace", str(agent.workspace), "status", "--json", env=agent.env()).stdout)
    st = status[0]["status"]
    if proc.returncode == 0:  # success is said only when every file is written
        assert st["files"] == 3000 and not st["dirty"], (deleted, out, err, st["files"])
    else:  # or it fails, saying why in one line
        assert err.strip().startswith("error:") and len(err.strip().splitlines()) <= 3, err
    assert "Traceback" not in err
    print(f"WAL deleted {deleted}x; index rc {proc.returncode}: {out.strip()}", err)
