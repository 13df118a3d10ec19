"""Choosing the embedding provider (and its fallback) from an agent's memorySearch settings.

Construction never does network I/O: SDK clients are created but not called,
and an hf: local model is downloaded on first use, not here.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from memindex.pipeline.config.openclaw_schema import SettingKeys
from memindex.pipeline.embeddings import registry, secrets
from memindex.pipeline.embeddings.base import EmbeddingProvider, ProviderAuthError, ProviderError, ProviderKeyMissing
from memindex.pipeline.embeddings.endpoints import fallback_provider, requested_provider, resolve_base_url, resolve_headers, resolve_model
from memindex.pipeline.embeddings.prefixes import prefixes_for
from memindex.pipeline.embeddings.keys import missing_key_message, resolve_api_key
from memindex.pipeline.embeddings.registry import ProviderArgs

log = logging.getLogger(__name__)


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


def build_provider(
    provider_id: str,
    ms: Mapping[str, Any],
    providers_cfg: Mapping[str, Any] | None,
    env: Mapping[str, str],
    cache_dir: str | os.PathLike[str],
    *,
    auth_profiles: Mapping[str, str] | None = None,
    as_fallback: bool = False,
    hf_base_url: str | None = None,
    destination_bound: bool = False,
    keys: SettingKeys = SettingKeys(),
) -> EmbeddingProvider:
    """One provider from settings. Missing key -> ProviderAuthError; other problems -> ProviderError.
    ``keys``: how the config spells the keys a message names (``AgentSettings.keys``)."""
    spec = registry.get(provider_id)  # an unknown id is a ProviderError
    key = resolve_api_key(provider_id, ms, providers_cfg, env, auth_profiles, destination_bound)
    if spec.needs_key and not key:
        raise ProviderKeyMissing(missing_key_message(provider_id, ms, providers_cfg,
                                                     destination_bound=destination_bound, keys=keys))
    headers = resolve_headers(provider_id, ms, providers_cfg)
    _require_ascii(provider_id, key, headers)
    args = ProviderArgs(
        model=resolve_model(provider_id, ms, as_fallback=as_fallback),
        base_url=resolve_base_url(provider_id, ms, providers_cfg) or spec.default_base_url,
        headers=headers,
        api_key=key,
        memory_search=ms,
        env=env,
        cache_dir=cache_dir,
        hf_base_url=hf_base_url,
    )
    # before any request can log them
    secrets.register(key, *(args.headers or {}).values(), *secrets.url_secrets(args.base_url))
    provider: EmbeddingProvider = registry.factory_of(spec)(args)  # imports the provider's SDK now
    if provider.id != spec.id:
        raise ProviderError(f"embedding provider {spec.id!r}: its factory built a {provider.id!r} provider")
    provider.prefixes = prefixes_for(provider.model, ms)
    return provider


def _require_ascii(provider_id: str, key: str | None, headers: Mapping[str, str]) -> None:
    """A key or header value an HTTP request cannot carry (a pasted placeholder such as "sk-…"):
    said as what it is. It failed at the first request as "InvalidVectorError: 'ascii' codec can't
    encode character", promising a retry that could never succeed. Never echoes the value."""
    for what, value in (("the API key", key), *((f"header {name!r}", v) for name, v in headers.items())):
        if value is None:
            continue
        bad = next((i for i, ch in enumerate(value) if not " " <= ch <= "~" and ch != "\t"), None)
        if bad is not None:
            raise ProviderAuthError(f"{provider_id}: {what} holds a character an HTTP header cannot carry "
                                    f"(U+{ord(value[bad]):04X} at position {bad + 1}; a copied placeholder?)")


def select_provider(
    ms: Mapping[str, Any],
    providers_cfg: Mapping[str, Any] | None,
    env: Mapping[str, str],
    cache_dir: str | os.PathLike[str],
    *,
    auth_profiles: Mapping[str, str] | None = None,
    hf_base_url: str | None = None,
    destination_bound: bool = False,
    keys: SettingKeys = SettingKeys(),
) -> ProviderChoice:
    """Primary + fallback for these settings (F3, reference §4.4). ``destination_bound``: OpenClaw
    2026.9's rule for a remote.baseUrl of someone else's (see keys.resolve_api_key)."""
    requested = requested_provider(ms)

    def build(pid: str, as_fallback: bool = False) -> EmbeddingProvider:
        return build_provider(pid, ms, providers_cfg, env, cache_dir, as_fallback=as_fallback,
                              auth_profiles=auth_profiles, hf_base_url=hf_base_url,
                              destination_bound=destination_bound, keys=keys)

    primary: EmbeddingProvider | None = None
    if requested == "none":  # OpenClaw's deliberate keyword-only search: no provider, no fallback
        return ProviderChoice(None, None, 'provider "none": keyword search only', requested)
    if requested == "auto":
        for spec in registry.auto_specs():
            if spec.auto_check is not None:
                why = registry.load(spec.auto_check)(ms)
                if not why:
                    continue
                primary, reason = build(spec.id), f"auto: {why}"
                break
            try:
                primary = build(spec.id)
            except ProviderAuthError:
                continue  # no key: try the next one
            reason = f"auto: {spec.id} (first provider with an API key)"
            break
        if primary is None:
            reason = f"no embedding provider configured: {_auto_missing(ms)}; keyword search only"
            log.info("memory embeddings: %s", reason)
            return ProviderChoice(None, None, reason, requested)
    else:
        try:
            primary = build(requested)
            reason = f"{requested} (configured)"
        except ProviderError as exc:
            fb = _build_fallback(ms, requested, build)
            if fb is None:
                if isinstance(exc, ProviderKeyMissing):
                    # As OpenClaw (reference 4.4): an explicit provider without a key means keyword
                    # search, said once, never a run that indexes nothing. Any other failure raises.
                    reason = f"{exc}; keyword search only"
                    log.info("memory embeddings: %s", reason)  # `index` and `status` say it (every search would)
                    return ProviderChoice(None, None, reason, requested, primary_error=str(exc))
                raise
            log.warning("memory embeddings: %s; using fallback provider %s", exc, fb.id)
            return ProviderChoice(None, fb, f"{exc}; fallback {fb.id} serves", requested, primary_error=str(exc))
    fallback = _build_fallback(ms, primary.id, build)
    if fallback is not None:
        reason += f"; fallback {fallback.id}"
    return ProviderChoice(primary, fallback, reason, requested)


def _auto_missing(ms: Mapping[str, Any]) -> str:
    """What "auto" looked for: "no local.modelPath and no OPENAI_API_KEY/GEMINI_API_KEY/..."."""
    checks = [registry.load(s.auto_missing)(ms) if s.auto_missing else f"no {s.auto_hint or s.id}"
              for s in registry.auto_specs() if s.auto_check is not None]
    keys = "/".join(s.auto_hint or s.env_vars[0] for s in registry.auto_specs()
                    if s.auto_check is None and (s.auto_hint or s.env_vars))
    return " and ".join((*checks, f"no {keys}") if keys else checks)


def _build_fallback(ms: Mapping[str, Any], primary_id: str,
                    build: Callable[[str, bool], EmbeddingProvider]) -> EmbeddingProvider | None:
    fb = fallback_provider(ms)
    if fb is None or fb == primary_id:
        return None
    try:
        return build(fb, True)
    except ProviderError as exc:
        log.warning("memory embeddings: fallback provider %s unavailable: %s", fb, exc)
        return None
