"""memory_search behaviour that needs no embeddings: hostile input, citations, scope, threads."""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from memindex.pipeline.errors import UsageError
from memindex.pipeline.search.engine import MemorySearch
from tests.conftest import errors_in_threads

HOSTILE = [
    '"', '""', '"unbalanced', "*", "foo*", "NEAR(a b)", "NEAR(", "a AND", "AND", "OR OR", "NOT x", "-x", "- -",
    "col:val", "text:foo", "^start", "(", ")", "((a)", "a + b", "{a b}", "[x]", "\\", "'; DROP TABLE meta;--",
    "\x00", "\x00abc", "🤖🔥", "%", "_", "a' OR '1'='1", "x" * 5000, "é" * 300, "東京" * 200, " ", "\t\n",
    "NEAR(\"a\" \"b\", 3)", "a:b:c", "* * *", "\"\"\"", "OR", "AND NOT", "foo-bar-baz", "ERR_SIG_4012",
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from tests.conftest import Agent

    a = Agent(tmp_path_factory.mktemp("search"))
    a.write("MEMORY.md", "# Memory\nRouter: Omada ER605. ERR_SIG_4012 fixed by Mara.\n")
    a.write("memory/2026-02-10.md", "Configured VLAN 10 for IoT devices. Café meeting at 10.\n")
    a.index()
    eng = MemorySearch(a.settings())
    yield eng
    eng.close()


def search_or_refused(engine, q):
    """The results of a query; an empty or blank one is the caller's UsageError (the CLI and the
    servers refuse it too), never an empty answer that reads as "nothing recorded"."""
    if not q.strip():
        with pytest.raises(UsageError, match="the query is empty"):
            engine.search(q)
        return []
    return engine.search(q).as_dict()["results"]


@pytest.mark.parametrize("q", HOSTILE)
def test_hostile_queries_never_raise(engine, q):
    assert isinstance(search_or_refused(engine, q), list)


@settings(max_examples=160, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=200))
def test_random_queries_never_raise(engine, q):
    assert isinstance(search_or_refused(engine, q), list)


def test_exact_token_found(engine):
    res = engine.search("ERR_SIG_4012").as_dict()
    assert res["results"][0]["path"] == "MEMORY.md"


def test_citations_modes(agent):
    agent.write("memory/a.md", "papaya smoothie recipe\n")
    agent.index()
    for mode, expect in (("on", True), ("off", False), ("auto", True)):
        agent.write_config({"memory": {"citations": mode}})
        r = agent.search("papaya")["results"][0]
        assert ("Source: memory/a.md#L1" in r["snippet"]) is expect
        assert r["path"] == "memory/a.md"  # the path stays in the result either way
    agent.write_config({"memory": {"citations": "auto"}})
    r = agent.search("papaya", session_key="agent:main:discord:group:123")
    # auto in a group chat: no citation (and the default scope denies group chats anyway)
    assert r["results"] == [] or "Source:" not in r["results"][0]["snippet"]
    # OpenClaw parses only `agent:<id>:<rest>` keys: any other shape is a direct chat (helper-55).
    r = agent.search("papaya", session_key="discord:group:123")
    assert "Source: memory/a.md#L1" in r["results"][0]["snippet"]


def test_snippets_are_capped(agent):
    agent.write("memory/long.md", "zucchini " * 400)
    agent.index()
    r = agent.search("zucchini", max_results=1)["results"][0]
    assert len(r["snippet"].split("\n\nSource:")[0]) <= 700


def test_concurrent_searches_from_threads(engine):
    def searches():
        for _ in range(30):
            assert engine.search("VLAN IoT").results

    assert errors_in_threads(searches) == []


def test_max_results_above_what_a_search_returns_is_said(agent):
    """--max-results 400 answered 200 results with no word (each arm returns at most 200)."""
    from memindex.pipeline.search.engine import MAX_CANDIDATES

    agent.write("memory/a.md", "soursop smoothie\n")
    agent.index()
    res = agent.search("soursop", max_results=MAX_CANDIDATES + 1)
    assert res["results"] and f"at most {MAX_CANDIDATES} results" in res["warning"], res
    assert "warning" not in agent.search("soursop", max_results=MAX_CANDIDATES)


def test_max_results_above_the_cap_returns_at_most_the_cap(agent):
    """helper-62: each arm returns at most MAX_CANDIDATES, and their union was ranked to maxResults:
    maxResults 300 answered 300 under the warning "at most 200 results" (and that top 300 was not
    the top 300 of the store)."""
    from memindex.pipeline.search.engine import MAX_CANDIDATES

    agent.memory_config({"provider": "hash"})
    for i in range(450):
        agent.write(f"memory/n{i:03d}.md", f"quokka note {i} about the router\n" if i % 2 else f"router {i}\n")
    agent.index()
    res = agent.search("quokka router", max_results=300, min_score=0)
    assert res["mode"] == "hybrid", res.get("warning")
    assert len(res["results"]) == MAX_CANDIDATES, len(res["results"])
    assert f"at most {MAX_CANDIDATES} results" in res["warning"]
