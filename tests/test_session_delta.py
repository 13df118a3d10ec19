"""The session-delta detector: thresholds, append-only deltas, rebuilds, restarts, and the soak."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from memindex.pipeline.index.records import SessionDelta
from memindex.pipeline.index.sessions import parse_extra, prepare_session_delta
from memindex.producers import session_delta
from memindex.producers.session_delta import check_sessions
from memindex.workers import embedded
from memindex.workers.wire import WriteSessionAppend, send

REPO = Path(__file__).resolve().parents[1]


def msg(role: str, text: str) -> bytes:
    return (json.dumps({"type": "message", "message": {"role": role, "content": text}}) + "\n").encode()


def msg_of_size(n: int, word: str = "pad") -> bytes:
    """One complete JSONL message line of exactly ``n`` bytes (newline included)."""
    base = msg("user", f"{word} ")
    line = msg("user", f"{word} " + "x" * (n - len(base)))
    assert len(line) == n
    return line


@pytest.fixture(autouse=True)
def _fresh_inflight():
    session_delta._inflight.clear()
    yield
    session_delta._inflight.clear()


class Sess:
    def __init__(self, agent, delta_bytes: int = 10**9, delta_messages: int = 10**6):
        self.agent = agent
        agent.memory_config({"sources": ["memory", "sessions"], "experimental": {"sessionMemory": True},
                             "sync": {"sessions": {"deltaBytes": delta_bytes, "deltaMessages": delta_messages}}})
        d = agent.state / "agents" / agent.agent_id / "sessions"
        d.mkdir(parents=True, exist_ok=True)
        self.path = d / "t.jsonl"
        self.path.write_bytes(msg("user", "opening line about herons") + msg("assistant", "herons noted"))
        agent.index()

    def append(self, data: bytes) -> None:
        with open(self.path, "ab") as fh:
            fh.write(data)

    def check(self, **kw) -> int:
        n = check_sessions(self.agent.ctx, **kw)
        assert embedded.wait_idle(timeout=30)
        return n

    def rows(self) -> list[tuple]:
        return [r for r in self.agent.store_rows() if r[0] == "sessions"]

    def full_rows(self) -> list[tuple]:
        """(rowid, id, start, end, updated_at, text) of the live chunks."""
        from memindex.pipeline.store.reader import open_reader

        r = open_reader(self.agent.settings())
        try:
            gen = r.state().live_generation
            return r.conn().execute(
                f"SELECT rowid, id, start_line, end_line, updated_at, text FROM chunks_g{gen} "
                "WHERE source = 'sessions' ORDER BY rowid").fetchall()
        finally:
            r.close()

    def extra(self) -> dict:
        from memindex.pipeline.store.reader import open_reader

        r = open_reader(self.agent.settings())
        try:
            row = r.indexed_files(r.state().live_generation)[("sessions", "sessions/t.jsonl")]
            return parse_extra(row.extra)
        finally:
            r.close()


# --- thresholds -------------------------------------------------------------------

@pytest.mark.parametrize("offset, fires", [(-1, False), (0, True), (1, True)])
def test_bytes_threshold_under_at_over(agent, offset, fires):
    s = Sess(agent, delta_bytes=2000)
    s.append(msg_of_size(2000 + offset, "kestrel"))
    assert s.check() == int(fires)
    assert any("kestrel" in r[5] for r in s.rows()) is fires


@pytest.mark.parametrize("lines, fires", [(4, False), (5, True), (6, True)])
def test_lines_threshold_under_at_over(agent, lines, fires):
    s = Sess(agent, delta_messages=5)
    s.append(b"".join(msg("user", f"short kestrel {i}") for i in range(lines)))
    assert s.check() == int(fires)
    assert any("kestrel" in r[5] for r in s.rows()) is fires


def test_lines_count_jsonl_lines_not_only_messages(agent):
    s = Sess(agent, delta_messages=5)
    s.append(json.dumps({"type": "custom", "x": 1}).encode() + b"\n" + b"\n" + b"{broken\n"
             + msg("user", "kestrel one") + msg("assistant", "kestrel two"))
    assert s.check() == 1
    assert any("kestrel one" in r[5] for r in s.rows())


def test_growth_accumulates_until_a_threshold(agent):
    s = Sess(agent, delta_messages=5)
    s.append(b"".join(msg("user", f"kestrel {i}") for i in range(3)))
    assert s.check() == 0
    s.append(b"".join(msg("user", f"kestrel {i}") for i in range(3, 5)))
    assert s.check() == 1
    assert s.check() == 0  # indexed: nothing pending any more
    assert s.extra()["session"]["indexed_bytes"] == s.path.stat().st_size


def test_flush_indexes_growth_below_thresholds(agent):
    s = Sess(agent, delta_messages=50)
    s.append(msg("user", "a lone kestrel"))
    assert s.check() == 0
    assert s.check(flush=True) == 1
    assert any("lone kestrel" in r[5] for r in s.rows())


# --- append-only deltas ---------------------------------------------------------------

def test_append_only_growth_indexes_only_the_delta(agent):
    s = Sess(agent, delta_messages=10)
    s.append(b"".join(msg("user" if i % 2 else "assistant", f"early turn {i} " + "words " * 40)
                      for i in range(30)))
    assert s.check() == 1
    before = s.full_rows()
    indexed_lines = s.extra()["session"]["indexed_lines"]
    assert indexed_lines == 32

    reads: list[int] = []
    import memindex.pipeline.index.sessions as si

    orig = si.read_transcript

    def spy(data, start_line=1):
        reads.append(start_line)
        return orig(data, start_line)

    si.read_transcript = spy
    try:
        s.append(b"".join(msg("user", f"late turn {i} about ospreys") for i in range(12)))
        assert s.check() == 1
    finally:
        si.read_transcript = orig
    assert reads == [indexed_lines + 1]  # read from the indexed offset only

    after = s.full_rows()
    assert after[: len(before)] == before  # earlier chunks untouched: same rowids, ids, timestamps
    new = after[len(before):]
    assert new and all("ospreys" in r[5] and "early turn" not in r[5] for r in new)
    jsonl = s.path.read_text().split("\n")
    assert new[0][2] == indexed_lines + 1 and new[-1][3] == len(jsonl) - 1
    for _, _, start, end, _, text in new:
        assert text.split("\n")[0].removeprefix("User: ") in jsonl[start - 1]
        assert text.split("\n")[-1].removeprefix("User: ") in jsonl[end - 1]
    extra = s.extra()
    assert extra["turns"] == 2 + 30 + 12
    assert agent.search("ospreys")["results"][0]["source"] == "sessions"
    assert agent.search("herons")["results"][0]["path"] == "sessions/t.jsonl"


def test_a_duplicate_delta_is_applied_once(agent):
    s = Sess(agent, delta_messages=2)
    s.append(msg("user", "kestrel a") + msg("user", "kestrel b"))
    row = s.extra()
    from memindex.pipeline.store.reader import open_reader

    r = open_reader(agent.settings())
    try:
        gen = r.state().live_generation
        base = r.indexed_files(gen)[("sessions", "sessions/t.jsonl")].hash
    finally:
        r.close()
    delta = SessionDelta("sessions", "sessions/t.jsonl", str(s.path), row["session"]["indexed_bytes"],
                         row["session"]["indexed_lines"] + 1, base, row)
    rec = prepare_session_delta(agent.settings(), delta).record
    assert rec.base_hash == base
    for _ in range(2):
        send(WriteSessionAppend(agent.ctx, gen, [rec]))
    assert embedded.wait_idle(timeout=30)
    assert sum("kestrel a" in r[5] for r in s.rows()) == 1
    # The detector, racing the same delta, does not append it again either.
    assert s.check() == 0
    assert sum("kestrel a" in r[5] for r in s.rows()) == 1


def test_in_flight_work_is_not_enqueued_twice(agent, monkeypatch):
    s = Sess(agent, delta_messages=2)
    s.append(msg("user", "kestrel a") + msg("user", "kestrel b"))
    import dramatiq

    from memindex.workers import wire
    from memindex.workers.broker import get_broker

    name = wire.route_of(wire.IndexSessionDelta).actor_name

    class Lose(dramatiq.Middleware):
        """Counts the deltas sent, and loses them before their actor runs (as a lost message)."""

        sent = 0

        def after_enqueue(self, broker, message, delay):
            Lose.sent += message.actor_name == name

        def before_process_message(self, broker, message):
            if message.actor_name == name:
                raise dramatiq.middleware.SkipMessage("lost by the test")

    lose = Lose()
    get_broker().middleware.append(lose)
    try:
        assert check_sessions(agent.ctx) == 1
        assert check_sessions(agent.ctx) == 0  # still in flight
        monkeypatch.setattr(session_delta, "INFLIGHT_TTL_S", 0.0)
        assert check_sessions(agent.ctx) == 1  # a lost message is re-sent after the TTL
        assert embedded.wait_idle(timeout=30)
    finally:
        get_broker().middleware.remove(lose)
    assert Lose.sent == 2


def test_partial_last_line_waits_for_its_newline(agent):
    s = Sess(agent, delta_messages=2)
    whole = msg("user", "kestrel complete")
    partial = msg("assistant", "kestrel finished later")
    s.append(whole + msg("user", "filler") + partial[:20])
    assert s.check() == 1
    assert not any("finished later" in r[5] for r in s.rows())
    s.append(partial[20:] + msg("user", "one more"))
    assert s.check() == 1
    rows = [r for r in s.rows() if "finished later" in r[5]]
    assert rows and rows[0][2] == 5  # header 1-2, then 3, 4, and the completed line is 5


def test_appended_chunks_get_vectors(agent):
    from memindex.pipeline.embeddings.embedder import reset_services

    reset_services()
    agent.memory_config({"provider": "hash", "sources": ["memory", "sessions"],
                         "experimental": {"sessionMemory": True}, "sync": {"sessions": {"deltaMessages": 2}}})
    d = agent.state / "agents" / "main" / "sessions"
    d.mkdir(parents=True)
    p = d / "t.jsonl"
    p.write_bytes(msg("user", "the heron colony"))
    agent.index()
    with open(p, "ab") as fh:
        fh.write(msg("user", "ospreys nest on the pylon") + msg("assistant", "osprey nest noted"))
    assert check_sessions(agent.ctx) == 1
    assert embedded.wait_idle(timeout=30)
    from memindex.pipeline.store.reader import open_reader

    r = open_reader(agent.settings())
    try:
        gen = r.state().live_generation
        rows = r.conn().execute(f"SELECT start_line, embedding IS NOT NULL FROM chunks_g{gen} "
                                "WHERE source = 'sessions' ORDER BY start_line").fetchall()
    finally:
        r.close()
    assert rows == [(1, 1), (2, 1)]
    res = agent.search("osprey nest")
    assert res["mode"] == "hybrid" and res["results"][0]["startLine"] == 2
    reset_services()


# --- rebuilds ----------------------------------------------------------------------------

def test_truncation_triggers_a_rebuild(agent):
    s = Sess(agent, delta_messages=3)
    s.append(b"".join(msg("user", f"kestrel {i}") for i in range(5)))
    assert s.check() == 1
    with open(s.path, "r+b") as fh:  # same inode, shorter
        fh.truncate(0)
        fh.write(msg("user", "a fresh start with puffins"))
    assert s.check() == 1
    rows = s.rows()
    assert [(r[2], r[3]) for r in rows] == [(1, 1)] and "puffins" in rows[0][5]
    assert s.extra()["turns"] == 1


def test_replaced_transcript_is_rebuilt(agent):
    s = Sess(agent, delta_messages=3)
    tmp = s.path.with_suffix(".tmp")
    tmp.write_bytes(s.path.read_bytes().replace(b"herons", b"egrets") + msg("user", "and more egrets"))
    os.replace(tmp, s.path)  # new inode, longer: looks like growth unless the inode is checked
    assert s.check(flush=True) == 1
    texts = " ".join(r[5] for r in s.rows())
    assert "egrets" in texts and "herons" not in texts


def test_rewritten_head_in_place_is_rebuilt(agent):
    s = Sess(agent, delta_messages=1)
    data = s.path.read_bytes().replace(b"herons", b"egrets")
    with open(s.path, "r+b") as fh:  # same inode, same prefix length, grown
        fh.write(data + msg("user", "egrets again"))
    assert s.check() == 1
    texts = " ".join(r[5] for r in s.rows())
    assert "egrets again" in texts and "herons" not in texts


# --- state across restarts ------------------------------------------------------------------

def test_delta_state_survives_a_restart(agent):
    s = Sess(agent, delta_messages=5)
    s.append(b"".join(msg("user", f"kestrel {i}") for i in range(5)))
    assert s.check() == 1
    indexed = s.extra()["session"]
    assert indexed["indexed_bytes"] == s.path.stat().st_size
    assert indexed["indexed_lines"] == 7 and indexed["inode"] == s.path.stat().st_ino
    # A new process: nothing in memory, everything from the store.
    embedded.stop()
    session_delta._inflight.clear()
    from memindex.pipeline.config import agents

    agents._cache.clear()
    s.append(b"".join(msg("user", f"falcon {i}") for i in range(4)))
    assert s.check() == 0  # 4 < 5 lines since the *stored* offset
    s.append(msg("user", "falcon 4"))
    assert s.check() == 1
    assert sum("falcon" in r[5] for r in s.rows()) == 1


def test_nothing_before_the_first_sync(agent):
    agent.memory_config({"sources": ["memory", "sessions"], "experimental": {"sessionMemory": True}})
    d = agent.state / "agents" / "main" / "sessions"
    d.mkdir(parents=True)
    (d / "t.jsonl").write_bytes(msg("user", "x") * 100)
    assert check_sessions(agent.ctx) == 0


def test_new_transcript_is_indexed_by_the_detector(agent):
    s = Sess(agent)
    (s.path.parent / "second.jsonl").write_bytes(msg("user", "second transcript about lynxes"))
    assert s.check() == 1
    assert agent.search("lynxes")["results"][0]["path"] == "sessions/second.jsonl"


# --- the soak, shortened ----------------------------------------------------------------------

def _soak_module():
    spec = importlib.util.spec_from_file_location("session_soak", REPO / "bench" / "session_soak.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_soak_10s_search_keeps_answering_and_ends_fully_indexed(tmp_path):
    report = _soak_module().run_soak(tmp_path, duration=10, rate=10, poll=0.5, search_every=0.2)
    print(report.summary())
    assert report.search_errors == []
    assert report.search_latencies and max(report.search_latencies) < 0.2
    assert report.detector_checks >= 10 and report.enqueued >= 2
    assert report.confirmed == report.messages == 100
    assert report.fully_indexed
    # Lag is bounded by the 50-line threshold at 10 messages/s, plus indexing.
    assert max(report.lags) < 10
