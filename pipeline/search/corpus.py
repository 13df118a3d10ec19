"""``memory_search``'s ``corpus`` argument (OpenClaw 2026.9): which indexed sources a search reads.

``memory`` reads the memory files, ``sessions`` the indexed session transcripts, ``all`` (and no
corpus) the agent's default search sources (``searchSources``: every indexed source in a 2026.3
config). ``wiki`` is OpenClaw's wiki plugin corpus, which memindex does not index: the answer says
so rather than looking like "nothing found". A corpus narrower than the engine's sources is
searched over the widest candidate window (as OpenClaw's post-filter does), then cut to maxResults.
"""

from __future__ import annotations

from typing import Any, Callable

from memindex.pipeline.errors import UsageError

CORPORA = ("memory", "wiki", "all", "sessions")  # OpenClaw's enum, in its order
WIKI_NOT_INDEXED = "the wiki corpus is not indexed by memindex (memindex indexes memory files and session transcripts)"


def check_corpus(corpus: Any) -> None:
    if corpus is not None and corpus not in CORPORA:
        raise UsageError(f"corpus must be one of: {', '.join(CORPORA)} (got {corpus!r})")


def corpus_sources(settings: Any, corpus: str | None) -> tuple[list[str], str | None]:
    """(the sources to search, why there are none): an empty list comes with a reason."""
    ms = settings.memory_search
    indexed = list(settings.sources)
    default = [s for s in (ms.search_sources or indexed) if s in indexed] or indexed
    if corpus in (None, "all"):
        return default, None
    if corpus == "wiki":
        return [], WIKI_NOT_INDEXED
    if corpus not in indexed:
        return [], (f"{corpus} are not indexed for agent {settings.agent_id!r}" if corpus == "sessions"
                    else f"the {corpus} corpus is not indexed for agent {settings.agent_id!r}") + (
            f" (session search needs {settings.keys.key('experimental.sessionMemory')} and \"sessions\" in sources)"
            if corpus == "sessions" else "")
    return [corpus], None


def search_corpus(run: Callable[..., Any], empty: Callable[[], Any], settings: Any, corpus: str | None,
                  max_results: int | None, window: int, **kw: Any) -> Any:
    """``run(max_results=..., **kw)`` (an engine's own search) restricted to ``corpus``'s sources."""
    check_corpus(corpus)
    sources, why = corpus_sources(settings, corpus)
    if not sources:
        resp = empty()
        resp.warning = why
        resp.extra["corpus"] = corpus
        return resp
    if set(sources) >= set(settings.sources):
        resp = run(max_results=max_results, **kw)
    else:
        limit = int(settings.memory_search.query.max_results if max_results is None else max_results)
        resp = run(max_results=max(window, limit), **kw)
        resp.results = [r for r in resp.results if r.source in sources][:limit]
    if corpus is not None:
        resp.extra["corpus"] = corpus
    return resp
