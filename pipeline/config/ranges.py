"""The range of every numeric setting, in one table (issue 44).

A value outside its range is refused at load with one ``ConfigError`` naming the key, never clamped
or taken: ``outputDimensionality: 100000000`` grew an index to 2.9 GB, and ``maxResults: -5``,
``minScore: 2``, ``chunking.tokens: 0``, ``halfLifeDays: 0`` or a negative weight were silently
clamped or used. (OpenClaw clamps several of these; a value it would clamp is a mistake worth one
line.) Keys are the schema's paths under ``memorySearch`` (per agent or in the defaults) and under
``memory``; a numeric key missing here keeps the bounds its schema entry states, refused the same way.
``RELATED`` are the rules between two keys.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from memindex.pipeline.errors import ConfigError

DAY_MS = 86_400_000

# key -> (lowest, highest); None: unbounded on that side. Integers where the schema asks for one.
RANGES: dict[str, tuple[float | None, float | None]] = {
    "memorySearch.outputDimensionality": (1, 16_384),  # the largest embedding models answer 3,072-4,096
    "memorySearch.dimensions": (1, 16_384),
    "memorySearch.cache.maxEntries": (0, 100_000_000),
    "memorySearch.store.cache.maxEntries": (0, 100_000_000),  # accepted, not implemented (README)
    "memorySearch.multimodal.maxFileBytes": (1, 1 << 30),
    "memorySearch.remote.nonBatchConcurrency": (1, 256),
    "memorySearch.remote.batch.concurrency": (1, 256),
    "memorySearch.remote.batch.pollIntervalMs": (0, DAY_MS),
    "memorySearch.remote.batch.timeoutMinutes": (0.01, 7 * 24 * 60),
    "memorySearch.local.maxInputTokens": (8, 1_000_000),
    "memorySearch.chunking.tokens": (1, 100_000),
    "memorySearch.chunking.overlap": (0, 99_999),  # and below chunking.tokens (RELATED)
    "memorySearch.sync.watchDebounceMs": (0, DAY_MS),
    "memorySearch.sync.intervalMinutes": (0, 7 * 24 * 60),
    "memorySearch.sync.embeddingBatchTimeoutSeconds": (1, 3600),
    "memorySearch.sync.sessions.deltaBytes": (0, 1 << 40),
    "memorySearch.sync.sessions.deltaMessages": (0, 100_000_000),
    "memorySearch.query.maxResults": (1, 1000),
    "memorySearch.query.minScore": (0.0, 1.0),
    # Weights: any share >= 0; each is capped at 1 and the two renormalised to sum 1, as OpenClaw does.
    "memorySearch.query.hybrid.vectorWeight": (0.0, None),
    "memorySearch.query.hybrid.textWeight": (0.0, None),
    "memorySearch.query.hybrid.candidateMultiplier": (1, 20),
    "memorySearch.query.hybrid.mmr.lambda": (0.0, 1.0),
    "memorySearch.query.hybrid.temporalDecay.halfLifeDays": (1, 36_500),
    "memory.qmd.sessions.retentionDays": (0, 36_500),
    "memory.qmd.update.interval": (0, 365 * DAY_MS),  # durations: milliseconds, or "5m"
    "memory.qmd.update.embedInterval": (0, 365 * DAY_MS),
    "memory.qmd.update.debounceMs": (0, DAY_MS),
    "memory.qmd.update.startupDelayMs": (0, DAY_MS),
    "memory.qmd.update.commandTimeoutMs": (1, DAY_MS),
    "memory.qmd.update.updateTimeoutMs": (1, DAY_MS),
    "memory.qmd.update.embedTimeoutMs": (1, DAY_MS),
    "memory.qmd.limits.maxResults": (1, 1000),
    "memory.qmd.limits.maxSnippetChars": (1, 1_000_000),
    "memory.qmd.limits.maxInjectedChars": (1, 10_000_000),
    "memory.qmd.limits.timeoutMs": (1, DAY_MS),
}

# (key, key it must stay below): checked on an agent's merged memorySearch.
RELATED: tuple[tuple[str, str], ...] = (("chunking.overlap", "chunking.tokens"),)

# A full config path -> its table key: "agents.defaults.memorySearch.query.maxResults",
# "agents.list[2].memorySearch.query.maxResults" and OpenClaw 2026.9's "memory.search.query.maxResults"
# and "agents.entries.<id>.memory.search.query.maxResults" -> "memorySearch.query.maxResults".
_MS_KEY = re.compile(r"^(?:(?:agents\.(?:defaults|list\[\d+\])\.)?memorySearch"
                     r"|(?:agents\.entries\..+\.)?memory\.search)\.(.+)$")


def bounds(key: str) -> tuple[float | None, float | None] | None:
    """The table's range for a config path, or None when the table has none."""
    m = _MS_KEY.match(key)
    if m:
        return RANGES.get(f"memorySearch.{m.group(1)}")
    return RANGES.get(key) if key.startswith("memory.") else None


def within(key: str, value: Any, lo: float | None = None, hi: float | None = None) -> Any:
    """``value`` when it lies in ``key``'s range (the table's, else ``lo``..``hi``); else ConfigError."""
    lo, hi = bounds(key) or (lo, hi)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ConfigError(key, f"expected {_span(lo, hi)}, got {value!r}")
    return value


def _span(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"a number from {_n(lo)} to {_n(hi)}"
    return f"a number of at least {_n(lo)}" if lo is not None else f"a number of at most {_n(hi)}"


def _n(x: Any) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def check_related(ms: Mapping[str, Any], key: str) -> None:
    """The rules between keys of one agent's merged ``memorySearch`` (``key``: its path)."""
    for low, high in RELATED:
        a, b = _get(ms, low), _get(ms, high)
        if a is not None and b is not None and a >= b:
            raise ConfigError(f"{key}.{low}", f"expected less than {high} ({b!r}), got {a!r}")


def _get(tree: Mapping[str, Any], dotted: str) -> Any:
    cur: Any = tree
    for part in dotted.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur
