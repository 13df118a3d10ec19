"""Embedding providers (F3), provider selection, retries/fallback and vector checks.

Typical use::

    choice = select_provider(ms, providers_cfg, os.environ, cache_dir=state_dir / "models")
    service = EmbeddingService(choice)
    if choice.primary or choice.fallback:
        result = service.embed_documents(chunk_texts)   # EmbedResult
"""

from .base import (
    EmbeddingProvider,
    InvalidVectorError,
    ProviderAuthError,
    ProviderError,
    ProviderRateLimited,
    ProviderTooManyItems,
    ProviderTransientError,
)
from .keys import resolve_api_key
from .limiter import ConcurrencyLimiter, Limiter, default_limiter
from .retry import RetryPolicy, call_with_retry, embed_with_splitting, pack_batches
from .select import ProviderChoice, build_provider, select_provider
from .service import EmbeddingService, EmbedResult
from .validate import l2_normalize, validate_vectors

__all__ = [
    "EmbeddingProvider",
    "ProviderError",
    "ProviderAuthError",
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
