"""An agent's resolved ``memorySearch`` and ``memory`` blocks as typed, frozen records.

``settings.py`` validates and merges the config (the schema and every default live there and in
``defaults.py``), then builds these once per agent in ``resolve_agent``; code reads attributes
(``settings.memory_search.query.hybrid.vector_weight``), never string paths, so a misspelt key is
a type error instead of a ``KeyError`` at search time. The records declare no defaults of their
own: every field is set from the schema's merged tree, so a default is still defined once.

Attributes are snake_case; each record's camelCase config name is its encode name (msgspec's
``rename="camel"``), so ``to_dict()`` gives back the config's own shape for display
(``masked`` settings), the settings digest, the compute spec and the embedding provider API
(``select_provider`` and a provider's ``ProviderArgs.memory_search`` take the config's shape:
third-party providers and library callers pass partial dicts). Nothing from memindex is imported.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

R = TypeVar("R", bound="Record")


class Record(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """A config block: attributes snake_case, its dict form the config's camelCase keys."""

    def to_dict(self) -> dict[str, Any]:
        """The block as the config spells it (camelCase keys, lists, nested dicts)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    @classmethod
    def from_dict(cls: type[R], tree: Any) -> R:
        """The record of a validated, fully defaulted tree (``resolve_agent``'s or ``to_dict()``'s)."""
        return msgspec.convert(tree, cls)


# --- memorySearch -------------------------------------------------------------------------------

class Experimental(Record, frozen=True):
    session_memory: bool


class Batch(Record, frozen=True):
    enabled: bool
    wait: bool
    concurrency: int
    poll_interval_ms: int
    timeout_minutes: float


class Remote(Record, frozen=True):
    base_url: str | None
    api_key: str | None
    headers: dict[str, str]
    non_batch_concurrency: int
    batch: Batch


class Local(Record, frozen=True):
    model_path: str | None
    model_cache_dir: str | None
    max_input_tokens: int | None


class Vector(Record, frozen=True):
    enabled: bool
    extension_path: str | None


class Store(Record, frozen=True):
    driver: str
    path: str | None
    vector: Vector


class Chunking(Record, frozen=True):
    tokens: int
    overlap: int


class SyncSessions(Record, frozen=True):
    delta_bytes: int
    delta_messages: int


class Sync(Record, frozen=True):
    on_session_start: bool
    on_search: bool
    watch: bool
    watch_debounce_ms: int
    interval_minutes: float
    embedding_batch_timeout_seconds: float | None
    sessions: SyncSessions


class Mmr(Record, frozen=True):
    enabled: bool
    lambda_: float  # the config's "lambda" (a Python keyword)


class TemporalDecay(Record, frozen=True):
    enabled: bool
    half_life_days: int


class Hybrid(Record, frozen=True):
    enabled: bool
    vector_weight: float  # resolved: capped at 1 and renormalised with text_weight to sum 1
    text_weight: float
    candidate_multiplier: int
    mmr: Mmr
    temporal_decay: TemporalDecay


class Query(Record, frozen=True):
    max_results: int
    min_score: float
    fusion: str  # "calibrated" | "weighted"
    hybrid: Hybrid


class Cache(Record, frozen=True):
    enabled: bool
    max_entries: int | None


class Multimodal(Record, frozen=True):
    enabled: bool
    modalities: list[str]
    max_file_bytes: int


class MemorySearchSettings(Record, frozen=True):
    """``agents.defaults.memorySearch`` ← ``agents.list[id].memorySearch``, resolved."""

    enabled: bool
    provider: str
    fallback: str
    model: str
    sources: list[str]
    search_sources: list[str]
    extra_paths: list[str]
    output_dimensionality: int | None  # OpenClaw's older "dimensions" merged in
    query_prefix: str | None
    document_prefix: str | None
    experimental: Experimental
    remember_across_conversations: bool | None
    remote: Remote
    local: Local
    store: Store
    chunking: Chunking
    sync: Sync
    query: Query
    cache: Cache
    multimodal: Multimodal
    scope: dict[str, Any] | None  # the scope rules (F16), checked at load by settings.validate_scope


# --- memory -------------------------------------------------------------------------------------

class QmdPath(Record, frozen=True, omit_defaults=True):
    """One ``memory.qmd.paths`` entry (a bare string in the config is its ``path``)."""

    path: str
    pattern: str | None = None  # optional in the config itself: absent, not a default of ours
    name: str | None = None


class QmdSessions(Record, frozen=True):
    enabled: bool
    retention_days: float | None
    export_dir: str | None


class QmdUpdate(Record, frozen=True):
    interval: int  # milliseconds
    debounce_ms: int
    on_boot: bool
    wait_for_boot_sync: bool
    embed_interval: int  # milliseconds
    command_timeout_ms: int
    update_timeout_ms: int
    embed_timeout_ms: int


class QmdLimits(Record, frozen=True):
    max_results: int
    max_snippet_chars: int
    max_injected_chars: int
    timeout_ms: int


class Qmd(Record, frozen=True):
    command: str
    search_mode: str  # "search" | "vsearch" | "query"
    include_default_memory: bool
    paths: list[QmdPath]
    sessions: QmdSessions
    update: QmdUpdate
    limits: QmdLimits
    scope: dict[str, Any] | None


class MemorySettings(Record, frozen=True):
    """The config's top-level ``memory`` block, resolved."""

    backend: str  # "builtin" | "qmd"
    citations: str  # "auto" | "on" | "off"
    scope: dict[str, Any] | None
    qmd: Qmd
