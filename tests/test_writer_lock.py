"""One writing process per store (pipeline/store/locks.py): a second process's writer waits for
the first one, names it, and gives up with a StoreError after its wait; writers close an idle
store, so `memindex index` run beside a running `memindex watch` takes its turn."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, run_cli, wait_for

HOLD = """
import sys, time
from memindex.pipeline.store.locks import set_process_label
from memindex.pipeline.store.writer import StoreWriter
set_process_label("memindex-test-holder")
w = StoreWriter(sys.argv[1], vector_enabled=False)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
w.close()
print("released", flush=True)
"""


def _hold(store, seconds: float) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(store), str(seconds)], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held", p.stderr.read()
    return p


def test_a_writer_waits_for_another_process_and_says_which(agent, caplog):
    from memindex.pipeline.store.writer import StoreWriter

    agent.write("memory/a.md", "the heron flies over the quarry\n")
    agent.index()
    store = agent.settings().store_path
    holder = _hold(store, 2.0)
    try:
        started = time.monotonic()
        with caplog.at_level("WARNING", logger="memindex.store"):
            w = StoreWriter(store, vector_enabled=False, wait_s=60)
        waited = time.monotonic() - started
        w.close()
        assert holder.wait(30) == 0 and holder.stdout.read().strip() == "released"
    finally:
        holder.kill()
    assert waited >= 1.0  # it did wait for the holder (which held the store ~2 s)
    said = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert len(said) == 1 and f"pid {holder.pid} (memindex-test-holder)" in said[0], said


def test_a_writer_gives_up_after_its_wait_with_the_holders_name(agent):
    from memindex.pipeline.errors import StoreError
    from memindex.pipeline.store.writer import StoreWriter

    agent.write("memory/a.md", "kumquat\n")
    agent.index()
    store = agent.settings().store_path
    holder = _hold(store, 60)
    try:
        with pytest.raises(StoreError) as err:
            StoreWriter(store, vector_enabled=False, wait_s=0.3)
        assert f"pid {holder.pid} (memindex-test-holder) kept it" in str(err.value)
    finally:
        holder.kill()
        holder.wait(30)
    StoreWriter(store, vector_enabled=False, wait_s=0).close()  # the holder's death freed it at once


def test_index_beside_a_running_watch_takes_its_turn(agent):
    """An OpenClaw user's habit: `memindex watch` in one terminal, `memindex index --force` in another.
    The index waits for the watcher's writer (idle: it closes the store) and finishes; the watcher
    then goes on indexing changes; the store holds every file once."""
    agent.write_config({"agents": {"defaults": {"workspace": str(agent.workspace)}}})
    for i in range(6):
        agent.write(f"memory/2026-01-0{i + 1}.md", f"# day {i}\nnote {i} about gooseberry{i}\n")
    env = dict(agent.env(), MEMINDEX_WRITER_WAIT_S="60")
    watch = subprocess.Popen([sys.executable, "-m", "memindex", "watch", "--debounce-ms", "100"], cwd=REPO, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert wait_for(lambda: len(agent.store_rows()) == 6, timeout=60)
        agent.write("memory/2026-01-07.md", "# day 6\nnote about tamarillo\n")
        assert wait_for(lambda: any("tamarillo" in r[5] for r in agent.store_rows()), timeout=60)
        out = run_cli("index", "--force", env=env, timeout=120)  # the watcher wrote a moment ago
        assert out.returncode == 0, out.stderr
        assert "indexed 7 file(s)" in out.stdout
        agent.write("memory/2026-01-08.md", "# day 7\nnote about salmonberry\n")
        assert wait_for(lambda: any("salmonberry" in r[5] for r in agent.store_rows()), timeout=60)
    finally:
        watch.terminate()
        _, err = watch.communicate(timeout=60)
    rows = agent.store_rows()
    assert len(rows) == 8 and len({r[1] for r in rows}) == 8
    assert "Traceback" not in err and "database is locked" not in err, err[-2000:]


@pytest.mark.redis
def test_a_redis_writer_is_named_by_its_command(agent, tmp_path, redis_server):
    """The Redis writer's lock named it "__main__.py" (dramatiq's child of `memindex worker`)."""
    import json

    from tests.test_pipeline_redis import _cli, _workers

    agent.write("memory/a.md", "the heron flies over the quarry\n")
    with _workers(redis_server.url, tmp_path):
        _cli(agent, redis_server.url, "index")
        lock = agent.settings().store_path.with_name("main.sqlite.writer")
        assert wait_for(lambda: lock.exists() and lock.read_text(), timeout=30)
        assert json.loads(lock.read_text())["cmd"] == "memindex worker --writer"
