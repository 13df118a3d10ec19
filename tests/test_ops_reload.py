"""A running ``memindex watch --all`` follows ``openclaw.json`` (issue 15): an agent added to
the config is watched and its files become searchable; a removed agent stops being watched.

Real parts: the ``memindex watch`` subprocess (embedded broker, in-process workers, watchdog),
the CLI's ``search`` against the real store. No embedding provider: keyword search.
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
from typing import Iterator

import pytest

from tests.conftest import REPO, run_cli, wait_for


def _write_config(path: Path, agents: list[tuple[str, Path]], *, include: bool = False, **defaults) -> None:
    """The config listing ``agents``; with ``include`` the list lives in ``agents.json5`` beside it
    (``"list": {"$include": ...}``) and only that file changes once the config exists."""
    listed = [{"id": aid, "workspace": str(ws)} for aid, ws in agents]
    cfg = {"agents": {"defaults": {"memorySearch": {"sync": {"watchDebounceMs": 200}, **defaults}},
                      "list": {"$include": "./agents.json5"} if include else listed}}
    targets = [path]
    if include:
        targets = [path.parent / "agents.json5"] + ([] if path.exists() else [path])
        targets[0].write_text(json.dumps(listed), encoding="utf-8")
    if not include or len(targets) == 2:
        path.write_text(json.dumps(cfg), encoding="utf-8")
    for target in targets:
        st = target.stat()  # a rewrite within the same mtime tick must still be seen
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def _found(env: dict, agent: str, word: str) -> bool:
    out = run_cli("--agent", agent, "search", "--json", word, env=env)
    return out.returncode == 0 and any(word in r.get("snippet", "") for r in json.loads(out.stdout)["results"])


@contextlib.contextmanager
def _watch_all(tmp_path: Path, agents: list[tuple[str, Path]], *, command: tuple[str, ...] = ("watch", "--all"),
               include: bool = False, **defaults) -> Iterator[tuple[Path, dict, Path]]:
    """`memindex watch --all` (or ``command``; embedded, config polled every 0.5 s) over a config of
    ``agents`` (``defaults``: more agents.defaults.memorySearch): yields (config path, the
    environment, the log); stopped with SIGINT afterwards."""
    config, state = tmp_path / "openclaw.json", tmp_path / "state"
    state.mkdir()
    _write_config(config, agents, include=include, **defaults)
    env = dict(os.environ, OPENCLAW_CONFIG_PATH=str(config), OPENCLAW_STATE_DIR=str(state),
               MEMINDEX_CONFIG_POLL_S="0.5")
    env.pop("MEMINDEX_BROKER_URL", None)
    log_path = tmp_path / "watch.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "memindex", "--log-level", "info", *command],
                                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield config, env, log_path
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def test_watch_picks_up_added_agents_and_drops_removed_ones(tmp_path):
    one, two = tmp_path / "ws-one", tmp_path / "ws-two"
    for ws in (one, two):
        (ws / "memory").mkdir(parents=True)
    (one / "memory" / "a.md").write_text("# One\nThe kumquat orchard is agent one's.\n")
    with _watch_all(tmp_path, [("one", one)]) as (config, env, log_path):
        assert wait_for(lambda: _found(env, "one", "kumquat"), 60), log_path.read_text()
        # A second agent appears in the config: its existing file and a new one get indexed.
        (two / "memory" / "b.md").write_text("# Two\nThe persimmon ledger is agent two's.\n")
        _write_config(config, [("one", one), ("two", two)])
        assert wait_for(lambda: "agent two added" in log_path.read_text(), 30), log_path.read_text()
        assert wait_for(lambda: _found(env, "two", "persimmon"), 60), log_path.read_text()
        (two / "memory" / "c.md").write_text("# Later\nThe quince cellar came after the reload.\n")
        assert wait_for(lambda: _found(env, "two", "quince"), 60), log_path.read_text()
        # Agent one is removed: the watcher says so and stops enqueueing its changes.
        _write_config(config, [("two", two)])
        assert wait_for(lambda: "agent one removed" in log_path.read_text(), 30), log_path.read_text()
        before = log_path.read_text().count("sync enqueued for one")
        (one / "memory" / "d.md").write_text("# Gone\nThe damson press is not watched any more.\n")
        (two / "memory" / "e.md").write_text("# Still\nThe loquat tree is still watched.\n")
        assert wait_for(lambda: _found(env, "two", "loquat"), 60), log_path.read_text()
        time.sleep(1.0)  # five debounce periods: a sync for one would have been enqueued by now
        assert log_path.read_text().count("sync enqueued for one") == before, log_path.read_text()
    text = log_path.read_text()
    assert "Traceback" not in text, text
    # Each enqueued batch is logged with its agent and how many paths changed.
    assert "sync enqueued for two: 1 changed path" in text, text


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_agent_added_in_an_included_file_is_watched(tmp_path):
    """The agent list in a ``$include``d file: adding an agent there (openclaw.json untouched) was
    not seen by a running watch until openclaw.json itself was touched."""
    one, two = tmp_path / "ws-one", tmp_path / "ws-two"
    for ws in (one, two):
        (ws / "memory").mkdir(parents=True)
    (one / "memory" / "a.md").write_text("# One\nThe kumquat orchard is agent one's.\n")
    with _watch_all(tmp_path, [("one", one)], include=True) as (config, env, log_path):
        assert wait_for(lambda: _found(env, "one", "kumquat"), 60), log_path.read_text()
        before = config.stat().st_mtime_ns
        (two / "memory" / "b.md").write_text("# Two\nThe persimmon ledger is agent two's.\n")
        _write_config(config, [("one", one), ("two", two)], include=True)
        assert config.stat().st_mtime_ns == before  # only the included file changed
        assert wait_for(lambda: "agent two added" in log_path.read_text(), 30), log_path.read_text()
        assert wait_for(lambda: _found(env, "two", "persimmon"), 60), log_path.read_text()


def test_mcp_watch_follows_the_config_like_watch_all(tmp_path):
    """``memindex mcp --watch`` watched the agents it started with for good: an agent added to the
    config was indexed only when a search named it, and a removed one stayed watched."""
    pytest.importorskip("mcp")
    one, two = tmp_path / "ws-one", tmp_path / "ws-two"
    for ws in (one, two):
        (ws / "memory").mkdir(parents=True)
    (one / "memory" / "a.md").write_text("# One\nThe kumquat orchard is agent one's.\n")
    command = ("mcp", "--http", f"127.0.0.1:{_free_port()}", "--watch")
    with _watch_all(tmp_path, [("one", one)], command=command) as (config, env, log_path):
        assert wait_for(lambda: _found(env, "one", "kumquat"), 60), log_path.read_text()
        (two / "memory" / "b.md").write_text("# Two\nThe persimmon ledger is agent two's.\n")
        _write_config(config, [("one", one), ("two", two)])
        assert wait_for(lambda: "agent two added" in log_path.read_text(), 30), log_path.read_text()
        # No MCP call was made: the server's own watcher indexed the new agent's files.
        assert wait_for(lambda: _found(env, "two", "persimmon"), 60), log_path.read_text()
        _write_config(config, [("two", two)])
        assert wait_for(lambda: "agent one removed" in log_path.read_text(), 30), log_path.read_text()
    assert "Traceback" not in log_path.read_text(), log_path.read_text()


def test_watch_without_all_names_the_agents_it_leaves_unwatched(tmp_path):
    """``memindex watch`` watches the default agent only (as every command but status and index);
    with others configured its start line says so, or their memory silently goes stale."""
    one, two = tmp_path / "ws-one", tmp_path / "ws-two"
    for ws in (one, two):
        (ws / "memory").mkdir(parents=True)
    config, state = tmp_path / "openclaw.json", tmp_path / "state"
    state.mkdir()
    _write_config(config, [("one", one), ("two", two)])
    env = dict(os.environ, OPENCLAW_CONFIG_PATH=str(config), OPENCLAW_STATE_DIR=str(state))
    env.pop("MEMINDEX_BROKER_URL", None)

    def start_line(*extra: str) -> str:
        proc = subprocess.Popen([sys.executable, "-m", "memindex", "watch", *extra], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            line = ""
            while proc.stderr is not None and "Ctrl-C" not in line:
                line = proc.stderr.readline()
                assert line, "watch exited before its start line"
            return line
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            proc.communicate(timeout=30)

    assert "watching 1 agent(s) (agent one of 2 configured; --all watches every one)," in start_line()
    assert "configured" not in start_line("--agent", "two")
    assert start_line("--all").startswith("watching 2 agent(s), ")


def test_a_broken_config_is_reported_once_per_version_not_every_poll(tmp_path, caplog):
    import logging

    from memindex.pipeline.config.settings import Context
    from memindex.producers.watcher import ConfigReload

    config = tmp_path / "openclaw.json"
    config.write_text("{}")
    ctx = Context("main", str(config), str(tmp_path), None)
    broken = {"on": True}

    def resolve() -> list[Context]:
        if broken["on"]:
            raise ValueError("invalid config: agents: unexpected end of input")
        return [ctx]

    applied: list = []
    reload = ConfigReload(ctx, resolve, applied.append, every_s=3600)
    caplog.set_level(logging.DEBUG, logger="memindex.watcher")

    def warnings() -> int:
        return sum(r.levelno == logging.WARNING and "cannot be loaded" in r.getMessage() for r in caplog.records)

    _write_config(config, [])  # a new version of the file, broken as far as resolve is concerned
    for _ in range(5):
        assert reload.check() is False
    assert warnings() == 1
    _write_config(config, [("main", tmp_path)])  # edited again, still broken: said again, once
    for _ in range(3):
        reload.check()
    assert warnings() == 2
    broken["on"] = False
    assert reload.check() is True and applied == [[ctx]]


def test_a_bad_per_agent_value_keeps_the_previous_agents_without_a_traceback(tmp_path, caplog):
    """helper-71: `maxResults: "1"` written under a running watch logged "config changed; agents now
    ..." and then a 25-line traceback ("config reload failed"): only the agent ids were checked
    before applying. Now the agents' settings are too: the one warning, nothing applied."""
    import logging

    from memindex.pipeline.config.settings import Context
    from memindex.producers.watcher import ConfigReload

    ws = tmp_path / "ws"
    ws.mkdir()
    config = tmp_path / "openclaw.json"
    _write_config(config, [("main", ws)])
    probe = Context("main", str(config), str(tmp_path), None)
    applied: list = []
    reload = ConfigReload(probe, lambda: [probe], applied.append, every_s=3600)
    caplog.set_level(logging.DEBUG, logger="memindex.watcher")
    cfg = json.loads(config.read_text())
    cfg["agents"]["list"][0]["memorySearch"] = {"query": {"maxResults": "1"}}
    config.write_text(json.dumps(cfg), encoding="utf-8")
    st = config.stat()
    os.utime(config, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert reload.check() is False and applied == []
    lines = [r.getMessage() for r in caplog.records]
    assert any("cannot be loaded" in ln and "maxResults" in ln for ln in lines), lines
    assert not any("agents now" in ln for ln in lines) and not any(r.exc_info for r in caplog.records)


def test_a_settings_edit_in_the_config_syncs_the_agent(tmp_path):
    """Changing an agent's chunking in openclaw.json under a running watch was neither applied nor
    reported ("config changed; agents now ..." and nothing else) until a file edit or a backfill."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("# One\n" + "The kumquat orchard grows. " * 200 + "\n")
    with _watch_all(tmp_path, [("one", ws)]) as (config, env, log_path):

        def chunk_tokens() -> int | None:
            out = run_cli("--agent", "one", "status", "--json", env=env)
            fp = json.loads(out.stdout)[0]["status"].get("fingerprint") or {}
            return fp.get("chunkTokens")

        assert wait_for(lambda: chunk_tokens() == 400, 60), log_path.read_text()
        cfg = json.loads(config.read_text())
        cfg["agents"]["list"][0]["memorySearch"] = {"chunking": {"tokens": 120, "overlap": 20}}
        config.write_text(json.dumps(cfg), encoding="utf-8")
        stale = json.loads(run_cli("--agent", "one", "status", "--json", env=env).stdout)[0]["status"]
        if stale.get("fingerprint", {}).get("chunkTokens") == 400:  # not rebuilt yet: status says so
            assert "chunkTokens 400, the config now says 120" in stale["configChanged"], stale
            assert stale["dirty"] is True
        st = config.stat()
        os.utime(config, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        assert wait_for(lambda: chunk_tokens() == 120, 60), log_path.read_text()
        assert "agent one's settings changed; syncing it" in log_path.read_text()


def _line(role: str, text: str) -> str:
    return json.dumps({"type": "message", "message": {"role": role, "content": text}}) + "\n"


def test_transcript_detectors_follow_the_config(tmp_path):
    """The transcript delta detector was started once per agent at start: a removed agent's kept
    polling (a traceback every second, for good), a broken config made every agent's do the same,
    and an agent added later had none (its transcripts' growth was never indexed)."""
    sessions = {"experimental": {"sessionMemory": True}, "sources": ["memory", "sessions"],
                "sync": {"watchDebounceMs": 200, "sessions": {"deltaMessages": 5, "deltaBytes": 100000}}}
    ws = {a: tmp_path / f"ws-{a}" for a in ("one", "two", "three")}
    for w in ws.values():
        (w / "memory").mkdir(parents=True)
    transcript = tmp_path / "state" / "agents" / "three" / "sessions" / "s1.jsonl"
    with _watch_all(tmp_path, [("one", ws["one"]), ("two", ws["two"])], **sessions) as (config, env, log_path):
        assert wait_for(lambda: "watching" in log_path.read_text(), 60), log_path.read_text()
        _write_config(config, [("one", ws["one"])], **sessions)
        assert wait_for(lambda: "agent two removed" in log_path.read_text(), 30), log_path.read_text()
        config.write_text("{ agents: ", encoding="utf-8")
        assert wait_for(lambda: "cannot be loaded" in log_path.read_text(), 30), log_path.read_text()
        time.sleep(4)  # four detector passes with the config broken
        text = log_path.read_text()
        assert "Traceback" not in text, text
        assert text.count("session check of one failed") <= 1 and "session check of two" not in text, text
        transcript.parent.mkdir(parents=True)
        transcript.write_text(_line("user", "hello from agent three"))
        _write_config(config, [("one", ws["one"]), ("three", ws["three"])], **sessions)
        assert wait_for(lambda: _found(env, "three", "hello"), 60), log_path.read_text()
        with open(transcript, "a", encoding="utf-8") as fh:  # grows past deltaMessages: the detector's
            for i in range(8):
                fh.write(_line("assistant" if i % 2 else "user", f"turn {i} about kumquat{i}"))
        assert wait_for(lambda: _found(env, "three", "kumquat7"), 60), log_path.read_text()
        assert "Traceback" not in log_path.read_text()


def test_the_watch_log_tells_a_disabled_agent_from_a_removed_one(tmp_path):
    """Turning an agent's memory search off logged "removed from the config", and back on "added
    to the config"; a new agent whose workspace did not exist yet listed its parent twice."""
    one, two = tmp_path / "ws-one", tmp_path / "ws-two"
    (one / "memory").mkdir(parents=True)
    (two / "memory").mkdir(parents=True)
    with _watch_all(tmp_path, [("one", one), ("two", two)]) as (config, env, log_path):
        assert wait_for(lambda: "watching" in log_path.read_text(), 60), log_path.read_text()

        def write(enabled: bool) -> None:
            cfg = json.loads(config.read_text())
            cfg["agents"]["list"][1]["memorySearch"] = {"enabled": enabled}
            config.write_text(json.dumps(cfg), encoding="utf-8")
            st = config.stat()
            os.utime(config, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))

        write(False)
        assert wait_for(lambda: "agent two disabled in the config" in log_path.read_text(), 30), log_path.read_text()
        write(True)
        assert wait_for(lambda: "agent two enabled in the config" in log_path.read_text(), 30), log_path.read_text()
        _write_config(config, [("one", one), ("two", two), ("three", tmp_path / "not-yet")])
        assert wait_for(lambda: "agent three added to the config" in log_path.read_text(), 30), log_path.read_text()
        text = log_path.read_text()
        assert "removed from the config" not in text and "agent two added" not in text, text
        line = next(ln for ln in text.splitlines() if "agent three added" in ln)
        watching = line.split("; watching ", 1)[1].split(" [")[0]
        assert len(watching.split(", ")) == len(set(watching.split(", "))), line
