"""``memory_search`` for the agent runtime, in-process (P4, F10-F13, F16).

Orchestration only: the store's read snapshot does the SQL, ``ranking`` the
math. Each search reads one snapshot (the live generation and its rows in one
read transaction, so a rebuild promoting a new generation never pulls tables
from under it) and never waits for indexing: results may be briefly stale.
Syncs are *scheduled* through a callback the runtime supplies (on search, on
session start), never run here.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Mapping, Protocol, Self, runtime_checkable

from memindex.pipeline.config.paths import normalize_agent_id
from memindex.pipeline.config.settings import CHAT_TYPES, AgentSettings
from memindex.pipeline.embeddings import registry
from memindex.pipeline.index.fingerprint import other_workspace
from memindex.pipeline.index.session_text import valid_unicode
from memindex.pipeline.index.workspace import LEFT_UNCHANGED, indexed_path_filter, roots_refusal
from memindex.pipeline.store.fts_budget import FtsBudget
from memindex.pipeline.store.fts_text import MAX_QUERY_CHARS, content_terms, keys_in, match_query_and_keywords
from memindex.pipeline.search.corpus import check_corpus, search_corpus
from memindex.pipeline.search.ranking import (
    MIN_BACKGROUND, Candidate, CosineBackground, cosine_background, keyword_evidence, normalize_weights,
    rank_pipeline, relative_text_score, term_weights,
)
from memindex.pipeline.search.reference import REFERENCE_HASHES
from memindex.pipeline.search.provenance import Provenance, provenance
from memindex.pipeline.search.scope import agent_from_key
from memindex.pipeline.search.snippet import centred_snippet
from memindex.pipeline.store.reader import ChunkRow, ReadSnapshot, StoreReader, open_reader
from memindex.pipeline.store.schema import vec_dims_key
from memindex.pipeline.store.vector_mirror import VectorMirror, knn
from memindex.pipeline.store.vectors import is_zero
from memindex.pipeline.errors import ProviderError, UsageError, checked_call, require

log = logging.getLogger("memindex.search")

MAX_CANDIDATES = 200
# Chunks whose cosines with the query say what this index's model gives text in general
# (ranking.cosine_background); re-sampled when the generation changes or grows by a quarter.
BACKGROUND_SAMPLE = 256
# How often a search that cannot schedule its sync (a broker down) says so again while it lasts.
SCHEDULE_FAILURE_REPORT_S = 60.0
_schedule_ok_at = float("-inf")  # when any engine of this process last scheduled a sync (monotonic)

# With sqlite-vec, generations from this many chunks are searched in an in-memory
# mirror (vec0's scalar scan costs ~0.42 us per 384-dim vector), unless the mirror
# would exceed the byte cap (100k x 1536 dims would): then vec0 it is.
MIRROR_MIN_ROWS = 10_000
MIRROR_MAX_BYTES = 400 * 2**20

ScheduleSync = Callable[[AgentSettings, str], None]


@dataclass
class _Failing:
    """An engine's sync scheduling while it fails (monotonic times)."""

    since: float  # the first failure
    said: float  # the last failure logged at WARNING
    last: float  # the last failure
    held: int = 0  # failures since ``said`` logged at DEBUG only


@dataclass
class SearchResult:
    path: str
    startLine: int
    endLine: int
    score: float
    snippet: str
    source: str
    # OpenClaw 2026.9's record of where the text came from (provenance.py): after `source`, as memory-core orders it.
    provenance: Provenance | None = None
    citation: str | None = None
    vectorScore: float | None = None
    textScore: float | None = None
    kind: str | None = None  # "image" / "audio" for multimodal results (F17); None for text
    # The lines the snippet shows (startLine/endLine stay the chunk's, as in OpenClaw).
    snippetStartLine: int | None = None
    snippetEndLine: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class SearchResponse:
    results: list[SearchResult]
    provider: str
    model: str
    fallback: bool = False
    citations: str = "auto"
    mode: str = "fts-only"
    backend: str = "builtin"
    indexing: str | None = None  # "pending" while an index is being built
    warning: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = {
            "results": [r.as_dict() for r in self.results],
            "provider": self.provider, "model": self.model, "fallback": self.fallback,
            "citations": self.citations, "mode": self.mode, "backend": self.backend,
        }
        for k in ("indexing", "warning"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        d.update(self.extra)
        return d


def unavailable_response(resp: SearchResponse, exc: BaseException) -> SearchResponse:
    """A search that failed, in OpenClaw's memory_search failure shape (``disabled``,
    ``unavailable``, ``error``, ``action``): an empty list with only a warning read as "nothing
    recorded" to a runtime written for OpenClaw, and the servers answered it with 200."""
    error = f"{type(exc).__name__}: {exc}"
    resp.warning = f"Memory search is unavailable ({error}); no results"
    resp.extra.update(disabled=True, unavailable=True, error=error,
                      action="Check the memory index (`memindex status`), then retry memory_search.")
    return resp


def citation_for(path: str, start: int, end: int) -> str:
    return f"{path}#L{start}" if start == end else f"{path}#L{start}-L{end}"


_MEDIA_KINDS = frozenset({"image", "audio"})


def _note_media(rows: Iterable[ChunkRow], kinds: dict[str, str]) -> None:
    """Note the image/audio chunks among ``ReadSnapshot.chunk_rows`` rows: a result names its kind."""
    for r in rows:
        if r[7] in _MEDIA_KINDS:
            kinds[r[1]] = r[7]


def citations_on(mode: str, session_key: str | None) -> bool:
    """auto: only in direct chats (a key naming a group/channel is not direct)."""
    if mode == "on":
        return True
    if mode == "off":
        return False
    if not session_key:
        return True
    parts = session_key.lower().split(":")
    if len(parts) < 3 or parts[0] != "agent":
        return True  # OpenClaw parses only `agent:<id>:<rest>` keys; any other is a direct chat
    return not ({"group", "channel"} & set(parts[2:]))


def check_search_args(query: Any, max_results: Any, min_score: Any, session_key: Any, chat_type: Any,
                      agent_id: str | None = None) -> None:
    """What every engine's ``search`` accepts (the MCP and HTTP tools check the same before calling).
    ``agent_id``: the engine's agent; a session key of another agent (``agent:<id>:...``) is refused,
    as the servers and the CLI refuse it (in-process it quietly answered from this agent's memory)."""
    require("query", query, str)
    require("max_results", max_results, int, optional=True)
    require("min_score", min_score, (int, float), optional=True)
    require("session_key", session_key, str, optional=True)
    require("chat_type", chat_type, str, optional=True)
    # An empty query answered no results, the shape of "nothing recorded", where the CLI and the
    # servers refuse it; a chat type no scope rule can name was taken silently (as no rule's).
    if why := query_problem(query):
        raise UsageError(why)
    if chat_type is not None and chat_type.lower() not in CHAT_TYPES:
        raise UsageError(f"chat_type must be one of: {', '.join(CHAT_TYPES)} (or None: from the session key), "
                         f"not {chat_type!r}")
    if max_results is not None and max_results < 1:
        raise UsageError(f"max_results must be at least 1, not {max_results}")
    if min_score is not None and not math.isfinite(min_score):
        raise UsageError(f"min_score must be a finite number, not {min_score}")
    # Scores are at most 1: above it matched nothing, silently. Below 0 stays open here (unlike the CLI,
    # the servers and query.minScore): a library caller may want every hit, negative cosines included.
    if min_score is not None and min_score > 1:
        raise UsageError(f"min_score must be at most 1 (scores are 0..1), not {min_score:g}")
    keyed = agent_from_key(session_key)
    if agent_id is not None and keyed is not None and normalize_agent_id(keyed) != agent_id:
        raise UsageError(f"session_key {session_key!r} is a session of agent {keyed!r}, and this engine searches "
                         f"agent {agent_id!r}'s memory; open the engine of that agent")


def query_problem(query: str) -> str | None:
    """Why a query is refused, or None: the CLI's QUERY, the servers' ``query`` and the library's
    ``search(query)`` (a ``UsageError``) say it in these words (an empty query answered "No matches."
    on the CLI, 200 with no results on the servers, and an empty SearchResponse in-process)."""
    return None if query.strip() else "the query is empty; give the words to search for"


def min_score_problem(min_score: float) -> str | None:
    """Why a user's minScore is refused, or None (the CLI's ``--min-score``, the servers' ``minScore``):
    scores are 0..1 (query.minScore's range), so 2 matched nothing and inf/nan all or nothing, silently."""
    if not math.isfinite(min_score):
        return f"must be a finite number, got {min_score}"
    if not 0 <= min_score <= 1:
        return f"must be between 0 and 1 (scores are 0..1), got {min_score:g}"
    return None


class _Searches(Protocol):
    settings: AgentSettings

    def search(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               session_key: str | None = None, chat_type: str | None = None,
               corpus: str | None = None) -> SearchResponse: ...


class AsyncSearch:
    """``await engine.asearch(...)``: ``search`` on the shared thread pool, so an event loop never
    blocks on it; ``with engine:`` closes it; a closed engine refuses calls (mixed into every engine)."""

    _closed = False

    def _check_open(self) -> None:
        if self._closed:  # it would reopen its store quietly and hold it again: a caller's bug, said
            raise UsageError("this search engine is closed; open another with memindex.open_search")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:  # every engine this is mixed into defines its own
        raise NotImplementedError

    @checked_call("asearch")
    async def asearch(self: _Searches, query: str, *, max_results: int | None = None,
                      min_score: float | None = None, session_key: str | None = None,
                      chat_type: str | None = None, corpus: str | None = None) -> SearchResponse:
        # lazy: asyncio (~30 ms) only for async callers; the CLI's and the hooks' searches are sync
        from memindex.pipeline.search import aio

        kw = dict(max_results=max_results, min_score=min_score, session_key=session_key, chat_type=chat_type,
                  corpus=corpus)
        waits = getattr(self, "_query_waits", None)
        if isinstance(query, str) and waits is not None and waits(query.strip()):
            return await aio.run_embedding(str(self.settings.store_path), self.search, query, **kw)
        return await aio.run_in_pool(self.search, query, **kw)


@runtime_checkable
class QueryEmbedder(Protocol):
    """What search needs from an embedding provider: a query vector for the live index, or None.

    ``index_fp`` is the live index's fingerprint, so an embedder can refuse (None)
    when the index was built by another provider. ``is_fallback_index(fp)`` is
    optional: it tells search that the live index came from the fallback provider.
    """

    if TYPE_CHECKING:  # read-only for the type checker: a plain attribute or a property satisfies it
        @property
        def provider(self) -> str: ...
        @property
        def model(self) -> str: ...
    else:  # at run time plain annotations, so a subclass may assign them (self.provider = ...)
        provider: str
        model: str

    def embed_query(self, text: str, index_fp: Mapping[str, Any] | None = None) -> list[float] | None: ...


class MemorySearch(AsyncSearch):
    """One agent's search. Thread-safe; reuse one instance per agent."""

    def __init__(
        self,
        settings: AgentSettings,
        *,
        query_embedder: QueryEmbedder | None | Literal["auto"] = "auto",
        schedule_sync: ScheduleSync | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.reader: StoreReader = open_reader(settings)
        # "auto": resolve the agent's provider lazily, on the first search of a vector index.
        self._auto_embedder = query_embedder == "auto"
        self.query_embedder = None if isinstance(query_embedder, str) else query_embedder
        self.schedule_sync = schedule_sync
        self.clock = clock
        self._warm_sessions: set[str] = set()
        self._lock = threading.Lock()
        self._scheduling = False
        self._schedule_failing: _Failing | None = None  # while scheduling fails
        self._mirror = VectorMirror(settings.store_path)
        self._fts_budget = FtsBudget()
        self._visible: Callable[[str, str], bool] | None = None
        # (generation, dims, rows then, matrix, complete: enough chunks, or the reference texts added)
        self._sample: tuple[int, int, int, Any, bool] | None = None
        self._chunk_count: tuple[tuple[Any, int], int] | None = None  # ((generation, max rowid), chunks)

    def visible(self, source: str, path: str) -> bool:
        """Whether an indexed chunk's file is part of the agent's memory as configured now."""
        if self._visible is None:
            self._visible = indexed_path_filter(self.settings)
        return self._visible(source, path)

    # -- runtime hooks ----------------------------------------------------------
    def warm_session(self, session_key: str | None) -> None:
        """Schedule one sync per session key on session start (fire and forget)."""
        if not self.schedule_sync or not self.settings.memory_search.sync.on_session_start:
            return
        key = session_key or ""
        with self._lock:
            if key in self._warm_sessions:
                return
            self._warm_sessions.add(key)
        self._schedule("session-start")

    def _schedule(self, reason: str) -> None:
        """Fire and forget, off the search's thread: a hung broker (a Redis that accepts and
        never answers) must not stall a search. At most one request is in flight per engine;
        while it hangs, later ones are dropped (the sync it asks for covers them)."""
        if self.schedule_sync is None:
            return
        with self._lock:
            if self._scheduling:
                return
            self._scheduling = True

        schedule = self.schedule_sync

        def run() -> None:
            try:
                schedule(self.settings, reason)
            except Exception as exc:  # noqa: BLE001 - scheduling must never break a search
                self._schedule_failed(reason, exc)
            else:
                global _schedule_ok_at
                now = time.monotonic()
                if self._schedule_failing and not self._outage_ended_elsewhere():
                    log.info("search syncs for %s are scheduled again (after %.0f s)", self.settings.agent_id,
                             now - self._schedule_failing.since)
                self._schedule_failing = None
                _schedule_ok_at = now
            finally:
                with self._lock:
                    self._scheduling = False

        threading.Thread(target=run, name=f"memindex-schedule-{self.settings.agent_id}", daemon=True).start()

    def _schedule_failed(self, reason: str, exc: Exception) -> None:
        """Said once, then once every SCHEDULE_FAILURE_REPORT_S while it lasts: a server whose broker
        is down failed to schedule on every search (~400 lines in 25 s), burying the rest."""
        now = time.monotonic()
        failing = self._schedule_failing
        if failing is None or self._outage_ended_elsewhere():
            self._schedule_failing = _Failing(since=now, said=now, last=now)
            log.warning("could not schedule a %s sync for %s: %s (said again every %.0f s while it lasts)",
                        reason, self.settings.agent_id, exc, SCHEDULE_FAILURE_REPORT_S)
            return
        failing.last = now
        if now - failing.said >= SCHEDULE_FAILURE_REPORT_S:
            log.warning("still cannot schedule syncs for %s after %.0f s (%d attempt(s) not logged): %s",
                        self.settings.agent_id, now - failing.since, failing.held, exc)
            failing.said, failing.held = now, 0
        else:
            failing.held += 1
            log.debug("could not schedule a %s sync for %s: %s", reason, self.settings.agent_id, exc)

    def _outage_ended_elsewhere(self) -> bool:
        """Another engine of this process scheduled a sync after this one last failed: the outage this
        one counted is over (an agent not searched between two outages counted the second from the
        first one's start, and announced its end with the first one's length)."""
        return self._schedule_failing is not None and _schedule_ok_at > self._schedule_failing.last

    # -- search -------------------------------------------------------------------
    @checked_call("search")
    def search(
        self,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        session_key: str | None = None,
        chat_type: str | None = None,
        corpus: str | None = None,
    ) -> SearchResponse:
        """Never raises for what happens at run time: a store it cannot read answers no results,
        with a warning saying why. Arguments of the wrong type are the caller's bug: ``UsageError``.
        ``corpus``: memory, sessions, all (the default sources) or wiki (not indexed by memindex)."""
        self._check_open()
        check_search_args(query, max_results, min_score, session_key, chat_type, self.settings.agent_id)
        check_corpus(corpus)
        try:
            resp: SearchResponse = search_corpus(
                self._search, lambda: self._empty_response(self.settings.memory.citations), self.settings,
                corpus, max_results, MAX_CANDIDATES, query=query, min_score=min_score, session_key=session_key,
                chat_type=chat_type)
            return resp
        except Exception as exc:  # noqa: BLE001 - an agent's tool call must always get an answer
            log.warning("memory search failed for %s: %s: %s", self.settings.agent_id, type(exc).__name__, exc)
            return unavailable_response(self._empty_response(self.settings.memory.citations), exc)

    def _search(
        self,
        query: str,
        *,
        max_results: int | None,
        min_score: float | None,
        session_key: str | None,
        chat_type: str | None,
    ) -> SearchResponse:
        ms = self.settings.memory_search
        citations_mode = self.settings.memory.citations
        resp = self._empty_response(citations_mode)
        if not self.settings.enabled:  # OpenClaw's shape for a search that cannot run
            resp.warning = "memory search is disabled for this agent"
            resp.extra.update(disabled=True, error=f"memory search is disabled for agent {self.settings.agent_id!r}")
            return resp
        self.warm_session(session_key)
        if ms.sync.on_search:
            self._schedule("search")
        # No scope check (``chat_type`` is only part of the shared backend signature): OpenClaw
        # applies ``scope`` to the QMD backend only (backend.py), never to the builtin store.
        query = query.strip()  # (never empty: check_search_args refused that)
        q = ms.query
        max_results = int(q.max_results if max_results is None else max_results)
        min_score = float(q.min_score if min_score is None else min_score)
        n_cand = min(MAX_CANDIDATES, max(1, int(max_results * q.hybrid.candidate_multiplier)))

        with self.reader.snapshot() as snap:
            if snap.generation is None:
                refused = self._index_refused() if snap.state.building_generation is None else None
                if refused is not None:  # no sync will ever build it: not "being built" forever
                    resp.warning = f"agent {self.settings.agent_id!r} has no index: {refused}"
                    return resp
                if snap.state.building_generation is None and self.schedule_sync is None:
                    # Nothing is building it and this engine asks for no sync (the CLI): say so.
                    resp.warning = f"agent {self.settings.agent_id!r} has no index yet; run `memindex index`"
                    return resp
                resp.indexing = "pending"
                resp.warning = "the memory index is being built; results will appear shortly"
                return resp
            if snap.pending_count():
                resp.indexing = "pending"
            held = other_workspace(snap.fingerprint, self.settings)
            if held is not None:  # another workspace's files: never served under this agent's name
                resp.warning = (f"the index of agent {self.settings.agent_id!r} holds the files of workspace {held}, "
                                f"not {self.settings.workspace} (given with --workspace, or moved); no results "
                                "until a sync rebuilds it" + ("" if self.schedule_sync else " (`memindex index`)"))
                if self.schedule_sync is not None:
                    resp.indexing = "pending"
                return resp

            self._describe_index(resp, snap.fingerprint)
            hybrid = q.hybrid
            vw, tw = normalize_weights(hybrid.vector_weight, hybrid.text_weight)
            # A weight of 0 switches its arm off: its hits would only pad the list with score-0 entries.
            qvec = self._query_vector(query, resp, snap.fingerprint) if vw > 0 else None
            dims = snap.state.extra.get(vec_dims_key(snap.generation)) if qvec is not None else None
            # The provider (or a proxy) now answers another size:
            if dims and qvec is not None and len(qvec) != int(dims):
                resp.warning = (f"the query vector has {len(qvec)} dims and the index {dims} (the provider "
                                "changed; `memindex index --force` rebuilds the index); keyword-only results")
                resp.mode, qvec = "fts-only", None
            kinds: dict[str, str] = {}  # chunk id -> kind, for the image/audio chunks among the candidates
            vector_hits = self._vector_candidates(snap, qvec, n_cand, kinds) if qvec is not None else []
            text_hits = []
            # The keyword arm's MATCH and the keys that coverage and snippets locate, from one parse.
            match, keys = match_query_and_keywords(query)
            if qvec is None or (hybrid.enabled and tw > 0):
                text_hits = self._keyword_candidates(snap, query, match, keys, n_cand, q.fusion, kinds)
            background = None
            if q.fusion == "calibrated" and qvec is not None:
                background = self._background(snap, qvec)
                if vector_hits and text_hits:
                    vector_hits += self._keyword_hit_cosines(snap, vector_hits, text_hits, qvec)
            decay, mmr = hybrid.temporal_decay, hybrid.mmr
            # Decay and MMR are steps of the hybrid merge: with hybrid off OpenClaw returns the plain
            # vector results (minScore, then maxResults), whatever hybrid.temporalDecay/mmr say.
            decaying, diversifying = hybrid.enabled and decay.enabled, hybrid.enabled and mmr.enabled
            mtimes = None
            if decaying:
                mtimes = snap.file_mtimes((c.source, c.path) for c in vector_hits + text_hits)
            cands = rank_pipeline(
                vector_hits, text_hits,
                vector_weight=hybrid.vector_weight, text_weight=hybrid.text_weight,
                # Each arm returns at most MAX_CANDIDATES, so their union could be twice that: 300
                # answered 300 under a warning of "at most 200", and its top-300 was not the top 300.
                min_score=min_score, max_results=min(max_results, MAX_CANDIDATES),
                temporal_decay=decaying, half_life_days=decay.half_life_days,
                now=self.clock(), mtimes=mtimes,
                mmr=diversifying, mmr_lambda=mmr.lambda_, fusion=q.fusion, background=background,
                # a full top-K from the vector arm bounds the cosine of every chunk it did not return
                unseen_vector_bound=min(c.vector_score for c in vector_hits) if len(vector_hits) >= n_cand else None,
            )
            # The hits' files as last indexed, read in this snapshot: their provenance's observedAt.
            observed = snap.file_mtimes_ns((c.source, c.path) for c in cands)
        cite = citations_on(citations_mode, session_key)
        resp.results = [self._result(c, cite, keys, kinds.get(c.chunk_id), observed.get((c.source, c.path)))
                        for c in cands]
        if len(query) > MAX_QUERY_CHARS:  # the keyword arm reads only this much: say so
            cut = f"the query is {len(query):,} characters; keywords were taken from its first {MAX_QUERY_CHARS:,}"
            resp.warning = f"{resp.warning}; {cut}" if resp.warning else cut
        if max_results > MAX_CANDIDATES:  # each arm returns at most this many: 400 answered 200, silently
            cap = f"maxResults {max_results} is more than a search returns; at most {MAX_CANDIDATES} results"
            resp.warning = f"{resp.warning}; {cap}" if resp.warning else cap
        return resp

    def _empty_response(self, citations_mode: str) -> SearchResponse:
        return SearchResponse(results=[], provider="none", model="fts-only", citations=citations_mode)

    def _result(self, c: Candidate, cite: bool, keys: frozenset[str], kind: str | None = None,
                mtime_ns: int | None = None) -> SearchResult:
        text, last = c.text, c.end_line
        if text.endswith("\n") and last > c.start_line:
            # The empty line after a final line break counts in endLine (OpenClaw's numbering) but
            # has no text: the snippet ends at the last line of text, and a snippet that reaches it
            # is cited to endLine as OpenClaw cites the chunk (`get` of that range prints the same text).
            text, last = text[:-1], last - 1
        snip = centred_snippet(text, c.start_line, last, keys)
        snip_end = c.end_line if snip.end_line == last else snip.end_line
        citation = citation_for(c.path, snip.start_line, snip_end)
        snippet = f"{snip.text.strip()}\n\nSource: {citation}" if cite else snip.text
        return SearchResult(
            path=c.path, startLine=c.start_line, endLine=c.end_line, score=round(c.score, 6),
            snippet=snippet, source=c.source, provenance=provenance(c.source, c.path, mtime_ns),
            citation=citation if cite else None,
            vectorScore=round(c.vector_score, 6) if c.has_vector else None,
            textScore=round(c.text_score, 6) if c.has_text else None, kind=kind,
            snippetStartLine=snip.start_line, snippetEndLine=snip_end,
        )

    def _index_refused(self) -> str | None:
        """Why no sync can index this agent (its workspace is missing), else None."""
        if "memory" not in self.settings.sources:
            return None
        refused = roots_refusal(self.settings)
        return refused.replace(LEFT_UNCHANGED, "") if refused else None

    def _describe_index(self, resp: SearchResponse, fp: dict[str, Any] | None) -> None:
        """provider/model in results are those of the vectors in the live index."""
        if not fp:
            return
        resp.provider, resp.model = fp.get("provider", "none"), fp.get("model", "fts-only")
        resp.mode = "hybrid" if resp.provider != "none" else "fts-only"

    def _query_waits(self, query: str) -> bool:
        """Would this search wait on a remote provider for its query vector (``asearch`` then runs
        it on this agent's own threads)? Before the embedder is built, the configured provider says."""
        emb = self.query_embedder
        if emb is not None:
            waits = getattr(emb, "waits_on_network", None)
            return bool(waits(query)) if waits is not None else False
        if not self._auto_embedder:
            return False
        return registry.is_remote(self.settings.memory_search.provider)

    def _query_vector(self, query: str, resp: SearchResponse, fp: dict[str, Any] | None) -> list[float] | None:
        if not fp or fp.get("provider") in (None, "none"):
            return None  # keyword-only index
        if self.query_embedder is None and self._auto_embedder:
            # lazy: the embedder (provider clients, the circuit breaker, sockets) only once an index
            # holds vectors: a keyword-only search never loads it (tests/test_no_daemon.py)
            from memindex.pipeline.embeddings.embedder import open_elsewhere, query_embedder_for

            refused = open_elsewhere(self.settings, fp)  # before the provider (and its SDK) is built
            if refused is not None:
                _keyword_only(resp, refused)
                return None
            self.query_embedder = query_embedder_for(self.settings)
            self._auto_embedder = False
        emb = self.query_embedder
        if emb is None:
            resp.warning = "no embedding provider available for queries; keyword-only results"
            resp.mode = "fts-only"  # what answered: the keyword arm alone
            return None
        try:
            # A lone surrogate cannot be sent (UTF-8): the query's words are, as the keyword arm takes them.
            vec = emb.embed_query(valid_unicode(query), fp)
        except Exception as exc:  # noqa: BLE001 - degrade to keyword search, say so
            if not isinstance(exc, ProviderError):  # provider failures are logged once, as the breaker opens
                log.warning("query embedding failed (%s); answering keyword-only", exc)
            _keyword_only(resp, exc)
            return None
        check = getattr(emb, "is_fallback_index", None)
        resp.fallback = bool(check(fp)) if check else bool(getattr(emb, "fallback", False))
        if vec is None or is_zero(vec):
            resp.mode = "fts-only"
            return None
        return list(vec)

    # -- candidate arms -------------------------------------------------------------
    def _keyword_candidates(self, snap: ReadSnapshot, query: str, match: str | None, keys: frozenset[str],
                            limit: int, fusion: str, kinds: dict[str, str]) -> list[Candidate]:
        if match is None:
            return []
        hits = snap.keyword_hits(match, limit, self._fts_budget)
        rows = snap.chunk_rows([h[0] for h in hits])
        visible = self.visible
        found = [(r, rank) for rowid, rank in hits if (r := rows.get(rowid)) is not None and visible(r[3], r[2])]
        _note_media(rows.values(), kinds)
        if fusion == "calibrated":
            scores = self._keyword_evidence(snap, query, found)
        else:
            best = hits[0][1] if hits else 0.0  # best first: the most negative bm25
            scores = [relative_text_score(rank, best) for _, rank in found]
        return [Candidate(r[1], r[2], r[3], r[4], r[5], r[6], text_score=ts, has_text=True)
                for (r, _), ts in zip(found, scores)]

    def _keyword_evidence(self, snap: ReadSnapshot, query: str, found: list[tuple[ChunkRow, float]]) -> list[float]:
        """Each hit's keyword evidence (ranking.keyword_evidence), from the query's content terms'
        rarity in this index and the terms each hit holds."""
        if not found:
            return []
        terms = content_terms(query)
        dfs = snap.term_counts([phrase for phrase, _ in terms])
        key = (snap.generation, snap.max_rowid())  # the count scans the table: once per change
        if self._chunk_count is None or self._chunk_count[0] != key:
            self._chunk_count = (key, snap.chunk_count())
        n = self._chunk_count[1]
        idfs, fts_idfs = term_weights(n, dfs)
        every_key = frozenset().union(*(k for _, k in terms))
        out = []
        for r, rank in found:
            held = keys_in(r[6], every_key)
            out.append(keyword_evidence(rank, [k <= held for _, k in terms], idfs, fts_idfs))
        return out

    def _background(self, snap: ReadSnapshot, qvec: list[float]) -> CosineBackground | None:
        """The query's cosines against a sample of this index's chunks, as ranking's background."""
        import numpy as np

        gen, dims, rows = snap.generation, len(qvec), snap.max_rowid()
        if gen is None:  # no index: nothing to sample
            return None
        s = self._sample
        # A short sample without the reference texts is read again by the next search (a tiny
        # store: two cheap SELECTs): the reference may land after this search (a long-lived server).
        if s is None or s[:2] != (gen, dims) or rows > s[2] * 1.25 or not s[4]:
            sample = snap.sample_vectors(dims, BACKGROUND_SAMPLE)
            full = sample is not None and len(sample) >= MIN_BACKGROUND
            if not full:  # too few chunks to say what text in general gets: the reference texts too
                reference = snap.cached_vectors(REFERENCE_HASHES, dims)
                if reference is not None:
                    sample = reference if sample is None else np.vstack([sample, reference])
                    full = True
            self._sample = s = (gen, dims, rows, sample, full)
        if s[3] is None:
            return None
        q = np.asarray(qvec, dtype=np.float32)
        norm = float(np.linalg.norm(q))
        return cosine_background((s[3] @ q / norm).tolist()) if norm > 0 else None

    def _vector_candidates(self, snap: ReadSnapshot, qvec: list[float], limit: int,
                           kinds: dict[str, str]) -> list[Candidate]:
        hits: list[tuple[int, float]] | None = None
        gen, dims = snap.generation, len(qvec)
        snap.observe(self._mirror)
        if gen is not None and snap.vec0_available():
            if self._mirror_worthwhile(snap, dims):
                mirror = self._mirror.fresh(gen, dims)
                if mirror is not None:
                    hits = knn(mirror, qvec, limit)
                else:  # vec0 answers until the mirror has caught up
                    self._mirror.load_in_background(gen, dims)
            if hits is None:
                hits = snap.vec0_knn(qvec, limit)
        if hits is None:  # no sqlite-vec (or it failed): exact cosine in process
            hits = snap.exact_knn(self._mirror, qvec, limit)
        rows = snap.chunk_rows([h[0] for h in hits])
        _note_media(rows.values(), kinds)
        visible = self.visible
        return [
            Candidate(r[1], r[2], r[3], r[4], r[5], r[6], vector_score=score, has_vector=True)
            for rid, score in hits if (r := rows.get(rid)) is not None and visible(r[3], r[2])
        ]

    @staticmethod
    def _keyword_hit_cosines(snap: ReadSnapshot, vector_hits: list[Candidate], text_hits: list[Candidate],
                             qvec: list[float]) -> list[Candidate]:
        """The keyword hits the vector arm's top-K missed, with their own stored cosine.

        Without it such a hit had no cosine at all, and a chunk holding every query term
        (textScore 1.0) ranked below weaker keyword hits that the vector arm happened to return.
        """
        seen = {c.chunk_id for c in vector_hits}
        missing = [c for c in text_hits if c.chunk_id not in seen]
        cos = snap.chunk_cosines([c.chunk_id for c in missing], qvec)
        return [c._replace(vector_score=cos[c.chunk_id], has_vector=True, text_score=0.0, has_text=False)
                for c in missing if c.chunk_id in cos]

    def _mirror_worthwhile(self, snap: ReadSnapshot, dims: int) -> bool:
        """Large enough that vec0's scalar scan hurts, small enough to hold in memory."""
        rows = snap.max_rowid()
        return MIRROR_MIN_ROWS <= rows and rows * dims * 4 <= MIRROR_MAX_BYTES

    def status(self, *, probe: bool = False) -> dict[str, Any]:
        """The index status report (same shape as ``memindex status --json``); ``probe`` is for qmd."""
        # lazy: the status report (source scans, the embedder's provider description) only when
        # asked for; a search never needs it
        from memindex.pipeline.status import described_status

        self._check_open()
        return described_status(self.settings)

    def close(self) -> None:
        self._closed = True
        self.reader.close()
        self._mirror.drop()


def _keyword_only(resp: SearchResponse, exc: BaseException) -> None:
    """A search whose query vector failed answers from the keyword arm alone, and says why."""
    resp.warning = f"query embedding failed ({type(exc).__name__}: {exc}); keyword-only results"
    resp.mode = "fts-only"
