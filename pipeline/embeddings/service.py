"""EmbeddingService: what workers and the search path call to get vectors.

Per call it (1) splits texts over the provider's input limit, (2) packs the
pieces into requests within the provider's item/token caps, (3) retries
rate limits and transient errors (retry.py), halves batches the provider
refuses as too large and remembers the smaller cap, (4) validates every vector,
and (5) when the primary still fails, switches to the fallback provider.

Token estimate: UTF-8 bytes (limits.estimate_tokens), an upper bound for the
tokenizers these APIs use, against min(provider limit, 8000) as in the
reference. A text over it is cut into pieces that fit; the text's vector is
the mean of its pieces' vectors weighted by piece size, renormalised to unit
length, so it is never sent whole to fail and its tail is never dropped.
Providers that truncate by their own tokenizer (local) get texts whole.

Vectors are returned L2-normalised (cosine == dot product). A blank text
gets an empty vector ``[]`` ("not embedded") without a request.

Fallback is sticky: once the primary fails after retries, this service keeps
using the fallback (one switch, as in the reference), so one index is never
filled with vectors from two models. Every result says which provider served
and whether it was the fallback. Queries never fall back on their own: a query
vector must come from the provider that built the index (pass its fingerprint).

``identity`` is what the service embeds with now (the active provider's
``EmbeddingProvider.identity()``: id, model, fingerprint, vector size), the
identity a plan records. It is kept, not derived per read: recomputed in
``_settle`` wherever the active provider or its size can change (a switch to the
fallback, every request, a size probe), so planning reads it as it stands.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Sequence

from memindex.pipeline.embeddings.hints import BEFORE_IT
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.base import EmbeddingProvider, ProviderError, ProviderTransientError
from memindex.pipeline import observe
from memindex.pipeline.embeddings.limiter import Limiter, default_limiter
from memindex.pipeline.embeddings.limits import HARD_MAX_INPUT_TOKENS, estimate_tokens, split_to_limit
from memindex.pipeline.embeddings.retry import RetryPolicy, call_with_retry, embed_with_splitting, pack_batches
from memindex.pipeline.embeddings.select import ProviderChoice
from memindex.pipeline.embeddings.validate import l2_normalize, validate_vectors, weighted_mean
from memindex.pipeline.index.fingerprint import KEYWORD_ONLY, EmbeddingIdentity

log = logging.getLogger(__name__)

# How often a plan at another vector size makes a worker ask its endpoint's size again (follow_size).
SIZE_RECHECK_S = 60.0


@dataclass
class EmbedResult:
    vectors: list[list[float]]
    provider_id: str
    model: str
    fingerprint: str
    dims: int | None
    fallback_used: bool
    fallback_reason: str | None

    @property
    def vector(self) -> list[float]:
        """The single vector of a query result."""
        if len(self.vectors) != 1:
            raise ValueError(f"result holds {len(self.vectors)} vectors, not one")
        return self.vectors[0]


class EmbeddingService:
    def __init__(
        self,
        choice: ProviderChoice,
        limiter: Limiter | None = None,
        *,
        retry: RetryPolicy | None = None,
        normalize: bool = True,
    ) -> None:
        self.choice = choice
        self.limiter = limiter or default_limiter()
        # A search's query embedding takes a slot of this process only, never the deployment-wide
        # one the queue layer may install for indexing: behind a compute worker's batch of the local
        # model (one slot for the whole deployment) every search of a server waited up to the query
        # timeout (60 s for local), and an agent's first search decided whether queries needed Redis.
        # One small request per search; the provider's per-process cap (local: its model's lock) holds.
        self.query_limiter: Limiter = default_limiter()
        self.retry = retry or RetryPolicy()
        self.normalize = normalize
        # Reentrant: a switch to the fallback settles the identity while it still holds it.
        self._lock = threading.RLock()
        self._active = choice.primary or choice.fallback
        self._fallback_reason = choice.primary_error if choice.primary is None and choice.fallback else None
        self._size_lock = threading.Lock()  # held across a size probe (follow_size)
        self._size_checked: tuple[int, float] | None = None  # (planned size, when it was asked)
        self.identity: EmbeddingIdentity = KEYWORD_ONLY  # set by _settle, the only writer
        self._identity_of: EmbeddingProvider | None = None  # the provider ``identity`` was computed from
        self._settle()

    # --- state ----------------------------------------------------------------

    @property
    def active_provider(self) -> EmbeddingProvider | None:
        return self._active

    @property
    def fallback_active(self) -> bool:
        return self._active is not None and self._active is self.choice.fallback

    @property
    def fallback_reason(self) -> str | None:
        return self._fallback_reason

    def _settle(self) -> None:
        """Recompute ``identity`` if the active provider, or its vector size, is not the one it was
        computed from. Called wherever either can change: a switch to the fallback, after every
        request (the first answer teaches a provider its size, here or in the provider itself: the
        local one reads it from the model it loads), a size probe. Nothing else of a provider's
        fingerprint changes once it is built (``EmbeddingProvider.fingerprint``)."""
        with self._lock:
            p = self._active
            if p is self._identity_of and (p is None or p.dims == self.identity.dims):
                return  # nothing it depends on changed (the size is the one it records)
            self.identity = p.identity() if p is not None else KEYWORD_ONLY
            self._identity_of = p

    def use_fallback(self, failed: EmbeddingProvider, exc: ProviderError) -> None:
        """Use the fallback because ``failed`` failed with ``exc`` (a probe's verdict, which its
        caller reports: no "switched" line for an index that never left the fallback)."""
        with self._lock:
            if self.choice.fallback is not None and failed is not self.choice.fallback:
                self._active = self.choice.fallback
                self._fallback_reason = f"{failed.id} failed: {exc}"
                self._settle()

    def _switch_to_fallback(self, failed: EmbeddingProvider, exc: ProviderError) -> EmbeddingProvider | None:
        fb = self.choice.fallback
        if exc.per_input:  # these inputs were refused; the provider works (no rebuild in another space)
            return None
        with self._lock:
            if fb is None or failed is fb:
                return None
            if self._active is not fb:
                self._active = fb
                self._fallback_reason = f"{failed.id} failed: {exc}"
                self._settle()
                log.warning("memory embeddings: switched to fallback provider (%s): %s", fb.id, self._fallback_reason)
            return fb

    # --- documents --------------------------------------------------------------

    def embed_documents(self, texts: Sequence[str]) -> EmbedResult:
        """One vector per text (``[]`` for blank text), from the active provider."""
        provider = self._active
        if provider is None:
            raise ProviderError(self.choice.reason)
        try:
            try:
                vectors = self._embed_all(provider, list(texts))
            except ProviderError as exc:
                fb = self._switch_to_fallback(provider, exc)
                if fb is None:
                    raise
                provider = fb
                vectors = self._embed_all(provider, list(texts))
        except ProviderError as exc:
            if provider is self.choice.fallback and self._fallback_reason and not exc.per_input:
                # Both failed: the user must fix both, so the error (index, status, logs) names both.
                exc.args = (f"{exc.args[0] if exc.args else exc}{BEFORE_IT}{self._fallback_reason}",
                            *exc.args[1:])
            raise
        return self._result(provider, vectors)

    def _embed_all(self, provider: EmbeddingProvider, texts: list[str]) -> list[list[float]]:
        limit = min(provider.max_input_tokens, HARD_MAX_INPUT_TOKENS)
        pieces: list[str] = []
        owners: list[int] = []
        for i, text in enumerate(texts):
            if not text.strip():
                continue
            parts = [text] if provider.self_truncates else split_to_limit(text, limit)
            pieces.extend(parts)
            owners.extend([i] * len(parts))

        piece_vectors: list[list[float]] = []
        cap = provider.max_batch_items
        batches = deque(pack_batches(pieces, cap, provider.max_batch_tokens, estimate_tokens))
        while batches:
            batch = batches.popleft()
            piece_vectors.extend(embed_with_splitting(
                lambda sub: self._request(provider, sub), batch,
                on_refused=lambda n, hint: self._lower_cap(provider, n, hint),
            ))
            if provider.max_batch_items < cap and batches:  # learned a smaller cap: repack the rest
                cap = provider.max_batch_items
                rest = [t for b in batches for t in b]
                batches = deque(pack_batches(rest, cap, provider.max_batch_tokens, estimate_tokens))

        grouped: dict[int, list[int]] = {}
        for k, owner in enumerate(owners):
            grouped.setdefault(owner, []).append(k)
        out: list[list[float]] = []
        for i in range(len(texts)):
            ks = grouped.get(i)
            if not ks:
                out.append([])
            elif len(ks) == 1:
                v = piece_vectors[ks[0]]
                out.append(l2_normalize(v) if self.normalize else list(v))
            else:
                out.append(weighted_mean([piece_vectors[k] for k in ks], [estimate_tokens(pieces[k]) for k in ks]))
        return out

    def embed_media(self, items: Sequence[tuple[bytes, str]]) -> EmbedResult:
        """One vector per (bytes, MIME type) item (F17), from the active provider.

        No fallback: multimodal config requires ``fallback: "none"``. One file per
        request, because inline bytes count against the API's request-size cap.
        """
        provider = self._active
        embed = getattr(provider, "embed_media", None)
        if provider is None or embed is None:
            raise ProviderError(f"{provider.id if provider else 'no provider'}: cannot embed images or audio")
        vectors: list[list[float]] = []
        for item in items:
            def attempt(item: tuple[bytes, str] = item) -> list[list[float]]:
                with self.limiter.acquire(provider.id), observe.embedding_request(provider.id):
                    vecs: list[list[float]] = embed([item])  # the provider's optional embed_media
                dims = validate_vectors(vecs, expected_count=1, expected_dims=provider.dims, provider_id=provider.id)
                if provider.dims is None:
                    provider.dims = dims
                return vecs

            try:
                v = call_with_retry(attempt, self.retry, label=f"embeddings ({provider.id})")[0]
            finally:
                self._settle()  # the first answer teaches the provider its size
            vectors.append(l2_normalize(v) if self.normalize else list(v))
        return self._result(provider, vectors)

    def _lower_cap(self, provider: EmbeddingProvider, refused: int, hint: int | None) -> None:
        new = hint if hint and hint < refused else max(1, refused // 2)
        if new < provider.max_batch_items:
            log.info("memory embeddings: %s refused %d inputs per request; sending at most %d",
                     provider.id, refused, new)
            provider.max_batch_items = new

    def _request(self, provider: EmbeddingProvider, texts: list[str], policy: RetryPolicy | None = None,
                 query: bool = False, any_size: bool = False) -> list[list[float]]:
        attempts = 0

        def attempt() -> list[list[float]]:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                observe.hooks.embedding_retry(provider.id)
            limiter = self.query_limiter if query else self.limiter
            with limiter.acquire(provider.id), observe.embedding_request(provider.id):
                pre = provider.prefixes  # the model family's markers (prefixes.py), added here only
                vecs = (_query_vectors(provider, pre.query + texts[0]) if query
                        else provider.embed_documents([pre.document + t for t in texts] if pre.document else texts))
            dims = validate_vectors(vecs, expected_count=len(texts), expected_dims=None if any_size else provider.dims,
                                    provider_id=provider.id)
            if provider.dims is None and not any_size:
                provider.dims = dims
            return vecs

        try:
            return call_with_retry(attempt, policy or self.retry, label=f"embeddings ({provider.id})")
        finally:
            # The request may have taught the provider its size: the first answer (above), or, the
            # local provider, the model it loaded (even when its answer then failed).
            self._settle()

    def probe_dims(self, timeout_s: float) -> int | None:
        """Ask the active provider once what size it answers now, and take that as its size.

        Sizes are learnt from answers, and a run whose chunks are all cached asks nothing: an
        endpoint that now serves another size would keep its index (and cache) at the old one.
        """
        provider = self._active
        if provider is None:
            return None
        # Asked with no size check, and the size swapped in only once answered: other threads
        # keep using the provider meanwhile (a provider may build its vectors from ``dims``).
        answered = len(self.embed_query("ping", timeout_s, any_size=True).vectors[0])
        if answered and provider.dims_learnt and provider.dims != answered:
            provider.dims = answered
            self._settle()
        return provider.dims

    def follow_size(self, planned: int, timeout_s: float) -> None:
        """A plan made at another vector size than the one learnt here: ask the endpoint again.

        A size is learnt once, from the first answer. A long-lived compute worker (issue 18)
        kept it after its endpoint changed size, and refused every vector of the `index --force`
        that re-planned at the new size ("expected 256-dim vectors, got 128") until restarted.
        At most once per planned size and SIZE_RECHECK_S (the old plan's messages still queued
        carry the old size). One thread asks; the others wait for its answer rather than embed at
        the size it is replacing (four compute threads each failed a message that way).
        """
        provider = self._active
        if provider is None or not provider.dims_learnt or provider.dims in (None, planned):
            return
        with self._size_lock:
            if provider.dims in (None, planned):
                return  # another thread's probe just answered it
            now = time.monotonic()
            last = self._size_checked
            if last is not None and last[0] == planned and now - last[1] < SIZE_RECHECK_S:
                return
            self._size_checked = (planned, now)
            old = provider.dims
            if self.probe_dims(timeout_s) != old:
                log.info("memory embeddings: %s now answers %s-dim vectors (was %s), as the index was planned",
                         provider.id, provider.dims, old)

    # --- queries ----------------------------------------------------------------

    def provider_for(self, fingerprint: str | None = None) -> EmbeddingProvider:
        """The active provider, or the configured one whose fingerprint matches an index's."""
        if fingerprint is None:
            if self._active is None:
                raise ProviderError(self.choice.reason)
            return self._active
        for p in (self._active, self.choice.primary, self.choice.fallback):
            if p is not None and p.fingerprint() == fingerprint:
                return p
        exc = ProviderError("no configured embedding provider matches the index fingerprint; reindex needed")
        exc.endpoint = False  # another process's config may match: not shared (breaker.SharedOpen)
        raise exc

    def embed_query(self, text: str, timeout_s: float | None = None, *, fingerprint: str | None = None,
                    any_size: bool = False) -> EmbedResult:
        """The query vector within timeout_s (retries included; default: the provider's
        registry.query_timeout_s); raises ProviderError on failure. ``any_size``: accept (and
        learn nothing from) a vector of another size than the provider's (``probe_dims``)."""
        provider = self.provider_for(fingerprint)
        if not text.strip():
            return self._result(provider, [[]])
        if timeout_s is None:
            timeout_s = registry.query_timeout_s(provider.id)
        if not provider.self_truncates:
            text = split_to_limit(text, min(provider.max_input_tokens, HARD_MAX_INPUT_TOKENS))[0]
        # No retries: a search must not wait out a failing provider (OpenClaw does not retry
        # query embeddings either); the caller's circuit breaker remembers the failure.
        policy = replace(self.retry.with_budget(timeout_s), max_attempts=1)
        got: list[list[float]] = []
        failed: list[BaseException] = []

        def run() -> None:
            try:
                got.append(self._request(provider, [text], policy, query=True, any_size=any_size)[0])
            except BaseException as exc:  # handed to the caller's thread
                failed.append(exc)

        worker = threading.Thread(target=run, name=f"embed-query-{provider.id}", daemon=True)
        worker.start()
        worker.join(timeout_s)
        # A request still running settles when it ends; what it taught the provider so far (the
        # local model's size, once loaded) counts now.
        self._settle()
        if worker.is_alive():
            raise ProviderTransientError(f"memory embeddings query timed out after {timeout_s:g}s")
        if failed:
            raise failed[0]
        vec = got[0]
        return self._result(provider, [l2_normalize(vec) if self.normalize else list(vec)])

    def _result(self, provider: EmbeddingProvider, vectors: list[list[float]]) -> EmbedResult:
        used = provider is self.choice.fallback and self.choice.fallback is not None
        return EmbedResult(
            vectors=vectors,
            provider_id=provider.id,
            model=provider.model,
            fingerprint=provider.fingerprint(),
            dims=provider.dims,
            fallback_used=used,
            fallback_reason=self._fallback_reason if used else None,
        )


def _query_vectors(provider: EmbeddingProvider, text: str) -> list[list[float]]:
    """``[embed_query(text)]``, or ``[]`` when the answer held no vector: providers take the first
    of the vectors they got (``vectors[0]``), and an empty answer leaked as "IndexError: list index
    out of range" where the document path says "expected 12 vectors, got 11". The count check
    after this says it the same way for queries."""
    try:
        return [provider.embed_query(text)]
    except IndexError:
        return []
