"""Which configuration key to check for a failure: the hint beside every reported error.

Provider errors are worded in one place (``http_errors``, ``keys``, ``validate``),
so the hint is read off that wording and names the OpenClaw keys that decide it.
"""

from __future__ import annotations

from memindex.pipeline.embeddings import registry


def _key_sources(provider_id: str | None) -> str:
    spec = registry.find(provider_id or "")
    if spec is None or not spec.env_vars:
        return "memorySearch.remote.apiKey"
    return (f"memorySearch.remote.apiKey, models.providers.{spec.names_in_config()[0]}.apiKey "
            f"or {' / '.join(spec.env_vars)}")


# Joins a fallback's failure to the primary's (``EmbeddingService``): "<fallback's reason>; before
# it, <primary id> failed: <primary's reason>".
BEFORE_IT = "; before it, "


def failure_hint(reason: str, provider_id: str | None) -> str:
    """A short "check this key" for a failure ``reason`` (an error's text)."""
    last, both, earlier = reason.partition(BEFORE_IT)
    if both:  # the fallback failed after the primary: a hint for each
        first, named, why = earlier.partition(" failed: ")
        first, why = (first, why) if named else ("the primary", earlier)
        return f"{failure_hint(last, provider_id)}; for {first}: {failure_hint(why, first)}"
    text = reason.lower()
    if "disk is full" in text:
        return "free space on the state dir's disk (`df` on it), then run `memindex index`"
    if "no api key" in text or "rejected the api key" in text:
        return f"check the API key: {_key_sources(provider_id)}"
    if "model not found" in text or "baseurl" in text:
        return "check memorySearch.model and memorySearch.remote.baseUrl"
    if "quota" in text or "billing" in text:
        return f"check the {provider_id or 'provider'} account's plan and billing"
    if "dims" in text or "dimension" in text:
        return "check memorySearch.model, memorySearch.remote.baseUrl and memorySearch.outputDimensionality"
    if "rate limited" in text:
        return (f"the provider kept throttling; lower memorySearch.remote.nonBatchConcurrency or raise the "
                f"{provider_id} quota")
    if provider_id == "local" and ("download" in text or "connect" in text or "timed out" in text):
        # No endpoint to check: the model file is on disk, or fetched once from its hf: URI.
        return ("check memorySearch.local.modelPath (a .gguf file on this machine); the default hf: model "
                "needs network access to download once")
    if "server error" in text or "timed out" in text or "connect" in text:
        return "the provider kept failing; check memorySearch.remote.baseUrl and the provider's status"
    # Both who read it: a CLI user (index, watch) and an operator reading a worker's log.
    return "for the full traceback, run it again with -vv (a worker process: --log-level debug)"
