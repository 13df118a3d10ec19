"""Embedding providers (F3), provider selection, retries/fallback and vector checks.

Typical use::

    choice = select_provider(ms, providers_cfg, os.environ, cache_dir=state_dir / "models")
    service = EmbeddingService(choice)
    if choice.primary or choice.fallback:
        result = service.embed_documents(chunk_texts)   # EmbedResult
"""

import importlib
from typing import Any

# Names resolve lazily (PEP 562): importing ``memindex.pipeline.embeddings.base`` for an
# exception class must not pull in numpy, httpx and the provider SDKs - that
# cost ~0.2 s on every CLI start.
_WHERE = {
    "EmbeddingProvider": "base", "InvalidVectorError": "base", "ProviderAuthError": "base",
    "ProviderError": "base", "ProviderRateLimited": "base", "ProviderTooManyItems": "base",
    "ProviderTransientError": "base", "ProviderModelNotFound": "base", "ProviderQuotaExhausted": "base",
    "resolve_api_key": "keys", "ConcurrencyLimiter": "limiter",
    "Limiter": "limiter", "default_limiter": "limiter", "RetryPolicy": "retry", "call_with_retry": "retry",
    "embed_with_splitting": "retry", "pack_batches": "retry", "ProviderChoice": "select",
    "build_provider": "select", "select_provider": "select", "EmbeddingService": "service",
    "EmbedResult": "service", "l2_normalize": "validate", "validate_vectors": "validate",
}

__all__ = [
    "EmbeddingProvider",
    "ProviderError",
    "ProviderAuthError",
    "ProviderModelNotFound",
    "ProviderQuotaExhausted",
    "ProviderRateLimited",
    "ProviderTransientError",
    "ProviderTooManyItems",
    "InvalidVectorError",
    "resolve_api_key",
    "ConcurrencyLimiter",
    "Limiter",
    "default_limiter",
    "RetryPolicy",
    "call_with_retry",
    "embed_with_splitting",
    "pack_batches",
    "ProviderChoice",
    "build_provider",
    "select_provider",
    "EmbeddingService",
    "EmbedResult",
    "l2_normalize",
    "validate_vectors",
]


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value

