"""The whole path Markdown -> queue -> writer -> store -> search, on the embedded broker."""

import os
import sys

import pytest

from pipeline.indexer import FileJob, prepare_file
from workers import actors


def test_index_and_search_end_to_end(agent):
    agent.write("MEMORY.md", "# Memory\n\nThe user's router is an Omada ER605.\n")
    agent.write("memory/2026-02-10.md", "- Configured VLAN 10 for IoT devices.\n- Rod standup at 14:15.\n")
    counts = agent.index()
    assert counts["to_index"] == 2
    res = agent.search("VLAN IoT")
    assert res["results"], res
    top = res["results"][0]
    assert top["path"] == "memory/2026-02-10.md"
    assert (top["startLine"], top["endLine"]) == (1, 2)
    assert 0.35 <= top["score"] <= 1.0
    assert top["source"] == "memory"
    assert "Source: memory/2026-02-10.md#L1-L2" in top["snippet"]
    assert res["provider"] == "none" and res["mode"] == "fts-only"


def test_fingerprint_recorded(agent):
    agent.write("memory/a.md", "alpha")
    agent.index()
    from pipeline.store import open_reader

    st = open_reader(agent.settings()).state()
    fp = st.live_fingerprint
    assert fp["provider"] == "none" and fp["model"] == "fts-only"
    assert fp["chunkTokens"] == 400 and fp["chunkOverlap"] == 80
    assert fp["sources"] == ["memory"] and fp["schemaVersion"] == 1


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


def test_stale_write_is_dropped(agent):
    p = agent.write("memory/a.md", "first version kumquat\n")
    agent.index()
    st = p.stat()
    job = FileJob("memory", "memory/a.md", str(p), st.st_size, st.st_mtime_ns)
    p.write_text("second version kumquat edited\n")  # wait: we chunk the NEW text below
    prepared = prepare_file(agent.settings(), job)
    p.write_text("third version durian\n")  # the file changes after chunking
    actors.write_files.fn(agent.ctx.as_dict(), 1, [prepared.record])
    texts = [r[5] for r in agent.store_rows()]
    assert texts == ["first version kumquat"]  # the stale write did not land
    from workers import embedded

    embedded.wait_idle(timeout=30)  # the writer asked for a fresh sync
    assert [r[5] for r in agent.store_rows()] == ["third version durian"]


def test_duplicate_messages_leave_no_duplicate_chunks(agent):
    agent.write("memory/a.md", "one\n\ntwo\n")
    agent.index()
    p = agent.workspace / "memory/a.md"
    st = p.stat()
    job = FileJob("memory", "memory/a.md", str(p), st.st_size, st.st_mtime_ns).as_dict()
    for _ in range(3):
        actors.index_files.send(agent.ctx.as_dict(), 1, [job])
    from workers import embedded

    embedded.wait_idle(timeout=30)
    assert len(agent.store_rows()) == 1


def test_bad_files_are_reported_and_the_rest_indexed(agent):
    agent.write("memory/good.md", "pineapple pizza decision\n")
    agent.write("memory/latin1.md", "caf\xe9 au lait".encode("latin-1"))
    agent.write("memory/empty.md", "")
    agent.write("memory/nul.md", b"binary\x00stuff")
    big = agent.write("memory/huge.md", b"")
    with open(big, "wb") as fh:
        fh.write((b"x" * 1023 + b"\n") * (20 * 1024))
    agent.index()
    assert agent.search("pineapple")["results"][0]["path"] == "memory/good.md"
    assert agent.search("lait")["results"][0]["path"] == "memory/latin1.md"
    from pipeline.status import index_status

    status = index_status(agent.settings())
    problems = {p["path"]: p["error"] for p in status["problems"]}
    assert "binary" in problems["memory/nul.md"]
    assert "too large" in problems["memory/huge.md"]
    assert "invalid UTF-8" in problems["memory/latin1.md"]
    assert status["files"] == 5 and status["pending"] == 0
    # A problem file is not retried on every sync (stat unchanged).
    assert agent.index()["to_index"] == 0


def test_first_search_on_never_indexed_agent_says_pending(agent):
    agent.write("memory/a.md", "hello")
    res = agent.search("hello")
    assert res["results"] == [] and res["indexing"] == "pending"


def test_changing_chunk_params_rebuilds_into_a_new_generation(agent):
    agent.write("memory/a.md", "\n".join(f"line {i} mango" for i in range(200)))
    agent.index()
    before = len(agent.store_rows())
    agent.memory_config({"chunking": {"tokens": 100, "overlap": 10}})
    counts = agent.index()
    assert counts["generation"] == 2 and counts["to_index"] == 1
    from pipeline.store import open_reader

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

    from pipeline.store import open_writer

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
