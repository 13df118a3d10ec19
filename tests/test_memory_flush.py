from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from memindex.pipeline.flush import (
    DEFAULT_PROMPT,
    DEFAULT_SYSTEM_PROMPT,
    already_flushed,
    flush_decision,
    load_session_entry,
    mark_flushed,
    resolve_settings,
)

NOW = datetime(2026, 3, 14, 9, 30, tzinfo=timezone(timedelta(hours=7)))
WINDOW = 200_000
DEFAULT_THRESHOLD = WINDOW - 20_000 - 4_000  # 176000


def decide(tokens, *, window=WINDOW, cfg=None, entry=None, access="rw", now=NOW):
    return flush_decision(tokens, window, cfg or {}, {"compactionCount": 0} if entry is None else entry, access, now)


def test_defaults():
    s = resolve_settings({})
    assert (s.enabled, s.soft_threshold_tokens, s.reserve_tokens_floor) == (True, 4000, 20000)
    assert s.prompt == DEFAULT_PROMPT and s.system_prompt == DEFAULT_SYSTEM_PROMPT
    assert "NO_REPLY" in DEFAULT_PROMPT and "memory/YYYY-MM-DD.md" in DEFAULT_PROMPT


@pytest.mark.parametrize("tokens, run", [(DEFAULT_THRESHOLD - 1, False), (DEFAULT_THRESHOLD, True), (DEFAULT_THRESHOLD + 1, True)])
def test_default_threshold_under_at_over(tokens, run):
    d = decide(tokens)
    assert d.threshold == 176_000
    assert d.run is run
    assert d.reason == ("threshold-reached" if run else "below-threshold")


def test_custom_values():
    cfg = {"softThresholdTokens": 1000, "reserveTokensFloor": 5000}
    d = decide(93_999, window=100_000, cfg=cfg)
    assert d.threshold == 94_000 and not d.run
    assert decide(94_000, window=100_000, cfg=cfg).run


def test_reserve_floor_at_compaction_level():
    compaction = {"reserveTokensFloor": 10_000, "memoryFlush": {"softThresholdTokens": 2000}}
    assert decide(0, cfg=compaction).threshold == WINDOW - 12_000
    # memoryFlush-level value wins when both exist
    compaction["memoryFlush"]["reserveTokensFloor"] = 30_000
    assert decide(0, cfg=compaction).threshold == WINDOW - 32_000


def test_resolved_config_with_none_prompts_uses_defaults():
    cfg = {"enabled": True, "softThresholdTokens": 4000, "reserveTokensFloor": 20000, "prompt": None, "systemPrompt": None}
    d = decide(DEFAULT_THRESHOLD, cfg=cfg)
    assert d.run and "memory/2026-03-14.md" in d.prompt


def test_non_positive_threshold_or_tokens_never_flush():
    assert decide(10**9, window=20_000).reason == "threshold-not-positive"
    assert decide(0, cfg={"softThresholdTokens": 0, "reserveTokensFloor": 0}).reason == "no-token-estimate"


def test_zero_window_uses_default():
    assert decide(DEFAULT_THRESHOLD, window=0).threshold == DEFAULT_THRESHOLD


def test_prompts_contain_date_time_and_no_reply():
    d = decide(DEFAULT_THRESHOLD)
    assert d.run
    assert "memory/2026-03-14.md" in d.prompt and "YYYY-MM-DD" not in d.prompt
    assert "NO_REPLY" in d.prompt and "NO_REPLY" in d.system_prompt
    assert "Current time: 2026-03-14T09:30:00+07:00" in d.prompt


def test_seed_custom_prompts_and_missing_no_reply_hint():
    cfg = {
        "systemPrompt": "Session nearing compaction. Store durable memories now.",
        "prompt": "Write any lasting notes to memory/YYYY-MM-DD.md; reply with NO_REPLY if nothing to store.",
    }
    d = decide(DEFAULT_THRESHOLD, cfg=cfg)
    assert d.prompt.startswith("Write any lasting notes to memory/2026-03-14.md; reply with NO_REPLY")
    assert d.prompt.count("NO_REPLY") == 1
    assert d.system_prompt.startswith("Session nearing compaction.") and "NO_REPLY" in d.system_prompt

    d = decide(DEFAULT_THRESHOLD, cfg={"prompt": "Save notes to memory/YYYY-MM-DD.md."})
    assert "NO_REPLY" in d.prompt


def test_disabled_skips():
    d = decide(10**6, cfg={"enabled": False})
    assert (d.run, d.reason, d.prompt, d.system_prompt) == (False, "disabled", None, None)


@pytest.mark.parametrize("access", ["ro", "none", "RO"])
def test_read_only_workspace_skips(access):
    d = decide(10**6, access=access)
    assert not d.run and d.reason.startswith("workspace-")


def test_unsandboxed_counts_as_writable():
    assert decide(DEFAULT_THRESHOLD, access=None).run


def test_no_session_entry_skips():
    d = flush_decision(10**6, WINDOW, {}, None, "rw", NOW)
    assert (d.run, d.reason) == (False, "no-session-entry")


@pytest.mark.parametrize(
    "entry, flushed",
    [
        ({}, False),
        ({"compactionCount": 2}, False),
        ({"compactionCount": 2, "memoryFlushCompactionCount": 1}, False),
        ({"compactionCount": 2, "memoryFlushCompactionCount": 2}, True),
        ({"memoryFlushCompactionCount": 0}, True),
    ],
)
def test_already_flushed(entry, flushed):
    assert already_flushed(entry) is flushed
    assert decide(DEFAULT_THRESHOLD, entry=entry).run is (not flushed)


def write_store(path, store):
    path.write_text(json.dumps(store), encoding="utf-8")


def test_once_per_compaction_cycle_via_sessions_json(tmp_path):
    path = tmp_path / "sessions.json"
    key = "agent:main:main"
    write_store(path, {key: {"sessionId": "s1", "compactionCount": 3, "updatedAt": 1}})

    assert decide(DEFAULT_THRESHOLD, entry=load_session_entry(path, key)).run
    mark_flushed(path, key, now=NOW)
    entry = load_session_entry(path, key)
    assert entry["memoryFlushCompactionCount"] == 3
    assert entry["memoryFlushAt"] == int(NOW.timestamp() * 1000)
    second = decide(DEFAULT_THRESHOLD + 10_000, entry=entry)
    assert (second.run, second.reason) == (False, "already-flushed")

    # The session compacts: a new cycle, so the flush may run again.
    store = json.loads(path.read_text())
    store[key]["compactionCount"] = 4
    write_store(path, store)
    assert decide(DEFAULT_THRESHOLD, entry=load_session_entry(path, key)).run


def test_mark_flushed_with_compaction_during_flush(tmp_path):
    path = tmp_path / "sessions.json"
    write_store(path, {"k": {"compactionCount": 1}})
    mark_flushed(path, "k", compaction_count=2)
    entry = load_session_entry(path, "k")
    assert entry["compactionCount"] == 2 and entry["memoryFlushCompactionCount"] == 2
    assert already_flushed(entry)


def test_mark_flushed_preserves_other_entries_and_keys(tmp_path):
    path = tmp_path / "sessions.json"
    store = {
        "agent:main:main": {"sessionId": "a", "compactionCount": 1, "custom": {"x": [1, 2]}, "label": "héllo"},
        "agent:main:telegram:group:42": {"sessionId": "b", "compactionCount": 5},
    }
    write_store(path, store)
    mark_flushed(path, "agent:main:main", now=NOW)
    after = json.loads(path.read_text(encoding="utf-8"))
    assert after["agent:main:telegram:group:42"] == store["agent:main:telegram:group:42"]
    main = after["agent:main:main"]
    assert {k: main[k] for k in store["agent:main:main"]} == store["agent:main:main"]
    assert main["memoryFlushCompactionCount"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sessions.json"]  # no temp files left


def test_mark_flushed_missing_entry(tmp_path):
    """No entry (or no sessions.json): a UsageError under the error root, not a bare KeyError."""
    from memindex import UsageError

    path = tmp_path / "sessions.json"
    write_store(path, {"other": {}})
    for where in (path, tmp_path / "missing.json"):
        with pytest.raises(UsageError, match="'missing' has no entry"):
            mark_flushed(where, "missing")
    with pytest.raises(UsageError, match="session_key must be str"):
        load_session_entry(path, 3)
    assert json.loads(path.read_text()) == {"other": {}}
    assert load_session_entry(path, "missing") is None
    assert load_session_entry(tmp_path / "nope.json", "x") is None


@pytest.mark.parametrize("tokens", [None, float("nan"), True, -5, 0])
def test_unknown_token_estimate_never_flushes(tokens):
    d = flush_decision(tokens, WINDOW, {}, {"compactionCount": 0}, "rw", NOW)
    assert (d.run, d.reason) == (False, "no-token-estimate")


def test_decision_from_resolved_agent_config(agent):
    agent.write_config({"agents": {"defaults": {"compaction": {
        "reserveTokensFloor": 10_000, "memoryFlush": {"softThresholdTokens": 2_000}}}}})
    cfg = agent.settings().memory_flush
    assert flush_decision(WINDOW - 12_001, WINDOW, cfg, {}, None, NOW).reason == "below-threshold"
    d = flush_decision(WINDOW - 12_000, WINDOW, cfg, {}, None, NOW)
    assert d.run and d.threshold == WINDOW - 12_000 and "NO_REPLY" in d.prompt
    agent.write_config({"agents": {"defaults": {"compaction": {"memoryFlush": {"enabled": False}}}}})
    assert flush_decision(10**6, WINDOW, agent.settings().memory_flush, {}, None, NOW).reason == "disabled"


def test_wrong_arguments_are_usage_errors_naming_them():
    """A runtime passing None for the window got a bare TypeError from deep inside."""
    import pytest

    from memindex import UsageError

    with pytest.raises(UsageError, match="context_window"):
        flush_decision(None, None, None, None, None, None)
    with pytest.raises(UsageError, match="now"):
        flush_decision(10, WINDOW, {}, {}, "rw", "2026-01-01")
    with pytest.raises(UsageError, match="session_entry"):
        flush_decision(10, WINDOW, {}, [], "rw", NOW)



def test_a_wrong_path_or_option_is_a_usage_error_and_a_bad_sessions_file_a_store_error_naming_it(tmp_path):
    """trialB: load_session_entry(None | 5, k) and mark_flushed(None, k) raised pathlib's TypeError,
    a sessions.json that is not JSON its JSONDecodeError, a directory IsADirectoryError, and
    mark_flushed(now="x") / (compaction_count="x") an AttributeError / TypeError: all outside the
    error root. Wrong arguments are UsageErrors naming them; a file that cannot be read or parsed
    (or written) is a StoreError naming the file, and the file is left as it was."""
    import memindex

    good = tmp_path / "sessions.json"
    write_store(good, {"k": {"sessionId": "s", "compactionCount": 2}})
    for bad in (None, 5, b"/tmp/x.json", ""):
        with pytest.raises(memindex.UsageError, match="sessions_json_path"):
            memindex.load_session_entry(bad, "k")
        with pytest.raises(memindex.UsageError, match="sessions_json_path"):
            memindex.mark_flushed(bad, "k")
    for kw, name in (({"now": "x"}, "now"), ({"now": 1.5}, "now"), ({"compaction_count": "x"}, "compaction_count"),
                     ({"compaction_count": True}, "compaction_count"), ({"compaction_count": -1}, "compaction_count")):
        with pytest.raises(memindex.UsageError, match=name):
            memindex.mark_flushed(good, "k", **kw)
    assert json.loads(good.read_text()) == {"k": {"sessionId": "s", "compactionCount": 2}}  # untouched

    not_json = tmp_path / "broken.json"
    not_json.write_text("{")
    for path, said in ((not_json, "is not JSON"), (tmp_path, "Is a directory")):
        for call in (lambda: memindex.load_session_entry(path, "k"), lambda: memindex.mark_flushed(path, "k")):
            with pytest.raises(memindex.StoreError, match=said) as exc:
                call()
            assert str(path) in str(exc.value) and isinstance(exc.value, memindex.MemindexError)
    assert not_json.read_text() == "{"
    # the right calls still answer; str paths as well as Paths
    assert memindex.load_session_entry(str(good), "k") == {"sessionId": "s", "compactionCount": 2}
    memindex.mark_flushed(str(good), "k", now=NOW, compaction_count=3)
    assert memindex.load_session_entry(good, "k")["memoryFlushCompactionCount"] == 3


def test_an_unknown_keyword_is_named_before_a_missing_argument():
    """trialB: flush_decision(foo=1) said "missing a required argument: 'token_estimate'", not that
    `foo` is no argument of it."""
    import memindex

    with pytest.raises(memindex.UsageError, match=r"^flush_decision\(\): got unexpected keyword argument\(s\) 'foo'; "
                                                  r"it takes token_estimate, "):
        memindex.flush_decision(foo=1)
    with pytest.raises(memindex.UsageError, match="'foo'"):
        memindex.mark_flushed("sessions.json", "k", foo=1)
    with pytest.raises(memindex.UsageError, match="missing a required argument: 'token_estimate'"):
        memindex.flush_decision()  # no unknown keyword: the missing one is still named
