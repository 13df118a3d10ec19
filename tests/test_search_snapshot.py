"""Search reads one consistent snapshot (issue 20, "search raises during a rebuild").

A forced rebuild fills generation N+1 beside the live one, flips ``meta`` and drops
generation N's tables. Search reads the live generation from ``meta`` and its rows
inside one read transaction, so it keeps answering from N (WAL keeps N's tables
visible to that transaction) or answers from N+1, never ``no such table``.
Everything here runs the real store, writer and embedded broker.
"""

from __future__ import annotations

import threading
import time

import pytest

from memindex.pipeline.search.engine import MemorySearch
from memindex.pipeline.status import index_status
from memindex.pipeline.store.reader import open_reader

REBUILDS = 10
QUERY = "lantern harbour"

CONFIGS = {
    "keyword-only": {},
    "hash+sqlite-vec": {"provider": "hash"},
    "hash+in-process": {"provider": "hash", "store": {"vector": {"enabled": False}}},
}


def _notes(agent, n: int = 40) -> None:
    for i in range(n):
        agent.write(f"memory/2026-01-{i % 28 + 1:02d}-{i}.md",
                    f"# Note {i}\nThe lantern by the harbour, entry {i}.\n\nUnrelated line {i * 7}.\n")


def _live_generation(agent) -> int | None:
    r = open_reader(agent.settings())
    try:
        return r.state().live_generation
    finally:
        r.close()


@pytest.mark.parametrize("config", list(CONFIGS), ids=list(CONFIGS))
def test_forced_rebuilds_under_a_concurrent_search_loop(agent, config):
    agent.memory_config(CONFIGS[config])
    _notes(agent)
    agent.index()
    first = _live_generation(agent)
    assert first is not None
    settings = agent.settings()

    errors: list[BaseException] = []
    empty: list[dict] = []
    searches: list[int] = []  # per thread
    stop = threading.Event()
    eng = MemorySearch(settings)  # one engine shared by the threads, as the runtime does

    def loop(with_status: bool) -> None:
        n = 0
        while not stop.is_set():
            try:
                resp = eng.search(QUERY, min_score=0.0)
                n += 1
                # the index always has a live generation here: a rebuild builds beside it
                if not resp.results:
                    empty.append(resp.as_dict())
                if with_status and n % 10 == 0:
                    st = index_status(settings)
                    assert st["indexed"] and st["files"] > 0, st
            except BaseException as exc:  # noqa: BLE001 - every exception is a failure
                errors.append(exc)
                return
        searches.append(n)

    threads = [threading.Thread(target=loop, args=(i == 0,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(REBUILDS):
            agent.index(force=True)
            if errors:
                break
    finally:
        time.sleep(0.05)  # a few searches against the final generation too
        stop.set()
        for t in threads:
            t.join(60)
        eng.close()

    assert not errors, f"{len(errors)} search(es) raised, first: {errors[0]!r}"
    assert not empty, f"{len(empty)} empty result set(s), first: {empty[0]}"
    assert sum(searches) > REBUILDS  # the loop really ran across the rebuilds
    assert _live_generation(agent) == first + REBUILDS  # each forced rebuild promoted a new generation


def test_a_snapshot_keeps_reading_a_generation_a_rebuild_dropped(agent):
    """Deterministic: the rebuild completes (old tables dropped) while one snapshot is open."""
    agent.memory_config({"provider": "hash"})
    _notes(agent, 10)
    agent.index()
    settings = agent.settings()
    reader = open_reader(settings)
    try:
        with reader.snapshot() as snap:
            gen = snap.generation
            hits = snap.keyword_hits('"lantern"', 5)
            assert hits
            agent.index(force=True)  # the writer promotes gen + 1 and drops gen's tables meanwhile
            assert _live_generation(agent) == gen + 1
            assert snap.generation == gen and snap.keyword_hits('"lantern"', 5) == hits
            rows = snap.chunk_rows([h[0] for h in hits])
            assert len(rows) == len(hits) and all("lantern" in r[6] for r in rows.values())
            assert snap.vec0_available() and snap.vec0_knn([1.0] + [0.0] * 383, 3)
            assert snap.source_counts() == [("memory", 10, 10)]
        # the next snapshot sees the new generation
        with reader.snapshot() as snap:
            assert snap.generation == gen + 1 and snap.keyword_hits('"lantern"', 5)
            assert not snap.table_exists(f"chunks_g{gen}")
    finally:
        reader.close()
