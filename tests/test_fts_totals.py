"""FTS5's corpus totals stay true across rewrites and deletes (pipeline/store/fts_totals.py).

A contentless_delete FTS5 table never takes a deleted row off the row and token totals its bm25()
reads, so a store's keyword ranks depended on how often its notes had been rewritten (keyword-first
indexing rewrites every file once). The writer now takes them off itself: a store's bm25 must be
the bm25 of a store freshly written with the same notes, whatever the history."""

from __future__ import annotations

import shutil

import pytest

from memindex.pipeline.index.records import ChunkRecord, FileRecord
from memindex.pipeline.store import db, fts_totals
from memindex.pipeline.store.writer import StoreWriter

FP = {"provider": "none", "model": "fts-only"}
QUERIES = ("apple", "banana", "cherry pie", "apple banana", "damson")


def rec(path: str, *texts: str) -> FileRecord:
    digest = "h-" + "-".join(texts)
    return FileRecord("memory", path, f"/x/{path}", digest, 1, 1, "markdown", None,
                      [ChunkRecord(i + 1, i + 1, f"c-{t}", t, None, False, f"Title {path}")
                       for i, t in enumerate(texts)], None)


FINAL = [rec("memory/a.md", "apple pie with apple cream", "apple"),
         rec("memory/b.md", "banana bread and a cherry"),
         rec("memory/c.md", "cherry pie, cherry jam, and more cherry words here"),
         rec("memory/d.md", "damson")]


def writer(path) -> StoreWriter:
    w = StoreWriter(path, vector_enabled=False)
    w.plan(1, FP, [], [])
    return w


def ranks(path) -> dict[str, list[tuple[str, float]]]:
    """Each query's hits as (chunk text, bm25), best first: what the keyword arm reads."""
    c = db.connect(path, readonly=True)
    try:
        return {q: [(t, round(r, 9)) for t, r in c.execute(
            "SELECT c.text, bm25(fts_g1) FROM fts_g1 f JOIN chunks_g1 c ON c.rowid = f.rowid "
            "WHERE fts_g1 MATCH ? ORDER BY bm25(fts_g1), c.text", (q,))] for q in QUERIES}
    finally:
        c.close()


def averages(path) -> list[int]:
    c = db.connect(path, readonly=True)
    try:
        return fts_totals.totals(c, "fts_g1")
    finally:
        c.close()


def fresh(tmp_path) -> dict:
    w = writer(tmp_path / "fresh.sqlite")
    w.write_files(1, FINAL)
    w.close()
    return ranks(tmp_path / "fresh.sqlite")


def test_varints_round_trip():
    for v in (0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**35 + 7, 2**56 - 1, 2**56, 2**63 - 1):
        assert fts_totals.decode_varints(fts_totals.encode_varint(v)) == [v]
    blob = b"".join(fts_totals.encode_varint(v) for v in (156, 4167))
    assert fts_totals.decode_varints(blob) == [156, 4167]


@pytest.mark.parametrize("held", [False, True])
def test_rewritten_notes_rank_as_a_fresh_store_ranks_them(tmp_path, held):
    path = tmp_path / "edited.sqlite"
    w = writer(path)
    if held:
        w.hold()
    w.write_files(1, [rec("memory/a.md", "apple"), rec("memory/b.md", "banana"), rec("memory/e.md", "elder")])
    for i in range(5):  # a daily note edited all day long, and a file that comes and goes
        w.write_files(1, [rec("memory/a.md", *(["apple"] * (i + 1))), rec("memory/c.md", "cherry " * (i + 2))])
        if held:
            w.commit()
            w.hold()
    w.delete_files(1, [("memory", "memory/e.md")])
    w.write_files(1, FINAL)
    w.close()
    want = fresh(tmp_path)
    assert averages(path) == averages(tmp_path / "fresh.sqlite")
    assert averages(path)[0] == 5  # the five chunks of FINAL, not every row ever written
    assert ranks(path) == want


def test_a_store_with_drifted_totals_is_recounted_once_when_opened(tmp_path):
    """A store written before the fix (its totals count every deleted row) is corrected on open."""
    path = tmp_path / "old.sqlite"
    w = writer(path)
    for _ in range(4):
        w.write_files(1, FINAL)
    w.close()
    c = db.connect(path)
    # What such a store looks like: totals inflated (written here by hand), no recount mark.
    fts_totals._write_totals(c, "fts_g1", [40, 400])
    c.execute("DELETE FROM meta WHERE key = ?", (fts_totals.TOTALS_KEY,))
    c.commit()
    c.close()
    assert ranks(path) != fresh(tmp_path)
    StoreWriter(path, vector_enabled=False).close()
    assert averages(path) == averages(tmp_path / "fresh.sqlite")
    assert ranks(path) == ranks(tmp_path / "fresh.sqlite")


def test_deletes_recorded_before_a_crash_are_settled_on_the_next_open(tmp_path):
    path = tmp_path / "crash.sqlite"
    w = writer(path)
    w.write_files(1, FINAL + [rec("memory/z.md", "zebra zebra zebra")])
    w.close()
    before = averages(path)
    c = db.connect(path)  # the deleting transaction committed, the settling one never ran
    c.execute("BEGIN IMMEDIATE")
    rowids = [r[0] for r in c.execute("SELECT rowid FROM chunks_g1 WHERE path = 'memory/z.md'")]
    fts_totals.record_gone(c, "fts_g1", rowids)
    c.execute(f"DELETE FROM fts_g1 WHERE rowid IN ({','.join('?' * len(rowids))})", rowids)
    c.execute("DELETE FROM chunks_g1 WHERE path = 'memory/z.md'")
    c.execute("DELETE FROM files_g1 WHERE path = 'memory/z.md'")
    c.execute("COMMIT")
    assert fts_totals.pending(c)
    c.close()
    assert averages(path) == before  # FTS5 did not take the row off
    StoreWriter(path, vector_enabled=False).close()
    want = fresh(tmp_path)
    assert averages(path) == averages(tmp_path / "fresh.sqlite") and averages(path)[0] == before[0] - 1
    assert ranks(path) == want
    c = db.connect(path, readonly=True)
    assert not fts_totals.pending(c)
    c.close()


def test_a_rolled_back_write_takes_nothing_off(tmp_path):
    path = tmp_path / "rb.sqlite"
    w = writer(path)
    w.write_files(1, FINAL)
    w.hold()
    w.write_files(1, [rec("memory/a.md", "apple")])  # deletes a.md's two rows inside the held transaction
    w.conn.execute("ROLLBACK")  # SQLite lost the held transaction (an I/O error)
    w._end_held()
    w._settle_fts()
    w.close()
    assert ranks(path) == fresh(tmp_path)
