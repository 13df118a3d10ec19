"""``memory_search`` for the agent runtime, in-process (P4, F10-F13, F16).

Reads the store through a read-only connection per thread and never waits
for indexing: results may be briefly stale. Syncs are *scheduled* through a
callback the runtime supplies (on search, on session start), never run here.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from . import db
from .agents import PerSettings
from .config import AgentSettings
from .fts_budget import FtsBudget
from .fts_text import build_match_query
from .ranking import (
    Candidate, normalize_weights, rank_pipeline, relative_text_score,
)
from .schema import chunks_table, fts_table, vec_table
from .scope import check_scope
from .store import StoreReader, open_reader
from .vector_mirror import VectorMirror, knn
from .vectors import is_zero, pack

log = logging.getLogger("memindex.search")

SNIPPET_MAX_CHARS = 700
MAX_CANDIDATES = 200
# With sqlite-vec, generations from this many chunks are searched in an in-memory
# mirror (vec0's scalar scan costs ~0.42 us per 384-dim vector), unless the mirror
# would exceed the byte cap (100k x 1536 dims would): then vec0 it is.
MIRROR_MIN_ROWS = 10_000
MIRROR_MAX_BYTES = 400 * 2**20

ScheduleSync = Callable[[AgentSettings, str], None]


@dataclass
class SearchResult:
    path: str
    startLine: int
    endLine: int
    score: float
    snippet: str
    source: str
    citation: str | None = None
    vectorScore: float | None = None
    textScore: float | None = None
    kind: str | None = None  # "image" / "audio" for multimodal results (F17); None for text

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


def citation_for(path: str, start: int, end: int) -> str:
    return f"{path}#L{start}" if start == end else f"{path}#L{start}-L{end}"


def citations_on(mode: str, session_key: str | None) -> bool:
    """auto: only in direct chats (a key naming a group/channel is not direct)."""
    if mode == "on":
        return True
    if mode == "off":
        return False
    if not session_key:
        return True
    parts = session_key.lower().split(":")
    rest = parts[2:] if len(parts) > 2 and parts[0] == "agent" else parts
    return not ({"group", "channel"} & set(rest))


def snippet_of(text: str, limit: int = SNIPPET_MAX_CHARS) -> str:
    return text if len(text) <= limit else text[:limit]


class QueryEmbedder:
    """What search needs from an embedding provider (a query vector, or None)."""

    provider: str = "none"
    model: str = "fts-only"
    fallback: bool = False

    def embed_query(self, text: str) -> list[float] | None:  # pragma: no cover - interface
        raise NotImplementedError


class MemorySearch:
    """One agent's search. Thread-safe; reuse one instance per agent."""

    def __init__(
        self,
        settings: AgentSettings,
        *,
        query_embedder: QueryEmbedder | None | str = "auto",
        schedule_sync: ScheduleSync | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.reader: StoreReader = open_reader(settings)
        # "auto": resolve the agent's provider lazily, on the first search of a vector index.
        self._auto_embedder = query_embedder == "auto"
        self.query_embedder = None if self._auto_embedder else query_embedder
        self.schedule_sync = schedule_sync
        self.clock = clock
        self._warm_sessions: set[str] = set()
        self._lock = threading.Lock()
        self._mirror = VectorMirror(settings.store_path)
        self._fts_budget = FtsBudget()

    # -- runtime hooks ----------------------------------------------------------
    def warm_session(self, session_key: str | None) -> None:
        """Schedule one sync per session key on session start (fire and forget)."""
        if not self.schedule_sync or not self.settings.memory_search["sync"]["onSessionStart"]:
            return
        key = session_key or ""
        with self._lock:
            if key in self._warm_sessions:
                return
            self._warm_sessions.add(key)
        self._schedule("session-start")

    def _schedule(self, reason: str) -> None:
        if self.schedule_sync is None:
            return
        try:
            self.schedule_sync(self.settings, reason)
        except Exception as exc:  # noqa: BLE001 - scheduling must never break a search
            log.warning("could not schedule a %s sync for %s: %s", reason, self.settings.agent_id, exc)

    # -- search -------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        session_key: str | None = None,
        chat_type: str | None = None,
    ) -> SearchResponse:
        ms = self.settings.memory_search
        citations_mode = self.settings.memory["citations"]
        resp = self._empty_response(citations_mode)
        if not self.settings.enabled:
            resp.warning = "memory search is disabled for this agent"
            return resp
        self.warm_session(session_key)
        if ms["sync"]["onSearch"]:
            self._schedule("search")
        scope = self.settings.memory.get("scope") or ms.get("scope")
        if not check_scope(scope, session_key, chat_type).allowed:
            resp.warning = "memory search is not allowed in this chat (scope rules)"
            return resp
        query = (query or "").strip()
        if not query:
            return resp
        q = ms["query"]
        max_results = int(q["maxResults"] if max_results is None else max_results)
        min_score = float(q["minScore"] if min_score is None else min_score)
        n_cand = min(MAX_CANDIDATES, max(1, int(max_results * q["hybrid"]["candidateMultiplier"])))

        conn = self.reader.conn()
        state = self.reader.state() if conn is not None else None
        gen = state.live_generation if state else None
        if conn is None or gen is None:
            resp.indexing = "pending"
            resp.warning = "the memory index is being built; results will appear shortly"
            return resp
        if self.reader.pending_count(gen):
            resp.indexing = "pending"

        self._describe_index(resp, state.live_fingerprint)
        hybrid = q["hybrid"]
        vw, tw = normalize_weights(hybrid["vectorWeight"], hybrid["textWeight"])
        # A weight of 0 switches its arm off: its hits would only pad the list with score-0 entries.
        qvec = self._query_vector(query, resp, state.live_fingerprint) if vw > 0 else None
        vector_hits = self._vector_candidates(conn, gen, qvec, n_cand) if qvec is not None else []
        text_hits = []
        if qvec is None or (hybrid["enabled"] and tw > 0):
            text_hits = self._keyword_candidates(conn, gen, query, n_cand)
        decay, mmr = hybrid["temporalDecay"], hybrid["mmr"]
        cands = rank_pipeline(
            vector_hits, text_hits,
            vector_weight=hybrid["vectorWeight"], text_weight=hybrid["textWeight"],
            min_score=min_score, max_results=max_results,
            temporal_decay=decay["enabled"], half_life_days=decay["halfLifeDays"],
            now=self.clock(), mtimes=self._mtimes(vector_hits + text_hits) if decay["enabled"] else None,
            mmr=mmr["enabled"], mmr_lambda=mmr["lambda"],
            # a full top-K from the vector arm bounds the cosine of every chunk it did not return
            unseen_vector_bound=min(c.vector_score for c in vector_hits) if len(vector_hits) >= n_cand else None,
        )
        cite = citations_on(citations_mode, session_key)
        kinds = self._media_kinds(conn, gen, [c.chunk_id for c in cands])
        resp.results = [self._result(c, cite, kinds.get(c.chunk_id)) for c in cands]
        return resp

    def _empty_response(self, citations_mode: str) -> SearchResponse:
        return SearchResponse(results=[], provider="none", model="fts-only", citations=citations_mode)

    def _media_kinds(self, conn: db.Connection, gen: int, ids: Sequence[str]) -> dict[str, str]:
        """chunk id -> kind for the image/audio chunks among the results (F17)."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return dict(conn.execute(f"SELECT id, kind FROM {chunks_table(gen)} WHERE id IN ({marks}) "
                                 "AND kind IN ('image', 'audio')", list(ids)).fetchall())

    def _result(self, c: Candidate, cite: bool, kind: str | None = None) -> SearchResult:
        snippet = snippet_of(c.text)
        citation = citation_for(c.path, c.start_line, c.end_line)
        if cite:
            snippet = f"{snippet.strip()}\n\nSource: {citation}"
        return SearchResult(
            path=c.path, startLine=c.start_line, endLine=c.end_line, score=round(c.score, 6),
            snippet=snippet, source=c.source, citation=citation if cite else None,
            vectorScore=round(c.vector_score, 6) if c.has_vector else None,
            textScore=round(c.text_score, 6) if c.has_text else None, kind=kind,
        )

    def _describe_index(self, resp: SearchResponse, fp: dict[str, Any] | None) -> None:
        """provider/model in results are those of the vectors in the live index."""
        if not fp:
            return
        resp.provider, resp.model = fp.get("provider", "none"), fp.get("model", "fts-only")
        resp.mode = "hybrid" if resp.provider != "none" else "fts-only"

    def _embedder(self) -> QueryEmbedder | None:
        if self.query_embedder is None and self._auto_embedder:
            from .embedder import query_embedder_for

            self.query_embedder = query_embedder_for(self.settings)
            self._auto_embedder = False
        return self.query_embedder

    def _query_vector(self, query: str, resp: SearchResponse, fp: dict[str, Any] | None) -> list[float] | None:
        if not fp or fp.get("provider") in (None, "none"):
            return None  # keyword-only index
        emb = self._embedder()
        if emb is None:
            resp.warning = "no embedding provider available for queries; keyword-only results"
            return None
        try:
            vec = emb.embed_query(query, fp)
        except Exception as exc:  # noqa: BLE001 - degrade to keyword search, say so
            log.warning("query embedding failed (%s); answering keyword-only", exc)
            resp.warning = f"query embedding failed ({type(exc).__name__}); keyword-only results"
            return None
        check = getattr(emb, "is_fallback_index", None)
        resp.fallback = bool(check(fp)) if check else bool(emb.fallback)
        return None if vec is None or is_zero(vec) else list(vec)

    # -- candidate arms -------------------------------------------------------------
    def _rows(self, conn: db.Connection, gen: int, rowids: Sequence[int]) -> dict[int, tuple]:
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        rows = conn.execute(
            f"SELECT rowid, id, path, source, start_line, end_line, text FROM {chunks_table(gen)} "
            f"WHERE rowid IN ({marks})", list(rowids),
        )
        return {r[0]: r for r in rows}

    def _keyword_candidates(self, conn: db.Connection, gen: int, query: str, limit: int) -> list[Candidate]:
        match = build_match_query(query)
        if match is None:
            return []
        try:
            match = self._fts_budget.trim(conn, gen, match)
            hits = conn.execute(
                # bm25() directly: ~40% cheaper than FTS5's `rank` column for the same order.
                f"SELECT rowid, bm25({fts_table(gen)}) AS score FROM {fts_table(gen)} "
                f"WHERE {fts_table(gen)} MATCH ? ORDER BY score LIMIT ?",
                (match, limit),
            ).fetchall()
        except db.OperationalError as exc:
            if "no such table" not in str(exc):
                log.warning("keyword search failed: %s", exc)
            return []
        rows = self._rows(conn, gen, [h[0] for h in hits])
        best = hits[0][1] if hits else 0.0  # ORDER BY rank: the most negative bm25 first
        return [
            Candidate(r[1], r[2], r[3], r[4], r[5], r[6], text_score=relative_text_score(rank, best), has_text=True)
            for rowid, rank in hits if (r := rows.get(rowid)) is not None
        ]

    def _vector_candidates(self, conn: db.Connection, gen: int, qvec: list[float], limit: int) -> list[Candidate]:
        hits: list[tuple[int, float]] | None = None
        vt = vec_table(gen)
        self._mirror.observe(conn)
        if self.reader.vector_error is None and self.reader.table_exists(vt):
            if self._mirror_worthwhile(conn, gen, len(qvec)):
                snap = self._mirror.fresh(gen, len(qvec))
                if snap is not None:
                    hits = knn(snap, qvec, limit)
                else:  # vec0 answers until the mirror has caught up
                    self._mirror.load_in_background(gen, len(qvec))
            if hits is None:
                try:
                    hits = [(rid, 1.0 - dist) for rid, dist in conn.execute(
                        f"SELECT rowid, distance FROM {vt} WHERE embedding MATCH ? AND k = ?",
                        (pack(qvec), limit),
                    )]
                except db.OperationalError as exc:
                    log.warning("sqlite-vec search failed (%s); using in-process cosine", exc)
        if hits is None:
            hits = self._cosine_in_process(gen, qvec, limit)
        rows = self._rows(conn, gen, [h[0] for h in hits])
        return [
            Candidate(r[1], r[2], r[3], r[4], r[5], r[6], vector_score=score, has_vector=True)
            for rid, score in hits if (r := rows.get(rid)) is not None
        ]

    def _mirror_worthwhile(self, conn: db.Connection, gen: int, dims: int) -> bool:
        """Large enough that vec0's scalar scan hurts, small enough to hold in memory."""
        # max(rowid) is an O(log n) upper bound of the chunk count.
        rows = conn.execute(f"SELECT max(rowid) FROM {chunks_table(gen)}").fetchone()[0] or 0
        return MIRROR_MIN_ROWS <= rows and rows * dims * 4 <= MIRROR_MAX_BYTES

    def _cosine_in_process(self, gen: int, qvec: list[float], limit: int) -> list[tuple[int, float]]:
        """Exact cosine over the in-memory mirror (no sqlite-vec), reloaded in this thread when stale."""
        try:
            snap = self._mirror.fresh(gen, len(qvec)) or self._mirror.load(gen, len(qvec))
        except (db.Error, ImportError) as exc:  # no numpy / unreadable store: keyword results still answer
            log.warning("in-process vector search unavailable: %s", exc)
            return []
        return knn(snap, qvec, limit)

    def _mtimes(self, cands: Sequence[Candidate]) -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = {}
        for c in cands:
            key = (c.source, c.path)
            if key in out:
                continue
            base = self.settings.sessions_dir.parent if c.source == "sessions" else self.settings.workspace
            try:
                out[key] = os.stat(base / c.path).st_mtime
            except OSError:
                pass
        return out

    def status(self) -> dict[str, Any]:
        """The index status report (same shape as ``memindex status --json``)."""
        from .status import index_status

        emb = self.query_embedder
        return index_status(self.settings, {"provider": emb.provider, "model": emb.model} if emb else None)

    def close(self) -> None:
        self.reader.close()
        self._mirror.drop()


_engines: PerSettings[MemorySearch] = PerSettings()


def engine_for(settings: AgentSettings, **kwargs: Any) -> MemorySearch:
    """One cached ``MemorySearch`` per agent settings (connection reuse)."""
    return _engines.get(settings, lambda: MemorySearch(settings, **kwargs))


def memory_search(settings: AgentSettings, query: str, **kwargs: Any) -> dict[str, Any]:
    """Convenience for the runtime: the tool payload as a dict."""
    return engine_for(settings).search(query, **kwargs).as_dict()
