"""Pre-compaction memory flush (F18).

Shortly before a session auto-compacts, the agent gets one silent turn asking
it to write durable notes to ``memory/YYYY-MM-DD.md`` (``NO_REPLY`` when there
is nothing to keep). This module only *decides* and *records*; running the
turn is the agent runtime's job.

Once-per-cycle bookkeeping uses OpenClaw's own ``sessions.json`` fields so a
store shared with OpenClaw stays consistent: the flush ran for the current
compaction cycle when ``memoryFlushCompactionCount == compactionCount``;
``memoryFlushAt`` (epoch ms, like OpenClaw's other timestamps) says when.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from memindex.pipeline.errors import StoreError, UsageError, checked_call, require, require_path_text
from memindex.pipeline.config.settings import DEFAULT_RESERVE_TOKENS_FLOOR, DEFAULT_SOFT_THRESHOLD_TOKENS

DEFAULT_CONTEXT_WINDOW = 200_000
SILENT_TOKEN = "NO_REPLY"
DATE_PLACEHOLDER = "YYYY-MM-DD"

DEFAULT_SYSTEM_PROMPT = (
    "Pre-compaction memory flush turn. The session is close to auto-compaction, "
    "after which older context is summarised away. Store durable memories on disk now. "
    f"You may reply, but usually {SILENT_TOKEN} is the right response so the user never sees this turn."
)
DEFAULT_PROMPT = (
    "Pre-compaction memory flush. Store durable memories now: write lasting facts, "
    f"decisions, preferences and open tasks to memory/{DATE_PLACEHOLDER}.md "
    "(create memory/ if needed). Append new content only; do not rewrite existing notes. "
    f"If nothing needs storing, reply with {SILENT_TOKEN}."
)
_SILENT_HINT = f"If there is nothing to store, reply with {SILENT_TOKEN}."

FIELD_COMPACTION_COUNT = "compactionCount"
FIELD_FLUSH_COMPACTION_COUNT = "memoryFlushCompactionCount"
FIELD_FLUSH_AT = "memoryFlushAt"


@dataclass(frozen=True)
class FlushSettings:
    enabled: bool
    soft_threshold_tokens: int
    reserve_tokens_floor: int
    prompt: str
    system_prompt: str


@dataclass(frozen=True)
class FlushDecision:
    run: bool
    reason: str
    system_prompt: str | None
    prompt: str | None
    threshold: int


def _as_int(value: Any, default: int) -> int:
    # bool is an int subclass; a stray true/false must not read as 1/0 tokens.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return default
    return max(0, int(value))


def _as_text(value: Any, default: str) -> str:
    return value if isinstance(value, str) and value.strip() else default


def resolve_settings(cfg: Mapping[str, Any] | None) -> FlushSettings:
    """Read the memoryFlush dict (or the whole compaction dict that holds it).

    ``reserveTokensFloor`` officially lives at compaction level; a value inside
    memoryFlush (as our resolved config stores it) wins as the more specific.
    """
    cfg = cfg or {}
    nested = cfg.get("memoryFlush")
    flush: Mapping[str, Any] = nested if isinstance(nested, Mapping) else cfg
    floor = flush.get("reserveTokensFloor")
    if floor is None:
        floor = cfg.get("reserveTokensFloor")
    enabled = flush.get("enabled", True)
    return FlushSettings(
        enabled=enabled if isinstance(enabled, bool) else True,
        soft_threshold_tokens=_as_int(flush.get("softThresholdTokens"), DEFAULT_SOFT_THRESHOLD_TOKENS),
        reserve_tokens_floor=_as_int(floor, DEFAULT_RESERVE_TOKENS_FLOOR),
        prompt=_as_text(flush.get("prompt"), DEFAULT_PROMPT),
        system_prompt=_as_text(flush.get("systemPrompt"), DEFAULT_SYSTEM_PROMPT),
    )


def flush_threshold(context_window: int, settings: FlushSettings) -> int:
    window = context_window if context_window > 0 else DEFAULT_CONTEXT_WINDOW
    return window - settings.reserve_tokens_floor - settings.soft_threshold_tokens


def _with_silent_hint(text: str) -> str:
    # Custom prompts that forget the silent token would make the turn visible.
    return text if SILENT_TOKEN in text else f"{text}\n\n{_SILENT_HINT}"


def build_prompts(settings: FlushSettings, now: datetime) -> tuple[str, str]:
    """(system_prompt, prompt) with today's date and the current time filled in."""
    today = now.strftime("%Y-%m-%d")
    prompt = _with_silent_hint(settings.prompt.replace(DATE_PLACEHOLDER, today))
    prompt = f"{prompt}\nCurrent time: {now.isoformat(timespec='seconds')}"
    system = _with_silent_hint(settings.system_prompt.replace(DATE_PLACEHOLDER, today))
    return system, prompt


def _count(entry: Mapping[str, Any], key: str) -> int | None:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def already_flushed(session_entry: Mapping[str, Any]) -> bool:
    """True when the flush already ran in the current compaction cycle."""
    flushed_at = _count(session_entry, FIELD_FLUSH_COMPACTION_COUNT)
    return flushed_at is not None and flushed_at == (_count(session_entry, FIELD_COMPACTION_COUNT) or 0)


@checked_call("flush_decision")
def flush_decision(
    token_estimate: int | None,
    context_window: int,
    cfg: Mapping[str, Any] | None,
    session_entry: Mapping[str, Any] | None,
    workspace_access: str | None,
    now: datetime,
) -> FlushDecision:
    """Should this session get its pre-compaction memory flush turn now?

    ``workspace_access`` is the sandbox's "rw"/"ro"/"none"; ``None`` means not
    sandboxed (writable). Anything but "rw" skips: the turn exists to write files.
    """
    # A runtime's wrong argument is a UsageError naming it, not a TypeError from deep inside.
    # A token estimate of the wrong type ('lots') is such a bug, not "no estimate"; None, NaN and a
    # bool stay the documented "unknown" (never flushes).
    if not isinstance(token_estimate, bool):
        require("token_estimate", token_estimate, (int, float), optional=True)
    require("context_window", context_window, (int, float))
    require("cfg", cfg, Mapping, optional=True)
    require("session_entry", session_entry, Mapping, optional=True)
    require("workspace_access", workspace_access, str, optional=True)
    require("now", now, datetime)
    settings = resolve_settings(cfg)
    threshold = flush_threshold(context_window, settings)

    def skip(reason: str) -> FlushDecision:
        return FlushDecision(False, reason, None, None, threshold)

    if not settings.enabled:
        return skip("disabled")
    if session_entry is None:
        return skip("no-session-entry")
    access = "rw" if workspace_access is None else workspace_access.strip().lower()
    if access != "rw":
        return skip(f"workspace-{access or 'unknown'}")
    if threshold <= 0:
        return skip("threshold-not-positive")
    tokens = _as_int(token_estimate, 0)  # unknown (None, NaN, a bool) never flushes
    if tokens <= 0:
        return skip("no-token-estimate")
    if tokens < threshold:
        return skip("below-threshold")
    if already_flushed(session_entry):
        return skip("already-flushed")
    system, prompt = build_prompts(settings, now)
    return FlushDecision(True, "threshold-reached", system, prompt, threshold)


# --- sessions.json ------------------------------------------------------------


@checked_call("load_session_entry")
def load_session_entry(sessions_json_path: str | os.PathLike[str], session_key: str) -> dict[str, Any] | None:
    """The session's entry in OpenClaw's ``sessions.json`` (what ``flush_decision`` reads), or None
    (no such file, or no entry for the key). A file that cannot be read or is not JSON is a
    ``StoreError`` naming it."""
    path = _sessions_path(sessions_json_path)
    require("session_key", session_key, str)
    return _entry(_read_sessions(path), session_key)


def _sessions_path(value: Any) -> Path:
    """``sessions_json_path`` as a Path; a UsageError for anything else (None, a number: a TypeError
    from pathlib deep inside), or for an empty path (the current directory)."""
    require("sessions_json_path", value, (str, os.PathLike))
    text = os.fspath(value)
    require_path_text("sessions_json_path", text)
    return Path(text)


def _read_sessions(path: Path) -> Any:
    """The parsed ``sessions.json``; None when there is none. One that cannot be read (a directory,
    no permission) or is not JSON is a ``StoreError`` naming the file: it raised the OSError or
    JSONDecodeError itself, outside the error tree. (Read as JSON, as ``mark_flushed`` writes it.)"""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise StoreError(f"cannot read the sessions store {path}: {why}") from None
    try:
        return json.loads(text)
    except ValueError as exc:  # (json.JSONDecodeError)
        raise StoreError(f"the sessions store {path} is not JSON: {exc}") from None


def _entry(store: Any, session_key: str) -> dict[str, Any] | None:
    entry = store.get(session_key) if isinstance(store, dict) else None
    return entry if isinstance(entry, dict) else None


def _atomic_write_json(path: Path, data: Any) -> None:
    # Readers (OpenClaw itself) must never see a half-written store.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        except FileNotFoundError:
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


@checked_call("mark_flushed")
def mark_flushed(
    sessions_json_path: str | os.PathLike[str],
    session_key: str,
    *,
    now: datetime | None = None,
    compaction_count: int | None = None,
) -> None:
    """Record that the flush ran for the session's current compaction cycle.

    ``compaction_count`` lets the caller pass a count that advanced while the
    flush turn ran (a compaction finished meanwhile); it is stored for both
    fields so the new cycle is not flushed again. Raises ``UsageError`` when
    the session has no entry (no entry means no flush should have run), and
    ``StoreError`` naming the file when it cannot be read, is not JSON or
    cannot be written.
    """
    path = _sessions_path(sessions_json_path)
    require("session_key", session_key, str)
    require("now", now, datetime, optional=True)
    require("compaction_count", compaction_count, int, optional=True)
    if compaction_count is not None and compaction_count < 0:
        raise UsageError(f"compaction_count must be at least 0, not {compaction_count}")
    store = _read_sessions(path)
    entry = _entry(store, session_key)
    if entry is None:
        raise UsageError(f"mark_flushed(): session {session_key!r} has no entry in {path}, "
                         "so no flush should have run for it")
    current = _count(entry, FIELD_COMPACTION_COUNT) or 0
    if compaction_count is not None and compaction_count > current:
        entry[FIELD_COMPACTION_COUNT] = current = compaction_count
    entry[FIELD_FLUSH_COMPACTION_COUNT] = current
    stamp = now or datetime.now(timezone.utc)
    entry[FIELD_FLUSH_AT] = int(stamp.timestamp() * 1000)
    try:
        _atomic_write_json(path, store)
    except OSError as exc:  # a read-only directory, a full disk
        raise StoreError(f"cannot write the sessions store {path}: {exc.strerror or exc}") from None
