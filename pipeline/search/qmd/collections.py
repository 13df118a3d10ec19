"""Which qmd collections an agent has, and making qmd's list match them.

Names carry the agent id (``memory-dir-main``) because qmd's own config is
per-XDG-home, and a shared home must never let agents read each other's
memory. Names are sanitised the way OpenClaw does it so existing qmd homes
keep working.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memindex.pipeline.config.paths import expand_home
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.search.qmd.runner import QmdFailed, QmdRunner, qmd_home

log = logging.getLogger("memindex.qmd")

DEFAULT_PATTERN = "**/*.md"


@dataclass(frozen=True)
class Collection:
    name: str
    path: Path
    pattern: str
    kind: str  # "memory" | "custom" | "sessions"

    @property
    def source(self) -> str:
        return "sessions" if self.kind == "sessions" else "memory"


def sanitize_name(raw: str) -> str:
    """Lowercase, ``[^a-z0-9-]`` → ``-``, runs collapsed, ends trimmed."""
    s = re.sub(r"[^a-z0-9-]", "-", raw.lower())
    s = re.sub(r"-{2,}", "-", s).strip("-")
    return s or "collection"


def sessions_export_dir(settings: AgentSettings) -> Path:
    """Where this agent's sanitized transcripts go: ``<state>/agents/<id>/qmd/sessions``, or, with
    ``memory.qmd.sessions.exportDir`` (one setting for every agent), its ``<agentId>`` subdirectory.
    OpenClaw writes every agent into the directory itself; there each agent's export deleted the
    others' files (it removes what is not its own) and one agent's collection served another's
    transcripts - and an exportDir holding the user's own notes lost them."""
    raw = settings.memory.qmd.sessions.export_dir
    if raw:
        p = expand_home(raw)
        return (p if p.is_absolute() else settings.workspace / p) / settings.agent_id
    return qmd_home(settings) / "sessions"


def _resolve(settings: AgentSettings, raw: str) -> Path:
    p = expand_home(raw)  # "~" and absolute paths as-is, others workspace-relative
    return p if p.is_absolute() else settings.workspace / p


def managed_collections(settings: AgentSettings) -> list[Collection]:
    """The collections this agent's config asks for, in a stable order."""
    q = settings.memory.qmd
    agent = settings.agent_id
    ws = settings.workspace
    wanted: list[tuple[str, Path, str, str]] = []
    if q.include_default_memory:
        wanted += [
            (f"memory-root-{agent}", ws, "MEMORY.md", "memory"),
            (f"memory-alt-{agent}", ws, "memory.md", "memory"),
            (f"memory-dir-{agent}", ws / "memory", DEFAULT_PATTERN, "memory"),
        ]
    for i, entry in enumerate(q.paths, 1):
        base = entry.name or f"custom-{i}"
        wanted.append((f"{base}-{agent}", _resolve(settings, entry.path), entry.pattern or DEFAULT_PATTERN, "custom"))
    if q.sessions.enabled:
        wanted.append((f"sessions-{agent}", sessions_export_dir(settings), DEFAULT_PATTERN, "sessions"))
    out: list[Collection] = []
    used: set[str] = set()
    for raw, path, pattern, kind in wanted:
        name = base = sanitize_name(raw)
        n = 2
        while name in used:
            name = f"{base}-{n}"
            n += 1
        used.add(name)
        out.append(Collection(name, path, pattern, kind))
    return out


# --- parsing `qmd collection list` / `show` -------------------------------------

_TABLE_NAME = re.compile(r"^\s*(\S+)\s+\(qmd://")
_TABLE_FIELD = re.compile(r"^\s+(path|pattern|mask)\s*:\s*(.*?)\s*$", re.I)


def parse_collection_list(text: str) -> dict[str, dict[str, str]]:
    """``{name: {"path"?, "pattern"?}}`` from JSON output or qmd's table.

    qmd 2.8.3 prints the table even with ``--json`` and omits paths there;
    ``collection show`` fills them in.
    """
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if data is not None:
            items = data.get("collections", data) if isinstance(data, dict) else data
            out: dict[str, dict[str, str]] = {}
            for item in items if isinstance(items, list) else []:
                if isinstance(item, dict) and isinstance(item.get("name"), str):
                    info = {}
                    if item.get("path"):
                        info["path"] = str(item["path"])
                    pat = item.get("pattern") or item.get("mask") or item.get("glob_pattern")
                    if pat:
                        info["pattern"] = str(pat)
                    out[item["name"]] = info
            return out
    out = {}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        m = _TABLE_NAME.match(line)
        if m:
            current = out.setdefault(m.group(1), {})
            continue
        m = _TABLE_FIELD.match(line)
        if m and current is not None:
            current["path" if m.group(1).lower() == "path" else "pattern"] = m.group(2)
    return out


def parse_collection_show(text: str) -> dict[str, str]:
    info: dict[str, str] = {}
    for line in text.splitlines():
        m = _TABLE_FIELD.match(line)
        if m:
            info["path" if m.group(1).lower() == "path" else "pattern"] = m.group(2)
    return info


# --- ensureCollections -------------------------------------------------------------

_OWNER = re.compile(r"Name:\s*(\S+)")


def _same_path(a: str | Path, b: str | Path) -> bool:
    return Path(a).expanduser().resolve(strict=False) == Path(b).expanduser().resolve(strict=False)


def _add(runner: QmdRunner, c: Collection, timeout_ms: int) -> None:
    if any(ch in c.pattern for ch in "*?[{"):
        c.path.mkdir(parents=True, exist_ok=True)  # a glob over a missing dir would fail the add
    runner.run(["collection", "add", str(c.path), "--name", c.name, "--mask", c.pattern],
               timeout_ms=timeout_ms)


def _remove(runner: QmdRunner, name: str, timeout_ms: int) -> None:
    runner.run(["collection", "remove", name], timeout_ms=timeout_ms, check=False)


def ensure_collections(runner: QmdRunner, settings: AgentSettings) -> dict[str, Any]:
    """Make qmd's collections match the config; returns what it did.

    A missing qmd (or a listing that fails) raises; a single collection that
    cannot be added is logged and skipped so the others still serve.
    """
    timeout = settings.memory.qmd.update.command_timeout_ms
    listed = parse_collection_list(
        runner.run(["collection", "list", "--json"], timeout_ms=timeout).stdout)
    wanted = managed_collections(settings)
    report: dict[str, Any] = {"added": [], "rebound": [], "removedLegacy": [], "errors": []}

    def details(name: str) -> dict[str, str]:
        info = dict(listed.get(name, {}))
        if "path" not in info:
            try:
                info.update(parse_collection_show(
                    runner.run(["collection", "show", name], timeout_ms=timeout).stdout))
            except QmdFailed:
                pass
        return info

    # Pre-agent-suffix names from older setups, when they index the same thing.
    suffix = "-" + sanitize_name(settings.agent_id)
    for c in wanted:
        legacy = c.name[: -len(suffix)] if c.name.endswith(suffix) else None
        if legacy and legacy in listed and legacy not in {w.name for w in wanted}:
            info = details(legacy)
            if info.get("path") and _same_path(info["path"], c.path) and info.get("pattern") == c.pattern:
                _remove(runner, legacy, timeout)
                listed.pop(legacy, None)
                report["removedLegacy"].append(legacy)

    for c in wanted:
        try:
            if c.name in listed:
                info = details(c.name)
                same_pattern = info.get("pattern", c.pattern) == c.pattern
                same_path = "path" not in info or _same_path(info["path"], c.path)
                if same_pattern and same_path:
                    continue
                _remove(runner, c.name, timeout)
                report["rebound"].append(c.name)
            try:
                _add(runner, c, timeout)
            except QmdFailed as exc:
                owner = _OWNER.search(exc.stderr + exc.stdout)
                if "already exists" not in (exc.stderr + exc.stdout) or not owner or owner.group(1) == c.name:
                    raise
                # Another name owns this path+pattern: that binding is ours to replace.
                _remove(runner, owner.group(1), timeout)
                _add(runner, c, timeout)
            report["added"].append(c.name)
        except QmdFailed as exc:
            log.warning("qmd collection %s could not be set up: %s", c.name, exc)
            report["errors"].append({"collection": c.name, "error": str(exc)})
    return report
