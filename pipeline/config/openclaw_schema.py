"""OpenClaw's two config schemas, and reading either one as the OpenClaw version it is written for.

OpenClaw 2026.3 (the era memindex's spec follows) keeps agents in ``agents.list`` (a list of
``{id, default?, workspace?, memorySearch?}``) and memory-search settings in
``agents.defaults.memorySearch``. OpenClaw 2026.9 (``openclaw doctor --fix`` rewrites old configs
to it) keys agents by id in ``agents.entries``, moves memory search to ``memory.search`` (per agent
``agents.entries.<id>.memory.search``), records the system agent in
``agents.defaults.systemAgent.agentId`` and writes ``agents.ownership: "explicit"``.

The rest of memindex reads the 2026.3 shape: :func:`normalize` rewrites a 2026.9 config into it and
records, under :data:`SCHEMA_KEY`, what differs between the versions beyond key names (read in
OpenClaw 2026.9.6's ``dist/``: ``agent-scope-config``, ``workspace-default``, ``memory-search``,
``memory-search-source-policy``, ``openclaw-agent-db.paths``):

- who inherits the default workspace: 2026.3, the default agent (first ``default: true``, else the
  first entry); 2026.9, the single ``default: true`` agent unless ownership is explicit, else the
  sole agent, else nobody (every agent gets ``workspace-<id>``);
- the default workspace: 2026.3, ``<home>/.openclaw/workspace`` (``workspace-<profile>``); 2026.9,
  ``OPENCLAW_WORKSPACE_DIR``, else ``<OPENCLAW_STATE_DIR>/workspace``, else
  ``<home>/.openclaw-<profile>/workspace``, else ``<home>/.openclaw/workspace``;
- OpenClaw's own index: 2026.3, ``memorySearch.store.path`` or ``<state>/memory/<id>.sqlite``;
  2026.9, ``<state>/agents/<id>/agent/openclaw-agent.sqlite``;
- the provider: 2026.9 reads an unset or ``auto`` provider as ``openai``;
- sources: 2026.9's ``rememberAcrossConversations`` (default: on unless ``session.dmScope`` or a
  binding's ``session.dmScope`` says otherwise) indexes sessions too, and the search's default
  corpus (``searchSources``) is the configured sources.
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from memindex.pipeline.config import paths
from memindex.pipeline.errors import ConfigError

V2026_3 = "2026.3"
V2026_9 = "2026.9"
# Where normalize() leaves what it learnt (defined beside paths.entry_key, which reads it).
SCHEMA_KEY = paths.SCHEMA_KEY
_VERSION = re.compile(r"^(\d{4})\.(\d{1,2})\.")


@dataclass(frozen=True)
class Schema:
    version: str  # V2026_3 or V2026_9
    why: str  # the keys (or meta.lastTouchedVersion) that said so, for `status`
    owner: str | None = None  # the agent that inherits the default workspace (None: nobody)
    # The config key of each (normalised) agents.list entry as the config spells it (2026.9:
    # ``agents.entries.<id>``), for messages; empty: ``agents.list[<i>]`` (paths.entry_key).
    entry_keys: tuple[str, ...] = ()
    # The dotted keys each entry's own ``memory.search`` set as the user wrote it (2026.9), aligned
    # with entry_keys: normalize writes its source policy (``sources``, ``experimental``) into every
    # entry, which the agent did not set (SettingKeys).
    own_keys: tuple[frozenset[str], ...] = ()

    def describe(self) -> str:
        return f"OpenClaw {self.version} ({self.why})"


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _markers(cfg: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(2026.9 keys, 2026.3 keys) present in ``cfg``."""
    agents, memory = _obj(cfg.get("agents")), _obj(cfg.get("memory"))
    defaults = _obj(agents.get("defaults"))
    new = [k for k, present in (("agents.entries", "entries" in agents), ("agents.ownership", "ownership" in agents),
                                ("agents.defaults.systemAgent", "systemAgent" in defaults),
                                ("memory.search", "search" in memory)) if present]
    old = [k for k, present in (("agents.defaults.memorySearch", "memorySearch" in defaults),
                                ("agents.list[].memorySearch", any(isinstance(e, dict) and "memorySearch" in e
                                                                   for e in agents.get("list") or []
                                                                   if isinstance(agents.get("list"), list))))
           if present]
    # 2026.3's per-agent key inside a 2026.9 entry (2026.9 refuses it: "agents.entries.*.memorySearch moved
    # to agents.entries.*.memory.search. Run openclaw doctor --fix"); it was read as the agent's settings.
    entries = agents.get("entries")
    old += [f"agents.entries.{i}.memorySearch" for i, e in (entries.items() if isinstance(entries, dict) else ())
            if isinstance(e, dict) and "memorySearch" in e]
    return new, old


def detect(cfg: Mapping[str, Any]) -> Schema:
    """The OpenClaw version ``cfg`` is written for. A config with keys of both is refused (OpenClaw
    2026.9 refuses it too); one with neither follows ``meta.lastTouchedVersion``, else 2026.3."""
    new, old = _markers(cfg)
    if new and old:
        raise ConfigError(old[0], f"is OpenClaw 2026.3's key but the config also has 2026.9's {new[0]}; "
                                  "run `openclaw doctor --fix` (2026.9) to move it, or remove one of them")
    if new:
        return Schema(V2026_9, ", ".join(new))
    if old:
        return Schema(V2026_3, ", ".join(old))
    touched = _obj(cfg.get("meta")).get("lastTouchedVersion")
    m = _VERSION.match(touched) if isinstance(touched, str) else None
    if m and (int(m.group(1)), int(m.group(2))) >= (2026, 9):
        return Schema(V2026_9, f"meta.lastTouchedVersion {touched}")
    if m:
        return Schema(V2026_3, f"meta.lastTouchedVersion {touched}")
    return Schema(V2026_3, "no version-specific keys")


# OpenClaw 2026.9's doctor moves these flat keys of a memory-search block to nested ones; its schema
# refuses them (legacy-config-migrations.runtime.agents: "memory.search uses legacy flat chunkSize,
# chunkOverlap, or maxResults fields. Run "openclaw doctor --fix""). 2026.3.31 refuses them too.
LEGACY_FLAT_KEYS = {"chunkSize": "chunking.tokens", "chunkOverlap": "chunking.overlap",
                    "maxResults": "query.maxResults"}
DOCTOR = "run `openclaw doctor --fix` (2026.9)"


def _refuse_2026_3_keys(cfg: Mapping[str, Any], schema: Schema) -> None:
    """What OpenClaw 2026.9 refuses in a config written for it, and memindex would otherwise read
    another way without a word: a top-level ``memorySearch`` (ignored), ``agents.list`` beside
    ``agents.entries`` (replaced by the entries), the flat ``chunkSize``-style keys of a
    ``memory.search`` block. Each is one error naming the key, with the doctor's fix."""
    if "memorySearch" in cfg:
        raise ConfigError("memorySearch", f"moved to memory.search in OpenClaw 2026.9, which this config is "
                                          f"written for ({schema.why}); {DOCTOR} to move it")
    agents = _obj(cfg.get("agents"))
    if agents.get("list") is not None and agents.get("entries") is not None:
        raise ConfigError("agents.list", "moved to agents.entries in OpenClaw 2026.9, and the config has "
                                         "agents.entries too (the list would be ignored): move its agents into "
                                         "agents.entries (`openclaw doctor --fix` keeps agents.entries and drops "
                                         "the list)")
    blocks = [("memory.search", _obj(cfg.get("memory")).get("search"))]
    entries = agents.get("entries")
    blocks += [(f"agents.entries.{i}.memory.search", _obj(e.get("memory")).get("search"))
               for i, e in (entries.items() if isinstance(entries, dict) else ()) if isinstance(e, dict)]
    for key, block in blocks:
        for flat, nested in LEGACY_FLAT_KEYS.items():
            if isinstance(block, dict) and flat in block:
                raise ConfigError(f"{key}.{flat}", f"is a flat key OpenClaw 2026.9 refuses: use {key}.{nested}; "
                                                   f"{DOCTOR} to move it")


def _entries_as_list(entries: Any) -> list[Any]:
    if not isinstance(entries, dict):
        raise ConfigError("agents.entries", f"expected an object keyed by agent id, got {entries!r}")
    out = []
    for agent_id, entry in entries.items():
        if entry is None:
            continue
        if not isinstance(entry, dict):
            raise ConfigError(f"agents.entries.{agent_id}", f"expected an object, got {entry!r}")
        out.append({**entry, "id": agent_id})
    return out


def _memory_search(entry: dict[str, Any], key: str) -> dict[str, Any] | None:
    """``<entry>.memory.search`` taken out of ``entry`` when it is an object. The rest of the
    agent's ``memory`` block (2026.9 allows only ``search`` there), and a ``search`` that is not an
    object, stay in it for ``settings.resolve_agent`` to refuse, naming the key."""
    memory = entry.get("memory")
    if memory is None:
        return None
    if not isinstance(memory, dict):
        raise ConfigError(f"{key}.memory", f"expected an object, got {memory!r}")
    memory = dict(memory)
    search = memory.get("search")
    if isinstance(search, dict):
        del memory["search"]
    entry["memory"] = memory
    return search if isinstance(search, dict) else None


def _norm_id(raw: Any) -> str:
    return paths.normalize_agent_id(raw if isinstance(raw, str) else None)


def _owner_2026_9(agents: Mapping[str, Any], entries: list[Any], has_roster: bool) -> str | None:
    """tryResolveLegacyDataOwnerAgentId: the single ``default: true`` entry (not under explicit
    ownership), else the sole agent (no roster at all: ``main``)."""
    if agents.get("ownership") != "explicit":
        marked = [e for e in entries if isinstance(e, dict) and e.get("default") is True]
        if len(marked) == 1:
            return _norm_id(marked[0].get("id"))
    if not entries:
        return None if has_roster else "main"
    return _norm_id(entries[0].get("id")) if len(entries) == 1 else None


def _remember_across(cfg: Mapping[str, Any], ms: Mapping[str, Any], base: Mapping[str, Any]) -> bool:
    """resolveRememberAcrossConversations (2026.9)."""
    explicit = ms.get("rememberAcrossConversations", base.get("rememberAcrossConversations"))
    if isinstance(explicit, bool):
        return explicit
    dm_scope = _obj(cfg.get("session")).get("dmScope")
    bindings = _list(cfg.get("bindings"))
    return (dm_scope is None or dm_scope == "main") and not any(
        isinstance(b, dict) and isinstance(b.get("session"), dict) and b["session"].get("dmScope") is not None
        for b in bindings)


def _sources_2026_9(cfg: Mapping[str, Any], ms: dict[str, Any], base: Mapping[str, Any]) -> None:
    """resolveMemorySearchSourcePolicy, written into ``ms`` as the 2026.3 keys memindex reads:
    ``sources`` (indexed), ``experimental.sessionMemory`` and ``searchSources`` (default corpus)."""
    remember = _remember_across(cfg, ms, base)
    configured = ms.get("sources", base.get("sources"))
    configured = configured if isinstance(configured, list) else None
    experimental = {**_obj(base.get("experimental")), **_obj(ms.get("experimental"))}
    session_memory = experimental.get("sessionMemory") is True

    def norm(sources: list[Any] | None, sessions_on: bool) -> list[str]:
        picked = [s for s in dict.fromkeys(sources or ["memory"]) if s == "memory" or (s == "sessions" and sessions_on)]
        return picked or ["memory"]

    search = norm(configured, session_memory or (remember and "sessions" in (configured or [])))
    indexed = norm([*search, "sessions"] if remember else configured, remember or session_memory)
    ms["sources"] = indexed
    ms["searchSources"] = search
    ms["experimental"] = {**_obj(ms.get("experimental")), "sessionMemory": remember or session_memory}


def _extra_paths(ms: dict[str, Any]) -> None:
    """2026.9 also takes ``{path, pattern?}`` entries; memindex indexes the path (every ``.md``
    under it: a pattern narrows nothing here)."""
    extra = ms.get("extraPaths")
    if isinstance(extra, list):
        ms["extraPaths"] = [e["path"] if isinstance(e, dict) and isinstance(e.get("path"), str) else e for e in extra]


def normalize(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` in the 2026.3 shape, with :data:`SCHEMA_KEY` holding the :class:`Schema` it was read
    as. A 2026.3 config comes back as it is (plus that key)."""
    schema = detect(cfg)
    if schema.version == V2026_3:
        return {**cfg, SCHEMA_KEY: schema}
    _refuse_2026_3_keys(cfg, schema)
    out = copy.deepcopy(cfg)
    agents = _obj(out.get("agents"))
    if "agents" in out and not isinstance(out["agents"], dict):
        raise ConfigError("agents", f"expected an object, got {out['agents']!r}")
    has_roster = agents.get("entries") is not None or agents.get("list") is not None
    if agents.get("entries") is not None:
        entries: list[Any] = _entries_as_list(agents.pop("entries"))
        key_of = {id(e): f"agents.entries.{e['id']}" for e in entries}
    else:
        entries = list(agents.get("list") or []) if isinstance(agents.get("list"), list) else []
        key_of = {id(e): f"agents.list[{i}]" for i, e in enumerate(entries)}
    owner = _owner_2026_9(agents, entries, has_roster)
    memory = out.get("memory")
    if memory is not None and not isinstance(memory, dict):
        raise ConfigError("memory", f"expected an object, got {memory!r}")
    memory = dict(memory or {})
    base = memory.pop("search", None)
    if base is not None and not isinstance(base, dict):
        raise ConfigError("memory.search", f"expected an object, got {base!r}")
    base = dict(base or {})
    out["memory"] = memory
    defaults = dict(_obj(agents.get("defaults")))
    system = _obj(defaults.pop("systemAgent", None)).get("agentId")
    new_entries = []
    own_keys: list[frozenset[str]] = []
    for original in entries:
        if not isinstance(original, dict):
            new_entries.append(original)
            own_keys.append(frozenset())
            continue
        e = dict(original)
        if not isinstance(e.get("default", False), bool):  # (rewritten below: checked while it is the user's)
            raise ConfigError(f"{key_of[id(original)]}.default", f"expected true or false, got {e['default']!r}")
        ms = _memory_search(e, key_of[id(original)])
        if ms is not None:
            e["memorySearch"] = ms
        new_entries.append(e)
        own_keys.append(frozenset(_dotted(ms or {})))
    # The system agent is memindex's default agent (OpenClaw's ambient owner); a config without one
    # keeps 2026.3's rule (first entry) rather than OpenClaw's "pass --agent".
    chosen = _norm_id(system) if isinstance(system, str) and system.strip() else owner
    if chosen and any(isinstance(e, dict) and _norm_id(e.get("id")) == chosen for e in new_entries):
        for e in new_entries:
            if isinstance(e, dict):
                e["default"] = _norm_id(e.get("id")) == chosen
    # 2026.9 reads an unset or "auto" provider as openai, and its own source policy.
    provider = base.get("provider")
    if provider is None or (isinstance(provider, str) and provider.strip() in ("", "auto")):
        base["provider"] = "openai"
    for e in new_entries:
        if isinstance(e, dict):
            ms = dict(_obj(e.get("memorySearch")))
            _extra_paths(ms)
            _sources_2026_9(out, ms, base)
            e["memorySearch"] = ms
            if isinstance(ms.get("provider"), str) and ms["provider"].strip() == "auto":
                ms["provider"] = "openai"
    _extra_paths(base)
    _sources_2026_9(out, base, {})
    defaults["memorySearch"] = base
    agents["defaults"] = defaults
    agents.pop("ownership", None)
    if new_entries or has_roster:
        agents["list"] = new_entries
    out["agents"] = agents
    out[SCHEMA_KEY] = Schema(V2026_9, schema.why, owner, tuple(key_of[id(e)] for e in entries), tuple(own_keys))
    return out


def schema_of(cfg: Mapping[str, Any]) -> Schema:
    """The schema :func:`normalize` recorded (a config that was not normalized: detected now)."""
    found = cfg.get(SCHEMA_KEY)
    return found if isinstance(found, Schema) else detect(cfg)


# --- what differs beyond key names ---------------------------------------------------------------


def workspace_owner(cfg: Mapping[str, Any], default_agent: str) -> str | None:
    """The agent that inherits the default workspace."""
    schema = schema_of(cfg)
    return default_agent if schema.version == V2026_3 else schema.owner


def default_workspace(cfg: Mapping[str, Any], env: Mapping[str, str]) -> Path:
    """resolveDefaultAgentWorkspaceDir of the config's version."""
    if schema_of(cfg).version == V2026_3:
        return paths.default_workspace(env)
    explicit = (env.get("OPENCLAW_WORKSPACE_DIR") or "").strip()
    if explicit:
        return Path(os.path.abspath(explicit))
    if (env.get("OPENCLAW_STATE_DIR") or "").strip():
        return paths.default_state_dir(env) / "workspace"
    profile = (env.get("OPENCLAW_PROFILE") or "").strip()
    if profile and profile.lower() != "default":
        return paths.resolve_home(env) / f"{paths.STATE_DIRNAME}-{profile}" / "workspace"
    return paths.resolve_home(env) / paths.STATE_DIRNAME / "workspace"


def openclaw_store(cfg: Mapping[str, Any], raw_id: str, agent_id: str, state_dir: Path, custom: Path | None) -> Path:
    """Where the OpenClaw version the config is written for keeps its own index for ``agent_id``
    (``custom``: 2026.3's ``memorySearch.store.path``, resolved). 2026.3.28 names the file after the
    id as configured (``Beta.sqlite``, recorded), 2026.9 after the normalised one."""
    if schema_of(cfg).version == V2026_9:
        return state_dir / "agents" / agent_id / "agent" / "openclaw-agent.sqlite"
    return custom or state_dir / "memory" / f"{paths.normalize_agent_id(raw_id) if '/' in raw_id else raw_id}.sqlite"


def nests_workspaces(cfg: Mapping[str, Any]) -> bool:
    """Whether an agent that does not inherit the default workspace gets
    ``<agents.defaults.workspace>/<id>`` (2026.9) rather than ``<state>/workspace-<id>`` (2026.3.28)."""
    return schema_of(cfg).version == V2026_9


def store_key(cfg: Mapping[str, Any]) -> str:
    """The config key of memindex's store path in this schema (for messages)."""
    return "memory.search.store.path" if schema_of(cfg).version == V2026_9 else "memorySearch.store.path"


def ms_keys(cfg: Mapping[str, Any], agent_id: str, base_key: str, agent_key: str) -> tuple[str, str]:
    """The config keys of the defaults' and the agent's memory-search settings, as the user wrote
    them (a 2026.9 config's are ``memory.search`` and ``agents.entries.<id>.memory.search``)."""
    if schema_of(cfg).version == V2026_3:
        return base_key, agent_key
    agents = _obj(cfg.get("agents"))
    entries = [e for e in agents.get("list") or [] if isinstance(e, dict)]
    raw = next((e.get("id") for e in entries if _norm_id(e.get("id")) == agent_id), agent_id)
    return "memory.search", f"agents.entries.{raw}.memory.search"


@dataclass(frozen=True)
class SettingKeys:
    """Where an agent's memory-search settings are written in its config, for the messages that
    name one ("set ...", "check ..."): 2026.3's ``memorySearch.<leaf>`` (the short form the docs
    use), 2026.9's ``memory.search.<leaf>``, or ``agents.entries.<id>.memory.search.<leaf>`` when
    the agent's own block sets that leaf or the object holding it (``remote``)."""

    base: str = "memorySearch"
    agent: str | None = None  # the agent's own block (2026.9), when it has one
    agent_set: frozenset[str] = frozenset()  # the dotted keys the agent's block sets, and their parents

    def key(self, leaf: str) -> str:
        parts = leaf.split(".")
        own = self.agent is not None and any(".".join(parts[:i]) in self.agent_set for i in range(1, len(parts) + 1))
        return f"{self.agent if own else self.base}.{leaf}"

    def to_set(self, leaf: str) -> str:
        """Where to set ``leaf`` for this agent, for a message saying to: :meth:`key` (2026.9); a
        2026.3 config's keys do not say which block sets it, so both of its blocks."""
        if self.agent is None:
            return f"agents.defaults.{self.base}.{leaf} (or the agent's {self.base}.{leaf})"
        return self.key(leaf)


def _dotted(tree: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in tree.items():
        out.append(f"{prefix}{k}")
        if isinstance(v, dict):
            out += _dotted(v, f"{prefix}{k}.")
    return out


def setting_keys(cfg: Mapping[str, Any], agent_id: str, agent_ms: Mapping[str, Any]) -> SettingKeys:
    """The :class:`SettingKeys` of ``agent_id`` (``agent_ms``: the settings its own block sets, as
    resolved: of those, the ones the user wrote there, not normalize's source policy)."""
    schema = schema_of(cfg)
    if schema.version == V2026_3:
        return SettingKeys()
    base, agent = ms_keys(cfg, agent_id, "", "")
    agent_set = frozenset(_dotted(agent_ms))
    entries = _list(_obj(cfg.get("agents")).get("list"))
    at = next((i for i, e in enumerate(entries) if isinstance(e, dict) and _norm_id(e.get("id")) == agent_id), None)
    if at is not None and at < len(schema.own_keys):
        agent_set &= schema.own_keys[at]
    return SettingKeys(base, agent, agent_set)


def agent_memory_key(cfg: Mapping[str, Any], agent_id: str) -> str | None:
    """The config key of the agent's own ``memory`` block, which only a 2026.9 config has
    (``agents.entries.<id>.memory``; None for 2026.3)."""
    if schema_of(cfg).version == V2026_3:
        return None
    return ms_keys(cfg, agent_id, "", "")[1].removesuffix(".search")


def reads_memory_search(cfg: Mapping[str, Any]) -> bool:
    """Whether ``memory.search`` is a key this config can hold: a 2026.9 config's, or one without
    2026.3's keys (where writing it makes the config 2026.9); for the "known:" list and "did you
    mean" of an unknown key in ``memory``."""
    return schema_of(cfg).version == V2026_9 or not _markers(cfg)[1]


def reads_store_path(described: str) -> bool:
    """Whether OpenClaw of the schema :meth:`Schema.describe` named keeps its own index at the
    ``store.path`` memindex reads too: 2026.3's ``memorySearch.store.path`` is both; 2026.9 keeps its
    index in the agent database and refuses the key."""
    return described.startswith(f"OpenClaw {V2026_3} ")


def binds_keys_to_destination(described: str) -> bool:
    """Whether the schema :meth:`Schema.describe` named sends provider keys (auth profiles,
    environment) only to the provider's own endpoint: 2026.9 does ("openai embedding credentials
    are not configured for <remote.baseUrl>"), 2026.3 sends them to any remote.baseUrl."""
    return described.startswith(f"OpenClaw {V2026_9} ")
