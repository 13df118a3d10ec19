"""The index fingerprint (F7): what the stored vectors and chunks depend on.

When it changes the index is rebuilt. It holds the provider id, model,
endpoint key (never an API key), chunking params and chunker version, sources, FTS tokenizer,
schema version and the workspace whose files it holds. ``vectorDims`` is learnt from the first
vector, so it is only compared when both sides know it: a restart with unchanged config must
never look like a change (the reference wiped indexes on every restart that way). ``workspace``
likewise (stores written before it was recorded take it on their next sync, not a rebuild).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.chunking import CHUNKER_VERSION
from memindex.pipeline.store.schema import FTS_TOKENIZER, SCHEMA_VERSION

NO_PROVIDER = ("none", "fts-only", "none")


@dataclass(frozen=True)
class EmbeddingIdentity:
    provider: str
    model: str
    provider_key: str
    dims: int | None = None


KEYWORD_ONLY = EmbeddingIdentity(*NO_PROVIDER)


def index_fingerprint(settings: AgentSettings, ident: EmbeddingIdentity) -> dict[str, Any]:
    fp: dict[str, Any] = {
        "provider": ident.provider,
        "model": ident.model,
        "providerKey": ident.provider_key,
        "sources": sorted(settings.sources),
        "chunkTokens": settings.chunk_tokens,
        "chunkOverlap": settings.chunk_overlap,
        "chunker": CHUNKER_VERSION,
        "ftsTokenizer": FTS_TOKENIZER,
        "schemaVersion": SCHEMA_VERSION,
        # An agent's store is named by its id alone: `--workspace` (or a moved workspace) would
        # otherwise fill it with other files that its searches then serve under its name.
        "workspace": str(settings.workspace),
    }
    if settings.memory_search.multimodal.enabled:
        mm = settings.memory_search.multimodal
        fp["multimodal"] = {"modalities": sorted(mm.modalities), "maxFileBytes": mm.max_file_bytes}
    if ident.dims:
        fp["vectorDims"] = ident.dims
    return fp


LEARNT_KEYS = ("vectorDims", "workspace")  # compared only when both fingerprints have them


def same_index(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    if not a or not b:
        return False
    keys = (set(a) | set(b)) - set(LEARNT_KEYS)
    if any(a.get(k) != b.get(k) for k in keys):
        return False
    return all(a.get(k) is None or b.get(k) is None or a[k] == b[k] for k in LEARNT_KEYS)


def other_workspace(fp: Mapping[str, Any] | None, settings: AgentSettings) -> str | None:
    """The workspace an index holds the files of, when it is not ``settings``' own (else None)."""
    held = (fp or {}).get("workspace")
    return held if isinstance(held, str) and held != str(settings.workspace) else None


def dumps(fp: Mapping[str, Any] | None) -> str:  # None: "null" (a store without a fingerprint)
    return json.dumps(fp, sort_keys=True, separators=(",", ":"))
