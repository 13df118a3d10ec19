from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, strategies as st

from memindex.pipeline.index.transcripts import (
    DeltaState,
    Turn,
    count_new_lines,
    delta_decision,
    head_fingerprint,
    indexed_state,
    probe_file,
    read_transcript,
    read_transcript_file,
    remap_lines,
    sanitize_for_export,
    transcript_lines,
)


def rec(role: str, content, kind: str = "message") -> dict:
    return {"type": kind, "message": {"role": role, "content": content}}


def jsonl(*records) -> bytes:
    return b"".join(
        (r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records
    )


# --- parsing ------------------------------------------------------------------


def test_string_and_parts_content():
    data = jsonl(
        rec("user", "hello\n\n  there"),
        rec("assistant", [
            {"type": "text", "text": "first"},
            {"type": "tool_use", "id": "x", "name": "read", "input": {}},
            {"type": "thinking", "thinking": "secret"},
            {"type": "image", "source": "..."},
            {"type": "text", "text": "second\tpart"},
        ]),
    )
    t = read_transcript(data)
    assert t.turns == [
        Turn("user", "hello there", 1),
        Turn("assistant", "first second part", 2),
    ]
    assert t.lines_total == 2 and t.bytes_total == len(data) == t.consumed_bytes


def test_tool_system_and_unknown_entries_are_dropped_and_counted():
    data = jsonl(
        {"type": "session", "id": "abc", "cwd": "/tmp"},
        rec("system", "you are a bot"),
        rec("toolResult", [{"type": "text", "text": "file contents"}]),
        rec("tool", "output"),
        rec("assistant", [{"type": "tool_call", "name": "x"}]),
        rec("user", [{"type": "tool_result", "content": "r"}, {"type": "toolResult"}]),
        rec("user", "kept"),
        {"type": "custom", "role": "user", "content": "not a message"},
        [1, 2, 3],
    )
    t = read_transcript(data)
    assert [turn.text for turn in t.turns] == ["kept"]
    assert t.turns[0].jsonl_line == 7
    assert t.skipped_other == 8
    assert t.skipped_invalid_json == t.skipped_blank == t.skipped_truncated_last_line == 0


def test_records_without_type_message_are_not_turns():
    """OpenClaw keeps only records with "type": "message" (and a "message" object); a bare
    {"role", "content"} line was indexed here as a turn."""
    data = jsonl({"role": "user", "content": "baretypelessword"},
                 {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "flat"}]},
                 rec("user", "kept"))
    t = read_transcript(data)
    assert [(x.role, x.text, x.jsonl_line) for x in t.turns] == [("user", "kept", 3)]
    assert t.skipped_other == 2


def test_blank_and_invalid_lines_keep_line_numbers():
    data = b"\n   \n{not json\n" + jsonl(rec("user", "a")) + b"\r\n" + jsonl(rec("assistant", "b"))
    t = read_transcript(data)
    assert t.skipped_blank == 3
    assert t.skipped_invalid_json == 1
    assert [(x.text, x.jsonl_line) for x in t.turns] == [("a", 4), ("b", 6)]
    assert t.lines_total == 6
    assert t.consumed_bytes == len(data)


def test_crlf_line_endings():
    data = json.dumps(rec("user", "x")).encode() + b"\r\n"
    assert read_transcript(data).turns == [Turn("user", "x", 1)]


def test_truncated_last_line_not_consumed_then_consumed_when_completed():
    full = json.dumps(rec("assistant", "the end")).encode()
    head = jsonl(rec("user", "q"))
    partial = head + full[:10]
    t = read_transcript(partial)
    assert t.skipped_truncated_last_line == 1
    assert t.skipped_invalid_json == 0
    assert t.consumed_bytes == len(head)
    assert t.next_start_line == 2
    assert [x.text for x in t.turns] == ["q"]

    completed = head + full + b"\n"
    t2 = read_transcript(completed[t.consumed_bytes:], start_line=t.next_start_line)
    assert t2.turns == [Turn("assistant", "the end", 2)]
    assert t2.skipped_truncated_last_line == 0
    assert t.consumed_bytes + t2.consumed_bytes == len(completed)


def test_complete_record_without_trailing_newline_is_consumed():
    data = jsonl(rec("user", "a")) + json.dumps(rec("assistant", "b")).encode()
    t = read_transcript(data)
    assert [x.jsonl_line for x in t.turns] == [1, 2]
    assert t.consumed_bytes == len(data)
    assert t.skipped_truncated_last_line == 0
    # The writer's newline arrives later: resuming keeps absolute line numbers.
    grown = data + b"\n" + jsonl(rec("user", "c"))
    t2 = read_transcript(grown[t.consumed_bytes:], start_line=t.next_start_line)
    assert t2.turns == [Turn("user", "c", 3)]


def test_blank_unterminated_tail_is_not_consumed():
    data = jsonl(rec("user", "a")) + b"   "
    t = read_transcript(data)
    assert t.skipped_blank == 1 and t.skipped_truncated_last_line == 0
    assert t.consumed_bytes == len(data) - 3


def test_invalid_utf8_never_crashes():
    line = b'{"type":"message","message":{"role":"user","content":"caf\xe9 \xff ok"}}\n'
    t = read_transcript(line + b"\xff\xfe garbage\n")
    assert len(t.turns) == 1
    assert "\ufffd" in t.turns[0].text and t.turns[0].text.endswith("ok")
    assert t.skipped_invalid_json == 1


def test_bom_on_first_line():
    data = b"\xef\xbb\xbf" + jsonl(rec("user", "hi"))
    assert read_transcript(data).turns == [Turn("user", "hi", 1)]


def test_empty_input():
    t = read_transcript(b"")
    assert t.turns == [] and t.lines_total == 0 and t.consumed_bytes == 0 and t.next_start_line == 1


@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_crash_and_counters_add_up(data):
    t = read_transcript(data)
    counted = (
        len(t.turns) + t.skipped_blank + t.skipped_invalid_json
        + t.skipped_truncated_last_line + t.skipped_other
    )
    assert counted == t.lines_total
    assert 0 <= t.consumed_bytes <= len(data)


@given(st.lists(st.sampled_from(["user", "assistant", "tool"]), max_size=12), st.integers(0, 400))
def test_split_reads_match_one_read(roles, cut):
    data = jsonl(*(rec(r, f"m{i}") for i, r in enumerate(roles)))
    cut = min(cut, len(data))
    first = read_transcript(data[:cut])
    rest = read_transcript(data[first.consumed_bytes:], start_line=first.next_start_line)
    assert first.turns + rest.turns == read_transcript(data).turns


def test_read_transcript_file_tail(tmp_path):
    p = tmp_path / "s.jsonl"
    data = jsonl(rec("user", "a"), rec("assistant", "b"))
    p.write_bytes(data)
    first_len = len(jsonl(rec("user", "a")))
    t = read_transcript_file(p, start_byte=first_len, start_line=2)
    assert t.turns == [Turn("assistant", "b", 2)]


# --- flattening ---------------------------------------------------------------


def test_transcript_lines_and_remap():
    data = jsonl(
        {"type": "session"}, rec("user", "q1"), rec("tool", "x"), rec("assistant", "a1"), b"", rec("user", "q2")
    )
    lines, line_map = transcript_lines(read_transcript(data))
    assert lines == ["User: q1", "Assistant: a1", "User: q2"]
    assert line_map == [2, 4, 6]
    assert remap_lines(1, 1, line_map) == (2, 2)
    assert remap_lines(2, 3, line_map) == (4, 6)
    assert remap_lines(1, 3, line_map) == (2, 6)
    for bad in [(0, 1), (2, 1), (1, 4)]:
        with pytest.raises(ValueError):
            remap_lines(*bad, line_map)


def test_sanitize_for_export():
    data = jsonl(rec("user", "hi\nthere"), rec("toolResult", "secret"), rec("assistant", [{"type": "text", "text": "yo"}]))
    md = sanitize_for_export(read_transcript(data), "abc")
    assert md == "# Session abc\n\nUser: hi there\nAssistant: yo\n"
    assert "secret" not in md
    assert sanitize_for_export(read_transcript(b"")) == "# Session\n\n(empty)\n"


# --- delta decision -----------------------------------------------------------


def state(indexed_bytes: int = 1000, indexed_lines: int = 10, **kw) -> DeltaState:
    base = dict(path="s.jsonl", size=indexed_bytes, lines=indexed_lines,
                indexed_bytes=indexed_bytes, indexed_lines=indexed_lines,
                inode=7, head_len=4, head_digest=head_fingerprint(b"{\"ty"))
    base.update(kw)
    return DeltaState(**base)


HEAD = head_fingerprint(b"{\"ty")


@pytest.mark.parametrize(
    "growth, action",
    [(99, "none"), (100, "append"), (101, "append")],
)
def test_bytes_threshold_under_at_over(growth, action):
    prev = state()
    d = delta_decision(prev, 1000 + growth, new_lines=0, inode=7, head_digest=HEAD,
                       delta_bytes=100, delta_messages=50)
    assert d.action == action
    assert d.pending_bytes == growth
    if action == "append":
        assert d.reason == "bytes" and d.start_byte == 1000 and d.start_line == 11


@pytest.mark.parametrize("new_lines, action", [(49, "none"), (50, "append"), (51, "append")])
def test_lines_threshold_under_at_over(new_lines, action):
    prev = state()
    d = delta_decision(prev, 1010, new_lines=new_lines, inode=7, head_digest=HEAD,
                       delta_bytes=100_000, delta_messages=50)
    assert d.action == action
    if action == "append":
        assert d.reason == "messages" and d.start_byte == 1000 and d.start_line == 11


def test_default_thresholds():
    prev = state()
    assert delta_decision(prev, 1000 + 99_999, new_lines=49).action == "none"
    assert delta_decision(prev, 1000 + 100_000, new_lines=0).action == "append"
    assert delta_decision(prev, 1000 + 10, new_lines=50).action == "append"


def test_growth_accumulates_since_last_index_not_last_observation():
    prev = state().observed(size=1090, lines=14)
    assert delta_decision(prev, 1099, new_lines=19, delta_bytes=100, delta_messages=50).action == "none"
    assert delta_decision(prev, 1100, new_lines=20, delta_bytes=100, delta_messages=50).action == "append"


def test_uncounted_lines_fall_back_to_bytes():
    prev = state()
    assert delta_decision(prev, 1050, None, delta_bytes=100).action == "none"
    assert delta_decision(prev, 1100, None, delta_bytes=100).action == "append"


def test_no_growth_is_none():
    d = delta_decision(state(), 1000, new_lines=0, delta_bytes=0, delta_messages=0)
    assert (d.action, d.reason) == ("none", "unchanged")


@pytest.mark.parametrize("delta_bytes, delta_messages", [(0, 50), (100_000, 0), (0, 0)])
def test_zero_threshold_means_any_growth(delta_bytes, delta_messages):
    d = delta_decision(state(), 1001, new_lines=0, delta_bytes=delta_bytes, delta_messages=delta_messages)
    assert d.action == "append"


def test_shrink_rebuilds():
    prev = state().observed(size=1500, lines=15)
    assert delta_decision(prev, 999, new_lines=0).action == "rebuild"
    assert delta_decision(prev, 1200, new_lines=0).reason == "shrank"  # below last observed size


def test_replaced_or_rewritten_rebuilds():
    prev = state()
    d = delta_decision(prev, 5000, 0, inode=8, head_digest=HEAD)
    assert (d.action, d.reason) == ("rebuild", "replaced")
    d = delta_decision(prev, 1000, 0, inode=7, head_digest=head_fingerprint(b"XXXX"))
    assert (d.action, d.reason, d.start_byte, d.start_line) == ("rebuild", "rewritten", 0, 1)


def test_untracked_file():
    assert delta_decision(None, 0).action == "none"
    d = delta_decision(None, 10)
    assert (d.action, d.reason, d.start_byte) == ("rebuild", "untracked", 0)


def test_count_new_lines():
    data = b"a\nb\nc"
    assert count_new_lines(data) == 2
    assert count_new_lines(data, 2) == 1
    assert count_new_lines(data, 5) == 0


def test_end_to_end_with_files(tmp_path):
    p = tmp_path / "s.jsonl"
    first = jsonl(*(rec("user", f"m{i}") for i in range(3)))
    p.write_bytes(first)
    data = p.read_bytes()
    t = read_transcript(data)
    st_ = os.stat(p)
    prev = indexed_state(p, t, head=data, inode=st_.st_ino, mtime_ns=st_.st_mtime_ns)
    assert (prev.indexed_bytes, prev.indexed_lines) == (len(first), 3)

    with open(p, "ab") as fh:
        fh.write(jsonl(rec("assistant", "new1"), rec("assistant", "new2")) + b'{"type":"mess')
    probe = probe_file(p, prev)
    assert probe.new_lines == 2
    d = delta_decision(prev, probe.size, probe.new_lines, inode=probe.inode,
                       head_digest=probe.head_digest, delta_bytes=100_000, delta_messages=2)
    assert (d.action, d.start_byte, d.start_line) == ("append", len(first), 4)

    t2 = read_transcript_file(p, start_byte=d.start_byte, start_line=d.start_line)
    assert [(x.text, x.jsonl_line) for x in t2.turns] == [("new1", 4), ("new2", 5)]
    assert t2.skipped_truncated_last_line == 1
    with open(p, "rb") as fh:
        head = fh.read(4096)
    nxt = indexed_state(p, t2, head=head, start_byte=d.start_byte, inode=probe.inode)
    assert nxt.indexed_lines == 5 and nxt.size == probe.size
    assert nxt.indexed_bytes == probe.size - len(b'{"type":"mess')

    # Replacing the file with different content is noticed.
    p.write_bytes(jsonl(rec("user", "other conversation entirely, much longer")) * 3)
    probe = probe_file(p, nxt)
    d = delta_decision(nxt, probe.size, probe.new_lines, inode=probe.inode, head_digest=probe.head_digest)
    assert d.action == "rebuild"
