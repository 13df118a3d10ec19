"""The ranking's reference texts (pipeline/search/reference.py): a workspace of a few notes gets a
background for its cosines from the first `index` on.

Below ranking.MIN_BACKGROUND chunks the raw cosine was the evidence: MiniLM (unrelated text ~0.08)
left paraphrases under minScore, e5 (unrelated text ~0.77) answered every off-topic question with
every note. End to end through the real pipeline (sync -> chunk -> embed -> writer) with the real
local models (skipped without them) or the fake OpenAI server, which counts what it embeds.
"""

from __future__ import annotations

from typing import Any

import pytest

from memindex.pipeline.embeddings.providers.local import llama_available
from memindex.pipeline.search.engine import MemorySearch
from memindex.pipeline.search.reference import REFERENCE_HASHES, REFERENCE_TEXTS
from memindex.pipeline.store.reader import open_reader
from tests.conftest import GGUF, SHARED, Agent, module_server
from tests.provider_server import ProviderServer

E5 = SHARED / "models" / "multilingual-e5-small.Q4_0.gguf"
MODELS = {"minilm": GGUF, "e5": E5}

server = module_server(ProviderServer)

NOTES = {
    "memory/2026-04-01.md": "# 2026-04-01\nThe boiler in the cellar makes a banging noise when the heating starts; "
                            "the plumber comes Friday.\n",
    "memory/2026-04-02.md": "# 2026-04-02\nLena's piano recital is on 12 June at the town hall, starts at six.\n",
    "memory/2026-04-03.md": "# 2026-04-03\nSwitched the blog from WordPress to a static site generator; builds take "
                            "ten seconds.\n",
    "memory/2026-04-04.md": "# 2026-04-04\nBorrowed 200 euros from Marco for the concert tickets, pay him back in "
                            "May.\n",
}


def _local(model: str) -> dict[str, Any]:
    path = MODELS[model]
    if not llama_available() or not path.is_file():
        pytest.skip(f"llama-cpp-python or {path.name} is missing")
    return {"provider": "local", "fallback": "none", "local": {"modelPath": str(path)}}


def _reference_rows(agent: Agent) -> list[tuple[str, int, int]]:
    """(hash, dims, updated_at) of the reference texts' rows in the agent's embedding cache."""
    r = open_reader(agent.settings())
    try:
        c = r.conn()
        assert c is not None
        marks = ",".join("?" * len(REFERENCE_HASHES))
        return sorted(c.execute(f"SELECT hash, dims, updated_at FROM embedding_cache WHERE hash IN ({marks})",
                                REFERENCE_HASHES).fetchall())
    finally:
        r.close()


def _paths(agent: Agent, query: str, engine: MemorySearch | None = None) -> list[str]:
    if engine is not None:
        return [r.path for r in engine.search(query).results]
    return [r["path"] for r in agent.search(query)["results"]]


# Per model: a paraphrase of a note (no shared content word) and a question no note answers. On
# main's code MiniLM's paraphrase found nothing (cosine 0.35 of raw evidence: under minScore) and
# e5's off-topic question returned all four notes (cosines ~0.72-0.75 passed minScore).
CASES = {
    "minilm": (("radiator racket", "memory/2026-04-01.md"), "what is the capital of Australia"),
    "e5": (("what is owed for the gig", "memory/2026-04-04.md"), "who won the football match yesterday"),
}


@pytest.mark.parametrize("model", sorted(CASES))
def test_a_tiny_workspace_finds_a_paraphrase_and_nothing_for_an_off_topic_question(agent, model: str) -> None:
    agent.memory_config(_local(model))
    for rel, text in NOTES.items():
        agent.write(rel, text)
    agent.index()
    rows = _reference_rows(agent)
    assert len(rows) == len(REFERENCE_TEXTS) == len(set(REFERENCE_HASHES)), rows  # in once `index` returns
    assert {d for _, d, _ in rows} == {384}  # both models' vector size
    (paraphrase, note), off_topic = CASES[model]
    found = agent.search(paraphrase)["results"]
    assert found and found[0]["path"] == note, [(r["path"], r["score"]) for r in found]
    stray = agent.search(off_topic)["results"]
    assert stray == [], [(r["path"], r["score"]) for r in stray]


def test_a_long_lived_engine_takes_the_reference_as_soon_as_it_lands(agent) -> None:
    """A server's engine searched before the reference was cached (the cache off: none is written);
    the next search after a sync cached it has the background, without a restart."""
    ms = _local("minilm")
    agent.memory_config({**ms, "cache": {"enabled": False}})
    notes = list(NOTES.items())
    for rel, text in notes[:3]:
        agent.write(rel, text)
    agent.index()
    assert _reference_rows(agent) == []  # the cache off: nothing cached, so nothing sent to embed
    engine = MemorySearch(agent.settings())
    try:
        assert _paths(agent, "radiator racket", engine) == []  # raw cosine: under minScore
        agent.memory_config(ms)
        agent.write(*notes[3])
        agent.index()
        assert len(_reference_rows(agent)) == len(REFERENCE_TEXTS)
        assert _paths(agent, "radiator racket", engine)[:1] == ["memory/2026-04-01.md"]
    finally:
        engine.close()


def test_the_reference_is_embedded_once_per_provider_identity(agent, fresh_services, server) -> None:
    """One request embeds the reference texts with the first notes; a later sync embeds only
    its new note, and the cache rows of the reference are not rewritten."""
    agent.use_openai_at(server.base("openai"))
    agent.write("memory/a.md", "# A\nThe heron nests by the quarry.\n")
    agent.index()
    embedded = [r.n_items for r in server.log_for("openai")]
    assert embedded == [len(REFERENCE_TEXTS) + 1], embedded  # one request: the note's chunk and the texts
    first = _reference_rows(agent)
    assert len(first) == len(REFERENCE_TEXTS)
    server.reset()
    agent.write("memory/b.md", "# B\nThe kestrel hunts over the motorway verge.\n")
    agent.index()
    assert [r.n_items for r in server.log_for("openai")] == [1]
    assert _reference_rows(agent) == first  # same rows, same updated_at
    # A rebuild of the same provider identity finds them in the cache too: no text is embedded again.
    server.reset()
    agent.index(force=True)
    assert sum(r.n_items for r in server.log_for("openai")) <= 1  # (at most the size probe of --force)
    assert _reference_rows(agent) == first


def test_a_keyword_only_index_sends_no_reference_and_searches_as_before(agent) -> None:
    from memindex.workers.broker import get_broker
    from tests.test_wire import _Recorder

    agent.memory_config({"provider": "none"})
    for rel, text in NOTES.items():
        agent.write(rel, text)
    broker = get_broker()
    rec = _Recorder()
    broker.middleware.append(rec)
    try:
        agent.index()
    finally:
        broker.middleware.remove(rec)
    sent = [m for m in rec.sent if b"embed_chunks" in m or b"write_reference" in m]
    assert rec.sent and sent == []
    r = open_reader(agent.settings())
    try:
        with r.snapshot() as snap:
            assert snap.cache_entries() == 0
    finally:
        r.close()
    res = agent.search("piano recital")
    assert res["mode"] == "fts-only" and [x["path"] for x in res["results"]] == ["memory/2026-04-02.md"]


def _drop_reference_rows(agent: Agent) -> None:
    """What a store indexed before the reference texts existed holds: its notes' rows only. (From
    another process, as a user's sqlite3 would: a connection of this one that closed would drop the
    locks this process's store connections hold, sqlite's POSIX-lock rule.)"""
    import subprocess
    import sys

    script = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
              "c.executemany('DELETE FROM embedding_cache WHERE hash = ?', [(h,) for h in sys.argv[2:]]); c.commit()")
    subprocess.run([sys.executable, "-c", script, str(agent.settings().store_path), *REFERENCE_HASHES], check=True)
    assert _reference_rows(agent) == []


def test_a_sync_with_nothing_to_index_brings_the_reference_to_a_small_store_that_lacks_it(
        agent, fresh_services, server) -> None:
    """A store from before the reference texts (or whose cache lost them): a no-change `index` used
    to leave it ranking on raw cosines until its next edit. Now that sync embeds them (one request),
    and the next no-change sync finds them and sends nothing: `index` (the CLI's planner) and a
    worker's sync (``run_sync``) alike."""
    from memindex.pipeline.index.indexer import mark_path
    from memindex.pipeline.index.indexer import read_mark
    from memindex.producers.dispatch import wait_idle
    from memindex.workers.sync import run_sync

    agent.use_openai_at(server.base("openai"))
    agent.write("memory/a.md", "# A\nThe heron nests by the quarry.\n")
    agent.index()
    agent.index()  # (records the vector size it learnt: the next one is a no-op)
    first = _reference_rows(agent)
    assert len(first) == len(REFERENCE_TEXTS)
    _drop_reference_rows(agent)
    server.reset()
    counts = agent.index()
    assert counts["to_index"] == 0 and counts["unchanged"] == 1, counts
    assert [r.n_items for r in server.log_for("openai")] == [len(REFERENCE_TEXTS)]
    assert [(h, d) for h, d, _ in _reference_rows(agent)] == [(h, d) for h, d, _ in first]
    server.reset()
    agent.index()
    assert server.log_for("openai") == []
    assert read_mark(agent.settings().store_path)["referenceChecked"] is True  # not looked at again
    # The sync actor's own planner (a watcher's or a worker's sync) does the same. (A new no-change
    # mark: the one above already noted its offer.)
    _drop_reference_rows(agent)
    mark_path(agent.settings().store_path).unlink()
    assert run_sync(agent.ctx)["to_index"] == 0
    assert wait_idle(agent.ctx, timeout=60)
    assert [r.n_items for r in server.log_for("openai")] == [len(REFERENCE_TEXTS)]
    assert len(_reference_rows(agent)) == len(REFERENCE_TEXTS)
    server.reset()
    run_sync(agent.ctx)
    assert wait_idle(agent.ctx, timeout=60)
    assert server.log_for("openai") == []


def test_a_failing_provider_is_asked_for_the_reference_once_not_by_every_no_change_sync(
        agent, fresh_services, server) -> None:
    """The offer is noted in the no-change mark: a provider that refuses it (here a wrong key, 401)
    is not asked again by each later no-change `index`, which stays the queue-free no-op it was
    (a retried 500 held each of them ~18 s). The next change of the store offers them again."""
    from memindex.pipeline.embeddings.embedder import reset_services

    agent.use_openai_at(server.base("openai"))
    agent.write("memory/a.md", "# A\nThe heron nests by the quarry.\n")
    agent.index()
    agent.index()  # (records the vector size it learnt: the next one is a no-op)
    _drop_reference_rows(agent)
    server.reset()
    server.always("openai", {"status": 401, "message": "Incorrect API key provided"})
    agent.index()
    assert [r.n_items for r in server.log_for("openai")] == [len(REFERENCE_TEXTS)]  # asked, refused
    assert _reference_rows(agent) == []
    server.requests.clear()
    for _ in range(2):
        assert agent.index()["unchanged"] == 1
    assert server.log_for("openai") == []
    server.always("openai", None)
    agent.write("memory/b.md", "# B\nThe kestrel hunts over the verge.\n")
    reset_services()  # (a new process: this one holds on to the refused key, as a wrong key stays wrong)
    assert "failed" not in agent.index()  # an edit: its first group carries them, as on any index
    assert len(_reference_rows(agent)) == len(REFERENCE_TEXTS)


def test_a_store_big_enough_for_its_own_background_is_not_sent_the_reference_again(
        agent, fresh_services, server) -> None:
    """MIN_BACKGROUND files or more: their chunks are the background, so a no-change sync neither
    reads the cache for the reference nor sends it (it comes with the next edit's first group)."""
    from memindex.pipeline.search.ranking import MIN_BACKGROUND

    agent.use_openai_at(server.base("openai"))
    for i in range(MIN_BACKGROUND):
        agent.write(f"memory/n{i}.md", f"# N{i}\nNote number {i} about the heron.\n")
    agent.index()
    _drop_reference_rows(agent)
    server.reset()
    agent.index()
    assert server.log_for("openai") == []
    assert _reference_rows(agent) == []
