"""The same sync through a real Redis broker and real `dramatiq` worker processes."""

import os
import signal

import pytest

from tests.conftest import Agent, run_cli, start_workers


def _stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except Exception:  # noqa: BLE001
            os.killpg(proc.pid, signal.SIGKILL)


def _populate(a: Agent) -> None:
    a.write("MEMORY.md", "# Memory\nThe router is an Omada ER605.\n")
    for i in range(1, 41):
        a.write(f"memory/2026-01-{(i % 28) + 1:02d}-{i}.md", f"# Day {i}\n" + f"note {i} about topic{i % 7}\n" * 30)
    a.write("memory/bad.md", b"\xff\xfe invalid utf8 \x80")


@pytest.mark.redis
def test_redis_workers_build_the_same_store_as_embedded(tmp_path, redis_server):
    embedded = Agent(tmp_path / "embedded")
    _populate(embedded)
    embedded.index()

    via_redis = Agent(tmp_path / "redis")
    _populate(via_redis)
    workers = start_workers(redis_server.url)
    writer = start_workers(redis_server.url, queues=("write",), threads=1)
    try:
        out = run_cli("--config", str(via_redis.config_path), "--state-dir", str(via_redis.state),
                      "--workspace", str(via_redis.workspace), "index",
                      env={"MEMINDEX_BROKER_URL": redis_server.url})
        assert out.returncode == 0, out.stderr
        assert "indexed 42 file(s)" in out.stdout
        q = run_cli("queues", "--json", env={"MEMINDEX_BROKER_URL": redis_server.url})
        if q.returncode == 0:  # the queues command (pipeline issue) reports an idle broker
            assert '"ready": 0' in q.stdout
    finally:
        _stop(workers)
        _stop(writer)

    assert via_redis.store_rows() == embedded.store_rows()
    assert len(embedded.store_rows()) > 40
    res = via_redis.search("Omada router")
    assert res["results"][0]["path"] == "MEMORY.md"


def test_messages_are_json_any_version_can_read():
    """The queue's encoder (msgspec) writes the JSON dramatiq's default wrote, reads what that
    wrote, and falls back to the json module for what msgspec will not take (a lone surrogate)."""
    import json

    import dramatiq
    from dramatiq.encoder import DecodeError, JSONEncoder

    from memindex.workers.broker import get_broker

    get_broker()  # installs the encoder
    from memindex.workers.broker import MessageEncoder

    enc = dramatiq.get_encoder()
    assert isinstance(enc, MessageEncoder)
    old = JSONEncoder()
    for data in ({"args": [{"text": "café ☕ 中文", "n": 2**62}, None, [1.5, True]]},
                 {"args": ["bad \udc80 name"], "kwargs": {}}):
        assert enc.decode(enc.encode(data)) == data
        assert old.decode(enc.encode(data)) == data  # a worker of an older version reads ours
        assert enc.decode(old.encode(data)) == data  # and we read its
    assert json.loads(enc.encode({"k": "v"})) == {"k": "v"}
    with pytest.raises(DecodeError):
        enc.decode(b"{not json")
