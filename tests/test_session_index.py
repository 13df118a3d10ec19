"""Session transcripts in the index (F9): discovery, records, search, isolation, opt-in."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import Agent, run_cli
from memindex.pipeline.search.get import MemoryGetError, memory_get
from memindex.pipeline.search.engine import MemorySearch
from memindex.pipeline.index.sessions import discover_sessions, parse_extra
from memindex.pipeline.status import source_scan, format_status, index_status
from memindex.pipeline.store.reader import open_reader

OPT_IN = {"sources": ["memory", "sessions"], "experimental": {"sessionMemory": True}}


def msg(role: str, content) -> str:
    return json.dumps({"type": "message", "message": {"role": role, "content": content}}) + "\n"


def transcript(agent: Agent, name: str, *lines: str, agent_id: str | None = None) -> Path:
    d = agent.state / "agents" / (agent_id or agent.agent_id) / "sessions"
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_text("".join(lines), encoding="utf-8")
    return p


def session_rows(agent: Agent) -> list[tuple]:
    return [r for r in agent.store_rows() if r[0] == "sessions"]


def files_row(settings, path: str):
    r = open_reader(settings)
    try:
        return r.indexed_files(r.state().live_generation).get(("sessions", path))
    finally:
        r.close()


@pytest.fixture
def sess(agent: Agent) -> Agent:
    agent.memory_config(OPT_IN)
    agent.write("MEMORY.md", "# Memory\n\nNothing about sessions here.\n")
    return agent


def test_transcript_indexed_and_found_with_source_sessions(sess):
    transcript(
        sess, "abc.jsonl",
        json.dumps({"type": "session", "id": "abc"}) + "\n",               # 1 metadata
        msg("user", "Which port does the Grafana container use?"),       # 2
        msg("assistant", [{"type": "tool_use", "id": "t", "name": "sh", "input": {}}]),  # 3 tool only
        msg("toolResult", "3000/tcp grafana"),                            # 4 tool result
        msg("assistant", [{"type": "text", "text": "Grafana listens on 3000."}]),  # 5
        msg("system", "you are helpful"),                                 # 6
    )
    counts = sess.index()
    assert counts["to_index"] == 2
    rows = session_rows(sess)
    assert [(r[1], r[2], r[3]) for r in rows] == [("sessions/abc.jsonl", 2, 5)]
    assert rows[0][5] == "User: Which port does the Grafana container use?\nAssistant: Grafana listens on 3000."

    res = sess.search("Grafana port")
    top = res["results"][0]
    assert top["source"] == "sessions" and top["path"] == "sessions/abc.jsonl"
    assert (top["startLine"], top["endLine"]) == (2, 5)
    assert "Source: sessions/abc.jsonl#L2-L5" in top["snippet"]
    assert "3000/tcp" not in top["snippet"] and "you are helpful" not in top["snippet"]


def test_chunk_line_ranges_map_to_jsonl_lines(sess):
    lines = [json.dumps({"type": "session"}) + "\n"]
    for i in range(60):
        lines.append(msg("user" if i % 2 == 0 else "assistant", f"turn {i} " + "filler words " * 20))
        if i % 7 == 0:
            lines.append("\n")  # blank lines shift JSONL numbering
    p = transcript(sess, "long.jsonl", *lines)
    sess.index()
    jsonl = p.read_text().split("\n")
    rows = session_rows(sess)
    assert len(rows) > 3
    for _, _, start, end, _, text in rows:
        first, last = text.split("\n")[0], text.split("\n")[-1]
        n_first = first.split(" ")[2]  # "User: turn N ..."
        n_last = last.split(" ")[2]
        assert f'"turn {n_first} ' in jsonl[start - 1]
        assert f'"turn {n_last} ' in jsonl[end - 1]


def test_malformed_lines_counted_skipped_and_reported(sess):
    p = transcript(
        sess, "bad.jsonl",
        msg("user", "the okapi is in the garden"),
        "{not json at all\n",
        "\n",
        "[1, 2, 3]\n",
        msg("assistant", "noted the okapi"),
        "\x00\xff garbage\n",
        '{"type": "message", "message": {"role": "user", "content": "half wri',  # still being written
    )
    sess.index()
    rows = session_rows(sess)
    assert len(rows) == 1 and rows[0][2:4] == (1, 5)
    extra = parse_extra(files_row(sess.settings(), "sessions/bad.jsonl").extra)
    assert extra["skipped"] == {"blank": 1, "invalid_json": 2, "other": 1}
    assert extra["turns"] == 2
    # The half-written last line is not consumed: indexing resumes there.
    assert extra["session"]["indexed_bytes"] == p.stat().st_size - len(p.read_bytes().split(b"\n")[-1])
    status = index_status(sess.settings())
    assert {"path": "sessions/bad.jsonl", "error": "2 malformed JSONL line(s) skipped (invalid JSON)"} \
        in status["problems"]
    assert "problem:      sessions/bad.jsonl: 2 malformed" in format_status(status)
    assert sess.search("okapi")["results"][0]["source"] == "sessions"


def test_a_record_of_the_wrong_shape_skips_that_line_only(sess):
    """A role that is a list or an object made the whole transcript fail (TypeError: unhashable
    type), so none of its messages was searchable; such a line is skipped like any other."""
    transcript(sess, "odd.jsonl", msg("user", "the gecko sleeps on the wall"),
               json.dumps({"type": "message", "message": {"role": ["user"], "content": "x"}}) + "\n",
               json.dumps({"type": "message", "message": {"role": {"a": 1}, "content": "y"}}) + "\n",
               json.dumps({"type": ["message"], "role": "user", "content": "z"}) + "\n",
               msg("assistant", "the gecko is fine"))
    sess.index()
    assert [r["source"] for r in sess.search("gecko")["results"]] == ["sessions"]
    assert parse_extra(files_row(sess.settings(), "sessions/odd.jsonl").extra)["turns"] == 2


def test_garbage_only_transcript_does_not_crash(sess):
    transcript(sess, "junk.jsonl", "\n".join(["{{{", "nope", "", "]]"]) + "\n")
    transcript(sess, "empty.jsonl")
    (sess.state / "agents" / "main" / "sessions" / "binary.jsonl").write_bytes(os.urandom(3000))
    counts = sess.index()
    assert counts["to_index"] == 4
    assert session_rows(sess) == []
    assert sess.index()["to_index"] == 0  # recorded, so not retried forever


def test_discovery_top_level_regular_jsonl_only(sess, tmp_path):
    transcript(sess, "keep.jsonl", msg("user", "kept transcript"))
    d = sess.state / "agents" / "main" / "sessions"
    (d / "sessions.json").write_text("{}")
    (d / "notes.md").write_text("not a transcript")
    (d / "sub").mkdir()
    (d / "sub" / "nested.jsonl").write_text(msg("user", "nested transcript"))
    outside = tmp_path / "outside.jsonl"
    outside.write_text(msg("user", "linked transcript"))
    (d / "link.jsonl").symlink_to(outside)
    (d / "dir.jsonl").mkdir()
    found = discover_sessions(sess.settings())
    assert [(f.path, f.source, f.kind) for f in found] == [("sessions/keep.jsonl", "sessions", "session")]
    sess.index()
    assert {r[1] for r in session_rows(sess)} == {"sessions/keep.jsonl"}


def test_symlinked_sessions_dir_is_refused(sess, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "x.jsonl").write_text(msg("user", "foreign transcript"))
    (sess.state / "agents" / "main").mkdir(parents=True)
    (sess.state / "agents" / "main" / "sessions").symlink_to(other)
    assert discover_sessions(sess.settings()) == []
    # Said, as for memory files (it was silent: helper-50).
    scan = {sc["source"]: sc for sc in source_scan(sess.settings())["sources"]}["sessions"]
    assert scan["totalFiles"] == 0 and any("is a symlink; not read" in i for i in scan["issues"]), scan


def test_symlinked_and_special_transcripts_are_named_by_status(sess, tmp_path):
    """helper-50: symlinked `.jsonl` files and FIFOs named like transcripts were skipped without a
    word in status, where the same under memory/ get an issue line."""
    transcript(sess, "real.jsonl", msg("user", "a real transcript"))
    d = sess.state / "agents" / "main" / "sessions"
    elsewhere = tmp_path / "other.jsonl"
    elsewhere.write_text(msg("user", "someone else's"))
    (d / "linked.jsonl").symlink_to(elsewhere)
    os.mkfifo(d / "pipe.jsonl")
    scan = {sc["source"]: sc for sc in source_scan(sess.settings())["sources"]}["sessions"]
    assert scan["totalFiles"] == 1, scan
    assert any("1 symlinked transcript(s) not followed" in i and "linked.jsonl" in i for i in scan["issues"]), scan
    assert any("1 special file(s)" in i and "pipe.jsonl" in i for i in scan["issues"]), scan


@pytest.mark.parametrize("ms", [
    {},
    {"sources": ["memory", "sessions"]},                                # not opted in
    {"experimental": {"sessionMemory": True}},                          # source not listed
    {"sources": ["memory"], "experimental": {"sessionMemory": True}},
])
def test_sessions_ignored_unless_opted_in(agent, ms):
    from memindex.producers.session_delta import check_sessions

    agent.memory_config(ms)
    agent.write("MEMORY.md", "# Memory\nzebra facts\n")
    transcript(agent, "s.jsonl", msg("user", "zebra in a transcript"))
    agent.index()
    assert session_rows(agent) == []
    assert {r["source"] for r in agent.search("zebra")["results"]} == {"memory"}
    assert check_sessions(agent.ctx) == 0


def test_opting_out_drops_indexed_sessions(sess):
    transcript(sess, "s.jsonl", msg("user", "a capybara appeared"))
    sess.index()
    assert session_rows(sess)
    sess.memory_config({"sources": ["memory"]})
    sess.index()
    assert session_rows(sess) == []
    assert sess.search("capybara")["results"] == []


def test_isolation_two_agents_sharing_one_state_dir(tmp_path):
    alpha, beta = Agent(tmp_path, "alpha"), Agent(tmp_path, "beta")  # one state dir
    alpha.write_config({"agents": {"defaults": {"memorySearch": OPT_IN},
                                   "list": [{"id": "alpha"}, {"id": "beta"}]}})
    transcript(alpha, "a1.jsonl", msg("user", "alpha secret is marmalade"))
    transcript(alpha, "shared-name.jsonl", msg("user", "alpha also mentions kumquat"))
    transcript(beta, "shared-name.jsonl", msg("user", "beta secret is kumquat"))
    alpha.index()
    beta.index()
    assert alpha.settings().store_path != beta.settings().store_path
    a_texts = " ".join(r[5] for r in session_rows(alpha))
    b_texts = " ".join(r[5] for r in session_rows(beta))
    assert "marmalade" in a_texts and "beta secret" not in a_texts
    assert "beta secret is kumquat" in b_texts and "alpha" not in b_texts
    assert [r["snippet"] for r in beta.search("marmalade")["results"]] == []
    hits = alpha.search("kumquat")["results"]
    assert hits and all("beta secret" not in r["snippet"] for r in hits)


def test_memory_get_refuses_transcripts(sess):
    transcript(sess, "s.jsonl", msg("user", "private conversation"))
    sess.index()
    settings = sess.settings()
    for path in ("sessions/s.jsonl", "../state/agents/main/sessions/s.jsonl",
                 str(settings.sessions_dir / "s.jsonl"), "memory/../../state/agents/main/sessions/s.jsonl"):
        with pytest.raises(MemoryGetError):
            memory_get(settings, path)


def test_temporal_decay_ages_sessions_by_transcript_mtime(sess):
    body = msg("user", "the heron nests by the quarry")
    fresh = transcript(sess, "fresh.jsonl", body)
    old = transcript(sess, "old.jsonl", body)
    now = time.time()
    os.utime(fresh, (now, now))
    os.utime(old, (now - 30 * 86400, now - 30 * 86400))
    sess.memory_config({**OPT_IN, "query": {"hybrid": {"temporalDecay": {"enabled": True, "halfLifeDays": 30}}}})
    sess.index()
    settings = sess.settings()
    # Where search looks the transcript up: <state>/agents/<id>/sessions/<file>.
    assert (settings.sessions_dir.parent / "sessions/old.jsonl").samefile(old)
    eng = MemorySearch(settings, clock=lambda: now)
    try:
        res = {r.path: r for r in eng.search("heron quarry", min_score=0.0).results}
    finally:
        eng.close()
    f, o = res["sessions/fresh.jsonl"], res["sessions/old.jsonl"]
    assert f.textScore == pytest.approx(o.textScore)
    assert f.score == pytest.approx(f.textScore, rel=1e-3)
    assert o.score == pytest.approx(f.score * 0.5, rel=1e-3)


def test_sync_leaves_small_growth_to_the_detector_and_indexes_new_transcripts(sess):
    p = transcript(sess, "s.jsonl", msg("user", "first turn about lanterns"))
    sess.index()
    before = session_rows(sess)
    with open(p, "a") as fh:
        fh.write(msg("assistant", "a second turn about lanterns"))
    counts = sess.index()
    assert counts["to_index"] == 0 and counts["unchanged"] == 2
    assert counts["pending_sessions"] == 1  # `index` says why the new turn is not searchable yet
    assert session_rows(sess) == before
    assert sess.index()["pending_sessions"] == 1  # the no-op plan (unchanged mark) remembers it
    from tests.test_mcp import cli_args

    out = run_cli(*cli_args(sess)[2:], "index")
    assert out.returncode == 0, out.stderr
    assert "1 transcript(s) with new lines below the delta threshold, indexed once 50 lines" in out.stdout, out.stdout
    # A transcript never indexed is indexed in full, however small.
    transcript(sess, "new.jsonl", msg("user", "brand new topic: walruses"))
    assert sess.index()["to_index"] == 1
    assert any("walruses" in r[5] for r in session_rows(sess))


def test_sync_appends_growth_past_the_threshold(sess):
    sess.memory_config({**OPT_IN, "sync": {"sessions": {"deltaMessages": 3}}})
    p = transcript(sess, "s.jsonl", msg("user", "first turn about lanterns"))
    sess.index()
    before = session_rows(sess)
    with open(p, "a") as fh:
        for i in range(3):
            fh.write(msg("assistant", f"later turn {i} about tapirs"))
    assert sess.index()["to_index"] == 1
    after = session_rows(sess)
    assert set(before) <= set(after)
    new = [r for r in after if r not in before]
    assert [(r[2], r[3]) for r in new] == [(2, 4)] and "tapirs" in new[0][5] and "lanterns" not in new[0][5]


def test_deleted_transcript_is_removed(sess):
    p = transcript(sess, "gone.jsonl", msg("user", "ephemeral pangolin"))
    sess.index()
    assert session_rows(sess)
    p.unlink()
    assert sess.index()["to_delete"] == 1
    assert session_rows(sess) == []


def test_a_lone_surrogate_or_a_non_utf8_name_does_not_block_the_transcripts(sess):
    """A JSON string holding half an emoji ("\\ud83d", as a JS writer may cut one) failed the whole
    transcript on every retry (UnicodeEncodeError), and a transcript whose name is not valid UTF-8
    could not even record its problem: `index` retried for minutes, then exited 1, every run."""
    transcript(sess, "surr.jsonl", msg("user", "vultureword first"),
               '{"type": "message", "message": {"role": "assistant", "content": "half \\ud83d condorword"}}\n',
               msg("user", "falconword last"))
    d = sess.state / "agents" / "main" / "sessions"
    bad = os.path.join(os.fsencode(d), b"bad\xffname.jsonl")
    with open(bad, "wb") as fh:
        fh.write(msg("user", "ibisword in a badly named file").encode())
    counts = sess.index()
    assert counts["to_index"] == 3
    for word in ("vultureword", "condorword", "falconword"):
        hits = sess.search(word)["results"]
        assert hits and hits[0]["path"] == "sessions/surr.jsonl", word
    assert any("half \ufffd condorword" in r[5] for r in session_rows(sess))  # as undecodable bytes are
    problems = index_status(sess.settings())["problems"]
    assert {"path": "sessions/bad\\xffname.jsonl", "error": "file name is not valid UTF-8; skipped (rename it "
            "to index it)"} in problems, problems
    assert sess.index()["to_index"] == 0  # not planned again by every sync


def test_a_transcript_bigger_than_one_read_is_indexed_whole_by_one_index(sess, monkeypatch):
    """A transcript is read at most MAX_READ_BYTES at a time: a 100 MiB one needed three `index`
    runs (each saying it was done), and `index --force` never got past the first 32 MiB. The
    writer now asks for the next part's sync at once, and the index waits for it."""
    from memindex.pipeline.index import sessions

    monkeypatch.setattr(sessions, "MAX_READ_BYTES", 4096)
    lines = [msg("user", f"message {i} lorem ipsum dolor sit amet " * 3) for i in range(200)]
    transcript(sess, "big.jsonl", *lines, msg("assistant", "BIGEND wolverine"))
    sess.index()
    assert [r["path"] for r in sess.search("wolverine")["results"]] == ["sessions/big.jsonl"]
    sess.index(force=True)
    assert [r["path"] for r in sess.search("wolverine")["results"]] == ["sessions/big.jsonl"]
    assert parse_extra(files_row(sess.settings(), "sessions/big.jsonl").extra)["turns"] == 201


@pytest.mark.parametrize("where", ["first", "middle"])
def test_a_line_longer_than_one_read_is_skipped_and_the_rest_indexed(sess, monkeypatch, where):
    """helper-50: a 40 MiB line (a tool result carrying an image) stopped every read inside it: no
    line after it was ever indexed, `index` said done each time and re-read 32 MiB on every sync.
    It is skipped whole, said in status, and the lines after it are indexed."""
    from memindex.pipeline.index import sessions

    monkeypatch.setattr(sessions, "MAX_READ_BYTES", 4096)
    giant = msg("user", "giantword " + "x" * 10_000)
    after = [msg("assistant", f"turn {i} after the giant line okapi{i}") for i in range(61)]
    before = [] if where == "first" else [msg("user", "the first line names the ocelot")]
    transcript(sess, "g.jsonl", *before, giant, *after)
    sess.index()
    for word in ["okapi0", "okapi60"] + ([] if where == "first" else ["ocelot"]):
        assert [r["path"] for r in sess.search(word)["results"]] == ["sessions/g.jsonl"], word
    assert sess.search("giantword")["results"] == []
    problems = index_status(sess.settings())["problems"]
    assert {"path": "sessions/g.jsonl", "error": "1 line(s) over 4096 bytes skipped (not indexed)"} in problems, \
        problems
    assert sess.index()["to_index"] == 0  # converged: not planned (and re-read) by every sync
    sess.index(force=True)
    assert [r["path"] for r in sess.search("okapi60")["results"]] == ["sessions/g.jsonl"]


def test_a_transcript_rewritten_in_place_is_reindexed_not_taken_for_growth(sess):
    """helper-47: a transcript rewritten in place (same inode, same first 4 KiB) kept its old text
    searchable: masked at the same size it counted as unchanged; rewritten longer, as growth from
    the old offset (mid-line), and status said clean. A scrubbed secret stayed findable."""
    lines = [msg("user", f"message {i} about the weather " * 4) for i in range(80)]
    lines[40] = msg("user", "my password is zqsecretpw1234 keep it safe")
    p = transcript(sess, "s.jsonl", *lines)
    sess.index()
    assert sess.search("zqsecretpw1234")["results"]

    def rewrite(text: str) -> None:  # in place: same inode
        ino = p.stat().st_ino
        with open(p, "r+", encoding="utf-8") as fh:
            fh.seek(0)
            fh.write(text)
            fh.truncate()
        assert p.stat().st_ino == ino

    time.sleep(0.01)
    rewrite("".join(lines).replace("zqsecretpw1234", "**************"))  # the same size
    sess.index()
    assert sess.search("zqsecretpw1234")["results"] == []
    lines[40] = msg("user", "my password is [REDACTED BY THE SCRUBBER] keep it safe")
    time.sleep(0.01)
    rewrite("".join(lines) + "".join(msg("assistant", f"later turn {i} zqlater{i}") for i in range(60)))
    sess.index()
    assert sess.search("zqsecretpw1234")["results"] == [] and sess.search("REDACTED")["results"]
    assert sess.search("zqlater59")["results"]
    # Plain growth is still a delta, not a rebuild.
    with open(p, "a", encoding="utf-8") as fh:
        fh.write("".join(msg("user", f"appended {i} zqapp{i}") for i in range(60)))
    counts = sess.index()
    assert counts["to_index"] == 1 and sess.search("zqapp59")["results"]


SECRET_TURNS = (
    msg("user", [{"type": "text", "text": "my deploy creds: OPENAI_API_KEY=sk-proj-Zq9aXbYcWdVeUfTgShRiQjPkOlNm1234 "
                                          "and github ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 for the staging host"}]),
    msg("user", "Conversation info (untrusted metadata):\n```json\n{\"sender_id\": \"+15551234567\", "
                "\"chat\": \"metadatachatname\"}\n```\n\nwhat is the weather in Oslo"),
    msg("assistant", [{"type": "text", "text": "Use curl --token abcdef1234567890ghij https://api.test for staging"}]),
)


def test_secrets_and_inbound_metadata_are_not_indexed(sess):
    """OpenClaw strips its inbound metadata blocks and masks secrets (redactSensitiveText, mode
    "tools") before indexing a transcript; memindex indexed both verbatim and showed the keys whole
    in snippets."""
    transcript(sess, "creds.jsonl", *SECRET_TURNS)
    sess.index()
    [row] = session_rows(sess)
    assert row[5] == ("User: my deploy creds: OPENAI_API_KEY=sk-pro…1234 and github ghp_Ab…6789 for the staging host\n"
                      "User: what is the weather in Oslo\n"
                      "Assistant: Use curl --token abcdef…ghij https://api.test for staging")
    snippet = sess.search("staging host creds")["results"][0]["snippet"]
    assert "sk-pro…1234" in snippet and "Zq9aXbYc" not in snippet
    assert not sess.search("ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789")["results"]
    assert not sess.search("metadatachatname")["results"]


def test_a_transcript_indexed_before_redaction_is_reindexed(sess):
    """A store written before transcripts were cleaned holds the keys verbatim while the file is
    unchanged (same size and mtime): its rows record no text version, and the next sync redoes them."""
    p = transcript(sess, "creds.jsonl", *SECRET_TURNS)
    sess.index()
    settings = sess.settings()
    from memindex.pipeline.store import db

    # What the row of an older memindex looks like: no "text" in extra, the key in the chunk text.
    r = open_reader(settings)
    gen = r.state().live_generation
    r.close()
    conn = db.connect(str(settings.store_path))
    conn.execute(f"UPDATE files_g{gen} SET extra = json_remove(extra, '$.text') WHERE source = 'sessions'")
    conn.execute(f"UPDATE chunks_g{gen} SET text = replace(text, 'sk-pro…1234', "
                 "'sk-proj-Zq9aXbYcWdVeUfTgShRiQjPkOlNm1234') WHERE source = 'sessions'")
    conn.commit()
    conn.close()
    assert "Zq9aXbYc" in session_rows(sess)[0][5]
    st = p.stat()
    counts = sess.index()
    assert counts["to_index"] == 1
    assert (p.stat().st_size, p.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert "Zq9aXbYc" not in session_rows(sess)[0][5]
    assert parse_extra(files_row(settings, "sessions/creds.jsonl").extra)["text"] >= 2
    assert sess.index()["to_index"] == 0  # converged: once


def test_a_symlinked_agent_directory_is_refused(tmp_path):
    """<state>/agents/ops -> main: the guard looked at agents/ops/sessions only, so ops indexed and
    served main's transcripts, and status said nothing. Transcripts ops had indexed before the link
    are removed, as for a symlinked sessions directory, even where main has a transcript of that name."""
    main, ops = Agent(tmp_path, "main"), Agent(tmp_path, "ops")  # one state dir
    main.write_config({"agents": {"defaults": {"memorySearch": OPT_IN}, "list": [{"id": "main"}, {"id": "ops"}]}})
    main.write("MEMORY.md", "# Memory\n")
    transcript(main, "same.jsonl", msg("user", "main parked the zeppelin at hangar nineteen"))
    transcript(ops, "same.jsonl", msg("user", "ops rotates the pager weekly"))
    ops.index()
    assert session_rows(ops)
    agents = main.state / "agents"
    (agents / "ops").rename(agents / "ops.real")
    (agents / "ops").symlink_to("main")
    assert discover_sessions(ops.settings()) == []
    ops.index()
    assert session_rows(ops) == []
    assert not ops.search("zeppelin")["results"]
    scan = {sc["source"]: sc for sc in source_scan(ops.settings())["sources"]}["sessions"]
    assert any(f"agent directory {agents / 'ops'} is a symlink" in i for i in scan["issues"]), scan
    out = run_cli("--config", str(ops.config_path), "--state-dir", str(ops.state), "--workspace", str(ops.workspace),
                  "--agent", "ops", "status")
    assert "agent directory" in out.stdout and "is a symlink" in out.stdout, out.stdout
