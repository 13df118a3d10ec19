"""The whole path Markdown -> queue -> writer -> store -> search, on the embedded broker."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from memindex.pipeline.index.preparers import prepare_file
from memindex.pipeline.index.records import FileJob
from memindex.workers import actors, wire


def test_index_and_search_end_to_end(agent):
    agent.write("MEMORY.md", "# Memory\n\nThe user's router is an Omada ER605.\n")
    agent.write("memory/2026-02-10.md", "- Configured VLAN 10 for IoT devices.\n- Rod standup at 14:15.\n")
    counts = agent.index()
    assert counts["to_index"] == 2
    res = agent.search("VLAN IoT")
    assert res["results"], res
    top = res["results"][0]
    assert top["path"] == "memory/2026-02-10.md"
    assert (top["startLine"], top["endLine"]) == (1, 3)  # OpenClaw's: the empty line after the last newline
    assert 0.35 <= top["score"] <= 1.0
    assert top["source"] == "memory"
    assert "Source: memory/2026-02-10.md#L1-L3" in top["snippet"]  # cited to endLine, as OpenClaw cites
    assert res["provider"] == "none" and res["mode"] == "fts-only"


def test_fingerprint_recorded(agent):
    agent.write("memory/a.md", "alpha")
    agent.index()
    from memindex.pipeline.store.reader import open_reader

    st = open_reader(agent.settings()).state()
    fp = st.live_fingerprint
    assert fp["provider"] == "none" and fp["model"] == "fts-only"
    assert fp["chunkTokens"] == 400 and fp["chunkOverlap"] == 80
    from memindex.pipeline.store.schema import SCHEMA_VERSION

    assert fp["sources"] == ["memory"] and fp["schemaVersion"] == SCHEMA_VERSION


def test_unchanged_reindex_reads_no_file_contents(agent):
    for i in range(20):
        agent.write(f"memory/2026-01-{i + 1:02d}.md", f"note {i}\n")
    agent.index()
    opened: list[str] = []
    ws = str(agent.workspace)

    def hook(event, args):
        if event == "open" and isinstance(args[0], str) and args[0].startswith(ws):
            opened.append(args[0])

    sys.addaudithook(hook)
    counts = agent.index()
    ws = "\0disabled"  # audit hooks can't be removed; neuter this one
    assert counts == {"generation": 1, "to_index": 0, "to_delete": 0, "unchanged": 20}
    assert opened == []


def test_edit_rename_delete_are_reflected(agent):
    agent.write("memory/a.md", "the quick brown fox\n")
    agent.write("memory/b.md", "lorem ipsum dolor\n")
    agent.index()
    assert agent.search("fox")["results"][0]["path"] == "memory/a.md"
    agent.write("memory/a.md", "the slow green turtle\n")
    os.rename(agent.workspace / "memory/b.md", agent.workspace / "memory/c.md")
    agent.index()
    assert agent.search("fox")["results"] == []
    assert agent.search("turtle")["results"][0]["path"] == "memory/a.md"
    assert [r["path"] for r in agent.search("lorem")["results"]] == ["memory/c.md"]
    (agent.workspace / "memory/c.md").unlink()
    counts = agent.index()
    assert counts["to_delete"] == 1
    assert agent.search("lorem")["results"] == []
    assert {r[1] for r in agent.store_rows()} == {"memory/a.md"}


def test_a_write_of_a_file_changed_since_lands_as_read_then_the_change_is_indexed(agent):
    """A record of a file that changed after it was read is written as read (it used to be dropped
    and re-planned: a note appended to all the time was never indexed), then one re-plan indexes
    the change. One that an older read would overwrite, or of a file gone, is dropped."""
    p = agent.write("memory/a.md", "first version kumquat\n")
    agent.index()
    st = p.stat()
    job = FileJob("memory", "memory/a.md", str(p), st.st_size, st.st_mtime_ns)
    p.write_text("second version kumquat edited\n")  # wait: we chunk the NEW text below
    prepared = prepare_file(agent.settings(), job)
    old = wire.decode(wire.WriteFiles, wire.encode(wire.WriteFiles(agent.ctx, 1, [prepared.record]))).records[0]
    time.sleep(0.01)
    p.write_text("third version durian\n")  # the file changes after chunking
    actors.write_files(wire.WriteFiles(agent.ctx, 1, [prepared.record]))
    from memindex.workers import writer

    writer.settle()  # (the group commit a message's end would do)
    assert [r[5] for r in agent.store_rows()] == ["second version kumquat edited\n"]  # as read
    from memindex.workers import embedded

    embedded.wait_idle(timeout=30)  # the writer asked for a fresh sync
    assert [r[5] for r in agent.store_rows()] == ["third version durian\n"]
    actors.write_files(wire.WriteFiles(agent.ctx, 1, [old]))  # an older read, late: dropped
    embedded.wait_idle(timeout=30)
    assert [r[5] for r in agent.store_rows()] == ["third version durian\n"]
    p.unlink()
    actors.write_files(wire.WriteFiles(agent.ctx, 1, [old]))  # the file is gone: dropped, re-planned
    embedded.wait_idle(timeout=30)
    assert agent.store_rows() == []


def test_duplicate_messages_leave_no_duplicate_chunks(agent):
    agent.write("memory/a.md", "one\n\ntwo\n")
    agent.index()
    p = agent.workspace / "memory/a.md"
    st = p.stat()
    job = FileJob("memory", "memory/a.md", str(p), st.st_size, st.st_mtime_ns)
    for _ in range(3):
        wire.send(wire.IndexFiles(agent.ctx, 1, [job]))
    from memindex.workers import embedded

    embedded.wait_idle(timeout=30)
    assert len(agent.store_rows()) == 1


def test_bad_files_are_reported_and_the_rest_indexed(agent):
    agent.write("memory/good.md", "pineapple pizza decision\n")
    agent.write("memory/latin1.md", "caf\xe9 au lait".encode("latin-1"))
    agent.write("memory/empty.md", "")
    agent.write("memory/nul.md", "binary\x00stuff".encode("utf-16-le"))  # UTF-16: every other byte NUL
    agent.write("memory/stray.md", b"# note\nthe quokka plan\x00 stays\n")
    big = agent.write("memory/huge.md", b"")
    with open(big, "wb") as fh:
        fh.write((b"x" * 1023 + b"\n") * (20 * 1024))
    agent.index()
    assert agent.search("pineapple")["results"][0]["path"] == "memory/good.md"
    assert agent.search("lait")["results"][0]["path"] == "memory/latin1.md"
    from memindex.pipeline.status import index_status

    status = index_status(agent.settings())
    problems = {p["path"]: p["error"] for p in status["problems"]}
    assert "binary" in problems["memory/nul.md"]
    assert "too large" in problems["memory/huge.md"]
    assert "invalid UTF-8" in problems["memory/latin1.md"]
    # One stray NUL does not make a note binary (OpenClaw indexes it): indexed, the NUL shown as
    # U+FFFD in the snippet and in memory_get alike, and reported.
    assert problems["memory/stray.md"] == "1 NUL byte replaced with U+FFFD"
    (hit,) = agent.search("quokka")["results"]
    assert hit["path"] == "memory/stray.md" and "plan\ufffd stays" in hit["snippet"]
    from memindex.pipeline.search.get import memory_get

    assert memory_get(agent.settings(), "memory/stray.md", 2, 1).text == "the quokka plan\ufffd stays"
    assert status["files"] == 6 and status["pending"] == 0
    assert status["skipped"] == 2  # nul.md and huge.md: listed, nothing indexed (latin1.md is, with a problem)
    # A problem file is not retried on every sync (stat unchanged).
    assert agent.index()["to_index"] == 0


def test_first_search_on_never_indexed_agent_says_pending_or_what_to_run(agent):
    from memindex.pipeline.search.engine import MemorySearch

    agent.write("memory/a.md", "hello")
    # Nothing builds the index (the CLI, a library caller without a scheduler): say what to run.
    res = agent.search("hello")
    assert res["results"] == [] and "indexing" not in res
    assert "no index yet" in res["warning"] and "memindex index" in res["warning"]
    # An engine that schedules syncs (the servers, a runtime) asked for one: it is pending.
    asked = []
    eng = MemorySearch(agent.settings(), schedule_sync=lambda settings, reason: asked.append(reason))
    try:
        res = eng.search("hello").as_dict()
    finally:
        eng.close()
    assert res["results"] == [] and res["indexing"] == "pending" and "being built" in res["warning"]


def test_an_agent_whose_workspace_is_missing_is_not_being_built_forever(agent, tmp_path):
    """MCP answered an agent with a missing workspace "the memory index is being built; results
    will appear shortly" on every call while each scheduled sync failed for good; memory_status
    had no word of it (found by a user trial)."""
    import shutil

    from memindex.pipeline.search.engine import MemorySearch
    from memindex.pipeline.status import index_status

    shutil.rmtree(agent.workspace)
    eng = MemorySearch(agent.settings(), schedule_sync=lambda settings, reason: None)
    try:
        res = eng.search("hello").as_dict()
    finally:
        eng.close()
    assert res["results"] == [] and "indexing" not in res, res
    assert f"workspace {agent.workspace} does not exist" in res["warning"], res
    assert "does not exist" in index_status(agent.settings())["indexRefused"]


def test_changing_chunk_params_rebuilds_into_a_new_generation(agent):
    agent.write("memory/a.md", "\n".join(f"line {i} mango" for i in range(200)))
    agent.index()
    before = len(agent.store_rows())
    agent.memory_config({"chunking": {"tokens": 100, "overlap": 10}})
    counts = agent.index()
    assert counts["generation"] == 2 and counts["to_index"] == 1
    from memindex.pipeline.store.reader import open_reader

    r = open_reader(agent.settings())
    st = r.state()
    assert st.live_generation == 2 and st.building_generation is None
    assert st.live_fingerprint["chunkTokens"] == 100
    assert not r.table_exists("chunks_g1")  # the old generation is gone
    assert len(agent.store_rows()) > before
    # A restart with the same config does not rebuild.
    assert agent.index()["generation"] == 2


def test_redelivered_old_plan_is_ignored(agent):
    """A write_plan redelivered after a crash must not resurrect an old pending set."""
    import time as _time

    from memindex.pipeline.store.writer import open_writer

    agent.write("memory/a.md", "apple\n")
    agent.index()
    w = open_writer(agent.settings())
    try:
        fp = w.state().live_fingerprint
        old = _time.time_ns()
        assert w.plan(1, fp, [], [], planned_at=old + 10) == "live"
        assert w.plan(1, fp, [("memory", "memory/a.md")], [], planned_at=old) == "stale"
        pending = w.conn.execute("SELECT count(*) FROM pending_g1").fetchone()[0]
        assert pending == 0
    finally:
        w.close()


def test_records_round_trip_through_their_queue_message():
    import json

    from memindex.pipeline.index.fingerprint import EmbeddingIdentity
    from memindex.pipeline.index.records import ChunkRecord, FileRecord, SessionDelta, TouchRecord
    from memindex.pipeline.store.vectors import pack

    rec = FileRecord("sessions", "sessions/t.jsonl", "/s/t.jsonl", "h", 3, 4, "session", None,
                     [ChunkRecord(1, 2, "c", "text", [0.5, -1.0], cacheable=False), ChunkRecord(3, 3, "d", "more")],
                     EmbeddingIdentity("p", "m", "k", 2), ["c"], {"turns": 1}, "b")
    from memindex.pipeline.config.settings import Context
    from memindex.workers import wire

    ctx = Context("main", "/c.json", "/state", "/ws")
    args = json.loads(json.dumps(wire.encode(wire.WriteFiles(ctx, 7, [rec]))))  # JSON-safe, as dramatiq sends it
    assert isinstance(args[2][0]["chunks"][0]["embedding"], str)  # base64 only on the wire
    back = wire.decode(wire.WriteFiles, args).records[0]
    assert back.chunks[0].embedding == pack([0.5, -1.0])  # packed float32, as the store keeps it
    back.chunks[0].embedding = [0.5, -1.0]
    assert back == rec
    job = FileJob("memory", "a.md", "/w/a.md", 1, 2, "image", "h")
    touch = TouchRecord("memory", "a.md", "h", 1, 2)
    delta = SessionDelta("sessions", "sessions/t.jsonl", "/s/t.jsonl", 10, 3, "h", {"turns": 1})
    for payload in (wire.IndexFiles(ctx, 1, [job], 384), wire.WriteTouch(ctx, 1, [touch]),
                    wire.IndexSessionDelta(ctx, 1, delta)):
        assert wire.decode(type(payload), json.loads(json.dumps(wire.encode(payload)))) == payload


def test_the_store_takes_vectors_as_floats_or_packed_bytes(tmp_path):
    from memindex.pipeline.index.fingerprint import EmbeddingIdentity
    from memindex.pipeline.index.records import ChunkRecord, FileRecord
    from memindex.pipeline.store.writer import StoreWriter
    from memindex.pipeline.store.vectors import pack

    w = StoreWriter(tmp_path / "s.sqlite")
    try:
        w.plan(1, {"provider": "p", "model": "m", "providerKey": "k"}, [], [])
        ident = EmbeddingIdentity("p", "m", "k", 2)
        floats = FileRecord("memory", "a.md", "/w/a.md", "h", 1, 1,
                            chunks=[ChunkRecord(1, 1, "c1", "one", [0.6, 0.8])], embedding=ident)
        packed = FileRecord("memory", "b.md", "/w/b.md", "h", 1, 1,
                            chunks=[ChunkRecord(1, 1, "c2", "two", pack([0.6, 0.8]))], embedding=ident)
        assert w.write_files(1, [floats, packed]) == (2, [])
        blobs = [b for (b,) in w.conn.execute("SELECT embedding FROM chunks_g1 ORDER BY path")]
        assert blobs == [pack([0.6, 0.8])] * 2
    finally:
        w.close()


def test_an_indexed_files_row_says_what_its_error_and_hash_codes_mean(tmp_path):
    """The planner asks the row (reader.IndexedFile), decoded in its SELECT, not the codes again:
    vectors still to come (and of those, already queued), a file recorded unreadable (an errno only)."""
    from memindex.pipeline.store import db
    from memindex.pipeline.store.reader import read_indexed_files
    from memindex.pipeline.store.schema import EMBED_PENDING, READ_ERROR, VECTORS_QUEUED, generation_ddl

    rows = {  # path: (hash, error) -> (vectors_pending, vectors_queued, unreadable)
        "a": (("h", None), (False, False, False)),
        "b": (("h", f"{EMBED_PENDING} (provider down)"), (True, False, False)),
        "c": (("h", VECTORS_QUEUED), (True, True, False)),
        "d": (("h", "Embedding pending"), (False, False, False)),
        "e": ((f"{READ_ERROR}13", "unreadable: Permission denied"), (False, False, True)),
        "f": ((f"{READ_ERROR}PermissionError", "could not prepare"), (False, False, False)),
        "g": ((READ_ERROR, None), (False, False, False)),
        "h": ((f"{READ_ERROR}13x", None), (False, False, False)),
    }
    conn = db.connect(tmp_path / "s.sqlite")
    try:
        db.run_script(conn, generation_ddl(1))
        conn.executemany("INSERT INTO files_g1 (source, path, hash, size, mtime_ns, error, indexed_at) "
                         "VALUES ('memory', ?, ?, 1, 1, ?, 0)", [(p, *row) for p, (row, _) in rows.items()])
        got = read_indexed_files(conn, 1)
    finally:
        conn.close()
    assert {k[1]: (bool(f.vectors_pending), bool(f.vectors_queued), bool(f.unreadable)) for k, f in got.items()} \
        == {p: want for p, (_, want) in rows.items()}


# --- the no-change mark (the no-change mark in index/indexer.py) -----------------------------------------

def _mark_path(agent):
    from memindex.pipeline.index.indexer import mark_path

    return mark_path(agent.settings().store_path)


def _unchanged(n: int) -> dict:
    return {"generation": 1, "to_index": 0, "to_delete": 0, "unchanged": n}


def test_a_sync_that_finds_nothing_leaves_a_mark_the_next_one_trusts(agent):
    agent.write("memory/a.md", "alpha kumquat\n")
    agent.write("memory/b.md", "beta\n")
    assert agent.index()["to_index"] == 2
    assert not _mark_path(agent).exists()  # that sync had work: nothing to vouch for
    assert agent.index() == _unchanged(2)
    mark = json.loads(_mark_path(agent).read_text())
    assert set(mark) == {"store", "disk", "files"} and mark["files"] == 2  # digests only, no paths or settings
    assert agent.index() == _unchanged(2)
    assert json.loads(_mark_path(agent).read_text()) == mark


def test_the_mark_never_hides_an_edit_a_new_file_or_a_delete(agent):
    a = agent.write("memory/a.md", "alpha kumquat\n")
    agent.write("memory/b.md", "beta\n")
    agent.index()
    agent.index()
    assert _mark_path(agent).exists()
    st = a.stat()
    a.write_text("alpha quincee\n", encoding="utf-8")  # same size
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert agent.index()["to_index"] == 1
    assert agent.search("quincee")["results"] and not agent.search("kumquat")["results"]
    assert agent.index() == _unchanged(2)
    agent.write("memory/c.md", "gamma\n")
    assert agent.index()["to_index"] == 1
    assert agent.index() == _unchanged(3)
    (agent.workspace / "memory/b.md").unlink()
    assert agent.index()["to_delete"] == 1
    assert agent.index() == _unchanged(2)


def test_any_change_to_the_stores_file_rows_voids_the_mark(agent):
    """The store side of the mark is a version its triggers bump on every file-row write: a row
    changed by any path (here SQL from outside) is compared again, not trusted."""
    agent.write("memory/a.md", "alpha kumquat\n")
    agent.write("memory/b.md", "beta\n")
    agent.index()
    agent.index()
    assert _mark_path(agent).exists()
    from memindex.pipeline.store import db  # the store's own SQLite: two copies in one process clash

    def sql(stmt):
        conn = db.connect(agent.settings().store_path)
        try:
            conn.execute(stmt)
        finally:
            conn.close()

    sql("UPDATE files_g1 SET size = size + 1 WHERE path = 'memory/a.md'")
    assert agent.index()["to_index"] == 1
    assert agent.index() == _unchanged(2)
    sql("DELETE FROM files_g1 WHERE path = 'memory/b.md'")
    assert agent.index()["to_index"] == 1


def test_force_and_a_rebuilt_store_ignore_the_mark(agent):
    agent.write("memory/a.md", "alpha\n")
    agent.write("memory/b.md", "beta\n")
    agent.index()
    agent.index()
    assert _mark_path(agent).exists()
    assert agent.index(force=True)["to_index"] == 2
    store = agent.settings().store_path
    from memindex.pipeline.store.reader import open_reader
    from memindex.pipeline.store.schema import STORE_ID_KEY

    def store_id():
        r = open_reader(agent.settings())
        try:
            return r.state().extra[STORE_ID_KEY]
        finally:
            r.close()

    first = store_id()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store}{suffix}").unlink(missing_ok=True)
    assert agent.index()["to_index"] == 2  # a new store, whatever the old mark says
    assert store_id() != first
    assert agent.index() == _unchanged(2)


@pytest.mark.parametrize("actor", ["index_files", "index_session_delta", "write_deletes"])
def test_work_for_an_agent_removed_from_the_config_fails_once_at_once(tmp_path, caplog, actor):
    """Agent `late` was removed from openclaw.json while its work was queued: index_files failed
    with "unknown agent 'late'" 9 times over ~2.5 minutes (retried), then the reporter logged
    "could not record the failure" (it looked for the agent's store through its settings)."""
    import logging
    import time

    from memindex.pipeline.config.agents import settings_for
    from memindex.pipeline.config.settings import Context, pinned
    from memindex.workers import embedded
    from tests.conftest import Agent

    a = Agent(tmp_path)
    late_ws = tmp_path / "late-ws"
    (late_ws / "memory").mkdir(parents=True)
    (late_ws / "memory" / "a.md").write_text("papaya notes\n")
    main = {"id": "main", "default": True, "workspace": str(a.workspace)}
    a.write_config({"agents": {"list": [main, {"id": "late", "workspace": str(late_ws)}]}})
    from memindex.pipeline.index.records import SessionDelta
    from memindex.workers import wire

    ctx = pinned(settings_for(Context("late", str(a.config_path), str(a.state))))
    a.write_config({"agents": {"list": [main]}})  # removed while its work is queued
    payload = {"index_files": wire.IndexFiles(ctx, 1, [FileJob("memory", "memory/a.md", "/x/a.md", 1, 1)]),
               "index_session_delta": wire.IndexSessionDelta(ctx, 1, SessionDelta("sessions", "s.jsonl", "/x/s.jsonl",
                                                                                  0, 1, "h", {})),
               "write_deletes": wire.WriteDeletes(ctx, 1, [("memory", "memory/a.md")])}[actor]
    embedded.start()
    caplog.set_level(logging.INFO)
    t0 = time.monotonic()
    sent = wire.send(payload)
    assert embedded.wait_idle(timeout=30), "still retrying after 30 s"
    assert time.monotonic() - t0 < 30
    (dead,) = [m for m in embedded.dead_letters() if m.message_id == sent.message_id]
    assert dead.options.get("retries", 0) == 0  # failed for good at its first attempt
    assert "could not record the failure" not in caplog.text
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING and "late" in r.getMessage()
             and r.name.startswith("memindex")]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING, [r.getMessage() for r in lines]
    assert "no longer configured" in lines[0].getMessage() and actor in lines[0].getMessage()


def test_status_counts_a_rebuilds_files_still_to_write(agent):
    """During a rebuild `pending` (the live generation's) read 0 while the rebuild's files waited."""
    from memindex.pipeline.status import format_status, index_status
    from memindex.pipeline.store.writer import open_writer

    agent.write("memory/a.md", "alpha\n")
    agent.write("memory/b.md", "beta\n")
    agent.index()
    st = index_status(agent.settings())
    w = open_writer(agent.settings())
    try:  # what a sync does first when the config changed: plan generation 2 beside the live one
        fp = dict(st["fingerprint"], chunkTokens=100)
        assert w.plan(2, fp, [("memory", "memory/a.md"), ("memory", "memory/b.md")], []) == "building"
    finally:
        w.close()
    st = index_status(agent.settings())
    assert st["rebuilding"]["generation"] == 2 and st["rebuilding"]["pending"] == 2, st["rebuilding"]
    assert "rebuilding:   generation 2 in progress, 2 file(s) still to write" in format_status(st)


def test_a_plan_keeps_pending_what_an_earlier_plan_queued_and_is_not_written_yet(tmp_path):
    """``keep`` (workers/leases.py): files an earlier plan queued and this one did not queue
    again stay pending, unless their write came first (then they are not pending again)."""
    from memindex.pipeline.index.records import ChunkRecord, FileRecord
    from memindex.pipeline.store.writer import StoreWriter

    w = StoreWriter(tmp_path / "s.sqlite", vector_enabled=False)
    fp = {"provider": "none", "model": "fts-only", "providerKey": "none:fts-only"}
    keys = [("memory", f"memory/{x}.md") for x in "abc"]
    try:
        w.plan(1, fp, keys, [])
        w.write_files(1, [FileRecord("memory", "memory/a.md", "/w/memory/a.md", "h", 1, 1,
                                     chunks=[ChunkRecord(1, 1, "c1", "one", None)])])
        assert w.plan(1, fp, [("memory", "memory/d.md")], [], keep=keys) == "live"
        rows = {p for (p,) in w.conn.execute("SELECT path FROM pending_g1")}
        assert rows == {"memory/b.md", "memory/c.md", "memory/d.md"}  # a was written: not pending again
        w.plan(1, fp, [], [])  # a plan that keeps nothing replaces the set, as before
        assert not w.conn.execute("SELECT count(*) FROM pending_g1").fetchone()[0]
    finally:
        w.close()


def test_leases_on_the_embedded_broker_match_size_and_mtime_and_are_released():
    """What a plan skips as queued elsewhere (workers/leases.py), on the in-process broker."""
    from dramatiq.brokers.stub import StubBroker

    from memindex.pipeline.index.records import FileJob
    from memindex.workers import leases

    broker = StubBroker()
    a, b = (FileJob("memory", f"memory/{x}.md", f"/w/memory/{x}.md", 10, 111) for x in "ab")
    leases.grant(broker, "/s/main.sqlite", 1, [a, b])
    assert leases.held(broker, "/s/main.sqlite", 1, [a, b]) == {("memory", "memory/a.md"), ("memory", "memory/b.md")}
    edited = FileJob("memory", "memory/a.md", "/w/memory/a.md", 10, 222)  # other mtime: queued again
    assert leases.held(broker, "/s/main.sqlite", 1, [edited]) == set()
    assert leases.held(broker, "/s/main.sqlite", 2, [a]) == set()  # another generation (a rebuild)
    assert leases.held(broker, "/s/other.sqlite", 1, [a]) == set()  # another store
    leases.release(broker, "/s/main.sqlite", 1, [("memory", "memory/a.md")])
    assert leases.held(broker, "/s/main.sqlite", 1, [a, b]) == {("memory", "memory/b.md")}
    leases.forget_all(broker)
    assert leases.held(broker, "/s/main.sqlite", 1, [a, b]) == set()


def test_writes_dropped_for_a_generation_that_is_gone_end_their_leases(agent):
    """helper-54: after a full disk, writes dropped because their generation no longer existed
    kept their files leased: every later sync of a running watch skipped them as "already queued
    by another sync" for 6 h, and they stayed unindexed. Dropped, their leases end."""
    from memindex.pipeline.index.records import FileJob, FileRecord
    from memindex.workers import embedded, leases
    from memindex.workers.broker import get_broker
    from memindex.workers.writer import _write_files

    broker = get_broker()

    note = agent.write("memory/a.md", "# A\nkumquat\n")
    agent.index()
    st = note.stat()
    job = FileJob("memory", "memory/a.md", str(note), st.st_size, st.st_mtime_ns)
    store = str(agent.settings().store_path)
    embedded.start()
    leases.grant(broker, store, 99, [job])
    assert leases.held(broker, store, 99, [job]) == {("memory", "memory/a.md")}
    rec = FileRecord("memory", "memory/a.md", str(note), "h", st.st_size, st.st_mtime_ns)
    from memindex.pipeline.config.settings import pinned

    _write_files(pinned(agent.settings()), 99, [rec])
    assert leases.held(broker, store, 99, [job]) == set()


def test_a_failed_message_ends_its_leases_even_when_its_failure_cannot_be_recorded(agent):
    """helper-54: on a full disk the failure record beside the store could not be written, the
    exception skipped the lease release, and a running watch skipped those files for 6 h."""
    import dramatiq

    from memindex.pipeline.config.settings import pinned
    from memindex.pipeline.index.records import FileJob
    from memindex.workers import embedded, leases
    from memindex.workers.broker import get_broker
    from memindex.workers.failures import FailureReporter

    broker = get_broker()

    note = agent.write("memory/a.md", "# A\nkumquat\n")
    agent.index()
    settings = agent.settings()
    st = note.stat()
    job = FileJob("memory", "memory/a.md", str(note), st.st_size, st.st_mtime_ns)
    embedded.start()
    leases.grant(broker, str(settings.store_path), 1, [job])
    os.mkdir(f"{settings.store_path}.failures.json")  # the record cannot be written (as on a full disk)
    message = dramatiq.Message(queue_name="write", actor_name="write_files", kwargs={}, options={},
                               args=(pinned(settings).as_dict(), 1, [{"source": "memory", "path": "memory/a.md"}]))
    with pytest.raises(OSError):
        FailureReporter()._record(broker, message, "disk full")
    assert leases.held(broker, str(settings.store_path), 1, [job]) == set()


def test_a_note_appended_to_all_the_time_is_indexed_and_index_returns(agent, monkeypatch):
    """helper-43: an agent appending a line a second to today's note. Each pass read and embedded
    the note, the writer dropped it as stale (the file had grown) and re-planned it: `index` never
    returned and the note was never searchable, not even by keyword."""
    import threading

    from memindex.pipeline.embeddings.embedder import reset_services

    p = agent.write("memory/2026-12-02.md", "".join(f"entry {i} livetok{i} router garden\n" for i in range(300)))
    agent.memory_config({"provider": "hash"})
    monkeypatch.setenv("MEMINDEX_HASH_EMBED_DELAY", "0.3")  # each embedding request outlasts an append
    reset_services()
    stop = threading.Event()

    def append() -> None:
        i = 0
        while not stop.wait(0.05):
            with open(p, "a", encoding="utf-8") as fh:
                fh.write(f"appended {i}\n")
            i += 1

    t = threading.Thread(target=append, daemon=True)
    t.start()
    try:
        started = time.monotonic()
        counts = agent.index()  # (its own bound: 120 s)
        took = time.monotonic() - started
    finally:
        stop.set()
        t.join()
    assert counts["to_index"] == 1 and took < 60, (counts, took)
    assert [r["path"] for r in agent.search("livetok5")["results"]] == ["memory/2026-12-02.md"]
