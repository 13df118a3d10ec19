"""Which sessions may search memory (F16).

Config follows OpenClaw's ``session.sendPolicy`` schema::

    {"default": "allow" | "deny",
     "rules": [{"action": "allow" | "deny",
                "match": {"chatType": ..., "channel": ..., "keyPrefix": ...,
                          "rawKeyPrefix": ...}}]}

Rules are evaluated in order and the first match wins; a rule matches when
every field it gives matches. Without a configured scope memory is
direct-chat only: private notes must not leak into group or channel chats.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memindex.pipeline.config.settings import validate_scope

log = logging.getLogger("memindex.scope")

DEFAULT_SCOPE: Mapping[str, Any] = {
    "default": "deny",
    "rules": [{"action": "allow", "match": {"chatType": "direct"}}],
}
# Second key segment that marks "<channel>:<kind>:..." session keys.
_KIND_SEGMENTS = ("group", "channel", "direct", "dm")


@dataclass(frozen=True)
class ScopeDecision:
    allowed: bool
    chat_type: str
    channel: str | None
    rule_index: int | None  # None: the scope's default decided


def normalize_session_key(raw: str) -> str:
    """Lowercase and drop a leading ``agent:<id>:``."""
    key = (raw or "").strip().lower()
    parts = key.split(":", 2)
    if len(parts) == 3 and parts[0] == "agent" and parts[1]:
        return parts[2]
    return key


def agent_from_key(raw: str | None) -> str | None:
    """The agent id of an ``agent:<id>:...`` session key (as OpenClaw's ``parseAgentSessionKey``),
    not normalised; None for a key of another shape or none."""
    parts = (raw or "").strip().split(":", 2)
    if len(parts) == 3 and parts[0].lower() == "agent" and parts[1].strip():
        return parts[1].strip()
    return None


def chat_type_from_key(raw: str | None) -> str:
    """``group`` / ``channel`` when such a ``:``-separated token appears in
    the key after ``agent:<id>:``, else ``direct`` (also for a missing key:
    CLI, cron and internal runs). ``group`` wins when both appear."""
    if not raw:
        return "direct"
    parts = normalize_session_key(raw).split(":")
    if "group" in parts:
        return "group"
    if "channel" in parts:
        return "channel"
    return "direct"


def channel_from_key(raw: str | None) -> str | None:
    """The messaging channel of ``<channel>:<group|channel|direct|dm>:...``."""
    if not raw:
        return None
    parts = normalize_session_key(raw).split(":")
    if len(parts) >= 2 and parts[1] in _KIND_SEGMENTS and parts[0]:
        return parts[0]
    return None


def _rule_matches(match: Mapping[str, str], raw_key: str, norm_key: str, chat_type: str, channel: str | None) -> bool:
    want = match.get("chatType")
    if want is not None and want.lower() != chat_type:
        return False
    want = match.get("channel")
    if want is not None and want.lower() != channel:
        return False
    want = match.get("rawKeyPrefix")
    if want is not None and not raw_key.startswith(want.lower()):
        return False
    want = match.get("keyPrefix")
    if want is not None:
        want = want.lower()
        # Legacy configs wrote full keys ("agent:main:...") as keyPrefix.
        target = raw_key if want.startswith("agent:") else norm_key
        if not target.startswith(want):
            return False
    return True


def scope_allows(
    scope: Mapping[str, Any] | None,
    session_key: str | None,
    chat_type: str | None = None,
) -> ScopeDecision:
    """Decide whether *session_key* may search memory under *scope*.

    ``scope=None`` means the default (direct chats only). ``chat_type``
    overrides the type parsed from the key when the caller knows it.
    Raises ConfigError for an invalid scope config (settings loading has
    already checked the configured one).
    """
    scope = DEFAULT_SCOPE if scope is None else scope
    validate_scope(scope)
    raw_key = (session_key or "").strip().lower()
    norm_key = normalize_session_key(raw_key)
    ctype = (chat_type or chat_type_from_key(session_key)).lower()
    channel = channel_from_key(session_key)
    for i, rule in enumerate(scope.get("rules", [])):
        if _rule_matches(rule.get("match", {}), raw_key, norm_key, ctype, channel):
            return ScopeDecision(rule["action"] == "allow", ctype, channel, i)
    return ScopeDecision(scope.get("default", "allow") == "allow", ctype, channel, None)


def log_scope_denied(decision: ScopeDecision, session_key: str | None) -> None:
    """One warning per denied search, naming channel and chat type."""
    log.warning(
        "memory search denied by scope (channel=%s, chatType=%s, session=%s)",
        decision.channel or "unknown",
        decision.chat_type,
        session_key or "-",
    )


def check_scope(
    scope: Mapping[str, Any] | None,
    session_key: str | None,
    chat_type: str | None = None,
) -> ScopeDecision:
    """:func:`scope_allows` plus the denial warning; use on the search path."""
    decision = scope_allows(scope, session_key, chat_type)
    if not decision.allowed:
        log_scope_denied(decision, session_key)
    return decision
