"""Which configuration key to check for a failure: the hint beside every reported error.

Provider errors are worded in one place (``http_errors``, ``keys``, ``validate``),
so the hint is read off that wording and names the OpenClaw keys that decide it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from memindex.pipeline.config import openclaw_schema
from memindex.pipeline.config.openclaw_schema import SettingKeys
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.endpoints import remote_target
from memindex.pipeline.embeddings.keys import key_sources

if TYPE_CHECKING:
    from memindex.pipeline.config.settings import AgentSettings


class _Config:
    """What a hint needs of the agent's settings (none known: 2026.3's short key names, as before)."""

    def __init__(self, settings: "AgentSettings | None") -> None:
        self.keys = settings.keys if settings is not None else SettingKeys()
        self.ms: Mapping[str, Any] | None = settings.memory_search.to_dict() if settings is not None else None
        self.providers = settings.providers if settings is not None else None
        self.bound = settings is not None and openclaw_schema.binds_keys_to_destination(settings.config_schema)

    def api_key(self, provider_id: str | None) -> str:
        return key_sources(provider_id, self.ms, self.providers, destination_bound=self.bound, keys=self.keys)

    def base_url(self, provider_id: str | None) -> str | None:
        """The key that sets ``provider_id``'s endpoint, or None when none is set (its default)."""
        if self.ms is None:
            return self.keys.key("remote.baseUrl")
        remote = self.ms.get("remote")
        set_here = isinstance(remote, dict) and str(remote.get("baseUrl") or "").strip()
        if remote_target(self.ms) == provider_id and set_here:
            return self.keys.key("remote.baseUrl")
        spec = registry.find(provider_id or "")
        for name in spec.names_in_config() if spec else ():
            entry = (self.providers or {}).get(name)
            if isinstance(entry, dict):  # the entry provider_config reads
                return f"models.providers.{name}.baseUrl" if str(entry.get("baseUrl") or "").strip() else None
        return None


# Joins a fallback's failure to the primary's (``EmbeddingService``): "<fallback's reason>; before
# it, <primary id> failed: <primary's reason>".
BEFORE_IT = "; before it, "


def failure_hint(reason: str, provider_id: str | None, settings: "AgentSettings | None" = None) -> str:
    """A short "check this key" for a failure ``reason`` (an error's text), naming the keys as the
    agent's config (``settings``) spells them."""
    return _hint(reason, provider_id, _Config(settings))


def _hint(reason: str, provider_id: str | None, cfg: _Config) -> str:
    last, both, earlier = reason.partition(BEFORE_IT)
    if both:  # the fallback failed after the primary: a hint for each
        first, named, why = earlier.partition(" failed: ")
        first, why = (first, why) if named else ("the primary", earlier)
        return f"{_hint(last, provider_id, cfg)}; for {first}: {_hint(why, first, cfg)}"
    text = reason.lower()
    key = cfg.keys.key
    base_url = cfg.base_url(provider_id)
    if "disk is full" in text:
        return "free space on the state dir's disk (`df` on it), then run `memindex index`"
    if "no api key" in text or "rejected the api key" in text:
        return f"check the API key: {cfg.api_key(provider_id)}"
    if "model not found" in text or "baseurl" in text:
        return f"check {key('model')} and {base_url or key('remote.baseUrl')}"
    if "quota" in text or "billing" in text:
        return f"check the {provider_id or 'provider'} account's plan and billing"
    if "dims" in text or "dimension" in text:
        return f"check {key('model')}, {base_url or key('remote.baseUrl')} and {key('outputDimensionality')}"
    if "rate limited" in text:
        return (f"the provider kept throttling; lower {key('remote.nonBatchConcurrency')} or raise the "
                f"{provider_id} quota")
    if provider_id == "local" and ("download" in text or "connect" in text or "timed out" in text):
        # No endpoint to check: the model file is on disk, or fetched once from its hf: URI.
        return (f"check {key('local.modelPath')} (a .gguf file on this machine); the default hf: model "
                "needs network access to download once")
    if "server error" in text or "timed out" in text or "connect" in text:
        if base_url is None:  # the provider's own endpoint: nothing in the config to check
            return f"the provider kept failing; check the network and {provider_id or 'the provider'}'s status"
        return f"the provider kept failing; check {base_url} and the provider's status"
    # Both who read it: a CLI user (index, watch) and an operator reading a worker's log.
    return "for the full traceback, run it again with -vv (a worker process: --log-level debug)"
