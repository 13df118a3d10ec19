"""API-key resolution for remote embedding providers.

Order: memorySearch.remote.apiKey (only for the provider remote.* describes,
see endpoints.remote_target) → models.providers.<p>.apiKey → OpenClaw's
auth-profiles.json (config/auth_profiles.py, in OpenClaw's profile order) →
environment variables. Keys are returned, never logged.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from memindex.pipeline.config.openclaw_schema import SettingKeys
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.endpoints import provider_config, remote_target

_ENV_REF = re.compile(r"^\$?\{?([A-Z_][A-Z0-9_]*)\}?$")


def _deref(value: Any, env: Mapping[str, str]) -> str | None:
    """A literal key, or a reference to an env var: "${NAME}", "$NAME", a bare
    well-known name like "GEMINI_API_KEY" (as the reference accepts), or a
    secret ref {"source": "env", "id": NAME}."""
    if isinstance(value, dict):
        if str(value.get("source", "")).lower() == "env" and value.get("id"):
            return _clean(env.get(str(value["id"])))
        return None
    if not isinstance(value, str):
        return None
    value = value.strip()
    m = _ENV_REF.match(value)
    if m and (value.startswith("$") or value in registry.env_var_names()):
        return _clean(env.get(m.group(1)))
    return _clean(value)


def _clean(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value or None


def resolve_api_key(
    provider_id: str,
    ms: Mapping[str, Any],
    providers_cfg: Mapping[str, Any] | None,
    env: Mapping[str, str],
    auth_profiles: Mapping[str, str] | None = None,
    destination_bound: bool = False,
) -> str | None:
    """The API key for provider_id, or None when nothing provides one.

    ``destination_bound`` (OpenClaw 2026.9's rule): a ``remote.baseUrl`` that is not the provider's
    own endpoint (``models.providers.<p>.baseUrl``, else its default) gets ``remote.apiKey`` only,
    never the keys meant for the provider (profiles, environment, models.providers)."""
    raw = ms.get("remote")
    remote: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    if remote_target(ms) == provider_id:
        key = _deref(remote.get("apiKey"), env)
        if key:
            return key
        if destination_bound and _foreign_destination(provider_id, remote, providers_cfg):
            return None
    key = _deref(provider_config(providers_cfg, provider_id).get("apiKey"), env)
    if key:
        return key
    spec = registry.find(provider_id)
    for name in dict.fromkeys((provider_id, *(spec.config_names if spec else ()))):
        key = _deref((auth_profiles or {}).get(name), env)
        if key:
            return key
    for var in spec.env_vars if spec else ():
        key = _clean(env.get(var))
        if key:
            return key
    return None


def _foreign_destination(provider_id: str, remote: Mapping[str, Any], providers_cfg: Mapping[str, Any] | None) -> bool:
    base = remote.get("baseUrl")
    if not isinstance(base, str) or not base.strip():
        return False
    spec = registry.find(provider_id)
    own = provider_config(providers_cfg, provider_id).get("baseUrl") or (spec.default_base_url if spec else None)
    return not isinstance(own, str) or base.strip().rstrip("/") != own.strip().rstrip("/")


def key_sources(provider_id: str | None, ms: Mapping[str, Any] | None = None,
                providers_cfg: Mapping[str, Any] | None = None, *, destination_bound: bool = False,
                keys: SettingKeys = SettingKeys()) -> str:
    """Where a key for ``provider_id`` can be set, named as the config spells its keys (``keys``):
    every message that says "set ..." or "check the API key: ..." words it here. With ``ms`` known,
    a ``remote.baseUrl`` of someone else's under ``destination_bound`` (2026.9) takes only
    ``remote.apiKey`` (resolve_api_key sends nothing else there), and ``remote.apiKey`` is named
    only for the provider ``remote.*`` describes."""
    remote_key = keys.key("remote.apiKey")
    spec = registry.find(provider_id or "")
    raw = ms.get("remote") if ms is not None else None
    remote: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    target = remote_target(ms) if ms is not None else provider_id
    if spec is None or (ms is not None and target == provider_id and destination_bound
                        and _foreign_destination(spec.id, remote, providers_cfg)):
        return remote_key
    places = [remote_key] if target in (spec.id, None) else []
    places.append(f"models.providers.{spec.names_in_config()[0]}.apiKey")
    last = " or ".join(spec.env_vars) or f"an auth profile named {spec.id}"
    return f"{', '.join(places)} or {last}"


def missing_key_message(provider_id: str, ms: Mapping[str, Any] | None = None,
                        providers_cfg: Mapping[str, Any] | None = None, *, destination_bound: bool = False,
                        keys: SettingKeys = SettingKeys()) -> str:
    registry.get(provider_id)  # an unknown id is a ProviderError
    sources = key_sources(provider_id, ms, providers_cfg, destination_bound=destination_bound, keys=keys)
    return f"{provider_id}: no API key (set {sources})"
