"""A sync's messages carry the config stamp their plan was made under (issue 43, the changed-file
walk): a worker holding those settings takes them without looking at the config files; a message
in flight finishes under the config it was planned with; the next sync, a batch job and a message
from an older sender (no stamp) resolve the config as it is now."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec

from memindex.pipeline.config import agents
from memindex.pipeline.config.agents import current_settings, planned_settings, settings_for
from memindex.pipeline.config.settings import Context, config_stamp
from memindex.workers.compute import compute_spec, settings_from_spec
from memindex.workers.wire import IndexFiles, decode, encode


def _config(tmp_path: Path, tokens: int) -> Path:
    ws = tmp_path / "workspace"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "openclaw.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws), "memorySearch": {
        "enabled": True, "chunking": {"tokens": tokens, "overlap": 10}}}}}), encoding="utf-8")
    return cfg


def _edit(cfg: Path, tokens: int) -> None:
    before = cfg.stat().st_mtime_ns
    _config(cfg.parent, tokens)
    os.utime(cfg, ns=(before + 2_000_000_000, before + 2_000_000_000))  # a later mtime whatever the clock


def _travelled(ctx: Context) -> Context:
    """``ctx`` as an actor gets it: sent inside a payload, as bytes, and decoded."""
    raw = msgspec.json.encode(list(encode(IndexFiles(ctx, 1, [], None))))
    return decode(IndexFiles, msgspec.json.decode(raw)).ctx


def test_a_planned_message_keeps_its_config_until_the_next_sync(tmp_path):
    cfg = _config(tmp_path, 300)
    (tmp_path / "state").mkdir()
    ctx = Context("main", str(cfg), str(tmp_path / "state"))
    settings, msg = planned_settings(ctx)
    assert msg.stamp is not None and settings.memory_search.chunking.tokens == 300
    got = _travelled(msg)
    assert got == msg and got.stamp == msg.stamp  # the stamp rides the wire; equality ignores it
    assert settings_for(got) is settings

    _edit(cfg, 500)  # the config changes while the message is queued
    assert settings_for(got).memory_search.chunking.tokens == 300  # finishes under its plan's config
    assert current_settings(got).memory_search.chunking.tokens == 500  # a re-sync's plan, a batch job
    newer, msg2 = planned_settings(got)  # the next sync resolves afresh and stamps its own messages
    assert newer.memory_search.chunking.tokens == 500 and msg2.stamp != msg.stamp
    assert settings_for(_travelled(msg2)) is newer


def test_a_message_without_a_stamp_resolves_the_config_as_it_is_now(tmp_path):
    cfg = _config(tmp_path, 300)
    (tmp_path / "state").mkdir()
    _, msg = planned_settings(Context("main", str(cfg), str(tmp_path / "state")))
    # An older sender's Context: the four fields only (and a newer worker's extra field is ignored by
    # an older one's decoder, msgspec's rule for dataclasses).
    old = {"agent_id": msg.agent_id, "config": msg.config, "state_dir": msg.state_dir, "workspace": msg.workspace}
    args = list(encode(IndexFiles(msg, 1, [], None)))
    args[0] = old
    got = decode(IndexFiles, args).ctx
    assert got.stamp is None and got == msg
    _edit(cfg, 500)
    assert settings_for(got).memory_search.chunking.tokens == 500


def test_a_stale_stamp_is_not_trusted_after_the_cache_moved_on(tmp_path):
    cfg = _config(tmp_path, 300)
    (tmp_path / "state").mkdir()
    _, old_msg = planned_settings(Context("main", str(cfg), str(tmp_path / "state")))
    _edit(cfg, 500)
    planned_settings(old_msg)  # this process now holds the newer settings for that Context
    # The older message's stamp matches nothing held: the config as it is now.
    assert settings_for(_travelled(old_msg)).memory_search.chunking.tokens == 500
    assert agents._cache[old_msg][0] != old_msg.stamp


def test_the_compute_spec_is_built_once_per_settings_object(tmp_path):
    cfg = _config(tmp_path, 300)
    (tmp_path / "state").mkdir()
    settings, msg = planned_settings(Context("main", str(cfg), str(tmp_path / "state")))
    spec = compute_spec(settings)
    assert compute_spec(settings) is spec and settings.digest() == settings.digest()
    assert spec.memory_search["chunking"]["tokens"] == 300
    _edit(cfg, 500)
    # The embed actor takes the settings its sync planned with; a batch job (its state outlives any
    # message) those of the config as it is now.
    assert settings_from_spec(spec, msg, planned=True) is settings
    assert settings_from_spec(spec, msg).memory_search.chunking.tokens == 500
    newer, _ = planned_settings(msg)
    assert compute_spec(newer) is not spec and compute_spec(newer).memory_search["chunking"]["tokens"] == 500
    assert newer.digest() != settings.digest()


def test_held_settings_know_the_files_their_config_was_read_from(tmp_path):
    """The config's stamp is that of the files it was read from, an ``$include`` (missing or not)
    among them: settings carry them, and a sync's next plan stamps them without resolving the
    Context again; its pinned Context is the one held with them."""
    part = tmp_path / "part.json5"
    part.write_text('{chunking: {tokens: 300}}', encoding="utf-8")
    cfg = tmp_path / "openclaw.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "ws"), "memorySearch": {
        "$include": "./part.json5"}}}}), encoding="utf-8")
    (tmp_path / "state").mkdir()
    ctx = Context("main", str(cfg), str(tmp_path / "state"))
    settings, msg = planned_settings(ctx)
    assert settings.config_includes == (part,)
    assert settings.config_stamp() == config_stamp(ctx) == config_stamp(msg)
    # (The first read's stamp was taken before its includes were known: the next look reads again.)
    settings, msg = planned_settings(msg)
    again, msg2 = planned_settings(msg)
    assert again is settings and msg2 is msg
    later = part.stat().st_mtime_ns + 2_000_000_000
    part.write_text('{chunking: {tokens: 500}}', encoding="utf-8")
    os.utime(part, ns=(later, later))
    newer, msg3 = planned_settings(msg)
    assert newer.memory_search.chunking.tokens == 500 and msg3.stamp != msg.stamp


def test_a_context_resolved_through_the_environment_follows_it(tmp_path, monkeypatch):
    """``Context()`` names the state dir ``OPENCLAW_STATE_DIR`` says now: a process whose environment
    moves it gets the other state dir's settings (only an absolute Context keeps its files)."""
    states = []
    for name, tokens in (("a", 300), ("b", 500)):
        state = tmp_path / name
        state.mkdir()
        (state / "openclaw.json").write_text(json.dumps({"agents": {"defaults": {
            "workspace": str(state / "ws"), "memorySearch": {"chunking": {"tokens": tokens}}}}}), encoding="utf-8")
        states.append(state)
    monkeypatch.delenv("OPENCLAW_CONFIG_PATH", raising=False)
    assert not Context().absolute and Context(config=str(states[0] / "openclaw.json"), state_dir=str(states[0])).absolute
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(states[0]))
    assert current_settings(Context()).memory_search.chunking.tokens == 300
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(states[1]))
    assert current_settings(Context()).memory_search.chunking.tokens == 500
