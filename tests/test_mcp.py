"""``memindex mcp`` as a subprocess, driven by the official MCP SDK's own client over stdio and HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the serve extra (mcp SDK) is not installed")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from memindex.pipeline.search.get import memory_get  # noqa: E402
from tests.conftest import Agent, free_port  # noqa: E402

TOOLS = {"memory_search", "memory_get", "memory_status", "memory_index"}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> Agent:
    a = Agent(tmp_path_factory.mktemp("mcp"))
    a.write("MEMORY.md", "# Memory\nRouter: Omada ER605. ERR_SIG_4012 fixed by Mara.\n")
    a.write("memory/2026-02-10.md", "Configured VLAN 10 for IoT devices.\nCafé meeting at 10.\nThird line.\n")
    a.write("notes/secret.md", "not memory\n")
    a.index()
    return a


def cli_args(a: Agent) -> list[str]:
    return ["-m", "memindex", "--config", str(a.config_path), "--state-dir", str(a.state),
            "--workspace", str(a.workspace)]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "server exited"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("server did not start listening")


async def exercise(client: Client, a: Agent) -> None:
    """What every transport must do: the tools, their payloads, and refusals as tool errors."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    assert "memory_get" in tools["memory_search"].description  # written to steer the model
    assert set(tools["memory_get"].input_schema["properties"]) == {"path", "from", "lines", "agent"}
    assert set(tools["memory_search"].input_schema["properties"]) == {
        "query", "maxResults", "minScore", "agent", "sessionKey", "corpus"}
    from memindex.producers.serve.mcp import _TOOL_FIELDS  # the table unknown arguments are checked against

    assert {name: set(tools[name].input_schema["properties"]) for name in TOOLS} == {
        name: set(fields) for name, (fields, _required) in _TOOL_FIELDS.items()}

    res = await client.call_tool("memory_search", {"query": "VLAN IoT", "maxResults": 3})
    assert not res.is_error
    assert res.structured_content == a.search("VLAN IoT", max_results=3)
    assert res.structured_content["results"][0]["path"] == "memory/2026-02-10.md"
    assert json.loads(res.content[0].text) == res.structured_content  # text-only clients get the same

    res = await client.call_tool("memory_get", {"path": "memory/2026-02-10.md", "from": 2, "lines": 1})
    assert not res.is_error
    assert res.structured_content == memory_get(a.settings(), "memory/2026-02-10.md", 2, 1).as_dict()
    assert res.structured_content["text"] == "Café meeting at 10."

    res = await client.call_tool("memory_get", {"path": "notes/secret.md"})
    assert res.is_error and "outside the memory files" in res.content[0].text
    # Every tool error reads "<tool>: <why>" (raised in the tool, the SDK prefixed "Error executing tool")
    assert res.content[0].text.startswith("memory_get: "), res.content[0].text

    res = await client.call_tool("memory_search", {"query": "VLAN", "agent": "nobody"})
    assert res.is_error and "unknown agent 'nobody'" in res.content[0].text and "main" in res.content[0].text

    # from 0 means "not given", as in-process and in OpenClaw (Math.max(1, from)); lines from line 1.
    res = await client.call_tool("memory_get", {"path": "MEMORY.md", "from": 0, "lines": 1})
    assert not res.is_error and res.structured_content["text"] == "# Memory"
    assert res.structured_content == memory_get(a.settings(), "MEMORY.md", from_line=0, lines=1).as_dict()
    res = await client.call_tool("memory_get", {"path": "MEMORY.md", "from": -1})
    assert res.is_error and "from must be at least 0" in res.content[0].text

    # Arguments of the wrong type are refused in the JSON API's words, not coerced by the SDK.
    for bad, said in (({"query": "VLAN", "maxResults": True}, "maxResults must be an integer"),
                      ({"query": "VLAN", "maxResults": "3"}, "maxResults must be an integer"),
                      ({"query": 5}, "query must be a string"),
                      ({"maxResults": 3}, "query is required")):
        res = await client.call_tool("memory_search", bad)
        assert res.is_error and said in res.content[0].text and "pydantic" not in res.content[0].text, bad
        assert res.content[0].text.startswith("memory_search: "), res.content[0].text

    # A value outside an argument's set, and a null where the JSON API reads "not given": the SDK's
    # schema check answered "1 validation error for memory_searchArguments ..." (pydantic's words).
    for bad in ({"query": "VLAN", "corpus": "bogus"}, {"query": "VLAN", "corpus": "MEMORY"}):
        res = await client.call_tool("memory_search", bad)
        text = res.content[0].text
        assert res.is_error and text == "memory_search: corpus must be one of: memory, wiki, all, sessions", bad
    res = await client.call_tool("memory_search", {"query": "VLAN IoT", "corpus": "memory"})
    assert not res.is_error and res.structured_content["results"], res.content
    res = await client.call_tool("memory_index", {"force": None, "agent": "nobody"})  # (the agent: no sync here)
    assert res.is_error and "unknown agent 'nobody'" in res.content[0].text, res.content
    # An empty agent is refused as the CLI's --agent "" is (it meant the default agent, quietly).
    for tool, args in (("memory_search", {"query": "VLAN", "agent": ""}), ("memory_status", {"agent": " "}),
                       ("memory_search", {"query": "VLAN", "agent": "", "sessionKey": "agent:main:x"})):
        res = await client.call_tool(tool, args)
        assert res.is_error and "invalid agent id" in res.content[0].text, (args, res.content)
        assert "pydantic" not in res.content[0].text

    # A misspelt argument is refused with the names expected, not dropped (it would mean the default).
    res = await client.call_tool("memory_search", {"query": "VLAN", "maxresults": 1})
    assert res.is_error and "unknown field(s) maxresults" in res.content[0].text
    assert "maxResults" in res.content[0].text
    res = await client.call_tool("memory_status", {"agnet": "main"})
    assert res.is_error and "agnet" in res.content[0].text

    res = await client.call_tool("memory_status", {})
    assert not res.is_error
    status = res.structured_content
    assert status["agents"] == ["main"] and status["agent"] == "main" and status["files"] >= 2


def test_stdio_tools_and_freshness(indexed: Agent, tmp_path: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=[*cli_args(indexed), "mcp"], cwd=str(tmp_path))

    async def main() -> None:
        async with Client(params) as client:
            await exercise(client, indexed)
            # A file written while the server runs becomes searchable: searches schedule syncs
            # the way the runtime hooks do, and the embedded workers run in the server process.
            indexed.write("memory/2026-03-01.md", "Replaced the quokka firmware.\n")
            deadline = time.monotonic() + 60
            while True:
                res = await client.call_tool("memory_search", {"query": "quokka"})
                if res.structured_content["results"]:
                    break
                assert time.monotonic() < deadline, "a new memory file never became searchable"
                await asyncio.sleep(0.3)
            assert res.structured_content["results"][0]["path"] == "memory/2026-03-01.md"

            # memory_index (`openclaw memory index` through the plugin): written when it answers.
            indexed.write("memory/2026-03-02.md", "The wombat gate latch was oiled.\n")
            res = await client.call_tool("memory_index", {})
            assert not res.is_error, res.content
            done = res.structured_content
            assert done["agentId"] == "main" and done["to_index"] >= 1 and done["status"]["files"] >= 4, done
            res = await client.call_tool("memory_search", {"query": "wombat latch"})
            assert res.structured_content["results"][0]["path"] == "memory/2026-03-02.md"
            res = await client.call_tool("memory_index", {"force": "yes"})
            assert res.is_error and "force must be true or false" in res.content[0].text
            res = await client.call_tool("memory_index", {"force": None})  # null: not given, as the JSON API reads it
            assert not res.is_error and res.structured_content["agentId"] == "main", res.content

    asyncio.run(main())


def test_streamable_http(indexed: Agent, tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, *cli_args(indexed), "mcp", "--http", f"127.0.0.1:{port}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_port(port, proc)

        async def main() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                await exercise(client, indexed)

        asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(30)


def test_http_off_loopback_needs_a_token(indexed: Agent, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, *cli_args(indexed), "mcp", "--http", f"0.0.0.0:{free_port()}"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().startswith("error:") and "--token" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_bad_bind_is_one_line(indexed: Agent, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, *cli_args(indexed), "mcp", "--http", "localhost:http"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "expected [HOST:]PORT" in r.stderr and "Traceback" not in r.stderr


def test_a_config_that_turns_invalid_is_a_tool_error_that_says_why(tmp_path: Path) -> None:
    a = Agent(tmp_path / "a")
    a.write("MEMORY.md", "# Memory\nThe VLAN plan.\n")
    params = StdioServerParameters(command=sys.executable, args=[*cli_args(a), "mcp"], cwd=str(tmp_path))

    async def main() -> None:
        async with Client(params) as client:
            assert not (await client.call_tool("memory_status", {})).is_error
            a.memory_config({"providr": "none"})  # a typo, made while the server runs
            for tool, args in (("memory_search", {"query": "VLAN"}), ("memory_status", {})):
                res = await client.call_tool(tool, args)
                text = res.content[0].text
                assert res.is_error and "providr" in text and '"provider"' in text, text

    asyncio.run(main())


def test_a_config_that_is_not_json5_at_start_is_served_as_an_invalid_one(tmp_path: Path) -> None:
    """trialB: a config that could not be parsed made `memindex mcp` exit 2 at start, where a bad
    value (or a file broken while it runs) is a tool error saying why: now it starts, its tools
    answer the config's error, and once the file is fixed they answer as usual."""
    a = Agent(tmp_path / "a")
    a.write("MEMORY.md", "# Memory\nThe VLAN plan.\n")
    a.config_path.write_text("{ broken")
    params = StdioServerParameters(command=sys.executable, args=[*cli_args(a), "mcp"], cwd=str(tmp_path))

    async def main() -> None:
        async with Client(params) as client:
            for tool, args in (("memory_search", {"query": "VLAN"}), ("memory_status", {})):
                res = await client.call_tool(tool, args)
                text = res.content[0].text
                assert res.is_error and text.startswith(f"{tool}: invalid config: ") and "JSON5" in text, text
            a.write_config({})
            res = await client.call_tool("memory_search", {"query": "VLAN"})
            assert not res.is_error, res.content

    asyncio.run(main())


def test_stdio_from_the_null_device_ends_cleanly(tmp_path: Path) -> None:
    """helper-19: stdin from /dev/null (systemd, cron, nohup) crashed the server with a 79-line
    ExceptionGroup (the event loop cannot wait on the null device: EPERM), exit 1. Its EOF is the
    client closing stdin: exit 0, as for a pipe or a file."""
    a = Agent(tmp_path / "a")
    a.write("MEMORY.md", "# Memory\nThe VLAN plan.\n")
    r = subprocess.run([sys.executable, *cli_args(a), "mcp"], cwd=tmp_path, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "Error" not in r.stderr, r.stderr


@pytest.mark.parametrize("watch", [False, True])
def test_stdio_sigterm_stops_cleanly_with_exit_0(tmp_path: Path, watch: bool) -> None:
    """helper-h39h: a stdio `memindex mcp` died of SIGTERM (143) while `serve` and `mcp --http`
    stop cleanly with 0; with --watch its embedded workers were killed mid-work, not stopped."""
    import signal

    a = Agent(tmp_path / "a")
    for i in range(40):  # work in flight for --watch's workers when the signal comes
        a.write(f"memory/n{i}.md", f"# Note {i}\nquokka {i} note.\n")
    proc = subprocess.Popen([sys.executable, *cli_args(a), "mcp", *(["--watch"] if watch else [])], cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        ).encode() + b"\n")
        proc.stdin.flush()
        assert b'"result"' in proc.stdout.readline()  # serving; the client keeps stdin open
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        # The client still holds stdin open: the stop must not wait for it to close (helper-67 saw the
        # process wait for the client's stdin, up to 54 s, after SIGTERM; communicate() closed it).
        proc.wait(timeout=60)
        proc.stdin.close()
        err = proc.stderr.read() if proc.stderr is not None else b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err, err.decode()
    r = subprocess.run([sys.executable, *cli_args(a), "index"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr  # what was stopped mid-work is finished by the next sync
