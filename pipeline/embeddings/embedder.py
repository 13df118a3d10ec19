"""One agent's embeddings: provider selection, the embedding cache, query vectors.

``chunk_embedder_for(settings)`` is what the index actor uses; it returns None
when no provider is configured (a keyword-only index, not an error).
``query_embedder_for(settings)`` is what search uses. Both share one
``EmbeddingService`` per agent settings in a process, so a fallback switch is
seen by indexing and search alike.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TypeVar

from memindex.pipeline import observe
from memindex.pipeline.config import openclaw_schema
from memindex.pipeline.config import environ
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.fingerprint import KEYWORD_ONLY, EmbeddingIdentity
from memindex.pipeline.index.failures import SUMMARISED
from memindex.pipeline.config.agents import PerSettings
from memindex.pipeline.config.auth_profiles import keys_by_provider
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.limiter import make_limiter
from memindex.pipeline.embeddings.select import select_provider
from memindex.pipeline.store.reader import StoreReader, open_reader
from memindex.pipeline.embeddings.base import ProviderUnavailable
from memindex.pipeline.embeddings.breaker import CircuitBreaker, SharedOpen
from memindex.pipeline.errors import FallbackSwitched, ProviderError

if TYPE_CHECKING:  # imported where a service is built: a keyword-only agent never loads it
    from memindex.pipeline.embeddings.base import EmbeddingProvider
    from memindex.pipeline.embeddings.service import EmbeddingService

log = logging.getLogger("memindex.embedder")
T = TypeVar("T")


def guarded(breaker: CircuitBreaker, provider_key: str, label: str, call: Callable[[], T],
            shared: SharedOpen | None = None) -> T:
    """``call()`` through the provider's circuit breaker: refused at once while it is open,
    and a ``ProviderError`` opens it (see ``breaker``). ``shared``: the same across processes."""
    elsewhere = shared.reason(provider_key) if shared is not None else None  # (before allow: it claims the probe)
    if elsewhere is not None:
        raise _failing(label, elsewhere)
    if not breaker.allow(provider_key):
        raise _failing(label, breaker.reason(provider_key))
    try:
        out = call()
    except ProviderError as exc:
        if exc.per_input:
            raise  # about these inputs, not the provider: one bad note must not stop everyone's vectors
        where = "for this agent's searches" if shared is not None else "in this process"
        log.warning("embeddings from %s failed (%s); keyword-only %s until a retry after %gs succeeds",
                    label, exc, where, breaker.cooldown_s, extra={SUMMARISED: True})
        breaker.failure(provider_key, str(exc))
        if shared is not None and exc.endpoint:
            shared.failure(provider_key, str(exc))
        raise
    breaker.success(provider_key)
    if shared is not None:
        shared.success(provider_key)
    return out


def _failing(label: str, why: object) -> ProviderUnavailable:
    return ProviderUnavailable(f"{label} is failing ({why}); not called until a retry after the cooldown succeeds")


def query_breaker(settings: AgentSettings) -> SharedOpen:
    """The query side's open state, shared with the agent's other processes (a CLI search per
    call each paid a dead endpoint's timeout); the indexing side keeps its own."""
    return SharedOpen(Path(f"{settings.store_path}.query-breaker.json"))


def provider_answered(settings: AgentSettings, provider_key: str) -> None:
    """A provider that just answered (an index's request, ``status --deep``'s probe) answers queries
    too: the searches' cooldown for it ends now, this process's and the one shared with the agent's
    other processes (``query_breaker``, opened by a failed query). Left to run out, every search for
    ~30 s after the key or endpoint was fixed answered keyword-only and blamed the old error. One
    stat while none is open."""
    breaker_for(settings).success(provider_key)
    query_breaker(settings).success(provider_key)


def open_elsewhere(settings: AgentSettings, index_fp: Mapping[str, Any]) -> ProviderUnavailable | None:
    """The refusal a query vector for this index would meet while another process holds its
    provider open (None: it may be asked). Read before any provider is built, so a search that
    answers keyword-only anyway imports no SDK (2.6 s of a 3.2 s CLI search on a loaded machine)."""
    why = query_breaker(settings).reason(str(index_fp.get("providerKey")))
    return None if why is None else _failing(str(index_fp.get("provider")), why)


QUERY_CACHE_SIZE = 256


_services: dict[str, tuple[EmbeddingService | None, str]] = {}
_services_lock = threading.Lock()
# One per agent settings, like the service: indexing and search of an agent in one
# process share what they learned about its provider.
_breakers: dict[str, CircuitBreaker] = {}


def breaker_for(settings: AgentSettings) -> CircuitBreaker:
    with _services_lock:
        return _breakers.setdefault(settings.digest(), CircuitBreaker())


def _service(settings: AgentSettings) -> tuple[EmbeddingService | None, str]:
    """(EmbeddingService or None, reason), cached per agent settings."""
    key = settings.digest()
    with _services_lock:
        hit = _services.get(key)
    if hit is not None:
        return hit
    ms = settings.memory_search
    # The provider API takes memorySearch in the config's shape (third-party providers read it).
    choice = select_provider(ms.to_dict(), settings.providers, os.environ, cache_dir=settings.state_dir / "models",
                             auth_profiles=_profile_keys(settings),
                             destination_bound=openclaw_schema.binds_keys_to_destination(settings.config_schema),
                             keys=settings.keys)
    service: EmbeddingService | None = None
    if choice.primary or choice.fallback:
        # lazy: numpy (validate) and tenacity (retry) only for an agent that embeds, never a keyword-only search
        from memindex.pipeline.embeddings.service import EmbeddingService

        limiter = make_limiter(int(ms.remote.non_batch_concurrency))
        service = EmbeddingService(choice, limiter, retry=_retry_policy())
    with _services_lock:
        _services[key] = (service, choice.reason)
    return service, choice.reason


def _profile_keys(settings: AgentSettings) -> dict[str, str]:
    """The keys OpenClaw's ``auth-profiles.json`` holds for this agent, by provider name (never logged)."""
    names = list(dict.fromkeys(n for pid in registry.ids() for n in (pid, *registry.get(pid).config_names)))
    return keys_by_provider(settings.agent_dir, settings.state_dir, settings.auth, os.environ, names)


def _retry_policy() -> Any:
    """The default policy; MEMINDEX_RETRY_* env vars shrink it (tests, impatient operators)."""
    # lazy: tenacity, with the service (_service, its only caller)
    from memindex.pipeline.embeddings.retry import RetryPolicy

    kw: dict[str, Any] = {}
    delay_s = environ.RETRY_BASE_DELAY_S.get()
    if delay_s is not None:
        kw["base_delay_s"] = kw["rate_limit_delay_s"] = delay_s
    attempts = environ.RETRY_ATTEMPTS.get()
    if attempts is not None:
        kw["transient_attempts"] = attempts
    return RetryPolicy(**kw)


def reset_services() -> None:
    """Forget cached services (tests; config reloads get a new digest anyway)."""
    with _services_lock:
        _services.clear()
        _breakers.clear()


def identity_for(settings: AgentSettings) -> EmbeddingIdentity:
    """What this agent embeds with now: its service's ``identity`` (kept up to date by the service
    as its provider switches or learns its size), or KEYWORD_ONLY without a provider."""
    service, _ = _service(settings)
    return service.identity if service is not None else KEYWORD_ONLY


def follow_vector_size(settings: AgentSettings, planned: int | None) -> bool:
    """Take ``planned`` as the provider's size if the endpoint answers it now (see
    ``EmbeddingService.follow_size``); True if this process's size changed."""
    service, _ = _service(settings)
    p = service.active_provider if service is not None else None
    if service is None or not planned or p is None or p.dims == planned:
        return False
    old = p.dims
    try:
        service.follow_size(planned, probe_timeout_s(p.id))
    except ProviderError as exc:  # the embedding itself then says what is wrong
        log.debug("vector size probe for %s failed: %s", settings.agent_id, exc)
    return p.dims != old


def planning_identity(settings: AgentSettings, *, force: bool = False, probe: bool = True) -> EmbeddingIdentity:
    """The identity a sync plans with (its fingerprint carries the vector size).

    ``force`` (`index --force`, or the rebuild a writer asks for when vectors came at another
    size): first ask the provider the size it answers now (``relearn_vector_size``).
    Otherwise a process that learnt its size long ago (a worker, `watch`) could plan at a size
    the endpoint no longer answers: when `index --force` elsewhere rebuilt at the new size, its
    plans would rebuild at the old one again, from the old vectors in the cache. A live index of
    the same provider at another size makes it ask the endpoint.

    ``probe`` False (status's dry plan): never call the provider; a live index on the fallback's
    vectors is taken to stay there (plain `status` sent the failing primary a request, and waited
    15 s per agent for a hung one, where OpenClaw's status calls nothing without --deep).
    """
    if force:
        relearn_vector_size(settings)
        return identity_for(settings)
    ident = identity_for(settings)
    if ident.provider == KEYWORD_ONLY.provider:
        return ident
    try:
        st = _cache_readers.get(settings, lambda: open_reader(settings)).state()
    except Exception as exc:  # noqa: BLE001 - the plan reads the store itself and reports it
        log.debug("store state for %s unreadable: %s", settings.agent_id, exc)
        return ident
    fp = st.live_fingerprint or {}
    if fp.get("providerKey") != ident.provider_key:
        fallback = _live_fallback(settings, fp)
        if fallback is not None and not probe:
            return fallback.identity()
        if fallback is not None and _primary_still_failing(settings):
            return identity_for(settings)
    live = fp.get("vectorDims")
    if (ident.dims is not None and fp.get("providerKey") == ident.provider_key and isinstance(live, int)
            and live != ident.dims and follow_vector_size(settings, live)):
        return identity_for(settings)
    return ident


def _live_fallback(settings: AgentSettings, live_fp: Mapping[str, Any]) -> EmbeddingProvider | None:
    """The fallback provider, when the live index holds its vectors while this process starts at
    the primary (a new CLI run, a restarted worker); else None."""
    service, _ = _service(settings)
    choice = service.choice if service is not None else None
    if (service is None or choice is None or choice.primary is None or choice.fallback is None
            or service.fallback_active
            or live_fp.get("providerKey") != choice.fallback.fingerprint()):
        return None
    return choice.fallback


def _primary_still_failing(settings: AgentSettings) -> bool:
    """The live index holds the fallback's vectors (``_live_fallback``): one probe of the primary
    decides. Planning at the primary outright re-planned every file into a rebuild each run while
    the primary kept failing (its retries, the switch back to the fallback, "indexed 64 file(s)"
    with nothing changed). True when the probe failed and the service now uses the fallback."""
    service, _ = _service(settings)
    choice = service.choice if service is not None else None
    if service is None or choice is None or choice.primary is None or choice.fallback is None:
        return False  # (never: _live_fallback found both)
    try:
        service.embed_query("ping", probe_timeout_s(choice.primary.id), any_size=True)
    except ProviderError as exc:
        if exc.per_input:
            return False
        service.use_fallback(choice.primary, exc)
        log.warning("memory embeddings: %s still fails (%s); the index stays on %s's vectors (a later "
                    "run tries %s again)", choice.primary.id, exc, choice.fallback.id, choice.primary.id)
        return True
    return False  # it answers again: the plan moves the index back to it


# One real request for a size or a health check (`index --force`, `status --deep`): one attempt,
# bounded (the indexing path's retries and backoff made a refused connection take 19 s).
PROBE_TIMEOUT_S = 15.0


def probe_timeout_s(provider_id: str | None) -> float:
    """A probe's bound: ``PROBE_TIMEOUT_S``, or the provider's own query budget if longer (local)."""
    return max(PROBE_TIMEOUT_S, registry.query_timeout_s(provider_id))


def relearn_vector_size(settings: AgentSettings) -> None:
    """``index --force``: one request learns the size the provider answers now, so that a
    changed size re-plans the index (its fingerprint carries the size) and misses the cache of
    the old one. A provider that fails here is left to the sync itself to report."""
    service, _ = _service(settings)
    if service is None or service.active_provider is None or not service.active_provider.dims_learnt:
        return  # no provider, or its size is fixed (the model's own endpoint, a configured size)
    try:
        service.probe_dims(probe_timeout_s(service.active_provider.id))
    except ProviderError as exc:
        log.debug("vector size probe for %s failed: %s", settings.agent_id, exc)


def provider_info(settings: AgentSettings) -> dict[str, Any]:
    """For status: which provider serves this agent, and why (``error``: the configured provider
    cannot be built at all)."""
    try:
        service, reason = _service(settings)
    except Exception as exc:  # noqa: BLE001 - status must always answer
        return {"provider": "none", "model": "fts-only", "reason": f"provider error: {exc}", "error": str(exc)}
    if service is None or service.active_provider is None:
        return {"provider": "none", "model": "fts-only", "reason": reason}
    ident = service.identity
    info = {"provider": ident.provider, "model": ident.model, "reason": reason, "fallback": service.fallback_active,
            "providerKey": ident.provider_key}
    if service.fallback_reason:
        info["fallbackReason"] = service.fallback_reason
    return info


_cache_readers: PerSettings[StoreReader] = PerSettings()


class ChunkEmbedder:
    """Embeds chunk texts through the cache; only misses reach the provider.

    ``cache=False`` is the compute side's embedder (issue 18): it never opens the
    store (the file side already looked the chunks up and sent only the misses).
    """

    def __init__(self, settings: AgentSettings, service: EmbeddingService, *, cache: bool = True):
        self.settings = settings
        self.service = service
        self.identity = service.identity
        self.use_cache = cache

    def cached_vectors(self, hashes: Sequence[str]) -> dict[str, list[float]]:
        """chunk hash -> vector, for the hashes this index's provider already embedded (the cache)."""
        if not self.use_cache or not self.settings.memory_search.cache.enabled:
            return {}
        # One reader per agent, reused: opening a connection (and loading sqlite-vec)
        # for every file's lookup was most of the cache's cost.
        reader = _cache_readers.get(self.settings, lambda: open_reader(self.settings))
        ident = self.identity
        try:
            found = reader.cached_embeddings(ident.provider, ident.model, ident.provider_key, ident.dims, hashes)
            observe.hooks.cache_hits(len(found), len(hashes))
            return found
        except Exception as exc:  # noqa: BLE001 - a cache problem must not stop indexing
            log.warning("embedding cache lookup failed: %s", exc)
            return {}

    def embed_chunks(self, texts: Sequence[str], hashes: Sequence[str]) -> tuple[list[list[float] | None], set[str]]:
        cached = self.cached_vectors(hashes)
        missing: dict[str, str] = {}
        for t, h in zip(texts, hashes):
            if h not in cached and h not in missing:
                missing[h] = t
        fresh: dict[str, list[float]] = {}
        if missing:
            result = self._accept(self._guarded(lambda: self.service.embed_documents(list(missing.values()))))
            fresh = {h: v for h, v in zip(missing, result.vectors) if v}
        vectors = [cached.get(h) or fresh.get(h) for h in hashes]
        return vectors, set(cached)

    def embed_media(self, items: Sequence[tuple[bytes, str]],
                    hashes: Sequence[str]) -> tuple[list[list[float] | None], set[str]]:
        """``embed_chunks`` for (bytes, MIME type) items (F17); ``hashes`` (of bytes + MIME) key the cache."""
        cached = self.cached_vectors(hashes)
        missing = {h: item for item, h in zip(items, hashes) if h not in cached}
        fresh: dict[str, list[float]] = {}
        if missing:
            result = self._accept(self._guarded(lambda: self.service.embed_media(list(missing.values()))))
            fresh = {h: v for h, v in zip(missing, result.vectors) if v}
        return [cached.get(h) or fresh.get(h) for h in hashes], set(cached)

    def follow_planned_size(self, planned: int | None) -> None:
        """Embed (and look the cache up) at the size the index was planned at: the file and
        compute sides of a long-lived worker after `index --force` re-planned at an endpoint's
        new size. A process that learnt another size asks the endpoint (``follow_vector_size``);
        one that never embedded (the file side) takes the plan's, so its cache lookups do not
        return the old size's vectors (the lookup filters by size only when it knows one)."""
        if not planned or planned == self.identity.dims:
            return
        if self.identity.dims is None:
            self.identity = replace(self.identity, dims=planned)
        elif follow_vector_size(self.settings, planned):
            self.identity = self.service.identity

    def _guarded(self, call: Callable[[], T]) -> T:
        out = guarded(breaker_for(self.settings), self.identity.provider_key, self.identity.provider, call)
        # It answered: the searches' shared cooldown ends too (``provider_answered``; guarded has
        # already closed this process's breaker).
        query_breaker(self.settings).success(self.identity.provider_key)
        return out

    def _accept(self, result: Any) -> Any:
        """Check the vectors belong to this index; learn its dims from them."""
        if result.fingerprint != self.identity.provider_key:
            raise FallbackSwitched(
                f"embeddings now come from {result.provider_id} ({result.fallback_reason}); re-planning"
            )
        if result.dims:
            self.identity = EmbeddingIdentity(self.identity.provider, self.identity.model,
                                              self.identity.provider_key, result.dims)
        return result


def chunk_embedder_for(settings: AgentSettings, *, cache: bool = True,
                       planned_dims: int | None = None) -> ChunkEmbedder | None:
    """The agent's chunk embedder, or None for a keyword-only index; ``cache=False``: see
    ChunkEmbedder; ``planned_dims``: the vector size the work was planned at (``follow_planned_size``)."""
    service, _ = _service(settings)
    if service is None or service.active_provider is None:
        return None
    embedder = ChunkEmbedder(settings, service, cache=cache)
    embedder.follow_planned_size(planned_dims)
    return embedder


class CacheOnlyEmbedder:
    """The file side's ChunkEmbedder (issue 18): chunk vectors from the cache only, misses left
    None for the compute side to embed, so the file side never waits on the provider for text.
    Media (``embed_media``) keeps the synchronous path: their bytes stay on the file side."""

    def __init__(self, inner: ChunkEmbedder) -> None:
        self.inner = inner
        self.service = inner.service

    @property
    def identity(self) -> EmbeddingIdentity:
        return self.inner.identity

    def cached_vectors(self, hashes: Sequence[str]) -> dict[str, list[float]]:
        return self.inner.cached_vectors(hashes)

    def embed_chunks(self, texts: Sequence[str], hashes: Sequence[str]) -> tuple[list[list[float] | None], set[str]]:
        cached = self.inner.cached_vectors(hashes)
        return [cached.get(h) for h in hashes], set(cached)

    def embed_media(self, items: Sequence[tuple[bytes, str]],
                    hashes: Sequence[str]) -> tuple[list[list[float] | None], set[str]]:
        return self.inner.embed_media(items, hashes)


class AgentQueryEmbedder:
    """Query vectors for search, from the provider that built the live index."""

    def __init__(self, settings: AgentSettings, service: EmbeddingService):
        self.settings = settings
        self.service = service
        self._cache: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def provider(self) -> str:
        p = self.service.active_provider
        return p.id if p else "none"

    @property
    def model(self) -> str:
        p = self.service.active_provider
        return p.model if p else "fts-only"

    @property
    def fallback(self) -> bool:
        return bool(self.service.fallback_active)

    def is_fallback_index(self, index_fp: Mapping[str, Any]) -> bool:
        fb = self.service.choice.fallback
        return fb is not None and fb.fingerprint() == index_fp.get("providerKey")

    def waits_on_network(self, text: str) -> bool:
        """Would a query vector for ``text`` be a request to a remote provider (not a cached vector,
        not the local model)? The async API runs such searches on the agent's own threads."""
        p = self.service.active_provider
        if p is None or not registry.is_remote(p.id):
            return False
        with self._lock:
            return not any(key[1] == text for key in self._cache)

    def embed_query(self, text: str, index_fp: Mapping[str, Any] | None = None) -> list[float] | None:
        if not index_fp or index_fp.get("provider") in (None, "none"):
            return None  # the live index has no vectors: keyword search only
        key = (str(index_fp.get("providerKey")), text)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        # One attempt within the provider's query budget (registry.query_timeout_s), as
        # OpenClaw does; a failure opens the breaker, so later searches don't wait on it.
        pk = str(index_fp.get("providerKey"))
        vec = guarded(breaker_for(self.settings), pk, str(index_fp.get("provider")),
                      lambda: self.service.embed_query(text, fingerprint=pk), query_breaker(self.settings)).vector
        with self._lock:
            self._cache[key] = vec
            while len(self._cache) > QUERY_CACHE_SIZE:
                self._cache.popitem(last=False)
        return vec


def query_embedder_for(settings: AgentSettings) -> AgentQueryEmbedder | None:
    try:
        service, _ = _service(settings)
    except Exception as exc:  # noqa: BLE001 - search degrades to keywords
        log.warning("embedding provider unavailable for search (%s); keyword-only", exc)
        return None
    return AgentQueryEmbedder(settings, service) if service is not None else None
