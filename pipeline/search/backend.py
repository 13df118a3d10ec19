"""Which engine answers ``memory_search``: the built-in store or qmd (F15).

``memory.backend = "qmd"`` gets a ``FallbackSearch``: qmd serves while it
works; when it is missing, exits non-zero, times out or prints unparseable
JSON, one warning is logged and the built-in store answers until a
cool-down has passed, then qmd is tried again. ``backend`` on every response
and in ``status()`` says which engine actually served.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, runtime_checkable

from memindex.pipeline.config.agents import PerSettings
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.errors import QmdError, UsageError, checked_call, require
from memindex.pipeline.search.corpus import search_corpus
from memindex.pipeline.search.scope import check_scope
from memindex.pipeline.search.engine import (
    MAX_CANDIDATES, AsyncSearch, MemorySearch, SearchResponse, SearchResult, check_search_args, citation_for,
    citations_on,
)

if TYPE_CHECKING:  # the qmd manager is imported only when memory.backend is "qmd" (CLI start-up)
    from memindex.pipeline.search.qmd.manager import QmdManager

log = logging.getLogger("memindex.backend")

DEFAULT_RETRY_AFTER_S = 60.0


def qmd_scope(settings: AgentSettings) -> Any:
    """memory.qmd.scope, else memory.scope, else memorySearch.scope (None: direct chats only)."""
    m = settings.memory
    return m.qmd.scope or m.scope or settings.memory_search.scope


def clamp_injected(results: list[SearchResult], max_chars: int) -> list[SearchResult]:
    """Keep the total snippet text within ``max_chars``; the last kept snippet is cut short."""
    out, left = [], max_chars
    for r in results:
        if left <= 0:
            break
        if len(r.snippet) > left:
            suffix = f"\n\nSource: {r.citation}" if r.citation else ""
            suffix = suffix if suffix and r.snippet.endswith(suffix) else ""  # keep the citation whole
            body = r.snippet[: len(r.snippet) - len(suffix)]
            keep = left - len(suffix)
            if keep <= 0:
                break
            r.snippet = body[:keep].rstrip() + suffix
        out.append(r)
        left -= len(r.snippet)
    return out


def diversify_by_source(results: list[SearchResult], limit: int) -> list[SearchResult]:
    """Interleave memory and session hits, best source first, so neither crowds out the other."""
    groups: dict[str, list[SearchResult]] = {}
    for r in results:
        groups.setdefault(r.source, []).append(r)
    if len(groups) < 2:
        return results[:limit]
    order = sorted(groups.values(), key=lambda g: -g[0].score)
    out: list[SearchResult] = []
    while len(out) < limit and any(order):
        for g in order:
            if g and len(out) < limit:
                out.append(g.pop(0))
    return out


class FallbackSearch(AsyncSearch):
    """qmd first, the built-in ``MemorySearch`` whenever qmd cannot answer."""

    def __init__(self, settings: AgentSettings, *, manager: QmdManager | None = None,
                 builtin: MemorySearch | None = None, retry_after_s: float = DEFAULT_RETRY_AFTER_S,
                 clock: Callable[[], float] = time.monotonic, **builtin_kw: Any) -> None:
        self.settings = settings
        if manager is None:
            # lazy: the qmd manager (subprocess, collections, transcript export) only with memory.backend
            # "qmd"; this module is on every search's path
            from memindex.pipeline.search.qmd.manager import manager_for

            manager = manager_for(settings)
        self.manager = manager
        self._builtin = builtin
        self._builtin_kw = builtin_kw
        self.retry_after_s = retry_after_s
        self.clock = clock
        self._lock = threading.Lock()
        self._failed_at: float | None = None
        self.fallback_reason: str | None = None
        self.fallback_kind: str | None = None
        self.served_by: str | None = None

    @property
    def builtin(self) -> MemorySearch:
        with self._lock:
            if self._builtin is None:
                self._builtin = MemorySearch(self.settings, **self._builtin_kw)
            return self._builtin

    def _qmd_due(self) -> bool:
        with self._lock:
            return self._failed_at is None or self.clock() - self._failed_at >= self.retry_after_s

    def _mark_failed(self, exc: QmdError) -> None:
        with self._lock:
            first = self._failed_at is None
            self._failed_at = self.clock()
            self.fallback_reason, self.fallback_kind = str(exc), exc.kind
        if first:  # one warning per outage, not one per search
            log.warning("qmd backend unavailable for %s (%s); answering from the built-in index",
                        self.settings.agent_id, exc)

    def _mark_ok(self) -> None:
        with self._lock:
            recovered = self._failed_at is not None
            self._failed_at = self.fallback_reason = self.fallback_kind = None
        if recovered:
            log.warning("qmd backend recovered for %s; serving from qmd again", self.settings.agent_id)

    @checked_call("asearch")
    async def asearch(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
                      session_key: str | None = None, chat_type: str | None = None,
                      corpus: str | None = None) -> SearchResponse:
        """A qmd search waits on a subprocess (up to its timeout): on the waiting pool, so a hung qmd
        never holds the thread every other agent's async search and get queue for."""
        # lazy: asyncio (~30 ms) only for async callers; the CLI's and the hooks' searches are sync
        from memindex.pipeline.search.aio import run_waiting

        return await run_waiting(self.search, query, max_results=max_results, min_score=min_score,
                                 session_key=session_key, chat_type=chat_type, corpus=corpus)

    @checked_call("search")
    def search(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               session_key: str | None = None, chat_type: str | None = None,
               corpus: str | None = None) -> SearchResponse:
        self._check_open()
        check_search_args(query, max_results, min_score, session_key, chat_type, self.settings.agent_id)
        resp: SearchResponse = search_corpus(self._search, self._empty, self.settings, corpus, max_results,
                                             MAX_CANDIDATES, query=query, min_score=min_score,
                                             session_key=session_key, chat_type=chat_type)
        return resp

    def _empty(self) -> SearchResponse:
        return SearchResponse(results=[], provider="qmd", model=self.manager.search_mode,
                              citations=self.settings.memory.citations, mode=self.manager.search_mode,
                              backend="qmd")

    def _search(self, query: str, *, max_results: int | None, min_score: float | None,
                session_key: str | None, chat_type: str | None) -> SearchResponse:
        resp = self._empty()
        if not self.settings.enabled:  # OpenClaw's failure shape, as the builtin engine answers it
            resp.warning = "memory search is disabled for this agent"
            resp.extra.update(disabled=True, error=f"memory search is disabled for agent {self.settings.agent_id!r}")
            return resp
        # Scope first: a denied chat must not even reach qmd.
        if not check_scope(qmd_scope(self.settings), session_key, chat_type).allowed:
            resp.warning = "memory search is not allowed in this chat (scope rules)"
            return resp
        query = query.strip()  # (never empty: check_search_args refused that)
        if self._qmd_due():
            try:
                results = self.manager.search(query, max_results=max_results, min_score=min_score)
            except QmdError as exc:
                self._mark_failed(exc)
            else:
                self._mark_ok()
                self.served_by = "qmd"
                resp.results = self._finish(results, session_key, max_results)
                return resp
        return self._from_builtin(query, max_results, min_score, session_key, chat_type)

    def _finish(self, results: list[SearchResult], session_key: str | None,
                max_results: int | None) -> list[SearchResult]:
        limits = self.manager.cfg.limits
        limit = min(limits.max_results, max_results or limits.max_results)
        results = diversify_by_source(results, limit)
        if citations_on(self.settings.memory.citations, session_key):
            for r in results:
                r.citation = citation_for(r.path, r.startLine, r.endLine)
                r.snippet = f"{r.snippet.strip()}\n\nSource: {r.citation}"
        return clamp_injected(results, limits.max_injected_chars)

    def _from_builtin(self, query: str, max_results: int | None, min_score: float | None,
                      session_key: str | None, chat_type: str | None) -> SearchResponse:
        self.served_by = "builtin"
        resp = self.builtin.search(query, max_results=max_results, min_score=min_score,
                                   session_key=session_key, chat_type=chat_type)
        resp.backend = "builtin"
        resp.extra["backendFallback"] = {"from": "qmd", "reason": self.fallback_reason,
                                         "kind": self.fallback_kind}
        why = (self.fallback_reason or self.fallback_kind or "").strip().splitlines() or ["?"]
        # The built-in index's own warning (e.g. "no index yet") is kept after it: hiding that qmd
        # failed behind it left the user with "run `memindex index`" and no word about qmd.
        resp.warning = (f"qmd unavailable ({why[0][:200]}); answered from the built-in index"
                        + (f" ({resp.warning})" if resp.warning else ""))
        return resp

    def status(self, *, probe: bool = False) -> dict[str, Any]:
        """``backend`` is what serves now; ``probe`` runs a cheap qmd check first if nothing has yet."""
        self._check_open()
        if probe and self.served_by is None and self._qmd_due():
            try:
                self.manager.probe()
                self._mark_ok()
            except QmdError as exc:
                self._mark_failed(exc)
        with self._lock:
            failed_at = self._failed_at
            out: dict[str, Any] = {
                "backend": "builtin" if failed_at is not None else "qmd",
                "requestedBackend": "qmd",
                "fallback": {"from": "qmd", "reason": self.fallback_reason, "kind": self.fallback_kind,
                             "retryInS": max(0.0, round(self.retry_after_s - (self.clock() - failed_at), 1))}
                if failed_at is not None else None,
            }
        out["qmd"] = self.manager.status()
        return out

    def close(self) -> None:
        self._closed = True
        if self._builtin is not None:
            self._builtin.close()


@runtime_checkable
class SearchEngine(Protocol):
    """What ``open_search`` returns, whichever backend serves: ``MemorySearch`` or ``FallbackSearch``."""

    def search(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               session_key: str | None = None, chat_type: str | None = None,
               corpus: str | None = None) -> SearchResponse: ...

    async def asearch(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
                      session_key: str | None = None, chat_type: str | None = None,
                      corpus: str | None = None) -> SearchResponse:
        """``search`` without blocking the event loop (runs on a small shared thread pool)."""
        ...

    def status(self, *, probe: bool = False) -> dict[str, Any]: ...

    def close(self) -> None:
        """Release the store; later calls raise ``UsageError``. ``with open_search(s) as e:`` closes too."""
        ...

    def __enter__(self) -> "SearchEngine": ...

    def __exit__(self, *exc: object) -> None: ...


# What open_search passes on: MemorySearch's options, and FallbackSearch's for the qmd backend.
OPEN_SEARCH_KEYWORDS = ("query_embedder", "schedule_sync", "clock", "manager", "builtin", "retry_after_s")


def check_keywords(call: str, given: Mapping[str, Any], accepted: tuple[str, ...]) -> None:
    """``UsageError`` naming the unknown keyword arguments and the accepted ones."""
    unknown = [k for k in given if k not in accepted]
    if unknown:
        raise UsageError(f"{call}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                         f"it takes {', '.join(accepted)}")


@checked_call("open_search")
def open_search(settings: AgentSettings, **kw: Any) -> SearchEngine:
    """The engine for ``memory.backend`` (builtin, or qmd with builtin fallback).

    ``kw`` go to ``MemorySearch`` (``query_embedder``, ``schedule_sync``, ``clock``)
    and, for qmd, to ``FallbackSearch`` (``manager``, ``builtin``, ``retry_after_s``).
    """
    require("settings", settings, AgentSettings)
    check_keywords("open_search", kw, OPEN_SEARCH_KEYWORDS)
    # Called on every search's thread, long after this call: a non-callable failed there, once per
    # search, as a logged "'int' object is not callable" - refuse it here, where the caller is.
    for name in ("schedule_sync", "clock"):
        if kw.get(name) is not None and not callable(kw[name]):
            raise UsageError(f"{name} must be callable or None, not {type(kw[name]).__name__}")
    if settings.memory.backend == "qmd":
        return FallbackSearch(settings, **kw)
    for k in ("manager", "builtin", "retry_after_s"):  # qmd-only options
        kw.pop(k, None)
    return MemorySearch(settings, **kw)


_engines: PerSettings[SearchEngine] = PerSettings()


def engine_for(settings: AgentSettings, **kwargs: Any) -> SearchEngine:
    """One cached engine per agent settings (connections and embedder stay warm)."""
    return _engines.get(settings, lambda: open_search(settings, **kwargs))


@checked_call("memory_search")
def memory_search(settings: AgentSettings, query: str, *, max_results: int | None = None,
                  min_score: float | None = None, session_key: str | None = None,
                  chat_type: str | None = None, corpus: str | None = None) -> dict[str, Any]:
    """The ``memory_search`` tool payload as a dict, from the agent's cached engine. ``corpus``:
    memory, sessions, all (the default) or wiki (answered as not indexed by memindex)."""
    # Typed keywords, so a type checker catches OpenClaw's JSON names (maxResults) too; at run
    # time checked_call says which names this call takes (a UsageError, not a TypeError).
    require("settings", settings, AgentSettings)  # (None / an agent id: an AttributeError deep inside)
    return engine_for(settings).search(query, max_results=max_results, min_score=min_score,
                                       session_key=session_key, chat_type=chat_type, corpus=corpus).as_dict()
