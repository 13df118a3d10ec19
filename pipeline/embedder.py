"""Chunk embedding for the index: provider + embedding cache, per agent.

Returns None when no embedding provider is configured (keyword-only index).
"""

from __future__ import annotations

from typing import Any

from .config import AgentSettings
from .fingerprint import KEYWORD_ONLY, EmbeddingIdentity


def identity_for(settings: AgentSettings) -> EmbeddingIdentity:
    emb = chunk_embedder_for(settings)
    return emb.identity if emb is not None else KEYWORD_ONLY


def chunk_embedder_for(settings: AgentSettings) -> Any | None:
    return None
