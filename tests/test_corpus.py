"""memory_search's ``corpus`` (OpenClaw 2026.9: memory, sessions, all, wiki) in the library, the CLI
(``--corpus``, and ``--query``), the HTTP API and the MCP tool: one answer everywhere."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from memindex.pipeline.errors import UsageError
from memindex.pipeline.search.backend import memory_search
from tests.conftest import Agent, free_port, run_cli
from tests.test_mcp import wait_port
from tests.test_session_index import OPT_IN, msg, transcript


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> Agent:
    """A note and a session transcript that both say "kumquat"."""
    a = Agent(tmp_path_factory.mktemp("corpus"))
    a.memory_config(OPT_IN)
    a.write("MEMORY.md", "# Memory\n\nThe kumquat tree needs water on Mondays.\n")
    transcript(a, "abc.jsonl", msg("user", "where did the kumquat crate go"), msg("assistant", "to the kumquat shed"))
    a.index()
    return a


def _paths(payload: dict) -> set[tuple[str, str]]:
    return {(r["source"], r["path"]) for r in payload["results"]}


def test_library_corpus_picks_the_sources(both):
    s = both.settings()
    every = _paths(memory_search(s, "kumquat", min_score=0.0))
    assert every == {("memory", "MEMORY.md"), ("sessions", "sessions/abc.jsonl")}
    assert _paths(memory_search(s, "kumquat", min_score=0.0, corpus="all")) == every
    assert _paths(memory_search(s, "kumquat", min_score=0.0, corpus="memory")) == {("memory", "MEMORY.md")}
    assert _paths(memory_search(s, "kumquat", min_score=0.0, corpus="sessions")) == {
        ("sessions", "sessions/abc.jsonl")}
    wiki = memory_search(s, "kumquat", corpus="wiki")
    assert wiki["results"] == [] and "not indexed by memindex" in wiki["warning"] and wiki["corpus"] == "wiki"
    with pytest.raises(UsageError, match="corpus must be one of: memory, wiki, all, sessions"):
        memory_search(s, "kumquat", corpus="notes")


def test_sessions_corpus_of_an_agent_without_sessions_says_so(agent):
    agent.write("MEMORY.md", "kumquat\n")
    agent.index()
    got = memory_search(agent.settings(), "kumquat", corpus="sessions")
    assert got["results"] == [] and "sessions are not indexed" in got["warning"]


def test_cli_corpus_and_query_option(both):
    base = ("--config", str(both.config_path), "--state-dir", str(both.state), "--workspace", str(both.workspace))
    out = run_cli(*base, "search", "--json", "--min-score", "0", "--corpus", "sessions", "--query", "kumquat")
    assert out.returncode == 0, out.stderr
    assert _paths(json.loads(out.stdout)) == {("sessions", "sessions/abc.jsonl")}
    out = run_cli(*base, "search", "--corpus", "wiki", "kumquat")
    assert out.returncode == 0 and out.stdout.strip() == "No matches." and "not indexed by memindex" in out.stderr
    out = run_cli(*base, "search", "--query", "kumquat", "kumquat")
    assert out.returncode == 2 and "give the query once" in out.stderr
    out = run_cli(*base, "search", "--corpus", "notes", "kumquat")
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_http_and_mcp_take_corpus(both, tmp_path: Path):
    from mcp import Client

    base = ["-m", "memindex", "--config", str(both.config_path), "--state-dir", str(both.state),
            "--workspace", str(both.workspace)]
    port = free_port()
    proc = subprocess.Popen([sys.executable, *base, "serve", "--port", str(port)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_port(port, proc)
        url = f"http://127.0.0.1:{port}/v1/search"
        r = httpx.post(url, json={"query": "kumquat", "minScore": 0, "corpus": "memory"}, timeout=30)
        assert r.status_code == 200 and _paths(r.json()) == {("memory", "MEMORY.md")}, r.text
        r = httpx.post(url, json={"query": "kumquat", "corpus": "notes"}, timeout=30)
        assert r.status_code == 400 and "corpus must be one of" in r.text
    finally:
        proc.terminate()
        proc.wait(30)

    async def main() -> None:
        from mcp.client.stdio import StdioServerParameters

        params = StdioServerParameters(command=sys.executable, args=[*base, "mcp"], cwd=str(tmp_path))
        async with Client(params) as client:
            res = await client.call_tool("memory_search", {"query": "kumquat", "minScore": 0, "corpus": "sessions"})
            assert _paths(res.structured_content) == {("sessions", "sessions/abc.jsonl")}
            res = await client.call_tool("memory_search", {"query": "kumquat", "corpus": "wiki"})
            assert res.structured_content["results"] == []
            assert "not indexed by memindex" in res.structured_content["warning"]

    asyncio.run(main())
