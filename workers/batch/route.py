"""The seam between indexing and the batch APIs: which chunks wait for a batch job.

``batch_embedder_for`` returns a drop-in for the index path's ChunkEmbedder
when batch indexing applies (``remote.batch.enabled``, and the serving
provider is the primary one and has a batch API in the provider registry:
openai, gemini, voyage). It answers cache hits at
once and leaves every miss unembedded, remembering it, so the prepared
records can be handed to a batch job instead of being embedded inline.
Cache hits therefore never reach a batch. It never calls the provider for text
itself: what a batch cannot take (over the input limit) is left to the compute side.
"""

from __future__ import annotations

from typing import Any, Sequence

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.limits import HARD_MAX_INPUT_TOKENS, estimate_tokens
from memindex.pipeline.index.records import FileRecord


def batch_enabled(settings: AgentSettings) -> bool:
    return bool(settings.memory_search.remote.batch.enabled)


class DeferringEmbedder:
    """ChunkEmbedder protocol: cached vectors now, misses left for a batch (``deferred``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.deferred: dict[str, str] = {}  # chunk hash -> text
        provider = inner.service.active_provider
        self._limit = min(provider.max_input_tokens, HARD_MAX_INPUT_TOKENS)

    @property
    def identity(self) -> Any:
        return self.inner.identity

    def embed_chunks(self, texts: Sequence[str], hashes: Sequence[str]) -> tuple[list[list[float] | None], set[str]]:
        cached = self.inner.cached_vectors(hashes)
        for text, h in zip(texts, hashes):
            # A text over the input limit needs the service's split-and-average: it is left
            # unembedded here and the compute side embeds it (workers/compute.py), as a blank one.
            if h not in cached and text.strip() and estimate_tokens(text) <= self._limit:
                self.deferred[h] = text
        return [cached.get(h) for h in hashes], set(cached)

    def __getattr__(self, name: str) -> Any:
        # Anything beyond chunk texts (e.g. media) keeps the synchronous path.
        return getattr(self.inner, name)

    def missing_in(self, record: FileRecord) -> list[str]:
        """Hashes of a prepared record's chunks that wait for a batch."""
        return sorted({c.hash for c in record.chunks if not c.embedding and c.hash in self.deferred})


def batch_embedder_for(settings: AgentSettings, embedder: Any) -> DeferringEmbedder | None:
    """The deferring embedder when this agent's index path should use a batch API, else None."""
    if embedder is None or not batch_enabled(settings):
        return None
    service = embedder.service
    provider = service.active_provider
    if provider is None or provider is not service.choice.primary or not registry.supports_batch(provider.id):
        return None
    return DeferringEmbedder(embedder)
