"""``memindex serve`` as a subprocess, driven with httpx: payloads, errors, limits and auth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

pytest.importorskip("uvicorn", reason="the serve extra is not installed")

from tests.conftest import Agent, free_port, run_cli  # noqa: E402
from tests.test_mcp import cli_args, wait_port  # noqa: E402


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> Agent:
    a = Agent(tmp_path_factory.mktemp("serve"))
    a.write("MEMORY.md", "# Memory\nRouter: Omada ER605. ERR_SIG_4012 fixed by Mara.\n")
    a.write("memory/2026-02-10.md", "Configured VLAN 10 for IoT devices.\nCafé meeting at 10.\n")
    a.index()
    return a


def serve(a: Agent, cwd: Path, *extra: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, *cli_args(a), "serve", "--port", str(port), *extra],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_port(port, proc)
    return proc, f"http://127.0.0.1:{port}"


def _serve_args(base: list[str], cwd: Path) -> tuple[subprocess.Popen, str]:
    """``memindex <base> serve`` on a free port, once it listens: (process, its URL)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "memindex", *base, "serve", "--port", str(port)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_port(port, proc)
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def local(indexed: Agent, tmp_path_factory) -> Iterator[str]:
    proc, url = serve(indexed, tmp_path_factory.mktemp("cwd"))
    yield url
    proc.terminate()
    proc.wait(30)


def test_results_identical_to_the_cli(indexed: Agent, local: str) -> None:
    for query, opts, flags in (("VLAN IoT", {}, []), ("ERR_SIG_4012", {"maxResults": 1}, ["--max-results", "1"]),
                               ("café", {"sessionKey": "agent:main:discord:group:1"},
                                ["--session-key", "agent:main:discord:group:1"])):
        r = httpx.post(f"{local}/v1/search", json={"query": query, **opts}, timeout=30)
        assert r.status_code == 200, r.text
        cli = run_cli(*cli_args(indexed)[2:], "search", "--json", *flags, query)
        assert cli.returncode == 0, cli.stderr
        served = r.json()
        if "sessionKey" not in opts:  # the tool cites for a direct chat; `openclaw memory search` prints none
            for hit in served["results"]:
                citation = hit.pop("citation")
                assert hit["snippet"].endswith(f"\n\nSource: {citation}")
                hit["snippet"] = hit["snippet"][: -len(f"\n\nSource: {citation}")]
        assert served == json.loads(cli.stdout)
        assert r.json()["results"], query
    r = httpx.post(f"{local}/v1/get", json={"path": "memory/2026-02-10.md", "from": 2, "lines": 1}, timeout=30)
    cli = run_cli(*cli_args(indexed)[2:], "get", "--json", "memory/2026-02-10.md", "--from", "2", "--lines", "1")
    assert r.status_code == 200 and r.json() == json.loads(cli.stdout)
    assert r.json()["text"] == "Café meeting at 10."


def test_get_over_http_ends_lines_in_lf_as_the_cli_does(tmp_path: Path) -> None:
    """The HTTP (and MCP) memory_get is the in-process one: a CRLF file's window has no CR there either."""
    from tests.test_memory_get import LINE_END_FILES

    a = Agent(tmp_path / "agent")
    for rel, text in LINE_END_FILES.items():
        a.write(rel, text)
    proc, url = serve(a, tmp_path)
    try:
        for rel in LINE_END_FILES:
            for body, flags in (({}, []), ({"from": 2, "lines": 2}, ["--from", "2", "--lines", "2"])):
                r = httpx.post(f"{url}/v1/get", json={"path": rel, **body}, timeout=30)
                cli = run_cli(*cli_args(a)[2:], "get", "--json", rel, *flags)
                assert r.status_code == 200 and r.json() == json.loads(cli.stdout), (rel, body)
                assert "\r" not in r.json()["text"] and "line two" in r.json()["text"]
    finally:
        proc.terminate()
        proc.wait(30)


def test_status_and_health(local: str, indexed: Agent) -> None:
    assert httpx.get(f"{local}/healthz").json() == {"ok": True}
    s = httpx.get(f"{local}/v1/status", timeout=30).json()
    assert s["agent"] == "main" and s["agents"] == ["main"] and s["files"] == 2
    # The same object as `status --json`'s "status" (OpenClaw's keys: workspaceDir, dbPath, custom,
    # fallback, batch counts), with agentId and scan beside it (helper-51: other names, keys missing).
    out = run_cli(*cli_args(indexed)[2:], "status", "--json")
    [cli] = json.loads(out.stdout)
    for key in ("backend", "files", "chunks", "workspaceDir", "dbPath", "provider", "model", "sources",
                "sourceCounts", "fts", "fallback", "vector", "batch", "custom"):
        assert s[key] == cli["status"][key], key
    assert s["agentId"] == cli["agentId"] and s["scan"] == cli["scan"]


@pytest.mark.parametrize("method,path,body,status,code", [
    ("POST", "/v1/get", {"path": "../outside.md"}, 400, "path_rejected"),
    ("POST", "/v1/get", {"path": "notes/x.md"}, 400, "path_rejected"),
    ("POST", "/v1/get", {}, 400, "bad_request"),
    ("POST", "/v1/search", {"query": "x", "agent": "nobody"}, 404, "unknown_agent"),
    ("POST", "/v1/search", {"query": 5}, 400, "bad_request"),
    ("POST", "/v1/search", {"query": "x", "maxResults": "3"}, 400, "bad_request"),
    ("POST", "/v1/search", '{"query": "x", "minScore": Infinity}', 400, "bad_request"),  # Python's json reads these
    ("POST", "/v1/search", '{"query": "x", "minScore": NaN}', 400, "bad_request"),
    ("POST", "/v1/search", {"query": "x", "bogus": 1}, 400, "bad_request"),
    ("POST", "/v1/search", [1, 2], 400, "bad_request"),
    # json keeps the last of a key given twice: a proxy vetting the first would be bypassed
    ("POST", "/v1/search", '{"query": "x", "agent": "main", "agent": "nobody"}', 400, "bad_json"),
    ("POST", "/v1/get", '{"path": "MEMORY.md", "opts": {"a": 1, "a": 2}}', 400, "bad_json"),
    ("GET", "/v1/status?agent=main&agent=other", None, 400, "bad_request"),
    ("GET", "/v1/status?bogus=1", None, 400, "bad_request"),  # was answered, as POST's unknown fields are not
    ("GET", "/v1/status?agent=main&agnet=ops", None, 400, "bad_request"),
    # An empty agent is refused as the CLI's --agent "" is (it quietly meant the default agent)
    ("POST", "/v1/search", {"query": "x", "agent": ""}, 400, "bad_request"),
    ("POST", "/v1/search", {"query": "x", "agent": " ", "sessionKey": "agent:main:x"}, 400, "bad_request"),
    ("POST", "/v1/get", {"path": "MEMORY.md", "agent": ""}, 400, "bad_request"),
    ("GET", "/v1/status?agent=", None, 400, "bad_request"),
    ("POST", "/v1/search", {"query": "x", "corpus": "MEMORY"}, 400, "bad_request"),
    ("GET", "/v1/search", None, 405, "method_not_allowed"),
    ("GET", "/nope", None, 404, "not_found"),
])
def test_errors_are_json_with_a_code(local: str, method: str, path: str, body, status: int, code: str) -> None:
    send = {"content": body} if isinstance(body, str) else {"json": body}
    r = httpx.request(method, f"{local}{path}", timeout=30, **send)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code and r.json()["error"]["message"]
    if isinstance(body, dict) and body.get("agent") in ("", " ") or path.endswith("agent="):
        assert "invalid agent id" in r.json()["error"]["message"], r.text
    if isinstance(body, dict) and "corpus" in body:
        assert r.json()["error"]["message"] == "corpus must be one of: memory, wiki, all, sessions", r.text
    if "bogus" in path or "agnet" in path:
        assert r.json()["error"]["message"] == \
            f"unknown query parameter(s) {'bogus' if 'bogus' in path else 'agnet'}; expected agent"


def test_bad_json_and_oversized_bodies(local: str) -> None:
    r = httpx.post(f"{local}/v1/search", content=b"{not json", timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_json"
    # Nested thousands deep (still under the size cap): the parser's RecursionError was a 500.
    deep = b'{"query": "x", "n": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    r = httpx.post(f"{local}/v1/search", content=deep, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_json", r.text
    big = json.dumps({"query": "x" * 200_000}).encode()
    r = httpx.post(f"{local}/v1/search", content=big, timeout=30)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    # No Content-Length (chunked): the cap holds while reading the stream.
    r = httpx.post(f"{local}/v1/search", content=iter([big[i:i + 8192] for i in range(0, len(big), 8192)]),
                   timeout=30)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"


def test_off_loopback_bind_refused_without_a_token(indexed: Agent, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, *cli_args(indexed), "serve", "--host", "0.0.0.0", "--port",
                        str(free_port())], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith("error:") and "MEMINDEX_TOKEN" in r.stderr and "Traceback" not in r.stderr


def test_token_required_and_checked(indexed: Agent, tmp_path: Path) -> None:
    import os

    env = dict(os.environ, MEMINDEX_TOKEN="s3cret-token")
    proc, url = serve(indexed, tmp_path, "--host", "0.0.0.0", env=env)
    try:
        q = {"query": "VLAN"}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"},
                        {"Authorization": "Bearer s3cret-token-and-more"}):
            r = httpx.post(f"{url}/v1/search", json=q, headers=headers, timeout=30)
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", headers
            assert r.headers["www-authenticate"] == "Bearer"
        assert httpx.get(f"{url}/v1/status", timeout=30).status_code == 401
        assert httpx.get(f"{url}/healthz").status_code == 200  # probes need no token
        r = httpx.post(f"{url}/v1/search", json=q, headers={"Authorization": "Bearer s3cret-token"}, timeout=30)
        assert r.status_code == 200 and r.json()["results"]
        r = httpx.post(f"{url}/v1/search", json=q, headers={"Authorization": "bearer s3cret-token"}, timeout=30)
        assert r.status_code == 200  # the scheme is case-insensitive
        two = httpx.Headers([("Authorization", "Bearer wrong"), ("Authorization", "Bearer s3cret-token")])
        assert httpx.post(f"{url}/v1/search", json=q, headers=two, timeout=30).status_code == 401
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_loopback_server_answers_only_requests_addressed_to_a_loopback_name(local: str) -> None:
    """DNS rebinding: a web page whose own name resolves to 127.0.0.1 reads the API as same-origin,
    but its requests name that host; they are refused, including the plain-text bodies a browser
    sends without a preflight."""
    port = local.rsplit(":", 1)[1]
    body = '{"path": "MEMORY.md"}'
    for host in ("attacker.example", f"attacker.example:{port}", "10.0.0.1", ""):
        r = httpx.post(f"{local}/v1/get", content=body, timeout=30,
                       headers={"Host": host, "Origin": f"http://{host}", "Content-Type": "text/plain"})
        assert r.status_code == 421 and r.json()["error"]["code"] == "misdirected", host
        assert "ER605" not in r.text
    assert httpx.get(f"{local}/v1/status", headers={"Host": "attacker.example"}, timeout=30).status_code == 421
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "LOCALHOST"):
        r = httpx.post(f"{local}/v1/get", content=body, headers={"Host": host}, timeout=30)
        assert r.status_code == 200 and "ER605" in r.json()["text"], host
    # helper-19: any other web page could still make it run searches and syncs (a text/plain POST
    # needs no preflight; it could not read the answers): its Origin is refused. A page served from
    # loopback (a local UI, the MCP inspector) and runtimes (no Origin) are answered.
    for origin in ("https://attacker.example", "null", "http://10.0.0.1:8080"):
        for method, route in (("POST", "/v1/get"), ("POST", "/v1/search"), ("GET", "/v1/status")):
            r = httpx.request(method, f"{local}{route}", content=body if method == "POST" else None, timeout=30,
                              headers={"Origin": origin, "Content-Type": "text/plain"})
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_origin", (origin, route, r.text)
    for origin in (f"http://localhost:{port}", "http://127.0.0.1:5173", "http://[::1]:6274"):
        r = httpx.post(f"{local}/v1/get", content=body, headers={"Origin": origin}, timeout=30)
        assert r.status_code == 200 and "ER605" in r.json()["text"], origin


def test_two_agents_workspace_override_confinement_ids_and_a_broken_config(tmp_path: Path) -> None:
    """With two agents configured: the server's --workspace is its own agent's, never poured into
    the other's store; ids are normalised as on the CLI; --agent confines the server to that
    agent; an invalid config is a config_error with its reason, and /healthz says 503."""
    ws_a, ws_b, state = tmp_path / "wsA", tmp_path / "wsB", tmp_path / "state"
    for ws, text in ((ws_a, "# Alice\nThe VLAN plan is alice's.\n"), (ws_b, "# Bob\nzebra-papaya is bob's.\n")):
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text(text)
    state.mkdir()
    config = tmp_path / "openclaw.json"
    cfg = {"agents": {"list": [{"id": "alice", "default": True, "workspace": str(ws_a)},
                               {"id": "bob", "workspace": str(ws_b)}]}}
    config.write_text(json.dumps(cfg))
    base = ["--config", str(config), "--state-dir", str(state)]
    assert run_cli(*base, "index").returncode == 0
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    def start(*extra: str) -> tuple[subprocess.Popen, str]:
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "memindex", *base, *extra, "serve", "--port", str(port)],
                                cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_port(port, proc)
        return proc, f"http://127.0.0.1:{port}"

    def bob_finds_zebra() -> bool:
        out = run_cli(*base, "--agent", "bob", "search", "--json", "zebra")
        return out.returncode == 0 and [r["path"] for r in json.loads(out.stdout)["results"]] == ["MEMORY.md"]

    proc, url = start("--workspace", str(ws_a))
    try:
        r = httpx.post(f"{url}/v1/get", json={"path": "MEMORY.md", "agent": "bob"}, timeout=30)
        assert r.status_code == 200 and "zebra-papaya" in r.json()["text"], r.text
        for _ in range(2):  # the first search schedules bob's sync: it must sync bob's own workspace
            r = httpx.post(f"{url}/v1/search", json={"query": "zebra", "agent": "BOB"}, timeout=30)
            assert r.status_code == 200 and r.json()["results"], r.text
            time.sleep(1.5)
        r = httpx.post(f"{url}/v1/search", json={"query": "VLAN", "agent": "bob", "minScore": 0}, timeout=30)
        assert r.json()["results"] == []  # alice's notes never reached bob's store
        assert httpx.get(f"{url}/v1/status", params={"agent": " Alice "}, timeout=30).json()["agent"] == "alice"
        r = httpx.post(f"{url}/v1/search", json={"query": "x", "agent": "../bob"}, timeout=30)
        assert r.status_code == 400 and "invalid agent id" in r.json()["error"]["message"]
        # A session key names its agent (as OpenClaw picks a session's agent): bob's session
        # searched alice's memory, the default agent's, whenever the client sent only the key.
        r = httpx.post(f"{url}/v1/search", json={"query": "zebra", "sessionKey": "agent:Bob:telegram:direct:x"},
                       timeout=30)
        assert r.status_code == 200 and [x["path"] for x in r.json()["results"]] == ["MEMORY.md"], r.text
        r = httpx.post(f"{url}/v1/search", json={"query": "VLAN", "sessionKey": "agent:bob:main", "minScore": 0},
                       timeout=30)
        assert r.json()["results"] == [], r.text
        r = httpx.post(f"{url}/v1/search", json={"query": "VLAN", "agent": "alice", "sessionKey": "agent:bob:main"},
                       timeout=30)
        assert r.status_code == 400 and "does not match the session key's agent 'bob'" in r.text, r.text
        r = httpx.post(f"{url}/v1/search", json={"query": "VLAN", "sessionKey": "telegram:group:42"}, timeout=30)
        assert r.status_code == 200 and r.json()["results"], r.text  # no agent in the key: the default
    finally:
        proc.terminate()
        proc.wait(30)
    assert bob_finds_zebra()

    proc, url = start("--agent", "alice")
    try:
        r = httpx.post(f"{url}/v1/search", json={"query": "zebra", "agent": "bob"}, timeout=30)
        assert r.status_code == 404 and "serves only agent 'alice'" in r.json()["error"]["message"]
        assert httpx.post(f"{url}/v1/get", json={"path": "MEMORY.md", "agent": "bob"}, timeout=30).status_code == 404
        assert httpx.get(f"{url}/v1/status", timeout=30).json()["agents"] == ["alice"]
        r = httpx.post(f"{url}/v1/search", json={"query": "zebra", "sessionKey": "agent:bob:main"}, timeout=30)
        assert r.status_code == 404 and "serves only agent 'alice'" in r.text, r.text
        r = httpx.post(f"{url}/v1/search", json={"query": "VLAN"}, timeout=30)
        assert r.status_code == 200 and r.json()["results"]

        cfg["agents"]["list"][0]["memorySearch"] = {"providr": "none"}  # a typo: every request fails now
        config.write_text(json.dumps(cfg))
        r = httpx.post(f"{url}/v1/search", json={"query": "VLAN"}, timeout=30)
        assert r.status_code == 500 and r.json()["error"]["code"] == "config_error", r.text
        assert "providr" in r.json()["error"]["message"] and "provider" in r.json()["error"]["message"]
        h = httpx.get(f"{url}/healthz", timeout=30)
        assert h.status_code == 503 and h.json() == {"ok": False, "error": "config_error"}
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_config_that_is_not_json5_at_start_is_served_as_an_invalid_one(tmp_path: Path) -> None:
    """trialB: `echo '{ broken' > openclaw.json; memindex serve` exited 2, where a bad value (or a
    file broken while it runs) starts and answers config_error, /healthz 503 "while the config
    cannot be loaded". Now both start alike, and a fixed file is served without a restart."""
    a = Agent(tmp_path / "a")
    a.write("MEMORY.md", "# Memory\nThe VLAN plan.\n")
    a.config_path.write_text("{ broken")
    proc, url = serve(a, tmp_path)
    try:
        h = httpx.get(f"{url}/healthz", timeout=30)
        assert h.status_code == 503 and h.json() == {"ok": False, "error": "config_error"}, h.text
        for r in (httpx.post(f"{url}/v1/search", json={"query": "VLAN"}, timeout=30),
                  httpx.get(f"{url}/v1/status", timeout=30)):
            assert r.status_code == 500 and r.json()["error"]["code"] == "config_error", r.text
            assert "JSON5" in r.json()["error"]["message"] and str(a.config_path) in r.json()["error"]["message"]
        a.write_config({})
        assert httpx.get(f"{url}/healthz", timeout=30).json() == {"ok": True}
        r = httpx.post(f"{url}/v1/get", json={"path": "MEMORY.md"}, timeout=30)
        assert r.status_code == 200 and "VLAN" in r.json()["text"], r.text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "warning: invalid config: " in err and "serving anyway" in err, err
    # An --agent no config could make valid still stops the start, as on the CLI.
    a.config_path.write_text("{ broken")
    r = subprocess.run([sys.executable, *cli_args(a), "--agent", "../x", "serve", "--port", str(free_port())],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "invalid agent id" in r.stderr, r.stderr


def test_an_agentless_call_follows_the_default_agent_as_the_config_reads_now(tmp_path: Path) -> None:
    """`default: true` moved from alice to bob while the server runs: agent-less calls are bob's (a
    server pinned the default at start kept answering them from alice's memory); with the default
    agent removed, the `default: true` one still wins over the first entry."""
    state, cwd = tmp_path / "state", tmp_path / "cwd"
    state.mkdir(), cwd.mkdir()
    entries = []
    for name, word in (("zed", "zucchini"), ("alice", "apricot"), ("bob", "blueberry")):
        ws = tmp_path / f"ws-{name}"
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text(f"# {name}\nThe {word} crate is {name}'s.\n")
        entries.append({"id": name, "workspace": str(ws)})
    config = tmp_path / "openclaw.json"

    def write(default: str, *, drop: str | None = None) -> None:
        listed = [dict(e, default=e["id"] == default) for e in entries if e["id"] != drop]
        config.write_text(json.dumps({"agents": {"list": listed}}))
        st = config.stat()  # a rewrite within the same mtime tick must still be seen
        os.utime(config, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))

    write("alice")
    base = ["--config", str(config), "--state-dir", str(state)]
    assert run_cli(*base, "index").returncode == 0
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "memindex", *base, "serve", "--port", str(port)],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"

    def agentless(word: str) -> list[str]:
        r = httpx.post(f"{url}/v1/search", json={"query": word, "minScore": 0}, timeout=30)
        assert r.status_code == 200, r.text
        return [x["snippet"] for x in r.json()["results"]]

    try:
        wait_port(port, proc)
        assert any("apricot" in t for t in agentless("apricot")) and agentless("blueberry") == []
        write("bob")
        assert any("blueberry" in t for t in agentless("blueberry")) and agentless("apricot") == []
        assert httpx.get(f"{url}/v1/status", timeout=30).json()["agent"] == "bob"
        write("bob", drop="alice")  # bob is still the default, not the first entry (zed)
        assert any("blueberry" in t for t in agentless("blueberry")) and agentless("zucchini") == []
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_failed_search_and_an_unreadable_store_are_503_not_an_empty_200(tmp_path: Path) -> None:
    """helper-51: with the store unusable (its path a directory), /v1/search answered 200 with
    `results: []` and a warning, and /v1/status 500 "internal" with a traceback in the log."""
    a = Agent(tmp_path / "a")
    a.write("memory/a.md", "# A\nkumquat\n")
    store = tmp_path / "storedir"
    store.mkdir()
    a.memory_config({"provider": "none", "store": {"path": str(store)}})
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc, url = serve(a, cwd)
    try:
        r = httpx.post(f"{url}/v1/search", json={"query": "kumquat"}, timeout=30)
        assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable", r.text
        assert "is a directory, not a SQLite file" in r.json()["error"]["message"]
        r = httpx.get(f"{url}/v1/status", timeout=30)  # the damage is reported, as by the CLI's status
        assert r.status_code == 200 and any("is a directory" in p["error"] for p in r.json()["problems"]), r.text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err


@pytest.mark.parametrize("command", ["serve", "mcp-http"])
def test_sigterm_stops_cleanly_with_exit_0(indexed: Agent, tmp_path: Path, command: str) -> None:
    # uvicorn re-raises the SIGTERM it drained for; with the default handler the process died
    # with 143 after a clean stop (docker/honcho/systemd read that as a crash of the service).
    import signal

    if command == "serve":
        proc, url = serve(indexed, tmp_path)
    else:
        port = free_port()
        proc = subprocess.Popen([sys.executable, *cli_args(indexed), "mcp", "--http", str(port)],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_port(port, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["serve", "mcp-http"])
def test_a_busy_port_is_one_line_and_no_listening_claim(indexed: Agent, tmp_path: Path, command: str) -> None:
    """The "listening on http://..." line came before the bind, then uvicorn's own
    "ERROR: [Errno 98] address already in use" and exit 3."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = ["serve", "--port", str(port)] if command == "serve" else ["mcp", "--http", f"127.0.0.1:{port}"]
        r = subprocess.run([sys.executable, *cli_args(indexed), *argv], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert (r.returncode, r.stdout) == (1, ""), r.stderr
    assert r.stderr == f"error: cannot listen on 127.0.0.1:{port}: address already in use\n"
    # Free, the same command binds and only then says it listens.
    proc, url = serve(indexed, tmp_path) if command == "serve" else (None, None)
    if proc is None:
        port = free_port()
        proc = subprocess.Popen([sys.executable, *cli_args(indexed), "mcp", "--http", str(port)],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_port(port, proc)
        url = f"http://127.0.0.1:{port}"
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert f"listening on {url}" in err and "ERROR" not in err, err


def test_a_blank_token_is_no_token(indexed: Agent, tmp_path: Path) -> None:
    """MEMINDEX_TOKEN=" " with --host 0.0.0.0 started a server no request could authenticate to
    (the request's token is compared stripped); it is refused like no token, and a padded token
    is the token."""
    import os

    for extra, env in ((["--token", "  "], {}), ([], {"MEMINDEX_TOKEN": " "}), ([], {"MEMINDEX_TOKEN": "\t\n"})):
        for argv in (["serve", "--host", "0.0.0.0", "--port", str(free_port()), *extra],
                     ["mcp", "--http", f"0.0.0.0:{free_port()}", *extra]):
            r = subprocess.run([sys.executable, *cli_args(indexed), *argv], cwd=tmp_path, capture_output=True,
                               text=True, timeout=30, env={**os.environ, **env})
            assert r.returncode == 2, (argv, env, r.stderr)
            assert r.stderr.startswith("error: binding 0.0.0.0 exposes memory") and "MEMINDEX_TOKEN" in r.stderr
            assert "the token given is blank" in r.stderr, r.stderr  # it said "set MEMINDEX_TOKEN", which was set
    proc, url = serve(indexed, tmp_path, "--host", "0.0.0.0", env=dict(os.environ, MEMINDEX_TOKEN=" s3cret "))
    try:
        r = httpx.post(f"{url}/v1/search", json={"query": "VLAN"}, headers={"Authorization": "Bearer s3cret"},
                       timeout=30)
        assert r.status_code == 200 and r.json()["results"]
    finally:
        proc.terminate()
        proc.wait(30)


def _start(a: Agent, cwd: Path, command: str, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    port = free_port()
    argv = ["serve", "--port", str(port)] if command == "serve" else ["mcp", "--http", f"127.0.0.1:{port}"]
    proc = subprocess.Popen([sys.executable, *cli_args(a), *argv], cwd=cwd, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_port(port, proc)
    return proc, port


def _stall_mid_body(port: int, command: str):
    """A client that declares 100 bytes of body and sends a few (helper-h39h's slow client)."""
    import socket

    path = "/v1/search" if command == "serve" else "/mcp"
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              "Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"query\"".encode())
    return s


@pytest.mark.parametrize("command", ["serve", "mcp-http"])
@pytest.mark.parametrize("second_signal", [False, True])
def test_a_client_stalled_mid_body_does_not_hold_the_stop(indexed: Agent, tmp_path: Path, command: str,
                                                           second_signal: bool) -> None:
    """helper-h39h: after SIGTERM the port closed but the process never exited while a client sat
    mid-body; a second SIGTERM did nothing, a second SIGINT forced it out with CancelledError
    tracebacks. The drain is bounded (MEMINDEX_SERVE_DRAIN_S) and a second signal stops at once."""
    import signal

    # With a second signal, drain and body timeouts far beyond the wait: only the signal can end it.
    env = {"MEMINDEX_SERVE_DRAIN_S": "600", "MEMINDEX_SERVE_BODY_TIMEOUT_S": "600"} if second_signal else {}
    proc, port = _start(indexed, tmp_path, command, env)
    client = _stall_mid_body(port, command)
    try:
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        if second_signal:
            time.sleep(2)
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        assert "Traceback" not in err and "CancelledError" not in err, err
        client.settimeout(30)  # the stalled client is answered, not left hanging
        assert client.recv(4096).startswith(b"HTTP/1.1 503"), command
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_body_that_stalls_is_refused_with_408(indexed: Agent, tmp_path: Path) -> None:
    proc, port = _start(indexed, tmp_path, "serve", {"MEMINDEX_SERVE_BODY_TIMEOUT_S": "1"})
    client = _stall_mid_body(port, "serve")
    try:
        client.settimeout(60)
        answer = ""
        while "}}" not in answer:  # headers and body may come in separate reads
            chunk = client.recv(4096).decode()
            assert chunk, answer
            answer += chunk
        assert answer.startswith("HTTP/1.1 408"), answer
        assert '"code":"timeout"' in answer and "did not arrive within 1 s" in answer, answer
    finally:
        client.close()
        proc.terminate()
        proc.communicate(timeout=30)


def _two_agents(tmp_path: Path, ops: dict, default: str = "main") -> list[str]:
    """main and ops, each with a workspace of its own (``ops``: extra keys of ops' entry); the CLI's
    global options for them."""
    state = tmp_path / "state"
    state.mkdir()
    entries = []
    for agent, text in (("main", "# Main\nThe VLAN plan is main's.\n"), ("ops", "# Ops\nThe VLAN plan is ops'.\n")):
        ws = tmp_path / f"ws-{agent}"
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text(text)
        entries.append({"id": agent, "workspace": str(ws), **({"default": True} if agent == default else {}),
                        **(ops if agent == "ops" else {})})
    config = tmp_path / "openclaw.json"
    config.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": "none"}}, "list": entries}}))
    return ["--config", str(config), "--state-dir", str(state)]


def test_a_disabled_agents_search_is_refused_like_its_get(tmp_path: Path) -> None:
    """helper-h39h: /v1/search for an agent whose memory search is off answered 200 with no results
    (and MCP memory_search no tool error) while /v1/get answered 403 disabled, as the README says.
    Both are 403 `disabled`; MCP's tool error keeps OpenClaw's failure payload as structured content."""
    import asyncio

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    base = _two_agents(tmp_path, {"memorySearch": {"enabled": False}})
    proc, url = _serve_args(base, tmp_path)
    try:
        for route, body in (("search", {"query": "VLAN"}), ("get", {"path": "MEMORY.md"})):
            r = httpx.post(f"{url}/v1/{route}", json={**body, "agent": "ops"}, timeout=30)
            assert r.status_code == 403 and r.json()["error"]["code"] == "disabled", (route, r.text)
        assert "disabled for agent 'ops'" in r.json()["error"]["message"]
        assert httpx.post(f"{url}/v1/search", json={"query": "VLAN"}, timeout=30).status_code == 200  # main's
    finally:
        proc.terminate()
        proc.communicate(timeout=30)

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=["-m", "memindex", *base, "mcp"],
                                       cwd=str(tmp_path))
        async with Client(params) as client:
            res = await client.call_tool("memory_search", {"query": "VLAN", "agent": "ops"})
            assert res.is_error, res
            assert res.content[0].text == "memory_search: memory search is disabled for agent 'ops'"
            payload = res.structured_content
            assert payload["results"] == [] and payload["disabled"] is True and "ops" in payload["error"], payload
            assert not (await client.call_tool("memory_search", {"query": "VLAN"})).is_error

    asyncio.run(main())


def test_an_agent_id_with_no_valid_character_is_refused_never_read_as_main(tmp_path: Path) -> None:
    """helper-h39h: `"agent": "*"`, `"é"`, `"!!!"` and `/v1/status?agent=%FF` normalise (as OpenClaw's
    normalizeAgentId) to nothing, i.e. `main`, and answered from main's memory though the default
    agent is ops; `memindex --agent '!!!'` did the same. They are invalid ids: 400 / exit 2."""
    base = _two_agents(tmp_path, {}, default="ops")
    proc, url = _serve_args(base, tmp_path)
    try:
        for agent in ("*", "é", "!!!", "-", " ! "):
            for route, body in (("search", {"query": "VLAN"}), ("get", {"path": "MEMORY.md"})):
                r = httpx.post(f"{url}/v1/{route}", json={**body, "agent": agent}, timeout=30)
                assert r.status_code == 400 and "invalid agent id" in r.json()["error"]["message"], (agent, r.text)
        r = httpx.get(f"{url}/v1/status?agent=%FF", timeout=30)
        assert r.status_code == 400 and "invalid agent id" in r.json()["error"]["message"], r.text
        r = httpx.post(f"{url}/v1/search", json={"query": "VLAN", "agent": "nobody"}, timeout=30)
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_agent", r.text
        # Real ids still normalise as in OpenClaw, and no agent is the default one (ops).
        r = httpx.post(f"{url}/v1/get", json={"path": "MEMORY.md", "agent": "MAIN"}, timeout=30)
        assert r.status_code == 200 and "main's" in r.json()["text"], r.text
        r = httpx.post(f"{url}/v1/get", json={"path": "MEMORY.md"}, timeout=30)
        assert r.status_code == 200 and "ops'" in r.json()["text"], r.text
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    for agent in ("!!!", "é"):
        out = run_cli(*base, "--agent", agent, "search", "VLAN")
        assert out.returncode == 2 and "invalid agent id" in out.stderr and out.stdout == "", (agent, out)


def test_an_unknown_field_with_a_lone_surrogate_is_a_400_that_escapes_it(indexed: Agent, tmp_path: Path) -> None:
    """helper-h39h: `{"query":"x","bogus\\ud800":1}` answered 500 internal "UnicodeEncodeError" (the
    refusal echoed the raw name, which UTF-8 cannot encode) with two tracebacks in the log."""
    proc, url = serve(indexed, tmp_path)
    try:
        r = httpx.post(f"{url}/v1/search", content=b'{"query":"x","bogus\\ud800":1,"caf\xc3\xa9":2}', timeout=30)
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request", r.text
        assert r.json()["error"]["message"].startswith("unknown field(s) bogus\\ud800, café; expected query"), r.text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err


def test_the_servers_refuse_what_the_cli_refuses_in_its_words(indexed: Agent, local: str, tmp_path: Path) -> None:
    """helper-h39a: `memindex search --min-score 2 x` and `memindex search ""` exit 2 with a reason,
    while /v1/search and MCP memory_search took `minScore: 2` and `query: ""` and answered 200 with
    no results. They are refused everywhere, in the same words (one check)."""
    import asyncio

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    cases = ((["--min-score", "2", "VLAN"], {"query": "VLAN", "minScore": 2}, "minScore "),
             (["--min-score", "-0.5", "VLAN"], {"query": "VLAN", "minScore": -0.5}, "minScore "),
             ([""], {"query": ""}, ""), (["  "], {"query": "  "}, ""))
    said = []
    for argv, body, name in cases:
        cli = run_cli(*cli_args(indexed)[2:], "search", *argv)
        assert cli.returncode == 2, cli
        line = cli.stderr.strip().splitlines()[-1]  # "... --min-score: <why>" / "error: <why>"
        why = line.split("--min-score: ", 1)[-1] if name else line.split(": ", 1)[-1]
        r = httpx.post(f"{local}/v1/search", json=body, timeout=30)
        assert r.status_code == 400 and r.json()["error"] == {"code": "bad_request", "message": name + why}, \
            (body, r.text, cli.stderr)
        said.append((body, name + why))
    assert "between 0 and 1" in said[0][1] and "the query is empty" in said[2][1], said

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=[*cli_args(indexed), "mcp"], cwd=str(tmp_path))
        async with Client(params) as client:
            for body, message in said:
                res = await client.call_tool("memory_search", body)
                assert res.is_error and res.content[0].text == f"memory_search: {message}", (body, res)

    asyncio.run(main())
