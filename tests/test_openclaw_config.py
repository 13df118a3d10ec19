"""OpenClaw drop-in (issue 14, part A): agents, paths and config loading as OpenClaw does them.

Each resolution rule is stated next to the OpenClaw function it mirrors; the
CLI tests run ``python -m memindex`` from a directory that is not the repo.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memindex.pipeline.config.settings import ConfigError, Context, load_settings, resolve_agent
from memindex.pipeline.errors import UsageError
from tests.conftest import Agent, run_cli, start_workers


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


# --- resolution rules, table-driven ------------------------------------------------------------

H = "/h"  # HOME in every row below; OPENCLAW_* variables are added per row
TWO = {"agents": {"list": [{"id": "main"}, {"id": "ops"}]}}
DEF = {"agents": {"defaults": {"workspace": "/ws"}, "list": [{"id": "main"}, {"id": "ops"}]}}

RULES = [
    # (mirrors, cfg, --agent, extra env, field, expected)
    ("resolveAgentWorkspaceDir: the agent's own workspace",
     {"agents": {"list": [{"id": "ops", "workspace": "/own"}]}}, "ops", {}, "workspace", "/own"),
    ("resolveAgentWorkspaceDir: '~' in a workspace is the OpenClaw home (resolveUserPath)",
     {"agents": {"list": [{"id": "ops", "workspace": "~/w"}]}}, "ops", {"OPENCLAW_HOME": "/oh"}, "workspace", "/oh/w"),
    ("resolveAgentWorkspaceDir: default agent -> agents.defaults.workspace", DEF, "main", {}, "workspace", "/ws"),
    ("resolveAgentWorkspaceDir (2026.3.28, recorded): other agent -> <state dir>/workspace-<agentId>, whatever "
     "agents.defaults.workspace says", DEF, "ops", {}, "workspace", "/h/.openclaw/workspace-ops"),
    ("resolveAgentWorkspaceDir (2026.9): other agent -> <agents.defaults.workspace>/<agentId>",
     {"agents": {"defaults": {"workspace": "/ws"}, "entries": {"main": {"default": True}, "ops": {}}}}, "ops", {},
     "workspace", "/ws/ops"),
    ("resolveDefaultAgentWorkspaceDir: default agent -> ~/.openclaw/workspace", {}, "main", {},
     "workspace", f"{H}/.openclaw/workspace"),
    ("resolveDefaultAgentWorkspaceDir: OPENCLAW_PROFILE -> workspace-<profile>", {}, "main",
     {"OPENCLAW_PROFILE": "work"}, "workspace", f"{H}/.openclaw/workspace-work"),
    ("resolveDefaultAgentWorkspaceDir: profile 'default' is the plain workspace", {}, "main",
     {"OPENCLAW_PROFILE": "Default"}, "workspace", f"{H}/.openclaw/workspace"),
    ("resolveDefaultAgentWorkspaceDir: OPENCLAW_STATE_DIR does not move the default workspace", {}, "main",
     {"OPENCLAW_STATE_DIR": "/state"}, "workspace", f"{H}/.openclaw/workspace"),
    ("resolveDefaultAgentWorkspaceDir: OPENCLAW_HOME does", {}, "main", {"OPENCLAW_HOME": "/oh"},
     "workspace", "/oh/.openclaw/workspace"),
    ("resolveAgentWorkspaceDir: other agent -> <state dir>/workspace-<agentId>", TWO, "ops", {},
     "workspace", f"{H}/.openclaw/workspace-ops"),
    ("resolveAgentWorkspaceDir + resolveStateDir: ... under OPENCLAW_STATE_DIR", TWO, "ops",
     {"OPENCLAW_STATE_DIR": "/state"}, "workspace", "/state/workspace-ops"),
    ("resolveStateDir: OPENCLAW_STATE_DIR", {}, "main", {"OPENCLAW_STATE_DIR": "/state"}, "state_dir", "/state"),
    ("resolveStateDir: <OPENCLAW_HOME>/.openclaw", {}, "main", {"OPENCLAW_HOME": "/oh"}, "state_dir",
     "/oh/.openclaw"),
    ("resolveStateDir: <HOME>/.openclaw", {}, "main", {}, "state_dir", f"{H}/.openclaw"),
    ("resolveDefaultAgentId: the entry with default: true",
     {"agents": {"list": [{"id": "a"}, {"id": "b", "default": True}]}}, None, {}, "agent_id", "b"),
    ("resolveDefaultAgentId: else the first entry", {"agents": {"list": [{"id": "a"}, {"id": "main"}]}}, None, {},
     "agent_id", "a"),
    ("resolveDefaultAgentId: else main", {}, None, {}, "agent_id", "main"),
    ("normalizeAgentId: ids are lower-cased", {"agents": {"list": [{"id": "Work"}]}}, "WORK", {}, "agent_id", "work"),
    ("normalizeAgentId: other characters collapse to '-'", {"agents": {"list": [{"id": "My Agent!"}]}}, "my-agent",
     {}, "agent_id", "my-agent"),
    ("agents.defaults.workspace is only the default agent's: 'Work' (default) gets it as is",
     {"agents": {"defaults": {"workspace": "/ws"}, "list": [{"id": "Work"}, {"id": "b"}]}}, "work", {},
     "workspace", "/ws"),
    ("memindex's store: <state dir>/memindex/<agentId>.sqlite (not OpenClaw's <state>/memory/<agentId>.sqlite)",
     {"agents": {"list": [{"id": "Ops"}]}}, "ops", {"OPENCLAW_STATE_DIR": "/state"}, "store_path",
     "/state/memindex/ops.sqlite"),
    ("OpenClaw 2026.3's own index: <state dir>/memory/<id as configured>.sqlite (recorded: Beta.sqlite)",
     {"agents": {"list": [{"id": "Ops"}]}}, "ops", {"OPENCLAW_STATE_DIR": "/state"}, "openclaw_store",
     "/state/memory/Ops.sqlite"),
]


@pytest.mark.parametrize("mirrors, cfg, agent, extra, field, expected", RULES, ids=[r[0] for r in RULES])
def test_resolution_rule(mirrors, cfg, agent, extra, field, expected):
    s = resolve_agent(cfg, agent, env={"HOME": H, **extra})
    got = getattr(s, field)
    assert str(got) == expected, mirrors


@pytest.mark.parametrize("bad", ["../../x", "/abs", "a/b", "", " ", "..", "a\\b"])
def test_path_like_agent_ids_are_refused(tmp_path, bad):
    # At the Context (a UsageError, as Context(state_dir="") is), before load_settings could look.
    with pytest.raises(UsageError, match="invalid agent id"):
        load_settings(Context(bad, state_dir=str(tmp_path)), env={"HOME": str(tmp_path)})
    assert not (tmp_path / "memory").exists()


def test_configured_ids_that_look_like_paths_stay_inside_their_roots(tmp_path):
    # A configured id is normalised (never refused: OpenClaw would run it), so it can never escape.
    s = resolve_agent({"agents": {"list": [{"id": "../../etc"}]}}, None, state_dir=tmp_path, env={"HOME": "/h"})
    assert s.agent_id == "etc"
    assert s.store_path == tmp_path / "memindex" / "etc.sqlite"
    assert s.sessions_dir == tmp_path / "agents" / "etc" / "sessions"


def test_unknown_agent_names_the_configured_ones(tmp_path):
    cfg = {"agents": {"list": [{"id": "main"}, {"id": "ops"}]}}
    with pytest.raises(ConfigError, match="unknown agent 'nosuch'; configured: main, ops"):
        resolve_agent(cfg, "nosuch", state_dir=tmp_path)
    with pytest.raises(ConfigError, match="configured: main"):  # no agents.list: only main exists
        resolve_agent({}, "nosuch", state_dir=tmp_path)


@pytest.mark.parametrize("env, expected", [
    ({"HOME": "/h", "USERPROFILE": "/u"}, "/h"),
    ({"HOME": " ", "USERPROFILE": "/u"}, "/u"),  # blank is unset (normalize)
    ({"HOME": "undefined"}, "cwd"),  # a shell placeholder is no home (normalizeHomeValue)
    ({"HOME": ""}, "cwd"),  # Node's os.homedir() is "" then: the cwd, never "/"
    ({"HOME": "", "OPENCLAW_HOME": "~/oc"}, "cwd"),  # '~' with no OS home to stand for
    ({"HOME": "", "OPENCLAW_HOME": "/oc"}, "/oc"),
    ({"HOME": "/h", "OPENCLAW_HOME": "~"}, "/h"),
])
def test_resolve_required_home_dir(tmp_path, monkeypatch, env, expected):
    from memindex.pipeline.config.paths import resolve_home

    monkeypatch.chdir(tmp_path)
    assert resolve_home(env) == (tmp_path.resolve() if expected == "cwd" else Path(expected))
    if expected == "cwd":
        assert resolve_agent({}, None, env=env).state_dir == tmp_path.resolve() / ".openclaw"


def test_home_unset_is_the_os_users_home():
    import pwd

    from memindex.pipeline.config.paths import resolve_home

    assert resolve_home({}) == Path(pwd.getpwuid(os.getuid()).pw_dir).resolve()


# --- the same through the CLI ------------------------------------------------------------------

def _cli(cwd: Path, env: dict, *args: str):
    return run_cli(*args, env=env, cwd=cwd, timeout=180)


def test_two_agents_without_workspace_index_two_workspaces(tmp_path):
    home, state = tmp_path / "home", tmp_path / "state"
    cfg = _write(state / "openclaw.json", {"agents": {"defaults": {"memorySearch": {"provider": "none"}},
                                                      "list": [{"id": "main"}, {"id": "Ops"}]}})
    _write(home / ".openclaw" / "workspace" / "MEMORY.md", "main keeps the quokka runbook\n")
    _write(state / "workspace-ops" / "MEMORY.md", "ops keeps the pangolin runbook\n")
    env = {"HOME": str(home)}
    base = ("--config", str(cfg), "--state-dir", str(state))
    for agent in ("main", "ops"):
        out = _cli(tmp_path, env, *base, "--agent", agent, "index")
        assert out.returncode == 0, out.stderr

    def found(agent: str, word: str) -> bool:
        out = _cli(tmp_path, env, *base, "--agent", agent, "search", "--json", word)
        assert out.returncode == 0, out.stderr
        return "MEMORY.md" in out.stdout and word in out.stdout

    assert found("main", "quokka") and not found("main", "pangolin")
    assert found("ops", "pangolin") and not found("ops", "quokka")
    assert (state / "memindex" / "main.sqlite").exists() and (state / "memindex" / "ops.sqlite").exists()

    out = _cli(tmp_path, env, *base, "--agent", "nosuch", "index")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "unknown agent 'nosuch'; configured: main, ops" in out.stderr
    assert not (state / "memindex" / "nosuch.sqlite").exists()


@pytest.mark.parametrize("b_store", [{"path": "memindex/b.sqlite"}, None], ids=["both-set", "b-default"])
def test_two_agents_naming_one_store_are_refused(tmp_path, b_store):
    """helper-71: `a` with store.path memory/b.sqlite was accepted when `b` had no store.path (its
    default is that very file): every index rebuilt both, and `a`'s status showed b's store."""
    state = tmp_path / "state"
    b = {"id": "b", **({"memorySearch": {"store": b_store}} if b_store else {})}
    cfg = _write(state / "openclaw.json", {"agents": {"defaults": {"memorySearch": {"provider": "none"}}, "list": [
        {"id": "a", "memorySearch": {"store": {"path": "memindex/b.sqlite"}}}, b]}})
    with pytest.raises(ConfigError, match=r"agents 'a' and 'b' would share the store .*b\.sqlite"):
        load_settings(Context("a", str(cfg), str(state)), env={"HOME": str(tmp_path)})
    if b_store:  # both name the file: each is refused
        with pytest.raises(ConfigError, match="agents 'b' and 'a' would share"):
            load_settings(Context("b", str(cfg), str(state)), env={"HOME": str(tmp_path)})
    else:  # the file is b's by default: b keeps it, a (which named it) is refused
        assert load_settings(Context("b", str(cfg), str(state)), env={"HOME": str(tmp_path)}).store_path == \
            state / "memindex" / "b.sqlite"


def test_an_index_built_from_another_workspace_is_never_served_under_the_agents_name(tmp_path):
    """`--agent main --workspace <ops' workspace> index` filled main's store with ops' files, and
    a plain `--agent main search` then answered ops' secrets as main's MEMORY.md; `status` said
    nothing (found by a user trial; `mcp --workspace` did the same)."""
    home, state = tmp_path / "home", tmp_path / "state"
    cfg = _write(state / "openclaw.json", {"agents": {"defaults": {"memorySearch": {"provider": "none"}},
                                                      "list": [{"id": "main"}, {"id": "ops"}]}})
    _write(home / ".openclaw" / "workspace" / "MEMORY.md", "main keeps the quokka runbook\n")
    ops_ws = state / "workspace-ops"
    _write(ops_ws / "MEMORY.md", "ops keeps the ZANZIBAR codeword\n")
    env = {"HOME": str(home)}
    base = ("--config", str(cfg), "--state-dir", str(state), "--agent", "main")
    assert _cli(tmp_path, env, *base, "index").returncode == 0
    out = _cli(tmp_path, env, *base, "--workspace", str(ops_ws), "index")
    assert out.returncode == 0, out.stderr
    out = _cli(tmp_path, env, *base, "search", "--json", "ZANZIBAR")
    assert out.returncode == 0 and json.loads(out.stdout)["results"] == [], out.stdout
    assert str(ops_ws) in json.loads(out.stdout)["warning"]
    st = json.loads(_cli(tmp_path, env, *base, "status", "--json").stdout)[0]["status"]
    assert st["dirty"] is True and str(ops_ws) in st["configChanged"], st
    # The next sync with the agent's own workspace rebuilds; its own notes answer again.
    assert _cli(tmp_path, env, *base, "index").returncode == 0
    out = json.loads(_cli(tmp_path, env, *base, "search", "--json", "quokka").stdout)
    assert [r["path"] for r in out["results"]] == ["MEMORY.md"] and "warning" not in out, out
    assert json.loads(_cli(tmp_path, env, *base, "search", "--json", "ZANZIBAR").stdout)["results"] == []


def test_default_true_picks_the_default_agent(tmp_path):
    home, state = tmp_path / "home", tmp_path / "state"
    cfg = _write(state / "openclaw.json", {"agents": {"list": [{"id": "a"}, {"id": "b", "default": True}]}})
    s = load_settings(Context(config=str(cfg), state_dir=str(state)), env={"HOME": str(home)})
    assert s.agent_id == "b" and s.workspace == home / ".openclaw" / "workspace"
    a = load_settings(Context("a", str(cfg), str(state)), env={"HOME": str(home)})
    assert a.workspace == state / "workspace-a"


def test_legacy_clawdbot_state_dir_is_used_until_openclaw_exists(tmp_path):
    """resolveStateDir: ~/.openclaw if it exists, else a pre-rename ~/.clawdbot (with its clawdbot.json)."""
    home = tmp_path / "home"
    _write(home / ".clawdbot" / "clawdbot.json", {"agents": {"list": [{"id": "legacy", "default": True}]}})
    s = load_settings(Context(), env={"HOME": str(home)})
    assert s.state_dir == home / ".clawdbot" and s.config_path == home / ".clawdbot" / "clawdbot.json"
    assert s.agent_id == "legacy"
    (home / ".openclaw").mkdir()
    s = load_settings(Context(), env={"HOME": str(home)})
    assert s.state_dir == home / ".openclaw" and s.config_path is None and s.agent_id == "main"


def test_relative_state_dir_works_from_any_cwd(tmp_path):
    ws = tmp_path / "ws"
    _write(ws / "MEMORY.md", "the wombat migration plan\n")
    for cwd in (tmp_path / "one", tmp_path / "two" / "deeper"):
        cwd.mkdir(parents=True)
        out = _cli(cwd, {}, "--workspace", str(ws), "--state-dir", ".memindex-demo", "index")
        assert out.returncode == 0, out.stderr
        assert (cwd / ".memindex-demo" / "memindex" / "main.sqlite").exists()
        assert not (cwd / ".memindex-demo" / ".memindex-demo").exists()  # applied once, not twice
        out = _cli(cwd, {}, "--workspace", str(ws), "--state-dir", ".memindex-demo", "search", "wombat")
        assert out.returncode == 0 and "wombat" in out.stdout, out.stderr


# --- config loading ----------------------------------------------------------------------------

def test_include_var_env_block_dotenv_and_secret_refs_resolve_like_openclaw(tmp_path, monkeypatch):
    state, conf = tmp_path / "state", tmp_path / "conf"
    monkeypatch.setenv("NOTES_DIR", "team-notes")
    monkeypatch.setenv("FROM_SHELL", "shell-wins")
    _write(state / ".env", "DOTENV_KEY=sk-from-dotenv\nFROM_SHELL=dotenv-loses\n")
    _write(conf / "parts" / "query.json5", "{query: {maxResults: 9}, $include: './deeper/hybrid.json5'}")
    _write(conf / "parts" / "deeper" / "hybrid.json5", "{query: {hybrid: {mmr: {enabled: true}}}}")
    _write(conf / "secrets.json", {"providers": {"voyage": {"apiKey": "pa-from-file"}}})
    cfg = _write(conf / "openclaw.json", """{
      // OpenClaw config spread over files, variables and secrets
      env: { BLOCK_KEY: "sk-from-env-block", vars: { BLOCK_VAR: "from-vars" }, FROM_SHELL: "block-loses" },
      secrets: { providers: { files: { source: "file", path: "${CONF_DIR}/secrets.json" } } },
      agents: { defaults: { memorySearch: {
        $include: "./parts/query.json5",
        provider: "openai",
        extraPaths: ["${NOTES_DIR}", "literal-$${NOT_SUBSTITUTED}"],
        remote: { apiKey: { source: "env", provider: "default", id: "BLOCK_KEY" },
                  headers: { "X-Dotenv": "${DOTENV_KEY}", "X-Var": "${BLOCK_VAR}" } },
      } } },
      models: { providers: { voyage: { apiKey: { source: "file", provider: "files", id: "/providers/voyage/apiKey" } },
                             anthropic: { apiKey: { source: "env", provider: "default", id: "UNSET_BUT_NOT_OURS" } } } },
    }""")
    monkeypatch.setenv("CONF_DIR", str(conf))
    for k in ("BLOCK_KEY", "BLOCK_VAR", "DOTENV_KEY"):
        monkeypatch.delenv(k, raising=False)
    s = load_settings(Context(config=str(cfg), state_dir=str(state)))
    ms = s.memory_search
    assert ms.query.max_results == 9 and ms.query.hybrid.mmr.enabled is True  # nested $include
    assert ms.extra_paths == ["team-notes", "literal-${NOT_SUBSTITUTED}"]  # ${VAR} and its $${} escape
    assert ms.remote.api_key == "sk-from-env-block"  # SecretRef (env) <- env block
    assert ms.remote.headers == {"X-Dotenv": "sk-from-dotenv", "X-Var": "from-vars"}  # .env, env.vars
    assert s.providers["voyage"]["apiKey"] == "pa-from-file"  # SecretRef (file, JSON pointer)
    assert isinstance(s.providers["anthropic"]["apiKey"], dict)  # not a provider memindex uses: untouched
    # Both fill the process environment the way OpenClaw does, never overriding what is set.
    assert os.environ["BLOCK_KEY"] == "sk-from-env-block" and os.environ["DOTENV_KEY"] == "sk-from-dotenv"
    assert os.environ["FROM_SHELL"] == "shell-wins"


def test_an_edit_in_an_included_file_reaches_the_cached_settings(tmp_path):
    """A long-running process (watcher, worker, server) keeps settings until the config changes: an
    edit in a nested ``$include``d file counts (the watcher rebuilt an index with the provider it
    had first read, and every `index` rebuilt it back), as does fixing a missing include."""
    from memindex.pipeline.config.agents import settings_for

    conf = tmp_path / "conf"
    _write(conf / "parts" / "search.json5", "{$include: './deeper/provider.json5'}")
    deeper = _write(conf / "parts" / "deeper" / "provider.json5", '{provider: "openai", model: "m-one"}')
    cfg = _write(conf / "openclaw.json", "{agents: {defaults: {memorySearch: {$include: './parts/search.json5'}}}}")
    ctx = Context(config=str(cfg), state_dir=str(tmp_path / "state"))
    before = cfg.stat().st_mtime_ns

    def bump(path) -> None:  # a rewrite within the same mtime tick must still be seen
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))

    assert settings_for(ctx).memory_search.model == "m-one"
    _write(deeper, '{provider: "openai", model: "m-two"}')
    bump(deeper)
    assert settings_for(ctx).memory_search.model == "m-two"
    deeper.unlink()  # a broken include is an error, and its return is a change too
    with pytest.raises(ConfigError, match="config file not found"):
        settings_for(ctx)
    _write(deeper, '{provider: "openai", model: "m-three"}')
    assert settings_for(ctx).memory_search.model == "m-three"
    assert cfg.stat().st_mtime_ns == before  # openclaw.json itself never changed


@pytest.mark.parametrize("text, files, match, key", [
    ('{agents: {defaults: {memorySearch: {model: "${NO_SUCH_VAR_X}"}}}}', {}, "NO_SUCH_VAR_X is not set",
     "agents.defaults.memorySearch.model"),
    ('{$include: "a.json5"}', {"a.json5": '{$include: "b.json5"}', "b.json5": '{$include: "a.json5"}'},
     "circular include", None),
    ('{$include: "../outside.json5"}', {}, "escapes the config directory", None),
    ('{$include: "missing.json5"}', {}, "config file not found", None),
    ('{$include: 42}', {}, "expected a path or a list of paths", None),
    ('{agents: {defaults: {memorySearch: {remote: {apiKey: {source: "env", provider: "default", id: "NOPE_KEY_X"}}}}}}',
     {}, "NOPE_KEY_X \\(SecretRef\\) is not set", "agents.defaults.memorySearch.remote.apiKey"),
    ('{agents: {defaults: {memorySearch: {remote: {apiKey: {source: "exec", provider: "vault", id: "k"}}}}}}',
     {}, "exec SecretRef provider 'vault' is not configured", "agents.defaults.memorySearch.remote.apiKey"),
    ('{env: {vars: ["x"]}}', {}, "expected an object", "env.vars"),
])
def test_config_loading_errors_are_one_config_error(tmp_path, text, files, match, key):
    for name, body in files.items():
        _write(tmp_path / "c" / name, body)
    cfg = _write(tmp_path / "c" / "openclaw.json", text)
    with pytest.raises(ConfigError, match=match) as err:
        load_settings(Context(config=str(cfg), state_dir=str(tmp_path / "s")), env={"HOME": str(tmp_path)})
    if key:
        assert err.value.key == key


# --- exec SecretRefs (OpenClaw's resolver protocol) ----------------------------------------------

RESOLVER = """#!{python}
import json, os, sys
req = json.load(sys.stdin)
mode = os.environ.get("MODE", "json")
if mode == "plain":
    print("sk-plain-" + req["provider"])
elif mode == "sleep":
    import time; time.sleep(30)
elif mode == "env":
    print(json.dumps({{"protocolVersion": 1, "values": {{req["ids"][0]: ",".join(sorted(os.environ))}}}}))
elif mode == "fail":
    sys.exit(3)
elif mode == "missing":
    print(json.dumps({{"protocolVersion": 1, "values": {{}}, "errors": {{req["ids"][0]: {{"message": "not in vault"}}}}}}))
else:
    print(json.dumps({{"protocolVersion": 1, "values": {{i: "sk-exec-" + i.replace("/", "-") for i in req["ids"]}}}}))
"""


def _exec_config(tmp_path, **provider) -> Path:
    resolver = tmp_path / "bin" / "resolver"
    _write(resolver, RESOLVER.format(python=sys.executable))
    resolver.chmod(0o755)
    spec = {"source": "exec", "command": str(resolver), **provider}
    return _write(tmp_path / "c" / "openclaw.json", {
        "secrets": {"providers": {"vault": spec}},
        "agents": {"defaults": {"memorySearch": {"provider": "openai", "remote": {
            "apiKey": {"source": "exec", "provider": "vault", "id": "providers/openai/apiKey"}}}}}})


def _exec_key(tmp_path, cfg: Path, **env) -> str:
    s = load_settings(Context(config=str(cfg), state_dir=str(tmp_path / "s")),
                      env={"HOME": str(tmp_path), "PATH": os.environ["PATH"], "SECRET_PARENT": "x", **env})
    return s.memory_search.remote.api_key


def test_exec_secret_ref_runs_the_resolver_with_openclaws_protocol(tmp_path):
    cfg = _exec_config(tmp_path, passEnv=["MODE"])
    assert _exec_key(tmp_path, cfg) == "sk-exec-providers-openai-apiKey"
    # jsonOnly: false accepts a bare secret on stdout for the one id asked for.
    cfg = _exec_config(tmp_path, passEnv=["MODE"], jsonOnly=False)
    assert _exec_key(tmp_path, cfg, MODE="plain") == "sk-plain-vault"
    # The child sees only env and the passEnv names: never the caller's other variables.
    cfg = _exec_config(tmp_path, passEnv=["MODE"], env={"VAULT_ADDR": "http://v"})
    seen = _exec_key(tmp_path, cfg, MODE="env").split(",")
    assert "VAULT_ADDR" in seen and "MODE" in seen and "SECRET_PARENT" not in seen and "HOME" not in seen


@pytest.mark.parametrize("provider, env, match", [
    ({"passEnv": ["MODE"]}, {"MODE": "plain"}, "did not answer with a JSON object"),
    ({"passEnv": ["MODE"]}, {"MODE": "fail"}, "exited with status 3"),
    ({"passEnv": ["MODE"]}, {"MODE": "missing"}, "could not resolve 'providers/openai/apiKey': not in vault"),
    ({"passEnv": ["MODE"], "timeoutMs": 300}, {"MODE": "sleep"}, "timed out after 300 ms|no output for 300 ms"),
    ({"command": "relative/resolver"}, {}, "must be an absolute path"),
    ({"trustedDirs": ["/opt/nowhere"]}, {}, "outside secrets.providers.vault.trustedDirs"),
    ({"timeoutMs": -1}, {}, "timeoutMs must be a positive number"),
    ({"shell": True}, {}, "unknown key\\(s\\): shell"),
])
def test_exec_secret_ref_failures_are_one_config_error(tmp_path, provider, env, match):
    cfg = _exec_config(tmp_path, **provider)
    with pytest.raises(ConfigError, match=match) as err:
        _exec_key(tmp_path, cfg, **env)
    assert err.value.key == "agents.defaults.memorySearch.remote.apiKey"


def test_exec_secret_ref_refuses_a_symlinked_command_unless_trusted(tmp_path):
    cfg = _exec_config(tmp_path)
    link = tmp_path / "bin" / "link"
    link.symlink_to(tmp_path / "bin" / "resolver")
    data = json.loads(cfg.read_text())
    data["secrets"]["providers"]["vault"]["command"] = str(link)
    cfg.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="is a symlink"):
        _exec_key(tmp_path, cfg)
    data["secrets"]["providers"]["vault"].update(allowSymlinkCommand=True, trustedDirs=[str(tmp_path / "bin")])
    cfg.write_text(json.dumps(data))
    assert _exec_key(tmp_path, cfg) == "sk-exec-providers-openai-apiKey"


OPENCLAW_ONLY_KEYS = [
    ("agents.defaults.memorySearch", {"store": {"cache": {"enabled": True, "maxEntries": 10}}},
     "memorySearch.store.cache"),
    ("agents.defaults.memorySearch", {"store": {"fts": {"tokenizer": "trigram"}}}, "memorySearch.store.fts"),
    ("agents.defaults.memorySearch", {"sync": {"sessions": {"postCompactionForce": True}}},
     "memorySearch.sync.sessions.postCompactionForce"),
    ("agents.defaults.memorySearch", {"qmd": {"extraCollections": [{"path": "x"}]}}, "memorySearch.qmd"),
    ("agents.defaults.memorySearch", {"local": {"contextSize": 4096}}, "memorySearch.local.contextSize"),
    ("agents.defaults.memorySearch", {"inputType": "search_document"}, "memorySearch.inputType"),
    ("memory", {"qmd": {"mcporter": {"enabled": True, "serverName": "qmd", "startDaemon": True}}},
     "memory.qmd.mcporter"),
    ("memory", {"qmd": {"rerank": False, "searchTool": "query"}}, "memory.qmd.rerank"),
    ("memory", {"qmd": {"update": {"startup": "idle", "startupDelayMs": 100}}}, "memory.qmd.update.startup"),
]


def _nest(where: str, value: dict) -> dict:
    for part in reversed(where.split(".")):
        value = {part: value}
    return value


@pytest.mark.parametrize("where, value, named", OPENCLAW_ONLY_KEYS, ids=[k[2] for k in OPENCLAW_ONLY_KEYS])
def test_each_openclaw_key_loads_with_one_warning(tmp_path, caplog, where, value, named):
    cfg = _nest(where, value)
    with caplog.at_level(logging.WARNING, logger="memindex.config"):
        s = resolve_agent(cfg, None, state_dir=tmp_path, env={"HOME": str(tmp_path)})
        resolve_agent(cfg, None, state_dir=tmp_path, env={"HOME": str(tmp_path)})  # reloads warn once
    warnings = [r.getMessage() for r in caplog.records if r.name == "memindex.config"]
    assert len(warnings) == 1 and named in warnings[0], warnings
    assert s.enabled


def test_openclaw_keys_we_implement_are_honoured(tmp_path):
    s = resolve_agent({"agents": {"defaults": {"memorySearch": {"provider": "openai", "dimensions": 256}}}},
                      state_dir=tmp_path)
    assert s.memory_search.output_dimensionality == 256 and "dimensions" not in s.memory_search.to_dict()
    with pytest.raises(ConfigError, match="conflicts with outputDimensionality"):
        resolve_agent({"agents": {"defaults": {"memorySearch": {"dimensions": 256, "outputDimensionality": 512}}}},
                      state_dir=tmp_path)
    assert resolve_agent({"agents": {"defaults": {"memorySearch": {"provider": "none"}}}},
                         state_dir=tmp_path).memory_search.provider == "none"


@pytest.mark.parametrize("ms, key, suggestion", [
    ({"provder": "openai"}, "agents.defaults.memorySearch.provder", "provider"),
    ({"query": {"maxResult": 3}}, "agents.defaults.memorySearch.query.maxResult", "maxResults"),
    ({"remote": {"baseURL": "x"}}, "agents.defaults.memorySearch.remote.baseURL", "baseUrl"),
])
def test_a_typo_gets_a_suggestion(tmp_path, ms, key, suggestion):
    with pytest.raises(ConfigError, match=f'did you mean "{suggestion}"') as err:
        resolve_agent({"agents": {"defaults": {"memorySearch": ms}}}, state_dir=tmp_path)
    assert err.value.key == key
    assert f'unknown key; did you mean "{suggestion}"? (known: ' in str(err.value)


def test_an_unknown_key_without_a_suggestion_reads_cleanly(tmp_path):
    with pytest.raises(ConfigError) as err:  # it read "unknown key; (known: ...)"
        resolve_agent({"agents": {"defaults": {"memorySearch": {"rerank": True}}}}, state_dir=tmp_path)
    assert "memorySearch.rerank: unknown key (known: " in str(err.value), err.value


@pytest.mark.parametrize("text, key", [
    ("{agents: {defaults: {memorySearch: {query: {maxResults: Infinity}}}}}",
     "agents.defaults.memorySearch.query.maxResults"),
    ("{agents: {defaults: {memorySearch: {query: {minScore: NaN}}}}}", "agents.defaults.memorySearch.query.minScore"),
    ('{agents: "x"}', "agents"),
    ('{agents: {list: "x"}}', "agents.list"),
    ('{agents: {list: ["x"]}}', "agents.list[0]"),
    ('{agents: {list: [{id: "a", default: "yes"}]}}', "agents.list[0].default"),
    ('{agents: {defaults: "x"}}', "agents.defaults"),
    ("{agents: {defaults: {workspace: 42}}}", "agents.defaults.workspace"),
    ('{agents: {list: [{id: "main", workspace: {a: 1}}]}}', "agents.list[0].workspace"),
    ('{agents: {defaults: {memorySearch: "x"}}}', "agents.defaults.memorySearch"),
    ('{memory: "x"}', "memory"),
    ('{models: {providers: []}}', "models.providers"),
    ('{plugins: {slots: 1}}', "plugins.slots"),
])
def test_every_bad_value_is_one_config_error(tmp_path, text, key):
    cfg = _write(tmp_path / "openclaw.json", text)
    with pytest.raises(ConfigError) as err:
        load_settings(Context(config=str(cfg), state_dir=str(tmp_path)), env={"HOME": str(tmp_path)})
    assert err.value.key == key


def test_a_bad_value_through_the_cli_is_one_line(tmp_path):
    cfg = _write(tmp_path / "openclaw.json", "{agents: {defaults: {memorySearch: {query: {maxResults: Infinity}}}}}")
    out = _cli(tmp_path, {}, "--config", str(cfg), "--state-dir", str(tmp_path / "s"), "status")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "agents.defaults.memorySearch.query.maxResults" in out.stderr


# --- queue messages: absolute paths, and workers that refuse another deployment's work -----------

def test_messages_carry_absolute_config_and_state_dir_even_from_the_environment(tmp_path, monkeypatch):
    from memindex.pipeline.config.agents import settings_for
    from memindex.pipeline.config.settings import pinned

    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "st" / "openclaw.json", {})
    monkeypatch.setenv("OPENCLAW_STATE_DIR", "st")  # relative, from the environment
    ctx = pinned(settings_for(Context()))
    assert ctx.state_dir == str(tmp_path / "st") and ctx.config == str(tmp_path / "st" / "openclaw.json")
    assert ctx.agent_id == "main" and Path(ctx.workspace).is_absolute()
    monkeypatch.chdir("/")  # the receiver's cwd and environment do not matter
    monkeypatch.delenv("OPENCLAW_STATE_DIR")
    assert settings_for(ctx).store_path == tmp_path / "st" / "memindex" / "main.sqlite"


@pytest.mark.redis
def test_a_worker_refuses_messages_for_another_state_dir(tmp_path, redis_server):
    import redis

    prod, other = Agent(tmp_path / "prod"), Agent(tmp_path / "other")
    for a, word in ((prod, "production"), (other, "stray")):
        a.write_config({"agents": {"defaults": {"workspace": str(a.workspace),
                                                "memorySearch": {"provider": "hash"}}}})
        a.write("MEMORY.md", f"the {word} notes\n")
    # An existing production index, built before the worker starts.
    prod.index()
    store = prod.settings().store_path
    before = (store.stat().st_mtime_ns, store.stat().st_size, prod.store_rows())

    env = {"OPENCLAW_STATE_DIR": str(prod.state), "OPENCLAW_CONFIG_PATH": str(prod.config_path)}
    worker = start_workers(redis_server.url, queues=("sync", "embed", "write"), extra_env=env)
    try:
        # A sender with another environment (the CLI run): its message names its own paths.
        code = ("from memindex.producers.enqueue import request_sync\n"
                "from memindex.pipeline.config.settings import Context\n"
                f"request_sync(Context(config={str(other.config_path)!r}, state_dir={str(other.state)!r}), force=True)\n")
        out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, MEMINDEX_BROKER_URL=redis_server.url))
        assert out.returncode == 0, out.stderr
        client = redis.Redis.from_url(redis_server.url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not client.zcard("memindex:sync.XQ"):
            assert worker.poll() is None, worker.stderr.read().decode() if worker.stderr else ""
            time.sleep(0.1)
        assert client.zcard("memindex:sync.XQ") == 1, "the message was not dead-lettered"
        (raw,) = client.hvals("memindex:sync.XQ.msgs")
        reason = json.loads(raw)["options"]["error"]
        assert str(other.state) in reason and str(prod.state) in reason  # names both
        assert client.llen("memindex:write") == 0 and client.llen("memindex:embed") == 0

        # The same stranger runs `memindex index` and waits: refused work is a failed run, said so.
        out = run_cli("--config", str(other.config_path), "--state-dir", str(other.state), "index",
                      env={"MEMINDEX_BROKER_URL": redis_server.url}, cwd=tmp_path, timeout=120)
        assert out.returncode == 1 and "indexed" not in out.stdout, out
        assert "dead-lettered" in out.stderr and str(prod.state) in out.stderr and "Traceback" not in out.stderr
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(15)
    assert (store.stat().st_mtime_ns, store.stat().st_size, prod.store_rows()) == before  # untouched
    assert not other.settings().store_path.exists()  # and nothing planned or written for the stranger


def _dead_lettered_sync(sender: Agent, worker: subprocess.Popen, env: dict, cwd: Path, wait_s: float) -> dict:
    """Send ``sender``'s sync as a watcher would; the options of the one dead letter it becomes."""
    import redis

    code = ("from memindex.producers.enqueue import request_sync\n"
            "from memindex.pipeline.config.settings import Context\n"
            f"request_sync(Context(config={str(sender.config_path)!r}, state_dir={str(sender.state)!r}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    client = redis.Redis.from_url(env["MEMINDEX_BROKER_URL"])
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not client.zcard("memindex:sync.XQ"):
        assert worker.poll() is None
        time.sleep(0.1)
    (raw,) = client.hvals("memindex:sync.XQ.msgs")
    return json.loads(raw)["options"]


def test_worker_flags_name_what_it_serves_as_the_variables_do(tmp_path, redis_server):
    """`memindex --state-dir X --config Y worker`: the flags were not passed on to the dramatiq
    processes, which then served any state dir a message named."""
    prod, other = Agent(tmp_path / "prod"), Agent(tmp_path / "other")
    for a in (prod, other):
        a.write_config({"agents": {"defaults": {"workspace": str(a.workspace), "memorySearch": {"provider": "hash"}}}})
        a.write("MEMORY.md", "notes\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENCLAW_STATE_DIR", "OPENCLAW_CONFIG_PATH")}
    env["MEMINDEX_BROKER_URL"] = redis_server.url
    worker = subprocess.Popen([sys.executable, "-m", "memindex", "--state-dir", str(prod.state), "--config",
                               str(prod.config_path), "worker", "--queues", "sync", "--processes", "1"],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        reason = _dead_lettered_sync(other, worker, env, tmp_path, 30)["error"]
        assert str(other.state) in reason and str(prod.state) in reason, reason
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(15)


def test_a_sync_whose_provider_cannot_be_built_is_dead_lettered_at_once(tmp_path, redis_server):
    """A watcher's sync of an agent whose provider cannot be built (here: its model file is missing)
    was retried eight times with backoff, minutes of the same failure, before it was dead-lettered."""
    a = Agent(tmp_path / "a")
    a.write_config({"agents": {"defaults": {"workspace": str(a.workspace), "memorySearch": {
        "provider": "local", "fallback": "none", "local": {"modelPath": str(tmp_path / "gone.gguf")}}}}})
    a.write("MEMORY.md", "notes\n")
    env = dict(os.environ, MEMINDEX_BROKER_URL=redis_server.url)
    worker = start_workers(redis_server.url, queues=("sync",),
                           extra_env={"OPENCLAW_STATE_DIR": str(a.state), "OPENCLAW_CONFIG_PATH": str(a.config_path)})
    try:
        options = _dead_lettered_sync(a, worker, env, tmp_path, 60)
        assert options.get("retries") == 1 and "model file not found" in options.get("error", ""), options
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(15)


def test_several_agents_in_one_config_stay_apart_and_each_failure_is_named(tmp_path):
    """What an OpenClaw user with a multi-agent config saw: a shared store file, a disabled
    agent indexed and readable, one broken agent stopping the rest, one --workspace poured into
    every agent, ~ read two ways."""
    ws = tmp_path / "ws"
    _write(ws / "main" / "MEMORY.md", "main: codeword ALPHAZEBRA\n")
    _write(ws / "ops" / "MEMORY.md", "ops: codeword OPSWALRUS\n")
    _write(ws / "quiet" / "MEMORY.md", "quiet: codeword QUIETOTTER\n")
    state = tmp_path / "state"

    def config(name: str, defaults: dict, agents: list) -> tuple[str, ...]:
        cfg = _write(tmp_path / f"{name}.json", {"agents": {
            "defaults": {"memorySearch": {"provider": "none", **defaults}}, "list": agents}})
        return "--config", str(cfg), "--state-dir", str(state / name)

    def cli(*args: str, env: dict | None = None):
        return _cli(tmp_path, env or {}, *args)

    main = {"id": "main", "workspace": str(ws / "main")}
    ops = {"id": "ops", "workspace": str(ws / "ops")}

    # One store file named for every agent: refused, naming the key, before anything is written.
    shared = config("shared", {"store": {"path": str(tmp_path / "one.sqlite")}}, [main, ops])
    out = cli(*shared, "index")
    assert out.returncode == 2 and "store.path" in out.stderr and "{agentId}" in out.stderr, out.stderr
    assert not (tmp_path / "one.sqlite").exists()
    assert cli(*config("token", {"store": {"path": str(tmp_path / "{agentId}.sqlite")}}, [main, ops]),
               "index").returncode == 0
    dup = cli(*config("dup", {}, [main, {**ops, "id": "Main"}]), "status")
    assert dup.returncode == 2 and "agents.list[1].id" in dup.stderr and "same agent id" in dup.stderr

    # A disabled agent: not indexed, nothing read through get, search says disabled.
    dis = config("dis", {}, [main, {"id": "quiet", "workspace": str(ws / "quiet"),
                                    "memorySearch": {"enabled": False}}])
    out = cli(*dis, "index")
    assert out.returncode == 0 and "quiet: memory search disabled; not indexed" in out.stdout, out
    assert not (state / "dis" / "memindex" / "quiet.sqlite").exists()
    got = cli(*dis, "--agent", "quiet", "get", "MEMORY.md")
    assert got.returncode == 1 and "QUIETOTTER" not in got.stdout and "disabled" in got.stderr
    res = json.loads(cli(*dis, "--agent", "quiet", "search", "--json", "QUIETOTTER").stdout)
    assert res["results"] == [] and res["disabled"] is True and "disabled" in res["error"]

    # One agent that cannot be indexed is named; the agents after it are still indexed.
    broken = config("broken", {}, [main, {"id": "gone", "workspace": str(ws / "gone")}, ops])
    out = cli(*broken, "index")
    assert out.returncode == 1, out
    assert "memory index failed (gone)" in out.stderr and "does not exist" in out.stderr
    assert "main: indexed 1" in out.stdout and "ops: indexed 1" in out.stdout
    status = cli(*broken, "--agent", "gone", "status")
    assert "index refused" in status.stdout and "does not exist" in status.stdout

    # --workspace names one agent's workspace: refused when a command covers several.
    out = cli(*broken, "--workspace", str(ws / "quiet"), "index")
    assert out.returncode == 2 and "--agent" in out.stderr
    assert "QUIETOTTER" not in cli(*broken, "--agent", "ops", "search", "QUIETOTTER").stdout

    # ~ is the OpenClaw home everywhere: the workspace, extraPaths and store.path alike.
    home = tmp_path / "home"
    _write(home / "extra" / "x.md", "extra: codeword LYCHEE\n")
    tilde = config("tilde", {"extraPaths": ["~/extra"], "store": {"path": "~/stores/{agentId}.sqlite"}},
                   [{"id": "main", "workspace": "~/ws"}])
    _write(home / "ws" / "MEMORY.md", "home ws: codeword GUAVA\n")
    env = {"OPENCLAW_HOME": str(home), "HOME": str(tmp_path / "oshome")}
    assert cli(*tilde, "index", env=env).returncode == 0
    assert (home / "stores" / "main.sqlite").exists() and not (tmp_path / "oshome").exists()
    assert "LYCHEE" in cli(*tilde, "search", "LYCHEE", env=env).stdout


def test_search_serves_only_the_sources_and_paths_the_config_names_now(tmp_path):
    ws, state = tmp_path / "ws", tmp_path / "state"
    _write(ws / "MEMORY.md", "main memory\n")
    _write(tmp_path / "shared" / "team.md", "team docs: codeword SHAREDHERON\n")
    _write(state / "agents" / "main" / "sessions" / "m1.jsonl",
           '{"type":"session","version":3,"id":"m1"}\n'
           '{"type":"message","id":"b1","message":{"role":"user","content":[{"type":"text","text":"private RAMBUTAN"}]}}\n')
    on = _write(tmp_path / "on.json", {"agents": {"defaults": {"memorySearch": {
        "provider": "none", "extraPaths": [str(tmp_path / "shared")], "sources": ["memory", "sessions"],
        "experimental": {"sessionMemory": True}}}, "list": [{"id": "main", "workspace": str(ws)}]}})
    off = _write(tmp_path / "off.json", {"agents": {"defaults": {"memorySearch": {"provider": "none"}},
                                                    "list": [{"id": "main", "workspace": str(ws)}]}})
    base = ("--state-dir", str(state))
    assert _cli(tmp_path, {}, "--config", str(on), *base, "index").returncode == 0
    for word in ("RAMBUTAN", "SHAREDHERON"):
        assert word in _cli(tmp_path, {}, "--config", str(on), *base, "search", word).stdout
        # The config no longer names the source or the extraPaths entry: not served, before any sync.
        assert _cli(tmp_path, {}, "--config", str(off), *base, "search", word).stdout.strip() == "No matches."
    status = json.loads(_cli(tmp_path, {}, "--config", str(off), *base, "status", "--json").stdout)[0]["status"]
    assert status["dirty"] is True
    text = _cli(tmp_path, {}, "--config", str(off), *base, "status").stdout
    assert "stale:" in text and "memindex index" in text


def test_a_near_miss_of_a_key_memindex_reads_gets_a_did_you_mean(tmp_path, caplog):
    """``worspace`` fell back to the default workspace and ``memorysearch: {enabled: false}`` left the
    agent enabled, silently; OpenClaw's other keys (model, sandbox, ...) are not flagged."""
    cfg = {"agents": {"default": {}, "defaults": {"model": "x", "worksapce": "/w"},
                      "list": [{"id": "main", "worspace": "/tmp/x", "memorysearch": {"enabled": False},
                                "model": "gpt", "sandbox": {}}]}}
    with caplog.at_level("WARNING", logger="memindex.config"):
        resolve_agent(cfg, "main", state_dir=tmp_path)
    text = caplog.text
    for where, want in (("agents.default", "defaults"), ("agents.defaults.worksapce", "workspace"),
                        ("agents.list[0].worspace", "workspace"), ("agents.list[0].memorysearch", "memorySearch")):
        assert f"{where}: not a key memindex reads (did you mean {want}?)" in text, where
    assert "model" not in text and "sandbox" not in text
