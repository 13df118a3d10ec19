"""A 2026.9 config (``memory.search``, ``agents.entries.<id>``, per-agent ``memory`` blocks) is checked
as strictly as a 2026.3 one, and every key an error or warning names is spelt as the config spells it.

OpenClaw 2026.9.6's own schema (``dist/zod-schema.agent-runtime-*.mjs``): an agent entry is strict and
its ``memory`` is ``{search: MemorySearchSchema}``, strict; ``agents.entries.*.memorySearch`` is a legacy
key its doctor moves ("agents.entries.*.memorySearch moved to agents.entries.*.memory.search. Run
"openclaw doctor --fix"").
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from memindex.pipeline.config.settings import ConfigError, Context, load_settings
from tests.conftest import run_cli


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def _load(tmp_path: Path, text: str):
    cfg = _write(tmp_path / "openclaw.json", text)
    return load_settings(Context(config=str(cfg), state_dir=str(tmp_path / "state")), env={"HOME": str(tmp_path)})


def _status(tmp_path: Path, text: str):
    cfg = _write(tmp_path / "openclaw.json", text)
    (tmp_path / "ws").mkdir(exist_ok=True)
    return run_cli("--config", str(cfg), "--state-dir", str(tmp_path / "state"), "status",
                   env={"HOME": str(tmp_path)}, cwd=tmp_path, timeout=120)


V9 = '{memory: {search: {provider: "none"}}, agents: {entries: {main: {workspace: "WS", %s}}}}'


def _v9(tmp_path: Path, entry: str) -> str:
    return V9.replace("WS", str(tmp_path / "ws")) % entry


# --- B1: the per-agent memory block --------------------------------------------------------------

@pytest.mark.parametrize("entry, key, message", [
    ('memory: {serch: {provider: "local"}}', "agents.entries.main.memory.serch",
     'unknown key; did you mean "search"? (known: search)'),
    # 2026.9's agent memory block holds only search: citations is the top-level memory's
    ('memory: {citations: "bogus"}', "agents.entries.main.memory.citations", "unknown key (known: search)"),
    ('memory: {search: "none"}', "agents.entries.main.memory.search", "expected an object, got 'none'"),
    ('memory: {search: {provder: "local"}}', "agents.entries.main.memory.search.provder",
     'unknown key; did you mean "provider"?'),
])
def test_a_bad_per_agent_memory_block_is_one_error_naming_its_key(tmp_path, entry, key, message):
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, _v9(tmp_path, entry))
    assert err.value.key == key and message in str(err.value), err.value
    out = _status(tmp_path, _v9(tmp_path, entry))
    assert out.returncode == 2 and f"{key}: {message}" in out.stderr, (out.returncode, out.stderr)


def test_a_valid_per_agent_memory_block_still_loads(tmp_path):
    s = _load(tmp_path, _v9(tmp_path, 'memory: {search: {provider: "local", query: {maxResults: 3}}}'))
    assert s.memory_search.provider == "local" and s.memory_search.query.max_results == 3


# --- D5: memory.search is a known key of a 2026.9 memory block ------------------------------------

def test_a_misspelt_memory_search_is_suggested_and_listed(tmp_path):
    out = _status(tmp_path, '{memory: {serch: {provider: "none"}}, agents: {entries: {main: {}}}}')
    assert out.returncode == 2, out.stderr
    assert ('memory.serch: unknown key; did you mean "search"? (known: backend, citations, qmd, scope, search)'
            in out.stderr), out.stderr


def test_a_2026_3_config_is_not_sent_to_memory_search(tmp_path):
    """With 2026.3's keys, memory.search would be a mixed-schema error: not suggested there."""
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, '{agents: {defaults: {memorySearch: {provider: "none"}}}, memory: {serch: {}}}')
    assert err.value.key == "memory.serch" and "search" not in str(err.value).split("(known:")[1], err.value


# --- B2: 2026.3's memorySearch inside a 2026.9 agent entry ----------------------------------------

def test_memory_search_of_2026_3_in_an_agent_entry_is_the_mixed_schema_error(tmp_path):
    """It was read as the agent's settings (provider local over memory.search's none)."""
    text = _v9(tmp_path, 'memorySearch: {provider: "local"}')
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert err.value.key == "agents.entries.main.memorySearch", err.value
    assert "is OpenClaw 2026.3's key" in str(err.value) and "run `openclaw doctor --fix`" in str(err.value)
    out = _status(tmp_path, text)
    assert out.returncode == 2, out.stderr
    assert "agents.entries.main.memorySearch: is OpenClaw 2026.3's key" in out.stderr, out.stderr


# --- B4: keys in errors and warnings are spelt as the 2026.9 config spells them ------------------

def test_a_near_miss_in_a_2026_9_entry_names_its_entries_key(tmp_path, caplog):
    """It said ``agents.list[0].wrkspace``, a key the config does not have."""
    with caplog.at_level("WARNING", logger="memindex.config"):
        _load(tmp_path, '{memory: {search: {provider: "none"}}, agents: {defaults: {systemAgnet: {agentId: "main"}},'
                        ' entries: {main: {wrkspace: "/tmp"}, ops: {Memory: {}}}}}')
    text = caplog.text
    for where, want in (("agents.entries.main.wrkspace", "workspace"), ("agents.entries.ops.Memory", "memory"),
                        ("agents.defaults.systemAgnet", "systemAgent")):
        assert f"{where}: not a key memindex reads (did you mean {want}?)" in text, (where, text)
    assert "agents.list" not in text and "memorySearch" not in text, text  # never 2026.3's keys, nor normalize's


@pytest.mark.parametrize("agents, key", [
    ('{entries: {main: {workspace: 42}}}', "agents.entries.main.workspace"),
    ('{entries: {main: {default: "yes"}}}', "agents.entries.main.default"),
    ('{entries: {main: "x"}}', "agents.entries.main"),
    ('{entries: {Main: {}, main: {}}}', "agents.entries.main"),
])
def test_a_bad_2026_9_entry_is_named_by_its_entries_key(tmp_path, agents, key):
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, '{memory: {search: {provider: "none"}}, agents: %s}' % agents)
    assert err.value.key == key, err.value
    assert "agents.list" not in str(err.value), err.value


def test_a_multimodal_conflict_in_2026_9_names_no_2026_3_key(tmp_path):
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, '{memory: {search: {provider: "openai", multimodal: {enabled: true}}},'
                        ' agents: {entries: {main: {}}}}')
    assert err.value.key == "memory.search.multimodal.enabled" and 'provider is "openai"' in str(err.value)
    assert "memorySearch" not in str(err.value), err.value


# --- the range table applies to 2026.9's keys too -------------------------------------------------

TOP = "memory: {search: {provider: 'none', %s}}, agents: {entries: {main: {}}}"
PER_AGENT = "memory: {search: {provider: 'none'}}, agents: {entries: {main: {memory: {search: {%s}}}}}"


@pytest.mark.parametrize("where", [TOP, PER_AGENT])
@pytest.mark.parametrize("setting, leaf, expected", [
    ("query: {maxResults: 5000}", "query.maxResults", "expected a number from 1 to 1,000, got 5000"),
    ("outputDimensionality: 100000000", "outputDimensionality", "expected a number from 1 to 16,384"),
    ("query: {hybrid: {temporalDecay: {halfLifeDays: 100000}}}", "query.hybrid.temporalDecay.halfLifeDays",
     "expected a number from 1 to 36,500"),
])
def test_a_2026_9_value_outside_its_range_is_refused(tmp_path, where, setting, leaf, expected):
    """``memory.search.query.maxResults: 5000`` was taken: the table was only looked up for 2026.3's paths."""
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, "{" + where % setting + "}")
    prefix = "memory.search" if where == TOP else "agents.entries.main.memory.search"
    assert err.value.key == f"{prefix}.{leaf}" and expected in str(err.value), err.value


# --- B5: a fractional value of an integer setting is refused, never truncated ---------------------

def _integer_leaves(schema: dict, prefix: str) -> list[str]:
    """Schema paths whose check turns a whole float into an int: the integer settings."""
    from memindex.pipeline.config import ranges
    from memindex.pipeline.config.settings import F, Ignored

    out = []
    for k, sub in schema.items():
        path = f"{prefix}.{k}"
        sub = sub.schema if isinstance(sub, Ignored) else sub
        if isinstance(sub, dict):
            out += _integer_leaves(sub, path)
            continue
        check = sub.check if isinstance(sub, F) else sub
        lo = (ranges.bounds(path) or (None, None))[0]
        try:
            if type(check(path, float(max(1, math.ceil(lo or 0))))) is int:
                out.append(path)
        except Exception:  # noqa: BLE001 - not an integer's key
            pass
    return out


def _integer_settings() -> list[str]:
    from memindex.pipeline.config.settings import MEMORY, MEMORY_SEARCH

    return _integer_leaves(MEMORY_SEARCH, "memory.search") + _integer_leaves(MEMORY, "memory")


def _fractional(key: str) -> float:
    """A fractional value inside ``key``'s range (so only its fraction is wrong)."""
    from memindex.pipeline.config import ranges

    lo, hi = ranges.bounds(key) or (None, None)
    value = (lo or 0) + 1.5
    assert hi is None or value < hi, key
    return value


def test_the_integer_settings_are_found():
    keys = _integer_settings()
    for key in ("memory.search.query.maxResults", "memory.search.chunking.tokens", "memory.search.chunking.overlap",
                "memory.search.outputDimensionality", "memory.search.local.maxInputTokens",
                "memory.qmd.update.interval", "memory.qmd.limits.maxResults"):
        assert key in keys, keys


@pytest.mark.parametrize("key", _integer_settings())
def test_a_fractional_value_of_any_integer_setting_is_one_error_naming_it(tmp_path, key):
    head, *rest = key.split(".")
    node: dict = {}
    leaf = node
    for part in rest[:-1]:
        leaf = leaf.setdefault(part, {})
    value = _fractional(key)
    leaf[rest[-1]] = value
    cfg = {"memory": node, "agents": {"entries": {"main": {}}}}
    cfg["memory"].setdefault("search", {}).setdefault("provider", "none")
    if key == "memory.search.chunking.overlap":
        cfg["memory"]["search"]["chunking"]["tokens"] = 400
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, json.dumps(cfg))
    assert err.value.key == key and str(value) in str(err.value), err.value
    assert "expected" in str(err.value) and "integer" in str(err.value) or "whole number" in str(err.value)


def test_whole_floats_are_the_integer_and_fractions_through_the_cli_are_refused(tmp_path):
    s = _load(tmp_path, '{memory: {search: {provider: "none", query: {maxResults: 3.0},'
                        ' chunking: {tokens: 50.0, overlap: 5.0}}}, agents: {entries: {main: {}}}}')
    assert (s.memory_search.query.max_results, s.chunk_tokens, s.chunk_overlap) == (3, 50, 5)
    assert type(s.memory_search.query.max_results) is int
    for setting, key, shown in (("query: {maxResults: 2.5}", "memory.search.query.maxResults", "2.5"),
                                ("chunking: {tokens: 50.7, overlap: 0.5}", "memory.search.chunking.tokens", "50.7")):
        out = _status(tmp_path, '{memory: {search: {provider: "none", %s}}, agents: {entries: {main: {}}}}' % setting)
        assert out.returncode == 2 and f"{key}: expected an integer, got {shown}" in out.stderr, out.stderr
    with pytest.raises(ConfigError) as err:  # a 2026.3 config the same
        _load(tmp_path, '{agents: {defaults: {memorySearch: {chunking: {overlap: 0.5}}}}}')
    assert err.value.key == "agents.defaults.memorySearch.chunking.overlap", err.value
    with pytest.raises(ConfigError) as err:  # and memoryFlush's, by the same check
        _load(tmp_path, '{agents: {defaults: {compaction: {memoryFlush: {softThresholdTokens: 4000.5}}}}}')
    assert err.value.key == "agents.defaults.compaction.memoryFlush.softThresholdTokens", err.value


# --- B3: hints name the keys of the config's own schema -------------------------------------------

from memindex.pipeline.embeddings.hints import failure_hint  # noqa: E402
from tests.conftest import module_server  # noqa: E402
from tests.provider_server import ProviderServer  # noqa: E402

server = module_server(ProviderServer)
FAST = {"MEMINDEX_RETRY_BASE_DELAY_S": "0.01", "MEMINDEX_RETRY_ATTEMPTS": "1"}


def _index(tmp_path: Path, cfg: dict, env: dict | None = None):
    _write(tmp_path / "ws" / "memory" / "note.md", "# Note\nThe quokka runbook lives in the ops wiki.\n")
    path = _write(tmp_path / "openclaw.json", cfg)
    return run_cli("--config", str(path), "--state-dir", str(tmp_path / "state"), "index",
                   env={"HOME": str(tmp_path), "OPENAI_API_KEY": "", **FAST, **(env or {})}, cwd=tmp_path,
                   timeout=120)


def _v9_cfg(tmp_path: Path, search: dict, agent_search: dict | None = None) -> dict:
    entry: dict = {"workspace": str(tmp_path / "ws")}
    if agent_search is not None:
        entry["memory"] = {"search": agent_search}
    return {"memory": {"search": search}, "agents": {"entries": {"main": entry}}}


def test_a_third_party_base_url_without_its_key_names_only_remote_api_key_in_2026_9_spelling(tmp_path):
    """It said "set memorySearch.remote.apiKey, models.providers.openai.apiKey or OPENAI_API_KEY": the
    env key is never sent there, and memorySearch in a 2026.9 config is the mixed-schema error."""
    top = _v9_cfg(tmp_path, {"provider": "openai", "remote": {"baseUrl": "http://127.0.0.1:18765/v1"}})
    out = _index(tmp_path, top, {"OPENAI_API_KEY": "sk-env-never-sent"})
    assert "warning: main: openai: no API key (set memory.search.remote.apiKey); keyword search only" in out.stderr, \
        out.stderr
    per_agent = _v9_cfg(tmp_path, {"provider": "openai"}, {"remote": {"baseUrl": "http://127.0.0.1:18765/v1"}})
    out = _index(tmp_path, per_agent, {"OPENAI_API_KEY": "sk-env-never-sent"})
    assert ("openai: no API key (set agents.entries.main.memory.search.remote.apiKey); keyword search only"
            in out.stderr), out.stderr
    # the provider's own endpoint: every place a key can come from, in 2026.9 spelling
    out = _index(tmp_path, _v9_cfg(tmp_path, {"provider": "openai"}))
    assert ("openai: no API key (set memory.search.remote.apiKey, models.providers.openai.apiKey or OPENAI_API_KEY)"
            in out.stderr), out.stderr


def test_a_rejected_key_hint_names_the_key_where_the_config_sets_it(tmp_path, server):
    server.reset()
    server.state.keys["openai"] = "sk-right"
    remote = {"baseUrl": server.base("openai"), "apiKey": "sk-wrong"}
    out = _index(tmp_path, _v9_cfg(tmp_path, {"provider": "openai", "fallback": "none", "remote": remote}))
    line = next((ln for ln in out.stderr.splitlines() if ln.startswith("error: main:")), out.stderr)
    assert "openai rejected the API key" in line and line.endswith("(check the API key: memory.search.remote.apiKey)"), \
        out.stderr
    out = _index(tmp_path, _v9_cfg(tmp_path, {"provider": "openai", "fallback": "none"}, {"remote": remote}))
    line = next((ln for ln in out.stderr.splitlines() if ln.startswith("error: main:")), out.stderr)
    assert line.endswith("(check the API key: agents.entries.main.memory.search.remote.apiKey)"), out.stderr


def test_a_connection_hint_names_the_base_url_only_where_one_is_configured(tmp_path):
    reason = "openai: request connection failed (https://api.openai.com/v1/embeddings): APIConnectionError"
    own = _load(tmp_path, json.dumps(_v9_cfg(tmp_path, {"provider": "openai"})))
    assert failure_hint(reason, "openai", own) == "the provider kept failing; check the network and openai's status"
    proxied = _load(tmp_path, json.dumps(_v9_cfg(tmp_path, {"provider": "openai"},
                                                 {"remote": {"baseUrl": "https://proxy.example/v1"}})))
    assert failure_hint(reason, "openai", proxied) == ("the provider kept failing; check "
                                                       "agents.entries.main.memory.search.remote.baseUrl and the "
                                                       "provider's status")
    via_models = _load(tmp_path, json.dumps({**_v9_cfg(tmp_path, {"provider": "openai"}),
                                             "models": {"providers": {"openai": {"baseUrl": "https://p.example/v1"}}}}))
    assert "check models.providers.openai.baseUrl and" in failure_hint(reason, "openai", via_models)
    for hint in (failure_hint(r, "openai", proxied) for r in ("openai: model not found: x", "inconsistent vector dims",
                                                              "openai: rate limited (429)")):
        assert "memorySearch" not in hint and "memory.search." in hint, hint
    # a 2026.3 config keeps the keys its docs name
    old = _load(tmp_path, '{agents: {defaults: {memorySearch: {provider: "openai", '
                          'remote: {baseUrl: "https://proxy.example/v1"}}}}}')
    assert "check memorySearch.remote.baseUrl and" in failure_hint(reason, "openai", old)


# --- what OpenClaw 2026.9 refuses in a config written for it is refused here too -------------------
# (2026.9.6's `openclaw config validate`: `<root>: Unrecognized key: "memorySearch"`, `agents:
# Unrecognized key: "list"`, `memory.search: Unrecognized key: "chunkSize"`; its doctor moves each.)

DOCTOR = "run `openclaw doctor --fix` (2026.9) to move it"


@pytest.mark.parametrize("text, key, message", [
    # ignored: memory.search's provider none held, the top-level block said nothing
    ('{memorySearch: {provider: "local"}, memory: {search: {provider: "none"}}, agents: {entries: {main: {}}}}',
     "memorySearch", "moved to memory.search in OpenClaw 2026.9, which this config is written for "
                     f"(agents.entries, memory.search); {DOCTOR}"),
    ('{memorySearch: {provider: "local"}, meta: {lastTouchedVersion: "2026.9.6"}}',
     "memorySearch", "moved to memory.search in OpenClaw 2026.9, which this config is written for "
                     f"(meta.lastTouchedVersion 2026.9.6); {DOCTOR}"),
    # replaced: the entries were the roster, the list's agents unknown without a word
    ('{memory: {search: {provider: "none"}}, agents: {entries: {main: {}}, list: [{id: "work"}]}}',
     "agents.list", "moved to agents.entries in OpenClaw 2026.9, and the config has agents.entries too (the list "
                    "would be ignored): move its agents into agents.entries (`openclaw doctor --fix` keeps "
                    "agents.entries and drops the list)"),
    # were "unknown key; did you mean "chunking"?" and "unknown key (known: ...)", no word of the nested key
    ('{memory: {search: {provider: "none", chunkSize: 300}}, agents: {entries: {main: {}}}}',
     "memory.search.chunkSize", f"is a flat key OpenClaw 2026.9 refuses: use memory.search.chunking.tokens; {DOCTOR}"),
    ('{memory: {search: {provider: "none", chunkOverlap: 20}}, agents: {entries: {main: {}}}}',
     "memory.search.chunkOverlap",
     f"is a flat key OpenClaw 2026.9 refuses: use memory.search.chunking.overlap; {DOCTOR}"),
    ('{memory: {search: {provider: "none"}}, agents: {entries: {main: {memory: {search: {maxResults: 3}}}}}}',
     "agents.entries.main.memory.search.maxResults",
     f"is a flat key OpenClaw 2026.9 refuses: use agents.entries.main.memory.search.query.maxResults; {DOCTOR}"),
])
def test_a_key_openclaw_2026_9_refuses_is_one_error_naming_it_with_the_doctor_fix(tmp_path, text, key, message):
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert err.value.key == key and message in str(err.value), err.value
    out = _status(tmp_path, text)
    assert out.returncode == 2 and f"{key}: {message}" in out.stderr, (out.returncode, out.stderr)


def test_an_agents_list_alone_in_a_2026_9_config_is_the_roster_as_openclaw_moves_it(tmp_path):
    """OpenClaw 2026.9.6 loads it ("Moved agents.list to keyed agents.entries.", then answers): it is
    not refused as the list beside agents.entries is (checked with the real CLI)."""
    s = _load(tmp_path, '{memory: {search: {provider: "none"}}, agents: {list: [{id: "work"}]}}')
    assert s.agent_id == "work"


def test_the_2026_3_keys_stay_as_they_were_in_a_2026_3_config(tmp_path):
    """Only a 2026.9 config is refused: 2026.3 keeps agents.list, and its flat keys are unknown keys."""
    s = _load(tmp_path, '{agents: {defaults: {memorySearch: {provider: "none"}}, list: [{id: "work"}]}}')
    assert s.agent_id == "work"
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, '{agents: {defaults: {memorySearch: {provider: "none", chunkSize: 300}}}}')
    assert err.value.key == "agents.defaults.memorySearch.chunkSize" and "unknown key" in str(err.value), err.value


# --- every message names the setting as the config spells it (AgentSettings.keys) -------------------

def _run(tmp_path: Path, cfg: dict, *args: str, env: dict | None = None):
    _write(tmp_path / "ws" / "memory" / "note.md", "# Note\nThe quokka runbook lives in the ops wiki.\n")
    path = _write(tmp_path / "openclaw.json", cfg)
    return run_cli("--config", str(path), "--state-dir", str(tmp_path / "state"), *args,
                   env={"HOME": str(tmp_path), "MEMINDEX_STORE_PATH": "", **(env or {})}, cwd=tmp_path, timeout=120)


def _v3_cfg(tmp_path: Path, search: dict) -> dict:
    return {"agents": {"defaults": {"workspace": str(tmp_path / "ws"), "memorySearch": search}}}


def _error_line(out) -> str:
    return next((ln for ln in out.stderr.splitlines() if ln.startswith("error:")), out.stderr)


@pytest.mark.parametrize("where, key", [
    ("top", "memory.search.extraPaths"), ("agent", "agents.entries.main.memory.search.extraPaths"),
    ("2026.3", "memorySearch.extraPaths")])
def test_a_too_broad_extra_path_names_its_key(tmp_path, where, key):
    """It said memorySearch.extraPaths in a 2026.9 config."""
    search = {"provider": "none", "extraPaths": ["/"]}
    cfg = (_v3_cfg(tmp_path, search) if where == "2026.3" else _v9_cfg(tmp_path, search) if where == "top"
           else _v9_cfg(tmp_path, {"provider": "none"}, {"extraPaths": ["/"]}))
    out = _run(tmp_path, cfg, "index")
    assert out.returncode == 2, out.stderr
    assert _error_line(out) == (f"error: invalid config: {key}: '/' is too broad (the filesystem root, the home "
                                "directory or the state dir); name a narrower directory, or set "
                                "MEMINDEX_ALLOW_BROAD_EXTRA_PATHS=1"), out.stderr


@pytest.mark.parametrize("where, setting", [
    ("top", "memory.search.store.path"), ("agent", "agents.entries.main.memory.search.store.path"),
    ("env", "MEMINDEX_STORE_PATH"), ("2026.3", "memorySearch.store.path")])
def test_a_store_path_that_is_a_directory_names_the_setting_that_set_it(tmp_path, where, setting):
    """It said "point memorySearch.store.path at a file" whatever set the path, in either schema."""
    store = tmp_path / "storedir"
    store.mkdir()
    search = {"provider": "none", "store": {"path": str(store)}}
    cfg = {"2026.3": _v3_cfg(tmp_path, search), "top": _v9_cfg(tmp_path, search),
           "agent": _v9_cfg(tmp_path, {"provider": "none"}, {"store": {"path": str(store)}}),
           "env": _v9_cfg(tmp_path, {"provider": "none"})}[where]
    env = {"MEMINDEX_STORE_PATH": str(store)} if where == "env" else {}
    line = (f"the store path {store} is a directory, not a SQLite file: point {setting} at a file "
            "(e.g. {agentId}.sqlite) or move the directory")
    out = _run(tmp_path, cfg, "index", env=env)
    assert out.returncode == 1 and _error_line(out) == f"error: {line}", out.stderr
    out = _run(tmp_path, cfg, "status", env=env)  # (the reader's open: the same setting)
    assert f"problem:      {store}: {line}" in out.stdout, out.stdout


def test_a_store_path_under_a_file_names_the_2026_9_key(tmp_path):
    """It said "check --state-dir / memorySearch.store.path"."""
    (tmp_path / "afile").write_text("x\n")
    store = tmp_path / "afile" / "{agentId}.sqlite"
    for cfg, key in ((_v9_cfg(tmp_path, {"provider": "none"}, {"store": {"path": str(store)}}),
                      "agents.entries.main.memory.search.store.path"),
                     (_v3_cfg(tmp_path, {"provider": "none", "store": {"path": str(store)}}), "memorySearch.store.path")):
        out = _run(tmp_path, cfg, "index")
        assert out.returncode == 1, out.stderr
        assert _error_line(out) == (f"error: cannot write the store {tmp_path / 'afile' / 'main.sqlite'}: "
                                    f"{tmp_path / 'afile'} is a file, not a directory (check --state-dir / {key})"), \
            out.stderr


def test_a_store_path_at_openclaw_2026_9s_index_is_not_said_to_be_its_key(tmp_path):
    """2026.9 keeps its index in the agent database and refuses store.path: "memorySearch.store.path
    is its key too" was 2026.3's reason, wrong in both words here."""
    cfg = _v9_cfg(tmp_path, {"provider": "none", "store": {"path": "agents/{agentId}/agent/openclaw-agent.sqlite"}})
    out = _run(tmp_path, cfg, "status")
    assert out.returncode == 0, out.stderr
    assert ("openclaw:     the same file is OpenClaw's index path (memory.search.store.path points memindex at it): "
            "set MEMINDEX_STORE_PATH to a file of memindex's own") in out.stdout, out.stdout
    [entry] = json.loads(_run(tmp_path, cfg, "status", "--json").stdout)
    assert entry["status"]["openclawIndex"]["setting"] == "memory.search.store.path", entry["status"]
    # 2026.3: the one key names both files, said as before
    out = _run(tmp_path, _v3_cfg(tmp_path, {"provider": "none", "store": {"path": "memory/{agentId}.sqlite"}}), "status")
    assert ("openclaw:     the same file is OpenClaw's index path (memorySearch.store.path is its key too): "
            "set MEMINDEX_STORE_PATH to run memindex beside OpenClaw") in out.stdout, out.stdout


@pytest.mark.parametrize("where, key", [
    ("top", "memory.search.experimental.sessionMemory"),
    ("agent", "agents.entries.main.memory.search.experimental.sessionMemory"),
    ("2026.3", "memorySearch.experimental.sessionMemory")])
def test_a_sessions_corpus_that_is_not_indexed_names_the_key_that_indexes_it(tmp_path, where, key):
    """It said memorySearch.experimental.sessionMemory; and every 2026.9 agent read as setting it in
    its own block (normalize writes its source policy into every entry)."""
    off = {"rememberAcrossConversations": False}
    cfg = (_v3_cfg(tmp_path, {"provider": "none"}) if where == "2026.3"
           else _v9_cfg(tmp_path, {"provider": "none", **off}) if where == "top"
           else _v9_cfg(tmp_path, {"provider": "none"}, {**off, "experimental": {"sessionMemory": False}}))
    out = _run(tmp_path, cfg, "search", "--corpus", "sessions", "quokka")
    assert out.returncode == 0, out.stderr
    assert (f"note: sessions are not indexed for agent 'main' (session search needs {key} and \"sessions\" in "
            "sources)") in out.stderr, out.stderr


def test_only_what_the_agents_own_block_sets_is_named_as_its_key(tmp_path):
    s = _load(tmp_path, json.dumps(_v9_cfg(tmp_path, {"provider": "none"}, {"query": {"maxResults": 3}})))
    assert s.keys.key("query.maxResults") == "agents.entries.main.memory.search.query.maxResults"
    for leaf in ("sources", "searchSources", "experimental.sessionMemory", "remote.apiKey"):
        assert s.keys.key(leaf) == f"memory.search.{leaf}", leaf


@pytest.mark.parametrize("cfg_of, want", [
    (lambda p: _v9_cfg(p, {"provider": "openai"}), "memory.search.remote.batch.enabled"),
    (lambda p: _v9_cfg(p, {"provider": "openai", "remote": {"batch": {"enabled": True}}},
                       {"remote": {"batch": {"enabled": False}}}),
     "agents.entries.main.memory.search.remote.batch.enabled"),
    (lambda p: _v3_cfg(p, {"provider": "openai"}),
     "agents.defaults.memorySearch.remote.batch.enabled (or the agent's memorySearch.remote.batch.enabled)"),
])
def test_backfill_batch_with_batches_off_names_the_key_to_set(tmp_path, cfg_of, want):
    """It said "set agents.defaults.memorySearch.remote.batch.enabled (or the agent's ...)" in 2026.9."""
    out = _run(tmp_path, cfg_of(tmp_path), "backfill", "--batch")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == f"error: main: batch APIs are off; set {want} to true", out.stderr


def test_a_compute_host_without_the_config_keeps_the_2026_9_rules(tmp_path, server, monkeypatch):
    """A compute host that cannot read the config built its settings from the message alone, as a
    2026.3 config's: its own OPENAI_API_KEY went to a remote.baseUrl 2026.9 never sends it to (the
    file side refused), and its hints said memorySearch.*. The message carries the schema and keys."""
    import msgspec

    from memindex.pipeline.config.settings import pinned
    from memindex.pipeline.embeddings.embedder import provider_info, reset_services
    from memindex.workers.compute import compute_spec, settings_from_spec
    from memindex.workers.wire import ComputeSpec

    server.reset()
    reset_services()
    cfg = _v9_cfg(tmp_path, {"provider": "openai", "fallback": "none"},
                  {"remote": {"baseUrl": server.base("openai")}})
    settings = _load(tmp_path, json.dumps(cfg))
    sent = msgspec.json.decode(msgspec.json.encode(compute_spec(settings)), type=ComputeSpec)  # as it travels
    elsewhere = settings_from_spec(msgspec.structs.replace(sent, config=str(tmp_path / "not-on-this-host.json")),
                                   pinned(settings))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-compute-env-never-sent")
    assert provider_info(elsewhere)["reason"] == ("openai: no API key (set "
                                                  "agents.entries.main.memory.search.remote.apiKey); keyword search only")
    assert not server.log_for("openai")
    assert elsewhere.keys == settings.keys and elsewhere.config_schema == settings.config_schema
    # a message of an older sender (no schema, no keys) is read as before
    old = settings_from_spec(msgspec.structs.replace(sent, config=None, config_schema="", keys=None), pinned(settings))
    assert old.keys.key("remote.apiKey") == "memorySearch.remote.apiKey"
    reset_services()
