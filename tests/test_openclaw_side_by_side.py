"""memindex beside a running OpenClaw, on one state dir, as users run them (issue 42).

The OpenClaw store is the file OpenClaw 2026.3.28 itself wrote (tests/fixtures/openclaw/
store-2026.3.28-main.sqlite, recorded with its search answer by tests/record_openclaw_fixtures.py):
memindex indexes, searches and reports beside it without a traceback and without changing a byte of
it; a configured path holding it is refused in one line; memindex's old default store (OpenClaw's
path) is moved to memindex's own name. Also: an unset variable in ``channels.*`` leaves every
command working, a key only in ``auth-profiles.json`` reaches the provider, and ``endLine`` is
OpenClaw's for the same chunk. Real CLI subprocesses, a real provider wire (tests/provider_server.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import module_server, run_cli
from tests.provider_server import ProviderServer

FIX = Path(__file__).parent / "fixtures" / "openclaw"
RECORDED = json.loads((FIX / "store-2026.3.28.json").read_text())
KEY = "sk-profile-only-0123456789"

server = module_server(ProviderServer)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _state(tmp_path: Path, config: dict, *, openclaw_store: bool = True) -> tuple[Path, dict[str, str]]:
    state = tmp_path / "state"
    ws = state / "workspace"
    for rel, text in RECORDED["notes"].items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    (state / "openclaw.json").write_text(json.dumps(config))
    if openclaw_store:
        (state / "memory").mkdir()
        shutil.copyfile(FIX / "store-2026.3.28-main.sqlite", state / "memory" / "main.sqlite")
    env = {"HOME": str(tmp_path / "home"), "OPENCLAW_STATE_DIR": str(state), "OPENAI_API_KEY": "",
           "MEMINDEX_STORE_PATH": "", "TELEGRAM_BOT_TOKEN": ""}
    return state, env


def _config(state: Path, **ms) -> dict:
    return {"agents": {"defaults": {"workspace": str(state / "workspace"),
                                    "memorySearch": {"provider": "none", **ms}}}}


def test_memindex_beside_openclaws_own_store_changes_nothing_of_it(tmp_path):
    state, env = _state(tmp_path, {})
    (state / "openclaw.json").write_text(json.dumps(_config(state)))
    theirs = state / "memory" / "main.sqlite"
    before = _digest(theirs)
    for cmd in (["index"], ["status"], ["status", "--json"], ["search", "deploy key"], ["get", "MEMORY.md"]):
        out = run_cli(*cmd, env=env)
        assert out.returncode == 0, (cmd, out.stderr)
        assert "Traceback" not in out.stderr, cmd
    assert _digest(theirs) == before  # not a byte of OpenClaw's index changed
    assert not Path(f"{theirs}-wal").exists() and not Path(f"{theirs}-shm").exists()
    assert (state / "memindex" / "main.sqlite").is_file()  # memindex's own file
    status = run_cli("status", env=env).stdout
    assert f"openclaw:     {theirs}" in status and "OpenClaw 2026.3" in status
    [entry] = json.loads(run_cli("status", "--json", env=env).stdout)
    assert entry["status"]["dbPath"] == str(state / "memindex" / "main.sqlite")
    assert entry["status"]["openclawIndex"]["path"] == str(theirs)


def test_a_configured_path_holding_openclaws_store_is_refused_in_one_line(tmp_path):
    state, env = _state(tmp_path, {})
    theirs = state / "memory" / "main.sqlite"
    before = _digest(theirs)
    for how, config, extra in (
            ("memorySearch.store.path", _config(state, store={"path": str(theirs)}), {}),
            ("MEMINDEX_STORE_PATH", _config(state), {"MEMINDEX_STORE_PATH": "memory/{agentId}.sqlite"})):
        (state / "openclaw.json").write_text(json.dumps(config))
        for cmd in (["index"], ["status"], ["search", "deploy"]):
            out = run_cli(*cmd, env={**env, **extra})
            assert out.returncode == 2, (how, cmd, out.stdout, out.stderr)
            lines = out.stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in out.stderr, (how, cmd, out.stderr)
            assert how in lines[0] and str(theirs) in lines[0] and "OpenClaw's own memory index" in lines[0]
            assert "MEMINDEX_STORE_PATH" in lines[0]  # what to set
    assert _digest(theirs) == before
    assert not Path(f"{theirs}-wal").exists()


def test_memindexs_old_default_store_is_moved_to_its_own_name(tmp_path):
    """Before issue 42 memindex kept its store at <state>/memory/<id>.sqlite, OpenClaw 2026.3's path."""
    state, env = _state(tmp_path, {}, openclaw_store=False)
    (state / "openclaw.json").write_text(json.dumps(_config(state)))
    old = state / "memory" / "main.sqlite"
    out = run_cli("index", env={**env, "MEMINDEX_STORE_PATH": str(old)})  # how the old default was made
    assert out.returncode == 0, out.stderr
    out = run_cli("search", "--json", "deploy key", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["results"][0]["path"] == "MEMORY.md"  # no re-index needed
    assert not old.exists() and (state / "memindex" / "main.sqlite").is_file()
    assert "moved from" in out.stderr


def test_end_line_equals_openclaws_for_the_same_chunk(tmp_path):
    import sqlite3

    state, env = _state(tmp_path, {})
    (state / "openclaw.json").write_text(json.dumps(_config(state)))
    assert run_cli("index", env=env).returncode == 0
    conn = sqlite3.connect(f"file:{state / 'memory' / 'main.sqlite'}?mode=ro&immutable=1", uri=True)
    theirs = {(p, s): e for p, s, e in conn.execute("SELECT path, start_line, end_line FROM chunks")}
    conn.close()
    out = run_cli("search", "--json", "--min-score", "0", "--max-results", "20", "deploy key kiwi orchard ledger",
                  env=env)
    results = json.loads(out.stdout)["results"]
    by_start = {(r["path"], r["startLine"]): r["endLine"] for r in results}
    for rec in RECORDED["search"]:  # what `openclaw memory search --json` answered
        assert by_start[(rec["path"], rec["startLine"])] == rec["endLine"], rec
    # MEMORY.md ends with a newline: OpenClaw's 1-5 for 4 lines of text, memindex's too
    assert theirs[("MEMORY.md", 1)] == by_start[("MEMORY.md", 1)] == 5
    # the last chunk of a file ends where OpenClaw's last chunk does
    last_theirs = max(e for (p, _), e in theirs.items() if p == "memory/2026-01-05.md")
    assert last_theirs == 61
    out = run_cli("search", "--json", "--min-score", "0", "--max-results", "20", "kiwi orchard ledger entry number 60",
                  env=env)
    ends = [r["endLine"] for r in json.loads(out.stdout)["results"] if r["path"] == "memory/2026-01-05.md"]
    assert last_theirs in ends
    # and the text output prints OpenClaw's `path:start-end` with no Source: footer
    text = run_cli("search", "deploy key", env=env).stdout
    assert text.startswith(tuple(f"{s} MEMORY.md:1-5\n" for s in ("0.", "1."))) or "MEMORY.md:1-5\n" in text
    assert "Source:" not in text


def test_an_unset_variable_in_channels_leaves_every_command_working(tmp_path):
    state, env = _state(tmp_path, {}, openclaw_store=False)
    cfg = {**_config(state), "channels": {"telegram": {"botToken": "${TELEGRAM_BOT_TOKEN}"},
                                          "discord": {"token": "Bot ${DISCORD_TOKEN_UNSET_X}"}}}
    (state / "openclaw.json").write_text(json.dumps(cfg))
    env = {**env, "DISCORD_TOKEN_UNSET_X": ""}
    for cmd in (["index"], ["status"], ["status", "--json"], ["search", "deploy"], ["get", "MEMORY.md"],
                ["queues"]):
        out = run_cli(*cmd, env=env)
        assert out.returncode == 0, (cmd, out.stderr)
        assert "Traceback" not in out.stderr
        assert out.stderr.count("TELEGRAM_BOT_TOKEN") <= 1, out.stderr  # one warning, not one per agent
    assert "channels.telegram.botToken: environment variable TELEGRAM_BOT_TOKEN is not set" in \
        run_cli("status", env=env).stderr
    # ...but in a key memindex reads it is an error naming the key and the variable
    cfg["agents"]["defaults"]["memorySearch"] = {"provider": "openai", "remote": {"apiKey": "${MY_EMBED_KEY_X}"}}
    (state / "openclaw.json").write_text(json.dumps(cfg))
    out = run_cli("status", env={**env, "MY_EMBED_KEY_X": ""})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "agents.defaults.memorySearch.remote.apiKey: environment variable MY_EMBED_KEY_X is not set" in out.stderr


def _sqlite_cell(path: Path, table: str, columns: str, key: str, value: dict) -> None:
    """A store cell as OpenClaw 2026.9 keeps it (its table and columns, read from its dist/)."""
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    a, b, c = columns.split(",")
    conn.execute(f"CREATE TABLE {table} ({a} TEXT PRIMARY KEY, {b} TEXT NOT NULL, {c} INTEGER NOT NULL)")
    conn.execute(f"INSERT INTO {table} VALUES (?, ?, 0)", (key, json.dumps(value)))
    conn.commit()
    conn.close()


@pytest.mark.parametrize("schema", ["2026.3", "2026.9", "2026.9-sqlite"])
def test_a_key_only_in_auth_profiles_reaches_the_provider(tmp_path, fresh_server, schema):
    state, env = _state(tmp_path, {}, openclaw_store=False)
    remote = {"baseUrl": fresh_server.base("openai")}
    if schema == "2026.3":  # noqa: SIM108
        cfg = {"agents": {"defaults": {"workspace": str(state / "workspace"),
                                       "memorySearch": {"provider": "openai", "remote": remote}},
                          "list": [{"id": "main"}, {"id": "helper"}]}}
    else:  # what doctor --fix writes: memory.search, agents.entries (2026.9-sqlite: its auth store too).
        # 2026.9 sends a provider's keys to the provider's own endpoint only (recorded: "openai embedding
        # credentials are not configured for <remote.baseUrl>"): the endpoint is models.providers'.
        cfg = {"agents": {"ownership": "explicit", "defaults": {"systemAgent": {"agentId": "main"}},
                          "entries": {"main": {"workspace": str(state / "workspace")}, "helper": {}}},
               "models": {"providers": {"openai": {"baseUrl": remote["baseUrl"], "models": []}}},
               "memory": {"search": {"provider": "openai"}}}
    (state / "openclaw.json").write_text(json.dumps(cfg))
    store = {"version": 1, "profiles": {
        "openai:work": {"type": "api_key", "provider": "openai", "key": "sk-second-in-order"},
        "openai:default": {"type": "api_key", "provider": "openai", "key": KEY},
        "anthropic:default": {"type": "api_key", "provider": "anthropic", "key": "sk-ant-other"}},
        "order": {"openai": ["openai:default", "openai:work"]}}
    if schema == "2026.9-sqlite":  # after doctor --fix: the JSON imported into the shared state database
        _sqlite_cell(state / "state" / "openclaw.sqlite", "config_machine_state", "state_key,value_json,updated_at_ms",
                     "authProfiles.store", store)
    else:
        profiles = state / "agents" / "main" / "agent" / "auth-profiles.json"
        profiles.parent.mkdir(parents=True)
        profiles.write_text(json.dumps(store))
    out = run_cli("--agent", "main", "index", "-v", env=env)
    assert out.returncode == 0, out.stderr
    sent = {r.headers.get("authorization") for r in fresh_server.log_for("openai")}
    assert sent == {f"Bearer {KEY}"}, sent  # the profile first in OpenClaw's order, nothing else
    for cmd in (["status"], ["status", "--json"], ["search", "--json", "deploy key"]):
        got = run_cli("--agent", "main", *cmd, "-v", env=env)
        assert got.returncode == 0 and KEY not in got.stdout + got.stderr, cmd  # never printed
    assert KEY not in out.stdout + out.stderr
    # the helper agent has no auth-profiles.json of its own: OpenClaw merges the main agent's
    out = run_cli("--agent", "helper", "status", "--json", env=env)
    assert json.loads(out.stdout)[0]["status"]["provider"] == "openai", out.stdout
    if schema != "2026.3":  # a remote.baseUrl of someone else's gets no profile key from 2026.9
        cfg["memory"]["search"]["remote"] = {"baseUrl": remote["baseUrl"].replace("/openai/", "/other/openai/")}
        (state / "openclaw.json").write_text(json.dumps(cfg))
        out = run_cli("--agent", "main", "status", "--json", env=env)
        assert json.loads(out.stdout)[0]["status"]["provider"] == "none", out.stdout
