"""Group commit (issue 19): the writer holds one transaction across the write messages already
waiting, and inserts the FTS rows of its new chunks just before the commit. What a held
transaction stores must be exactly what committing every write stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memindex.pipeline.index.records import ChunkRecord, FileRecord
from memindex.pipeline.store import db
from memindex.pipeline.store.reader import StoreReader
from memindex.pipeline.store.writer import StoreWriter

FP = {"provider": "none", "model": "fts-only"}
WORDS = ("apple", "avocado", "banana", "blueberry", "cherry", "cranberry", "damson", "title", "broken")


def rec(path: str, *texts: str) -> FileRecord:
    digest = "h-" + "-".join(texts).encode("utf-8", "replace").decode()  # storable even when a text is not
    return FileRecord("memory", path, f"/x/{path}", digest, 1, 1, "markdown", None,
                      [ChunkRecord(i + 1, i + 1, f"c-{t}", t, None, False, f"Title {path}")
                       for i, t in enumerate(texts)], None)


def rows(path: Path) -> tuple:
    """Everything a search reads: chunks, files rows, and which files each word finds."""
    c = db.connect(path, readonly=True)
    try:
        return (c.execute("SELECT id, source, path, start_line, end_line, hash, text FROM chunks_g1 ORDER BY id").fetchall(),
                c.execute("SELECT source, path, hash, chunks, error FROM files_g1 ORDER BY path").fetchall(),
                {w: sorted(c.execute("SELECT c.path FROM fts_g1 f JOIN chunks_g1 c ON c.rowid = f.rowid "
                                     "WHERE fts_g1 MATCH ?", (w,)).fetchall()) for w in WORDS})
    finally:
        c.close()


def planned(path: Path) -> StoreWriter:
    w = StoreWriter(path, vector_enabled=False)
    w.plan(1, FP, [], [])
    return w


def committed_each(path: Path, steps: list) -> tuple:
    """The rows of ``steps`` applied with a commit per write (no held transaction)."""
    w = planned(path)
    apply(w, steps)
    w.close()
    return rows(path)


def apply(w: StoreWriter, steps: list) -> None:
    for kind, arg in steps:
        if kind == "write":
            w.write_files(1, arg)
        else:
            w.delete_files(1, arg)


# Rewrites of files written earlier in the same held transaction (their FTS rows still wait),
# a file twice in one batch, a delete of a file whose rows wait: each must leave what committing
# every step leaves.
STEPS = [
    ("write", [rec("memory/a.md", "apple one", "apple two"), rec("memory/b.md", "banana")]),
    ("write", [rec("memory/c.md", "cherry")]),
    ("write", [rec("memory/a.md", "avocado"), rec("memory/c.md", "cherry", "citrus"),
               rec("memory/b.md", "blueberry"), rec("memory/c.md", "cranberry")]),
    ("delete", [("memory", "memory/b.md")]),
    ("write", [rec("memory/d.md", "damson")]),
]


def test_a_held_transaction_stores_what_committing_each_write_stores(tmp_path):
    each = committed_each(tmp_path / "each.sqlite", STEPS)
    held = tmp_path / "held.sqlite"
    w = planned(held)
    w.hold()
    apply(w, STEPS[:2])
    assert w.held_since is not None and w.held_rows > 0
    assert rows(held)[0] == []  # a reader sees none of it before the commit
    apply(w, STEPS[2:])
    w.commit()
    assert w.held_since is None and w.held_rows == 0
    try:
        assert rows(held) == each
        chunks, files, fts = each
        assert [f[1] for f in files] == ["memory/a.md", "memory/c.md", "memory/d.md"]
        assert fts["apple"] == fts["banana"] == fts["blueberry"] == fts["cherry"] == []
        assert fts["avocado"] == [("memory/a.md",)] and fts["cranberry"] == [("memory/c.md",)]
        assert fts["damson"] == [("memory/d.md",)]
    finally:
        w.close()
    reader = StoreReader(held, vector_enabled=False)
    assert reader.check_invariant() == {"ok": True, "problems": []}


def test_a_write_that_fails_in_a_held_transaction_takes_back_only_its_own_rows(tmp_path):
    """A record SQLite cannot take (a lone surrogate) fails its batch, which is rolled back to its
    savepoint and written file by file: that file gets its problem row, the files before it in the
    transaction and beside it in the batch are stored with their FTS rows, and no FTS row of a
    rolled-back chunk is inserted at the commit."""
    steps = [("write", [rec("memory/a.md", "apple"), rec("memory/b.md", "banana")]),
             ("write", [rec("memory/c.md", "cherry"), rec("memory/x.md", "broken \ud800 text"),
                        rec("memory/d.md", "damson")])]
    each = committed_each(tmp_path / "each.sqlite", steps)
    held = tmp_path / "held.sqlite"
    w = planned(held)
    w.hold()
    apply(w, steps)
    w.commit()
    w.close()
    assert rows(held) == each
    chunks, files, fts = each
    assert {f[1]: f[4] is not None for f in files} == {"memory/a.md": False, "memory/b.md": False,
                                                     "memory/c.md": False, "memory/d.md": False,
                                                     "memory/x.md": True}
    assert fts["broken"] == [] and fts["cherry"] == [("memory/c.md",)] and fts["damson"] == [("memory/d.md",)]
    assert StoreReader(held, vector_enabled=False).check_invariant() == {"ok": True, "problems": []}


def test_closing_a_writer_commits_what_it_holds(tmp_path):
    path = tmp_path / "s.sqlite"
    w = planned(path)
    w.hold()
    w.write_files(1, [rec("memory/a.md", "apple")])
    w.close()
    assert rows(path)[2]["apple"] == [("memory/a.md",)]


def test_the_embedded_files_thread_never_waits_for_its_own_write_backlog(tmp_path):
    """The embedded broker prepares files and writes on one thread. With one chunk per write
    message, each file group sends ~40 write messages, far over the writer's backlog limit (16):
    had that thread waited for the backlog only it drains, every group would stall for the
    wait's bound (120 s). The index finishes, and every file is searchable when it returns."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    for i in range(40):
        (ws / "memory" / f"note-{i:02d}.md").write_text(
            f"# Note {i}\n\nThe token quixote{i} appears here.\n\nA second paragraph about harbour{i}.\n")
    cfg = tmp_path / "openclaw.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": "none"}}}}))
    env = dict(os.environ, MEMINDEX_EMBED_MSG_CHUNKS="1")
    env.pop("MEMINDEX_BROKER_URL", None)
    base = [sys.executable, "-m", "memindex", "--config", str(cfg), "--state-dir", str(tmp_path / "state"),
            "--workspace", str(ws)]
    started = time.monotonic()
    out = subprocess.run([*base, "index", "-q"], env=env, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    assert took < 100, f"index took {took:.0f} s: the files thread waited for its own write backlog"
    for i in (0, 17, 39):
        hit = subprocess.run([*base, "search", "--json", f"quixote{i}"], env=env, capture_output=True, text=True)
        assert [r["path"] for r in json.loads(hit.stdout)["results"]] == [f"memory/note-{i:02d}.md"], hit.stdout


def test_a_full_disk_fails_the_run_once_with_one_line_and_the_next_sync_writes_everything(agent):
    """SQLITE_FULL (here the connection's max_page_count, as a full disk does it): the held
    writes were rolled back and re-planned, which wrote, failed and re-planned again without end
    (a 400-file index on a full tmpfs logged 1,500 lines in two minutes and never returned). Now
    the run ends, its failure names the files and says what to do, and freeing space is enough."""
    from memindex.pipeline.index.failures import failures_since
    from memindex.producers.cli.failures import run_started
    from memindex.pipeline.errors import DeadLettered
    from memindex.producers.enqueue import sync_and_wait
    from memindex.workers import writer

    agent.write("memory/seed.md", "# Seed\nThe first note.\n")
    agent.index()
    store = str(agent.settings().store_path)
    w = writer.state.opened[store]  # the embedded writer thread's own connection to the store
    pages = w.conn.execute("PRAGMA page_count").fetchone()[0]
    w.conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    for i in range(40):
        agent.write(f"memory/n{i:02d}.md", f"# Note {i}\n" + f"The kestrel {i} nests on tower {i}.\n" * 40)
    since = run_started()
    started = time.monotonic()
    with pytest.raises(DeadLettered, match="its disk is full; free some space"):  # the one line `index` prints
        sync_and_wait(agent.ctx, timeout=120)  # and it returns: no write / roll back / re-plan loop
    assert time.monotonic() - started < 60
    failed = failures_since(store, since)
    (reason,) = [r for r in failed if "disk is full" in r]
    assert "free some space, then `memindex index`" in reason and failed[reason]["count"] >= 1
    assert "free space on the state dir's disk" in failed[reason]["hint"]
    assert len(agent.search("kestrel", max_results=50)["results"]) < 40
    w.conn.execute("PRAGMA max_page_count = 1073741823")  # space freed
    sync_and_wait(agent.ctx, timeout=120)
    assert len(agent.search("kestrel", max_results=50)["results"]) == 40
    assert StoreReader(Path(store)).check_invariant()["ok"]


def test_status_says_when_the_store_s_disk_is_nearly_full(agent, monkeypatch):
    """After a full disk nothing may have been written beside the store to say why files are
    pending: `status` reads the free space itself."""
    from memindex.pipeline import status

    agent.write("memory/a.md", "# A\nThe heron waits.\n")
    agent.index()
    st = status.index_status(agent.settings())
    assert isinstance(st["diskFree"], int) and st["diskFree"] > 0
    assert "disk:" not in status.format_status(st) or st["diskFree"] < status.LOW_DISK_BYTES
    monkeypatch.setattr(status, "LOW_DISK_BYTES", st["diskFree"] + 2**40)  # as if this disk were nearly full
    line = next(ln for ln in status.format_status(st).splitlines() if ln.startswith("disk:"))
    assert f"{st['diskFree']:,} bytes free where the store is" in line and "memindex index" in line


def test_a_writer_killed_holding_acknowledged_writes_is_noticed_by_the_next_one(tmp_path):
    """helper-46: a writer SIGKILLed under group commit loses writes it had acknowledged; the
    files stayed unindexed (and, leased as queued, skipped by every later sync) until someone ran
    `index`. Held writes are marked beside the store; the next writer finds the mark."""
    import subprocess
    import sys

    store = tmp_path / "s.sqlite"
    script = f"""
import os
from memindex.pipeline.store.writer import StoreWriter
w = StoreWriter({str(store)!r}, vector_enabled=False)
w.plan(1, {FP!r}, [], [])
w.commit()
w.hold()
w.plan(1, {FP!r}, [("memory", "memory/a.md")], [])
os._exit(0)  # as SIGKILL: nothing runs at exit
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert (tmp_path / "s.sqlite.held").exists()
    w = StoreWriter(store, vector_enabled=False)
    try:
        assert w.lost_by_crash and not (tmp_path / "s.sqlite.held").exists()
        w.hold()
        assert (tmp_path / "s.sqlite.held").exists()
        w.commit()
        assert not (tmp_path / "s.sqlite.held").exists()
    finally:
        w.close()
    again = StoreWriter(store, vector_enabled=False)
    try:
        assert not again.lost_by_crash  # a clean close leaves no mark
    finally:
        again.close()


def test_the_next_writer_forgets_the_store_s_leases_and_re_plans(agent, caplog):
    from memindex.pipeline.index.records import FileJob
    from memindex.workers import leases, writer
    from memindex.workers.broker import broker

    agent.write("memory/a.md", "alpha\n")
    agent.index()
    writer.close_writers()
    store = agent.settings().store_path
    job = FileJob("memory", "memory/a.md", str(agent.workspace / "memory/a.md"), 6, 1)
    leases.grant(broker, store, 1, [job])
    Path(f"{store}.held").touch()  # what a writer killed while holding writes leaves
    with caplog.at_level("WARNING", logger="memindex.writer"):
        writer._writer(agent.ctx)
    assert any("stopped while holding acknowledged writes" in r.getMessage() for r in caplog.records)
    assert leases.held(broker, store, 1, [job]) == set()
    assert broker.queues["sync"].qsize() >= 1  # the re-plan
    from memindex.workers import embedded

    embedded.start()
    assert embedded.wait_idle(timeout=60)
    writer.close_writers()


def test_a_stale_write_dropped_releases_its_lease(agent):
    """helper-60: a note moved out of memory/ while its write was in flight had that write dropped
    as stale, but its lease was kept; moved back (a move, `cp -p`, a restore keep the mtime), every
    later sync took it for "already queued by another sync" and it was never indexed (17 minutes,
    queues empty), with status saying only "78/80 files"."""
    import os

    from memindex.pipeline.index.preparers import prepare_file
    from memindex.pipeline.index.records import FileJob
    from memindex.workers import leases, writer
    from memindex.workers.broker import broker

    agent.write("memory/a.md", "alpha\n")
    agent.index()
    settings = agent.settings()
    path = agent.write("memory/b.md", "bravo note\n")
    st = path.stat()
    job = FileJob("memory", "memory/b.md", str(path), st.st_size, st.st_mtime_ns)
    from memindex.pipeline.config.settings import pinned
    from memindex.pipeline.store.reader import open_reader

    reader = open_reader(settings)
    try:
        gen = reader.state().live_generation
    finally:
        reader.close()
    leases.grant(broker, settings.store_path, gen, [job])
    record = prepare_file(settings, job).record
    moved = agent.root / "b.md"
    os.rename(path, moved)  # out of memory/ while the write is in flight: the write is stale
    writer._write_files(pinned(settings), gen, [record])
    assert leases.held(broker, settings.store_path, gen, [job]) == set()
    os.rename(moved, path)  # back, at the same size and mtime
    agent.index()
    assert [r["path"] for r in agent.search("bravo")["results"]] == ["memory/b.md"]
