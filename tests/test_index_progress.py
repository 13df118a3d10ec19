"""The index command's wait with a progress bar (issue 19): event-driven, one read connection."""

from __future__ import annotations

from memindex.producers.enqueue import sync_and_wait


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
                            env=dict(os.environ, MEMINDEX_RESIDENT="off"))
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
