"""The queue boundary (issue 43): every message decodes, from the bytes its real sender produced, as
its actor's typed payload; a message that does not (another version's) is dead-lettered with why;
importing the queue layer builds no broker and connects nowhere."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import dramatiq
import pytest

from tests.conftest import GGUF, Agent

REPO = Path(__file__).resolve().parents[1]


class _Recorder(dramatiq.Middleware):
    """Every message enqueued on the embedded broker, as the bytes that travel (``Message.encode``)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message, delay: int | None) -> None:
        self.sent.append(message.encode())


@pytest.fixture
def recorder(monkeypatch):
    from memindex.workers import compute
    from memindex.workers.broker import get_broker

    # Small message bounds: a long note travels in parts (write_parts).
    monkeypatch.setattr(compute, "EMBED_MSG_CHUNKS", 4)
    broker = get_broker()
    rec = _Recorder()
    broker.middleware.append(rec)
    yield rec
    broker.middleware.remove(rec)


def _decoded(raw: list[bytes]) -> dict[str, list[object]]:
    """Each recorded message decoded from its bytes as its actor's payload, by actor name."""
    from memindex.workers import wire

    out: dict[str, list[object]] = {}
    for data in raw:
        m = dramatiq.Message.decode(data)
        kind = wire.payload_type(m.actor_name)
        assert kind is not None, m.actor_name
        assert m.kwargs == {}, m  # every field is positional: what the actor's edge decodes
        payload = wire.decode(kind, m.args)
        assert wire.decode(kind, json.loads(json.dumps(list(m.args)))) == payload  # JSON round trip: the same
        out.setdefault(m.actor_name, []).append(payload)
    return out


@pytest.mark.skipif(not GGUF.exists(), reason="the local GGUF model is not in ../shared/models")
def test_every_message_decodes_from_the_bytes_its_sender_produced(tmp_path, recorder, monkeypatch):
    """Real senders, real embedded workers: a sync of notes (one long enough to travel in parts) with
    the local model, a touched note, a deleted one, a grown transcript; the batch actors' senders."""
    from memindex.pipeline.config.agents import settings_for
    from memindex.pipeline.config.settings import pinned
    from memindex.producers.enqueue import plan_now
    from memindex.producers.session_delta import check_sessions
    from memindex.workers import embedded, wire
    from memindex.workers.batch.actors import Who
    from memindex.workers.compute import compute_spec
    from memindex.workers.messages import request_resync
    from memindex.workers.sync import dispatch_plan

    a = Agent(tmp_path)
    a.memory_config({"provider": "local", "fallback": "none", "local": {"modelPath": str(GGUF)},
                     "sources": ["memory", "sessions"], "experimental": {"sessionMemory": True},
                     "sync": {"sessions": {"deltaBytes": 10**9, "deltaMessages": 1}}})
    sessions = a.state / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True)
    line = json.dumps({"type": "message", "message": {"role": "user", "content": "herons nest by the quarry"}})
    (sessions / "t.jsonl").write_text(line + "\n")
    a.write("memory/short.md", "# Short\n\nThe kumquat flowered.\n")
    a.write("memory/gone.md", "# Gone\n\nSoon deleted.\n")
    a.write("memory/long.md", "# Long\n\n" + "".join(
        f"## Part {i}\n\nParagraph {i} of the long log: the sensor in bay {i} read {i * 7} units after the "
        f"{i % 13}th calibration, and the spare {i} went to shelf {i % 5}.\n\n" for i in range(200)))
    a.index()
    note = a.workspace / "memory/short.md"
    st = note.stat()
    os.utime(note, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # same bytes: a touch
    (a.workspace / "memory/gone.md").unlink()
    a.index()
    with open(sessions / "t.jsonl", "a") as fh:
        fh.write(line.replace("herons", "kestrels") + "\n")
    assert check_sessions(a.ctx) == 1  # a delta of the transcript (index_session_delta, write_session_append)
    assert embedded.wait_idle(timeout=60)
    # A file planned, then deleted before its group is read: index_files sends its delete.
    late = a.write("memory/late.md", "# Late\n\nHere, then gone.\n")
    plan, _ = plan_now(a.ctx)
    late.unlink()
    dispatch_plan(a.ctx, plan)
    assert embedded.wait_idle(timeout=60)
    settings = settings_for(a.ctx)
    request_resync(pinned(settings), "test", force=True)  # the re-sync request actors send
    assert embedded.wait_idle(timeout=60)
    # The batch actors' own senders (an agent without batch work: each returns at once).
    who = Who(pinned(settings), compute_spec(settings))
    who.submit("t0")
    who.poll("no-such-job", "t0")
    who.finish("no-such-job", "t0")
    assert embedded.wait_idle(timeout=60)
    # Another store's first sync at the usual bounds: its reference texts travel whole (write_reference).
    from memindex.workers import compute

    monkeypatch.setattr(compute, "EMBED_MSG_CHUNKS", 256)
    b = Agent(tmp_path / "b")
    b.memory_config({"provider": "local", "fallback": "none", "local": {"modelPath": str(GGUF)}})
    b.write("memory/b.md", "# B\n\nThe quince ripened.\n")
    b.index()

    decoded = _decoded(recorder.sent)
    assert set(decoded) == {wire.route_of(t).actor_name for t in wire.handled()}, sorted(decoded)
    assert len(wire.handled()) == 15
    # The first sync's reference texts (search/reference.py), cut into parts by the small bounds
    # here and put back together by the writer: vectors for every text.
    from memindex.pipeline.search.reference import REFERENCE_HASHES
    ref = [i for p in decoded["write_parts"] for i in p.items if i.mode == "reference"]  # type: ignore[attr-defined]
    assert sorted(c.hash for i in ref for c in i.record.chunks) == sorted(REFERENCE_HASHES)
    assert all(isinstance(c.embedding, bytes) for i in ref for c in i.record.chunks)
    whole = [r for p in decoded["write_reference"] for r in p.records]  # type: ignore[attr-defined]
    assert [sorted(c.hash for c in r.chunks) for r in whole] == [sorted(REFERENCE_HASHES)]
    assert all(isinstance(c.embedding, bytes) for r in whole for c in r.chunks)
    first = [p for p in decoded["index_files"] if p.reference]  # type: ignore[attr-defined]
    assert len(first) >= 2 and all(len(p.jobs) for p in first)  # type: ignore[attr-defined]
    files = [r.path for p in decoded["write_files"] for r in p.records]  # type: ignore[attr-defined]
    assert "memory/short.md" in files and all(isinstance(c.embedding, bytes) for p in decoded["write_files"]
                                              for r in p.records for c in r.chunks)  # type: ignore[attr-defined]
    parts = [i.part for p in decoded["write_parts"] for i in p.items]  # type: ignore[attr-defined]
    assert parts and all(x is not None and x.count > 1 for x in parts)
    deletes = [k for p in decoded.get("write_deletes", []) for k in p.keys]  # type: ignore[attr-defined]
    plans = [k for p in decoded["write_plan"] for k in p.deletes]  # type: ignore[attr-defined]
    assert ("memory", "memory/gone.md") in plans and ("memory", "memory/late.md") in deletes
    assert a.search("kestrels")["results"], "the transcript's delta was indexed"


def test_an_index_files_message_of_the_version_before_the_reference_texts_decodes(tmp_path):
    """A queued IndexFiles without the ``reference`` field (sent before it existed) still decodes:
    not a plan's first group, so it sends no reference texts."""
    from memindex.pipeline.config.settings import Context
    from memindex.pipeline.index.records import FileJob
    from memindex.workers import wire

    ctx = Context("main", str(tmp_path / "c.json"), str(tmp_path), str(tmp_path / "ws"))
    new = wire.encode(wire.IndexFiles(ctx, 3, [FileJob("memory", "memory/a.md", "/x/a.md", 5, 7)], 384,
                                      reference=True))
    assert len(new) == 5 and new[4] is True
    old = wire.decode(wire.IndexFiles, json.loads(json.dumps(list(new[:4]))))
    assert old.reference is False and old.dims == 384 and old.jobs[0].path == "memory/a.md"


def test_a_message_that_does_not_decode_is_dead_lettered_with_why(agent):
    """An older version's message (another layout, keyword args): never retried, dead-lettered with a
    reason `dead-letters`/`status` show; the next sync plans its files again."""
    from memindex.pipeline.status import index_status
    from memindex.workers import embedded, queues
    from memindex.workers.broker import get_broker

    agent.write("memory/a.md", "# A\n\nThe heron waits.\n")
    agent.index()
    embedded.start()
    ctx = agent.ctx.as_dict()
    old = [dramatiq.Message(queue_name="write", actor_name="write_files", kwargs={}, options={},
                            args=(ctx, 1, [{"source": "memory", "path": "memory/a.md"}])),  # records as they were not
           dramatiq.Message(queue_name="sync", actor_name="sync_agent", args=(ctx,), options={},
                            kwargs={"force": False, "reason": "watch"})]  # an older sender's keyword args
    for m in old:
        get_broker().enqueue(m)
    assert embedded.wait_idle(timeout=30)
    dead = {d["id"]: d for d in queues.dead_letters(100)}
    for m in old:
        d = dead[m.message_id]
        # (matched loosely: an earlier test's registered secret may mask a word of it)
        assert d["retries"] == 0 and "version of memindex" in d["error"], d
        assert "the next sync plans its files again" in d["error"]
    assert "keyword arguments (force, reason)" in dead[old[1].message_id]["error"]
    assert "$[2][0]" in dead[old[0].message_id]["error"]  # where it does not decode
    summary = queues.dead_summary("main")
    assert summary["messages"] >= 2 and "version of memindex" in summary["newestError"]
    # The Markdown is the source of truth: the next sync indexes the note as it is.
    agent.write("memory/a.md", "# A\n\nThe heron caught a fish.\n")
    agent.index()
    assert [r["path"] for r in agent.search("fish")["results"]] == ["memory/a.md"]
    assert index_status(agent.settings())["files"] >= 1


def test_a_payload_the_actor_cannot_decode_cannot_be_sent():
    """The sender and the actor share one type: a field of the wrong type fails at the send's
    encode or at the actor's decode of the same type, never by guessing."""
    import msgspec

    from memindex.pipeline.config.settings import Context
    from memindex.workers import wire

    payload = wire.IndexFiles(Context("main"), "7", [])  # type: ignore[arg-type]  # a str generation
    with pytest.raises(wire.UndecodableMessage, match=r"Expected `int`, got `str` - at `\$\[1\]`"):
        wire.decode(wire.IndexFiles, wire.encode(payload))
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(["main"], wire.SyncAgent)  # a Context is an object, not a bare id


def test_importing_the_queue_layer_builds_no_broker_and_connects_nowhere(tmp_path):
    """Every workers module imported with MEMINDEX_BROKER_URL at a port that listens: nothing
    connects to it and no broker is built (dramatiq's global one included) until get_broker()."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    code = """
import importlib, pkgutil, sys
import dramatiq.broker
import memindex.workers as w
names = sorted(m.name for m in pkgutil.walk_packages(w.__path__, "memindex.workers.") if not m.name.endswith(".run"))
for name in names:
    importlib.import_module(name)
from memindex.workers import broker
print(len(names), broker._broker is None, dramatiq.broker.global_broker is None)
"""
    env = dict(os.environ, MEMINDEX_BROKER_URL=f"redis://127.0.0.1:{port}/0")
    try:
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        n, no_broker, no_global = out.stdout.split()
        assert int(n) >= 25 and no_broker == "True" and no_global == "True", out.stdout
        with pytest.raises(socket.timeout):
            listener.accept()  # nobody connected
    finally:
        listener.close()


@pytest.mark.parametrize("first", ["actors", "broker"])
def test_every_actor_is_declared_whichever_comes_first(first):
    """The actors imported before the broker is built (a worker process) or after (a process that
    sent first, then consumes): either way each is declared on it, once."""
    code = f"""
import sys
from memindex.workers import wire
from memindex.workers.broker import get_broker
if {first!r} == "broker":
    b = get_broker()
    assert not b.get_declared_actors()
import memindex.workers.actors
b = get_broker()
names = {{wire.route_of(t).actor_name for t in wire.handled()}}
print(sorted(names) == sorted(b.get_declared_actors()), len(names), get_broker() is b)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "MEMINDEX_BROKER_URL"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "15", "True"], out.stdout


def test_no_actor_is_named_outside_the_wire_module():
    """Actors are named in one table (workers/wire.py): a sender names a payload type, never an actor."""
    from memindex.workers import wire

    names = [wire.route_of(t).actor_name for t in wire.handled()]
    offenders = []
    for sub in ("pipeline", "workers", "producers"):
        for path in (REPO / sub).rglob("*.py"):
            if path.name == "wire.py" and path.parent.name == "workers":
                continue
            text = path.read_text(encoding="utf-8")
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if f'"{n}"' in text or f"'{n}'" in text]
    assert not offenders, offenders


def test_the_dict_form_of_a_record_is_what_it_was(tmp_path):
    """A message queued by the version before the wire module decodes as the same payload: the
    record layout did not change (array_like payloads keep args[0] the ctx, args[1] the generation)."""
    from memindex.pipeline.config.settings import Context
    from memindex.workers import wire

    ctx = {"agent_id": "main", "config": "/c.json", "state_dir": "/s", "workspace": "/w"}
    older = [ctx, 3, [{"source": "memory", "path": "memory/a.md", "abs_path": "/w/memory/a.md", "hash": "h",
                       "size": 1, "mtime_ns": 2, "kind": "markdown", "error": None,
                       "chunks": [{"start_line": 1, "end_line": 1, "hash": "c", "text": "t", "embedding": "AACAPw==",
                                   "cacheable": True, "context": ""}],
                       "embedding": {"provider": "p", "model": "m", "provider_key": "k", "dims": 1},
                       "cache_hits": [], "extra": None, "base_hash": None}]]
    payload = wire.decode(wire.WriteFiles, older)
    assert payload.ctx == Context("main", "/c.json", "/s", "/w") and payload.generation == 3
    assert payload.records[0].chunks[0].embedding == b"\x00\x00\x80?" and not payload.records[0].continues
    again = json.loads(json.dumps(wire.encode(payload)))
    assert again[0] == ctx and again[1] == 3 and again[2][0]["chunks"][0]["embedding"] == "AACAPw=="
