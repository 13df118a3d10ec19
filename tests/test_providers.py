"""Embedding providers, selection, retries and fallback against a local fake of each API.

The real SDK clients (openai, google-genai, voyageai) and httpx talk HTTP to
tests/provider_server.py; retries use a recording sleep so nothing waits.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memindex.pipeline.embeddings import (
    ConcurrencyLimiter,
    EmbeddingService,
    InvalidVectorError,
    ProviderAuthError,
    ProviderModelNotFound,
    ProviderChoice,
    ProviderError,
    ProviderRateLimited,
    ProviderTooManyItems,
    ProviderTransientError,
    RetryPolicy,
    call_with_retry,
    embed_with_splitting,
    pack_batches,
    resolve_api_key,
    select_provider,
)
from memindex.pipeline.embeddings.providers.hf_download import cache_path, ensure_model_file
from memindex.pipeline.embeddings.hints import failure_hint
from memindex.pipeline.embeddings.http_errors import parse_retry_after, too_many_items
from memindex.pipeline.embeddings.limits import estimate_tokens, split_to_limit
from memindex.pipeline.embeddings.providers.local import llama_available
from memindex.pipeline.embeddings.providers.hashing import HashProvider
from memindex.pipeline.embeddings.providers.openai import OpenAIProvider
from memindex.pipeline.embeddings.validate import validate_vectors
from memindex.pipeline.index.fingerprint import KEYWORD_ONLY

from conftest import module_server
from provider_server import ProviderServer, fake_vector

GGUF = Path("/work/shared/models/all-MiniLM-L6-v2.F16.gguf")
needs_llama = pytest.mark.skipif(
    not llama_available() or not GGUF.is_file(),
    reason="llama_cpp (llama-cpp-python) is not importable or the test GGUF is missing",
)

# ---------------------------------------------------------------- fixtures


server = module_server(ProviderServer)
pytestmark = pytest.mark.usefixtures("fresh_server")


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def policy(sleeps) -> RetryPolicy:
    # Recorded sleeps and a clock that advances by them: budgets behave as in real time.
    clock = {"t": 0.0}

    def sleep(s: float) -> None:
        sleeps(s)
        clock["t"] += s

    return RetryPolicy(sleep=sleep, clock=lambda: clock["t"])


MS_DEFAULTS: dict[str, Any] = {
    "provider": "auto",
    "model": "",
    "fallback": "none",
    "outputDimensionality": None,
    "remote": {"baseUrl": None, "apiKey": None, "headers": {},
               "batch": {"enabled": False, "wait": True, "concurrency": 2, "pollIntervalMs": 2000,
                         "timeoutMinutes": 60}},
    "local": {"modelPath": None, "modelCacheDir": None, "maxInputTokens": None},
}


def make_ms(**kw: Any) -> dict[str, Any]:
    ms = copy.deepcopy(MS_DEFAULTS)
    for k, v in kw.items():
        if isinstance(v, dict) and isinstance(ms.get(k), dict):
            ms[k].update(v)
        else:
            ms[k] = v
    return ms


def choose(ms, providers_cfg=None, env=None, tmp_path=None, **kw) -> ProviderChoice:
    return select_provider(ms, providers_cfg or {}, env or {}, str(tmp_path or "/tmp/memindex-test-models"), **kw)


def service_for(server, policy, provider: str, *, fallback: str = "none", **ms_kw) -> EmbeddingService:
    """A service whose provider (and fallback) point at the fake server."""
    providers_cfg = {
        name: {"baseUrl": server.base(flavor), "apiKey": f"key-{flavor}"}
        for name, flavor in (("openai", "openai"), ("google", "gemini"), ("voyage", "voyage"),
                             ("mistral", "mistral"), ("ollama", "ollama"))
    }
    choice = choose(make_ms(provider=provider, fallback=fallback, **ms_kw), providers_cfg)
    return EmbeddingService(choice, ConcurrencyLimiter(), retry=policy)


def close(a, b, tol=1e-5) -> bool:
    return bool(np.allclose(np.asarray(a), np.asarray(b), atol=tol))


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


# ---------------------------------------------------------------- happy paths, one per provider


def test_openai_happy_path(server, policy):
    svc = service_for(server, policy, "openai")
    res = svc.embed_documents(["alpha", "beta"])
    assert res.provider_id == "openai" and res.model == "text-embedding-3-small"
    assert res.dims == 1536 and [len(v) for v in res.vectors] == [1536, 1536]
    assert close(res.vectors[0], fake_vector("alpha", 1536, "openai"))
    assert not res.fallback_used and res.fallback_reason is None
    (req,) = server.log_for("openai")
    assert req.body["encoding_format"] == "base64"  # the SDK's default; the server answered base64
    assert req.body["input"] == ["alpha", "beta"]
    assert req.headers["authorization"] == "Bearer key-openai"
    q = svc.embed_query("alpha")
    assert close(q.vector, res.vectors[0])


def test_gemini_default_model_768_and_task_types(server, policy):
    svc = service_for(server, policy, "gemini")
    res = svc.embed_documents(["one", "two", "three"])
    assert res.dims == 768 and all(len(v) == 768 for v in res.vectors)
    (req,) = server.log_for("gemini")
    assert req.path == "/gemini/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert req.headers["x-goog-api-key"] == "key-gemini"
    assert [r["taskType"] for r in req.body["requests"]] == ["RETRIEVAL_DOCUMENT"] * 3
    assert {r["outputDimensionality"] for r in req.body["requests"]} == {768}
    assert close(res.vectors[1], fake_vector("RETRIEVAL_DOCUMENT|two", 768, "gemini"))
    q = svc.embed_query("one")
    assert server.log_for("gemini")[-1].body["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
    assert close(q.vector, fake_vector("RETRIEVAL_QUERY|one", 768, "gemini"))


@pytest.mark.parametrize("configured,expected", [(None, 3072), (768, 768), (1536, 1536), (3072, 3072)])
def test_gemini_2_preview_output_dimensionality(server, policy, configured, expected):
    svc = service_for(server, policy, "gemini", model="gemini-embedding-2-preview",
                      outputDimensionality=configured)
    res = svc.embed_documents(["a", "b", "c"])
    # The SDK would merge plain strings into ONE multi-part content for this model; we get one vector per text.
    assert len(res.vectors) == 3 and res.dims == expected
    assert all(len(v) == expected for v in res.vectors)
    req = server.log_for("gemini")[-1]
    assert len(req.body["requests"]) == 3
    assert {r["outputDimensionality"] for r in req.body["requests"]} == {expected}
    assert svc.active_provider.max_input_tokens == 8192


def test_gemini_2_preview_rejects_other_dims():
    with pytest.raises(ProviderAuthError, match="768, 1536 or 3072"):
        choose(make_ms(provider="gemini", model="gemini-embedding-2-preview", outputDimensionality=1000),
               env={"GEMINI_API_KEY": "g"})


def test_voyage_input_type_document_vs_query(server, policy):
    svc = service_for(server, policy, "voyage")
    res = svc.embed_documents(["doc one", "doc two"])
    q = svc.embed_query("what?")
    reqs = server.log_for("voyage")
    assert [r.body["input_type"] for r in reqs] == ["document", "query"]
    assert reqs[0].body["model"] == "voyage-4-large"
    assert reqs[0].headers["authorization"] == "Bearer key-voyage"
    assert res.dims == 1024 and len(q.vector) == 1024
    assert close(res.vectors[0], fake_vector("doc one", 1024, "voyage"))


def test_mistral_happy_path(server, policy):
    svc = service_for(server, policy, "mistral")
    res = svc.embed_documents(["x", "y"])
    (req,) = server.log_for("mistral")
    assert req.body == {"model": "mistral-embed", "input": ["x", "y"], "encoding_format": "float"}
    assert req.headers["authorization"] == "Bearer key-mistral"
    assert res.dims == 1024 and close(res.vectors[1], fake_vector("y", 1024, "mistral"))


def test_ollama_one_text_per_request(server, policy):
    svc = service_for(server, policy, "ollama")
    res = svc.embed_documents(["first", "second", "third"])
    reqs = server.log_for("ollama")
    # nomic-embed-text is embedded with its family's document marker (issue 41: embeddings/prefixes.py)
    assert [r.body for r in reqs] == [{"model": "nomic-embed-text", "prompt": f"search_document: {t}"}
                                      for t in ("first", "second", "third")]
    assert res.dims == 768 and close(res.vectors[2], fake_vector("search_document: third", 768, "ollama"))


def test_blank_texts_get_empty_vectors_without_a_request(server, policy):
    svc = service_for(server, policy, "openai")
    res = svc.embed_documents(["", "  \n", "real"])
    assert res.vectors[0] == [] and res.vectors[1] == [] and len(res.vectors[2]) == 1536
    assert server.log_for("openai")[0].body["input"] == ["real"]


# ---------------------------------------------------------------- selection and keys


@pytest.mark.parametrize("env,expected", [
    ({"OPENAI_API_KEY": "o", "GEMINI_API_KEY": "g", "VOYAGE_API_KEY": "v", "MISTRAL_API_KEY": "m"}, "openai"),
    ({"GEMINI_API_KEY": "g", "VOYAGE_API_KEY": "v", "MISTRAL_API_KEY": "m"}, "gemini"),
    ({"GOOGLE_API_KEY": "g", "MISTRAL_API_KEY": "m"}, "gemini"),
    ({"VOYAGE_API_KEY": "v", "MISTRAL_API_KEY": "m"}, "voyage"),
    ({"MISTRAL_API_KEY": "m"}, "mistral"),
])
def test_auto_select_order(env, expected):
    choice = choose(make_ms(), env=env)
    assert choice.primary is not None and choice.primary.id == expected
    assert choice.requested == "auto" and choice.fallback is None


def test_auto_select_none_is_keyword_only():
    choice = choose(make_ms(), providers_cfg={"ollama": {"baseUrl": "http://127.0.0.1:1"}}, env={})
    assert choice.primary is None and choice.fallback is None  # ollama is never auto-selected
    assert "no embedding provider configured" in choice.reason and "keyword search only" in choice.reason
    assert "OPENAI_API_KEY" in choice.reason and "MISTRAL_API_KEY" in choice.reason
    with pytest.raises(ProviderError, match="keyword search only"):
        EmbeddingService(choice).embed_documents(["x"])


def test_auto_skips_missing_local_file(tmp_path):
    ms = make_ms(local={"modelPath": str(tmp_path / "nope.gguf")})
    assert choose(ms, env={"OPENAI_API_KEY": "o"}).primary.id == "openai"
    # an hf: URI is never auto-selected (it would need a download)
    ms = make_ms(local={"modelPath": "hf:a/b/c.gguf"})
    assert choose(ms, env={"VOYAGE_API_KEY": "v"}).primary.id == "voyage"


@needs_llama
def test_auto_prefers_existing_local_model():
    choice = choose(make_ms(local={"modelPath": str(GGUF)}), env={"OPENAI_API_KEY": "o"})
    assert choice.primary.id == "local"


def test_explicit_provider_without_key_is_keyword_search_saying_why():
    # OpenClaw (reference 4.4): with no fallback, a missing key gives FTS-only; any other error throws.
    choice = choose(make_ms(provider="openai", fallback="none"), env={"GEMINI_API_KEY": "g"})
    assert choice.primary is None and choice.fallback is None
    assert choice.primary_error == ("openai: no API key (set memorySearch.remote.apiKey, "
                                    "models.providers.openai.apiKey or OPENAI_API_KEY)")
    assert choice.reason == f"{choice.primary_error}; keyword search only"
    with pytest.raises(ProviderError, match="model file not found"):  # not a missing key: raised
        choose(make_ms(provider="local", fallback="none", local={"modelPath": "/nope/x.gguf"}))


def test_key_precedence():
    ms = make_ms(provider="openai", remote={"apiKey": "from-remote"})
    cfg = {"openai": {"apiKey": "from-config"}}
    env = {"OPENAI_API_KEY": "from-env"}
    profiles = {"openai": "from-profile"}
    assert resolve_api_key("openai", ms, cfg, env, profiles) == "from-remote"
    ms_plain = make_ms(provider="openai")
    assert resolve_api_key("openai", ms_plain, cfg, env, profiles) == "from-config"
    assert resolve_api_key("openai", ms_plain, {}, env, profiles) == "from-profile"
    assert resolve_api_key("openai", ms_plain, {}, env) == "from-env"
    assert resolve_api_key("openai", ms_plain, {}, {}) is None
    # remote.apiKey belongs to the configured provider only
    ms_gem = make_ms(provider="gemini", remote={"apiKey": "gem-remote"})
    assert resolve_api_key("gemini", ms_gem, {}, {}) == "gem-remote"
    assert resolve_api_key("openai", ms_gem, {}, env) == "from-env"
    # Gemini reads models.providers.google and GEMINI_API_KEY, then GOOGLE_API_KEY
    assert resolve_api_key("gemini", make_ms(), {"google": {"apiKey": "cfg-g"}}, {}) == "cfg-g"
    assert resolve_api_key("gemini", make_ms(), {}, {"GOOGLE_API_KEY": "gk"}) == "gk"
    assert resolve_api_key("gemini", make_ms(), {}, {"GOOGLE_API_KEY": "gk", "GEMINI_API_KEY": "ge"}) == "ge"
    # a reference to an env var, as the reference accepts
    ms_ref = make_ms(provider="gemini", remote={"apiKey": "GOOGLE_API_KEY"})
    assert resolve_api_key("gemini", ms_ref, {}, {"GOOGLE_API_KEY": "real"}) == "real"


def test_key_and_endpoint_precedence_on_the_wire(server, policy):
    ms = make_ms(provider="openai", remote={"baseUrl": server.base("openai"), "apiKey": "remote-key",
                                            "headers": {"x-team": "remote", "X-Remote-Only": "r"}})
    cfg = {"openai": {"baseUrl": "http://127.0.0.1:9/unused", "apiKey": "config-key",
                      "headers": {"X-Team": "provider", "X-Provider-Only": "p"}}}
    svc = EmbeddingService(choose(ms, cfg, {"OPENAI_API_KEY": "env-key"}), retry=policy)
    svc.embed_documents(["hello"])
    (req,) = server.log_for("openai")
    assert req.headers["authorization"] == "Bearer remote-key"
    assert req.headers["x-team"] == "remote"  # remote.headers win on a (case-insensitive) conflict
    assert req.headers["x-provider-only"] == "p" and req.headers["x-remote-only"] == "r"

    server.reset()
    ms2 = make_ms(provider="openai")
    cfg2 = {"openai": {"baseUrl": server.base("openai"), "apiKey": "config-key"}}
    EmbeddingService(choose(ms2, cfg2, {"OPENAI_API_KEY": "env-key"}), retry=policy).embed_documents(["x"])
    assert server.log_for("openai")[0].headers["authorization"] == "Bearer config-key"

    server.reset()
    cfg3 = {"openai": {"baseUrl": server.base("openai")}}
    EmbeddingService(choose(ms2, cfg3, {"OPENAI_API_KEY": "env-key"}), retry=policy).embed_documents(["x"])
    assert server.log_for("openai")[0].headers["authorization"] == "Bearer env-key"


def test_local_to_remote_fallback_defaults(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    ms = make_ms(provider="local", fallback="openai", local={"modelPath": str(model)},
                 remote={"baseUrl": "http://127.0.0.1:9/v1", "apiKey": "rk"})
    if not llama_available():
        choice = choose(ms)
        assert choice.primary is None and "llama-cpp-python" in choice.primary_error
    else:
        choice = choose(ms)
        assert choice.primary.id == "local"
    fb = choice.fallback
    assert fb.id == "openai" and fb.model == "text-embedding-3-small"
    assert fb.base_url == "http://127.0.0.1:9/v1"  # remote.* describes the remote fallback here
    ms["model"] = "text-embedding-3-large"
    assert choose(ms).fallback.model == "text-embedding-3-large"


# ---------------------------------------------------------------- retries


def test_429_with_retry_after_then_success(server, policy, sleeps):
    server.script("openai", {"status": 429, "message": "Rate limit reached", "headers": {"Retry-After": "1"}})
    svc = service_for(server, policy, "openai")
    res = svc.embed_documents(["a"])
    assert len(res.vectors) == 1 and server.count("openai") == 2
    assert len(sleeps) == 1 and 1.0 <= sleeps[0] <= 1.25


def test_429_gemini_retry_info_is_honoured(server, policy, sleeps):
    server.script("gemini", {"status": 429, "message": "Resource has been exhausted", "retry_delay": "7s"})
    service_for(server, policy, "gemini").embed_documents(["a"])
    assert server.count("gemini") == 2 and 7.0 <= sleeps[0] <= 8.5


def test_429_voyage_and_mistral_retry(server, policy, sleeps):
    for flavor in ("voyage", "mistral"):
        server.script(flavor, {"status": 429, "message": "slow down", "headers": {"Retry-After": "2"}})
        service_for(server, policy, flavor).embed_documents(["a"])
        assert server.count(flavor) == 2
    assert all(2.0 <= s <= 2.5 for s in sleeps)


def test_rate_limit_keeps_trying_across_a_quota_window(server, policy, sleeps):
    # Six 429s without a hint: the reference gave up after ~3 s; we wait out a minute-long window.
    server.script("openai", *[{"status": 429, "message": "Too many requests"}] * 6)
    res = service_for(server, policy, "openai").embed_documents(["a"])
    assert len(res.vectors) == 1 and server.count("openai") == 7
    assert sum(sleeps) > 60


def test_rate_limit_gives_up_when_retry_after_exceeds_budget(server, policy, sleeps):
    server.always("openai", {"status": 429, "message": "daily quota", "headers": {"Retry-After": "86400"}})
    with pytest.raises(ProviderRateLimited):
        service_for(server, policy, "openai").embed_documents(["a"])
    assert server.count("openai") == 1 and sleeps == []


def test_insufficient_quota_is_not_retried(server, policy):
    server.script("openai", {"status": 429, "message": "You exceeded your current quota",
                             "code": "insufficient_quota"})
    with pytest.raises(ProviderAuthError, match="quota"):
        service_for(server, policy, "openai").embed_documents(["a"])
    assert server.count("openai") == 1


def test_500_then_success_with_backoff(server, policy, sleeps):
    server.script("mistral", {"status": 500, "message": "boom"}, {"status": 503, "message": "busy"})
    res = service_for(server, policy, "mistral").embed_documents(["a"])
    assert len(res.vectors) == 1 and server.count("mistral") == 3
    assert len(sleeps) == 2 and sleeps[1] > sleeps[0]  # exponential


def test_transient_errors_stop_after_configured_attempts(server, policy):
    server.always("voyage", {"status": 502, "message": "bad gateway"})
    with pytest.raises(ProviderTransientError):
        service_for(server, policy, "voyage").embed_documents(["a"])
    assert server.count("voyage") == policy.transient_attempts


@pytest.mark.parametrize("flavor", ["openai", "gemini", "voyage", "mistral", "ollama"])
def test_nothing_listening_is_tried_three_times_as_openclaw(policy, sleeps, flavor):
    """A closed port (a wrong remote.baseUrl) was retried as a 5xx: 6 attempts, ~18 s of WARNING
    lines before the one error line; OpenClaw's HTTP layer makes 3 attempts."""
    from memindex.pipeline.embeddings.base import ProviderUnreachable
    from tests.conftest import free_port

    url = f"http://127.0.0.1:{free_port()}"
    cfg = {name: {"baseUrl": url + ("/v1" if name != "google" else ""), "apiKey": "k"}
           for name in ("openai", "google", "voyage", "mistral", "ollama")}
    provider = {"gemini": "gemini"}.get(flavor, flavor)
    svc = EmbeddingService(choose(make_ms(provider=provider, fallback="none"), cfg), ConcurrencyLimiter(),
                           retry=policy)
    with pytest.raises(ProviderUnreachable, match="connection failed") as err:
        svc.embed_documents(["a"])
    assert len(sleeps) == policy.unreachable_attempts - 1 == 2
    # ...and names where it went ("Connection error." alone did not tell a wrong baseUrl from a
    # server that is down), without a query string or credentials
    assert f"({url}/" in str(err.value) and "?" not in str(err.value) and "apiKey" not in str(err.value), err.value


@pytest.mark.parametrize("flavor", ["openai", "gemini", "voyage", "mistral", "ollama"])
def test_connection_reset_is_retried(server, policy, flavor):
    server.script(flavor, {"kind": "reset"})
    res = service_for(server, policy, flavor).embed_documents(["a"])
    assert len(res.vectors) == 1 and server.count(flavor) == 2


def test_gemini_retry_after_header_and_http_date(server, policy, sleeps):
    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 20))
    server.script("gemini", {"status": 429, "message": "quota", "headers": {"Retry-After": "3"}},
                  {"status": 429, "message": "quota", "headers": {"Retry-After": when}})
    service_for(server, policy, "gemini").embed_documents(["a"])
    assert server.count("gemini") == 3
    assert 3.0 <= sleeps[0] <= 3.7 and 18.0 <= sleeps[1] <= 24.5


def test_gemini_base_url_version_split():
    from memindex.pipeline.embeddings.providers.gemini import split_base_url

    assert split_base_url("https://generativelanguage.googleapis.com/v1beta") == (
        "https://generativelanguage.googleapis.com/", "v1beta")
    assert split_base_url("https://proxy.example/google/v1beta/openai/") == ("https://proxy.example/google/", "v1beta")
    assert split_base_url("http://127.0.0.1:8080/gemini") == ("http://127.0.0.1:8080/gemini/", "v1beta")


@pytest.mark.parametrize("flavor,provider", [("openai", "openai"), ("gemini", "gemini"),
                                              ("voyage", "voyage"), ("mistral", "mistral")])
def test_401_fails_fast_with_clear_message(server, policy, sleeps, flavor, provider):
    server.state.keys[flavor] = "the-right-key"
    svc = service_for(server, policy, provider)
    with pytest.raises(ProviderAuthError) as exc:
        svc.embed_documents(["a"])
    assert str(exc.value).startswith(f"{provider} rejected the API key")
    assert server.count(flavor) == 1 and sleeps == []


def test_api_key_never_appears_in_errors(server, policy):
    key = "sk-very-secret-0123456789"
    server.script("openai", {"status": 401, "message": f"Incorrect API key provided: {key}"})
    svc = EmbeddingService(choose(make_ms(provider="openai", remote={"baseUrl": server.base("openai"),
                                                                      "apiKey": key})), retry=policy)
    with pytest.raises(ProviderAuthError) as exc:
        svc.embed_documents(["a"])
    assert key not in str(exc.value) and "***" in str(exc.value)
    assert key not in repr(svc.active_provider)


def test_unknown_model_is_not_retried(server, policy):
    server.script("ollama", {"status": 404, "message": 'model "nomic-embed-text" not found, try pulling it first'})
    # Permanent like a rejected key, but named for what it is (status said "ProviderAuthError").
    with pytest.raises(ProviderModelNotFound, match="model not found: nomic-embed-text"):
        service_for(server, policy, "ollama").embed_documents(["a"])
    assert server.count("ollama") == 1


# ---------------------------------------------------------------- batching and limits


def test_too_many_items_is_split_and_cap_remembered(server, policy):
    server.state.max_items["mistral"] = 3  # Mistral's wording has no number: halve until it fits
    svc = service_for(server, policy, "mistral")
    svc.active_provider.max_batch_items = 10
    texts = [f"text {i}" for i in range(10)]
    res = svc.embed_documents(texts)
    assert all(close(v, fake_vector(t, 1024, "mistral")) for v, t in zip(res.vectors, texts))
    ok = [r.n_items for r in server.log_for("mistral") if r.n_items <= 3]
    assert sum(ok) == 10
    assert svc.active_provider.max_batch_items <= 3
    before = server.count("mistral")
    svc.embed_documents(texts)
    assert all(r.n_items <= 3 for r in server.log_for("mistral")[before:])  # no refused requests any more


def test_too_many_items_uses_the_cap_the_server_states(server, policy):
    server.state.max_items["gemini"] = 4  # "at most 4 requests can be in one batch"
    svc = service_for(server, policy, "gemini")
    texts = [f"t{i}" for i in range(10)]
    res = svc.embed_documents(texts)
    assert len(res.vectors) == 10 and svc.active_provider.max_batch_items == 4
    sizes = [r.n_items for r in server.log_for("gemini")]
    assert sizes == [10, 4, 4, 2]


def test_packing_respects_provider_caps(server, policy):
    svc = service_for(server, policy, "openai")
    svc.active_provider.max_batch_items = 4
    svc.active_provider.max_batch_tokens = 30
    texts = ["0123456789"] * 7  # 10 bytes each: 3 per request by tokens
    svc.embed_documents(texts)
    assert [r.n_items for r in server.log_for("openai")] == [3, 3, 1]


def test_over_limit_text_is_never_sent_whole(server, policy):
    svc = service_for(server, policy, "gemini")  # gemini-embedding-001: 2048-token limit
    long_text = ("Ünïcode words and more words 東京 " * 300).strip()
    assert estimate_tokens(long_text) > 2048
    res = svc.embed_documents(["short", long_text])
    sent = [r2["content"]["parts"][0]["text"] for r in server.log_for("gemini") for r2 in r.body["requests"]]
    assert long_text not in sent
    assert all(estimate_tokens(t) <= 2048 for t in sent)
    pieces = [t for t in sent if t != "short"]
    assert "".join(pieces).replace(" ", "") == long_text.replace(" ", "")  # nothing dropped
    expected = unit(sum(unit(fake_vector(f"RETRIEVAL_DOCUMENT|{p}", 768, "gemini")) * estimate_tokens(p)
                        for p in pieces))
    assert len(res.vectors) == 2 and close(res.vectors[1], expected)
    assert abs(np.linalg.norm(res.vectors[1]) - 1) < 1e-6


def test_split_to_limit_respects_utf8():
    text = "😀" * 1000 + "abc"
    pieces = split_to_limit(text, 101)
    assert "".join(pieces) == text and all(estimate_tokens(p) <= 101 for p in pieces)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("kind", ["wrong_dims", "nan", "short", "zero"])
def test_invalid_vectors_rejected_without_retry(server, policy, kind):
    server.script("openai", {"kind": kind})
    svc = service_for(server, policy, "openai")
    svc.active_provider.dims = 1536  # known, as after a first answer (a custom endpoint's dims are learnt)
    with pytest.raises(InvalidVectorError):
        svc.embed_documents(["a", "b"])
    assert server.count("openai") == 1


@pytest.mark.parametrize("flavor", ["mistral", "voyage"])  # (openai's SDK says "No embedding data")
def test_a_query_answered_with_no_vector_is_an_invalid_vector_error(server, policy, flavor):
    """helper-57: mistral answering {"data": []} to a query leaked "IndexError: list index out of
    range" (its embed_query takes vectors[0]); the document path said "expected N vectors"."""
    server.script(flavor, {"kind": "short"})
    svc = service_for(server, policy, flavor)
    with pytest.raises(InvalidVectorError, match="expected 1 vector"):
        svc.embed_query("router")


def test_dims_learned_then_enforced(server, policy):
    svc = service_for(server, policy, "voyage")
    svc.active_provider.dims = None
    svc.embed_documents(["a"])
    assert svc.active_provider.dims == 1024
    server.script("voyage", {"kind": "wrong_dims"})
    with pytest.raises(InvalidVectorError, match="expected 1024-dim"):
        svc.embed_documents(["b"])


def test_validate_vectors_unit():
    assert validate_vectors([[1.0, 0.0], [0.0, 1.0]], expected_count=2) == 2
    with pytest.raises(InvalidVectorError):
        validate_vectors([[1.0, 0.0], [1.0]], expected_count=2)
    with pytest.raises(InvalidVectorError):
        validate_vectors([[float("inf"), 0.0]], expected_count=1)
    assert validate_vectors([[0.0, 0.0]], expected_count=1, allow_zero=True) == 2


# ---------------------------------------------------------------- fallback


def test_fallback_serves_when_primary_keeps_failing(server, policy, caplog):
    server.always("openai", {"status": 500, "message": "down"})
    svc = service_for(server, policy, "openai", fallback="gemini")
    with caplog.at_level("WARNING"):
        res = svc.embed_documents(["alpha", "beta"])
    assert res.fallback_used and res.provider_id == "gemini"
    assert "openai" in res.fallback_reason and "500" in res.fallback_reason
    assert close(res.vectors[0], fake_vector("RETRIEVAL_DOCUMENT|alpha", 768, "gemini"))
    assert res.fingerprint == svc.choice.fallback.fingerprint()
    assert "switched to fallback provider (gemini)" in caplog.text
    assert "key-openai" not in caplog.text and "key-gemini" not in caplog.text
    # sticky: the next call goes straight to the fallback
    n_openai = server.count("openai")
    res2 = svc.embed_documents(["gamma"])
    assert res2.fallback_used and server.count("openai") == n_openai
    # queries follow the index: by fingerprint they can still reach the primary's space
    assert svc.provider_for(svc.choice.fallback.fingerprint()).id == "gemini"


# ---------------------------------------------------------------- the identity the service keeps
# ``EmbeddingService.identity`` is kept, not derived per read (a plan reads it): after each change of
# the active provider or its size it must equal one computed afresh from the active provider.


def kept_is_fresh(svc: EmbeddingService) -> bool:
    return svc.active_provider is not None and svc.identity == svc.active_provider.identity()


def test_the_identity_follows_the_switch_to_the_fallback(server, policy):
    server.always("openai", {"status": 500, "message": "down"})
    svc = service_for(server, policy, "openai", fallback="gemini")
    assert kept_is_fresh(svc) and svc.identity.provider == "openai"
    svc.embed_documents(["alpha"])
    assert kept_is_fresh(svc) and svc.identity.provider == "gemini" and svc.identity.dims == 768


def test_the_identity_follows_a_probes_verdict(server, policy):
    svc = service_for(server, policy, "openai", fallback="gemini")
    svc.use_fallback(svc.choice.primary, ProviderTransientError("down"))
    assert kept_is_fresh(svc) and svc.identity.provider == "gemini"


def test_the_identity_follows_the_size_learnt_and_a_new_size(server, policy):
    svc = service_for(server, policy, "openai")  # the fake server's endpoint: its size is learnt
    assert kept_is_fresh(svc) and svc.identity.dims is None
    svc.embed_documents(["a"])  # the first answer teaches it
    assert kept_is_fresh(svc) and svc.identity.dims == 1536
    server.state.dims["openai"] = 128
    svc.follow_size(128, 5.0)  # a plan at another size (EmbeddingService.probe_dims)
    assert kept_is_fresh(svc) and svc.identity.dims == 128


class SizedWhileLoading(HashProvider):
    """Learns its size while answering, as the local provider does from the model it loads (and
    its fingerprint carries the size, as the hashing provider's does)."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.dims = None  # (a HashProvider knows its size from the start)
        self.fail = fail

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.dims = self.DEFAULT_DIMS
        if self.fail:
            raise InvalidVectorError("loaded, then failed")
        return super().embed_documents(texts)


@pytest.mark.parametrize("fail", [False, True])
def test_the_identity_follows_a_size_the_provider_learns_itself(policy, fail):
    svc = EmbeddingService(ProviderChoice(SizedWhileLoading(fail), None, "configured", "hash"),
                           ConcurrencyLimiter(), retry=policy)
    before = svc.identity
    assert kept_is_fresh(svc) and before.dims is None
    if fail:
        with pytest.raises(InvalidVectorError):
            svc.embed_documents(["a"])
    else:
        svc.embed_documents(["a"])
    assert kept_is_fresh(svc) and svc.identity.dims == HashProvider.DEFAULT_DIMS
    assert svc.identity.provider_key != before.provider_key


def test_a_service_without_a_provider_is_keyword_only():
    svc = EmbeddingService(ProviderChoice(None, None, "no provider", "auto"))
    assert svc.identity == KEYWORD_ONLY


@pytest.mark.parametrize("providers_cfg, what", [
    ({"openai": {"apiKey": "sk-\u2026"}}, "the API key"),  # the README's placeholder, pasted as is
    ({"openai": {"apiKey": "sk-good", "headers": {"X-Team": "caf\u00e9"}}}, "header 'X-Team'"),
])
def test_a_key_or_header_an_http_request_cannot_carry_is_said_as_such(providers_cfg, what):
    """helper-56: it failed at the first request as "InvalidVectorError: openai: 'ascii' codec can't
    encode character" and promised that the next sync retries (it never could)."""
    ms = make_ms(provider="openai", fallback="none")
    with pytest.raises(ProviderError, match=f"openai: {what} holds a character an HTTP header cannot carry") as exc:
        choose(ms, providers_cfg)
    assert "\u2026" not in str(exc.value) and "caf" not in str(exc.value)  # the value itself is never echoed


def test_fallback_from_start_when_primary_has_no_key(server, policy):
    ms = make_ms(provider="openai", fallback="voyage")
    choice = choose(ms, {"voyage": {"baseUrl": server.base("voyage"), "apiKey": "vk"}}, {})
    assert choice.primary is None and "no API key" in choice.primary_error
    res = EmbeddingService(choice, retry=policy).embed_documents(["a"])
    assert res.fallback_used and res.provider_id == "voyage" and "no API key" in res.fallback_reason


def test_when_the_fallback_fails_too_the_error_names_both(server, policy):
    server.always("openai", {"status": 401, "message": "bad key one"})
    server.always("gemini", {"status": 404, "message": "no such model"})
    svc = service_for(server, policy, "openai", fallback="gemini")
    for _ in range(2):  # the switch, and later calls that go straight to the fallback
        with pytest.raises(ProviderError) as err:
            svc.embed_documents(["alpha"])
        text = str(err.value)
        assert text.startswith("gemini") and "bad key one" in text and "no such model" in text, text
    hint = failure_hint(text, "gemini")
    assert "GEMINI_API_KEY" not in hint and "remote.baseUrl" in hint and "OPENAI_API_KEY" in hint, hint


def test_no_fallback_means_the_error_propagates(server, policy):
    server.always("openai", {"status": 500, "message": "down"})
    with pytest.raises(ProviderTransientError):
        service_for(server, policy, "openai").embed_documents(["a"])


# ---------------------------------------------------------------- queries


def test_query_timeout(server, policy):
    server.script("openai", {"kind": "delay", "seconds": 1.5})
    svc = service_for(server, policy, "openai")
    t0 = time.monotonic()
    with pytest.raises(ProviderTransientError, match="timed out after 0.3s"):
        svc.embed_query("slow", timeout_s=0.3)
    assert time.monotonic() - t0 < 1.2


def test_query_is_never_retried(server, policy, sleeps):
    # OpenClaw does not retry query embeddings: a search answers keyword-only instead of waiting.
    server.script("openai", {"status": 429, "message": "slow", "headers": {"Retry-After": "1"}})
    svc = service_for(server, policy, "openai")
    with pytest.raises(ProviderRateLimited):
        svc.embed_query("q", timeout_s=30)
    assert server.count("openai") == 1
    assert len(svc.embed_query("q", timeout_s=30).vector) == 1536  # the script is used up


# ---------------------------------------------------------------- fingerprint


def test_fingerprint_excludes_key_and_tracks_endpoint():
    def fp(**kw):
        args = dict(api_key="k1", model="text-embedding-3-small", base_url="http://a/v1", headers={"X-A": "1"})
        args.update(kw)
        return OpenAIProvider(**args).fingerprint()

    base = fp()
    assert len(base) == 64 and int(base, 16) >= 0
    assert fp(api_key="another-key") == base
    assert fp(headers={"X-A": "1", "Authorization": "Bearer zzz", "api-key": "q"}) == base
    assert fp(base_url="http://b/v1") != base
    assert fp(model="text-embedding-3-large") != base
    assert fp(headers={"X-A": "2"}) != base
    assert fp(headers={"x-a": "1"}) == base  # header names are case-insensitive
    # A header named as a credential is not the endpoint either: rotating a proxy token
    # re-embedded the whole corpus for the same vectors.
    for name in ("X-Proxy-Token", "X-Api-Secret", "Cookie", "X-Session-Id", "X-Auth-User"):
        assert fp(headers={"X-A": "1", name: "v1"}) == fp(headers={"X-A": "1", name: "v2"}) == base, name


def test_gemini_fingerprint_tracks_output_dims():
    env = {"GEMINI_API_KEY": "g"}
    a = choose(make_ms(provider="gemini", model="gemini-embedding-2-preview"), env=env).primary.fingerprint()
    b = choose(make_ms(provider="gemini", model="gemini-embedding-2-preview", outputDimensionality=768),
               env=env).primary.fingerprint()
    c = choose(make_ms(provider="gemini", model="gemini-embedding-2-preview", remote={"apiKey": "other"}),
               env=env).primary.fingerprint()
    assert a != b and a == c


# ---------------------------------------------------------------- retry / packing units


def test_parse_retry_after():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    now = 1_700_000_000.0
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now + 30))
    assert 29.0 <= parse_retry_after(date, now=now) <= 30.0
    assert parse_retry_after(time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now - 30)), now=now) == 0.0


def test_too_many_items_detection():
    assert too_many_items("The batch size limit is 1000. Your batch size is 1050.").max_items == 1000
    assert too_many_items("input batch size 64 > maximum allowed batch size 32").max_items == 32
    assert too_many_items("batch size is invalid, it should not be larger than 10").max_items == 10
    assert too_many_items("Too many tokens in batch. Max is 16384 got 17555").max_items is None
    assert too_many_items("Invalid model name") is None


def test_pack_batches_unit():
    texts = ["a" * 5, "b" * 5, "c" * 20, "d", "e", "f"]
    assert pack_batches(texts, 2, 12, len) == [["a" * 5, "b" * 5], ["c" * 20], ["d", "e"], ["f"]]
    assert pack_batches([], 3, 10, len) == []


def test_embed_with_splitting_unit():
    calls = []

    def call(batch):
        calls.append(len(batch))
        if len(batch) > 2:
            raise ProviderTooManyItems("too many inputs")
        return [[float(len(t))] for t in batch]

    out = embed_with_splitting(call, ["a", "bb", "ccc", "dddd", "eeeee"])
    assert out == [[1.0], [2.0], [3.0], [4.0], [5.0]]
    assert calls[0] == 5 and max(calls[1:]) <= 3
    with pytest.raises(ProviderTooManyItems):
        embed_with_splitting(lambda b: (_ for _ in ()).throw(ProviderTooManyItems("too many")), ["x"])


def test_call_with_retry_never_retries_auth(policy, sleeps):
    n = []

    def fn():
        n.append(1)
        raise ProviderAuthError("openai rejected the API key")

    with pytest.raises(ProviderAuthError):
        call_with_retry(fn, policy)
    assert len(n) == 1 and sleeps == []


def test_limiter_caps_concurrency():
    lim = ConcurrencyLimiter(default_cap=2)
    live, peak, lock = [0], [0], threading.Lock()

    def work():
        with lim.acquire("openai"):
            with lock:
                live[0] += 1
                peak[0] = max(peak[0], live[0])
            time.sleep(0.02)
            with lock:
                live[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 2
    assert ConcurrencyLimiter().caps["ollama"] == 1


# ---------------------------------------------------------------- local GGUF


@pytest.fixture(scope="module")
def local_service():
    if not llama_available() or not GGUF.is_file():
        pytest.skip("llama_cpp (llama-cpp-python) is not importable or the test GGUF is missing")
    choice = choose(make_ms(provider="local", local={"modelPath": str(GGUF)}))
    return EmbeddingService(choice, ConcurrencyLimiter())


@needs_llama
def test_local_real_gguf(local_service):
    texts = ["The cat sat on the mat.", "A kitten is sitting on a rug.", "Quarterly tax filing deadlines for corporations."]
    res = local_service.embed_documents(texts)
    assert res.provider_id == "local" and res.dims == 384
    v = np.asarray(res.vectors)
    assert v.shape == (3, 384)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
    q = local_service.embed_query("cat on a mat")
    assert len(q.vector) == 384 and np.asarray(q.vector) @ v[0] > np.asarray(q.vector) @ v[2]
    # same text, same vector
    assert close(local_service.embed_documents([texts[0]]).vectors[0], res.vectors[0])


@needs_llama
def test_local_max_input_tokens_truncates_by_tokenizer():
    ms = make_ms(provider="local", local={"modelPath": str(GGUF), "maxInputTokens": 256})
    p256 = choose(ms).primary
    p512 = choose(make_ms(provider="local", local={"modelPath": str(GGUF), "maxInputTokens": 512})).primary
    default = choose(make_ms(provider="local", local={"modelPath": str(GGUF)})).primary
    assert p256.max_input_tokens == 256 and p512.max_input_tokens == 512
    # all-MiniLM-L6-v2's own sequence length (the registry's per-model limit) unless set
    assert default.max_input_tokens == 256 and default.fingerprint() == p256.fingerprint()
    assert p256.fingerprint() != p512.fingerprint()
    long_text = " ".join(f"word{i % 50} topic" for i in range(400))
    cut = p256.truncate(long_text)
    llm = p256._model().llm
    assert len(llm.tokenize(cut.encode(), add_bos=True)) <= 256
    assert len(llm.tokenize(long_text.encode(), add_bos=True)) > 512
    a = np.asarray(p256.embed_documents([long_text])[0])
    b = np.asarray(p256.embed_documents([cut])[0])
    c = np.asarray(p512.embed_documents([long_text])[0])
    assert a @ b > 0.999 and a @ c < 0.9999
    assert p256._model() is p512._model()  # one Llama per process, shared


# ---------------------------------------------------------------- hf: download with resume


def test_hf_download_resumes_partial_part_file(server, tmp_path):
    data = os.urandom(300_000)
    server.state.files["acme/embed-GGUF/model.gguf"] = data
    uri = "hf:acme/embed-GGUF/model.gguf"
    dest = cache_path(uri, tmp_path)
    dest.parent.mkdir(parents=True)
    (dest.parent / "model.gguf.part").write_bytes(data[:123_456])
    path = ensure_model_file(uri, tmp_path, hf_base_url=server.base("hf"))
    assert path == dest and path.read_bytes() == data
    (req,) = server.log_for("hf")
    assert req.headers["range"] == "bytes=123456-"
    assert req.path == "/hf/acme/embed-GGUF/resolve/main/model.gguf"
    assert not (dest.parent / "model.gguf.part").exists()
    # cached: no second request
    ensure_model_file(uri, tmp_path, hf_base_url=server.base("hf"))
    assert server.count("hf") == 1


def test_hf_download_interrupted_then_resumed(server, tmp_path):
    data = os.urandom(200_000)
    server.state.files["acme/repo/sub/m.gguf"] = data
    server.state.hf_cut_after = 70_000
    uri = "hf:acme/repo/sub/m.gguf"
    with pytest.raises(ProviderTransientError):
        ensure_model_file(uri, tmp_path, hf_base_url=server.base("hf"), attempts=1)
    part = cache_path(uri, tmp_path).with_name("m.gguf.part")
    assert part.stat().st_size == 70_000
    path = ensure_model_file(uri, tmp_path, hf_base_url=server.base("hf"), attempts=1)
    assert path.read_bytes() == data
    assert server.log_for("hf")[-1].headers["range"] == "bytes=70000-"


def test_hf_download_restarts_when_server_ignores_range(server, tmp_path):
    data = os.urandom(50_000)
    server.state.files["a/b/c.gguf"] = data
    server.state.hf_ignore_range = True
    uri = "hf:a/b/c.gguf"
    dest = cache_path(uri, tmp_path)
    dest.parent.mkdir(parents=True)
    dest.with_name("c.gguf.part").write_bytes(b"x" * 1000)
    assert ensure_model_file(uri, tmp_path, hf_base_url=server.base("hf")).read_bytes() == data


def test_hf_missing_file_is_a_clear_error(server, tmp_path):
    with pytest.raises(ProviderError, match="HTTP 404"):
        ensure_model_file("hf:nobody/none/x.gguf", tmp_path, hf_base_url=server.base("hf"))


@needs_llama
def test_local_provider_downloads_hf_model_on_first_use(server, tmp_path):
    server.state.files["sentence-transformers/minilm-GGUF/all-MiniLM-L6-v2.F16.gguf"] = GGUF.read_bytes()
    ms = make_ms(provider="local",
                 local={"modelPath": "hf:sentence-transformers/minilm-GGUF/all-MiniLM-L6-v2.F16.gguf",
                        "modelCacheDir": str(tmp_path / "cache")})
    choice = select_provider(ms, {}, {}, str(tmp_path / "unused"), hf_base_url=server.base("hf"))
    assert server.count("hf") == 0  # selection does no network I/O
    res = EmbeddingService(choice, ConcurrencyLimiter()).embed_documents(["hello world"])
    assert res.dims == 384 and server.count("hf") == 1
    assert (tmp_path / "cache" / "hf" / "sentence-transformers" / "minilm-GGUF" / "all-MiniLM-L6-v2.F16.gguf").is_file()


@pytest.mark.parametrize("at", [0, 471, 490, 499])
def test_a_key_in_a_long_plain_text_error_body_is_never_shown_even_in_part(server, policy, at):
    """The body was cut to 500 characters before the key was redacted: a key straddling the cut
    no longer matched, and its head was printed, recorded in failures.json and in the store."""
    key = "zq-SECRET-0123456789abcdefXYZ"
    body = ("x" * at + f" key={key} rejected").encode()
    server.script("mistral", {"status": 401, "body": body})
    svc = EmbeddingService(choose(make_ms(provider="mistral"), {"mistral": {
        "baseUrl": server.base("mistral"), "apiKey": key}}), retry=policy)
    with pytest.raises(ProviderAuthError) as exc:
        svc.embed_documents(["a"])
    message = str(exc.value)
    assert not any(key[:n] in message for n in range(4, len(key) + 1)), message


def test_every_hint_names_keys_the_config_accepts():
    """The throttling hint named memorySearch.remote.concurrency, which the config refuses."""
    import re

    from memindex.pipeline.config.settings import resolve_agent
    from memindex.pipeline.embeddings.hints import failure_hint as hint_for

    reasons = ["openai: model not found: x", "quota exceeded", "inconsistent vector dims", "openai: rate limited (429)",
               "server error 500", "request timed out", "connect failed", "something else"]
    for reason in reasons:
        for key in re.findall(r"memorySearch\.[A-Za-z.]+[A-Za-z]", hint_for(reason, "openai")):
            parts = key.split(".")[1:]
            ms: dict = {}
            node = ms
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = {"baseUrl": "http://x", "nonBatchConcurrency": 2, "model": "m",
                               "outputDimensionality": 8}.get(parts[-1], 2)
            resolve_agent({"agents": {"defaults": {"memorySearch": ms}}}, "main")  # an unknown key raises


def test_a_local_model_that_cannot_be_fetched_points_at_its_model_path_not_a_base_url(tmp_path):
    """helper-71: offline, the default hf: model's failed download said "check memorySearch.remote.baseUrl",
    which a local model does not have; a missing extensionPath was named with ".so.so" by SQLite."""
    import sqlite3

    from memindex.pipeline.embeddings.hints import failure_hint
    from memindex.pipeline.store.db import load_vector_extension

    why = "local: cannot reach huggingface.co to download the model (ConnectError: [Errno -2] Name or service not known)"
    hint = failure_hint(why, "local")
    assert "memorySearch.local.modelPath" in hint and "baseUrl" not in hint
    assert "baseUrl" in failure_hint("openai: connect failed", "openai")
    err = load_vector_extension(sqlite3.connect(":memory:"), str(tmp_path / "vec0.so"))
    assert err == f"store.vector.extensionPath {tmp_path / 'vec0.so'}: no such file"


def test_a_model_host_that_cannot_be_reached_is_one_attempt_not_a_resume_loop(tmp_path, caplog):
    """helper-72: offline, each download attempt said "model download interrupted, resuming" (18 lines
    for one index) though nothing was downloaded. A connect failure is now ProviderUnreachable, at once."""
    import logging
    import socket

    from memindex.pipeline.embeddings.base import ProviderUnreachable
    from memindex.pipeline.embeddings.providers.hf_download import ensure_model_file

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    caplog.set_level(logging.INFO, logger="memindex")
    with pytest.raises(ProviderUnreachable, match=f"cannot reach 127.0.0.1:{port} to download the model"):
        ensure_model_file("hf:o/r/m.gguf", tmp_path, hf_base_url=f"http://127.0.0.1:{port}", attempts=3)
    assert not any("resuming" in r.getMessage() for r in caplog.records)
    assert sum("downloading" in r.getMessage() for r in caplog.records) == 1


def test_a_size_is_learnt_only_off_the_models_own_endpoint_or_configured_size():
    """`index --force` asks a provider its size (one request) only when it is learnt from answers."""
    native = choose(make_ms(provider="openai"), {"openai": {"apiKey": "k"}}).primary
    proxy = choose(make_ms(provider="openai"), {"openai": {"apiKey": "k", "baseUrl": "http://127.0.0.1:9/v1"}}).primary
    sized = choose(make_ms(provider="openai", outputDimensionality=256),
                   {"openai": {"apiKey": "k", "baseUrl": "http://127.0.0.1:9/v1"}}).primary
    assert (native.dims, native.dims_learnt) == (1536, False)
    assert (proxy.dims, proxy.dims_learnt) == (None, True)
    assert (sized.dims, sized.dims_learnt) == (256, False)
