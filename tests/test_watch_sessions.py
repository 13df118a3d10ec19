"""`memindex watch` (embedded) keeps a growing transcript searchable: the detector runs there."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

from tests.conftest import REPO, wait_for


def _line(role: str, text: str) -> str:
    return json.dumps({"type": "message", "message": {"role": role, "content": text}}) + "\n"


@contextlib.contextmanager
def _watching(agent):
    """`memindex watch` for ``agent`` on the embedded broker, stopped (SIGTERM) on exit."""
    env = dict(os.environ)
    env.pop("MEMINDEX_BROKER_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memindex", "--config", str(agent.config_path), "--state-dir",
         str(agent.state), "--workspace", str(agent.workspace), "watch"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_watch_indexes_transcript_growth_past_the_delta(agent):
    agent.memory_config({"experimental": {"sessionMemory": True}, "sources": ["memory", "sessions"],
                         "sync": {"sessions": {"deltaMessages": 20, "deltaBytes": 100000}}})
    agent.write("memory/a.md", "a memory note\n")
    sessions = agent.state / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    transcript = sessions / "s1.jsonl"
    transcript.write_text(_line("user", "hello there"))
    with _watching(agent):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not agent.search("hello")["results"]:
            time.sleep(0.2)
        assert agent.search("hello")["results"], "the initial sync did not index the transcript"
        with open(transcript, "a", encoding="utf-8") as fh:
            for i in range(25):  # past deltaMessages=20
                fh.write(_line("assistant" if i % 2 else "user", f"message {i} about kumquat{i}"))
        deadline = time.monotonic() + 30
        found = []
        while time.monotonic() < deadline:
            found = agent.search("kumquat24")["results"]
            if found:
                break
            time.sleep(0.2)
        assert found and found[0]["source"] == "sessions"
        assert found[0]["path"] == "sessions/s1.jsonl"


def test_watch_removes_a_deleted_transcript(agent):
    """OpenClaw deletes a session by renaming its transcript to ``<name>.jsonl.deleted.<ts>``: under
    `memindex watch` its text stayed searchable until a one-shot `index` (the detector only looked at
    transcripts still there, and deltas never remove rows)."""
    agent.memory_config({"experimental": {"sessionMemory": True}, "sources": ["memory", "sessions"]})
    agent.write("memory/a.md", "a memory note\n")
    sessions = agent.state / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "keep.jsonl").write_text(_line("user", "the kept transcript about otters"))
    doomed = sessions / "doomed.jsonl"
    doomed.write_text(_line("user", "the marmotsecret is 4242"))
    with _watching(agent):
        assert wait_for(lambda: agent.search("marmotsecret")["results"], 60), "the initial sync did not index it"
        doomed.rename(sessions / "doomed.jsonl.deleted.2026-01-01T00-00-00.000Z")
        # Nothing else changes: no Markdown edit, no transcript growth, no interval sync.
        assert wait_for(lambda: not agent.search("marmotsecret")["results"], 30), \
            "the deleted transcript is still searchable under watch"
        assert agent.search("otters")["results"][0]["path"] == "sessions/keep.jsonl"
        sc = [r for r in agent.store_rows() if r[0] == "sessions"]
        assert {r[1] for r in sc} == {"sessions/keep.jsonl"}
