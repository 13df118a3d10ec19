"""The embedding provider table: one row per provider, and the lookups every other list derives from.

Adding a provider takes its module under ``providers/`` (an ``EmbeddingProvider``
subclass with a ``from_args`` factory) and one ``ProviderSpec`` row in
``_BUILTIN`` below (or a call to ``register`` at run time). Config validation
(``memorySearch.provider``/``fallback``), key and endpoint resolution,
selection (explicit and ``auto``), batch support, concurrency caps, input
limits, known vector sizes and query timeouts all read this table.

Pure data: factories are ``"module:attr"`` strings resolved on first use, so a
provider SDK is imported only when that provider is built (CLI start-up time),
and nothing from memindex is imported here but the error root, because
``pipeline/config`` imports this module to validate settings.
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Union

from memindex.pipeline.errors import ProviderError

# A factory, check or batch client: "package.module:attr" (attr may be dotted, e.g.
# "Class.from_args"), imported on first use; or the callable itself.
Lazy = Union[str, Callable[..., Any]]

_PROVIDERS = "memindex.pipeline.embeddings.providers"
_BATCH = "memindex.pipeline.embeddings.batch"


# A text limit for a provider whose table row gives none (the common 8k of the hosted APIs).
DEFAULT_MAX_INPUT_TOKENS = 8192


@dataclass(frozen=True)
class ProviderArgs:
    """What a provider factory is called with: one provider's settings, already resolved."""

    model: str  # memorySearch.model where it applies to this provider, else the spec's default_model
    base_url: str | None  # remote.baseUrl / models.providers.<p>.baseUrl, else the spec's default_base_url
    headers: Mapping[str, str]  # models.providers.<p>.headers overlaid by remote.headers
    api_key: str | None  # from remote.apiKey, models.providers, auth profiles or the spec's env_vars
    memory_search: Mapping[str, Any]  # the agent's memorySearch (provider-specific keys: local.*, ...)
    env: Mapping[str, str]
    cache_dir: str | os.PathLike[str]  # where downloaded models go
    hf_base_url: str | None = None  # Hugging Face endpoint override (tests)


@dataclass(frozen=True)
class ProviderSpec:
    """Everything memindex knows about one embedding provider besides its code."""

    id: str
    factory: Lazy  # (ProviderArgs) -> EmbeddingProvider
    default_model: str = ""
    default_base_url: str | None = None
    # Where the API key may come from, in order; the first is the one messages name.
    env_vars: tuple[str, ...] = ()
    # models.providers keys naming this provider (the first is the one messages name); () = (id,).
    config_names: tuple[str, ...] = ()
    # Prefixes users write in `model` ("openai/text-embedding-3-large"); stripped before use.
    model_prefixes: tuple[str, ...] = ()
    # Model-name starts that identify this provider when `provider` is "auto" (longest match wins).
    model_families: tuple[str, ...] = ()
    needs_key: bool = True  # building it without an API key is a ProviderAuthError
    remote: bool = True  # an HTTP API: memorySearch.remote.* and models.providers.<p> configure it
    takes_model: bool = True  # memorySearch.model names its model (local's is local.modelPath)
    fallback_keeps_model: bool = False  # as a fallback it keeps memorySearch.model (ollama, as the reference)
    # Position under provider "auto" (lowest first); None = never auto-selected.
    auto_order: int | None = None
    # (memorySearch) -> a reason string when it should be chosen under "auto", else None.
    # None here means: chosen when it has an API key.
    auto_check: Lazy | None = None
    auto_hint: str = ""  # what "auto" looks for, in messages (default: the first env var)
    # (memorySearch) -> what "auto" found wanting when auto_check said no (default: "no <auto_hint>").
    auto_missing: Lazy | None = None
    batch_client: Lazy | None = None  # (EmbeddingProvider) -> BatchClient, for providers with a batch API
    max_concurrency: int | None = None  # requests in flight per process/cluster; None = nonBatchConcurrency
    query_timeout_s: float = 3.0  # a search's query embedding (one attempt): a search never waits longer
    known_dims: Mapping[str, int] = field(default_factory=dict)  # model -> vector size at default settings
    # model-name prefix -> the sizes outputDimensionality may ask for (any size when absent).
    dims_choices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    max_input_tokens: Mapping[str, int] = field(default_factory=dict)  # model -> per-text limit
    default_max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS
    test_only: bool = False  # selectable by name (tests, benchmarks), never auto-selected, never listed
    extra: str | None = None  # the pip extra that installs its SDK (`memindex[<extra>]`); None: always installed

    def names_in_config(self) -> tuple[str, ...]:
        return self.config_names or (self.id,)


_BUILTIN = (
    ProviderSpec(
        id="local",
        factory=f"{_PROVIDERS}.local:LocalProvider.from_args",
        default_model="hf:ggml-org/embeddinggemma-300m-qat-q8_0-GGUF/embeddinggemma-300m-qat-Q8_0.gguf",
        env_vars=("HF_TOKEN",),  # only for downloading an hf: model
        needs_key=False, remote=False, takes_model=False,
        auto_order=0, auto_check=f"{_PROVIDERS}.local:auto_reason", auto_hint="local.modelPath",
        auto_missing=f"{_PROVIDERS}.local:auto_missing",
        max_concurrency=1,  # one machine's CPU/GPU: parallel requests only queue up there
        query_timeout_s=60.0,  # CPU inference, and the first call loads the model
        default_max_input_tokens=512,
        # Keyed by the GGUF's family (``local.model_family``: file name before its first dot).
        # all-MiniLM-L6-v2 was trained on 256 word pieces (sentence-transformers' max_seq_length);
        # on the LoCoMo dev split 256 beats 512: vector-only R@10 0.650 vs 0.612, hybrid 0.839 vs 0.833.
        max_input_tokens={"all-minilm-l6-v2": 256},
        extra="local",
    ),
    ProviderSpec(
        id="openai",
        factory=f"{_PROVIDERS}.openai:OpenAIProvider.from_args",
        default_model="text-embedding-3-small",
        default_base_url="https://api.openai.com/v1",
        env_vars=("OPENAI_API_KEY",),
        model_prefixes=("openai/",),
        model_families=("text-embedding-",),
        auto_order=1,
        batch_client=f"{_BATCH}.openai:OpenAIBatchClient",
        known_dims={"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536},
        max_input_tokens={"text-embedding-3-small": 8192, "text-embedding-3-large": 8192,
                          "text-embedding-ada-002": 8191},
    ),
    ProviderSpec(
        id="gemini",
        factory=f"{_PROVIDERS}.gemini:GeminiProvider.from_args",
        default_model="gemini-embedding-001",
        default_base_url="https://generativelanguage.googleapis.com/v1beta",
        env_vars=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        config_names=("google", "gemini"),  # OpenClaw calls Gemini "google"
        model_prefixes=("models/", "gemini/", "google/"),
        model_families=("gemini", "text-embedding-004", "embedding-00"),
        auto_order=2,
        batch_client=f"{_BATCH}.gemini:GeminiBatchClient",
        known_dims={"gemini-embedding-001": 768},  # spec F3: gemini-embedding-001 at 768 dims
        dims_choices={"gemini-embedding-2": (768, 1536, 3072)},  # the largest is the default
        max_input_tokens={"gemini-embedding-2-preview": 8192},
        default_max_input_tokens=2048,
        extra="gemini",
    ),
    ProviderSpec(
        id="voyage",
        factory=f"{_PROVIDERS}.voyage:VoyageProvider.from_args",
        default_model="voyage-4-large",
        default_base_url="https://api.voyageai.com/v1",
        env_vars=("VOYAGE_API_KEY",),
        config_names=("voyage", "voyageai"),
        model_prefixes=("voyage/",),
        model_families=("voyage",),
        auto_order=3,
        batch_client=f"{_BATCH}.voyage:VoyageBatchClient",
        max_input_tokens={"voyage-3": 32000, "voyage-3-lite": 16000, "voyage-code-3": 32000},
        extra="voyage",
    ),
    ProviderSpec(
        id="mistral",
        factory=f"{_PROVIDERS}.mistral:MistralProvider.from_args",
        default_model="mistral-embed",
        default_base_url="https://api.mistral.ai/v1",
        env_vars=("MISTRAL_API_KEY",),
        model_prefixes=("mistral/",),
        model_families=("mistral", "codestral"),
        auto_order=4,
        known_dims={"mistral-embed": 1024},
    ),
    ProviderSpec(
        id="ollama",
        factory=f"{_PROVIDERS}.ollama:OllamaProvider.from_args",
        default_model="nomic-embed-text",
        default_base_url="http://127.0.0.1:11434",
        env_vars=("OLLAMA_API_KEY",),  # optional: only proxied Ollama servers want one
        model_prefixes=("ollama/",),
        needs_key=False, fallback_keeps_model=True,
        max_concurrency=1,  # parallel requests time out on CPU hosts (reference bug 9)
        default_max_input_tokens=2048,  # Ollama's default context (num_ctx), whatever the model allows
    ),
    ProviderSpec(
        id="hash",  # a deterministic offline embedder for tests and benchmarks
        factory=f"{_PROVIDERS}.hashing:HashProvider.from_args",
        default_model="hash-v1",
        needs_key=False, remote=False, test_only=True,
    ),
)

_lock = threading.Lock()
_table: dict[str, ProviderSpec] = {s.id: s for s in _BUILTIN}


# --- the table -------------------------------------------------------------------

def register(spec: ProviderSpec, *, replace: bool = False) -> None:
    """Add a provider (or, with ``replace``, change one). Ids are lower case, as config values are."""
    if not spec.id or spec.id != spec.id.strip().lower() or spec.id in ("auto", "none"):
        raise ValueError(f"invalid provider id {spec.id!r}")
    with _lock:
        if spec.id in _table and not replace:
            raise ValueError(f"embedding provider {spec.id!r} is already registered")
        _table[spec.id] = spec


def unregister(provider_id: str) -> None:
    with _lock:
        _table.pop(provider_id, None)


def specs() -> tuple[ProviderSpec, ...]:
    """Every registered provider, test-only ones included, in registration order."""
    with _lock:
        return tuple(_table.values())


def find(provider_id: str) -> ProviderSpec | None:
    with _lock:
        return _table.get(provider_id)


def get(provider_id: str) -> ProviderSpec:
    spec = find(provider_id)
    if spec is None:
        raise ProviderError(f"unknown embedding provider {provider_id!r} (expected one of {', '.join(ids())})")
    return spec


def load(ref: Lazy) -> Any:
    """The object a Lazy names, importing its module now."""
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


def factory_of(spec: ProviderSpec) -> Any:
    """The spec's factory, importing its SDK now: a missing SDK is one error naming the extra to install."""
    try:
        return load(spec.factory)
    except ModuleNotFoundError as exc:
        if spec.extra is None or (exc.name or "").partition(".")[0] == "memindex":
            raise
        raise ProviderError(f"embedding provider {spec.id!r} needs its SDK ({exc.name} is not installed): "
                            f"pip install 'memindex[{spec.extra}]'") from None


# --- derived lists -----------------------------------------------------------------

def ids() -> tuple[str, ...]:
    """Provider ids users choose from (what messages and docs list): the test-only ones are left out."""
    return tuple(s.id for s in specs() if not s.test_only)


def auto_specs() -> tuple[ProviderSpec, ...]:
    """The providers "auto" tries, in order."""
    return tuple(sorted((s for s in specs() if s.auto_order is not None and not s.test_only),
                        key=lambda s: s.auto_order or 0))


def remote_ids() -> tuple[str, ...]:
    return tuple(s.id for s in specs() if s.remote)


def is_remote(provider_id: str) -> bool:
    """A provider whose embeddings are requests to an HTTP API (not the local model)."""
    spec = find(provider_id)
    return spec is not None and spec.remote


def batch_ids() -> tuple[str, ...]:
    return tuple(s.id for s in specs() if s.batch_client is not None)


def supports_batch(provider_id: str) -> bool:
    spec = find(provider_id)
    return spec is not None and spec.batch_client is not None


def env_var_names() -> frozenset[str]:
    """Every env var name any provider reads its key from."""
    return frozenset(n for s in specs() for n in s.env_vars)


def default_caps() -> dict[str, int]:
    """provider id -> concurrency cap, for the providers that have one."""
    return {s.id: s.max_concurrency for s in specs() if s.max_concurrency is not None}


# --- per provider ------------------------------------------------------------------

def concurrency_cap(provider_id: str) -> int | None:
    spec = find(provider_id)
    return spec.max_concurrency if spec else None


def max_input_tokens(provider_id: str, model: str) -> int:
    spec = find(provider_id)
    if spec is None:
        return ProviderSpec.default_max_input_tokens
    return spec.max_input_tokens.get(model, spec.default_max_input_tokens)


def known_dims(provider_id: str, model: str) -> int | None:
    spec = find(provider_id)
    return spec.known_dims.get(model) if spec else None


def dims_choices(provider_id: str, model: str) -> tuple[int, ...] | None:
    """The vector sizes outputDimensionality may ask of this model, or None when any size goes."""
    spec = find(provider_id)
    for prefix, choices in (spec.dims_choices.items() if spec else ()):
        if model.startswith(prefix):
            return choices
    return None


def query_timeout_s(provider_id: str | None) -> float:
    """A query vector's budget: the provider's own, else (unknown, or none) the default."""
    spec = find(provider_id) if provider_id is not None else None
    return spec.query_timeout_s if spec else ProviderSpec.query_timeout_s
