"""Reading ``openclaw.json`` with OpenClaw's loading rules.

In OpenClaw's order (``src/config/io.ts``): ``<state dir>/.env`` fills the
environment (never overriding a variable already set, ``src/infra/dotenv.ts``);
the JSON5 file is parsed and its ``$include`` directives are merged
(``src/config/includes.ts``); the top-level ``env`` block fills the environment
the same way (``src/config/env-vars.ts``); then ``${VAR}`` is substituted in every
string (``src/config/env-substitution.ts``). SecretRef objects
(``{source, provider, id}``) are resolved by ``resolve_secret_refs`` for the keys
memindex reads. Every failure is one ConfigError naming the file or key.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, MutableMapping

from memindex.pipeline.config import json5_fast
from memindex.pipeline.config.paths import resolve_user_path
from memindex.pipeline.errors import ConfigError

INCLUDE_KEY = "$include"
MAX_INCLUDE_DEPTH = 10  # MAX_INCLUDE_DEPTH
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_ENV_REF = re.compile(r"\$(\$?)\{([A-Z_][A-Z0-9_]*)\}")
SECRET_SOURCES = ("env", "file", "exec")
DEFAULT_SECRET_PROVIDER = "default"

# Environment variables are process-wide: applying them is serialised.
_env_lock = threading.Lock()

# The files each config's last load ``$include``d: a long-running process reloads when any of them
# changes, not only the top-level file (an agent added in an included file stayed unknown, and a
# watcher kept rebuilding the index with the included settings it had first read).
_included: dict[Path, tuple[Path, ...]] = {}


# A config file larger than this is refused rather than read: `--config /dev/zero` (or a symlink to
# a huge file) read until the machine ran out of memory.
MAX_CONFIG_BYTES = 64 * 1024 * 1024


def _read_json5(path: Path, key: str) -> Any:
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError
        if not stat.S_ISREG(st.st_mode):  # a device, FIFO or socket: opening a FIFO blocks for good
            raise ConfigError(key, "not a regular file (a device, FIFO or socket), not a config file")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(key, f"larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB; not read as a "
                                   "config file")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(key, f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(key, f"is a directory, not a config file: {path}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(key, f"{_where(path, key)}not valid UTF-8 ({exc.reason})") from None
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path}: {exc.strerror or exc}") from None
    if not text.strip():
        return {}
    try:
        # Most configs are plain JSON, which the C parser reads without importing json5 (a
        # CLI start-up cost); anything it refuses is read as JSON5, a superset.
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    # Comments, trailing commas, unquoted keys, single quotes: in linear time (json5_fast); the
    # json5 library (pure Python, ~50 µs a byte) reads only what that cannot, and words the errors.
    fast = json5_fast.loads(text)
    if fast is not None:
        return fast
    import json5

    try:
        return json5.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(key, f"{_where(path, key)}not valid JSON5: {exc}") from None


def _where(path: Path, key: str) -> str:
    return "" if key == str(path) else f"{path}: "  # the key is the path already: once is enough


def _deep_merge(target: Any, source: Any) -> Any:
    """OpenClaw's include merge: arrays concatenate, objects merge recursively, else source wins."""
    if isinstance(target, list) and isinstance(source, list):
        return [*target, *source]
    if isinstance(target, dict) and isinstance(source, dict):
        out = dict(target)
        for k, v in source.items():
            out[k] = _deep_merge(out[k], v) if k in out else v
        return out
    return source


def _resolve_includes(value: Any, base: Path, root: Path, chain: tuple[Path, ...],
                      seen: list[Path] | None = None) -> Any:
    """``value`` with its ``$include`` directives merged; every file read is appended to ``seen``."""
    seen = [] if seen is None else seen
    if isinstance(value, list):
        return [_resolve_includes(v, base, root, chain, seen) for v in value]
    if not isinstance(value, dict):
        return value
    rest = {k: _resolve_includes(v, base, root, chain, seen) for k, v in value.items() if k != INCLUDE_KEY}
    if INCLUDE_KEY not in value:
        return rest
    spec = value[INCLUDE_KEY]
    names = [spec] if isinstance(spec, str) else spec
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{base}: {INCLUDE_KEY}", f"expected a path or a list of paths, got {spec!r}")
    included: Any = {}
    for name in names:
        target = Path(os.path.normpath(base.parent / name))
        where = f"{base}: {INCLUDE_KEY} {name!r}"
        # Includes stay inside the top-level config's directory (symlinks included), as in OpenClaw.
        real_root = root.resolve()
        if root not in target.parents or (target.exists() and real_root not in target.resolve().parents):
            raise ConfigError(where, f"include path escapes the config directory {root}")
        if target in chain:
            raise ConfigError(where, "circular include: " + " -> ".join(str(p) for p in (*chain, target)))
        if len(chain) > MAX_INCLUDE_DEPTH:
            raise ConfigError(where, f"includes nested deeper than {MAX_INCLUDE_DEPTH}")
        seen.append(target)
        parsed = _read_json5(target, where)
        included = _deep_merge(included, _resolve_includes(parsed, target, root, (*chain, target), seen))
    if not rest:
        return included
    if not isinstance(included, dict):
        raise ConfigError(f"{base}: {INCLUDE_KEY}", "sibling keys need the included content to be an object")
    return _deep_merge(included, rest)


def _fill_env(env: MutableMapping[str, str], values: Mapping[str, Any]) -> None:
    """Set each variable that is not already set (non-blank): the environment always wins."""
    with _env_lock:
        for k, v in values.items():
            if isinstance(v, str) and v.strip() and not (env.get(k) or "").strip():
                env[k] = v


def load_dotenv(state_dir: Path, env: MutableMapping[str, str]) -> None:
    """``<state dir>/.env`` (python-dotenv syntax) fills variables not already set."""
    path = state_dir / ".env"
    if path.is_file():
        from dotenv import dotenv_values  # only when there is a .env to read

        try:
            _fill_env(env, {k: v for k, v in dotenv_values(path).items() if v is not None})
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(str(path), f"cannot read: {exc}") from None


def _config_env_vars(cfg: Mapping[str, Any]) -> dict[str, str]:
    """collectConfigEnvVars: ``env.vars`` and the string entries of ``env`` itself (not ``shellEnv``).

    A value that still holds a ``${VAR}`` reference is left out: it would put the
    literal placeholder into the environment.
    """
    block = cfg.get("env")
    if block is None:
        return {}
    if not isinstance(block, dict):
        raise ConfigError("env", f"expected an object, got {block!r}")
    entries: dict[str, Any] = {}
    if block.get("vars") is not None:
        if not isinstance(block["vars"], dict):
            raise ConfigError("env.vars", f"expected an object, got {block['vars']!r}")
        entries.update(block["vars"])
    entries.update({k: v for k, v in block.items() if k not in ("vars", "shellEnv")})
    for k, v in entries.items():
        if not isinstance(v, str):
            raise ConfigError(f"env.{k}", f"expected a string, got {v!r}")
    return {k: v for k, v in entries.items() if not any(not m.group(1) for m in _ENV_REF.finditer(v))}


# The config keys memindex reads (both OpenClaw schemas): an unset ``${VAR}`` in one of them is an
# error naming the key and the variable; anywhere else (``channels.telegram.botToken`` in a worker
# container or an MCP client's environment, which have no channel tokens) it is a warning, once,
# and the value is left as written: OpenClaw itself only warns ("feature ... will be unavailable").
_READ_KEYS = re.compile(
    r"^(?:memory(?:$|[.\[])"
    r"|agents\.(?:ownership|defaults\.(?:workspace|memorySearch|compaction|systemAgent))(?:$|[.\[])"
    r"|agents\.(?:list\[\d+\]|entries\.[^.\[]+)\.(?:id|default|workspace|agentDir|memorySearch|memory)(?:$|[.\[])"
    r"|models\.providers\.(?P<provider>[^.\[]+)(?:$|[.\[])"
    r"|secrets\.|auth\.|plugins\.slots\.memory$|session\.dmScope$|bindings\[\d+\]\.session(?:$|\.)"
    r"|meta\.lastTouchedVersion$)")
_warned_unset: set[tuple[str, str]] = set()


def memindex_reads(key: str, embeds_with: Callable[[str], bool] = lambda _p: True) -> bool:
    """Whether memindex reads config key ``key``; ``models.providers.<p>`` only for a provider
    ``embeds_with`` says memindex embeds with (the caller knows the provider table)."""
    m = _READ_KEYS.match(key)
    if m is None:
        return False
    return m.group("provider") is None or embeds_with(m.group("provider"))


def _unset_elsewhere(key: str, name: str) -> None:
    with _env_lock:
        if (key, name) in _warned_unset:
            return
        _warned_unset.add((key, name))
    import logging

    logging.getLogger("memindex.config").warning(
        "%s: environment variable %s is not set; memindex does not read this key, left as written",
        key or "(top level)", name)


def substitute_env(value: Any, env: Mapping[str, str], key: str = "",
                   embeds_with: Callable[[str], bool] = lambda _p: True) -> Any:
    """``${VAR}`` (upper-case names) in every string; ``$${VAR}`` is a literal ``${VAR}``.

    A variable that is unset or empty is a ConfigError naming the key (MissingEnvVarError) in a
    key memindex reads, else a warning once (the string keeps its ``${VAR}``).
    """
    if isinstance(value, str):
        missing: list[str] = []

        def one(m: re.Match[str]) -> str:
            if m.group(1):
                return "${" + m.group(2) + "}"
            found = env.get(m.group(2))
            if not found:
                if memindex_reads(key, embeds_with):
                    raise ConfigError(key or "(top level)", f"environment variable {m.group(2)} is not set")
                missing.append(m.group(2))
                return m.group(0)
            return found

        if "$" not in value:
            return value
        out = _ENV_REF.sub(one, value)
        for name in missing:
            _unset_elsewhere(key, name)
        return out
    if isinstance(value, list):
        return [substitute_env(v, env, f"{key}[{i}]", embeds_with) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: substitute_env(v, env, f"{key}.{k}" if key else k, embeds_with) for k, v in value.items()}
    return value


def included_files(path: Path | None) -> tuple[Path, ...]:
    """The files the last load of the config at ``path`` ``$include``d (also one missing then: its
    appearing is a change), in the order read; none before its first load or without a config file.
    Their stamps are part of the config's (``settings.config_stamp``)."""
    return _included.get(path, ()) if path else ()


def load_config(path: Path | None, state_dir: Path, env: MutableMapping[str, str],
                embeds_with: Callable[[str], bool] = lambda _p: True) -> dict[str, Any]:
    """The config at ``path`` (``None``: no file, defaults only), includes merged, env applied and
    substituted. ``env`` receives ``<state dir>/.env`` and the ``env`` block (never overriding).
    ``embeds_with``: the providers memindex embeds with (an unset variable in their
    ``models.providers`` entry is an error; in another provider's, a warning)."""
    load_dotenv(state_dir, env)
    if path is None:
        return {}
    data = _read_json5(path, str(path))
    if not isinstance(data, dict):
        raise ConfigError(str(path), "the top level must be an object")
    seen: list[Path] = []
    try:
        data = _resolve_includes(data, path, path.parent, (path,), seen)
    finally:  # a missing or broken include is watched too: fixing it is a change
        _included[path] = tuple(dict.fromkeys(seen))
    if not isinstance(data, dict):
        raise ConfigError(str(path), "the top level must be an object (after $include)")
    _fill_env(env, _config_env_vars(data))
    out: dict[str, Any] = substitute_env(data, env, "", embeds_with)
    return out


# --- SecretRefs --------------------------------------------------------------------------------


def is_secret_ref(value: Any) -> bool:
    """A SecretRef object: ``{source, provider?, id}`` with a known source."""
    return (isinstance(value, dict) and value.get("source") in SECRET_SOURCES and "id" in value
            and set(value) <= {"source", "provider", "id"})


def _json_pointer(doc: Any, pointer: str, key: str) -> Any:
    if not pointer.startswith("/"):
        raise ConfigError(key, f"file SecretRef id must be a JSON pointer like /providers/openai/apiKey, got {pointer!r}")
    for part in pointer[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise ConfigError(key, f"file SecretRef {pointer!r} not found")
    return doc


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def resolve_secret(ref: Mapping[str, Any], cfg: Mapping[str, Any], env: Mapping[str, str], key: str) -> str:
    """The value a SecretRef names, from the env, a file, or an exec resolver (OpenClaw's three sources)."""
    source, ident = ref["source"], ref["id"]
    secrets = _obj(cfg.get("secrets"))
    defaults = _obj(secrets.get("defaults"))
    name = ref.get("provider") or defaults.get(source) or DEFAULT_SECRET_PROVIDER
    if not isinstance(ident, str) or not ident.strip() or not isinstance(name, str):
        raise ConfigError(key, f"SecretRef needs a string id and provider, got {json.dumps(ref)}")
    providers = secrets.get("providers") or {}
    provider = providers.get(name) if isinstance(providers, dict) else None
    where = f"secrets.providers.{name}"
    if provider is not None and (not isinstance(provider, dict) or provider.get("source") != source):
        raise ConfigError(key, f"SecretRef provider {name!r} is not a {source!r} provider ({where})")
    if source == "env":
        if provider is None and name != DEFAULT_SECRET_PROVIDER:
            raise ConfigError(key, f"SecretRef provider {name!r} is not configured ({where})")
        allow = (provider or {}).get("allowlist")
        if isinstance(allow, list) and ident not in allow:
            raise ConfigError(key, f"{ident} is not in the allowlist of {where}")
        if not _ENV_NAME.fullmatch(ident):
            raise ConfigError(key, f"env SecretRef id must be an upper-case variable name, got {ident!r}")
        value = env.get(ident)
        if not value:
            raise ConfigError(key, f"environment variable {ident} (SecretRef) is not set")
        return value
    if source == "exec":
        if provider is None:
            raise ConfigError(key, f"exec SecretRef provider {name!r} is not configured ({where})")
        # lazy: subprocess (and the exec runner) only for an exec SecretRef; every CLI start reads the config
        from memindex.pipeline.config.secret_exec import resolve_exec_secret

        return resolve_exec_secret(provider, name, ident, env, key)
    if provider is None or not isinstance(provider.get("path"), str):
        raise ConfigError(key, f"file SecretRef provider {name!r} needs {where}.path")
    file = resolve_user_path(provider["path"], env)
    try:
        raw = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(key, f"cannot read SecretRef file {file}: {exc}") from None
    if provider.get("mode") == "singleValue":
        return raw.rstrip("\r\n")
    try:
        value = _json_pointer(json.loads(raw), ident, key)
    except json.JSONDecodeError:
        raise ConfigError(key, f"SecretRef file {file} is not JSON (set mode: \"singleValue\" for a plain file)") from None
    if not isinstance(value, str):
        raise ConfigError(key, f"file SecretRef {ident!r} is not a string")
    return value


def resolve_secret_refs(value: Any, cfg: Mapping[str, Any], env: Mapping[str, str], key: str) -> Any:
    """``value`` with every SecretRef object in it replaced by the secret it names."""
    if is_secret_ref(value):
        return resolve_secret(value, cfg, env, key)
    if isinstance(value, dict):
        return {k: resolve_secret_refs(v, cfg, env, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_secret_refs(v, cfg, env, f"{key}[{i}]") for i, v in enumerate(value)]
    return value
