"""Scope rules for memory search (F16).

OpenClaw applies ``scope`` to the QMD backend only (``qmd-manager.ts`` calls
``qmd-scope.ts``; the builtin manager never does), so the builtin store answers
every session key; ``tests/test_qmd.py`` covers the QMD gate end to end."""

from __future__ import annotations

import logging

import pytest

from memindex.pipeline.search.scope import (
    ScopeDecision,
    channel_from_key,
    chat_type_from_key,
    check_scope,
    normalize_session_key,
    scope_allows,
    validate_scope,
)

DIRECT = "agent:main:main"
DM = "agent:main:telegram:dm:12345"
GROUP = "agent:main:telegram:group:-100777"
CHANNEL = "agent:main:discord:channel:998877"
WORK_GROUP = "agent:work:slack:group:eng"


def test_normalize_session_key() -> None:
    assert normalize_session_key("Agent:Main:Discord:Channel:42") == "discord:channel:42"
    assert normalize_session_key("agent:main:main") == "main"
    assert normalize_session_key("telegram:group:1") == "telegram:group:1"
    assert normalize_session_key("agent:main") == "agent:main"
    assert normalize_session_key("") == ""


@pytest.mark.parametrize(
    ("key", "chat_type", "channel"),
    [
        (None, "direct", None),
        ("", "direct", None),
        (DIRECT, "direct", None),
        (DM, "direct", "telegram"),
        (GROUP, "group", "telegram"),
        (CHANNEL, "channel", "discord"),
        ("agent:main:whatsapp:group:abc:channel:x", "group", "whatsapp"),
        ("agent:main:subagent:1234", "direct", None),
        ("agent:main:cron:nightly", "direct", None),
        ("agent:groupie:main", "direct", None),  # the agent id is not a token of <rest>
    ],
)
def test_chat_type_and_channel_from_key(key: str | None, chat_type: str, channel: str | None) -> None:
    assert chat_type_from_key(key) == chat_type
    assert channel_from_key(key) == channel


@pytest.mark.parametrize(
    ("key", "allowed"),
    [(None, True), (DIRECT, True), (DM, True), (GROUP, False), (CHANNEL, False)],
)
def test_default_scope_is_direct_only(key: str | None, allowed: bool) -> None:
    assert scope_allows(None, key).allowed is allowed


def test_default_scope_decision_fields() -> None:
    assert scope_allows(None, GROUP) == ScopeDecision(False, "group", "telegram", None)
    assert scope_allows(None, DIRECT) == ScopeDecision(True, "direct", None, 0)


def test_explicit_chat_type_overrides_key() -> None:
    assert not scope_allows(None, DIRECT, chat_type="group").allowed
    assert scope_allows(None, GROUP, chat_type="direct").allowed


def test_key_prefix_matches_normalised_key() -> None:
    scope = {"default": "deny", "rules": [{"action": "allow", "match": {"keyPrefix": "telegram:group:"}}]}
    assert scope_allows(scope, GROUP).allowed  # "agent:main:" stripped before matching
    assert scope_allows(scope, "AGENT:OTHER:Telegram:Group:5").allowed  # case-insensitive
    assert not scope_allows(scope, CHANNEL).allowed
    assert not scope_allows(scope, DIRECT).allowed  # default deny
    assert scope_allows(scope, GROUP).rule_index == 0
    assert scope_allows(scope, CHANNEL).rule_index is None


def test_raw_key_prefix_matches_raw_key() -> None:
    scope = {"default": "deny", "rules": [{"action": "allow", "match": {"rawKeyPrefix": "agent:work:"}}]}
    assert scope_allows(scope, WORK_GROUP).allowed
    assert not scope_allows(scope, GROUP).allowed
    # rawKeyPrefix is not compared against the normalised key
    scope2 = {"default": "deny", "rules": [{"action": "allow", "match": {"rawKeyPrefix": "slack:"}}]}
    assert not scope_allows(scope2, WORK_GROUP).allowed


def test_legacy_agent_key_prefix_is_raw() -> None:
    scope = {"default": "deny", "rules": [{"action": "allow", "match": {"keyPrefix": "Agent:Main:Telegram:"}}]}
    assert scope_allows(scope, GROUP).allowed
    assert scope_allows(scope, DM).allowed
    assert not scope_allows(scope, WORK_GROUP).allowed


def test_chat_type_match() -> None:
    scope = {"default": "deny", "rules": [{"action": "allow", "match": {"chatType": "channel"}}]}
    assert scope_allows(scope, CHANNEL).allowed
    assert not scope_allows(scope, GROUP).allowed
    assert not scope_allows(scope, DIRECT).allowed


def test_all_match_fields_must_match() -> None:
    scope = {"default": "deny",
             "rules": [{"action": "allow", "match": {"chatType": "group", "keyPrefix": "slack:"}}]}
    assert scope_allows(scope, WORK_GROUP).allowed
    assert not scope_allows(scope, GROUP).allowed  # group, but telegram
    assert not scope_allows(scope, "agent:main:slack:channel:x").allowed  # slack, but channel


def test_channel_match() -> None:
    scope = {"default": "deny", "rules": [{"action": "allow", "match": {"channel": "discord"}}]}
    assert scope_allows(scope, CHANNEL).allowed
    assert not scope_allows(scope, GROUP).allowed


def test_first_match_wins() -> None:
    deny_first = {"default": "allow", "rules": [
        {"action": "deny", "match": {"keyPrefix": "telegram:group:-100777"}},
        {"action": "allow", "match": {"chatType": "group"}},
    ]}
    d = scope_allows(deny_first, GROUP)
    assert not d.allowed and d.rule_index == 0
    other = scope_allows(deny_first, "agent:main:telegram:group:-1")
    assert other.allowed and other.rule_index == 1

    allow_first = {"default": "deny", "rules": list(reversed(deny_first["rules"]))}
    d = scope_allows(allow_first, GROUP)
    assert d.allowed and d.rule_index == 0


def test_empty_match_matches_everything_and_default_applies() -> None:
    assert not scope_allows({"rules": [{"action": "deny", "match": {}}]}, DIRECT).allowed
    assert scope_allows({"default": "allow", "rules": []}, CHANNEL).allowed
    assert not scope_allows({"default": "deny"}, DIRECT).allowed
    assert scope_allows({}, CHANNEL).allowed  # configured scope without default: allow (sendPolicy)


@pytest.mark.parametrize(
    ("scope", "needle"),
    [
        ({"default": "maybe"}, "scope.default"),
        ({"rules": {}}, "scope.rules"),
        ({"rules": [{"action": "permit"}]}, "scope.rules[0].action"),
        ({"rules": [{"action": "allow", "match": {"keyprefix": "x"}}]}, "scope.rules[0].match.keyprefix"),
        ({"rules": [{"action": "allow", "match": {"chatType": "dm"}}]}, "scope.rules[0].match.chatType"),
        ({"rules": [{"action": "allow", "match": {"keyPrefix": 3}}]}, "scope.rules[0].match.keyPrefix"),
    ],
)
def test_invalid_scope_names_the_key(scope: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        validate_scope(scope)
    with pytest.raises(ValueError):
        scope_allows(scope, DIRECT)


def test_denied_search_logs_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="memindex.scope"):
        decision = check_scope(None, CHANNEL)
    assert not decision.allowed
    records = [r for r in caplog.records if r.name == "memindex.scope"]
    assert len(records) == 1
    msg = records[0].getMessage()
    assert records[0].levelno == logging.WARNING
    assert "channel=discord" in msg and "chatType=channel" in msg


def test_allowed_search_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="memindex.scope"):
        assert check_scope(None, DIRECT).allowed
    assert not [r for r in caplog.records if r.name == "memindex.scope"]


# --- the builtin backend ignores scope, as OpenClaw's does ---------------------------------

@pytest.mark.parametrize("memory", [
    {},                                                   # the default scope (direct chats only for QMD)
    {"scope": {"default": "deny", "rules": []}},          # deny everything
    {"qmd": {"scope": {"default": "deny", "rules": []}}},
])
def test_builtin_search_answers_group_and_channel_keys(agent, caplog, memory) -> None:
    agent.write("memory/2026-01-05.md", "We moved the IoT devices to VLAN 10 on the Omada router.\n")
    agent.memory_config({"provider": "hash"}, memory=memory)
    agent.index()
    with caplog.at_level(logging.WARNING, logger="memindex.scope"):
        for key in (GROUP, CHANNEL, "agent:main:slack:group:eng", DIRECT):
            res = agent.search("router VLAN", session_key=key)
            assert res["results"], key
            assert "not allowed" not in (res.get("warning") or "")
    assert not [r for r in caplog.records if r.name == "memindex.scope"]


@pytest.mark.parametrize("backend", ["builtin", "qmd"])
def test_a_session_key_of_another_agent_is_refused_in_process(agent, backend: str) -> None:
    """helper-51: in-process, `engine.search(..., session_key="agent:ops:...")` on main's engine
    quietly answered from main's memory, where the servers and the CLI refuse the mismatch."""
    import memindex

    agent.write("memory/a.md", "# A\nkumquat\n")
    if backend == "qmd":
        from tests.test_qmd import configure

        configure(agent)
    agent.index()
    with memindex.open_search(agent.settings()) as engine:
        with pytest.raises(memindex.UsageError, match="a session of agent 'ops'"):
            engine.search("kumquat", session_key="agent:ops:telegram:direct:1")
        # Its own agent's key (any case), a key without an agent, and none at all are fine.
        for key in ("agent:Main:main", "telegram:group:42", None):
            engine.search("kumquat", session_key=key)
