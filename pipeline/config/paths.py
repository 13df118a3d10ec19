"""Agents, homes, state dirs and workspaces, resolved the way OpenClaw resolves them.

Each function names the OpenClaw function it mirrors, so the two can be read side
by side (``src/agents/agent-scope.ts``, ``src/config/paths.ts``,
``src/infra/home-dir.ts``, ``src/agents/workspace-default.ts``,
``src/routing/session-key.ts``). Every path returned is absolute.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

from memindex.pipeline.errors import ConfigError, UnknownAgent

DEFAULT_AGENT = "main"  # DEFAULT_AGENT_ID
STATE_DIRNAME = ".openclaw"
CONFIG_FILENAME = "openclaw.json"
# Pre-rename installs OpenClaw still runs from when ~/.openclaw does not exist (config/paths.ts).
LEGACY_STATE_DIRNAMES = (".clawdbot",)
LEGACY_CONFIG_FILENAMES = ("clawdbot.json",)
# A queue message's config when its sender had no config file: the receiver must not pick one.
# Not "" (what it once was): an empty --config or Context(config="") is a caller's mistake, refused,
# never a silent "no config". A NUL can be in no path a user gives, so this can be no real file.
NO_CONFIG = "\0no-config"
# What senders before that change put in a message for "no config file" (read, never written).
LEGACY_NO_CONFIG = ""

_VALID_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$", re.I)
_INVALID_CHARS = re.compile(r"[^a-z0-9_-]+")


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def _nonblank(value: str | None) -> str | None:
    value = (value or "").strip()
    # OpenClaw's normalizeHomeValue: a shell placeholder is no home at all.
    return value if value and value not in ("undefined", "null") else None


def _os_homedir(env: Mapping[str, str]) -> str | None:
    """Node's ``os.homedir()``: ``HOME`` as set (even blank), the passwd entry only when unset.
    Python's ``expanduser`` reads a blank ``HOME`` as ``/``, which made the state dir ``/.openclaw``."""
    if "HOME" in env:
        return None
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError, OSError):
        return None


def resolve_home(env: Mapping[str, str] | None = None) -> Path:
    """resolveRequiredHomeDir: ``OPENCLAW_HOME`` (its ``~`` is the OS home), else ``HOME``, else
    ``USERPROFILE``, else the OS user's home; with none of them, the working directory."""
    env = _env(env)
    os_home = _nonblank(env.get("HOME")) or _nonblank(env.get("USERPROFILE")) or _nonblank(_os_homedir(env))
    explicit = _nonblank(env.get("OPENCLAW_HOME"))
    if explicit and re.match(r"~(?=$|[\\/])", explicit):
        # A ``~`` with no OS home to stand for is no home at all (OpenClaw falls back to the cwd).
        explicit = os_home and os_home + explicit[1:]
    elif explicit is None:
        explicit = os_home
    return Path(explicit or os.getcwd()).resolve()


def expand_home(raw: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Path:
    """A leading ``~`` (alone or before a separator) as the OpenClaw home, as every config path
    reads it (``OPENCLAW_HOME`` when set, not only the OS home); anything else unchanged."""
    text = str(raw)
    if text.startswith("~"):
        text = re.sub(r"^~(?=$|[\\/])", lambda _: str(resolve_home(env)), text)
    return Path(text)


def resolve_user_path(raw: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Path:
    """resolveUserPath: trimmed; a leading ``~`` is the OpenClaw home; relative to the cwd; absolute."""
    return Path(os.path.abspath(expand_home(str(raw).strip(), env)))


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """resolveStateDir: ``OPENCLAW_STATE_DIR``, else ``<home>/.openclaw`` if it exists, else a
    legacy ``<home>/.clawdbot`` that exists, else ``<home>/.openclaw``."""
    override = _nonblank(_env(env).get("OPENCLAW_STATE_DIR"))
    if override:
        return resolve_user_path(override, env)
    home = resolve_home(env)
    new = home / STATE_DIRNAME
    if new.exists():
        return new
    return next((home / d for d in LEGACY_STATE_DIRNAMES if (home / d).is_dir()), new)


def config_path_for(explicit: str | os.PathLike[str] | None, state_dir: Path,
                    env: Mapping[str, str] | None = None) -> Path | None:
    """resolveConfigPath: ``explicit`` (``--config``; ``NO_CONFIG`` for none), else
    ``OPENCLAW_CONFIG_PATH``, else ``<state dir>/openclaw.json`` (or a legacy ``clawdbot.json``) if it
    exists; ``None``: defaults only."""
    if explicit is not None:
        return resolve_user_path(explicit, env) if str(explicit) != NO_CONFIG else None
    override = _nonblank(_env(env).get("OPENCLAW_CONFIG_PATH"))
    if override:
        return resolve_user_path(override, env)
    for name in (CONFIG_FILENAME, *LEGACY_CONFIG_FILENAMES):
        if (state_dir / name).exists():
            return state_dir / name
    return None


def default_workspace(env: Mapping[str, str] | None = None) -> Path:
    """resolveDefaultAgentWorkspaceDir: ``<home>/.openclaw/workspace``, or ``workspace-<profile>``
    under ``OPENCLAW_PROFILE``. The state dir does not move it (OpenClaw joins the home, not
    ``OPENCLAW_STATE_DIR``)."""
    profile = _nonblank(_env(env).get("OPENCLAW_PROFILE"))
    name = f"workspace-{profile}" if profile and profile.lower() != "default" else "workspace"
    return resolve_home(env) / STATE_DIRNAME / name


def normalize_agent_id(raw: str | None) -> str:
    """normalizeAgentId: lower case; other characters collapse to ``-``; blank is ``main``.

    Path separators and dots become dashes here, so a normalised id can never
    leave the directory it is joined to.
    """
    text = (raw or "").strip()
    if not text:
        return DEFAULT_AGENT
    if _VALID_ID.match(text):
        return text.lower()
    return _collapsed(text)[:64] or DEFAULT_AGENT


def _collapsed(text: str) -> str:
    """normalizeAgentId's rewrite: lower case, each run of other characters one ``-``, none at the ends."""
    return _INVALID_CHARS.sub("-", text.lower()).strip("-")


def validate_agent_id(raw: str, key: str = "--agent") -> str:
    """An id given by a user (``--agent``, a queue message): normalised like OpenClaw, but
    one that would name a path (``a/b``, ``..``, absolute) or nothing is refused, not rewritten.
    Nothing includes an id with no character an id keeps (``*``, ``!!!``, ``é``): OpenClaw makes it
    ``main``, which read main's memory for a server's or ``--agent``'s typo, main being the default or not."""
    text = raw.strip() if isinstance(raw, str) else ""
    if (not text or "/" in text or "\\" in text or text in (".", "..") or "\0" in text
            or not _collapsed(text)):
        raise ConfigError(key, f"invalid agent id {raw!r}: expected letters, digits, '_' or '-'")
    return normalize_agent_id(text)


# Where openclaw_schema.normalize() leaves what it learnt (its Schema); a key no OpenClaw config can
# hold (not a valid JSON5 identifier OpenClaw's schema knows), never validated as memory settings.
# Defined here, below openclaw_schema, so that entry_key can read it.
SCHEMA_KEY = "$memindexSchema"


def entry_key(cfg: Mapping[str, Any], i: int) -> str:
    """The config key of ``agents.list[i]`` as the config spells it: a 2026.9 config's
    ``agents.entries.<id>`` (recorded by ``openclaw_schema.normalize``), else ``agents.list[<i>]``."""
    keys: tuple[str, ...] = getattr(cfg.get(SCHEMA_KEY), "entry_keys", ())
    return keys[i] if i < len(keys) else f"agents.list[{i}]"


def _id_key(cfg: Mapping[str, Any], i: int) -> str:
    """Where entry ``i``'s id is written: its ``id`` key, or (2026.9) the entry's own key."""
    key = entry_key(cfg, i)
    return f"{key}.id" if key.startswith("agents.list[") else key


def agent_entries(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """listAgentEntries, with every entry's ``id`` checked (one ConfigError naming the key)."""
    agents = cfg.get("agents")
    if agents is None:
        return []
    if not isinstance(agents, dict):
        raise ConfigError("agents", f"expected an object, got {agents!r}")
    entries = agents.get("list")
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError("agents.list", f"expected a list, got {entries!r}")
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise ConfigError(entry_key(cfg, i), f"expected an object, got {e!r}")
        if not isinstance(e.get("id"), str) or not e["id"].strip():
            raise ConfigError(_id_key(cfg, i), "every agent needs a non-empty string id")
        if not isinstance(e.get("default", False), bool):
            raise ConfigError(f"{entry_key(cfg, i)}.default", f"expected true or false, got {e['default']!r}")
    seen: dict[str, int] = {}
    for i, e in enumerate(entries):
        # Ids are compared normalised ("Main" is "main", "my.agent" is "my-agent"): two entries
        # with one id would be one agent, the second silently never indexed.
        first = seen.setdefault(normalize_agent_id(e["id"]), i)
        if first != i:
            raise ConfigError(_id_key(cfg, i), f"{e['id']!r} is the same agent id as {entry_key(cfg, first)} "
                                               f"({entries[first]['id']!r}); give each agent its own id")
    return entries


def list_agent_ids(cfg: Mapping[str, Any]) -> list[str]:
    """listAgentIds: normalised, de-duplicated, in config order; ``main`` when none is configured."""
    ids = list(dict.fromkeys(normalize_agent_id(e["id"]) for e in agent_entries(cfg)))
    return ids or [DEFAULT_AGENT]


def default_agent_id(cfg: Mapping[str, Any]) -> str:
    """resolveDefaultAgentId: the first entry with ``default: true``, else the first entry, else ``main``."""
    entries = agent_entries(cfg)
    if not entries:
        return DEFAULT_AGENT
    chosen = next((e for e in entries if e.get("default") is True), entries[0])
    return normalize_agent_id(chosen["id"])


def find_agent(cfg: Mapping[str, Any], agent_id: str) -> tuple[int, dict[str, Any]] | None:
    """resolveAgentConfig: the (index, entry) whose normalised id is ``agent_id``."""
    for i, e in enumerate(agent_entries(cfg)):
        if normalize_agent_id(e["id"]) == agent_id:
            return i, e
    return None


def resolve_agent_id(cfg: Mapping[str, Any], requested: str | None, key: str = "--agent") -> str:
    """The agent a command acts on: ``requested`` (validated, normalised) or the default agent.

    An id that is not configured is refused, naming the configured ones; with no
    ``agents.list`` only ``main`` exists, as in OpenClaw. ``key`` names where the id came from
    (the CLI's ``--agent``, a library caller's ``agent_id``).
    """
    if requested is None:
        return default_agent_id(cfg)
    agent_id = validate_agent_id(requested, key)
    known = list_agent_ids(cfg)
    if agent_id not in known:
        raise UnknownAgent(key, f"unknown agent {requested!r}; configured: {', '.join(known)}")
    return agent_id


def _path_value(value: Any, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(key, f"expected a path string, got {value!r}")
    return value.strip() or None


_DEFAULT = object()


def agent_workspace(cfg: Mapping[str, Any], agent_id: str, state_dir: Path,
                    env: Mapping[str, str] | None = None, *, owner: Any = _DEFAULT,
                    default_dir: Path | None = None, nest_in_defaults: bool = True) -> Path:
    """resolveAgentWorkspaceDir.

    The agent's own ``workspace``; else, for the default agent,
    ``agents.defaults.workspace`` or the default workspace; else
    ``<agents.defaults.workspace>/<agentId>`` or ``<state dir>/workspace-<agentId>``.
    """
    found = find_agent(cfg, agent_id)
    if found is not None:
        own = _path_value(found[1].get("workspace"), f"{entry_key(cfg, found[0])}.workspace")
        if own:
            return resolve_user_path(own, env)
    defaults = (cfg.get("agents") or {}).get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ConfigError("agents.defaults", f"expected an object, got {defaults!r}")
    fallback = _path_value(defaults.get("workspace"), "agents.defaults.workspace")
    # Who inherits the default workspace, and where that is, differ between OpenClaw 2026.3 and
    # 2026.9: the caller says (openclaw_schema); by default, 2026.3's rule.
    if agent_id == (default_agent_id(cfg) if owner is _DEFAULT else owner):
        return resolve_user_path(fallback, env) if fallback else default_dir or default_workspace(env)
    if fallback and nest_in_defaults:  # OpenClaw 2026.3.28 gives the others <state>/workspace-<id> regardless
        return resolve_user_path(fallback, env) / agent_id
    return state_dir / f"workspace-{agent_id}"


def inside(root: Path, path: Path, key: str) -> Path:
    """``path`` if it stays inside ``root`` (both absolute), else a ConfigError naming ``key``."""
    resolved = Path(os.path.normpath(path))
    if resolved != root and Path(os.path.normpath(root)) not in resolved.parents:
        raise ConfigError(key, f"{path} is outside {root}")
    return resolved
