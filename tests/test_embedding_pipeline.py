"""Embeddings through the whole pipeline: real SDK clients against the local
wire-protocol server, the embedding cache, fallback, rebuilds and bad vectors."""

from __future__ import annotations

import json
import time

import pytest

from memindex.pipeline.embeddings.embedder import reset_services
from memindex.pipeline.search.reference import REFERENCE_TEXTS
from tests.conftest import GGUF, errors_in_threads, live_vectors, module_server, wait_for
from tests.provider_server import ProviderServer
from memindex.workers import embedded


server = module_server(ProviderServer)
pytestmark = pytest.mark.usefixtures("fresh_services")


def openai_cfg(server, **extra):
    return {"provider": "openai", "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-test-123"}, **extra}


def _notes(agent, n=6):
    for i in range(n):
        agent.write(f"memory/2026-01-{i + 1:02d}.md", f"# Day {i}\nThe Omada router VLAN {i} serves IoT device {i}.\n")
    agent.write("MEMORY.md", "# Memory\nERR_SIG_4012 was fixed by rotating the webhook secret.\n")


def test_openai_index_and_hybrid_search(agent, server):
    _notes(agent)
    agent.memory_config(openai_cfg(server))
    agent.index()
    assert server.count("openai") >= 1
    res = agent.search("ERR_SIG_4012")
    assert res["provider"] == "openai" and res["model"] == "text-embedding-3-small"
    assert res["mode"] == "hybrid" and res["fallback"] is False
    assert res["results"][0]["path"] == "MEMORY.md"
    from memindex.pipeline.status import index_status
    from memindex.pipeline.embeddings.embedder import provider_info

    st = index_status(agent.settings(), provider_info(agent.settings()))
    assert st["provider"] == "openai" and st["vector"]["backend"] == "sqlite-vec"
    # every chunk's vector is cached, and the search's reference texts (pipeline/search/reference.py)
    assert st["vector"]["dims"] == 1536 and st["cache"]["entries"] == st["chunks"] + len(REFERENCE_TEXTS)
    assert "sk-test-123" not in repr(st)


def test_cache_hit_means_zero_requests_on_a_second_full_index(agent, server):
    _notes(agent)
    agent.memory_config(openai_cfg(server))
    agent.index()
    first = server.count("openai")
    assert first >= 1
    counts = agent.index(force=True)  # full rebuild into a new generation
    assert counts["to_index"] == 7 and counts["generation"] == 2
    # Every chunk came from the cache; the one request is the size probe (a custom endpoint may
    # have changed its vector size: see test_operations).
    assert server.count("openai") == first + 1
    assert server.log_for("openai")[-1].body["input"] in ("ping", ["ping"])
    assert agent.search("Omada router")["results"]


def test_fallback_serves_and_is_reported(agent, server, caplog):
    _notes(agent, 3)
    server.always("openai", {"status": 500, "message": "upstream down"})
    cfg = openai_cfg(server, fallback="gemini")
    cfg["remote"]["baseUrl"] = server.base("openai")
    agent.write_config({
        "agents": {"defaults": {"memorySearch": cfg}},
        "models": {"providers": {"gemini": {"apiKey": "g-key", "baseUrl": server.base("gemini")}}},
    })
    with caplog.at_level("WARNING"):
        agent.index()
        embedded.wait_idle(timeout=60)
    assert server.count("gemini") >= 1
    res = agent.search("Omada router VLAN")
    assert res["provider"] == "gemini" and res["fallback"] is True
    assert res["results"]
    assert any("fallback" in r.getMessage() for r in caplog.records)
    assert not any("g-key" in r.getMessage() for r in caplog.records)


def test_model_change_rebuilds_while_search_keeps_answering(agent, server, monkeypatch):
    _notes(agent, 20)
    agent.memory_config({"provider": "hash"})
    agent.index()
    assert agent.search("Omada router")["results"]
    monkeypatch.setenv("MEMINDEX_HASH_EMBED_DELAY", "0.15")
    reset_services()
    agent.memory_config({"provider": "hash", "model": "hash-v2"})
    from memindex.producers.enqueue import request_sync
    from memindex.pipeline.store.reader import open_reader

    request_sync(agent.ctx, reason="test")
    seen_building = False
    answered = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        before = open_reader(agent.settings()).state()
        res = agent.search("Omada router")
        st = open_reader(agent.settings()).state()
        assert res["results"], "search stopped answering during the rebuild"
        answered += 1
        if before.building_generation is not None and st.building_generation is not None:
            seen_building = True
            assert res["model"] == "hash-v1"  # still the old, complete index
        elif seen_building and st.live_fingerprint["model"] == "hash-v2":
            break
        time.sleep(0.05)
    assert seen_building and answered > 1
    embedded.wait_idle(timeout=60)
    assert agent.search("Omada router")["model"] == "hash-v2"
    # A restart with the same config does not rebuild again.
    reset_services()
    assert agent.index()["to_index"] == 0


@pytest.mark.parametrize("kind", ["nan", "wrong_dims", "html"])
def test_bad_vectors_are_rejected_not_stored(agent, server, kind):
    _notes(agent, 2)
    agent.memory_config(openai_cfg(server))
    agent.index()
    good = len(agent.store_rows())
    server.always("openai", {"kind": kind})
    agent.write("memory/2026-03-01.md", "brand new note about kumquats\n")
    agent.index()
    embedded.wait_idle(timeout=30)
    # Bad vectors are never stored, but the text is keyword-searchable at once (issue 20)
    # and the file is reported as waiting for its vectors, re-planned by every sync.
    assert len(agent.store_rows()) == good + 1
    new = [h for h, blob in live_vectors(agent).items() if blob is None]
    assert len(new) == 1
    assert agent.search("kumquats")["results"][0]["path"] == "memory/2026-03-01.md"
    from memindex.pipeline.status import index_status

    problems = {p["path"]: p["error"] for p in index_status(agent.settings())["problems"]}
    assert problems["memory/2026-03-01.md"].startswith("embedding pending")
    if kind == "html":  # a 200 that is a web page: said so, with the key to check
        assert "not JSON" in problems["memory/2026-03-01.md"] and "baseUrl" in problems["memory/2026-03-01.md"]
    assert agent.index()["to_index"] == 1  # not forgotten: the next sync tries its vectors again


def test_401_fails_fast_and_keyword_search_still_answers(agent, server):
    _notes(agent, 2)
    agent.memory_config({"provider": "openai", "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-good"}})
    agent.index()
    server.always("openai", {"status": 401, "message": "Incorrect API key provided"})
    reset_services()
    before = server.count("openai")
    res = agent.search("ERR_SIG_4012")
    assert res["results"][0]["path"] == "MEMORY.md"  # keyword arm still answers
    assert "keyword-only" in res.get("warning", "")
    assert server.count("openai") == before + 1  # one request, no retries


@pytest.mark.parametrize("fixed_by", ["index", "status --deep"])
def test_a_provider_answering_again_ends_the_searches_cooldown(agent, server, fixed_by):
    """helper-18: after a 401 was fixed, `index` and `status --deep` succeeded, yet every search for
    the rest of the ~30 s cooldown (kept in <store>.query-breaker.json, shared by the agent's processes)
    answered keyword-only and blamed the old error. A provider that answers ends it at once."""
    from memindex.pipeline.status import embedding_probe

    _notes(agent, 2)
    agent.memory_config(openai_cfg(server))
    agent.index()
    server.always("openai", {"status": 401, "message": "Incorrect API key provided"})
    reset_services()
    res = agent.search("which router serves IoT")
    assert res["mode"] == "fts-only" and "keyword-only" in res.get("warning", "")
    breaker = agent.settings().store_path.with_name(agent.settings().store_path.name + ".query-breaker.json")
    assert breaker.exists()  # the cooldown the agent's other processes read
    server.always("openai", None)  # the key (or the endpoint) fixed
    if fixed_by == "index":
        reset_services()  # (`memindex index`: another process, whose own breaker is closed)
        agent.write("memory/2026-01-09.md", "# Day 9\nThe printer moved to VLAN 9.\n")
        assert "failed" not in agent.index()
    else:
        assert embedding_probe(agent.settings())["ok"]
    assert not breaker.exists()
    res = agent.search("which router serves IoT")
    assert res["mode"] == "hybrid" and "warning" not in res, res.get("warning")


def test_no_provider_anywhere_is_keyword_only_not_an_error(agent):
    _notes(agent, 2)
    agent.index()
    from memindex.pipeline.embeddings.embedder import provider_info

    info = provider_info(agent.settings())
    assert info["provider"] == "none" and "keyword search only" in info["reason"]
    assert agent.search("Omada")["mode"] == "fts-only"


def test_vectors_never_mix_across_dims(agent, server):
    _notes(agent, 2)
    agent.memory_config({"provider": "hash"})
    agent.index()
    agent.memory_config({"provider": "hash", "outputDimensionality": 128})
    reset_services()
    counts = agent.index()
    assert counts["generation"] == 2  # new dims -> new generation, never mixed into the old
    from memindex.pipeline.status import index_status

    st = index_status(agent.settings())
    assert st["vector"]["dims"] == 128
    # Without a provider description (a library caller), the index's own provider: it said "none".
    assert (st["provider"], st["model"]) == ("hash", st["fingerprint"]["model"]) and st["model"] != "fts-only"


@pytest.mark.skipif(not GGUF.exists(), reason="the shared GGUF model is not present")
def test_local_gguf_provider_end_to_end(agent):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install '.[local]')")
    agent.write("memory/pets.md", "Caroline adopted a golden retriever puppy named Max.\n")
    agent.write("memory/work.md", "The quarterly budget review moved to Thursday.\n")
    agent.memory_config({"provider": "local", "local": {"modelPath": str(GGUF)}})
    agent.index()
    res = agent.search("dog", min_score=0.0)
    assert res["provider"] == "local" and res["results"][0]["path"] == "memory/pets.md"
    from memindex.pipeline.status import index_status

    assert index_status(agent.settings())["vector"]["dims"] == 384


def test_search_answers_from_many_threads_with_vectors(agent):
    _notes(agent, 10)
    agent.memory_config({"provider": "hash"})
    agent.index()
    from memindex.pipeline.search.engine import MemorySearch

    eng = MemorySearch(agent.settings())

    def searches():
        for _ in range(20):
            assert eng.search("router VLAN").results

    errors = errors_in_threads(searches)
    eng.close()
    assert errors == []


def test_query_embeddings_are_cached(agent, server):
    _notes(agent, 2)
    agent.memory_config(openai_cfg(server))
    agent.index()
    from memindex.pipeline.search.engine import MemorySearch

    eng = MemorySearch(agent.settings())
    before = server.count("openai")
    for _ in range(3):
        eng.search("where is the router")
    assert server.count("openai") == before + 1
    eng.close()


def test_api_key_never_in_fingerprint_status_or_logs(agent, server, caplog):
    _notes(agent, 2)
    agent.memory_config(openai_cfg(server))
    with caplog.at_level("DEBUG"):
        agent.index()
        agent.search("router")
    from memindex.pipeline.status import index_status
    from memindex.pipeline.embeddings.embedder import provider_info

    st = index_status(agent.settings(), provider_info(agent.settings()))
    assert "sk-test-123" not in repr(st)
    assert all("sk-test-123" not in r.getMessage() for r in caplog.records)
    # The key changing does not change the index identity (no rebuild).
    agent.memory_config({**openai_cfg(server), "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-other"}})
    reset_services()
    assert agent.index()["generation"] == 1


def test_killed_rebuild_leaves_live_index_and_resumes(agent, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from memindex.pipeline.store.reader import open_reader
    from tests.conftest import REPO

    for i in range(200):  # 7 message groups: the kill lands after the first, long before the last
        agent.write(f"memory/2026-01-{i % 28 + 1:02d}-{i}.md", f"note {i} about the Omada router\n")
    agent.memory_config({"provider": "hash"})
    agent.index()
    agent.memory_config({"provider": "hash", "model": "hash-v2"})
    env = dict(os.environ, MEMINDEX_HASH_EMBED_DELAY="0.05")
    proc = subprocess.Popen(
        [sys.executable, "-m", "memindex", "--config", str(agent.config_path), "--state-dir", str(agent.state),
         "--workspace", str(agent.workspace), "index", "-q"], cwd=REPO, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill once part of the new generation is written
        r = open_reader(agent.settings())
        st = r.state()
        if st.building_generation is not None and r.table_exists("files_g2"):
            # (written with vectors: a file's text alone is written first, before it is embedded)
            if r.conn().execute("SELECT count(*) FROM files_g2 WHERE error IS NULL").fetchone()[0] > 0:
                break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    st = open_reader(agent.settings()).state()
    assert st.live_generation == 1 and st.building_generation == 2  # killed mid-rebuild
    res = agent.search("Omada router")
    assert res["results"] and res["model"] == "hash-v1"  # the live index is intact
    # (main.sqlite.held: the mark of writes held when it was killed, which the next writer reads)
    files = sorted(p.name for p in (agent.state / "memindex").iterdir()
                   if p.name not in ("main.sqlite.writer", "main.sqlite.held"))
    assert files == ["main.sqlite", "main.sqlite-shm", "main.sqlite-wal"] or files == ["main.sqlite"]
    reset_services()
    counts = agent.index()  # the next run resumes the same generation
    assert counts["generation"] == 2 and counts["to_index"] < 200
    st = open_reader(agent.settings()).state()
    assert st.live_generation == 2 and st.building_generation is None
    assert agent.search("Omada router")["model"] == "hash-v2"


def test_cache_max_entries_prunes_least_recently_used(agent):
    for i in range(6):
        agent.write(f"memory/n{i}.md", f"distinct note number {i} about topic {i}\n")
    agent.memory_config({"provider": "hash", "cache": {"maxEntries": 3}})
    agent.index()
    from memindex.pipeline.status import index_status

    st = index_status(agent.settings())
    assert st["chunks"] == 6 and st["cache"]["entries"] == 3


def test_a_disabled_cache_gets_no_new_entries_and_status_says_so(agent):
    """helper-71: cache.enabled false skipped lookups but the writer still filled the cache, and
    `status` said "cache: 5 embeddings (max 50000)"; maxEntries 0 (never pruned) read "(max 0)"."""
    from memindex.pipeline.status import format_status, index_status

    for i in range(4):
        agent.write(f"memory/n{i}.md", f"distinct note number {i} about topic {i}\n")
    agent.memory_config({"provider": "hash", "cache": {"enabled": False}})
    agent.index()
    st = index_status(agent.settings())
    assert st["chunks"] == 4 and st["cache"]["entries"] == 0 and st["cache"]["enabled"] is False
    assert "cache:        disabled (0 embeddings kept from before)" in format_status(st)
    agent.memory_config({"provider": "hash", "cache": {"maxEntries": 0}})
    agent.write("memory/n9.md", "one more note\n")
    agent.index()
    st = index_status(agent.settings())
    # only the new note's vector and the search's reference texts: the four are not re-embedded
    assert st["cache"]["entries"] == 1 + len(REFERENCE_TEXTS)
    assert f"cache:        {1 + len(REFERENCE_TEXTS)} embeddings (no limit)" in format_status(st)


def test_a_query_vector_of_another_size_answers_keyword_only_and_says_why(agent, server):
    """A proxy that starts answering 128 dims for a 1536-dim index: search said mode hybrid, no
    warning, and no result had a vector score (both vector paths failed on the size)."""
    _notes(agent)
    agent.memory_config(openai_cfg(server))
    agent.index()
    reset_services()
    server.state.dims["openai"] = 128
    res = agent.search("ERR_SIG_4012")
    assert res["mode"] == "fts-only" and "128 dims" in res["warning"] and "1536" in res["warning"]
    assert res["results"] and res["results"][0]["path"] == "MEMORY.md"


def _indexed_on_the_fallback(agent, server) -> None:
    """Three notes indexed by gemini, the fallback, while openai (the primary) answers 500 - and
    keeps doing so until the caller's ``server.always("openai", None)``."""
    _notes(agent, 3)
    server.always("openai", {"status": 500, "message": "upstream down"})
    agent.write_config({
        "agents": {"defaults": {"memorySearch": openai_cfg(server, fallback="gemini")}},
        "models": {"providers": {"gemini": {"apiKey": "g-key", "baseUrl": server.base("gemini")}}},
    })
    try:
        agent.index()
    except BaseException:
        server.always("openai", None)
        raise
    assert agent.search("Omada router")["provider"] == "gemini"


def test_a_new_run_probes_the_failing_primary_once_and_stays_on_the_fallback(agent, server, caplog):
    """With the index on the fallback's vectors, every new process (each `memindex index`)
    planned at the primary: a rebuild of every file, the primary's retries, the switch back and
    "indexed N file(s)" with nothing changed. One probe now decides; when the primary answers
    again, the index moves back to it."""
    from memindex.pipeline.embeddings.embedder import reset_services

    _indexed_on_the_fallback(agent, server)
    try:
        gen = agent.index()["generation"]
        reset_services()  # a new process
        before = server.count("openai")
        with caplog.at_level("WARNING", logger="memindex"):
            counts = agent.index()
        assert counts["to_index"] == 0 and counts["generation"] == gen, counts  # no rebuild, nothing re-read
        assert server.count("openai") == before + 1  # the probe, one attempt
        assert any("openai still fails" in r.getMessage() and "stays on gemini" in r.getMessage()
                   for r in caplog.records)
    finally:
        server.always("openai", None)
    reset_services()  # the primary answers again: the next run moves the index back to it
    counts = agent.index()
    assert counts["generation"] == gen + 1 and agent.search("Omada router")["provider"] == "openai"


def test_plain_status_never_calls_the_failing_primary(agent, server):
    """helper-52: with the index on the fallback's vectors, every plain `status` (no --deep, no
    --index) sent the primary one embedding request (15 s per agent for a hung one): its dry plan
    probed it. It calls no provider now, and still sees a note changed on disk."""
    from tests.conftest import run_cli

    _indexed_on_the_fallback(agent, server)
    try:
        agent.write("memory/2026-03-01.md", "# Later\nA note written after the index.\n")
        before = server.count("openai"), server.count("gemini")
        out = run_cli("--workspace", str(agent.workspace), "status", "--json", env=agent.env())
        assert out.returncode == 0, out.stderr
        assert (server.count("openai"), server.count("gemini")) == before
        st = json.loads(out.stdout)[0]["status"]
        assert st["diskChanges"] == {"toIndex": 1, "toDelete": 0} and st["dirty"] is True, st
    finally:
        server.always("openai", None)


def test_a_slow_provider_of_one_agent_never_delays_another_agents_async_calls(tmp_path, server):
    """helper-51: on one server, eight searches of an agent whose endpoint answered in 2 s held the
    one async thread for 16 s, and another agent's keyword search and plain `get` waited behind
    them. Searches that wait on a remote provider run on their agent's own threads now."""
    import asyncio

    import memindex
    from tests.conftest import Agent

    slow, fast = Agent(tmp_path / "slow"), Agent(tmp_path / "fast")
    for a in (slow, fast):
        a.write("memory/a.md", "# A\npapaya smoothie recipe\n")
    slow.memory_config(openai_cfg(server))
    fast.memory_config({"provider": "none"})
    slow.index()
    fast.index()
    delay = 1.5
    server.always("openai", {"kind": "delay", "seconds": delay})
    slow_engine, fast_engine = memindex.open_search(slow.settings()), memindex.open_search(fast.settings())

    from tests.conftest import timed

    async def main():
        slows = [timed(slow_engine.asearch(f"papaya question {i}")) for i in range(6)]
        return await asyncio.gather(*slows, timed(fast_engine.asearch("papaya")),
                                    timed(memindex.amemory_get(fast.settings(), "memory/a.md")))

    try:
        *slow_runs, (resp, t_search), (got, t_get) = asyncio.run(main())
    finally:
        server.always("openai", None)
        slow_engine.close()
        fast_engine.close()
    assert all(r.results for r, _ in slow_runs) and max(t for _, t in slow_runs) >= delay
    assert resp.results and "papaya" in got.text
    # Queued behind the slow searches they took 6 x 1.5 s; alone they take milliseconds.
    assert t_search < 2 * delay and t_get < 2 * delay, (t_search, t_get)


@pytest.mark.skipif(not GGUF.exists(), reason="the shared GGUF model is not present")
def test_a_switch_to_the_fallback_is_said_once_not_once_per_file(agent, server, caplog):
    """helper-52: one switch to the fallback logged, in one process, a warning per file queued
    before it ("was planned for provider openai but this compute host embeds with gemini
    (different config?)"): 72 lines for 72 files. Once per agent and pair of providers now."""
    for i in range(80):
        agent.write(f"memory/n{i:03d}.md", f"# Day {i}\n" + "".join(
            f"The Omada router VLAN {i} serves device {j} in rack {j * i}.\n" for j in range(60)))
    server.always("openai", {"status": 500, "message": "upstream down"})
    agent.memory_config(openai_cfg(server, fallback="local", local={"modelPath": str(GGUF)}))
    try:
        with caplog.at_level("WARNING", logger="memindex"):
            agent.index()
    finally:
        server.always("openai", None)
    assert agent.search("Omada router")["provider"] == "local"
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert not [m for m in lines if "was planned for provider" in m], lines
    said = [m for m in lines if "the writer re-plans them" in m]
    assert len(said) <= 1 and all("before this process switched to its fallback local" in m for m in said), said


def test_status_names_the_fallback_that_built_the_index(agent, server):
    """The primary answered 503 while indexing and the fallback built the index: status still
    said openai, fallback None, while search said fallback true."""
    from memindex.pipeline.embeddings.embedder import provider_info
    from memindex.pipeline.status import format_status, index_status

    _notes(agent, 2)
    agent.memory_config(openai_cfg(server, fallback="mistral"),
                        models={"providers": {"mistral": {"baseUrl": server.base("mistral"), "apiKey": "k-m"}}})
    server.always("openai", {"status": 503, "message": "service down"})
    try:
        agent.index()
        st = index_status(agent.settings(), provider_info(agent.settings()))
    finally:
        server.always("openai", None)
    assert st["fingerprint"]["provider"] == "mistral"
    assert st["provider"] == "mistral" and st["providerFallback"] is True and "openai" in st["providerFallbackReason"]
    assert "fallback:" in format_status(st)
    assert agent.search("Omada")["fallback"] is True


def test_one_refused_input_costs_only_its_own_file_its_vectors(agent, server):
    """A content filter refuses one note (400): that file is keyword-only, saying why; the files
    embedded in the same request get their vectors (one request per file finds the refused one),
    the provider is not shut off for everyone, and no fallback rebuild starts."""
    from memindex.pipeline.status import index_status

    _notes(agent)
    agent.write("memory/poison.md", "# Poison\nthis has FORBIDDENWORD inside\n")
    server.reset()
    server.state.refuse_text["openai"] = "FORBIDDENWORD"
    agent.memory_config(openai_cfg(server, fallback="none"))
    agent.index()
    embedded.wait_idle(timeout=30)
    vectors = live_vectors(agent)
    st = index_status(agent.settings())
    problems = {p["path"]: p["error"] for p in st["problems"]}
    assert list(problems) == ["memory/poison.md"] and "bad request" in problems["memory/poison.md"], problems
    assert st["vectorsPending"] == 1 and sum(blob is None for blob in vectors.values()) == 1
    assert agent.search("FORBIDDENWORD")["results"][0]["path"] == "memory/poison.md"  # keyword-searchable
    # The provider still serves: a new note gets its vectors at once (no breaker, no cooldown).
    agent.write("memory/2026-02-01.md", "a fresh note about kumquats\n")
    agent.index()
    embedded.wait_idle(timeout=30)
    assert sum(blob is None for blob in live_vectors(agent).values()) == 1


def test_embedding_batch_timeout_bounds_a_hung_endpoint(agent, server):
    """sync.embeddingBatchTimeoutSeconds (later OpenClaw builds): a provider that never answers
    holds an index for that long per attempt, not the provider's 120 s; the text is keyword-indexed."""
    import time

    _notes(agent, 2)
    server.reset()
    server.always("openai", {"kind": "delay", "seconds": 60})
    agent.memory_config(openai_cfg(server, fallback="none", sync={"embeddingBatchTimeoutSeconds": 1}))
    t0 = time.monotonic()
    agent.index()
    embedded.wait_idle(timeout=120)
    took = time.monotonic() - t0
    server.always("openai", None)
    assert took < 45, took  # attempts of 1 s with their backoff (the default would be 120 s each)
    assert agent.search("ERR_SIG_4012")["results"][0]["path"] == "MEMORY.md"
    from memindex.pipeline.status import index_status

    problems = [p["error"] for p in index_status(agent.settings())["problems"]]
    assert problems and all("timed out" in p or "Timeout" in p for p in problems), problems


def test_files_deleted_while_indexing_are_not_counted_as_indexed(agent, server):
    """`index` said "indexed 100 file(s)" when half of them were deleted mid-run (their writes
    dropped as stale): the count is of files written; the deleted ones are named as such."""
    import threading

    for i in range(8):
        agent.write(f"memory/2026-02-{i + 1:02d}.md", f"# Day {i}\nlychee note {i}\n")
    agent.memory_config(openai_cfg(server, fallback="none"))
    server.always("openai", {"kind": "delay", "seconds": 0.4})
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(agent.index()))
    t.start()
    try:
        assert wait_for(lambda: server.count("openai") >= 1, timeout=30)
        for i in range(4, 8):
            (agent.workspace / f"memory/2026-02-{i + 1:02d}.md").unlink()
        # ... and one replaced by a symlink (never followed): gone too, not "indexed" (helper-47)
        (agent.workspace / "memory/2026-02-04.md").unlink()
        (agent.workspace / "memory/2026-02-04.md").symlink_to(agent.workspace / "memory/2026-02-01.md")
    finally:
        t.join(120)
        server.always("openai", None)
    assert out["to_index"] == 8 and out.get("vanished") == 5, out
    assert sorted({r[1] for r in agent.store_rows()}) == [f"memory/2026-02-0{i + 1}.md" for i in range(3)]


def test_an_empty_query_is_a_usage_error_and_embeds_nothing(agent, server):
    """It answered an empty result naming provider "none" / mode "fts-only" for an index of openai
    vectors; an empty query is now the UsageError the CLI, MCP and HTTP refuse it with (library.md)."""
    from memindex.pipeline.errors import UsageError

    _notes(agent, 2)
    agent.memory_config(openai_cfg(server))
    agent.index()
    before = server.count("openai")
    for q in ("", "   "):
        with pytest.raises(UsageError, match="the query is empty"):
            agent.search(q)
    assert server.count("openai") == before  # nothing embedded for it


def test_stale_write_groups_ask_for_one_resync_not_one_each(agent, server, caplog):
    """Every write group dropped as stale (its files edited while they were embedded) sent its own
    sync: an edit burst over 199 files ran 37 syncs on Redis. One queued sync covers them all
    (groups are now written as read, and ask for the re-plan of the edit the same way)."""
    import threading

    n = 6 * 32  # six write groups (GROUP_FILES)
    for i in range(n):
        agent.write(f"memory/2026-03-{i:03d}.md", f"# Day {i}\nmangosteen note {i}\n")
    agent.memory_config(openai_cfg(server, fallback="none"))
    server.always("openai", {"kind": "delay", "seconds": 0.3})
    done: dict = {}
    with caplog.at_level("INFO", logger="memindex"):
        t = threading.Thread(target=lambda: done.update(agent.index()))
        t.start()
        try:
            assert wait_for(lambda: server.count("openai") >= 1, timeout=30)
            for i in range(n):  # edited while the first groups are being embedded
                agent.write(f"memory/2026-03-{i:03d}.md", f"# Day {i}\nmangosteen note {i}, edited\n")
        finally:
            t.join(180)
            server.always("openai", None)
    assert not t.is_alive() and done
    # Groups read before their edit are written as read, and each asks for the re-plan of the edit.
    stale = [r for r in caplog.records if "file(s) as read, changed since" in r.getMessage()]
    syncs = [r for r in caplog.records if r.name == "memindex.sync" and "to index" in r.getMessage()]
    assert len(stale) >= 3, [r.getMessage() for r in stale]  # several groups were late ...
    assert len(syncs) <= 3, [r.getMessage() for r in syncs]  # ... yet re-planned once or twice, not once each
    rows = agent.store_rows()
    assert len({r[1] for r in rows}) == n and all("edited" in r[5] for r in rows)
