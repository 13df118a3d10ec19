"""The embedding provider registry is the one table: every other provider list derives from it,
and a provider registered at run time (its class + one row) is selected by config and embeds
through the normal pipeline (index, store, hybrid search)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Any, Mapping

import pytest

from memindex.pipeline.config.settings import ConfigError, fallback_choices, provider_choices, resolve_agent
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.base import EmbeddingProvider, ProviderAuthError, ProviderError
from memindex.pipeline.embeddings.batch.base import batch_client_for
from memindex.pipeline.embeddings.embedder import reset_services
from memindex.pipeline.embeddings.endpoints import provider_config, remote_target, resolve_model
from memindex.pipeline.embeddings.keys import missing_key_message, resolve_api_key
from memindex.pipeline.embeddings.limiter import ConcurrencyLimiter
from memindex.pipeline.embeddings.registry import ProviderArgs, ProviderSpec
from memindex.pipeline.embeddings.select import build_provider, select_provider
from memindex.pipeline.embeddings.service import EmbeddingService
from tests.conftest import REPO

BUILTIN = ("local", "openai", "gemini", "voyage", "mistral", "ollama", "hash")


def _ms(**kw: Any) -> dict[str, Any]:
    return {"provider": "auto", "model": "", "fallback": "none", "remote": {}, "local": {}, **kw}


def _load(ms: Mapping[str, Any], tmp_path) -> Any:
    return resolve_agent({"agents": {"defaults": {"memorySearch": dict(ms)}}}, state_dir=tmp_path)


# --- the table and what derives from it ----------------------------------------------------

def _builtin(ids) -> tuple[str, ...]:
    """The built-in rows of ``ids``, in order: a provider added by a new row (the two files the
    README names) leaves these pins as they are."""
    return tuple(p for p in ids if p in BUILTIN)


def test_builtin_rows():
    assert _builtin(s.id for s in registry.specs()) == BUILTIN
    assert _builtin(registry.ids()) == tuple(p for p in BUILTIN if p != "hash")  # test-only: never listed
    assert _builtin(s.id for s in registry.auto_specs()) == ("local", "openai", "gemini", "voyage", "mistral")
    assert _builtin(registry.remote_ids()) == ("openai", "gemini", "voyage", "mistral", "ollama")
    assert _builtin(registry.batch_ids()) == ("openai", "gemini", "voyage")
    assert {p: n for p, n in registry.default_caps().items() if p in BUILTIN} == {"local": 1, "ollama": 1}


@pytest.mark.parametrize("pid", BUILTIN)
def test_every_factory_resolves_to_its_provider_class(pid):
    spec = registry.get(pid)
    factory = registry.load(spec.factory)
    assert callable(factory) and factory.__self__.id == pid  # a bound classmethod of the provider class
    if spec.batch_client is not None:
        assert registry.load(spec.batch_client).provider_id == pid


def test_config_choices_are_the_registry(tmp_path):
    assert provider_choices() == ("auto", "none", *registry.ids())  # "none": keyword-only on purpose
    assert fallback_choices() == ("none", *registry.ids())
    for pid in registry.ids():
        ms = _load({"provider": pid, "fallback": pid}, tmp_path).memory_search
        assert (ms.provider, ms.fallback) == (pid, pid)
    # the test-only provider is usable by name, but is no choice users see and no fallback
    assert _load({"provider": "hash"}, tmp_path).memory_search.provider == "hash"
    with pytest.raises(ConfigError) as err:
        _load({"provider": "cohere"}, tmp_path)
    assert err.value.key == "agents.defaults.memorySearch.provider"
    assert ", ".join(provider_choices()) in str(err.value) and "hash" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        _load({"fallback": "hash"}, tmp_path)
    assert err.value.key == "agents.defaults.memorySearch.fallback"
    assert f"expected one of {', '.join(fallback_choices())}; got 'hash'" in str(err.value)


@pytest.mark.parametrize("spec", [s for s in registry.specs() if s.env_vars], ids=lambda s: s.id)
def test_keys_and_config_names_come_from_the_row(spec):
    ms = _ms(provider=spec.id)
    for var in spec.env_vars:
        assert resolve_api_key(spec.id, ms, {}, {var: f"k-{var}"}) == f"k-{var}"
    for name in spec.names_in_config():
        assert resolve_api_key(spec.id, ms, {name: {"apiKey": "from-cfg"}}, {}) == "from-cfg"
        assert provider_config({name: {"baseUrl": "u"}}, spec.id) == {"baseUrl": "u"}
    msg = missing_key_message(spec.id)
    assert f"models.providers.{spec.names_in_config()[0]}.apiKey" in msg
    assert all(var in msg for var in spec.env_vars)


@pytest.mark.parametrize("spec", registry.specs(), ids=lambda s: s.id)
def test_models_and_endpoints_come_from_the_row(spec):
    assert resolve_model(spec.id, _ms(provider=spec.id)) == spec.default_model
    for prefix in spec.model_prefixes:
        assert resolve_model(spec.id, _ms(provider=spec.id, model=f"{prefix}m-1")) == "m-1"
    assert (remote_target(_ms(provider=spec.id)) == spec.id) == spec.remote


@pytest.mark.parametrize("spec", [s for s in registry.specs() if s.remote], ids=lambda s: s.id)
def test_built_providers_get_the_rows_defaults(spec, tmp_path):
    p = build_provider(spec.id, _ms(provider=spec.id), {}, {v: "k" for v in spec.env_vars}, tmp_path)
    assert (p.id, p.model) == (spec.id, spec.default_model)
    assert p.base_url == spec.default_base_url
    assert p.max_input_tokens == registry.max_input_tokens(spec.id, p.model)
    assert p.dims == spec.known_dims.get(p.model)
    client = batch_client_for(p)
    assert (client is not None) == registry.supports_batch(spec.id)
    if client is not None:
        assert isinstance(client, registry.load(spec.batch_client)) and client.model == p.model


@pytest.mark.parametrize("spec", [s for s in registry.auto_specs() if s.auto_check is None], ids=lambda s: s.id)
def test_auto_tries_the_rows_in_order(spec, tmp_path):
    later = [s for s in registry.auto_specs() if (s.auto_order or 0) > (spec.auto_order or 0)]
    env = {s.env_vars[0]: "k" for s in [spec, *later]}
    choice = select_provider(_ms(), {}, env, tmp_path)
    assert choice.primary is not None and choice.primary.id == spec.id


def test_nothing_for_auto_names_what_it_looked_for(tmp_path):
    reason = select_provider(_ms(), {}, {}, tmp_path).reason
    assert "no local.modelPath" in reason
    for s in registry.auto_specs():
        assert s.auto_check is not None or s.env_vars[0] in reason
    assert "OLLAMA_API_KEY" not in reason  # ollama is never auto-selected
    # A configured model file that is not there is named as such, not as "no local.modelPath".
    missing = tmp_path / "gone.gguf"
    reason = select_provider(_ms(local={"modelPath": str(missing)}), {}, {}, tmp_path).reason
    assert f"no file at local.modelPath {missing}" in reason and "no local.modelPath" not in reason, reason


def test_limits_and_timeouts_come_from_the_rows():
    lim = ConcurrencyLimiter(default_cap=3)
    assert lim.caps == registry.default_caps()
    from memindex.workers.limits import RedisConcurrencyLimiter

    assert RedisConcurrencyLimiter(client=None, default_cap=3).caps == registry.default_caps()
    assert registry.query_timeout_s("local") > registry.query_timeout_s("openai")
    assert registry.max_input_tokens("nobody", "x") == ProviderSpec.default_max_input_tokens


def test_gemini_sizes_are_defined_once():
    from memindex.pipeline.config.settings import MULTIMODAL_DIMS, MULTIMODAL_MODEL
    from memindex.pipeline.embeddings.providers.gemini import output_dims_for

    assert MULTIMODAL_DIMS == registry.dims_choices("gemini", MULTIMODAL_MODEL) == (768, 1536, 3072)
    assert output_dims_for(MULTIMODAL_MODEL, None) == 3072
    assert output_dims_for("gemini-embedding-001", None) == registry.known_dims("gemini", "gemini-embedding-001")
    with pytest.raises(ProviderAuthError, match="768, 1536 or 3072"):
        output_dims_for(MULTIMODAL_MODEL, 1000)


def test_the_table_imports_no_provider_code():
    code = ("import sys\n"
            "import memindex.pipeline.config.settings, memindex.pipeline.embeddings.select\n"
            "import memindex.pipeline.embeddings.batch.base\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('openai', 'voyageai', 'llama_cpp', 'numpy', 'httpx') or m.startswith('google.genai') "
            "or m.startswith('memindex.pipeline.embeddings.providers.')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.replace("'", '"')) == []


# --- a provider added at run time: one class, one row ---------------------------------------

class LettersProvider(EmbeddingProvider):
    """Offline and deterministic: letter counts, with a bigram hash for spread."""

    id = "letters"
    calls: list[int] = []

    def __init__(self, model: str, dims: int, api_key: str | None) -> None:
        super().__init__()
        self.model, self.dims, self._secret = model, dims, api_key

    @classmethod
    def from_args(cls, args: ProviderArgs) -> "LettersProvider":
        return cls(args.model, int(args.memory_search.get("outputDimensionality") or 32), args.api_key)

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * int(self.dims or 32)
        words = text.lower().split()
        for w in words:
            v[sum(map(ord, w)) % len(v)] += 1.0
        for a, b in zip(words, words[1:]):
            v[(sum(map(ord, a)) * 31 + sum(map(ord, b))) % len(v)] += 0.5
        n = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / n for x in v] if any(v) else [1.0] + [0.0] * (len(v) - 1)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        type(self).calls.append(len(texts))
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)


LETTERS = ProviderSpec(
    id="letters",
    factory=LettersProvider.from_args,  # a callable works as well as a "module:attr" path
    default_model="letters-v1",
    needs_key=False,
    remote=False,
    model_families=("letters-",),
    max_concurrency=2,
    query_timeout_s=5.0,
)


@pytest.fixture
def letters():
    reset_services()
    LettersProvider.calls = []
    registry.register(LETTERS)
    yield LETTERS
    registry.unregister(LETTERS.id)
    reset_services()


def test_registered_provider_is_a_config_choice(letters, tmp_path):
    assert "letters" in registry.ids() and "letters" in provider_choices() and "letters" in fallback_choices()
    assert _load({"provider": "letters", "model": "letters-v2"}, tmp_path).memory_search.provider == "letters"
    assert registry.default_caps()["letters"] == 2 and ConcurrencyLimiter().caps["letters"] == 2
    assert batch_client_for(build_provider("letters", _ms(provider="letters"), {}, {}, tmp_path)) is None
    with pytest.raises(ValueError, match="already registered"):
        registry.register(LETTERS)


def test_registered_provider_is_not_a_choice_once_removed(tmp_path):
    assert "letters" not in provider_choices()
    with pytest.raises(ConfigError):
        _load({"provider": "letters"}, tmp_path)
    with pytest.raises(ProviderError, match="unknown embedding provider 'letters'"):
        build_provider("letters", _ms(provider="letters"), {}, {}, tmp_path)


def test_registered_provider_indexes_and_searches_through_the_pipeline(letters, agent):
    for i in range(4):
        agent.write(f"memory/2026-02-{i + 1:02d}.md", f"# Day {i}\nThe garden hose {i} leaks near tap {i}.\n")
    agent.write("MEMORY.md", "# Memory\nThe webhook secret ERR_SIG_4012 was rotated on Tuesday.\n")
    agent.memory_config({"provider": "letters", "model": "letters-v2"})
    counts = agent.index()
    assert counts["to_index"] == 5
    assert sum(LettersProvider.calls) >= 5  # every chunk went through the provider

    from memindex.pipeline.embeddings.embedder import identity_for, provider_info

    settings = agent.settings()
    assert provider_info(settings)["provider"] == "letters"
    ident = identity_for(settings)
    assert (ident.provider, ident.model, ident.dims) == ("letters", "letters-v2", 32)

    res = agent.search("webhook secret rotated")
    assert res["provider"] == "letters" and res["model"] == "letters-v2"
    assert res["mode"] == "hybrid" and res["fallback"] is False
    assert res["results"][0]["path"] == "MEMORY.md"


class LettersProProvider(LettersProvider):
    id = "letters-pro"


def test_registered_provider_with_a_key_a_batch_api_and_auto_eligibility(tmp_path):
    made: list[EmbeddingProvider] = []
    spec = ProviderSpec(
        id="letters-pro", factory=LettersProProvider.from_args, default_model="lp-1",
        env_vars=("LETTERS_PRO_KEY",), config_names=("letterspro",),
        auto_order=-1, auto_check=lambda ms: "letters wanted" if ms.get("model") == "lp-auto" else None,
        batch_client=lambda p: made.append(p) or "a batch client",
    )
    registry.register(spec)
    try:
        registry.register(ProviderSpec(id="letters-pro", factory=LettersProvider.from_args, needs_key=False),
                          replace=True)  # a row whose factory builds another provider is refused
        with pytest.raises(ProviderError, match="built a 'letters' provider"):
            build_provider("letters-pro", _ms(provider="letters-pro"), {}, {}, tmp_path)
        registry.register(spec, replace=True)
        with pytest.raises(ProviderAuthError, match="models.providers.letterspro.apiKey or LETTERS_PRO_KEY"):
            build_provider("letters-pro", _ms(provider="letters-pro"), {}, {}, tmp_path)
        p = build_provider("letters-pro", _ms(provider="letters-pro"), {}, {"LETTERS_PRO_KEY": "sekrit"}, tmp_path)
        assert p.auth_headers() == {"Authorization": "Bearer sekrit"} and "sekrit" not in repr(p)
        assert registry.supports_batch("letters-pro") and batch_client_for(p) == "a batch client" and made == [p]
        # "auto" asks the row first (auto_order -1), and only when its check says so
        choice = select_provider(_ms(model="lp-auto"), {}, {"LETTERS_PRO_KEY": "k", "OPENAI_API_KEY": "o"}, tmp_path)
        assert choice.primary is not None and choice.primary.id == "letters-pro"
        assert choice.reason == "auto: letters wanted"
        assert select_provider(_ms(), {}, {"OPENAI_API_KEY": "o"}, tmp_path).primary.id == "openai"
        res = EmbeddingService(choice).embed_documents(["alpha beta", ""])
        assert res.provider_id == "letters-pro" and len(res.vectors[0]) == 32 and res.vectors[1] == []
    finally:
        registry.unregister("letters-pro")


@pytest.mark.parametrize("provider,module,extra", [("voyage", "voyageai", "voyage"),
                                                   ("gemini", "google.genai", "gemini")])
def test_provider_without_its_extra_is_one_clear_error(tmp_path, provider, module, extra):
    """A slim install (no extras): choosing a provider whose SDK is absent names the extra to install."""
    (tmp_path / "ws" / "memory").mkdir(parents=True)
    (tmp_path / "ws" / "memory" / "a.md").write_text("hello vlan\n")
    cfg = tmp_path / "oc.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": provider, "fallback": "none"}}}}))
    hide = f"import sys; sys.modules[{module!r}] = None; from memindex.producers.cli.main import main; " \
           "sys.exit(main(sys.argv[1:]))"
    env = dict(os.environ, **{registry.get(provider).env_vars[0]: "k"})
    r = subprocess.run([sys.executable, "-c", hide, "--config", str(cfg), "--state-dir", str(tmp_path / "st"),
                        "--workspace", str(tmp_path / "ws"), "index"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert f"pip install 'memindex[{extra}]'" in r.stderr and f"{module} is not installed" in r.stderr


@pytest.mark.parametrize("model, family", [
    ("/models/all-MiniLM-L6-v2.F16.gguf", "all-minilm-l6-v2"),
    ("all-MiniLM-L6-v2-Q8_0.gguf", "all-minilm-l6-v2"),
    ("C:\\models\\all-minilm-l6-v2-f16.gguf", "all-minilm-l6-v2"),
    ("hf:ggml-org/embeddinggemma-300m-qat-q8_0-GGUF/embeddinggemma-300m-qat-Q8_0.gguf", "embeddinggemma-300m-qat"),
])
def test_local_model_family_keys_the_per_model_input_limit(model, family):
    from memindex.pipeline.embeddings.providers.local import model_family

    assert model_family(model) == family
    # MiniLM was trained on 256 word pieces; any other GGUF keeps the provider's default
    expected = 256 if family == "all-minilm-l6-v2" else registry.get("local").default_max_input_tokens
    assert registry.max_input_tokens("local", family) == expected
