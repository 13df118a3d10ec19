"""API keys from OpenClaw's ``auth-profiles.json``, where ``openclaw onboard`` puts them.

Read as OpenClaw 2026.3 reads them (``src/agents/auth-profiles/``: ``store.ts``, ``order.ts``,
``resolve.ts``): the agent's ``<agentDir>/auth-profiles.json`` merged over the main agent's
(``OPENCLAW_AGENT_DIR``, else ``<state>/agents/main/agent``). OpenClaw 2026.9 keeps the same JSON in
SQLite (``openclaw doctor --fix`` imports the files and renames them ``*.migrated-*``): the shared
store in ``<state>/state/openclaw.sqlite`` (``config_machine_state['authProfiles.store']``), an
agent's in ``<agentDir>/openclaw-agent.sqlite`` (``auth_profile_store['primary']``); read-only here.
Then: a provider's profiles in the store's
``order.<provider>``, else the config's ``auth.order.<provider>``, else the config's
``auth.profiles`` of that provider, else every stored profile of that provider (``openai:default``
among them) sorted oauth, token, api_key, least recently used first; profiles in cooldown last.
memindex takes ``api_key`` profiles (``key``, or a ``keyRef`` SecretRef) and unexpired ``token``
profiles; an OAuth profile needs a refresh flow memindex does not run, so it is skipped.

Keys are returned to the embeddings' key lookup (after the config's keys, before the environment)
and never logged. The files are only read.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping

from memindex.pipeline.config.loader import is_secret_ref, resolve_secret
from memindex.pipeline.config.paths import resolve_user_path
from memindex.pipeline.errors import ConfigError

FILENAME = "auth-profiles.json"
_TYPE_RANK = {"oauth": 0, "token": 1, "api_key": 2}


def _coerce(data: Any) -> dict[str, Any]:
    return data if isinstance(data, dict) and isinstance(data.get("profiles"), dict) else {}


def _read(path: Path) -> dict[str, Any] | None:
    """One JSON store (None: no file); an unreadable or malformed one is empty (OpenClaw's coerce)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return {}
    try:
        return _coerce(json.loads(text))
    except ValueError:
        return {}


def _read_sqlite(path: Path, sql: str, key: str) -> dict[str, Any] | None:
    """A 2026.9 store: one JSON cell of OpenClaw's SQLite, opened read-only (None: not there)."""
    if not path.is_file():
        return None
    import sqlite3

    for mode in ("mode=ro", "mode=ro&immutable=1"):  # immutable: no -shm to share (a read-only dir)
        try:
            conn = sqlite3.connect(f"file:{path.as_posix()}?{mode}", uri=True, timeout=2)
            try:
                row = conn.execute(sql, (key,)).fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            continue
        if not row:
            return None
        try:
            return _coerce(json.loads(row[0]))
        except (TypeError, ValueError):
            return {}
    return None


def _agent_store(agent_dir: Path) -> dict[str, Any] | None:
    found = _read(agent_dir / FILENAME)
    if found is None:
        found = _read_sqlite(agent_dir / "openclaw-agent.sqlite",
                             "SELECT store_json FROM auth_profile_store WHERE store_key = ?", "primary")
    return found


def _shared_store(state_dir: Path, main: Path) -> dict[str, Any] | None:
    found = _read(main / FILENAME)
    if found is None:
        found = _read_sqlite(state_dir / "state" / "openclaw.sqlite",
                             "SELECT value_json FROM config_machine_state WHERE state_key = ?", "authProfiles.store")
    return found if found is not None else _agent_store(main)


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """mergeAuthProfileStores: the agent's profiles, order and usage over the main agent's."""
    out: dict[str, Any] = {}
    for key in ("profiles", "order", "usageStats"):
        a, b = base.get(key), over.get(key)
        out[key] = {**(a if isinstance(a, dict) else {}), **(b if isinstance(b, dict) else {})}
    return out


def main_agent_dir(state_dir: Path, env: Mapping[str, str]) -> Path:
    """resolveOpenClawAgentDir."""
    override = (env.get("OPENCLAW_AGENT_DIR") or env.get("PI_CODING_AGENT_DIR") or "").strip()
    return resolve_user_path(override, env) if override else state_dir / "agents" / "main" / "agent"


def load_store(agent_dir: Path | None, state_dir: Path, env: Mapping[str, str]) -> dict[str, Any]:
    main = main_agent_dir(state_dir, env)
    store = _shared_store(state_dir, main) or {}
    if agent_dir is not None and Path(agent_dir) != main:
        store = _merge(store, _agent_store(Path(agent_dir)) or {})
    return _merge(store, {})


def _norm(provider: Any) -> str:
    return provider.strip().lower() if isinstance(provider, str) else ""


def _for_provider(entries: Any, provider: str) -> list[str] | None:
    if not isinstance(entries, dict):
        return None
    for key, value in entries.items():
        if _norm(key) == provider and isinstance(value, list):
            return [v for v in value if isinstance(v, str)]
    return None


def _cooldown_until(store: Mapping[str, Any], profile_id: str) -> float:
    stats = store["usageStats"].get(profile_id)
    if not isinstance(stats, dict):
        return 0
    until = max((v for k in ("cooldownUntil", "disabledUntil") if isinstance(v := stats.get(k), (int, float))),
                default=0)
    return until if until > time.time() * 1000 else 0


def _eligible(store: Mapping[str, Any], auth: Mapping[str, Any], profile_id: str, provider: str) -> bool:
    cred = store["profiles"].get(profile_id)
    if not isinstance(cred, dict) or _norm(cred.get("provider")) != provider:
        return False
    configured = (auth.get("profiles") or {}).get(profile_id) if isinstance(auth.get("profiles"), dict) else None
    if isinstance(configured, dict):
        if _norm(configured.get("provider")) != provider:
            return False
        if configured.get("mode") != cred.get("type") and not (configured.get("mode") == "oauth"
                                                                and cred.get("type") == "token"):
            return False
    return cred.get("type") in _TYPE_RANK


def profile_order(store: Mapping[str, Any], auth: Mapping[str, Any], provider: str) -> list[str]:
    """resolveAuthProfileOrder for ``provider``."""
    provider = _norm(provider)
    explicit = _for_provider(store["order"], provider) or _for_provider(auth.get("order"), provider)
    configured = [pid for pid, p in (auth.get("profiles") or {}).items()
                  if isinstance(p, dict) and _norm(p.get("provider")) == provider] \
        if isinstance(auth.get("profiles"), dict) else []
    listed = [pid for pid, c in store["profiles"].items() if isinstance(c, dict) and _norm(c.get("provider")) == provider]
    base = explicit if explicit is not None else (configured or listed)
    picked = [p for p in dict.fromkeys(base) if _eligible(store, auth, p, provider)]
    if not picked and configured and all(p not in store["profiles"] for p in base):
        picked = [p for p in listed if _eligible(store, auth, p, provider)]
    ready = [p for p in picked if not _cooldown_until(store, p)]
    cooling = sorted((p for p in picked if _cooldown_until(store, p)), key=lambda p: _cooldown_until(store, p))
    if explicit is None:
        def last_used(p: str) -> float:
            stats = store["usageStats"].get(p)
            used = stats.get("lastUsed") if isinstance(stats, dict) else None
            return used if isinstance(used, (int, float)) else 0

        ready.sort(key=lambda p: (_TYPE_RANK[store["profiles"][p]["type"]], last_used(p)))
    return ready + cooling


def _secret(cred: Mapping[str, Any], field: str, cfg: Mapping[str, Any], env: Mapping[str, str],
            where: str) -> str | None:
    value = cred.get(field)
    ref = cred.get(f"{field}Ref")
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(ref, dict):
        if is_secret_ref(ref):
            try:
                return resolve_secret(ref, cfg, env, where).strip() or None
            except ConfigError:
                return None  # OpenClaw moves on to the next profile (debug log only)
    return None


def api_key(store: Mapping[str, Any], cfg: Mapping[str, Any], env: Mapping[str, str], provider: str) -> str | None:
    """The first usable key of ``provider``'s profiles, in OpenClaw's order; None when none has one."""
    given = cfg.get("auth")
    auth: Mapping[str, Any] = given if isinstance(given, dict) else {}
    for profile_id in profile_order(store, auth, provider):
        cred = store["profiles"][profile_id]
        where = f"{FILENAME}: {profile_id}"
        if cred["type"] == "api_key":
            key = _secret(cred, "key", cfg, env, where)
        elif cred["type"] == "token":
            expires = cred.get("expires")
            if isinstance(expires, (int, float)) and expires <= time.time() * 1000:
                continue
            key = _secret(cred, "token", cfg, env, where)
        else:  # oauth: a refresh flow memindex does not run
            continue
        if key:
            return key
    return None


def keys_by_provider(agent_dir: Path | None, state_dir: Path, cfg: Mapping[str, Any], env: Mapping[str, str],
                     providers: list[str]) -> dict[str, str]:
    """``{provider name: key}`` for each of ``providers`` that has a usable profile."""
    store = load_store(agent_dir, state_dir, env)
    if not store["profiles"]:
        return {}
    out = {}
    for name in providers:
        key = api_key(store, cfg, env, name)
        if key:
            out[name] = key
    return out
