"""Which base URL, headers and model a provider gets from memorySearch + models.providers.

Precedence (F3): ``memorySearch.remote.*`` beats ``models.providers.<p>.*``,
and on header name conflicts (case-insensitive) remote.headers win.
``remote.*`` describes one endpoint, so it applies to one provider only: the
configured remote provider; with ``provider: "local"`` the remote fallback;
with ``provider: "auto"`` openai (tried first among remote providers, as in
the reference).
"""

from __future__ import annotations

from typing import Any, Mapping

REMOTE_PROVIDERS = ("openai", "gemini", "voyage", "mistral", "ollama")

# models.providers keys per provider id; OpenClaw calls Gemini "google".
CONFIG_NAMES: Mapping[str, tuple[str, ...]] = {
    "openai": ("openai",),
    "gemini": ("google", "gemini"),
    "voyage": ("voyage", "voyageai"),
    "mistral": ("mistral",),
    "ollama": ("ollama",),
}

DEFAULT_MODELS: Mapping[str, str] = {
    "openai": "text-embedding-3-small",
    "gemini": "gemini-embedding-001",
    "voyage": "voyage-4-large",
    "mistral": "mistral-embed",
    "ollama": "nomic-embed-text",
}

# Prefixes users write in `model` ("openai/text-embedding-3-large").
_MODEL_PREFIXES: Mapping[str, tuple[str, ...]] = {
    "openai": ("openai/",),
    "gemini": ("models/", "gemini/", "google/"),
    "voyage": ("voyage/",),
    "mistral": ("mistral/",),
    "ollama": ("ollama/",),
}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def requested_provider(ms: Mapping[str, Any]) -> str:
    return str(ms.get("provider") or "auto").strip().lower() or "auto"


def fallback_provider(ms: Mapping[str, Any]) -> str | None:
    fb = str(ms.get("fallback") or "none").strip().lower()
    return None if fb in ("", "none") else fb


def remote_target(ms: Mapping[str, Any]) -> str | None:
    """The provider that memorySearch.remote.* (and the top-level model) describe."""
    req = requested_provider(ms)
    if req in REMOTE_PROVIDERS:
        return req
    if req == "local":
        fb = fallback_provider(ms)
        return fb if fb in REMOTE_PROVIDERS else None
    return "openai"  # auto


def provider_config(providers_cfg: Mapping[str, Any] | None, provider_id: str) -> dict[str, Any]:
    """The first models.providers entry that names this provider."""
    cfg = _dict(providers_cfg)
    for name in CONFIG_NAMES.get(provider_id, (provider_id,)):
        if isinstance(cfg.get(name), dict):
            return cfg[name]
    return {}


def _remote(ms: Mapping[str, Any], provider_id: str) -> dict[str, Any]:
    return _dict(ms.get("remote")) if remote_target(ms) == provider_id else {}


def resolve_base_url(provider_id: str, ms: Mapping[str, Any], providers_cfg: Mapping[str, Any] | None) -> str | None:
    """remote.baseUrl → models.providers.<p>.baseUrl → None (the provider's default)."""
    for src in (_remote(ms, provider_id), provider_config(providers_cfg, provider_id)):
        url = src.get("baseUrl")
        if isinstance(url, str) and url.strip():
            return url.strip().rstrip("/")
    return None


def resolve_headers(provider_id: str, ms: Mapping[str, Any], providers_cfg: Mapping[str, Any] | None) -> dict[str, str]:
    """models.providers.<p>.headers overlaid by remote.headers (remote wins, names case-insensitive)."""
    merged: dict[str, tuple[str, str]] = {}
    for src in (provider_config(providers_cfg, provider_id), _remote(ms, provider_id)):
        for k, v in _dict(src.get("headers")).items():
            if v is None:
                continue
            merged[str(k).lower()] = (str(k), str(v))
    return {name: value for name, value in merged.values()}


def strip_model_prefix(provider_id: str, model: str) -> str:
    model = (model or "").strip()
    for prefix in _MODEL_PREFIXES.get(provider_id, ()):
        if model.lower().startswith(prefix):
            model = model[len(prefix):]
    return model


def model_owner(model: str) -> str | None:
    """Guess which provider a model name belongs to (for provider "auto")."""
    m = (model or "").strip().lower()
    for pid, prefixes in _MODEL_PREFIXES.items():
        if pid != "gemini" and m.startswith(prefixes):
            return pid
    if m.startswith(("gemini", "google/", "models/", "text-embedding-004", "embedding-00")):
        return "gemini"
    if m.startswith("voyage"):
        return "voyage"
    if m.startswith(("mistral", "codestral")):
        return "mistral"
    if m.startswith("text-embedding-"):
        return "openai"
    return None


def resolve_model(provider_id: str, ms: Mapping[str, Any], *, as_fallback: bool = False) -> str:
    """The model for provider_id: memorySearch.model where it applies, else the default.

    - configured provider: ``model`` (reference: empty → the provider default);
    - provider "auto": ``model`` only for the provider it names (a bare name
      like "text-embedding-3-large" goes to openai), others use defaults;
    - fallback: its default model, except when the primary is local (then
      ``model`` is the remote fallback's override) or the fallback is ollama
      (the configured model is reused, as in the reference) - unless the
      name clearly belongs to another provider.
    """
    model = str(ms.get("model") or "").strip()
    req = requested_provider(ms)
    use = False
    if as_fallback:
        use = (req == "local" or provider_id == "ollama") and model_owner(model) in (None, provider_id)
    elif req == provider_id:
        use = True
    elif req == "auto" and model:
        use = (model_owner(model) or "openai") == provider_id
    chosen = strip_model_prefix(provider_id, model) if use else ""
    return chosen or DEFAULT_MODELS.get(provider_id, "")
