"""The OpenClaw memory plugin (integrations/openclaw) inside the real ``openclaw`` CLI from npm.

For each pinned release (the current 2026.9 and a late 2026.3) a fresh HOME gets an onboard-style
``openclaw.json``, the plugin is installed from the folder (``openclaw plugins install -l``), which
selects it for ``plugins.slots.memory``, and ``openclaw gateway run`` starts. The tools are then
called through the gateway's own tool invocation (``POST /tools/invoke``), the route OpenClaw uses
for a tool call outside a model turn, through the same tool registry and slot as an agent turn.

The note searched for exists only in the workspace memindex is given (``mcp --workspace``), never in
OpenClaw's own: a hit can only come from memindex's store. With a command that cannot start, the
tool answers OpenClaw's ``unavailable`` shape with the reason; one that hangs, at the plugin's
deadline; and the next call after memindex can start again is answered again. One gateway per
release (starting one takes ~30 s on two cores), so the cases share it.

``scripts/install-openclaw.sh`` installs OpenClaw, a Node it accepts and the plugin's npm
dependencies under ``$MEMINDEX_TOOLS`` (default ``~/.cache/memindex-tools``), once; later runs reuse
them. Without npm these tests skip locally and fail under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / "scripts" / "install-openclaw.sh"
TOKEN = "plugin-test-token"
NOTE_WORD = "quixotic-kumquat"

# (release, the builtin memory_search hit's fields in order, memory_get's fields for an excerpt)
RELEASES = {
    # memory-core 2026.9.6's `openclaw memory search --json` hit, read off the real CLI: ... snippet, source,
    # provenance {originClass, sessionKind, observedAt}; its tool adds corpus and citation.
    "2026.9.6": (["path", "startLine", "endLine", "score", "snippet", "source", "provenance", "corpus", "citation"],
                 ["status", "text", "path", "from", "lines"]),
    "2026.3.31": (["path", "startLine", "endLine", "score", "snippet", "source", "citation"],
                  ["text", "path"]),
}

pytestmark = pytest.mark.slow


def _need(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} [CI=true]")
    pytest.skip(what)


def _install(version: str) -> tuple[str, str]:
    """(node binary, openclaw.mjs) for ``version``, installed once into the tools cache."""
    if shutil.which("npm") is None:
        _need("npm not found: the OpenClaw plugin tests install the real openclaw CLI from npm")
    try:
        res = subprocess.run(["bash", str(INSTALL), version], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        _need(f"installing openclaw@{version} took over 15 minutes")
    if res.returncode != 0:
        _need(f"scripts/install-openclaw.sh {version} failed: {res.stderr[-800:]}")
    node, cli = res.stdout.strip().splitlines()[-1].split(" ", 1)
    return node, cli


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    """``openclaw gateway run`` in a fresh HOME, with the plugin installed and configured."""

    def __init__(self, version: str, home: Path, memdir: Path, plugin_config: dict, start: bool = True) -> None:
        self.node, self.cli = _install(version)
        self.memdir = memdir
        self.home, self.port = home, _free_port()
        self.workspace = home / "workspace"
        (self.workspace / "memory").mkdir(parents=True)
        (self.workspace / "MEMORY.md").write_text("# Memory\n\nNothing about fruit here.\n")
        state = home / ".openclaw"
        state.mkdir()
        self.config_path = state / "openclaw.json"
        # What `openclaw onboard` writes for a local gateway (no model credentials: tools only).
        self.config_path.write_text(json.dumps({
            "agents": {"defaults": {"workspace": str(self.workspace)}},
            "gateway": {"mode": "local", "port": self.port, "bind": "loopback",
                        "auth": {"mode": "token", "token": TOKEN}},
        }, indent=2))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
        self.env.update(HOME=str(home), NO_COLOR="1",
                        PATH=f"{Path(self.node).parent}{os.pathsep}{self.env.get('PATH', '')}")
        flags = self.openclaw("plugins", "install", "--help").stdout
        extra = [f for f in ("--force", "--accept-capabilities") if f in flags]  # 2026.9 asks for consent
        res = self.openclaw("plugins", "install", "-l", *extra, str(REPO / "integrations" / "openclaw"))
        assert res.returncode == 0, res.stdout + res.stderr
        cfg = json.loads(self.config_path.read_text())
        assert cfg["plugins"]["slots"]["memory"] == "memindex", cfg["plugins"]  # installing selected the slot
        cfg["plugins"]["entries"]["memindex"]["config"] = plugin_config
        self.config_path.write_text(json.dumps(cfg, indent=2))
        self.log = open(home / "gateway.log", "w")
        self.proc: subprocess.Popen | None = None
        if not start:  # the CLI alone (`openclaw memory ...`): no gateway
            return
        self.proc = subprocess.Popen([self.node, self.cli, "gateway", "run", "--port", str(self.port)],
                                     env=self.env, cwd=home, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def openclaw(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.node, self.cli, *args], env=self.env, cwd=self.home,
                              capture_output=True, text=True, timeout=180)

    def invoke(self, tool: str, args: dict, session_key: str = "agent:main:main", timeout: float = 60) -> dict:
        body = json.dumps({"tool": tool, "args": args, "sessionKey": session_key}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/tools/invoke", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            answer = json.loads(resp.read())
        assert answer.get("ok") is True, answer
        result = answer["result"]
        # OpenClaw's jsonResult: the payload as JSON text for the model, and as details.
        assert json.loads(result["content"][0]["text"]) == result["details"]
        return result["details"]

    def wait_ready(self, deadline_s: float = 180) -> None:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                pytest.fail(f"openclaw gateway exited {self.proc.returncode}: {self.tail()}")
            try:
                self.ready_answer = self.invoke("memory_get", {"path": "MEMORY.md"}, timeout=30)
                if "error" not in self.ready_answer:  # memindex started (a cold start takes seconds)
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(1)
        pytest.fail(f"openclaw gateway not answering /tools/invoke after {deadline_s}s: "
                    f"{getattr(self, 'ready_answer', None)} {self.tail()}")

    def tail(self) -> str:
        self.log.flush()
        return (self.home / "gateway.log").read_text(errors="replace")[-3000:]

    def memindex_children(self) -> list[int]:
        out = subprocess.run(["pgrep", "-f", "--", f"memindex mcp --workspace {self.memdir}"],
                             capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def _wrapper(tmp_path: Path, memdir: Path) -> tuple[Path, Path]:
    """A `memindex` command whose start the test controls: ``memindex mcp`` on this workspace, or,
    per the mode file, an exit with a reason on stderr ("fail") or a process that never answers ("hang")."""
    mode, script = tmp_path / "memindex-mode", tmp_path / "memindex-wrapper"
    script.write_text(f"""#!/bin/sh
case "$(cat '{mode}' 2>/dev/null)" in
  fail) echo "2026-11-02 10:00:00,000 INFO memindex.sync: sync main: generation 1" >&2
        echo "error: cannot open the memory index (test-made failure)" >&2; exit 3;;
  hang) exec sleep 3600;;
esac
exec '{sys.executable}' -m memindex "$@" --workspace '{memdir}'
""")
    script.chmod(0o755)
    return script, mode


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_memory_slot_through_the_gateway(version: str, tmp_path: Path) -> None:
    hit_fields, get_fields = RELEASES[version]
    memdir = tmp_path / "memindex-workspace"
    (memdir / "memory").mkdir(parents=True)
    (memdir / "memory" / "2026-11-02.md").write_text(
        f"# Garage\n\nThe {NOTE_WORD} router lives in the garage rack, VLAN 42.\nAsk Mara before rebooting it.\n")
    command, mode = _wrapper(tmp_path, memdir)
    deadline_ms = 8000
    gw = Gateway(version, tmp_path / "home", memdir, {"command": str(command), "timeoutMs": deadline_ms,
                                                       "startTimeoutMs": 15000})
    try:
        gw.wait_ready()
        children = gw.memindex_children()
        assert children, f"the gateway did not start `memindex mcp`: {gw.ready_answer} {gw.tail()}"

        # The first search schedules the index build; the note appears once it is indexed.
        end = time.monotonic() + 60
        while True:
            found = gw.invoke("memory_search", {"query": f"{NOTE_WORD} router", "maxResults": 3})
            if found["results"] or time.monotonic() > end:
                break
            time.sleep(0.5)
        assert found["results"], found
        hit = found["results"][0]
        # The builtin's fields in its order (2026.9 adds the partial scores the search computed after
        # `score`, and the chunk's provenance after `source`).
        partial = [k for k in hit if k in ("vectorScore", "textScore")]
        assert list(hit) == hit_fields[:4] + partial + hit_fields[4:], hit
        assert not partial or "corpus" in hit_fields, hit
        assert hit["path"] == "memory/2026-11-02.md" and hit["source"] == "memory"
        if "provenance" in hit_fields:  # memory-core's record of a workspace memory file
            note = memdir / "memory" / "2026-11-02.md"
            assert hit["provenance"] == {"originClass": "agent", "sessionKind": "unknown",
                                         "observedAt": note.stat().st_mtime_ns // 1_000_000}, hit
        assert NOTE_WORD in hit["snippet"] and 1 <= hit["startLine"] <= 3 <= hit["endLine"]
        # A direct session: citations on, as the builtin decides for `citations: auto`.
        assert hit["citation"].startswith("memory/2026-11-02.md#L") and hit["snippet"].endswith(hit["citation"])
        for key in ("provider", "citations"):
            assert key in found, found
        assert "disabled" not in found and "unavailable" not in found

        got = gw.invoke("memory_get", {"path": hit["path"], "from": 3, "lines": 1})
        assert list(got)[:len(get_fields)] == get_fields, got
        assert got["text"].startswith(f"The {NOTE_WORD} router") and got["path"] == hit["path"]
        # OpenClaw's own workspace does not have the note: the answer came from memindex.
        assert not (gw.workspace / hit["path"]).exists()

        if "corpus" in hit_fields:  # 2026.9's corpus argument is accepted (passed on when memindex takes it)
            scoped = gw.invoke("memory_search", {"query": f"{NOTE_WORD} router", "corpus": "memory"})
            assert [r["path"] for r in scoped["results"]][:1] == ["memory/2026-11-02.md"], scoped
        refused = gw.invoke("memory_get", {"path": "../outside.md"})
        assert refused["text"] == "" and "path rejected" in refused["error"], refused

        # memindex dies and cannot start again: OpenClaw's unavailable shape, with the reason.
        mode.write_text("fail")
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        down = gw.invoke("memory_search", {"query": f"{NOTE_WORD} router"})
        assert time.monotonic() - started < deadline_ms / 1000 + 5
        assert down["results"] == [] and down["disabled"] is True and down["unavailable"] is True, down
        assert "test-made failure" in down["error"] and down["warning"] and down["action"], down
        assert "INFO" not in down["error"], down  # memindex's reason, not its progress log
        failed = gw.invoke("memory_get", {"path": "MEMORY.md"})
        assert failed["text"] == "" and "test-made failure" in failed["error"], failed

        # memindex starts but never answers: the call ends at the deadline, never hangs.
        mode.write_text("hang")
        started = time.monotonic()
        hung = gw.invoke("memory_search", {"query": f"{NOTE_WORD} router"})
        elapsed = time.monotonic() - started
        assert hung["unavailable"] is True and f"within {deadline_ms} ms" in hung["error"], hung
        if "corpus" in hit_fields:
            assert hung["timedOut"] is True and hung["timeoutMs"] == deadline_ms, hung
        print(f"hung call answered in {elapsed:.1f}s: {hung['error']}")
        assert deadline_ms / 1000 - 0.5 <= elapsed < deadline_ms / 1000 + 5, elapsed

        # Back to normal: once the hung start is given up (startTimeoutMs), a call starts memindex again.
        mode.unlink()
        end = time.monotonic() + 60
        while True:
            again = gw.invoke("memory_search", {"query": f"{NOTE_WORD} router"})
            if again["results"] or time.monotonic() > end:
                break
            time.sleep(1)
        assert again["results"] and again["results"][0]["path"] == "memory/2026-11-02.md", again

        # memindex alive but hung (stopped): the call ends at the deadline and the child is dropped
        # (ended), so the next call starts a fresh one instead of timing out again, forever.
        stopped = gw.memindex_children()
        assert stopped, gw.tail()
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            hung = gw.invoke("memory_search", {"query": f"{NOTE_WORD} router"})
            assert hung["unavailable"] is True and f"within {deadline_ms} ms" in hung["error"], hung
            assert time.monotonic() - started < deadline_ms / 1000 + 5
            started = time.monotonic()
            revived = gw.invoke("memory_search", {"query": f"{NOTE_WORD} router"})
            assert revived["results"] and revived["results"][0]["path"] == "memory/2026-11-02.md", revived
            print(f"answered {time.monotonic() - started:.1f}s after the hung call by a fresh memindex")
            end = time.monotonic() + 15
            while any(pid in gw.memindex_children() for pid in stopped) and time.monotonic() < end:
                time.sleep(0.2)
            assert not any(pid in gw.memindex_children() for pid in stopped), "the hung memindex was left running"
        finally:
            for pid in stopped:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    finally:
        gw.stop()
    # The child is the gateway's: stopped with it.
    deadline = time.monotonic() + 15
    while gw.memindex_children() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not gw.memindex_children(), "memindex mcp outlived the gateway"


def test_plugin_node_tests(tmp_path: Path) -> None:
    """The plugin's own tests (node's test runner): payload shapes, the deadline against real
    processes, a real ``memindex mcp`` (this interpreter's) through the plugin on both API
    generations, and the plugin's ``url`` mode against a running ``memindex mcp --http`` with a token."""
    node, _cli = _install("2026.9.6")  # builds the plugin too
    exe = Path(sys.executable).parent / "memindex"
    if not exe.exists():
        pytest.skip(f"no memindex console script beside {sys.executable}")
    (tmp_path / "ws" / "memory").mkdir(parents=True)
    (tmp_path / "ws" / "memory" / "2026-02-01.md").write_text("# Farm\n\nThe quince orchard needs netting.\n")
    (tmp_path / "openclaw.json").write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "ws")}}}))
    port = _free_port()
    server_env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
    server = subprocess.Popen([str(exe), "--config", str(tmp_path / "openclaw.json"), "--state-dir", str(tmp_path / "state"),
                               "mcp", "--http", f"127.0.0.1:{port}"], env=dict(server_env, MEMINDEX_TOKEN="s3cret"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _run_node_tests(node, exe, port)
    finally:
        server.terminate()
        server.wait(30)


def _run_node_tests(node: str, exe: Path, port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert time.monotonic() < deadline, "memindex mcp --http did not listen"
        time.sleep(0.2)
    env = dict(os.environ, MEMINDEX_COMMAND=str(exe), MEMINDEX_MCP_URL=f"http://127.0.0.1:{port}/mcp",
               MEMINDEX_TEST_TOKEN="s3cret", MEMINDEX_TEST_WRONG_TOKEN="not-it")
    plugin = REPO / "integrations" / "openclaw"
    files = sorted(str(p) for p in (plugin / "dist" / "test").glob("*.test.js"))
    assert files, "the plugin build produced no tests"
    res = subprocess.run([node, "--test", "--test-reporter=tap", *files], cwd=plugin, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "# fail 0" in res.stdout and "# skipped 0" in res.stdout, res.stdout[-2000:]


def _json_out(res: subprocess.CompletedProcess) -> dict:
    """A command's --json answer: stdout from its first "{" (plugin log lines may precede it)."""
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return json.loads(res.stdout[res.stdout.index("{"):])


def test_memory_cli_speaks_for_memindex(tmp_path: Path) -> None:
    """`openclaw memory status|search|index` and `openclaw status --all` through the real CLI
    answer from memindex's store, not memory-core's (which stays loaded as the dreaming sidecar and
    keeps its own `memory` commands unless the slot's plugin registers the root first); `openclaw
    memindex ...` is the same commands under the plugin's own name. No gateway: each command is a
    one-shot process that starts memindex and must exit when done."""
    memdir = tmp_path / "memindex-workspace"
    (memdir / "memory").mkdir(parents=True)
    note = memdir / "memory" / "2026-11-02.md"
    note.write_text(f"# Garage\n\nThe {NOTE_WORD} router lives in the garage rack, VLAN 42.\n")
    command, _mode = _wrapper(tmp_path, memdir)
    gw = Gateway("2026.9.6", tmp_path / "home", memdir, {"command": str(command), "startTimeoutMs": 120000,
                                                         "timeoutMs": 120000}, start=False)
    try:
        # Never indexed: the one-shot search builds the index itself (memindex only schedules it, and
        # the command ends its child on exit) and answers, without the "being built" warning.
        first = gw.openclaw("memory", "search", f"{NOTE_WORD} router")
        assert first.returncode == 0, first.stdout + first.stderr
        assert "memory/2026-11-02.md" in first.stdout and "No matches" not in first.stdout, first.stdout + first.stderr
        assert "being built" not in first.stdout + first.stderr, first.stdout + first.stderr

        indexed = gw.openclaw("memory", "index", "--force")
        assert indexed.returncode == 0, indexed.stdout + indexed.stderr
        assert "Memory index updated (main): 1 files indexed" in indexed.stdout, indexed.stdout + indexed.stderr

        status = _json_out(gw.openclaw("memory", "status", "--json"))
        # memindex's own store and workspace: OpenClaw's builtin would say its agent database and ~/workspace.
        assert status["store"] == str(gw.home / ".openclaw" / "memindex" / "main.sqlite"), status
        assert status["workspace"] == str(memdir) and status["files"] == 1 and status["chunks"] >= 1, status
        assert status["dirty"] is False and status["provider"] == "none" and status["model"] == "fts-only", status

        found = _json_out(gw.openclaw("memory", "search", f"{NOTE_WORD} router", "--json"))
        hit = found["results"][0]
        assert hit["path"] == "memory/2026-11-02.md" and NOTE_WORD in hit["snippet"], found
        assert hit["provenance"]["originClass"] == "agent" and hit["provenance"]["observedAt"] == int(
            note.stat().st_mtime_ns // 1_000_000), hit

        text = gw.openclaw("memindex", "status")
        assert text.returncode == 0, text.stdout + text.stderr
        assert "Memory Search (main) · memindex" in text.stdout and "Indexed: 1/1 files" in text.stdout, text.stdout
        assert f"Store: {status['store']}" in text.stdout and "Dirty: no" in text.stdout, text.stdout

        # `openclaw status --all` asks the slot's memory runtime (the plugin's search manager), and
        # the one-shot process still exits: the manager's close ends the child outside a gateway.
        overview = _json_out(gw.openclaw("status", "--json", "--all"))
        memory = overview["memory"]
        assert memory["files"] == 1 and memory["custom"]["engine"] == "memindex", memory
        assert memory["dbPath"] == status["store"] and overview["memoryPlugin"]["slot"] == "memindex", overview
    finally:
        gw.stop()
    assert not gw.memindex_children(), "a CLI command left memindex mcp running"
