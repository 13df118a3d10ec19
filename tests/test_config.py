from pathlib import Path

import pytest

from memindex.pipeline.config.loader import load_config
from memindex.pipeline.config.settings import ConfigError, Context, load_settings, resolve_agent


def test_defaults_match_the_spec(tmp_path):
    home = tmp_path / "home"
    s = resolve_agent({}, "main", state_dir=tmp_path, env={"HOME": str(home)})
    ms = s.memory_search
    assert ms.provider == "auto" and ms.fallback == "none"
    assert ms.chunking.to_dict() == {"tokens": 400, "overlap": 80}
    assert ms.query.max_results == 6 and ms.query.min_score == 0.35
    h = ms.query.hybrid
    assert (h.vector_weight, h.text_weight, h.candidate_multiplier) == (0.7, 0.3, 4)
    assert h.mmr.to_dict() == {"enabled": False, "lambda": 0.7}
    assert h.temporal_decay.to_dict() == {"enabled": False, "halfLifeDays": 30}
    assert ms.sync.watch_debounce_ms == 1500
    assert ms.sync.sessions.to_dict() == {"deltaBytes": 100000, "deltaMessages": 50}
    assert ms.cache.to_dict() == {"enabled": True, "maxEntries": 50000}
    assert ms.remote.batch.concurrency == 2
    assert s.store_path == tmp_path / "memindex" / "main.sqlite"
    # The default workspace is under the home, not the state dir (resolveDefaultAgentWorkspaceDir).
    assert s.workspace == (home / ".openclaw" / "workspace").resolve()
    assert s.memory.citations == "auto" and s.memory.backend == "builtin"
    assert s.enabled


def test_agent_override_merges_over_defaults(tmp_path):
    cfg = {
        "agents": {
            "defaults": {"workspace": str(tmp_path / "ws"),
                         "memorySearch": {"extraPaths": ["notes", "shared"],
                                          "query": {"maxResults": 10, "hybrid": {"vectorWeight": 2, "textWeight": 2}}}},
            "list": [{"id": "main"}, {"id": "ops", "workspace": str(tmp_path / "ops-ws"),
                      "memorySearch": {"extraPaths": ["shared", " runbooks "], "query": {"minScore": 0.2},
                                       "store": {"path": str(tmp_path / "stores/{agentId}.db")}}}],
        }
    }
    ops = resolve_agent(cfg, "ops", state_dir=tmp_path)
    assert ops.workspace == (tmp_path / "ops-ws").resolve()
    assert ops.memory_search.extra_paths == ["notes", "shared", "runbooks"]
    assert ops.memory_search.query.max_results == 10  # from defaults
    assert ops.memory_search.query.min_score == 0.2  # from the agent
    assert ops.memory_search.query.hybrid.vector_weight == 0.5  # normalised to sum 1
    assert ops.store_path == tmp_path / "stores" / "ops.db"
    main = resolve_agent(cfg, "main", state_dir=tmp_path)
    assert main.workspace == (tmp_path / "ws").resolve()
    assert main.memory_search.query.min_score == 0.35


def test_a_null_override_is_unset_as_in_openclaw(tmp_path):
    """helper-71: a per-agent `local.modelPath: null` replaced the defaults' model path (the agent
    fell back to a model download) and `maxResults: null` was an error; OpenClaw's `??` reads null
    as unset, so the defaults (or the built-in default) apply."""
    model = str(tmp_path / "m.gguf")
    cfg = {"agents": {
        "defaults": {"memorySearch": {"provider": "local", "local": {"modelPath": model},
                                      "query": {"maxResults": 9}, "store": {"path": None}}},
        "list": [{"id": "main", "memorySearch": {"local": {"modelPath": None}, "store": {"path": None},
                                                  "query": {"maxResults": None, "minScore": None},
                                                  "cache": {"maxEntries": None}, "extraPaths": None}}]}}
    ms = resolve_agent(cfg, "main", state_dir=tmp_path).memory_search
    assert ms.local.model_path == model
    assert ms.query.max_results == 9 and ms.query.min_score == 0.35
    assert ms.cache.max_entries == 50000 and ms.extra_paths == []
    assert resolve_agent(cfg, "main", state_dir=tmp_path).store_path == tmp_path / "memindex" / "main.sqlite"
    with pytest.raises(ConfigError, match="maxResult"):  # an unknown key stays an error, null or not
        resolve_agent({"agents": {"defaults": {"memorySearch": {"query": {"maxResult": None}}}}}, state_dir=tmp_path)


def test_sessions_source_needs_the_experimental_flag(tmp_path):
    cfg = {"agents": {"defaults": {"memorySearch": {"sources": ["memory", "sessions"]}}}}
    assert resolve_agent(cfg, state_dir=tmp_path).sources == ["memory"]
    cfg["agents"]["defaults"]["memorySearch"]["experimental"] = {"sessionMemory": True}
    assert resolve_agent(cfg, state_dir=tmp_path).sources == ["memory", "sessions"]


def test_plugins_slot_none_disables_memory(tmp_path):
    assert not resolve_agent({"plugins": {"slots": {"memory": "none"}}}, state_dir=tmp_path).enabled
    assert not resolve_agent({"agents": {"defaults": {"memorySearch": {"enabled": False}}}},
                             state_dir=tmp_path).enabled


@pytest.mark.parametrize("ms, key", [
    ({"provder": "openai"}, "agents.defaults.memorySearch.provder"),
    ({"provider": "cohere"}, "agents.defaults.memorySearch.provider"),
    ({"query": {"maxResults": "ten"}}, "agents.defaults.memorySearch.query.maxResults"),
    ({"query": {"hybrid": {"mmr": {"enabled": "yes"}}}}, "agents.defaults.memorySearch.query.hybrid.mmr.enabled"),
    ({"remote": {"headers": {"X-A": 1}}}, "agents.defaults.memorySearch.remote.headers"),
    ({"sources": ["memory", "email"]}, "agents.defaults.memorySearch.sources"),
    ({"chunking": []}, "agents.defaults.memorySearch.chunking"),
    # A vector size is never clamped (-5 built a 1-dim index); a base URL must be http(s) with a host.
    ({"outputDimensionality": -5}, "agents.defaults.memorySearch.outputDimensionality"),
    ({"outputDimensionality": 0}, "agents.defaults.memorySearch.outputDimensionality"),
    ({"dimensions": 1.5}, "agents.defaults.memorySearch.dimensions"),
    ({"remote": {"baseUrl": "not a url"}}, "agents.defaults.memorySearch.remote.baseUrl"),
    ({"remote": {"baseUrl": "ftp://files.example.com/v1"}}, "agents.defaults.memorySearch.remote.baseUrl"),
    ({"remote": {"baseUrl": "localhost:8080/v1"}}, "agents.defaults.memorySearch.remote.baseUrl"),
])
def test_bad_values_name_the_key(tmp_path, ms, key):
    with pytest.raises(ConfigError) as err:
        resolve_agent({"agents": {"defaults": {"memorySearch": ms}}}, state_dir=tmp_path)
    assert err.value.key == key
    assert key in str(err.value)


@pytest.mark.parametrize("cfg, key", [
    ({"agents": {"defaults": {"memorySearch": {"remote": {"apiKey": ["sk-LEAK-1234"]}}}}},
     "agents.defaults.memorySearch.remote.apiKey"),
    ({"agents": {"defaults": {"memorySearch": {"remote": {"headers": {"Authorization": "Bearer sk-LEAK-1234", "X": 7}}}}}},
     "agents.defaults.memorySearch.remote.headers"),
    ({"models": {"providers": {"openai": {"apiKey": 12345678901234}}}}, "models.providers.openai.apiKey"),
    ({"models": {"providers": {"voyage": {"headers": {"X-Key": ["sk-LEAK-1234"]}}}}}, "models.providers.voyage.headers"),
    ({"env": {"OPENAI_API_KEY": ["sk-LEAK-1234"]}}, "env.OPENAI_API_KEY"),
])
def test_a_bad_secret_value_names_its_key_never_the_value(tmp_path, cfg, key):
    with pytest.raises(ConfigError) as err:
        resolve_agent(load_config_dict(cfg, tmp_path), state_dir=tmp_path)
    assert err.value.key == key and "LEAK" not in str(err.value) and "1234567" not in str(err.value), err.value
    # Not a secret: the value helps and is shown; other providers' entries (chat models) are not ours.
    with pytest.raises(ConfigError, match="got 'x'"):
        resolve_agent({"agents": {"defaults": {"memorySearch": {"chunking": {"tokens": "x"}}}}}, state_dir=tmp_path)
    assert resolve_agent({"models": {"providers": {"anthropic": {"apiKey": 5}}}}, state_dir=tmp_path).enabled


def load_config_dict(cfg: dict, tmp_path: Path) -> dict:
    """``cfg`` through the real loader (the env block is resolved there)."""
    import json

    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps(cfg))
    return load_config(path, tmp_path, {})


def test_a_blank_base_url_is_the_provider_default(tmp_path):
    s = resolve_agent({"agents": {"defaults": {"memorySearch": {"remote": {"baseUrl": "  "}}}}}, state_dir=tmp_path)
    assert s.memory_search.remote.base_url is None
    s = resolve_agent({"agents": {"defaults": {"memorySearch": {"remote": {"baseUrl": " http://h:1/v1 "}}}}},
                      state_dir=tmp_path)
    assert s.memory_search.remote.base_url == "http://h:1/v1"


def test_bad_agent_and_memory_keys(tmp_path):
    with pytest.raises(ConfigError, match=r"agents.list\[0\].memorySearch.cache.size"):
        resolve_agent({"agents": {"list": [{"id": "a", "memorySearch": {"cache": {"size": 3}}}]}}, "a",
                      state_dir=tmp_path)
    with pytest.raises(ConfigError, match="memory.citations"):
        resolve_agent({"memory": {"citations": "maybe"}}, state_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"agents.list\[1\].id"):
        resolve_agent({"agents": {"list": [{"id": "a"}, {"name": "x"}]}}, state_dir=tmp_path)


def test_unrelated_openclaw_keys_load_unchanged(tmp_path):
    cfg = {"gateway": {"port": 1}, "channels": {"slack": {"x": 1}}, "agents": {"defaults": {"model": "m"}}}
    assert resolve_agent(cfg, state_dir=tmp_path).enabled


def test_json5_file_and_lookup_order(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    (state / "openclaw.json").write_text(
        "// comment\n{agents: {defaults: {memorySearch: {query: {maxResults: 3,},},},},}\n")
    s = load_settings(Context(state_dir=str(state)))
    assert s.memory_search.query.max_results == 3
    other = tmp_path / "other.json5"
    other.write_text("{agents: {defaults: {memorySearch: {query: {maxResults: 4}}}}}")
    monkeypatch.setenv("OPENCLAW_CONFIG_PATH", str(other))
    assert load_settings(Context(state_dir=str(state))).memory_search.query.max_results == 4
    explicit = tmp_path / "x.json"
    explicit.write_text('{"agents": {"defaults": {"memorySearch": {"query": {"maxResults": 5}}}}}')
    assert load_settings(Context(config=str(explicit), state_dir=str(state))).memory_search.query.max_results == 5
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
    monkeypatch.delenv("OPENCLAW_CONFIG_PATH")
    assert load_settings(Context()).memory_search.query.max_results == 3


def test_broken_config_file_is_one_clear_error(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{agents: ")
    with pytest.raises(ConfigError, match="not valid JSON5"):
        load_config(p, tmp_path, {})
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.json", tmp_path, {})
    p.write_bytes(b"{\xff}")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_config(p, tmp_path, {})
    with pytest.raises(ConfigError, match="directory"):
        load_config(tmp_path, tmp_path, {})


def test_an_empty_config_path_is_a_usage_error_not_no_config(tmp_path):
    """Context(config="") was taken as "no config file" and load_settings answered the defaults;
    the pinned "no config" of a queue message (and an older sender's "") still means none."""
    import memindex
    from memindex.pipeline.config.settings import NO_CONFIG, Context, load_settings, pinned

    for bad in ("", "  "):
        with pytest.raises(memindex.UsageError, match="Context.config"):
            memindex.Context(config=bad)
    ws = tmp_path / "ws"
    ws.mkdir()
    s = load_settings(Context(state_dir=str(tmp_path / "state"), workspace=str(ws)), env={"HOME": str(tmp_path)})
    assert s.config_path is None and pinned(s).config == NO_CONFIG
    for wire in (pinned(s).as_dict(), {**pinned(s).as_dict(), "config": ""}):
        assert load_settings(Context.from_dict(wire), env={"HOME": str(tmp_path)}).config_path is None


def test_printing_settings_never_shows_a_key_or_header_value(tmp_path):
    """Runtimes log their settings and crash reporters capture locals: the dataclass repr
    printed every apiKey (memorySearch.remote, models.providers) and header value in clear."""
    import json
    import logging

    import memindex

    cfg = {"agents": {"defaults": {"workspace": str(tmp_path / "ws"), "memorySearch": {
        "provider": "openai", "remote": {"apiKey": "sk-CFG-aaaa1111", "baseUrl": "http://127.0.0.1:9/v1",
                                         "headers": {"X-Api-Key": "hdr-SECRET-777"}}}}},
           "models": {"providers": {"openai": {"apiKey": "sk-MODELS-bbbb2222"}}}}
    (tmp_path / "openclaw.json").write_text(json.dumps(cfg))
    settings = memindex.load_settings(memindex.Context(config=str(tmp_path / "openclaw.json"),
                                                       state_dir=str(tmp_path / "state")))
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%r %s", (settings, settings), None)
    for text in (repr(settings), str(settings), f"{settings}", record.getMessage()):
        assert "AgentSettings(" in text and "http://127.0.0.1:9/v1" in text
        for secret in ("sk-CFG-aaaa1111", "hdr-SECRET-777", "sk-MODELS-bbbb2222"):
            assert secret not in text
    assert settings.memory_search.remote.api_key == "sk-CFG-aaaa1111"  # the values themselves are kept
