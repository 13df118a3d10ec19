"""memindex resolves every recorded OpenClaw config as the OpenClaw version it is written for does.

The fixtures (tests/fixtures/openclaw/*.json) were recorded from the real CLIs (2026.3.28 and
2026.9.6, from npm) by tests/record_openclaw_fixtures.py: per agent, the workspace, OpenClaw's own
index file, the sources and the embedding provider `openclaw memory status --json` printed. Each is
replayed here in a fresh root with the same environment (HOME, OPENCLAW_HOME / PROFILE /
STATE_DIR, keys) and files (auth-profiles.json); no npm, no Node.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memindex.pipeline.config.auth_profiles import keys_by_provider
from memindex.pipeline.config.paths import normalize_agent_id
from memindex.pipeline.config.settings import Context, load_settings
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.select import select_provider
from tests.record_openclaw_fixtures import fill as _fill

FIXTURES = sorted(p for p in (Path(__file__).parent / "fixtures" / "openclaw").glob("*.json")
                  if not p.stem.startswith("store-"))  # store-*: the side-by-side store fixture


def _setup(fixture: dict[str, Any], root: Path) -> dict[str, str]:
    r = str(root)
    env = {"HOME": f"{r}/home", **_fill(fixture["env"], r)}
    Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
    config = Path(_fill(fixture["configFile"], r))
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(_fill(fixture["config"], r)))
    for rel, content in fixture["files"].items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(json.dumps(content))
    return env


def _provider(settings: Any, env: dict[str, str]) -> tuple[str, str | None]:
    names = list(dict.fromkeys(n for pid in registry.ids() for n in (pid, *registry.get(pid).config_names)))
    profiles = keys_by_provider(settings.agent_dir, settings.state_dir, settings.auth, env, names)
    choice = select_provider(settings.memory_search.to_dict(), settings.providers, env, settings.state_dir / "models",
                             auth_profiles=profiles)
    chosen = choice.primary or choice.fallback
    return (chosen.id, chosen.model) if chosen else ("none", None)


def test_the_fixture_suite_covers_both_versions_and_the_migration():
    schemas = {json.loads(p.read_text())["schema"] for p in FIXTURES}
    names = {p.stem for p in FIXTURES}
    assert schemas == {"2026.3", "2026.9"}, schemas
    assert {"migrated-three-agents-before", "migrated-three-agents-after"} <= names
    after = json.loads((Path(__file__).parent / "fixtures" / "openclaw" / "migrated-three-agents-after.json").read_text())
    # what `openclaw doctor --fix` (2026.9) wrote: the 2026.9 schema, recorded, not written by hand
    assert "entries" in after["config"]["agents"] and "search" in after["config"]["memory"]


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_memindex_resolves_each_agent_as_openclaw_did(path: Path, tmp_path: Path):
    fixture = json.loads(path.read_text())
    env = _setup(fixture, tmp_path)
    root = str(tmp_path)
    for agent in fixture["agents"]:
        want = _fill(agent, root)
        s = load_settings(Context(normalize_agent_id(agent["agentId"])), env=env)
        where = f"{path.stem} / {agent['agentId']}"
        assert s.config_schema.startswith(f"OpenClaw {fixture['schema']} "), (where, s.config_schema)
        assert str(s.workspace) == want["workspaceDir"], where
        assert str(s.openclaw_store) == want["dbPath"], where
        assert sorted(s.sources) == sorted(want["sources"]), where
        provider, model = _provider(s, env)
        assert provider == want["provider"], where
        if provider != "none":
            assert model == want["model"], where
        # memindex's own store is never OpenClaw's, unless the config names one file for both
        # (2026.3's memorySearch.store.path is OpenClaw's key too): then `status` says so
        assert s.store_path != s.openclaw_store or s.store_key.endswith("memorySearch.store.path"), where


@pytest.mark.parametrize("cfg, version", [
    ({"agents": {"list": [{"id": "a", "memorySearch": {}}]}}, "2026.3"),
    ({"memory": {"search": {}}}, "2026.9"),
    ({"agents": {"ownership": "explicit"}}, "2026.9"),
    ({"meta": {"lastTouchedVersion": "2026.9.6"}}, "2026.9"),
    ({"meta": {"lastTouchedVersion": "2026.3.28"}}, "2026.3"),
    ({}, "2026.3"),
])
def test_the_schema_is_told_from_the_keys(cfg, version):
    from memindex.pipeline.config.openclaw_schema import detect

    assert detect(cfg).version == version


def test_a_config_mixing_both_schemas_is_one_error_saying_to_run_doctor(tmp_path):
    from memindex.pipeline.errors import ConfigError

    cfg = tmp_path / "openclaw.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {}}}, "memory": {"search": {}}}))
    with pytest.raises(ConfigError, match=r"agents.defaults.memorySearch: is OpenClaw 2026.3's key .* memory.search; "
                                          r"run `openclaw doctor --fix`"):
        load_settings(Context(config=str(cfg), state_dir=str(tmp_path)), env={"HOME": str(tmp_path)})
