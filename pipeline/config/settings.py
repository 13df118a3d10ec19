"""Config loading and per-agent resolution (F19).

The file is OpenClaw's own JSON5 ``openclaw.json``. Only the memory-related
subtrees are validated strictly (``agents.*.memorySearch``, ``memory``,
``agents.defaults.compaction.memoryFlush``): the rest of an OpenClaw config is
none of our business and must load unchanged. Resolved settings keep
OpenClaw's camelCase keys so that docs, seeds and config read the same.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import math
import os
import re
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, MutableMapping

# The provider table is pure data; the one import config makes from embeddings (see pyproject).
from memindex.pipeline.embeddings.registry import dims_choices
from memindex.pipeline.embeddings.registry import find as find_provider
from memindex.pipeline.embeddings.registry import get as provider_spec
from memindex.pipeline.embeddings.registry import ids as provider_ids
from memindex.pipeline.config import environ, ranges
from memindex.pipeline.config import defaults as D
from memindex.pipeline.config import openclaw_schema
from memindex.pipeline.config.loader import included_files, load_config, resolve_secret_refs
from memindex.pipeline.config.records import MemorySettings, MemorySearchSettings, Record
from memindex.pipeline.config.paths import DEFAULT_AGENT as DEFAULT_AGENT
from memindex.pipeline.config.paths import LEGACY_NO_CONFIG, NO_CONFIG as NO_CONFIG
from memindex.pipeline.config.paths import config_path_for as config_path_for
from memindex.pipeline.config.paths import default_state_dir as default_state_dir
from memindex.pipeline.config.paths import default_agent_id
from memindex.pipeline.config.paths import list_agent_ids as list_agent_ids
from memindex.pipeline.config.paths import (
    agent_workspace, entry_key, expand_home, find_agent, inside, resolve_agent_id, resolve_user_path,
    validate_agent_id,
)
from memindex.pipeline.errors import ConfigError, UsageError, checked_call, require, require_path_text

log = logging.getLogger("memindex.config")


# --- field checks -------------------------------------------------------------

Check = Callable[[str, Any], Any]


def _bool(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise ConfigError(key, f"expected true or false, got {v!r}")


def _clamped(what: str, convert: Callable[[str, Any], Any], lo: Any, hi: Any) -> Check:
    """A number (not a bool, not NaN) converted by ``convert(key, v)``, in its range
    (``ranges.RANGES``, else [lo, hi])."""

    def check(key: str, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(key, f"expected {what}, got {v!r}")
        return convert(key, ranges.within(key, v, lo, hi))  # refused out of range (as written), never clamped

    return check


def _whole(key: str, v: float, what: str = "an integer", written: Any = None) -> int:
    """``v`` as the integer it is; a fractional number is refused, never truncated (``maxResults: 2.5``
    gave 2 results, ``chunking.overlap: 0.5`` none). A whole float (JSON5 ``3.0``) is that integer.
    ``written``: the value as the config wrote it, for the message (a duration's "0.5ms")."""
    if isinstance(v, float) and not v.is_integer():
        raise ConfigError(key, f"expected {what}, got {v if written is None else written!r}")
    return int(v)


def _int(lo: int | None = None, hi: int | None = None) -> Check:
    return _clamped("an integer", lambda key, v: _whole(key, v), lo, hi)


def _num(lo: float | None = None, hi: float | None = None) -> Check:
    return _clamped("a number", lambda _key, v: float(v), lo, hi)


def _size(key: str, v: Any) -> int:
    """A vector size: a positive integer, never clamped (-5 clamped to 1 built a 1-dim index)."""
    what = "a positive integer (a vector size)"
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 1:
        raise ConfigError(key, f"expected {what}, got {v!r}")
    return _whole(key, ranges.within(key, v), what)


def _url(key: str, v: Any) -> str | None:
    """An http(s) URL with a host, or blank for the provider's default (a typo here cost ~19 s
    of connection retries before a "Connection error." that named no URL)."""
    from urllib.parse import urlsplit

    if not isinstance(v, str):
        raise ConfigError(key, f"expected a URL string, got {v!r}")
    if not v.strip():
        return None
    try:
        parts = urlsplit(v.strip())
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(key, f"expected an http(s) URL such as https://api.example.com/v1, got {v!r}")
    return v.strip()


def _str(key: str, v: Any) -> str:
    if isinstance(v, str):
        return v
    raise ConfigError(key, f"expected a string, got {v!r}")


def _opt(check: Check) -> Check:
    return lambda key, v: None if v is None else check(key, v)


def _enum(*allowed: str) -> Check:
    def check(key: str, v: Any) -> str:
        if isinstance(v, str) and v in allowed:
            return v
        raise ConfigError(key, f"expected one of {', '.join(allowed)}; got {v!r}")

    return check


def _str_list(allowed: tuple[str, ...] | None = None) -> Check:
    def check(key: str, v: Any) -> list[str]:
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError(key, f"expected a list of strings, got {v!r}")
        if allowed is not None:
            bad = [x for x in v if x not in allowed]
            if bad:
                raise ConfigError(key, f"unknown value(s) {bad}; allowed: {', '.join(allowed)}")
        return list(v)

    return check


def _provider_entry(key: str, v: Any) -> Any:
    """``models.providers.<p>`` of a provider memindex embeds with: the fields it reads are checked
    like memorySearch.remote's (a numeric apiKey was silently "no API key")."""
    if not isinstance(v, dict):
        raise ConfigError(key, f"expected an object, got {type(v).__name__}")
    # Types only: the entry also configures OpenClaw's chat models, whose URLs are not ours to judge.
    for field_, check in (("apiKey", _opt(_str)), ("baseUrl", _opt(_str)), ("headers", _opt(_str_map))):
        if field_ in v:
            check(f"{key}.{field_}", v[field_])
    return v


def _str_map(key: str, v: Any) -> dict[str, str]:
    if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
        raise ConfigError(key, f"expected an object of string values, got {v!r}")
    return dict(v)


def _qmd_paths(key: str, v: Any) -> list[dict[str, Any]]:
    if not isinstance(v, list):
        raise ConfigError(key, f"expected a list, got {v!r}")
    out = []
    for i, item in enumerate(v):
        k = f"{key}[{i}]"
        if isinstance(item, str):
            item = {"path": item}
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            raise ConfigError(k, "expected {path, pattern?, name?}")
        unknown = set(item) - {"path", "pattern", "name"}
        if unknown:
            raise ConfigError(f"{k}.{sorted(unknown)[0]}", "unknown key")
        out.append(dict(item))
    return out


_DURATION = "a duration like 5m, 30s or a whole number of ms"


def _bad_duration(key: str, v: Any) -> int:
    raise ConfigError(key, f"expected {_DURATION}, got {v!r}")


def _duration_ms(key: str, v: Any) -> int:
    """OpenClaw durations: numbers are ms, strings like '5m', '30s', '1h'."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return _whole(key, ranges.within(key, v), _DURATION) if math.isfinite(v) else _bad_duration(key, v)
    if isinstance(v, str):
        s = v.strip().lower()
        units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        for unit in ("ms", "s", "m", "h", "d"):
            if s.endswith(unit):
                try:
                    n = float(s[: -len(unit)]) * units[unit]
                    if not math.isfinite(n):
                        return _bad_duration(key, v)
                    return _whole(key, ranges.within(key, n), _DURATION, v)
                except ValueError:
                    break
        try:
            n = float(s)
            return _whole(key, ranges.within(key, n), _DURATION, v) if math.isfinite(n) else _bad_duration(key, v)
        except ValueError:
            pass
    return _bad_duration(key, v)


# memorySearch.provider / fallback: "auto" / "none" or an id from the embeddings provider
# registry, looked up when a config loads (so a provider registered at run time counts).
# Test-only providers ("hash") may be named as the provider, but are never listed as a
# choice nor accepted as a fallback.
def provider_choices() -> tuple[str, ...]:
    return ("auto", "none", *provider_ids())


def fallback_choices() -> tuple[str, ...]:
    return ("none", *provider_ids())


def _provider(key: str, v: Any) -> str:
    # "none" is OpenClaw's deliberate keyword-only search (no embeddings at all).
    if isinstance(v, str) and (v in ("auto", "none") or find_provider(v) is not None):
        return v
    raise ConfigError(key, f"expected one of {', '.join(provider_choices())}; got {v!r}")


def _fallback(key: str, v: Any) -> str:
    spec = find_provider(v) if isinstance(v, str) else None
    if isinstance(v, str) and (v == "none" or (spec is not None and not spec.test_only)):
        return v
    raise ConfigError(key, f"expected one of {', '.join(fallback_choices())}; got {v!r}")


# Defaults that code outside the schema also needs (each defined here only).
DEFAULT_DELTA_BYTES = 100_000  # sync.sessions.deltaBytes
DEFAULT_DELTA_MESSAGES = 50  # sync.sessions.deltaMessages
DEFAULT_SOFT_THRESHOLD_TOKENS = 4000  # compaction.memoryFlush.softThresholdTokens
DEFAULT_RESERVE_TOKENS_FLOOR = 20_000  # compaction.reserveTokensFloor


@dataclass(frozen=True)
class F:
    """A leaf of the schema: a default and a check that returns the clean value."""

    default: Any
    check: Check


@dataclass(frozen=True)
class Ignored:
    """A key of OpenClaw's schema that memindex does not implement: its value is checked,
    then dropped, and one warning per load names every such key that was set."""

    schema: Any  # a Check, or a dict schema of Checks / Fs


def _any(key: str, v: Any) -> Any:
    return v


# Scope rules (F16), checked at load so a typo fails once, naming its key,
# instead of making every search raise.
CHAT_TYPES = ("direct", "group", "channel")
SCOPE_ACTIONS = ("allow", "deny")
SCOPE_MATCH_KEYS = ("chatType", "channel", "keyPrefix", "rawKeyPrefix")


def validate_scope(scope: Mapping[str, Any], key: str = "scope") -> None:
    """Raise ConfigError naming the first invalid key of a scope config (checked at config load)."""
    if not isinstance(scope, Mapping):
        raise ConfigError(key, "expected an object")
    default = scope.get("default", "allow")
    if default not in SCOPE_ACTIONS:
        raise ConfigError(f"{key}.default", f"expected 'allow' or 'deny', got {default!r}")
    rules = scope.get("rules", [])
    if not isinstance(rules, list):
        raise ConfigError(f"{key}.rules", "expected a list")
    for i, rule in enumerate(rules):
        where = f"{key}.rules[{i}]"
        if not isinstance(rule, Mapping):
            raise ConfigError(where, "expected an object")
        if rule.get("action") not in SCOPE_ACTIONS:
            raise ConfigError(f"{where}.action", f"expected 'allow' or 'deny', got {rule.get('action')!r}")
        match = rule.get("match", {})
        if not isinstance(match, Mapping):
            raise ConfigError(f"{where}.match", "expected an object")
        for k, value in match.items():
            # An unknown (typo'd) field must not silently match everything.
            if k not in SCOPE_MATCH_KEYS:
                raise ConfigError(f"{where}.match.{k}", "unknown field")
            if not isinstance(value, str):
                raise ConfigError(f"{where}.match.{k}", "expected a string")
        if match.get("chatType") is not None and match["chatType"].lower() not in CHAT_TYPES:
            raise ConfigError(f"{where}.match.chatType", f"expected one of {', '.join(CHAT_TYPES)}")


def _scope(key: str, v: Any) -> Any:
    validate_scope(v, key)
    return v


SCOPE = F(None, _opt(_scope))

# memorySearch: defaults from the spec / reference §0.2.
MEMORY_SEARCH: dict[str, Any] = {
    "enabled": F(True, _bool),
    "provider": F("auto", _provider),
    "fallback": F("none", _fallback),
    "model": F("", _str),
    "sources": F(["memory"], _str_list(("memory", "sessions"))),
    # The default corpus of a search (OpenClaw 2026.9's searchSources; openclaw_schema sets it for
    # a 2026.9 config, where it can differ from the indexed sources); unset: every indexed source.
    "searchSources": F(None, _opt(_str_list(("memory", "sessions")))),
    "extraPaths": F([], _str_list()),
    "outputDimensionality": F(None, _opt(_size)),
    # OpenClaw's older name for outputDimensionality; merged into it by resolve_agent.
    "dimensions": F(None, _opt(_size)),
    # memindex's own: the text put before queries / documents for the embedding model; None: the
    # model family's (pipeline/embeddings/prefixes.py: e5 "query: "/"passage: ", nomic, ...); "": none.
    "queryPrefix": F(None, _opt(_str)),
    "documentPrefix": F(None, _opt(_str)),
    "experimental": {"sessionMemory": F(False, _bool)},
    # 2026.9's session policy: openclaw_schema turns it into sources (a 2026.3 config: no effect).
    "rememberAcrossConversations": F(None, _opt(_bool)),
    "inputType": Ignored(_str),
    "queryInputType": Ignored(_str),
    "documentInputType": Ignored(_str),
    "qmd": Ignored({"extraCollections": _qmd_paths}),
    "remote": {
        "baseUrl": F(None, _opt(_url)),
        "apiKey": F(None, _opt(_str)),
        "headers": F({}, _str_map),
        # Concurrent embedding requests per provider, across all workers (ollama/local: 1).
        "nonBatchConcurrency": F(4, _int(1)),
        "batch": {
            "enabled": F(False, _bool),
            "wait": F(True, _bool),
            "concurrency": F(2, _int(1)),
            "pollIntervalMs": F(2000, _int(0)),
            "timeoutMinutes": F(60, _num(0.01)),
        },
    },
    "local": {
        "modelPath": F(None, _opt(_str)),
        "modelCacheDir": F(None, _opt(_str)),
        "maxInputTokens": F(None, _opt(_int(8))),
        "contextSize": Ignored(_any),
    },
    "store": {
        "driver": F("sqlite", _enum("sqlite")),
        "path": F(None, _opt(_str)),
        "vector": {"enabled": F(True, _bool), "extensionPath": F(None, _opt(_str))},
        "cache": Ignored({"enabled": _bool, "maxEntries": _opt(_int(0))}),
        "fts": Ignored({"tokenizer": _enum("unicode61", "trigram")}),
    },
    "chunking": {"tokens": F(D.CHUNK_TOKENS, _int(1)), "overlap": F(D.CHUNK_OVERLAP, _int(0))},
    "sync": {
        "onSessionStart": F(True, _bool),
        "onSearch": F(True, _bool),
        "watch": F(True, _bool),
        "watchDebounceMs": F(1500, _int(0)),
        "intervalMinutes": F(0, _num(0)),
        # Later OpenClaw builds' knob: one embedding request's timeout while indexing (default: the
        # provider's own, 120 s remote, 600 s ollama). A hung endpoint held every `index` that long.
        "embeddingBatchTimeoutSeconds": F(None, _opt(_num(1, 3600))),
        "sessions": {"deltaBytes": F(DEFAULT_DELTA_BYTES, _int(0)), "deltaMessages": F(DEFAULT_DELTA_MESSAGES, _int(0)),
                     "postCompactionForce": Ignored(_bool)},
    },
    "query": {
        "maxResults": F(D.MAX_RESULTS, _int(1)),
        "minScore": F(D.MIN_SCORE, _num(0.0, 1.0)),
        # memindex extension (issue 17): "calibrated" = every score on one scale, a chunk's score
        # at least its keyword evidence; "weighted" = the spec's 0.7/0.3 sum of BM25/best and cosine.
        "fusion": F(D.FUSION, _enum("calibrated", "weighted")),
        "hybrid": {
            "enabled": F(True, _bool),
            "vectorWeight": F(D.VECTOR_WEIGHT, _num(0.0, 1.0)),
            "textWeight": F(D.TEXT_WEIGHT, _num(0.0, 1.0)),
            "candidateMultiplier": F(D.CANDIDATE_MULTIPLIER, _int(1, 20)),
            "mmr": {"enabled": F(False, _bool), "lambda": F(D.MMR_LAMBDA, _num(0.0, 1.0))},
            "temporalDecay": {"enabled": F(False, _bool), "halfLifeDays": F(D.HALF_LIFE_DAYS, _int(1))},
        },
    },
    "cache": {"enabled": F(True, _bool), "maxEntries": F(50_000, _opt(_int(0)))},
    "multimodal": {
        "enabled": F(False, _bool),
        "modalities": F(["all"], _str_list(("image", "audio", "all"))),
        "maxFileBytes": F(10 * 1024 * 1024, _int(1)),
    },
    "scope": SCOPE,
}

MEMORY: dict[str, Any] = {
    "backend": F("builtin", _enum("builtin", "qmd")),
    "citations": F("auto", _enum("auto", "on", "off")),
    "scope": SCOPE,
    "qmd": {
        "command": F("qmd", _str),
        "mcporter": Ignored({"enabled": _bool, "serverName": _str, "startDaemon": _bool}),
        "rerank": Ignored(_bool),
        "searchTool": Ignored(_str),
        "searchMode": F("search", _enum("search", "vsearch", "query")),
        "includeDefaultMemory": F(True, _bool),
        "paths": F([], _qmd_paths),
        "sessions": {
            "enabled": F(False, _bool),
            "retentionDays": F(None, _opt(_num(0))),
            "exportDir": F(None, _opt(_str)),
        },
        "update": {
            "interval": F(300_000, _duration_ms),
            "debounceMs": F(15_000, _int(0)),
            "onBoot": F(True, _bool),
            "startup": Ignored(_enum("off", "idle", "immediate")),
            "startupDelayMs": Ignored(_int(0)),
            "waitForBootSync": F(False, _bool),
            "embedInterval": F(3_600_000, _duration_ms),
            "commandTimeoutMs": F(30_000, _int(1)),
            "updateTimeoutMs": F(120_000, _int(1)),
            "embedTimeoutMs": F(120_000, _int(1)),
        },
        "limits": {
            "maxResults": F(D.MAX_RESULTS, _int(1)),
            "maxSnippetChars": F(D.SNIPPET_CHARS, _int(1)),
            "maxInjectedChars": F(4000, _int(1)),
            "timeoutMs": F(4000, _int(1)),
        },
        "scope": SCOPE,
    },
}

# An agent entry's own ``memory`` block (OpenClaw 2026.9's AgentEntrySchema: ``memory: {search}``,
# strict): its ``search`` is taken out by openclaw_schema.normalize; anything else is refused.
AGENT_MEMORY: dict[str, Any] = {"search": MEMORY_SEARCH}

MEMORY_FLUSH: dict[str, Any] = {
    "enabled": F(True, _bool),
    "softThresholdTokens": F(DEFAULT_SOFT_THRESHOLD_TOKENS, _int(0)),
    "reserveTokensFloor": F(None, _opt(_int(0))),
    "prompt": F(None, _opt(_str)),
    "systemPrompt": F(None, _opt(_str)),
}


def _defaults(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: _defaults(v) if isinstance(v, dict) else copy.deepcopy(v.default)
        for k, v in schema.items() if not isinstance(v, Ignored)
    }


def default_memory() -> MemorySettings:
    """The ``memory`` block of a config that sets none (a compute message from a sender without one)."""
    return MemorySettings.from_dict(_defaults(MEMORY))


def _unknown_key(schema: Mapping[str, Any], k: str, path: str) -> ConfigError:
    """A key neither OpenClaw nor memindex knows, with the closest known one suggested."""
    import difflib  # only to suggest a name for an unknown key

    close = difflib.get_close_matches(k, list(schema), n=1, cutoff=0.6)
    hint = f'; did you mean "{close[0]}"?' if close else ""
    return ConfigError(path, f"unknown key{hint} (known: {', '.join(sorted(schema))})")


def _validate(schema: Mapping[str, Any], value: Any, key: str, ignored: list[str]) -> dict[str, Any]:
    """Check a user subtree against the schema; return only the keys it set.

    ``ignored`` collects the paths of accepted-but-unimplemented OpenClaw keys.
    """
    if not isinstance(value, dict):
        raise ConfigError(key, f"expected an object, got {value!r}")
    out: dict[str, Any] = {}
    for k, v in value.items():
        sub = schema.get(k)
        path = f"{key}.{k}"
        if sub is None:
            raise _unknown_key(schema, k, path)
        if v is None:
            # null is unset, as OpenClaw's `agent ?? defaults ?? builtin` reads it: a per-agent
            # `local.modelPath: null` replaced the defaults' model (and `maxResults: null` was an error).
            continue
        if isinstance(sub, Ignored):
            if isinstance(sub.schema, dict):
                _validate(sub.schema, v, path, [])
            else:
                sub.schema(path, v)
            ignored.append(path)
        elif isinstance(sub, dict):
            out[k] = _validate(sub, v, path, ignored)
        else:  # an F, or a bare Check inside an Ignored subtree
            out[k] = sub.check(path, v) if isinstance(sub, F) else sub(path, v)
    return out


def _subtree(parent: Mapping[str, Any], k: str, key: str) -> dict[str, Any]:
    """``parent[k]`` as an object (absent or null: empty); anything else is a ConfigError."""
    v = parent.get(k)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ConfigError(key, f"expected an object, got {v!r}")
    return v


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_ignored(ignored: list[str]) -> None:
    """One warning per distinct set of ignored keys per process (settings are reloaded often)."""
    if not ignored:
        return
    msg = ("OpenClaw settings accepted but not implemented by memindex (ignored): "
           + ", ".join(dict.fromkeys(ignored)))
    with _warned_lock:
        if msg in _warned:
            return
        _warned.add(msg)
    log.warning("%s", msg)


# The keys memindex reads around memorySearch. The rest of OpenClaw's config is OpenClaw's and
# not validated here, but a near miss of one of these (``worspace``, ``memorysearch``,
# ``agents.default``) silently falls back to a default: it gets a "did you mean".
# Per schema (2026.3, 2026.9): a 2026.9 config is suggested its own keys, and the keys
# openclaw_schema.normalize writes into it (the 2026.3 shape memindex reads) are never flagged.
_AGENTS_KEYS = {openclaw_schema.V2026_3: ("defaults", "list"),
                openclaw_schema.V2026_9: ("defaults", "entries", "ownership")}
_ENTRY_KEYS = {openclaw_schema.V2026_3: ("id", "default", "workspace", "memorySearch"),
               openclaw_schema.V2026_9: ("default", "workspace", "memory")}
_DEFAULTS_KEYS = {openclaw_schema.V2026_3: ("workspace", "memorySearch", "compaction"),
                  openclaw_schema.V2026_9: ("workspace", "compaction", "systemAgent")}
_NORMALIZED = {"agents": ("list",), "entry": ("id", "memorySearch"), "defaults": ("memorySearch",)}


def _warn_near_misses(cfg: Mapping[str, Any]) -> None:
    agents = cfg.get("agents")
    if not isinstance(agents, dict):
        return
    version = openclaw_schema.schema_of(cfg).version
    made = _NORMALIZED if version == openclaw_schema.V2026_9 else {}

    def keys(where: str, block: Mapping[str, Any], kind: str, known: tuple[str, ...]) -> list[Any]:
        return [(where, k, known) for k in block if k not in made.get(kind, ())]

    found: list[tuple[str, Any, tuple[str, ...]]] = keys("agents", agents, "agents", _AGENTS_KEYS[version])
    if isinstance(agents.get("defaults"), dict):
        found += keys("agents.defaults", agents["defaults"], "defaults", _DEFAULTS_KEYS[version])
    for i, entry in enumerate(agents.get("list") or []):
        if isinstance(entry, dict):
            found += keys(entry_key(cfg, i), entry, "entry", _ENTRY_KEYS[version])
    for where, key, known in found:
        if not isinstance(key, str) or key in known:
            continue
        import difflib  # only for a key memindex does not read

        close = difflib.get_close_matches(key, known, n=1, cutoff=0.8) or [
            k for k in known if k.lower() == key.lower()]
        if close:
            msg = f"{where}.{key}: not a key memindex reads (did you mean {close[0]}?); its value is ignored"
            with _warned_lock:
                if msg in _warned:
                    continue
                _warned.add(msg)
            log.warning("%s", msg)


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k not in ("headers", "scope"):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


# --- loading --------------------------------------------------------------------

# Multimodal memory (F17) needs exactly this provider and model.
MULTIMODAL_PROVIDER = "gemini"
MULTIMODAL_MODEL = "gemini-embedding-2-preview"
MULTIMODAL_DIMS = dims_choices(MULTIMODAL_PROVIDER, MULTIMODAL_MODEL) or ()


def validate_multimodal(ms: Mapping[str, Any], key: str) -> None:
    """Raise one ConfigError naming ``<key>.multimodal.enabled`` if the resolved settings conflict.

    ``key`` is the memorySearch path where multimodal was configured, e.g.
    ``agents.defaults.memorySearch``.
    """
    mm = ms.get("multimodal") or {}
    if not mm.get("enabled"):
        return
    where = f"{key}.multimodal.enabled"
    provider, model, fallback = ms.get("provider"), ms.get("model") or "", ms.get("fallback")
    if provider != MULTIMODAL_PROVIDER:
        raise ConfigError(where, f'requires provider "{MULTIMODAL_PROVIDER}" and model "{MULTIMODAL_MODEL}" '
                                 f'(provider is "{provider}")')
    if model != MULTIMODAL_MODEL:
        raise ConfigError(where, f'requires model "{MULTIMODAL_MODEL}" (model is '
                                 f'"{model or provider_spec(MULTIMODAL_PROVIDER).default_model + " (default)"}")')
    if fallback != "none":
        raise ConfigError(where, f'requires fallback "none" (fallback is "{fallback}"); '
                                 "a fallback model cannot embed images or audio")
    if not mm.get("modalities"):
        raise ConfigError(f"{key}.multimodal.modalities", 'expected at least one of "image", "audio", "all"')
    dims = ms.get("outputDimensionality")
    if dims is not None and dims not in MULTIMODAL_DIMS:
        raise ConfigError(f"{key}.outputDimensionality",
                          f"{MULTIMODAL_MODEL} supports {', '.join(map(str, MULTIMODAL_DIMS[:-1]))} "
                          f"or {MULTIMODAL_DIMS[-1]} (got {dims})")


_SECRET_KEY = re.compile(r"api[-_]?key|token|secret|passw|authorization|cookie|credential", re.I)


def masked(value: Any, key: str = "") -> Any:
    """``value`` with every secret-looking entry (an ``apiKey``, a token, any header value) as
    ``"***"``; for showing settings, never for using them."""
    if isinstance(value, Record):  # a typed block: masked in the config's own (camelCase) shape
        value = value.to_dict()
    if isinstance(value, Mapping):
        return {k: ("***" if (key.lower() == "headers" or _SECRET_KEY.search(str(k))) and isinstance(v, str) and v
                    else masked(v, str(k))) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(masked(v, key) for v in value)
    return value


@dataclass(frozen=True)
class AgentSettings:
    """Everything one agent's indexing and search needs, fully defaulted."""

    agent_id: str
    workspace: Path
    state_dir: Path
    store_path: Path
    enabled: bool
    memory_search: MemorySearchSettings
    memory: MemorySettings
    providers: dict[str, Any] = field(default_factory=dict)
    memory_flush: dict[str, Any] = field(default_factory=dict)
    config_path: Path | None = None
    # Every file the config ``$include``d when these settings were read (one missing then too): with
    # config_path and ``<state_dir>/.env``, the files whose change means a re-read (``config_stamp``).
    config_includes: tuple[Path, ...] = ()
    config_schema: str = ""  # the OpenClaw schema the config was read as, for `status`
    store_key: str = "(default)"  # where store_path came from (a config key, MEMINDEX_STORE_PATH or the default)
    legacy_store: Path | None = None  # memindex's default store before it had its own name (migrated on open)
    openclaw_store: Path | None = None  # where OpenClaw keeps its own index for this agent
    agent_dir: Path | None = None  # OpenClaw's agentDir: auth-profiles.json
    auth: dict[str, Any] = field(default_factory=dict)  # the config's auth and secrets blocks (auth profiles)
    # Where this agent's memory-search keys are written, as the config spells them (for hints)
    keys: openclaw_schema.SettingKeys = openclaw_schema.SettingKeys()

    def __repr__(self) -> str:
        # Runtimes log their settings objects and crash reporters capture locals: the dataclass
        # repr printed every apiKey and header value in clear.
        shown = ", ".join(f"{f.name}={masked(getattr(self, f.name))!r}" for f in fields(self))
        return f"AgentSettings({shown})"

    @property
    def sources(self) -> list[str]:
        return list(self.memory_search.sources)

    def config_stamp(self) -> ConfigStamp:
        """The stamp, as the files are now, of the config these settings were read from: what
        ``config_stamp`` gives for a Context naming it, without resolving that Context again."""
        return files_stamp(self.config_path, self.state_dir, self.config_includes)

    @functools.cached_property
    def store_setting(self) -> str:
        """The setting to change this agent's store path with, for messages: MEMINDEX_STORE_PATH when
        it set the path, else the config's ``store.path`` key as the config spells it (``keys``). Once
        per settings object: every store open hands it on, for the error it may have to word."""
        return STORE_PATH_ENV if self.store_key == STORE_PATH_ENV else self.keys.key("store.path")

    @property
    def sessions_dir(self) -> Path:
        return inside(self.state_dir / "agents", self.state_dir / "agents" / self.agent_id / "sessions", "--agent")

    @property
    def chunk_tokens(self) -> int:
        return self.memory_search.chunking.tokens

    @property
    def chunk_overlap(self) -> int:
        c = self.memory_search.chunking
        return max(0, min(c.overlap, c.tokens - 1))

    def digest(self) -> str:
        """Stable hash of the resolved settings (for caching per-agent objects). Computed once per
        settings object (every part it covers is frozen): each embedder and engine look-up asks."""
        known: str | None = self.__dict__.get("_digest")
        if known is not None:
            return known
        blob = json.dumps(
            [self.agent_id, str(self.workspace), str(self.store_path), self.memory_search.to_dict(),
             self.memory.to_dict()],
            sort_keys=True,
            default=str,
        )
        known = hashlib.sha256(blob.encode()).hexdigest()[:16]
        object.__setattr__(self, "_digest", known)  # (frozen: not a field, so not compared or repr'd)
        return known



def _ms_key(found: tuple[int, dict[str, Any]] | None) -> str:
    return f"agents.list[{found[0]}].memorySearch" if found else "agents.defaults.memorySearch"


def resolve_agent(
    cfg: Mapping[str, Any],
    agent_id: str | None = None,
    *,
    state_dir: Path | None = None,
    workspace_override: str | os.PathLike[str] | None = None,
    config_path: Path | None = None,
    config_includes: tuple[Path, ...] = (),
    env: Mapping[str, str] | None = None,
) -> AgentSettings:
    """Merge defaults ← agents.defaults.memorySearch ← agents.list[id].memorySearch.

    ``agent_id`` None is the configured default agent; an id that is not
    configured is a ConfigError naming the configured ones. ``config_path``, ``config_includes``:
    the files ``cfg`` was read from (none: a caller's own dict).
    """
    env = os.environ if env is None else env
    state_dir = resolve_user_path(state_dir, env) if state_dir else default_state_dir(env)
    if openclaw_schema.SCHEMA_KEY not in cfg:  # a caller's own dict, in either OpenClaw schema
        cfg = openclaw_schema.normalize(dict(cfg))
    _warn_near_misses(cfg)
    agent_id = resolve_agent_id(cfg, agent_id, "agent_id")
    found = find_agent(cfg, agent_id)
    entry = found[1] if found else {}
    defaults = _subtree(_subtree(cfg, "agents", "agents"), "defaults", "agents.defaults")

    ignored: list[str] = []
    base_key, agent_key = openclaw_schema.ms_keys(cfg, agent_id, "agents.defaults.memorySearch", _ms_key(found))
    base_ms = _validate(MEMORY_SEARCH, resolve_secret_refs(
        _subtree(defaults, "memorySearch", base_key), cfg, env, base_key), base_key, ignored)
    agent_ms = _validate(MEMORY_SEARCH, resolve_secret_refs(
        _subtree(entry, "memorySearch", agent_key), cfg, env, agent_key), agent_key, ignored) if found else {}
    ms = _deep_merge(_deep_merge(_defaults(MEMORY_SEARCH), base_ms), agent_ms)
    dims = ms.pop("dimensions")
    if dims is not None:
        if ms["outputDimensionality"] not in (None, dims):
            raise ConfigError(f"{agent_key if 'dimensions' in agent_ms else base_key}.dimensions",
                              f"{dims} conflicts with outputDimensionality {ms['outputDimensionality']}")
        ms["outputDimensionality"] = dims
    # extraPaths concatenate (defaults first), trimmed and de-duplicated (reference §0.2).
    extra = [p.strip() for p in (base_ms.get("extraPaths", []) + agent_ms.get("extraPaths", []))]
    ms["extraPaths"] = list(dict.fromkeys(p for p in extra if p))
    sources = [s for s in ms["sources"] if s == "memory" or ms["experimental"]["sessionMemory"]]
    ms["sources"] = sorted(set(sources)) or ["memory"]
    ms["searchSources"] = sorted(set(ms["searchSources"] or ms["sources"]) & set(ms["sources"])) or ["memory"]
    w = ms["query"]["hybrid"]
    w["vectorWeight"], w["textWeight"] = min(1.0, w["vectorWeight"]), min(1.0, w["textWeight"])  # OpenClaw's cap
    total = w["vectorWeight"] + w["textWeight"]
    w["vectorWeight"], w["textWeight"] = (
        (w["vectorWeight"] / total, w["textWeight"] / total) if total > 0 else (D.VECTOR_WEIGHT, D.TEXT_WEIGHT)
    )
    if any("overlap" in m.get("chunking", {}) for m in (base_ms, agent_ms)):  # set: must be below tokens
        ranges.check_related(ms, agent_key if "chunking" in agent_ms else base_key)
    ms["chunking"]["overlap"] = max(0, min(ms["chunking"]["overlap"], ms["chunking"]["tokens"] - 1))
    validate_multimodal(ms, agent_key if "multimodal" in agent_ms else base_key)

    agent_memory_key = openclaw_schema.agent_memory_key(cfg, agent_id)
    if found and agent_memory_key:  # what normalize left of the agent's memory block: nothing valid
        _validate(AGENT_MEMORY, _subtree(entry, "memory", agent_memory_key), agent_memory_key, ignored)
    # memory.search was moved into memorySearch by normalize; still a known key of the block.
    memory_schema = {**MEMORY, "search": MEMORY_SEARCH} if openclaw_schema.reads_memory_search(cfg) else MEMORY
    memory = _deep_merge(_defaults(MEMORY), _validate(memory_schema, _subtree(cfg, "memory", "memory"), "memory",
                                                      ignored))
    compaction = _subtree(defaults, "compaction", "agents.defaults.compaction")
    flush_key = "agents.defaults.compaction.memoryFlush"
    flush = _deep_merge(_defaults(MEMORY_FLUSH),
                        _validate(MEMORY_FLUSH, _subtree(compaction, "memoryFlush", flush_key), flush_key, ignored))
    if flush["reserveTokensFloor"] is None:
        floor = compaction.get("reserveTokensFloor", DEFAULT_RESERVE_TOKENS_FLOOR)
        flush["reserveTokensFloor"] = _int(0)("agents.defaults.compaction.reserveTokensFloor", floor)
    _warn_ignored(ignored)

    slot = _subtree(_subtree(cfg, "plugins", "plugins"), "slots", "plugins.slots").get("memory")
    enabled = bool(ms["enabled"]) and slot != "none"

    workspace = (resolve_user_path(workspace_override, env) if workspace_override
                 else agent_workspace(cfg, agent_id, state_dir, env,
                                      owner=openclaw_schema.workspace_owner(cfg, default_agent_id(cfg)),
                                      default_dir=openclaw_schema.default_workspace(cfg, env),
                                      nest_in_defaults=openclaw_schema.nests_workspaces(cfg))).resolve()

    raw_store, store_key = ms["store"]["path"], f"{agent_key if 'store' in agent_ms else base_key}.store.path"
    own_store = environ.STORE_PATH.text(env)
    legacy_store = None
    if own_store:  # memindex's own setting, which no OpenClaw version reads
        raw_store, store_key = own_store, STORE_PATH_ENV
    if raw_store:
        store_path = _custom_store_path(raw_store, agent_id, state_dir, env)
        if enabled and "{agentId}" not in raw_store:
            _refuse_shared_store(cfg, agent_id, store_path, state_dir, env, store_key)
    else:
        store_key = "(default)"
        store_path = inside(state_dir / DEFAULT_STORE_DIR, _default_store_path(state_dir, agent_id), "--agent")
        legacy_store = inside(state_dir / "memory", state_dir / "memory" / f"{agent_id}.sqlite", "--agent")
    custom_oc = (_custom_store_path(ms["store"]["path"], agent_id, state_dir, env)
                 if ms["store"]["path"] and store_key != STORE_PATH_ENV else None)

    providers = _subtree(_subtree(cfg, "models", "models"), "providers", "models.providers")
    # SecretRefs of the providers memindex can embed with; other providers are none of our business.
    providers = {p: _provider_entry(f"models.providers.{p}", resolve_secret_refs(v, cfg, env, f"models.providers.{p}"))
                 if find_provider(p) else v for p, v in providers.items()}

    return AgentSettings(
        agent_id=agent_id,
        workspace=workspace,
        state_dir=state_dir,
        store_path=Path(os.path.normpath(store_path)),
        enabled=enabled,
        memory_search=MemorySearchSettings.from_dict(ms),
        memory=MemorySettings.from_dict(memory),
        providers=providers,
        memory_flush=flush,
        config_path=config_path,
        config_includes=config_includes,
        config_schema=openclaw_schema.schema_of(cfg).describe(),
        store_key=store_key,
        legacy_store=legacy_store,
        openclaw_store=Path(os.path.normpath(openclaw_schema.openclaw_store(
            cfg, _str_or(entry.get("id"), agent_id), agent_id, state_dir, custom_oc))),
        agent_dir=_agent_dir(entry, agent_id, state_dir, env),
        auth={"auth": _subtree(cfg, "auth", "auth"), "secrets": _subtree(cfg, "secrets", "secrets")},
        keys=openclaw_schema.setting_keys(cfg, agent_id, agent_ms),
    )


def _str_or(value: Any, default: str) -> str:
    return value if isinstance(value, str) else default


def _agent_dir(entry: Mapping[str, Any], agent_id: str, state_dir: Path, env: Mapping[str, str]) -> Path:
    """resolveAgentDir: the entry's ``agentDir``, else ``<state>/agents/<id>/agent`` (its auth-profiles.json)."""
    own = entry.get("agentDir")
    if isinstance(own, str) and own.strip():
        return resolve_user_path(own.strip(), env)
    return state_dir / "agents" / agent_id / "agent"


# memindex's own store file, which no OpenClaw version uses: OpenClaw 2026.3 keeps its index at
# <state>/memory/<agentId>.sqlite (memindex's default until then: both rewrote the other's file),
# 2026.9 at <state>/agents/<agentId>/agent/openclaw-agent.sqlite.
DEFAULT_STORE_DIR = "memindex"
# memindex's store path (``{agentId}``, ``~``; relative to the state dir), for a config whose
# memorySearch.store.path is OpenClaw's (2026.3) or that cannot hold one (2026.9's schema).
STORE_PATH_ENV = environ.STORE_PATH.name


def _default_store_path(state_dir: Path, agent_id: str) -> Path:
    """An agent's store when no path is set: ``<state>/memindex/<agentId>.sqlite``."""
    return state_dir / DEFAULT_STORE_DIR / f"{agent_id}.sqlite"


def _custom_store_path(raw: str, agent_id: str, state_dir: Path, env: Mapping[str, str]) -> Path:
    """``memorySearch.store.path``: ``{agentId}`` replaced, ``~`` the OpenClaw home (resolveUserPath),
    relative to the state dir."""
    path = expand_home(raw.replace("{agentId}", agent_id).strip(), env)
    return Path(os.path.normpath(path if path.is_absolute() else state_dir / path))


def _refuse_shared_store(cfg: Mapping[str, Any], agent_id: str, store_path: Path, state_dir: Path,
                         env: Mapping[str, str], key: str) -> None:
    """A store path without ``{agentId}`` must not be another configured agent's too: one SQLite
    file per agent, or each agent's sync deletes the others' files and search serves their notes."""
    defaults = _subtree(_subtree(cfg, "agents", "agents"), "defaults", "agents.defaults")
    base = _subtree(_subtree(defaults, "memorySearch", "agents.defaults.memorySearch"), "store", "store").get("path")
    for other in list_agent_ids(cfg):
        if other == agent_id:
            continue
        found = find_agent(cfg, other)
        ms = (found[1].get("memorySearch") if found else None) or {}
        store = ms.get("store") if isinstance(ms, dict) else None
        raw = store.get("path") if isinstance(store, dict) and store.get("path") else base
        if ms.get("enabled") is False:
            continue
        # An agent with no store.path has the default one: `a` at memory/b.sqlite was b's store too.
        theirs = (_custom_store_path(raw, other, state_dir, env) if isinstance(raw, str) and raw.strip()
                  else Path(os.path.normpath(_default_store_path(state_dir, other))))
        if theirs == store_path:
            raise ConfigError(key, f"agents {agent_id!r} and {other!r} would share the store {store_path}; "
                                   "one SQLite file per agent: put {agentId} in the path")


# (mtime ns, size) of the config, ``<state>/.env`` and each included file (None: missing): ``files_stamp``.
ConfigStamp = tuple[tuple[int, int] | None, ...]


def files_stamp(config: Path | None, state_dir: Path, includes: tuple[Path, ...]) -> ConfigStamp:
    """The one definition of a config's stamp: (mtime ns, size) of the config file (None: no file),
    ``<state_dir>/.env`` and each file the config ``$include``s (None where a file is missing). Any
    change means the config must be read again; a new ``$include`` is an edit of the file naming it."""
    out: list[tuple[int, int] | None] = []
    for p in (config, state_dir / ".env", *includes):
        try:
            st = os.stat(p) if p else None
            out.append((st.st_mtime_ns, st.st_size) if st else None)
        except OSError:
            out.append(None)
    return tuple(out)


@dataclass(frozen=True)
class Context:
    """How a worker finds an agent's settings: small enough to ride in every message.

    ``agent_id`` None is the configured default agent; ``config``/``state_dir`` None
    are looked up the OpenClaw way (flags, then ``OPENCLAW_*``, then ``~/.openclaw``).
    A message always carries a ``pinned`` Context: every field resolved and absolute.
    """

    agent_id: str | None = None
    config: str | None = None
    state_dir: str | None = None
    workspace: str | None = None
    # A sync's messages: the ``config_stamp`` its plan was made under. A worker holding settings of
    # that stamp uses them without looking at the config files again (``agents.settings_for``): a
    # message in flight finishes under the config it was planned with, the next sync resolves
    # afresh. Not part of what the Context names (equality, hash and repr leave it out).
    stamp: ConfigStamp | None = field(default=None, compare=False, repr=False)

    @property
    def absolute(self) -> bool:
        """Whether the config (or ``NO_CONFIG``) and the state dir are given as absolute paths, as
        ``pinned`` gives them: then this Context names the same files in any process, cwd and
        environment (any other is resolved against ``OPENCLAW_*``, the home and the cwd)."""
        return (self.state_dir is not None and os.path.isabs(self.state_dir) and self.config is not None
                and (self.config == NO_CONFIG or os.path.isabs(self.config)))

    def __post_init__(self) -> None:
        # A wrong value here picks another directory silently (7 -> "./7", b"x" -> "./b'x'", "" -> the
        # user's real ~/.openclaw, or for config no config file at all): refuse it at once.
        for name in ("agent_id", "config", "state_dir", "workspace"):
            value = getattr(self, name)
            if value is None:
                continue
            if type(value) is not str:  # (every message decodes a Context: the plain case asks nothing more)
                # An id is a name, not a path: a Path("vault") was taken here and refused later by
                # load_settings as an unknown agent, the two disagreeing about what an id is.
                require(f"Context.{name}", value, str if name == "agent_id" else (str, os.PathLike), optional=True)
            text = os.fspath(value)
            if name == "agent_id":
                # The CLI's --agent check: one that names a path or nothing ("../x", "") was taken here
                # and refused only by load_settings, as a ConfigError; whether it is configured is
                # still decided where it is resolved.
                try:
                    validate_agent_id(text, "Context.agent_id")
                except ConfigError as exc:
                    raise UsageError(exc.detail) from None
                continue
            if name == "config" and text == NO_CONFIG:
                continue  # NO_CONFIG is the pinned "no config file" marker
            require_path_text(f"Context.{name}", str(text))

    def as_dict(self) -> dict[str, Any]:
        return {"agent_id": self.agent_id, "config": self.config, "state_dir": self.state_dir,
                "workspace": self.workspace}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Context":
        fields = {k: d.get(k) for k in ("agent_id", "config", "state_dir", "workspace")}
        if fields["config"] == LEGACY_NO_CONFIG:  # a message queued by an older sender: its "no config file"
            fields["config"] = NO_CONFIG
        return cls(**fields)


# OpenClaw's JSON names (Context(agentId="main")) or a typo: a UsageError naming the fields.
Context.__init__ = checked_call("Context")(Context.__init__)  # type: ignore[method-assign]


def pinned(settings: AgentSettings, stamp: ConfigStamp | None = None) -> Context:
    """The Context that finds exactly these settings again, in any process, from any cwd and
    environment: absolute config path (``NO_CONFIG`` when there was none), state dir, workspace;
    ``stamp``: the config's when these settings were read (``Context.stamp``)."""
    return Context(settings.agent_id, str(settings.config_path) if settings.config_path else NO_CONFIG,
                   str(settings.state_dir), str(settings.workspace), stamp)


def context_paths(ctx: Context, env: Mapping[str, str] | None = None) -> tuple[Path, Path | None]:
    """The absolute state dir and config path (None: no file) ``ctx`` names, resolved once here."""
    state_dir = resolve_user_path(ctx.state_dir, env) if ctx.state_dir else default_state_dir(env)
    return state_dir, config_path_for(ctx.config, state_dir, env)


def config_stamp(ctx: Context) -> ConfigStamp:
    """What a long-running process compares to know the config ``ctx`` names changed (the settings
    cache, the watcher's reload, the servers' agent list): ``files_stamp`` of the files ``ctx``
    resolves to now, with the includes of that config's last load."""
    state_dir, path = context_paths(ctx)
    return files_stamp(path, state_dir, included_files(path))


def _check_env(env: Mapping[str, str] | None) -> None:
    """``env`` replaces os.environ: str names to str values, or every lookup in it fails deep inside
    (a str env: ValueError from dict(); an int value: AttributeError from .strip())."""
    require("env", env, Mapping, optional=True)
    for key, value in (env or {}).items():
        if not isinstance(key, str):
            raise UsageError(f"env names must be str, not {type(key).__name__}")
        if not isinstance(value, str):  # its type only, never the value: env holds API keys
            raise UsageError(f"env[{key!r}] must be str, not {type(value).__name__}")


def _load(ctx: Context, env: Mapping[str, str] | None) -> tuple[dict[str, Any], Path, Path | None, Mapping[str, str]]:
    _check_env(env)
    # The process environment receives <state>/.env and the env block, as OpenClaw's does;
    # an explicit ``env`` (tests, embedding callers) is copied and left untouched.
    target: MutableMapping[str, str] = os.environ if env is None else dict(env)
    state_dir, path = context_paths(ctx, target)
    # Either OpenClaw schema (2026.3 or 2026.9), read in the 2026.3 shape the rest of memindex knows.
    cfg = load_config(path, state_dir, target, lambda p: find_provider(p) is not None)
    return openclaw_schema.normalize(cfg), state_dir, path, target


@checked_call("load_settings")
def load_settings(ctx: Context, env: Mapping[str, str] | None = None) -> AgentSettings:
    require("ctx", ctx, Context)
    cfg, state_dir, path, target = _load(ctx, env)
    return resolve_agent(cfg, ctx.agent_id, state_dir=state_dir, workspace_override=ctx.workspace,
                         config_path=path, config_includes=included_files(path), env=target)


def load_raw(ctx: Context, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The config ``ctx`` names, includes merged and variables substituted (not validated)."""
    return _load(ctx, env)[0]
