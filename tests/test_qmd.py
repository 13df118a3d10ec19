"""QMD backend (F15) against the scripted stand-in ``tests/fake_qmd.py``.

The stand-in reproduces qmd 2.8.3's output shapes and its failure modes; the
real CLI is exercised in ``test_qmd_real.py`` where it is installed.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from memindex.pipeline.search.backend import FallbackSearch, clamp_injected, open_search
from memindex.pipeline.search.get import MemoryGetError, memory_get
from memindex.pipeline.search.qmd.collections import managed_collections, parse_collection_list, sanitize_name
from memindex.pipeline.search.qmd.manager import QmdManager, close_managers
from memindex.pipeline.search.qmd.parse import line_range, parse_qmd_uri, parse_search_json
from memindex.pipeline.search.qmd.runner import QmdBadOutput, QmdMissing, QmdRunner, QmdTimeout
from memindex.pipeline.search.qmd.sessions_export import export_sessions
from memindex.pipeline.search.engine import MemorySearch, SearchResult
from memindex.producers.qmd_sync import start_qmd_sync, sync_qmd_now
from tests.conftest import process_running, run_cli

FAKE = Path(__file__).with_name("fake_qmd.py")
FAKE_CMD = shlex.join([sys.executable, str(FAKE)])


# --- helpers ------------------------------------------------------------------------

def qmd_home(agent) -> Path:
    return agent.state / "agents" / agent.agent_id / "qmd"


def configure(agent, *, top: dict | None = None, **qmd) -> None:
    qmd.setdefault("command", FAKE_CMD)
    agent.write_config({"memory": {"backend": "qmd", "qmd": qmd, **(top or {})}})


def set_mode(agent, mode: str, only: list[str] | None = None) -> None:
    path = qmd_home(agent) / "xdg-config" / "fake-control.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mode": mode, **({"only": only} if only else {})}))


def calls(agent) -> list[dict]:
    path = qmd_home(agent) / "xdg-config" / "fake-calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def argvs(agent) -> list[list[str]]:
    return [c["argv"] for c in calls(agent)]


def pid_alive(pid: int, wait_s: float = 3.0) -> bool:
    """Still running after up to ``wait_s`` (SIGKILL delivery is asynchronous)?"""
    deadline = time.monotonic() + wait_s
    while process_running(pid):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(autouse=True)
def _cleanup():
    yield
    close_managers()


@pytest.fixture
def ws(agent):
    agent.write("MEMORY.md", "# Memory\n\nThe user prefers green tea.\nDeploys happen on Friday.\n")
    agent.write("memory/2026-01-05.md", "# 2026-01-05\n\nWe planned the kafka migration.\nKafka brokers need an upgrade.\n")
    outside = agent.root / "outside"
    outside.mkdir()
    (outside / "runbook.md").write_text("# Runbook\n\nRestart kafka with care.\n")
    (agent.root / "secret.md").write_text("top secret kafka\n")
    return agent


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# --- collections, env, update -------------------------------------------------------

def test_collection_names_are_sanitised_and_deduplicated(ws):
    configure(ws, paths=[{"path": "notes", "name": "Team Notes!"}, {"path": "/abs/x", "pattern": "*.md"},
                         {"path": "more", "name": "team notes"}], sessions={"enabled": True})
    cols = managed_collections(ws.settings())
    assert [c.name for c in cols] == ["memory-root-main", "memory-alt-main", "memory-dir-main",
                                      "team-notes-main", "custom-2-main", "team-notes-main-2", "sessions-main"]
    assert cols[3].path == ws.workspace / "notes" and cols[3].pattern == "**/*.md"
    assert cols[4].path == Path("/abs/x") and cols[4].pattern == "*.md"
    assert cols[6].path == qmd_home(ws) / "sessions" and cols[6].source == "sessions"
    assert sanitize_name("--Héllo World--") == "h-llo-world"
    configure(ws, includeDefaultMemory=False)
    assert managed_collections(ws.settings()) == []


def test_collection_setup_commands_and_env(ws):
    configure(ws, paths=[{"path": str(ws.root / "outside"), "name": "runbooks"}])
    mgr = QmdManager(ws.settings())
    report = mgr.update("boot", force=True)
    assert report["collections"]["added"] == ["memory-root-main", "memory-alt-main", "memory-dir-main",
                                              "runbooks-main"]
    assert report["embed"] == "skipped"  # searchMode "search" never embeds
    av = argvs(ws)
    assert av[0] == ["collection", "list", "--json"]
    assert ["collection", "add", str(ws.workspace), "--name", "memory-root-main", "--mask", "MEMORY.md"] in av
    assert ["collection", "add", str(ws.workspace), "--name", "memory-alt-main", "--mask", "memory.md"] in av
    assert ["collection", "add", str(ws.workspace / "memory"), "--name", "memory-dir-main",
            "--mask", "**/*.md"] in av
    assert ["collection", "add", str(ws.root / "outside"), "--name", "runbooks-main", "--mask", "**/*.md"] in av
    assert av[-1] == ["update"] and ["embed"] not in av
    home = qmd_home(ws)
    for c in calls(ws):
        assert c["cwd"] == str(ws.workspace)
        assert c["env"] == {"XDG_CONFIG_HOME": str(home / "xdg-config"), "QMD_CONFIG_DIR": str(home / "xdg-config"),
                            "XDG_CACHE_HOME": str(home / "xdg-cache"), "NO_COLOR": "1"}

    # A second process finds them in place: list + show, no adds.
    n = len(calls(ws))
    report = QmdManager(ws.settings()).update("boot", force=True)
    assert report["collections"]["added"] == []
    assert not any(a[:2] == ["collection", "add"] for a in argvs(ws)[n:])

    # A changed pattern rebinds that collection (remove, add); the others stay.
    configure(ws, paths=[{"path": str(ws.root / "outside"), "name": "runbooks", "pattern": "run*.md"}])
    n = len(calls(ws))
    report = QmdManager(ws.settings()).update("boot", force=True)
    assert report["collections"]["rebound"] == ["runbooks-main"]
    new = argvs(ws)[n:]
    assert ["collection", "remove", "runbooks-main"] in new
    assert ["collection", "add", str(ws.root / "outside"), "--name", "runbooks-main", "--mask", "run*.md"] in new


def _update_over_memory_collection(ws, name: str) -> dict:
    """A boot update after qmd already holds the memory dir as collection ``name``."""
    configure(ws)
    QmdRunner(ws.settings()).run(
        ["collection", "add", str(ws.workspace / "memory"), "--name", name, "--mask", "**/*.md"], timeout_ms=10_000)
    return QmdManager(ws.settings()).update("boot", force=True)


def test_path_owned_by_another_name_is_taken_over(ws):
    report = _update_over_memory_collection(ws, "old-memory")
    assert "memory-dir-main" in report["collections"]["added"]
    assert ["collection", "remove", "old-memory"] in argvs(ws)


def test_legacy_unscoped_collections_are_removed(ws):
    report = _update_over_memory_collection(ws, "memory-dir")
    assert report["collections"]["removedLegacy"] == ["memory-dir"]


def test_embed_schedule_debounce_and_backoff(ws):
    configure(ws, searchMode="query", update={"debounceMs": 60_000, "embedInterval": "1h"})
    clock = Clock()
    mgr = QmdManager(ws.settings(), clock=clock)
    assert mgr.update("boot", force=True)["embed"] == "done"
    assert argvs(ws)[-2:] == [["update"], ["embed"]]
    n = len(calls(ws))
    assert mgr.update("interval")["skipped"] == "debounced"
    assert len(calls(ws)) == n
    clock.t += 120  # past debounce, not past embedInterval
    assert mgr.update("interval")["embed"] == "skipped"
    assert argvs(ws)[-1] == ["update"]
    clock.t += 3600
    assert mgr.update("interval")["embed"] == "done"
    # A failing embed backs off instead of failing the update.
    set_mode(ws, "exit", only=["embed"])
    clock.t += 3600
    assert mgr.update("interval")["embed"].startswith("failed")
    assert mgr.embed_failures == 1 and not mgr.embed_due(force=True)
    clock.t += 61
    assert mgr.embed_due(force=True)


def test_update_failure_raises_and_is_recorded(ws):
    configure(ws)
    mgr = QmdManager(ws.settings())
    mgr.update("boot", force=True)
    set_mode(ws, "exit", only=["update"])
    with pytest.raises(Exception, match="exited with 2"):
        mgr.update("manual", force=True)
    assert "SQLITE_CORRUPT" in mgr.status()["lastError"]


def test_sync_loop_runs_on_boot_and_interval(ws):
    configure(ws, update={"interval": 150, "debounceMs": 0, "waitForBootSync": True})
    s = ws.settings()
    loop = start_qmd_sync(s)
    try:
        # waitForBootSync: the boot update is done when start returns.
        assert argvs(ws).count(["update"]) == 1
        deadline = time.monotonic() + 10
        while argvs(ws).count(["update"]) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert argvs(ws).count(["update"]) >= 3
    finally:
        loop.stop()
    # Without waitForBootSync the boot update runs in the background.
    set_mode(ws, "hang", only=["update"])
    configure(ws, update={"interval": "1h", "waitForBootSync": False, "updateTimeoutMs": 20_000})
    t0 = time.monotonic()
    loop = start_qmd_sync(ws.settings())
    try:
        assert time.monotonic() - t0 < 1.0
        deadline = time.monotonic() + 10
        while not any(c["argv"] == ["<hang>"] for c in calls(ws)) and time.monotonic() < deadline:
            time.sleep(0.05)
        hung = [c for c in calls(ws) if c["argv"] == ["<hang>"]]
        assert hung
    finally:
        loop.stop()  # kills the hanging update rather than waiting 20 s
    assert not pid_alive(hung[-1]["pid"]) and not pid_alive(hung[-1]["child_pid"])
    set_mode(ws, "ok")
    ws.write_config({})
    assert start_qmd_sync(ws.settings()) is None  # builtin backend: no qmd schedule


def test_search_does_not_update(ws):
    configure(ws)
    sync_qmd_now(ws.settings())
    n = argvs(ws).count(["update"])
    eng = open_search(ws.settings())
    for _ in range(3):
        eng.search("kafka")
    assert argvs(ws).count(["update"]) == n


# --- search -------------------------------------------------------------------------

def test_search_maps_results_and_paths(ws):
    configure(ws, paths=[{"path": str(ws.root / "outside"), "name": "runbooks"}])
    sync_qmd_now(ws.settings())
    eng = open_search(ws.settings())
    assert isinstance(eng, FallbackSearch)
    resp = eng.search("kafka")
    assert resp.backend == "qmd" and resp.provider == "qmd" and resp.mode == "search"
    by_path = {r.path: r for r in resp.results}
    assert set(by_path) == {"memory/2026-01-05.md", "qmd/runbooks-main/runbook.md"}
    r = by_path["memory/2026-01-05.md"]
    assert (r.startLine, r.endLine) == (2, 5) and r.source == "memory"
    assert "kafka migration" in r.snippet and not r.snippet.startswith("@@")
    assert r.citation == "memory/2026-01-05.md#L2-L5" and r.snippet.endswith("Source: memory/2026-01-05.md#L2-L5")
    assert argvs(ws)[-1] == ["search", "kafka", "--json", "-n", "6", "-c", "memory-root-main", "-c",
                             "memory-alt-main", "-c", "memory-dir-main", "-c", "runbooks-main"]
    # A query that looks like a flag is passed after "--".
    eng.search("-kafka")
    assert argvs(ws)[-1][-2:] == ["--", "-kafka"]
    assert eng.status()["backend"] == "qmd"


def test_retry_with_query_when_mode_rejects_flags(ws, caplog):
    configure(ws, searchMode="vsearch")
    sync_qmd_now(ws.settings())
    set_mode(ws, "unknown-flag")
    eng = open_search(ws.settings())
    with caplog.at_level(logging.WARNING):
        resp = eng.search("kafka")
    assert resp.backend == "qmd" and resp.results
    modes = [a[0] for a in argvs(ws) if a[0] in ("search", "vsearch", "query")]
    assert modes == ["vsearch", "query"]
    assert "retrying with qmd query" in caplog.text
    eng.search("tea")  # remembered: no second rejected attempt
    modes = [a[0] for a in argvs(ws) if a[0] in ("search", "vsearch", "query")]
    assert modes == ["vsearch", "query", "query"]
    assert eng.status()["qmd"]["effectiveSearchMode"] == "query"


def test_missing_collection_is_repaired_once(ws):
    configure(ws)
    sync_qmd_now(ws.settings())
    state = qmd_home(ws) / "xdg-config" / "fake-state.json"
    st = json.loads(state.read_text())
    del st["collections"]["memory-dir-main"]
    state.write_text(json.dumps(st))
    resp = open_search(ws.settings()).search("kafka")
    assert resp.backend == "qmd" and resp.results
    assert ["collection", "add", str(ws.workspace / "memory"), "--name", "memory-dir-main",
            "--mask", "**/*.md"] in argvs(ws)


def test_no_results_marker_and_empty_array(ws):
    configure(ws)
    sync_qmd_now(ws.settings())
    eng = open_search(ws.settings())
    assert eng.search("zzzz-nothing").results == []
    set_mode(ws, "noresults")
    resp = eng.search("kafka")
    assert resp.backend == "qmd" and resp.results == []


FAILURES = ["missing", "exit", "hang", "badjson", "empty"]


@pytest.mark.parametrize("failure", FAILURES)
def test_failure_falls_back_then_recovers(ws, failure, caplog):
    bin_dir = ws.root / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "qmd"
    configure(ws, command=str(wrapper), limits={"timeoutMs": 800})

    def install() -> None:
        wrapper.write_text(f"#!/bin/sh\nexec {FAKE_CMD} \"$@\"\n")
        wrapper.chmod(0o755)

    install()
    sync_qmd_now(ws.settings())
    ws.index()  # the built-in store is what answers during the outage
    clock = Clock()
    eng = open_search(ws.settings(), retry_after_s=60, clock=clock)
    assert eng.search("kafka").backend == "qmd"

    if failure == "missing":
        wrapper.unlink()
    else:
        set_mode(ws, failure, only=["search"])
    with caplog.at_level(logging.WARNING, logger="memindex.backend"):
        t0 = time.monotonic()
        first = eng.search("kafka")
        elapsed = time.monotonic() - t0
        second = eng.search("kafka")
    assert first.backend == "builtin" and second.backend == "builtin"
    assert any("kafka" in r.snippet.lower() for r in first.results)  # real answers, not an empty list
    assert first.extra["backendFallback"]["from"] == "qmd"
    kind = {"missing": "missing", "exit": "exit", "hang": "timeout", "badjson": "invalid-json",
            "empty": "invalid-json"}[failure]
    assert first.extra["backendFallback"]["kind"] == kind
    warnings = [r for r in caplog.records if "qmd backend unavailable" in r.getMessage()]
    assert len(warnings) == 1  # one warning per outage
    st = eng.status()
    assert st["backend"] == "builtin" and st["fallback"]["kind"] == kind and st["fallback"]["reason"]
    if failure == "hang":
        assert elapsed < 5  # limits.timeoutMs fired
        hung = [c for c in calls(ws) if c["argv"] == ["<hang>"]]
        assert hung and not pid_alive(hung[-1]["child_pid"])  # the whole process group was killed
    # During the cool-down qmd is not even asked.
    n = len(calls(ws))
    eng.search("kafka")
    assert len(calls(ws)) == n

    # qmd works again; after the cool-down it serves again.
    if failure == "missing":
        install()
    else:
        set_mode(ws, "ok")
    clock.t += 61
    resp = eng.search("kafka")
    assert resp.backend == "qmd" and resp.results
    assert eng.status()["backend"] == "qmd" and eng.status()["fallback"] is None


def test_status_probe_reports_missing_qmd(ws):
    configure(ws, command=str(ws.root / "no-such-qmd"))
    eng = open_search(ws.settings())
    st = eng.status(probe=True)
    assert st["backend"] == "builtin" and st["fallback"]["kind"] == "missing"


def test_the_servers_status_of_a_qmd_agent_holds_the_store_report_beside_the_backend(ws):
    """helper-24: over MCP (the OpenClaw plugin's memory_status) a qmd agent's status was only
    {backend, requestedBackend, fallback, qmd, agents}: OpenClaw printed "Indexed: 0 files", provider
    none, while `memindex status` showed the store's files and the fallback."""
    import asyncio

    from memindex.pipeline.config.settings import Context
    from memindex.producers.serve.tools import MemoryTools

    ws.index()
    configure(ws, command=str(ws.root / "no-such-qmd"))
    tools = MemoryTools(Context(None, str(ws.config_path), str(ws.state), str(ws.workspace)))
    st = asyncio.run(tools.status())
    assert st["backend"] == "builtin" and st["requestedBackend"] == "qmd" and st["fallback"]["kind"] == "missing"
    assert st["agentId"] == "main" and st["files"] == 2 and st["chunks"] >= 2 and st["scan"]["totalFiles"] == 2, st
    assert "provider" in st and "workspaceDir" in st and st["agents"] == ["main"], st


# --- limits -------------------------------------------------------------------------

def test_limits(ws):
    for i in range(10):
        ws.write(f"memory/n{i}.md", f"# Note {i}\n\n" + f"alpha topic {i} " + "filler words " * 30 + "\n")
    configure(ws, limits={"maxResults": 3, "maxSnippetChars": 40, "maxInjectedChars": 100},
              top={"citations": "off"})
    sync_qmd_now(ws.settings())
    eng = open_search(ws.settings())
    resp = eng.search("alpha")
    assert resp.backend == "qmd"
    assert 1 <= len(resp.results) <= 3
    assert argvs(ws)[-1][argvs(ws)[-1].index("-n") + 1] == "3"
    assert all(len(r.snippet) <= 40 for r in resp.results)
    assert sum(len(r.snippet) for r in resp.results) <= 100
    eng.search("alpha", max_results=2)
    assert argvs(ws)[-1][argvs(ws)[-1].index("-n") + 1] == "2"
    eng.search("alpha", max_results=50)  # never above limits.maxResults
    assert argvs(ws)[-1][argvs(ws)[-1].index("-n") + 1] == "3"
    # minScore drops weak hits.
    assert eng.search("alpha", min_score=0.99).results == []


def test_injected_clamp_keeps_citations():
    rs = [SearchResult(f"m{i}.md", 1, 2, 1.0, "x" * 50 + f"\n\nSource: m{i}.md#L1-L2", "memory",
                       citation=f"m{i}.md#L1-L2") for i in range(3)]
    out = clamp_injected(rs, 100)
    assert sum(len(r.snippet) for r in out) <= 100
    assert all(r.snippet.endswith(f"Source: {r.citation}") for r in out)


# --- scope --------------------------------------------------------------------------

def test_scope_gates_qmd_before_calling_it(ws, caplog):
    configure(ws)
    sync_qmd_now(ws.settings())
    eng = open_search(ws.settings())
    n = len(calls(ws))
    with caplog.at_level(logging.WARNING):
        resp = eng.search("kafka", session_key="agent:main:discord:group:123")
    assert resp.results == [] and "scope" in resp.warning
    assert len(calls(ws)) == n  # qmd was never run
    assert "chatType=group" in caplog.text
    assert eng.search("kafka", session_key="agent:main:discord:direct:9").results
    # memory.qmd.scope overrides memory.scope.
    configure(ws, scope={"default": "allow"}, top={"scope": {"default": "deny"}})
    assert open_search(ws.settings()).search("kafka", session_key="agent:main:x:group:1").results


# --- memory_get of qmd/ paths -------------------------------------------------------

def test_memory_get_qmd_paths(ws):
    outside = ws.root / "outside"
    (outside / "sub").mkdir()
    (outside / "sub" / "deep.md").write_text("deep\nline2\n")
    (outside / "notes.txt").write_text("not md")
    os.symlink(ws.root / "secret.md", outside / "link.md")
    os.symlink(ws.root, outside / "linkdir")
    configure(ws, paths=[{"path": str(outside), "name": "runbooks"}, {"path": "team"}])
    s = ws.settings()
    assert memory_get(s, "qmd/runbooks-main/runbook.md").text.startswith("# Runbook")
    r = memory_get(s, "qmd/runbooks-main/sub/deep.md", from_line=2, lines=1)
    assert (r.text, r.path) == ("line2", "qmd/runbooks-main/sub/deep.md")
    assert memory_get(s, "qmd/runbooks-main/missing.md").text == ""
    # Default collections resolve from the workspace, within their pattern.
    assert "green tea" in memory_get(s, "qmd/memory-root-main/MEMORY.md").text
    assert "kafka" in memory_get(s, "qmd/memory-dir-main/2026-01-05.md").text
    ws.write("team/plan.md", "plan")
    assert memory_get(s, "team/plan.md").text == "plan"  # custom collection inside the workspace
    bad = {
        "qmd/runbooks-main/../secret.md": "escapes its collection",
        "qmd/runbooks-main/sub/../../secret.md": "escapes its collection",
        "qmd/runbooks-main/link.md": "symlinks",
        "qmd/runbooks-main/linkdir/secret.md": "symlinks",
        "qmd/runbooks-main/notes.txt": "Markdown",
        "qmd/runbooks-main//etc/passwd.md": "qmd/<collection>/<relative-path>",
        "qmd/nope-main/x.md": "unknown qmd collection",
        "qmd/memory-root-main/README.md": "not part of collection",
        "qmd/runbooks-main": "qmd/<collection>/<relative-path>",
    }
    ws.write("README.md", "not memory")
    for path, why in bad.items():
        with pytest.raises(MemoryGetError) as err:
            memory_get(s, path)
        assert why in str(err.value), (path, str(err.value))
    ws.write_config({})
    with pytest.raises(MemoryGetError, match="only by the qmd backend"):
        memory_get(ws.settings(), "qmd/runbooks-main/runbook.md")


# --- sessions export ------------------------------------------------------------------

def _session(agent, name: str, turns: list[tuple[str, object]], age_days: float = 0) -> Path:
    d = agent.state / "agents" / agent.agent_id / "sessions"
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{name}.jsonl"
    lines = [json.dumps({"type": "session", "id": name})]
    for role, content in turns:
        lines.append(json.dumps({"type": "message", "message": {"role": role, "content": content}}))
    p.write_text("\n".join(lines) + "\n")
    if age_days:
        t = time.time() - age_days * 86400
        os.utime(p, (t, t))
    return p


def test_sessions_export_and_retention(ws):
    configure(ws, sessions={"enabled": True, "retentionDays": 5})
    _session(ws, "s-new", [("user", "Where is the kafka runbook?"),
                           ("assistant", [{"type": "text", "text": "In the wiki."},
                                          {"type": "tool_use", "name": "exec", "input": {"cmd": "rm -rf"}}]),
                           ("tool", "TOOL OUTPUT SECRET"), ("system", "SYSTEM PROMPT")])
    _session(ws, "s-old", [("user", "ancient kafka talk")], age_days=10)
    out = qmd_home(ws) / "sessions"
    out.mkdir(parents=True)
    (out / "s-gone.md").write_text("# Session s-gone\n\nUser: stale\n")
    rep = export_sessions(ws.settings())
    assert rep.written == ["s-new"] and rep.skipped_old == ["s-old"] and rep.deleted == ["s-gone"]
    text = (out / "s-new.md").read_text()
    assert text == "# Session s-new\n\nUser: Where is the kafka runbook?\nAssistant: In the wiki.\n"
    assert not (out / "s-old.md").exists() and not (out / "s-gone.md").exists()
    mtime = (out / "s-new.md").stat().st_mtime_ns
    rep = export_sessions(ws.settings())
    assert rep.unchanged == ["s-new"] and (out / "s-new.md").stat().st_mtime_ns == mtime
    # Aged past retention: its export goes away.
    t = time.time() - 6 * 86400
    os.utime(ws.state / "agents" / "main" / "sessions" / "s-new.jsonl", (t, t))
    assert export_sessions(ws.settings()).deleted == ["s-new"]


def test_sessions_collection_searchable_and_readable(ws):
    configure(ws, sessions={"enabled": True}, top={"citations": "off"})
    _session(ws, "chat-1", [("user", "remind me about the zeppelin launch"), ("assistant", "Zeppelin is at noon.")])
    report = sync_qmd_now(ws.settings())
    assert report["sessions"]["written"] == 1
    assert ["collection", "add", str(qmd_home(ws) / "sessions"), "--name", "sessions-main",
            "--mask", "**/*.md"] in argvs(ws)
    resp = open_search(ws.settings()).search("zeppelin")
    [r] = resp.results
    assert (r.path, r.source) == ("qmd/sessions-main/chat-1.md", "sessions")
    assert "Assistant: Zeppelin is at noon." in memory_get(ws.settings(), r.path).text


def test_export_dir_override_is_per_agent_and_leaves_other_files_alone(ws):
    """``exportDir`` is one setting for every agent: each exports into its own subdirectory. In the
    directory itself, each agent's export deleted the other's files (and any note of the user's),
    and one agent's qmd collection then served the other's transcripts."""
    from memindex.pipeline.config.settings import Context, load_settings

    exports = ws.root / "exports"
    exports.mkdir()
    (exports / "mine.md").write_text("# the user's own note\n")
    other_ws = ws.root / "ws-y"
    other_ws.mkdir()
    ws.write_config({"memory": {"backend": "qmd", "qmd": {"command": FAKE_CMD, "sessions": {
        "enabled": True, "exportDir": str(exports)}}},
        "agents": {"list": [{"id": "main", "workspace": str(ws.workspace)}, {"id": "y", "workspace": str(other_ws)}]}})
    _session(ws, "xsess", [("user", "the xylophone is main's")])
    ydir = ws.state / "agents" / "y" / "sessions"
    ydir.mkdir(parents=True)
    (ydir / "ysess.jsonl").write_text(json.dumps({"type": "message", "message": {
        "role": "user", "content": "the yodel secret is y's"}}) + "\n")
    main, y = (load_settings(Context(a, str(ws.config_path), str(ws.state), None)) for a in ("main", "y"))
    assert export_sessions(main).written == ["xsess"] and export_sessions(y).written == ["ysess"]
    export_sessions(main)  # a second round deletes nothing of the other's
    assert sorted(p.relative_to(exports).as_posix() for p in exports.rglob("*.md")) == [
        "main/xsess.md", "mine.md", "y/ysess.md"]
    [sessions] = [c for c in managed_collections(y) if c.kind == "sessions"]
    assert sessions.path == exports / "y"


# --- parsing and the runner -------------------------------------------------------------

def test_parse_search_json():
    item = {"docid": "#f22601", "score": 0.74, "file": "qmd://c/a.md", "line": 5, "snippet": "@@ -4,4 @@ x"}
    assert parse_search_json(json.dumps([item])) == [item]
    noisy = "Warning: 2 documents need embeddings [see docs]\n" + json.dumps([item]) + "\ntrailing ]"
    assert parse_search_json(noisy) == [item]
    tricky = 'prefix "[" ' + json.dumps([{"snippet": "a ] b [ c"}])
    assert parse_search_json(tricky) == [{"snippet": "a ] b [ c"}]
    assert parse_search_json("No results found.") == []
    assert parse_search_json("", "No results found above minimum score threshold.") == []
    for bad in ("", "{not json", '{"a": 1}', "[1, 2"):
        with pytest.raises(QmdBadOutput):
            parse_search_json(bad)


def test_uri_and_line_headers():
    assert parse_qmd_uri("qmd://memory-dir-main/sub/My Notes ü.md") == ("memory-dir-main", "sub/My Notes ü.md")
    assert parse_qmd_uri("qmd://c/a%20b.md?index=work") == ("c", "a b.md")
    assert parse_qmd_uri("/abs/path.md") is None
    assert line_range("@@ -4,4 @@ (3 before, 10 after)\nA\nB\n") == (4, 7, "A\nB\n")
    assert line_range("@@ -7 @@\nA") == (7, 7, "A")
    assert line_range("no header\nsecond") == (1, 2, "no header\nsecond")


def test_collection_list_parsing():
    table = ("Collections (2):\n\nmemory-root-main (qmd://memory-root-main/)\n  Pattern:  MEMORY.md\n"
             "  Files:    1\n\nnotes (qmd://notes/)\n  Path: /x\n  Mask: **/*.md\n")
    assert parse_collection_list(table) == {"memory-root-main": {"pattern": "MEMORY.md"},
                                            "notes": {"path": "/x", "pattern": "**/*.md"}}
    js = json.dumps([{"name": "a", "path": "/p", "pattern": "*.md"}])
    assert parse_collection_list(js) == {"a": {"path": "/p", "pattern": "*.md"}}
    assert parse_collection_list("No collections found. Run 'qmd collection add .'") == {}


def test_runner_timeout_kills_group_and_caps_output(ws, tmp_path):
    configure(ws)
    runner = QmdRunner(ws.settings())
    set_mode(ws, "hang")
    t0 = time.monotonic()
    with pytest.raises(QmdTimeout):
        runner.run(["search", "x"], timeout_ms=600)
    assert time.monotonic() - t0 < 5
    hung = [c for c in calls(ws) if c["argv"] == ["<hang>"]]
    assert hung and not pid_alive(hung[-1]["pid"]) and not pid_alive(hung[-1]["child_pid"])
    # Output beyond the cap is read (the child never blocks) but not kept.
    script = tmp_path / "loud.sh"
    script.write_text("#!/bin/sh\nhead -c 300000 /dev/zero | tr '\\0' 'x'\n")
    script.chmod(0o755)
    configure(ws, command=str(script))
    out = QmdRunner(ws.settings(), output_cap=1000).run(["anything"], timeout_ms=10_000)
    assert len(out.stdout) == 1000
    configure(ws, command=str(tmp_path / "nope"))
    with pytest.raises(QmdMissing):
        QmdRunner(ws.settings()).run(["status"], timeout_ms=1000)


# --- builtin selection and the CLI ------------------------------------------------------

def test_builtin_backend_is_memory_search(ws):
    eng = open_search(ws.settings())
    try:
        assert isinstance(eng, MemorySearch)
        assert eng.search("kafka").backend == "builtin"
        assert eng.status()["backend"] == "builtin"
    finally:
        eng.close()


def test_cli_search_and_status_use_qmd(ws):
    configure(ws)
    sync_qmd_now(ws.settings())
    base = ["--config", str(ws.config_path), "--state-dir", str(ws.state), "--workspace", str(ws.workspace)]
    res = run_cli(*base, "search", "--json", "kafka", timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["backend"] == "qmd" and out["results"][0]["path"] == "memory/2026-01-05.md"
    res = run_cli(*base, "status", "--json", timeout=60)
    assert res.returncode == 0, res.stderr
    st = json.loads(res.stdout)[0]["status"]  # OpenClaw's [{agentId, status, ...}]
    assert st["backend"] == "qmd" and st["qmd"]["collections"][0]["name"] == "memory-root-main"
    # qmd gone: status and search say builtin, with the reason.
    configure(ws, command=str(ws.root / "no-such-qmd"))
    st = json.loads(run_cli(*base, "status", "--json", timeout=60).stdout)[0]["status"]
    assert st["backend"] == "builtin" and st["fallback"]["kind"] == "missing"
    res = run_cli(*base, "status", timeout=60)
    assert "fallback:" in res.stdout and "qmd unavailable" in res.stdout
    assert res.stderr == "", res.stderr  # the stdout line says it; the backend's log line repeated it
    out = json.loads(run_cli(*base, "search", "--json", "kafka", timeout=60).stdout)
    assert out["backend"] == "builtin" and out["backendFallback"]["kind"] == "missing"
    # One stderr line, and it says why (the kind alone, "missing", did not name the command).
    res = run_cli(*base, "search", "kafka", timeout=60)
    assert res.returncode == 0 and res.stdout.strip()
    assert res.stderr.splitlines() == [res.stderr.strip()] and "no-such-qmd" in res.stderr, res.stderr


def test_shared_models_dir_is_linked_into_agent_cache(ws, tmp_path, monkeypatch):
    user_cache = tmp_path / "user-cache"
    (user_cache / "qmd" / "models").mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_cache))
    configure(ws)
    QmdRunner(ws.settings()).run(["status"], timeout_ms=10_000)
    link = qmd_home(ws) / "xdg-cache" / "qmd" / "models"
    assert link.is_symlink() and link.resolve() == (user_cache / "qmd" / "models").resolve()


def test_index_with_a_failing_qmd_update_exits_non_zero(ws):
    """`memindex index` printed a warning and exited 0 when qmd update failed."""
    configure(ws)
    ws.write("memory/a.md", "kafka notes\n")
    args = ("--config", str(ws.config_path), "--state-dir", str(ws.state), "--workspace", str(ws.workspace))
    assert run_cli(*args, "index").returncode == 0
    set_mode(ws, "exit", only=["update"])
    out = run_cli(*args, "index")
    assert out.returncode == 1 and "qmd update failed" in out.stderr and "Traceback" not in out.stderr, out


def test_sessions_export_strips_metadata_and_masks_secrets(ws):
    """The export is cleaned by the function the index uses: qmd's sessions collection held the
    keys pasted into a chat and OpenClaw's inbound metadata JSON verbatim."""
    configure(ws, sessions={"enabled": True})
    _session(ws, "creds", [
        ("user", "Conversation info (untrusted metadata):\n```json\n{\"sender_id\": \"+15551234567\"}\n```\n\n"
                 "deploy with OPENAI_API_KEY=sk-1234567890abcdef please"),
        ("assistant", [{"type": "text", "text": "[[reply_to_current]] Stored; ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"}])])
    export_sessions(ws.settings())
    assert (qmd_home(ws) / "sessions" / "creds.md").read_text() == (
        "# Session creds\n\nUser: deploy with OPENAI_API_KEY=sk-123…cdef please\nAssistant: Stored; ghp_Ab…6789\n")


def test_sessions_export_does_not_follow_a_symlinked_sessions_dir(ws):
    """agents/ops/sessions -> ../main/sessions: the builtin store refuses it (status says "is a
    symlink; not read"), but the export followed it and put main's transcripts in ops' qmd collection."""
    from memindex.pipeline.config.settings import Context, load_settings

    other_ws = ws.root / "ws-ops"
    other_ws.mkdir()
    ws.write_config({"memory": {"backend": "qmd", "qmd": {"command": FAKE_CMD, "sessions": {"enabled": True}}},
                     "agents": {"list": [{"id": "main", "workspace": str(ws.workspace)},
                                         {"id": "ops", "workspace": str(other_ws)}]}})
    _session(ws, "mainchat", [("user", "main's zeppelin is in hangar nineteen")])
    (ws.state / "agents" / "ops").mkdir(parents=True)
    (ws.state / "agents" / "ops" / "sessions").symlink_to("../main/sessions")
    ops = load_settings(Context("ops", str(ws.config_path), str(ws.state), None))
    rep = export_sessions(ops)
    assert rep.written == [] and rep.unchanged == []
    assert list((ws.state / "agents" / "ops" / "qmd" / "sessions").glob("*.md")) == []


def test_a_symlinked_agent_directory_gets_no_qmd(ws):
    """helper-65: with agents/ops -> main, ops' qmd home (agents/ops/qmd) was main's: the two agents
    shared one qmd index and config, and ops' searches read main's memory."""
    from memindex.pipeline.config.settings import Context, load_settings
    from memindex.pipeline.search.qmd.runner import QmdHomeRefused

    other_ws = ws.root / "ws-ops"
    other_ws.mkdir()
    ws.write_config({"memory": {"backend": "qmd", "qmd": {"command": FAKE_CMD}},
                     "agents": {"list": [{"id": "main", "workspace": str(ws.workspace)},
                                         {"id": "ops", "workspace": str(other_ws)}]}})
    (ws.state / "agents" / "main").mkdir(parents=True)
    (ws.state / "agents" / "ops").symlink_to("main")
    ops = load_settings(Context("ops", str(ws.config_path), str(ws.state), None))
    with pytest.raises(QmdHomeRefused, match="is a symlink"):
        QmdRunner(ops).run(["status"], timeout_ms=10_000)
    assert not (ws.state / "agents" / "main" / "qmd").exists()  # nothing made in main's directory
    QmdRunner(ws.settings()).prepare_dirs()  # main's own directory is fine
