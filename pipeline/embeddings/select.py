"""Choosing the embedding provider (and its fallback) from an agent's memorySearch settings.

Construction never does network I/O: SDK clients are created but not called,
and an hf: local model is downloaded on first use, not here.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .base import EmbeddingProvider, ProviderAuthError, ProviderError
from .endpoints import fallback_provider, requested_provider, resolve_base_url, resolve_headers, resolve_model
from .hf_download import HF_BASE_URL, is_remote_model
from .keys import ENV_VARS, missing_key_message, resolve_api_key

log = logging.getLogger(__name__)

AUTO_REMOTE_ORDER = ("openai", "gemini", "voyage", "mistral")  # ollama is never auto-selected
KNOWN = ("openai", "gemini", "voyage", "mistral", "ollama", "local", "hash")


@dataclass
class ProviderChoice:
    """The outcome of selection.

    ``primary`` None with ``fallback`` set: the requested provider could not be
    built (``primary_error`` says why) and the fallback serves from the start.
    Both None: no provider, keyword search only (``reason`` says why).
    """

    primary: EmbeddingProvider | None
    fallback: EmbeddingProvider | None
    reason: str
    requested: str
    primary_error: str | None = None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def build_provider(
    provider_id: str,
    ms: Mapping[str, Any],
    providers_cfg: Mapping[str, Any] | None,
    env: Mapping[str, str],
    cache_dir: str | os.PathLike[str],
    *,
    auth_profiles: Mapping[str, str] | None = None,
    as_fallback: bool = False,
    hf_base_url: str = HF_BASE_URL,
) -> EmbeddingProvider:
    """One provider from settings. Missing key -> ProviderAuthError; other problems -> ProviderError."""
    if provider_id not in KNOWN:
        raise ProviderError(f"unknown embedding provider {provider_id!r} (expected one of {', '.join(KNOWN)})")
    if provider_id == "local":
        return _build_local(ms, env, cache_dir, hf_base_url)
    if provider_id == "hash":  # test/benchmark embedder: only when asked for by name
        from .hashing import HashProvider

        dims = ms.get("outputDimensionality")
        delay = float(env.get("MEMINDEX_HASH_EMBED_DELAY", "0") or 0)
        return HashProvider(ms.get("model") or "hash-v1", int(dims) if dims else 384, delay)
    model = resolve_model(provider_id, ms, as_fallback=as_fallback)
    base_url = resolve_base_url(provider_id, ms, providers_cfg)
    headers = resolve_headers(provider_id, ms, providers_cfg)
    key = resolve_api_key(provider_id, ms, providers_cfg, env, auth_profiles)
    if provider_id == "ollama":
        from .ollama import OllamaProvider

        return OllamaProvider(model, base_url=base_url, api_key=key, headers=headers)
    if not key:
        raise ProviderAuthError(missing_key_message(provider_id))
    if provider_id == "openai":
        from .openai_provider import OpenAIProvider

        return OpenAIProvider(key, model, base_url=base_url, headers=headers)
    if provider_id == "gemini":
        from .gemini import GeminiProvider

        dims = ms.get("outputDimensionality")
        return GeminiProvider(key, model, base_url=base_url, headers=headers,
                              output_dimensionality=int(dims) if dims else None)
    if provider_id == "voyage":
        from .voyage import VoyageProvider

        return VoyageProvider(key, model, base_url=base_url, headers=headers)
    from .mistral import MistralProvider

    return MistralProvider(key, model, base_url=base_url, headers=headers)


def _build_local(ms: Mapping[str, Any], env: Mapping[str, str], cache_dir: Any, hf_base_url: str) -> EmbeddingProvider:
    from .local import LocalProvider, llama_available

    local = _dict(ms.get("local"))
    path = local.get("modelPath") or None
    if path and not is_remote_model(path) and not Path(path).expanduser().is_file():
        raise ProviderError(f"local: model file not found: {path}")
    if not llama_available():
        raise ProviderError("local: llama-cpp-python is not installed (pip install 'memindex[local]')")
    return LocalProvider(
        path,
        local.get("modelCacheDir") or cache_dir,
        max_input_tokens=local.get("maxInputTokens"),
        hf_base_url=hf_base_url,
        hf_token=env.get("HF_TOKEN") or None,
    )


def _local_file_configured(ms: Mapping[str, Any]) -> bool:
    path = _dict(ms.get("local")).get("modelPath")
    return bool(path) and not is_remote_model(path) and Path(path).expanduser().is_file()


def select_provider(
    ms: Mapping[str, Any],
    providers_cfg: Mapping[str, Any] | None,
    env: Mapping[str, str],
    cache_dir: str | os.PathLike[str],
    *,
    auth_profiles: Mapping[str, str] | None = None,
    hf_base_url: str = HF_BASE_URL,
) -> ProviderChoice:
    """Primary + fallback for these settings (F3, reference §4.4)."""
    requested = requested_provider(ms)
    kw = dict(auth_profiles=auth_profiles, hf_base_url=hf_base_url)

    def build(pid: str, as_fallback: bool = False) -> EmbeddingProvider:
        return build_provider(pid, ms, providers_cfg, env, cache_dir, as_fallback=as_fallback, **kw)

    primary: EmbeddingProvider | None = None
    if requested == "auto":
        if _local_file_configured(ms):
            primary, reason = build("local"), "auto: local.modelPath exists"
        else:
            for pid in AUTO_REMOTE_ORDER:
                try:
                    primary = build(pid)
                except ProviderAuthError:
                    continue  # no key: try the next one
                reason = f"auto: {pid} (first provider with an API key)"
                break
        if primary is None:
            env_names = "/".join(n for p in AUTO_REMOTE_ORDER for n in ENV_VARS[p][:1])
            reason = (f"no embedding provider configured: no local.modelPath and no {env_names}; "
                      "keyword search only")
            log.info("memory embeddings: %s", reason)
            return ProviderChoice(None, None, reason, requested)
    else:
        try:
            primary = build(requested)
            reason = f"{requested} (configured)"
        except ProviderError as exc:
            fb = _build_fallback(ms, requested, build)
            if fb is None:
                raise
            log.warning("memory embeddings: %s; using fallback provider %s", exc, fb.id)
            return ProviderChoice(None, fb, f"{exc}; fallback {fb.id} serves", requested, primary_error=str(exc))
    fallback = _build_fallback(ms, primary.id, build)
    if fallback is not None:
        reason += f"; fallback {fallback.id}"
    return ProviderChoice(primary, fallback, reason, requested)


def _build_fallback(ms: Mapping[str, Any], primary_id: str, build: Any) -> EmbeddingProvider | None:
    fb = fallback_provider(ms)
    if fb is None or fb == primary_id:
        return None
    try:
        return build(fb, True)
    except ProviderError as exc:
        log.warning("memory embeddings: fallback provider %s unavailable: %s", fb, exc)
        return None
