"""The async API: ``await engine.asearch(...)`` and ``await memindex.amemory_get(...)`` keep the loop free."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any, Awaitable, Callable

import pytest

import memindex
from tests.conftest import Agent

# The bound, plus a ratio to the blocking control (calling search() on the loop
# stalls it for the whole batch). The best of ROUNDS rounds, since a loaded 2-core CI
# machine can deschedule the loop thread in any one round.
STALL_LIMIT_S = 0.020
STALL_RATIO = 5
ROUNDS = 5
WORDS = "router vlan kafka quokka firmware backup schedule invoice mara omada iot cafe deploy".split()


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Agent:
    """Enough memory that one search is real work (FTS over a few thousand chunks)."""
    a = Agent(tmp_path_factory.mktemp("async"))
    for d in range(300):
        lines = [f"- {WORDS[(d + i) % len(WORDS)]} note {d}-{i}: " + " ".join(WORDS[(d * i + k) % len(WORDS)]
                                                                          for k in range(12)) for i in range(40)]
        a.write(f"memory/2025-{1 + d % 12:02d}-{1 + d % 28:02d}-{d}.md", "# Day\n" + "\n".join(lines) + "\n")
    a.index()
    return a


async def worst_stall(work: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """Run ``work`` beside a probe that sleeps 1 ms in a loop; the probe's worst oversleep is the stall."""
    done = asyncio.Event()
    worst = 0.0

    async def probe() -> None:
        nonlocal worst
        while not done.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - t - 0.001)

    # A full collection of the test process's heap (hypothesis, dramatiq, the indexing that
    # built the fixture) holds the GIL for tens of ms whatever the loop runs: that is the
    # harness, not the API under test, so its objects are collected and frozen first.
    gc.collect()
    gc.freeze()
    task = asyncio.create_task(probe())
    await asyncio.sleep(0.01)  # the probe is running before the work starts
    try:
        result = await work()
    finally:
        done.set()
        await task
        gc.unfreeze()
    return worst, result


def test_fifty_concurrent_asearch_calls_never_stall_the_loop(big: Agent) -> None:
    engine = memindex.open_search(big.settings())
    queries = [f"{WORDS[i % len(WORDS)]} {WORDS[(i * 5) % len(WORDS)]} note" for i in range(50)]
    try:
        expected = [engine.search(q).as_dict() for q in queries]  # also warms connections and caches

        async def blocking() -> list[Any]:  # the control: what calling search() from a coroutine does
            return [engine.search(q) for q in queries]

        async def concurrent() -> list[Any]:
            return list(await asyncio.gather(*(engine.asearch(q) for q in queries)))

        control, _ = asyncio.run(worst_stall(blocking))
        assert control > STALL_LIMIT_S, "the probe must see a blocking loop, or this test proves nothing"
        # The best of a few rounds: other processes on a loaded machine can deschedule the loop
        # thread in any one round, while a blocking asearch would stall every round.
        stalls = []
        for _ in range(ROUNDS):
            stall, responses = asyncio.run(worst_stall(concurrent))
            assert [r.as_dict() for r in responses] == expected
            stalls.append(stall)
        assert all(r["results"] for r in expected)
        shown = f"worst event-loop stall per round (ms): {[round(s * 1000, 1) for s in stalls]}, blocking: {control * 1000:.0f}"
        assert min(stalls) < STALL_LIMIT_S, shown
        assert min(stalls) * STALL_RATIO < control, shown
    finally:
        engine.close()


def test_amemory_get_matches_memory_get(big: Agent) -> None:
    settings = big.settings()
    path = next(iter(sorted(p.name for p in (big.workspace / "memory").iterdir())))

    async def main() -> tuple[Any, Any]:
        got = await memindex.amemory_get(settings, f"memory/{path}", from_line=2, lines=3)
        with pytest.raises(memindex.MemoryGetError, match="outside the memory files"):
            await memindex.amemory_get(settings, "notes/x.md")
        return got, memindex.memory_get(settings, f"memory/{path}", from_line=2, lines=3)

    got, want = asyncio.run(main())
    assert got == want and got.lines == 3


@pytest.mark.parametrize("backend", ["builtin", "qmd"])
def test_a_closed_engine_refuses_calls_and_with_closes_it(agent: Agent, backend: str) -> None:
    # It answered on after close(), quietly reopening its store.
    agent.write("memory/a.md", "papaya smoothie recipe\n")
    if backend == "qmd":
        agent.write_config({"memory": {"backend": "qmd", "qmd": {"command": str(agent.root / "no-such-qmd")}}})
    agent.index()
    with memindex.open_search(agent.settings()) as engine:
        assert engine.search("papaya").results
    for call in (lambda: engine.search("papaya"), lambda: asyncio.run(engine.asearch("papaya")), engine.status):
        with pytest.raises(memindex.UsageError, match="closed"):
            call()
    engine.close()  # twice is fine


def test_asearch_on_the_qmd_fallback_engine(agent: Agent) -> None:
    agent.write("memory/a.md", "papaya smoothie recipe\n")
    agent.write_config({"memory": {"backend": "qmd", "qmd": {"command": str(agent.root / "no-such-qmd")}}})
    agent.index()
    engine = memindex.open_search(agent.settings())
    try:
        resp = asyncio.run(engine.asearch("papaya"))
        assert resp.backend == "builtin" and resp.results[0].path == "memory/a.md"
        assert type(engine).__name__ == "FallbackSearch"
    finally:
        engine.close()


def test_a_hung_qmd_never_delays_another_agents_async_calls(tmp_path) -> None:
    """The one async thread waited out a hanging qmd search while every other agent's asearch and
    amemory_get queued behind it (4 s each in a user's trial)."""
    import time

    from tests.test_qmd import configure, set_mode

    qmd_agent, other = Agent(tmp_path / "q"), Agent(tmp_path / "b")
    for a in (qmd_agent, other):
        a.write("memory/a.md", "papaya smoothie recipe\n")
    configure(qmd_agent, limits={"timeoutMs": 3000})
    qmd_agent.index()
    other.index()
    set_mode(qmd_agent, "hang", only=["search"])
    hung, fine = memindex.open_search(qmd_agent.settings()), memindex.open_search(other.settings())

    from tests.conftest import timed

    async def main():
        return await asyncio.gather(timed(hung.asearch("papaya")), timed(fine.asearch("papaya")),
                                    timed(memindex.amemory_get(other.settings(), "memory/a.md")))

    try:
        (slow, t_slow), (resp, t_search), (got, t_get) = asyncio.run(main())
    finally:
        hung.close()
        fine.close()
    assert slow.backend == "builtin" and t_slow >= 2.5  # qmd timed out, the fallback answered
    assert resp.results and "papaya" in got.text
    assert t_search < 2.0 and t_get < 2.0, (t_search, t_get)


def test_wrong_arguments_are_a_usage_error_at_the_call(agent: Agent) -> None:
    """Wrong types picked another directory (Context(state_dir=7) -> ./7, "" -> ~/.openclaw), raised
    AttributeError, or answered an empty search that looks like "no matches"."""
    import math
    from pathlib import Path

    agent.write("memory/a.md", "papaya smoothie recipe\n")
    agent.index()
    s = agent.settings()
    engine = memindex.open_search(s)
    calls = [
        lambda: memindex.Context(state_dir=7), lambda: memindex.Context(state_dir=b"/tmp"),
        lambda: memindex.Context(state_dir=""), lambda: memindex.Context(workspace="a\x00b"),
        lambda: memindex.load_settings(None), lambda: memindex.open_search(None),
        lambda: memindex.memory_get(None, "MEMORY.md"), lambda: memindex.index_status(None),
        lambda: memindex.sync_and_wait(None), lambda: memindex.sync_and_wait(agent.ctx, timeout=-1),
        lambda: memindex.sync_and_wait(agent.ctx, timeout=math.nan),
        lambda: memindex.flush_decision(None, None, None, None, None, None),
        lambda: memindex.on_session_start(None),
        lambda: memindex.schedule_sync(None, "search"), lambda: memindex.memory_search(s, 5),
        # (an AttributeError from deep inside, helper-45)
        lambda: memindex.memory_search(None, "x"), lambda: memindex.memory_search("main", "x"),
        lambda: memindex.memory_search(agent.ctx, "x"), lambda: memindex.memory_search(s, "x", maxResults=3),
        lambda: memindex.Context(agentId="main"),
        lambda: engine.search(7), lambda: engine.search(b"papaya"), lambda: engine.search("papaya", max_results="3"),
        lambda: engine.search("papaya", max_results=0), lambda: engine.search("papaya", min_score=math.nan),
        lambda: engine.search("papaya", session_key=7), lambda: asyncio.run(engine.asearch(None)),
    ]
    try:
        for i, call in enumerate(calls):
            with pytest.raises(memindex.UsageError):
                call()
        assert issubclass(memindex.UsageError, memindex.MemindexError) and issubclass(memindex.UsageError, TypeError)
        assert engine.search("papaya").results  # right arguments still answer
        assert memindex.Context(state_dir=Path("/tmp")).state_dir == Path("/tmp")
    finally:
        engine.close()


def test_unknown_keywords_and_bad_values_are_usage_errors_on_every_entry_point(agent: Agent) -> None:
    """Only memory_search turned OpenClaw's `maxResults` into a UsageError: engine.search/asearch,
    memory_get and amemory_get raised Python's TypeError naming MemorySearch.search() (outside the
    error root), memory_get(from_line=-1) was a MemoryGetError (the CLI calls it a usage error), and
    isinstance(engine, memindex.SearchEngine) raised TypeError (the protocol was not runtime-checkable)."""
    agent.write("memory/a.md", "papaya smoothie recipe\n")
    agent.index()
    s = agent.settings()
    with memindex.open_search(s) as engine:
        assert isinstance(engine, memindex.SearchEngine)
        for call, name in ((lambda: engine.search("papaya", maxResults=3), "search"),
                           (lambda: asyncio.run(engine.asearch("papaya", maxResults=3)), "asearch"),
                           (lambda: memindex.memory_get(s, "memory/a.md", frm=3), "memory_get"),
                           (lambda: asyncio.run(memindex.amemory_get(s, "memory/a.md", maxResults=3)), "amemory_get"),
                           (lambda: engine.search(), "search")):
            with pytest.raises(memindex.UsageError, match=rf"^{name}\(\): ") as exc:
                call()
            assert "MemorySearch" not in str(exc.value) and "it takes " in str(exc.value), exc.value
        for kw in ({"from_line": -1}, {"lines": -2}):
            with pytest.raises(memindex.UsageError, match="must be a non-negative integer"):
                memindex.memory_get(s, "memory/a.md", **kw)
        assert engine.search("papaya", max_results=3).results  # right arguments still answer
        assert memindex.memory_get(s, "memory/a.md", from_line=1, lines=1).text == "papaya smoothie recipe"
        assert asyncio.run(memindex.amemory_get(s, "memory/a.md")).text.startswith("papaya")


def test_wrong_environment_keywords_and_values_are_usage_errors_too(agent: Agent) -> None:
    """These escaped the MemindexError root (ValueError, AttributeError, a TypeError naming the
    internal MemorySearch.search()) or were accepted and failed later: open_search(schedule_sync=5)
    logged "'int' object is not callable" on every search; flush_decision('lots', ...) answered
    'no-token-estimate'; Context(agent_id=Path(...)) was taken, then refused by load_settings."""
    from datetime import datetime
    from pathlib import Path

    s = agent.settings()
    with pytest.raises(memindex.UsageError, match="env must be Mapping"):
        memindex.load_settings(agent.ctx, env="x")
    with pytest.raises(memindex.UsageError, match=r"env\['OPENCLAW_STATE_DIR'\] must be str, not int"):
        memindex.load_settings(memindex.Context(), env={"OPENCLAW_STATE_DIR": 5})
    with pytest.raises(memindex.UsageError, match=r"'maxResults'.*max_results"):
        memindex.memory_search(s, "q", maxResults=1)
    with pytest.raises(memindex.UsageError, match="'bogus'"):
        memindex.open_search(s, bogus=1)
    with pytest.raises(memindex.UsageError, match="schedule_sync must be callable"):
        memindex.open_search(s, schedule_sync=5)
    with pytest.raises(memindex.UsageError, match="token_estimate"):
        memindex.flush_decision("lots", 200_000, {}, {"compactionCount": 0}, "rw", datetime.now())
    with pytest.raises(memindex.UsageError, match="Context.agent_id must be str"):
        memindex.Context(agent_id=Path("vault"))
    # the right arguments still work
    assert memindex.load_settings(agent.ctx, env={"HOME": str(agent.root)}).agent_id == "main"
    assert memindex.memory_search(s, "q", max_results=1)["results"] == []
    memindex.open_search(s, schedule_sync=None).close()
    assert memindex.flush_decision(None, 200_000, {}, {"compactionCount": 0}, "rw", datetime.now()).reason == \
        "no-token-estimate"


def test_async_calls_work_in_a_child_forked_after_they_warmed_up(agent: Agent) -> None:
    """A pre-forking server (gunicorn, celery) warms up, then forks: the child inherited the
    shared pool but not its thread, and every asearch / amemory_get waited forever."""
    import json
    import subprocess
    import sys

    agent.write("memory/2026-02-10.md", "# Day\nThe kumquat router got VLAN 10.\n")
    agent.index()
    script = f"""
import asyncio, json, os, sys
import memindex
settings = memindex.load_settings(memindex.Context(config={str(agent.config_path)!r}, state_dir={str(agent.state)!r},
                                                   workspace={str(agent.workspace)!r}))
engine = memindex.open_search(settings)
asyncio.run(engine.asearch("kumquat"))  # the parent warms the pool up
pid = os.fork()
if pid == 0:
    async def child():
        hits = await asyncio.wait_for(engine.asearch("kumquat"), 20)
        got = await asyncio.wait_for(memindex.amemory_get(settings, "memory/2026-02-10.md"), 20)
        return len(hits.results), "kumquat" in got.text
    try:
        print(json.dumps(asyncio.run(child())), flush=True)
        os._exit(0)
    except BaseException as exc:
        print(json.dumps(repr(exc)), flush=True)
        os._exit(1)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [1, True]


def test_a_call_no_signature_takes_is_a_usage_error_on_every_public_function(agent: Agent) -> None:
    """helper-57: memory_search, memory_get, amemory_get, Context and engine.search turned a call
    their signature could not take into a UsageError, but load_settings(ctx, foo=1), open_search(),
    index_status(s, deep=True), sync_and_wait(ctx, forse=True), schedule_sync(s),
    on_session_start() and flush_decision() raised Python's TypeError, outside the error root."""
    s = agent.settings()
    calls = {
        "load_settings": lambda: memindex.load_settings(agent.ctx, foo=1),
        "open_search": lambda: memindex.open_search(),
        "index_status": lambda: memindex.index_status(s, deep=True),
        "sync_and_wait": lambda: memindex.sync_and_wait(agent.ctx, forse=True),
        "schedule_sync": lambda: memindex.schedule_sync(s),
        "on_session_start": lambda: memindex.on_session_start(),
        "flush_decision": lambda: memindex.flush_decision(),
    }
    for name, call in calls.items():
        with pytest.raises(memindex.UsageError, match=rf"^{name}\(\): .*it takes ") as exc:
            call()
        assert isinstance(exc.value, memindex.MemindexError)
    assert memindex.index_status(s)["files"] == 0  # the right call still answers


def test_a_min_score_above_1_is_a_usage_error_in_process_too(agent: Agent) -> None:
    """helper-67: `search(..., min_score=2)` answered no results, silently, where the CLI and the
    servers refuse it (scores are 0..1). Below 0 stays open to library callers (every cosine)."""
    agent.write("memory/a.md", "papaya smoothie recipe\n")
    agent.index()
    with memindex.open_search(agent.settings()) as engine:
        with pytest.raises(memindex.UsageError, match="min_score must be at most 1"):
            engine.search("papaya", min_score=2)
        assert engine.search("papaya", min_score=-1.0).results


def test_what_the_trial_found_accepted_is_refused_at_the_call(agent: Agent) -> None:
    """trialB: schedule_sync(s, 5) was queued, and the worker then refused it as "sent by another
    version of memindex"; sync_and_wait(force="yes") was taken by its truth value; engine.search("")
    answered an empty SearchResponse where the CLI and the servers refuse the query; chat_type="bogus"
    was taken silently; Context(agent_id="../x") was built and refused later by load_settings, as a
    ConfigError. Each is a UsageError at the call, naming the argument."""
    agent.write("memory/a.md", "papaya smoothie recipe\n")
    agent.index()
    s = agent.settings()
    refused = [
        (lambda: memindex.schedule_sync(s, 5), "reason must be str"),
        (lambda: memindex.sync_and_wait(agent.ctx, force="yes"), "force must be bool"),
        (lambda: memindex.sync_and_wait(agent.ctx, progress=5), "progress must be callable"),
        (lambda: memindex.memory_search(s, ""), "the query is empty"),
        (lambda: memindex.Context(agent_id="../x"), r"Context.agent_id: invalid agent id '\.\./x'"),
        (lambda: memindex.Context(agent_id=""), "Context.agent_id: invalid agent id ''"),
        (lambda: memindex.Context("a/b", state_dir=str(agent.state)), "invalid agent id 'a/b'"),
    ]
    with memindex.open_search(s) as engine:
        refused += [
            (lambda: engine.search(""), "the query is empty"),
            (lambda: engine.search(" \n\t"), "the query is empty"),
            (lambda: asyncio.run(engine.asearch("")), "the query is empty"),
            (lambda: engine.search("papaya", chat_type="bogus"), "chat_type must be one of: direct, group, channel"),
        ]
        for call, said in refused:
            with pytest.raises(memindex.UsageError, match=said):
                call()
        # the right arguments still answer
        assert engine.search("papaya", chat_type="direct").results
        assert engine.search("papaya", chat_type="Group").results is not None
    assert memindex.Context(agent_id=" Main ").agent_id == " Main "  # (normalised where it is resolved)
    assert memindex.load_settings(memindex.Context("Main", str(agent.config_path), str(agent.state))).agent_id == "main"
    memindex.schedule_sync(s, "search")
    assert memindex.sync_and_wait(agent.ctx, force=False, progress=lambda done, total: None)["to_index"] == 0
