"""The one error tree: every error memindex raises derives from ``MemindexError``.

Each family has its root here (the way dramatiq keeps ``dramatiq.errors``);
modules raise these or subclasses of them, and the public API re-exports them,
so a caller can catch ``memindex.MemindexError`` alone, or one family.
"""

from __future__ import annotations


class MemindexError(Exception):
    """Root of every error memindex raises."""


class ConfigError(MemindexError, ValueError):
    """A bad configuration value; ``key`` is the offending key path."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"invalid config: {key}: {message}")
        self.key = key


class StoreError(MemindexError, RuntimeError):
    """The per-agent store refused an operation (mixed vector dims, a corrupt file, ...)."""


class StoreCorrupt(StoreError):
    """The store file is damaged (not a database, malformed pages, failed integrity check)."""


class WorkspaceError(MemindexError, RuntimeError):
    """The workspace is missing or not a directory: nothing is synced, the index is left as it was."""


class ProviderError(MemindexError):
    """Any failure of an embedding provider; ``retryable`` says whether trying again can help."""

    retryable = False


class FallbackSwitched(MemindexError, RuntimeError):
    """The provider changed while embedding: these vectors belong to another index."""


class MemoryGetError(MemindexError, ValueError):
    """A refused ``memory_get``; the message says which rule refused it."""


class QmdError(MemindexError, RuntimeError):
    """qmd could not answer; ``kind`` names the failure mode for status/fallback."""

    kind = "error"
