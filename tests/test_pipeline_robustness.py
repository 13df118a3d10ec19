"""Bounded memory for big backfills, and search that never waits for the writer."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from tests.conftest import REPO, Agent

BACKFILL_RSS = r"""
import sys
from memindex.pipeline.config.settings import Context
from memindex.producers import backfill

root = sys.argv[1]
ctx = Context("main", None, root + "/state", root + "/workspace")
b = backfill.enqueue(ctx)
assert backfill.wait(b, timeout=120)
assert b.counts["to_index"] == int(sys.argv[2]), b.counts
from memindex.workers import embedded
embedded.stop()
for line in open("/proc/self/status"):
    if line.startswith("VmHWM"):
        print(int(line.split()[1]))
"""


def _daily_logs(root, n: int) -> None:
    import datetime

    mem = root / "workspace" / "memory"
    mem.mkdir(parents=True)
    (root / "state").mkdir()
    day = datetime.date(1990, 1, 1)
    for i in range(n):
        d = day + datetime.timedelta(days=i)
        (mem / f"{d.isoformat()}.md").write_text(
            f"# {d}\n\n- note {i} about topic{i % 97} and project{i % 13}\n- met user{i % 31}\n")


def _peak_rss_kb(root, n: int) -> int:
    out = subprocess.run([sys.executable, "-c", BACKFILL_RSS, str(root), str(n)], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().splitlines()[-1])


def test_peak_rss_of_a_10000_file_backfill_is_within_1_5x_of_1000(tmp_path):
    """Embedded default, so producer, workers and writer all count in one process."""
    _daily_logs(tmp_path / "small", 1_000)
    _daily_logs(tmp_path / "big", 10_000)
    small = _peak_rss_kb(tmp_path / "small", 1_000)
    big = _peak_rss_kb(tmp_path / "big", 10_000)
    assert big <= 1.5 * small, f"peak RSS {big} kB for 10,000 files vs {small} kB for 1,000"


def test_search_answers_while_the_writer_holds_a_long_transaction(agent: Agent):
    from memindex.pipeline.store import db
    from memindex.pipeline.search.engine import MemorySearch

    for i in range(40):
        agent.write(f"memory/2026-01-{i % 28 + 1:02d}-{i}.md", f"note {i} about topic{i % 5}\n")
    agent.index()
    settings = agent.settings()
    warm = MemorySearch(settings)
    warm.search("topic3")  # an already-open reader (the runtime's usual case)
    writer = db.connect(settings.store_path)
    writer.execute("BEGIN IMMEDIATE")  # what StoreWriter holds while it writes
    writer.execute("DELETE FROM chunks_g1")  # uncommitted: readers must neither see it nor wait for it
    latencies: list[float] = []
    errors: list[BaseException] = []

    def searcher(eng: MemorySearch) -> None:
        try:
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                t = time.perf_counter()
                res = eng.search("topic3")
                latencies.append(time.perf_counter() - t)
                assert len(res.results) > 0
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    cold = MemorySearch(settings)  # a reader opened while the write transaction is open
    try:
        threads = [threading.Thread(target=searcher, args=(e,)) for e in (warm, cold)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        warm.close()
        cold.close()
    assert not errors, errors
    assert len(latencies) > 20
    latencies.sort()
    # A reader that waited for the writer would take the busy timeout (seconds) each time:
    # generous bounds tell that apart on a loaded CI machine; speed is bench/'s job.
    assert latencies[len(latencies) // 2] < 0.25
    assert latencies[-1] < 1.0, f"slowest search {latencies[-1] * 1000:.0f} ms"


def test_a_message_handed_back_by_stopping_workers_never_runs_out_of_retries():
    """dramatiq's Retries counts a stopping worker's Shutdown as a failed attempt: nine stops during
    one slow request dead-lettered healthy work. HandBackOnStop (after Retries in the broker's list,
    so its hook runs first) takes the count back; a real failure still counts."""
    import dramatiq
    from dramatiq.brokers.stub import StubBroker
    from dramatiq.middleware import Retries, Shutdown

    from memindex.workers.broker import _middleware
    from memindex.workers.lifecycle import HandBackOnStop

    names = [type(m).__name__ for m in _middleware()]
    assert names.index("HandBackOnStop") > names.index("Retries")

    broker = StubBroker(middleware=[Retries(min_backoff=1, max_backoff=5), HandBackOnStop()])
    broker.emit_after("process_boot")
    calls: list[int] = []

    @dramatiq.actor(broker=broker, max_retries=2, actor_name="handed_back")
    def handed_back() -> None:
        calls.append(1)
        if len(calls) <= 6:
            raise Shutdown("the worker is stopping")

    @dramatiq.actor(broker=broker, max_retries=2, actor_name="really_fails")
    def really_fails() -> None:
        raise ValueError("a real failure")

    handed_back.send()
    really_fails.send()
    worker = dramatiq.Worker(broker, worker_timeout=50)
    worker.start()
    try:
        broker.join(handed_back.queue_name, fail_fast=False, timeout=30_000)
        worker.join()
    finally:
        worker.stop()
    assert len(calls) == 7  # six hand-backs, then it ran: never dead-lettered
    dead = [m.actor_name for m in broker.dead_letters]
    assert dead == ["really_fails"]  # three real failures (max_retries 2) still end it
