"""The QMD backend against the real ``qmd`` CLI (npm ``@tobilu/qmd@2.8.3`` under Bun).

``scripts/install-qmd.sh`` installs it and ``.ci/run`` exports its wrapper as
``MEMINDEX_QMD_COMMAND``; otherwise ``qmd`` on PATH is used. Without a
working qmd these tests skip, saying why.

Offline, ``qmd embed`` / ``qmd query`` block while downloading their GGUF
models. ``HF_ENDPOINT`` points those downloads at a local socket that accepts
and never answers, so the hang is the same on every machine (with or without
internet) and no traffic leaves the loopback interface.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from memindex.pipeline.search.backend import open_search
from memindex.pipeline.search.get import memory_get
from memindex.pipeline.search.qmd.collections import parse_collection_show
from memindex.pipeline.search.qmd.manager import QmdManager, close_managers
from memindex.pipeline.search.qmd.runner import QmdRunner
from tests.conftest import proc_stat

def _qmd_command() -> tuple[str | None, str]:
    """(command, reason it is unusable or '')."""
    cmd = os.environ.get("MEMINDEX_QMD_COMMAND") or shutil.which("qmd")
    if not cmd:
        return None, ("no qmd CLI: MEMINDEX_QMD_COMMAND is unset and `qmd` is not on PATH "
                      "(run scripts/install-qmd.sh; .ci/run does)")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XDG_CONFIG_HOME=tmp, QMD_CONFIG_DIR=tmp, XDG_CACHE_HOME=tmp, NO_COLOR="1")
        try:
            res = subprocess.run([*shlex.split(cmd), "status"], capture_output=True, text=True, env=env,
                                 timeout=30, cwd=tmp)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"qmd CLI {cmd!r} does not run: {exc}"
    if res.returncode != 0:
        # e.g. exit 139 when qmd runs on Node 20 (its SQLite binding segfaults): it needs Bun or Node >= 22.
        why = (" (a segfault: on Node 20 qmd's SQLite binding crashes; run it under Bun or Node >= 22)"
               if res.returncode in (-11, 139) else "")
        return None, f"qmd CLI {cmd!r} `status` exited {res.returncode}{why}: {(res.stderr or res.stdout)[-300:]}"
    return cmd, ""


QMD, WHY_NOT = _qmd_command()
if QMD is None:
    pytestmark = pytest.mark.skip(reason=WHY_NOT + (" [CI=true]" if os.environ.get("CI") else ""))


class BlackHole:
    """A loopback HTTP endpoint that accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self._stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def real(agent, monkeypatch):
    hole = BlackHole()
    monkeypatch.setenv("HF_ENDPOINT", hole.url)
    monkeypatch.setenv("MODEL_ENDPOINT", hole.url)
    # qmd refuses LLM work when CI=true (query exits 1 at once); test it as production runs it.
    monkeypatch.delenv("CI", raising=False)
    agent.write("MEMORY.md", "# Memory\n\nThe user prefers green tea.\nDeploys happen on Friday.\n")
    agent.write("memory/2026-01-05.md",
                "# 2026-01-05\n\nWe planned the kafka migration.\nKafka brokers need an upgrade.\n")
    outside = agent.root / "outside"
    outside.mkdir()
    (outside / "runbook.md").write_text("# Runbook\n\nRestart the zookeeper ensemble before kafka.\n")
    (outside / "skip.txt").write_text("zookeeper text file, not indexed\n")
    agent.outside = outside
    yield agent
    close_managers()
    hole.close()
    _assert_no_qmd_left(agent)


def configure(agent, **qmd) -> None:
    qmd.setdefault("command", QMD)
    qmd.setdefault("paths", [{"path": str(agent.outside), "name": "runbooks", "pattern": "*.md"}])
    agent.write_config({"memory": {"backend": "qmd", "qmd": qmd}})


def _assert_no_qmd_left(agent, wait_s: float = 3.0) -> None:
    """No live process still runs with this agent's qmd home in its environment."""
    marker = str(agent.state / "agents").encode()
    deadline = time.monotonic() + wait_s
    while True:
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    if marker not in fh.read():
                        continue
            except OSError:
                continue
            fields = proc_stat(int(pid))
            if fields is None or fields[0] == "Z":
                continue
            left.append(pid)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"qmd processes left running: {left}"


def test_real_collections_in_agent_xdg_home(real):
    configure(real, update={"commandTimeoutMs": 20_000, "updateTimeoutMs": 20_000})
    s = real.settings()
    mgr = QmdManager(s)
    t0 = time.monotonic()
    report = mgr.update("boot", force=True)
    boot_s = time.monotonic() - t0
    assert report["collections"]["added"] == ["memory-root-main", "memory-alt-main", "memory-dir-main",
                                              "runbooks-main"]
    assert report["collections"]["errors"] == [] and report["embed"] == "skipped"
    runner = QmdRunner(s)
    expect = {"memory-root-main": (real.workspace, "MEMORY.md"),
              "memory-alt-main": (real.workspace, "memory.md"),
              "memory-dir-main": (real.workspace / "memory", "**/*.md"),
              "runbooks-main": (real.outside, "*.md")}
    for name, (path, pattern) in expect.items():
        info = parse_collection_show(runner.run(["collection", "show", name], timeout_ms=20_000).stdout)
        assert (Path(info["path"]), info["pattern"]) == (path, pattern), name
    home = real.state / "agents" / "main" / "qmd"
    assert (home / "xdg-cache" / "qmd" / "index.sqlite").exists()
    assert "runbooks-main" in (home / "xdg-config" / "index.yml").read_text()  # qmd's config is per agent
    # A second boot finds everything in place.
    report = QmdManager(s).update("boot", force=True)
    assert report["collections"]["added"] == [] and report["collections"]["rebound"] == []
    assert boot_s < 25


def test_real_search_mode_maps_workspace_paths_and_lines(real):
    configure(real, update={"commandTimeoutMs": 20_000, "updateTimeoutMs": 20_000},
              limits={"timeoutMs": 15_000})
    s = real.settings()
    QmdManager(s).update("boot", force=True)
    eng = open_search(s)
    t0 = time.monotonic()
    resp = eng.search("kafka")
    search_s = time.monotonic() - t0
    assert resp.backend == "qmd", resp.warning
    by_path = {r.path: r for r in resp.results}
    assert "memory/2026-01-05.md" in by_path
    r = by_path["memory/2026-01-05.md"]
    assert 1 <= r.startLine <= 3 <= r.endLine and "kafka" in r.snippet.lower()
    assert r.citation == f"memory/2026-01-05.md#L{r.startLine}-L{r.endLine}"
    resp = eng.search("zookeeper")
    assert [x.path for x in resp.results] == ["qmd/runbooks-main/runbook.md"]  # .txt not indexed
    assert "zookeeper" in memory_get(s, "qmd/runbooks-main/runbook.md").text
    # A new file shows up after the producers' update, not before.
    real.write("memory/2026-01-06.md", "# 2026-01-06\n\nThe capybara sanctuary visit.\n")
    assert eng.search("capybara").results == []
    QmdManager(s).update("interval", force=True)
    assert [x.path for x in eng.search("capybara").results] == ["memory/2026-01-06.md"]
    assert eng.status()["backend"] == "qmd"
    assert search_s < 10


def test_real_query_mode_hangs_offline_times_out_and_falls_back(real):
    configure(real, searchMode="query",
              update={"commandTimeoutMs": 20_000, "updateTimeoutMs": 20_000, "embedTimeoutMs": 1500},
              limits={"timeoutMs": 1500})
    s = real.settings()
    real.index()  # the built-in store that answers during the outage
    mgr = QmdManager(s)
    t0 = time.monotonic()
    report = mgr.update("boot", force=True)  # `qmd embed` waits for a model download: timed out
    assert report["updated"] and report["embed"].startswith("failed") and "timed out" in report["embed"]
    assert time.monotonic() - t0 < 25
    eng = open_search(s, manager=mgr, retry_after_s=60)
    t0 = time.monotonic()
    resp = eng.search("kafka")
    elapsed = time.monotonic() - t0
    assert resp.backend == "builtin"
    assert resp.extra["backendFallback"]["kind"] == "timeout"
    assert any("kafka" in r.snippet.lower() for r in resp.results)
    assert elapsed < 8  # 1.5 s qmd timeout + the built-in search
    st = eng.status()
    assert st["backend"] == "builtin" and "timed out" in st["fallback"]["reason"]
    _assert_no_qmd_left(real)  # the killed query took its process group with it


def test_real_vsearch_without_vectors_answers_empty(real):
    # Observed with qmd 2.8.3: vsearch over an index with no vectors returns [] at once
    # (it loads the embedding model only when there are vectors to compare).
    configure(real, searchMode="vsearch", update={"commandTimeoutMs": 20_000, "updateTimeoutMs": 20_000,
                                                  "embedTimeoutMs": 1000}, limits={"timeoutMs": 5000})
    s = real.settings()
    mgr = QmdManager(s)
    mgr.update("boot", force=True)
    resp = open_search(s, manager=mgr).search("kafka")
    assert resp.backend == "qmd", resp.extra
    assert resp.results == []


def test_real_query_under_ci_flag_exits_and_falls_back(real, monkeypatch):
    # With CI=true qmd 2.8.3 refuses LLM operations: `qmd query` exits 1 instead of hanging.
    monkeypatch.setenv("CI", "true")
    configure(real, searchMode="query", update={"commandTimeoutMs": 20_000, "updateTimeoutMs": 20_000},
              limits={"timeoutMs": 10_000})
    s = real.settings()
    real.index()
    mgr = QmdManager(s)
    mgr.ensure_collections()
    resp = open_search(s, manager=mgr).search("kafka")
    assert resp.backend == "builtin"
    assert resp.extra["backendFallback"]["kind"] == "exit"
    assert "disabled in CI" in resp.extra["backendFallback"]["reason"]
