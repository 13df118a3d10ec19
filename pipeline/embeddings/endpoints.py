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

from memindex.pipeline.embeddings import registry


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
    if req == "auto":
        return auto_remote_default()
    remote = registry.remote_ids()
    if req in remote:
        return req
    fb = fallback_provider(ms)  # e.g. provider "local": remote.* describes its remote fallback
    return fb if fb in remote else None


def auto_remote_default() -> str | None:
    """The remote provider "auto" tries first: remote.* and a bare model name belong to it."""
    return next((s.id for s in registry.auto_specs() if s.remote), None)


def provider_config(providers_cfg: Mapping[str, Any] | None, provider_id: str) -> dict[str, Any]:
    """The first models.providers entry that names this provider."""
    cfg = _dict(providers_cfg)
    spec = registry.find(provider_id)
    for name in spec.names_in_config() if spec else (provider_id,):
        entry = cfg.get(name)
        if isinstance(entry, dict):
            return entry
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
    spec = registry.find(provider_id)
    for prefix in spec.model_prefixes if spec else ():
        if model.lower().startswith(prefix):
            model = model[len(prefix):]
    return model


def model_owner(model: str) -> str | None:
    """Guess which provider a model name belongs to (for provider "auto"): a provider prefix
    ("voyage/...") names it; otherwise the longest matching model family does."""
    m = (model or "").strip().lower()
    best, best_len = None, 0
    for spec in registry.specs():
        if m.startswith(spec.model_prefixes):
            return spec.id
        for family in spec.model_families:
            if m.startswith(family) and len(family) > best_len:
                best, best_len = spec.id, len(family)
    return best


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
    spec = registry.find(provider_id)
    default = spec.default_model if spec else ""
    if spec is not None and not spec.takes_model:
        return default
    model = str(ms.get("model") or "").strip()
    req = requested_provider(ms)
    use = False
    if as_fallback:
        primary = registry.find(req)
        keeps = (primary is not None and not primary.takes_model) or (spec is not None and spec.fallback_keeps_model)
        use = keeps and model_owner(model) in (None, provider_id)
    elif req == provider_id:
        use = True
    elif req == "auto" and model:
        use = (model_owner(model) or auto_remote_default()) == provider_id
    chosen = strip_model_prefix(provider_id, model) if use else ""
    return chosen or default
