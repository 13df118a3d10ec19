"""The FTS5 layout of issue 19: contentless, still deleting by rowid, and old stores rebuilt."""

from __future__ import annotations

import json

import sqlean as sqlite3

from memindex.pipeline.store.reader import open_reader
from memindex.pipeline.store.schema import FTS_AUTOMERGE, META_KEY, SCHEMA_VERSION, fts_ddl


def _fts_sql(agent) -> tuple[int, str]:
    st = open_reader(agent.settings()).state()
    gen = st.live_generation
    con = sqlite3.connect(str(agent.settings().store_path))
    try:
        sql = con.execute("SELECT sql FROM sqlite_master WHERE name = ?", (f"fts_g{gen}",)).fetchone()[0]
    finally:
        con.close()
    return gen, sql


def test_fts_table_is_contentless_and_edits_leave_no_stale_terms(agent):
    agent.write("memory/a.md", "the quokka sleeps under the jacaranda tree\n")
    agent.write("memory/b.md", "an unrelated note about lanterns\n")
    agent.index()
    _, sql = _fts_sql(agent)
    assert "content=''" in sql and "contentless_delete=1" in sql
    assert agent.search("quokka")["results"][0]["path"] == "memory/a.md"
    agent.write("memory/a.md", "now it is about a wombat instead\n")
    agent.index()
    assert agent.search("quokka", min_score=0)["results"] == []  # the old chunk's terms were deleted
    assert agent.search("wombat")["results"][0]["path"] == "memory/a.md"
    (agent.workspace / "memory" / "b.md").unlink()
    agent.index()
    assert agent.search("lanterns", min_score=0)["results"] == []
    reader = open_reader(agent.settings())
    try:
        health = reader.check_invariant()
    finally:
        reader.close()
    assert health["ok"], health["problems"]


def test_fts_merges_segments_in_eights_in_new_and_existing_stores(agent):
    # Fewer merge passes during a cold index (issue 19); set on every writer open, so a store
    # built before the setting gets it at its next write.
    agent.write("memory/a.md", "the quokka sleeps\n")
    agent.index()
    gen, _ = _fts_sql(agent)
    path = str(agent.settings().store_path)

    def automerge() -> int | None:
        con = sqlite3.connect(path)
        try:
            row = con.execute(f"SELECT v FROM fts_g{gen}_config WHERE k = 'automerge'").fetchone()
        finally:
            con.close()
        return None if row is None else int(row[0])

    assert FTS_AUTOMERGE == 8 and automerge() == 8
    con = sqlite3.connect(path)
    con.execute(f"DELETE FROM fts_g{gen}_config WHERE k = 'automerge'")  # as an older store has it
    con.commit()
    con.close()
    assert automerge() is None
    agent.write("memory/b.md", "a wombat note\n")
    agent.index()
    assert automerge() == 8
    assert agent.search("wombat")["results"][0]["path"] == "memory/b.md"


def test_store_with_the_old_fts_layout_is_rebuilt_on_next_sync(agent):
    agent.write("memory/a.md", "the quokka sleeps under the jacaranda tree\n")
    agent.index()
    gen, _ = _fts_sql(agent)
    # Turn the store into what schema version 1 wrote: an FTS table holding its own text.
    con = sqlite3.connect(str(agent.settings().store_path), isolation_level=None)
    con.execute(f"DROP TABLE fts_g{gen}")
    con.execute(fts_ddl(gen, contentless=False))
    con.execute(f"INSERT INTO fts_g{gen}(rowid, text) SELECT rowid, text FROM chunks_g{gen}")
    meta = json.loads(con.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()[0])
    meta["fingerprint"]["schemaVersion"] = 1
    con.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps(meta), META_KEY))
    con.close()
    _, old_sql = _fts_sql(agent)
    assert "content=''" not in old_sql
    assert agent.search("quokka")["results"]  # the old layout still answers

    agent.index()
    new_gen, sql = _fts_sql(agent)
    assert new_gen != gen and "content=''" in sql
    assert open_reader(agent.settings()).state().live_fingerprint["schemaVersion"] == SCHEMA_VERSION
    con = sqlite3.connect(str(agent.settings().store_path))
    try:
        left = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE name GLOB '*_g*'")}
    finally:
        con.close()
    assert not any(name.endswith(f"_g{gen}") for name in left), left  # the old generation is gone
    assert agent.search("quokka")["results"][0]["path"] == "memory/a.md"


def test_a_batch_write_stores_what_file_by_file_writes_store(agent, tmp_path):
    """write_files takes a batch in a few statements (issue 19); the rows must be those of
    writing each file alone: replaced chunks gone, a file twice in a batch written once
    (the last record), FTS and files rows in step."""

    from memindex.pipeline.index.records import ChunkRecord, FileRecord
    from memindex.pipeline.store import db
    from memindex.pipeline.store.writer import StoreWriter

    def rec(path: str, *texts: str) -> FileRecord:
        return FileRecord("memory", path, f"/x/{path}", "h-" + "-".join(texts), 1, 1, "markdown", None,
                          [ChunkRecord(i + 1, i + 1, f"c-{t}", t, None, False, f"Title {path}")
                           for i, t in enumerate(texts)], None)

    first = [rec("memory/a.md", "apple one", "apple two"), rec("memory/b.md", "banana")]
    second = [rec("memory/a.md", "avocado"), rec("memory/c.md", "cherry", "citrus"),
              rec("memory/b.md", "blueberry"), rec("memory/c.md", "cranberry")]
    fp = {"provider": "none", "model": "fts-only"}

    def build(path, batches, one_by_one: bool):
        w = StoreWriter(path, vector_enabled=False)
        try:
            w.plan(1, fp, [], [])
            for batch in batches:
                for part in ([[r] for r in batch] if one_by_one else [batch]):
                    w.write_files(1, part)
        finally:
            w.close()
        c = db.connect(path, readonly=True)
        try:
            return (c.execute("SELECT id, source, path, start_line, end_line, hash, text FROM chunks_g1 "
                              "ORDER BY id").fetchall(),
                    c.execute("SELECT source, path, hash, chunks, error FROM files_g1 ORDER BY path").fetchall(),
                    {w: sorted(c.execute("SELECT c.path FROM fts_g1 f JOIN chunks_g1 c ON c.rowid = f.rowid "
                                         "WHERE fts_g1 MATCH ?", (w,)).fetchall())
                     for w in ("apple", "avocado", "banana", "blueberry", "cherry", "cranberry", "title")})
        finally:
            c.close()

    batched = build(tmp_path / "batched.sqlite", [first, second], one_by_one=False)
    single = build(tmp_path / "single.sqlite", [first, second], one_by_one=True)
    assert batched == single
    chunks, files, fts = batched
    assert [r[6] for r in chunks if r[2] == "memory/c.md"] == ["cranberry"]  # the last record of c.md
    assert fts["apple"] == fts["banana"] == fts["cherry"] == [] and fts["avocado"] == [("memory/a.md",)]
    assert [f[3] for f in files] == [1, 1, 1]


def test_opening_the_store_never_drops_the_locks_that_keep_its_wal(agent):
    """A reader or writer opening the store in a process that already has connections to it must
    not read the file itself: closing any descriptor of it drops the process's POSIX locks, and
    another process's last close then deletes the WAL under the first one's connections."""
    import os
    import subprocess
    import sys

    from memindex.pipeline.store.reader import StoreReader
    from memindex.pipeline.store.writer import StoreWriter

    agent.write("memory/a.md", "the heron flies over the quarry\n")
    agent.index()
    store = agent.settings().store_path
    writer = StoreWriter(store)  # this process: a writer connection ...
    first = StoreReader(store)
    first.state()  # ... and a reader's
    try:
        second = StoreReader(store)
        second.state()  # another reader opened beside them (the servers' per-thread readers)
        third = StoreWriter(store)  # and another writer (a sync after a search)
        third.close()
        # Another process writes and closes its last connection: it may delete the WAL only if it
        # believes no other process has the store open.
        code = ("import sqlean as s, sys; c = s.connect(sys.argv[1], isolation_level=None); "
                "c.execute('PRAGMA journal_mode=WAL'); c.execute(\"INSERT OR REPLACE INTO meta(key, value) "
                "VALUES ('probe', '1')\"); c.close()")
        subprocess.run([sys.executable, "-c", code, str(store)], check=True, timeout=60)
        assert os.path.exists(f"{store}-wal") and os.path.exists(f"{store}-shm")
        second.close()
    finally:
        first.close()
        writer.close()


def test_vectors_served_from_the_cache_still_fix_the_generations_dims(tmp_path):
    """A rebuild whose vectors all came from the embedding cache names no dims (no request was
    made): its generation got no vector table and no dims, and a later write from a provider of
    another size was taken into it - 64- and 128-dim vectors in one generation."""
    import numpy as np

    from memindex.pipeline.index.fingerprint import EmbeddingIdentity
    from memindex.pipeline.index.records import ChunkRecord, FileRecord
    from memindex.pipeline.store import db
    from memindex.pipeline.store.writer import StoreWriter

    def rec(path: str, dims: int, ident: EmbeddingIdentity) -> FileRecord:
        vec = (np.ones(dims, dtype=np.float32) / np.sqrt(dims)).tolist()
        return FileRecord("memory", path, f"/x/{path}", f"h-{path}", 1, 1, "markdown", None,
                          [ChunkRecord(1, 1, f"c-{path}", f"text of {path}", vec, False)], ident)

    from_cache = EmbeddingIdentity("openai", "text-embedding-3-small", "k", None)  # no request: no dims
    fp = {"provider": "openai", "model": "text-embedding-3-small", "providerKey": "k"}
    path = tmp_path / "store.sqlite"
    w = StoreWriter(path)
    try:
        w.plan(1, fp, [], [])
        assert w.write_files(1, [rec("memory/a.md", 64, from_cache), rec("memory/b.md", 64, from_cache)])[0] == 2
        other_size = EmbeddingIdentity("openai", "text-embedding-3-small", "k", 128)
        written, rejected = w.write_files(1, [rec("memory/c.md", 128, other_size)])
    finally:
        w.close()
    # c.md is reported (its vectors do not fit: the writer asks for a rebuild) and stored without
    # them, keyword-searchable, its problem saying why.
    assert written == 1 and rejected == ["memory/c.md"]
    c = db.connect(path, readonly=True)
    try:
        assert c.execute("SELECT value FROM meta WHERE key = 'vec_dims_g1'").fetchone() == ("64",)
        assert c.execute("SELECT DISTINCT length(embedding) FROM chunks_g1 WHERE embedding IS NOT NULL"
                         ).fetchall() == [(256,)]
        assert c.execute("SELECT embedding FROM chunks_g1 WHERE path = 'memory/c.md'").fetchall() == [(None,)]
        error = c.execute("SELECT error FROM files_g1 WHERE path = 'memory/c.md'").fetchone()[0]
        assert error.startswith("embedding pending (its vectors have 128 dims and this index's 64")
    finally:
        c.close()
