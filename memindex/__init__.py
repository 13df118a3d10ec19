"""memindex: memory indexing and search for AI agents whose memory is Markdown on disk.

This module is the public API; everything under ``memindex.pipeline``,
``memindex.workers`` and ``memindex.producers`` is internal and may change.

    import memindex

    settings = memindex.load_settings(memindex.Context(agent_id="main"))
    engine = memindex.open_search(settings)          # honours memory.backend (builtin or qmd)
    payload = engine.search("router VLAN").as_dict()
    text = memindex.memory_get(settings, "MEMORY.md", from_line=1, lines=20).text

    # in a coroutine: the same calls, never blocking the event loop
    resp = await engine.asearch("router VLAN")
    got = await memindex.amemory_get(settings, "MEMORY.md")

Names are imported on first use (PEP 562), so ``import memindex`` stays cheap
for the CLI; type checkers see the real definitions.
"""

from __future__ import annotations

import importlib

# typing.TYPE_CHECKING without importing typing (~10 ms of every `memindex` start-up).
TYPE_CHECKING = False

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # settings
    "Context": "memindex.pipeline.config.settings",
    "AgentSettings": "memindex.pipeline.config.settings",
    "load_settings": "memindex.pipeline.config.settings",
    # the two agent tools
    "open_search": "memindex.pipeline.search.backend",
    "memory_search": "memindex.pipeline.search.backend",
    "SearchEngine": "memindex.pipeline.search.backend",
    "SearchResponse": "memindex.pipeline.search.engine",
    "SearchResult": "memindex.pipeline.search.engine",
    "QueryEmbedder": "memindex.pipeline.search.engine",
    "memory_get": "memindex.pipeline.search.get",
    "amemory_get": "memindex.pipeline.search.get",
    "MemoryGetResult": "memindex.pipeline.search.get",
    # status and the pre-compaction flush
    "index_status": "memindex.pipeline.status",
    "flush_decision": "memindex.pipeline.flush",
    "FlushDecision": "memindex.pipeline.flush",
    "load_session_entry": "memindex.pipeline.flush",
    "mark_flushed": "memindex.pipeline.flush",
    # runtime hooks and indexing (enqueue work; never wait inside a search)
    "schedule_sync": "memindex.producers.hooks",
    "on_session_start": "memindex.producers.hooks",
    "sync_and_wait": "memindex.producers.enqueue",
    # the error tree
    "MemindexError": "memindex.pipeline.errors",
    "ConfigError": "memindex.pipeline.errors",
    "StoreError": "memindex.pipeline.errors",
    "ProviderError": "memindex.pipeline.errors",
    "FallbackSwitched": "memindex.pipeline.errors",
    "IndexTimeout": "memindex.pipeline.errors",
    "IndexIncomplete": "memindex.pipeline.errors",
    "MemoryGetError": "memindex.pipeline.errors",
    "QmdError": "memindex.pipeline.errors",
    "UsageError": "memindex.pipeline.errors",
    "EnvError": "memindex.pipeline.errors",
    "WorkspaceError": "memindex.pipeline.errors",
    "BrokerUnavailable": "memindex.pipeline.errors",
    "DeadLettered": "memindex.pipeline.errors",
    "NoWorkerError": "memindex.pipeline.errors",
}

# Literal, so type checkers see the re-exports.
__all__ = [
    "__version__",
    "Context",
    "AgentSettings",
    "load_settings",
    "open_search",
    "memory_search",
    "SearchEngine",
    "SearchResponse",
    "SearchResult",
    "QueryEmbedder",
    "memory_get",
    "amemory_get",
    "MemoryGetResult",
    "index_status",
    "flush_decision",
    "FlushDecision",
    "load_session_entry",
    "mark_flushed",
    "schedule_sync",
    "on_session_start",
    "sync_and_wait",
    "MemindexError",
    "ConfigError",
    "StoreError",
    "ProviderError",
    "FallbackSwitched",
    "IndexTimeout",
    "IndexIncomplete",
    "MemoryGetError",
    "QmdError",
    "UsageError",
    "EnvError",
    "WorkspaceError",
    "BrokerUnavailable",
    "DeadLettered",
    "NoWorkerError",
]

if TYPE_CHECKING:
    from typing import Any

    from memindex.pipeline.config.settings import AgentSettings, Context, load_settings
    from memindex.pipeline.errors import (
        BrokerUnavailable,
        ConfigError,
        DeadLettered,
        EnvError,
        FallbackSwitched,
        IndexIncomplete,
        IndexTimeout,
        MemindexError,
        MemoryGetError,
        NoWorkerError,
        ProviderError,
        QmdError,
        StoreError,
        UsageError,
        WorkspaceError,
    )
    from memindex.pipeline.flush import FlushDecision, flush_decision, load_session_entry, mark_flushed
    from memindex.pipeline.search.backend import SearchEngine, memory_search, open_search
    from memindex.pipeline.search.engine import QueryEmbedder, SearchResponse, SearchResult
    from memindex.pipeline.search.get import MemoryGetResult, amemory_get, memory_get
    from memindex.pipeline.status import index_status
    from memindex.producers.enqueue import sync_and_wait
    from memindex.producers.hooks import on_session_start, schedule_sync


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memindex' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
