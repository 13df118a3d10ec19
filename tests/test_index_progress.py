"""The index command's wait with a progress bar (issue 19): event-driven, one read connection."""

from __future__ import annotations

from memindex.producers.enqueue import sync_and_wait
from tests.conftest import module_server
from tests.provider_server import ProviderServer

server = module_server(ProviderServer)


def _openai_at(agent, server) -> None:
    """The agent embeds with the openai flavour of the fake server, no fallback."""
    agent.write_config({"agents": {"defaults": {"workspace": str(agent.workspace), "memorySearch": {
        "provider": "openai", "fallback": "none",
        "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-test-123"}}}}})


def _interrupt_once_embedding(cmd: list[str], env: dict, server, times: int = 1):
    """Run ``cmd``, SIGINT it once an embedding request has reached ``server`` (``times`` times,
    0.2 s apart, as an impatient user does): (proc, out, err)."""
    import signal
    import subprocess
    import time

    from tests.conftest import wait_for

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert wait_for(lambda: server.requests, 60, step=0.05), "no embedding request was made"
        for i in range(times):
            if i:
                time.sleep(0.2)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, out, err


def test_progress_wait_reports_every_file_done_and_returns_when_idle(agent):
    for i in range(40):
        agent.write(f"memory/2026-01-{i % 28 + 1:02d}-{i}.md", f"note {i} about lanterns\n" * 30)
    calls: list[tuple[int, int]] = []
    counts = sync_and_wait(agent.ctx, progress=lambda done, total: calls.append((done, total)), timeout=120)
    assert counts["to_index"] == 40
    assert calls and calls[-1] == (40, 40)  # the last redraw, after the queues drained
    assert all(total == 40 for _, total in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)  # never goes backwards
    assert len(agent.search("lanterns", max_results=50)["results"]) == 40  # idle means written


def test_progress_wait_with_nothing_to_do_draws_nothing(agent):
    agent.write("memory/a.md", "alpha\n")
    agent.index()
    calls: list[tuple[int, int]] = []
    counts = sync_and_wait(agent.ctx, progress=lambda done, total: calls.append((done, total)), timeout=60)
    assert counts["to_index"] == 0 and calls == []


def test_ctrl_c_during_index_says_what_it_left(agent):
    """Ctrl-C used to end `memindex index` with exit 130 and not a word."""
    import os
    import signal
    import subprocess
    import sys
    import time

    for i in range(3000):
        agent.write(f"memory/n{i:04d}.md", f"note {i} " * 300 + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "memindex", "--config", str(agent.config_path), "--state-dir",
                             str(agent.state), "--workspace", str(agent.workspace), "index"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    store = agent.settings().store_path
    deadline = time.monotonic() + 60
    while not store.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # the writer has begun: into the sync
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        import pytest

        pytest.skip("the index finished before the interrupt")
    assert proc.returncode == 130 and "interrupted" in err and "memindex index" in err, (out, err)
    assert "Traceback" not in err


def _thirty_notes_and_a_slow_provider(agent, server) -> list[str]:
    """30 notes, an openai endpoint answering in 3 s: the `memindex index` command line."""
    import sys

    _openai_at(agent, server)
    for i in range(30):
        agent.write(f"memory/2026-01-{i % 28 + 1:02d}-{i}.md", f"# Note {i}\nThe lantern {i} hangs by door {i}.\n")
    server.always("openai", {"kind": "delay", "seconds": 3.0})
    return [sys.executable, "-m", "memindex", "--config", str(agent.config_path), "--state-dir", str(agent.state),
            "index"]


def test_ctrl_c_with_embeddings_in_flight_prints_one_line_and_the_next_index_finishes(agent, fresh_server):
    """The stopping in-process workers used to add an INFO line per embedding request they handed
    back ("the message is retried later"), which the exiting CLI never does."""
    import os
    import subprocess

    cmd = _thirty_notes_and_a_slow_provider(agent, fresh_server)
    env = dict(os.environ)
    proc, out, err = _interrupt_once_embedding(cmd, env, fresh_server)
    assert proc.returncode == 130, (out, err)
    assert err.splitlines() == ["interrupted: what was written is kept; `memindex index` finishes the rest"], err
    # helper-18: status then said "N keyword-only (vectors failed; the next sync retries)"; nothing failed.
    from memindex.pipeline.status import format_status, index_status

    st = index_status(agent.settings())
    assert st["vectorsPending"] == st["vectorsQueued"] > 0, st
    text = format_status(st)
    assert "vectors failed" not in text and f"{st['vectorsQueued']} keyword-only until their queued vectors" in text
    fresh_server.reset()  # a fast provider again: the next index does the rest
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(agent.search("lantern", max_results=50)["results"]) == 30


def test_progress_counts_nothing_done_before_the_writer_has_the_plan(agent):
    """The bar sat at 100% from the start of a cold 8,000-file index and said 100% when
    interrupted: before the writer recorded the plan, no pending rows meant "all written".
    Here another process holds the store's writer lock for a while, so the plan waits."""
    import subprocess
    import sys

    from memindex.pipeline.store.locks import writer_lock_path

    agent.write("memory/first.md", "first note\n")
    agent.index()
    for i in range(30):
        agent.write(f"memory/n{i}.md", f"note {i} about quinces\n")
    lock = writer_lock_path(agent.settings().store_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
         "print('held', flush=True)\ntime.sleep(2.5)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        calls: list[tuple[int, int]] = []
        counts = sync_and_wait(agent.ctx, progress=lambda done, total: calls.append((done, total)), timeout=120)
    finally:
        holder.wait(30)
    assert counts["to_index"] == 30 and calls[-1] == (30, 30)
    done = [d for d, _ in calls]
    assert done == sorted(done), done  # it read 30, 30, ... then fell back once the plan landed
    assert done[0] == 0, done


def test_ctrl_c_of_index_on_redis_says_the_workers_go_on(agent, redis_server):
    """On Redis the queued work is the workers' (they finished 120 pending files without another
    `index`), but Ctrl-C said "`memindex index` finishes the rest", as for the in-process default."""
    import os
    import signal
    import subprocess
    import sys
    import time

    agent.write("memory/a.md", "alpha\n")
    proc = subprocess.Popen([sys.executable, "-m", "memindex", "--config", str(agent.config_path), "--state-dir",
                             str(agent.state), "--workspace", str(agent.workspace), "index"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, MEMINDEX_BROKER_URL=redis_server.url))
    time.sleep(3)  # enqueued; no worker runs, so it waits
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, (out, err)
    assert "interrupted: the work already queued is still done by the workers" in err, err
    import redis

    redis.Redis.from_url(redis_server.url).flushall()  # the queued work is this test's only


def test_ctrl_c_of_watch_with_work_in_flight_says_it_is_finishing_it(agent, fresh_server):
    """In-process, `watch` finishes what is in flight on Ctrl-C (up to --drain-timeout): it said
    nothing for up to 30 s, then "the message is retried later" per message, which nothing does."""
    import os
    import sys

    _openai_at(agent, fresh_server)
    for i in range(10):
        agent.write(f"memory/2026-01-{i + 1:02d}.md", f"# Note {i}\nThe lantern {i} hangs by door {i}.\n")
    fresh_server.always("openai", {"kind": "delay", "seconds": 1.0})
    proc, out, err = _interrupt_once_embedding(  # the start-up sync's requests wait on the slow provider
        [sys.executable, "-m", "memindex", "--config", str(agent.config_path), "--state-dir", str(agent.state),
         "watch", "--drain-timeout", "3"], dict(os.environ), fresh_server)
    assert proc.returncode == 0 and "Traceback" not in err, (out, err)
    assert "stopping: finishing the work in flight (up to 3 s; Ctrl-C again to stop now" in err, err
    assert err.rstrip().endswith("stopped") and "retried later" not in err, err


def test_watch_re_embeds_keyword_only_files_once_the_provider_is_back(agent, fresh_server):
    """The provider failed, the notes were stored keyword-only; it came back, and `watch` never
    asked it again until a note was edited (intervalMinutes 0, the default)."""
    import os
    import signal
    import subprocess
    import sys

    from memindex.pipeline.status import index_status
    from tests.conftest import run_cli, wait_for

    _openai_at(agent, fresh_server)
    for i in range(3):
        agent.write(f"memory/2026-01-{i + 1:02d}.md", f"# Note {i}\nThe lantern {i} hangs by door {i}.\n")
    fresh_server.always("openai", {"status": 401, "message": "bad key"})
    base = ["--config", str(agent.config_path), "--state-dir", str(agent.state)]
    assert run_cli(*base, "index").returncode == 1
    assert index_status(agent.settings())["vectorsPending"] == 3
    fresh_server.always("openai", None)  # the key works again; no note changes
    proc = subprocess.Popen([sys.executable, "-m", "memindex", *base, "watch", "--no-initial-sync"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, MEMINDEX_VECTOR_RETRY_S="1"))
    try:
        assert wait_for(lambda: index_status(agent.settings())["vectorsPending"] == 0, 60, step=0.2), \
            index_status(agent.settings())["problems"]
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    res = agent.search("lantern door")
    assert res["mode"] == "hybrid" and len(res["results"]) == 3, res


def test_ctrl_c_twice_prints_the_one_line_and_no_traceback(agent, fresh_server):
    """helper-53: a second Ctrl-C while the in-process workers stopped printed a traceback ending
    in KeyboardInterrupt (from dramatiq's join in the CLI's clean-up)."""
    import os

    cmd = _thirty_notes_and_a_slow_provider(agent, fresh_server)
    proc, out, err = _interrupt_once_embedding(cmd, dict(os.environ), fresh_server, times=2)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "interrupted: what was written is kept" in err, err


def test_the_bar_moves_on_between_files(capsys, monkeypatch):
    """helper-53: the bar was drawn only when a file finished, so between two big files (30-45 s on
    a local model) its elapsed time and ETA stood still and it looked hung."""
    import time

    from memindex.producers.cli import progress

    monkeypatch.setattr(progress, "REFRESH_S", 0.2, raising=False)
    bar = progress.Progress("indexing", True)
    bar(0, 5)
    time.sleep(1.1)
    bar(0, 5)  # no file done since: redrawn all the same, with the time that passed
    drawn = capsys.readouterr().err  # (before close: closing draws the elapsed time anyway)
    bar.close()
    assert "00:01" in drawn, drawn


def test_ctrl_c_during_status_index_says_what_it_left(agent, fresh_server):
    """`status --index` syncs as `index` does, and Ctrl-C during its sync ended with exit 130 and
    not a word about what the interruption left."""
    import os

    cmd = _thirty_notes_and_a_slow_provider(agent, fresh_server)
    cmd[cmd.index("index")] = "status"
    cmd.append("--index")
    proc, out, err = _interrupt_once_embedding(cmd, dict(os.environ), fresh_server)
    assert proc.returncode == 130, (out, err)
    assert err.splitlines() == ["interrupted: what was written is kept; `memindex index` finishes the rest"], err


def test_sync_and_wait_says_a_timeout_and_files_that_failed(agent, fresh_server):
    """helper-57: sync_and_wait(ctx, timeout=...) returned the counts of a finished sync when its
    timeout passed (index_status right after: 0 files), and a sync whose every embedding was refused
    returned the same counts as a good one; only index_status told either."""
    import pytest

    import memindex
    from tests.conftest import wait_for

    _thirty_notes_and_a_slow_provider(agent, fresh_server)
    with pytest.raises(memindex.IndexTimeout, match=r"did not finish within 0.5 s: \d+ file\(s\) still") as exc:
        memindex.sync_and_wait(agent.ctx, timeout=0.5)
    assert exc.value.pending > 0
    fresh_server.reset()  # the queued work goes on and finishes
    assert wait_for(lambda: memindex.index_status(agent.settings())["files"] == 30, 120, step=0.2)

    agent.write("memory/good.md", "# Good\na lantern that embeds\n")
    counts = memindex.sync_and_wait(agent.ctx, timeout=120)
    assert counts["to_index"] == 1 and "failed" not in counts, counts

    agent.write("memory/extra.md", "# Extra\nanother lantern\n")
    fresh_server.always("openai", {"status": 401, "message": "bad key"})
    counts = memindex.sync_and_wait(agent.ctx, timeout=120)
    assert counts["to_index"] == 1 and counts["failed"] == 1, counts


def test_an_interrupted_force_rebuild_is_finished_by_the_next_sync_not_dropped(agent, fresh_server):
    """helper-20: the next ordinary sync (`index`, a `watch` tick) planned the live generation, and the
    writer dropped the `--force` rebuild under way without a word; it is continued and promoted."""
    import os
    import subprocess

    from memindex.pipeline.store.reader import open_reader

    def state():
        r = open_reader(agent.settings())
        try:
            return r.state()
        finally:
            r.close()

    import signal

    from tests.conftest import wait_for

    cmd = _thirty_notes_and_a_slow_provider(agent, fresh_server)
    agent.write_config({"agents": {"defaults": {"workspace": str(agent.workspace), "memorySearch": {
        "provider": "openai", "fallback": "none", "remote": {"baseUrl": fresh_server.base("openai"),
                                                              "apiKey": "sk-test-123"},
        "cache": {"enabled": False}}}}})  # (the rebuild embeds again: there is time to stop it)
    fresh_server.reset()
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=120).returncode == 0
    assert (state().live_generation, state().building_generation) == (1, None)
    fresh_server.always("openai", {"kind": "delay", "seconds": 3.0})
    fresh_server.requests.clear()
    proc = subprocess.Popen([*cmd, "--force"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:  # stopped once the rebuild's plan is written and its first embedding asked for
        assert wait_for(lambda: state().building_generation == 2 and len(fresh_server.requests) >= 2, 60, step=0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert state().building_generation == 2, state()  # the rebuild, under way
    fresh_server.reset()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    st = state()
    assert (st.live_generation, st.building_generation) == (2, None), st
    assert len(agent.search("lantern", max_results=50)["results"]) == 30


def test_backfill_wait_says_when_the_store_it_waits_on_was_replaced(agent, fresh_server):
    """helper-20: with its store moved aside under it (quarantined as damaged), `backfill --wait`
    read the new, empty store's pending set and said "done in 1.4s" with 301 files never written."""
    import os
    import subprocess

    from tests.conftest import wait_for

    cmd = _thirty_notes_and_a_slow_provider(agent, fresh_server)
    agent.write_config({"agents": {"defaults": {"workspace": str(agent.workspace), "memorySearch": {
        "provider": "openai", "fallback": "none", "remote": {"baseUrl": fresh_server.base("openai"),
                                                              "apiKey": "sk-test-123"},
        "cache": {"enabled": False}}}}})  # (the rebuild embeds again: there is time to replace the store)
    fresh_server.reset()
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=120).returncode == 0
    fresh_server.always("openai", {"kind": "delay", "seconds": 3.0})
    fresh_server.requests.clear()
    store = agent.settings().store_path
    backfill = [*cmd[:-1], "backfill", "--force", "--wait", "--timeout", "120"]
    proc = subprocess.Popen(backfill, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert wait_for(lambda: len(fresh_server.requests) >= 2, 60, step=0.05)  # planned, embedding
        for suffix in ("", "-wal", "-shm"):  # what quarantine() does
            if os.path.exists(f"{store}{suffix}"):
                os.replace(f"{store}{suffix}", f"{store}.corrupt-1{suffix}")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (out, err)
    assert "done in" not in out and "its store was replaced while it ran" in out + err, (out, err)
