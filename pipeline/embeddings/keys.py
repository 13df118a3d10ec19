"""API-key resolution for remote embedding providers.

Order: memorySearch.remote.apiKey (only for the provider remote.* describes,
see endpoints.remote_target) → models.providers.<p>.apiKey → auth profiles →
environment variables. Keys are returned, never logged.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from .endpoints import CONFIG_NAMES, provider_config, remote_target

ENV_VARS: Mapping[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "voyage": ("VOYAGE_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "ollama": ("OLLAMA_API_KEY",),  # optional: only proxied Ollama servers want one
}
_ALL_ENV_NAMES = frozenset(n for names in ENV_VARS.values() for n in names)
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
    if m and (value.startswith("$") or value in _ALL_ENV_NAMES):
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
) -> str | None:
    """The API key for provider_id, or None when nothing provides one."""
    if remote_target(ms) == provider_id:
        remote = ms.get("remote") if isinstance(ms.get("remote"), dict) else {}
        key = _deref(remote.get("apiKey"), env)
        if key:
            return key
    key = _deref(provider_config(providers_cfg, provider_id).get("apiKey"), env)
    if key:
        return key
    for name in (provider_id, *CONFIG_NAMES.get(provider_id, ())):
        key = _deref((auth_profiles or {}).get(name), env)
        if key:
            return key
    for var in ENV_VARS.get(provider_id, ()):
        key = _clean(env.get(var))
        if key:
            return key
    return None


def missing_key_message(provider_id: str) -> str:
    cfg_name = CONFIG_NAMES.get(provider_id, (provider_id,))[0]
    env_names = " or ".join(ENV_VARS.get(provider_id, ()))
    return (f"{provider_id}: no API key (set memorySearch.remote.apiKey, "
            f"models.providers.{cfg_name}.apiKey or {env_names})")
