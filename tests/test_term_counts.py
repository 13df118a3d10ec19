"""Issue 45: the writer keeps each FTS5 term's chunk count beside the index (store/terms.py), so a
search reads a term's document frequency with one lookup instead of walking its posting list.
The counts must be FTS5's own at every moment: after first writes, rewrites, deletions and file
contexts (titles, the date words of a daily note), and a search over them must rank exactly as
one that counts by MATCH."""

from __future__ import annotations

import pytest

from memindex.pipeline.search.engine import MemorySearch
from memindex.pipeline.store import db
from memindex.pipeline.store.reader import read_state
from memindex.pipeline.store.fts_budget import FtsBudget
from memindex.pipeline.store.fts_text import build_match_query, content_terms
from memindex.pipeline.store.reader import open_reader
from memindex.pipeline.store.schema import contexts_table, fts_table, terms_table
from memindex.pipeline.store.terms import TermCounts

NOTES = {
    "MEMORY.md": "# Memory\nHome router: Omada ER605.\nVLAN 10 is for IoT devices.\nBackups run nightly.\n",
    "memory/2026-02-01.md": "# Deploy day\nMara fixed the flaky deploy by pinning the proxy.\nRunning tests again.\n",
    "memory/2026-02-02.md": "Planned the trip to Lisbon in May. Booked the hotel near the river.\n",
    "memory/2026-02-03.md": "# Café notes\nRod's standup moved; the café serves crème brûlée. 東京で会議。\n",
    "memory/projects/alpha.md": "# Alpha\nProject Alpha ships the memory search in March.\nOwner: Mara.\n"
                                + "More text about deploys and routers.\n" * 40,
}


def _index_notes(agent) -> None:
    for rel, text in NOTES.items():
        agent.write(rel, text)
    agent.index()


def _alter(agent, *statements: str) -> int:
    """Run ``statements`` (``{terms}``/``{contexts}``: the live generation's tables) on the store,
    as another program could; the live generation."""
    w = db.connect(agent.settings().store_path)
    try:
        gen = read_state(w).live_generation
        for sql in statements:
            w.execute(sql.format(terms=terms_table(gen), contexts=contexts_table(gen)))
        return gen
    finally:
        w.close()


def _fts_counts(conn: db.Connection, gen: int) -> dict[str, int]:
    """FTS5's own chunk count of every term (fts5vocab walks the whole index)."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.v{gen} USING fts5vocab(main, {fts_table(gen)}, row)")
    return dict(conn.execute(f"SELECT term, doc FROM temp.v{gen}"))


def _kept_counts(agent) -> tuple[dict[str, int], dict[str, int], int]:
    """(the writer's counts, FTS5's counts, contexts kept) of the live generation."""
    r = open_reader(agent.settings())
    try:
        conn = r.conn()
        gen = r.state().live_generation
        kept = dict(conn.execute(f"SELECT term, docs FROM {terms_table(gen)}"))
        contexts = conn.execute(f"SELECT count(*) FROM {contexts_table(gen)}").fetchone()[0]
        return kept, _fts_counts(conn, gen), contexts
    finally:
        r.close()


def test_the_kept_counts_are_fts5s_own_through_writes_rewrites_and_deletes(agent):
    _index_notes(agent)
    kept, fts, contexts = _kept_counts(agent)
    assert kept == fts and len(kept) > 50, (len(kept), len(fts))
    # the date words of a daily note's context and its title are counted (porter-stemmed, as stored)
    assert kept["februari"] == 3 and kept["deploi"] >= 2 and kept["cafe"] == 1, kept
    assert contexts > 0
    # a rewrite takes the old chunks' terms back (context included), a deletion too
    agent.write("memory/2026-02-01.md", "# Release day\nNothing about proxies now.\n")
    (agent.workspace / "memory" / "2026-02-02.md").unlink()
    agent.write("memory/projects/alpha.md", "# Alpha\nShipped.\n")
    agent.index()
    kept, fts, _ = _kept_counts(agent)
    assert kept == fts, (set(kept.items()) ^ set(fts.items()))
    assert "lisbon" not in kept and "pin" not in kept and kept["februari"] == 2, kept
    # a forced rebuild (a new generation) starts its counts from nothing and ends equal too
    agent.index(force=True)
    kept, fts, _ = _kept_counts(agent)
    assert kept == fts


def test_a_phrase_count_is_what_match_counts(agent):
    _index_notes(agent)
    r = open_reader(agent.settings())
    try:
        conn, gen = r.conn(), r.state().live_generation
        ft = fts_table(gen)
        phrases = ['"running"', '"deploys"', '"CAFÉ"', '"crème"', '"february"', '"absent"', '"東"',
                   '"東 京"', '"home router"', '"mara"']
        counts = TermCounts().counts(conn, gen, phrases)
        for p, n in zip(phrases, counts):
            truth = conn.execute(f"SELECT count(*) FROM {ft} WHERE {ft} MATCH ?", (p,)).fetchone()[0]
            # several tokens: no single count answers, the caller counts by MATCH
            assert n == (None if " " in p.strip('"') else truth), (p, n, truth)
        assert counts[0] > 0 and counts[5] == 0
    finally:
        r.close()


def _rank(agent, queries, budget: FtsBudget | None = None) -> list[list[tuple[str, int, float]]]:
    eng = MemorySearch(agent.settings())
    try:
        if budget is not None:
            eng._fts_budget = budget
        return [[(x.path, x.startLine, x.score) for x in eng.search(q, max_results=10, min_score=0.0).results]
                for q in queries]
    finally:
        eng.close()


def test_search_ranks_exactly_as_with_match_counts(agent):
    """The same store searched with the kept counts and, their tables dropped (a generation from
    before them), with MATCH counts: the same results, the same scores, under a budget small
    enough that trimming and sampling run."""
    for i in range(60):
        agent.write(f"memory/n{i:02d}.md", f"# Note {i}\nthe telegram bot deploy {'router ' * (i % 5)}"
                    f"{'lisbon hotel ' if i % 7 == 0 else ''}filler words number {i}\n")
    _index_notes(agent)
    queries = ["telegram deploy", "router lisbon hotel", "mara deploy proxy", "filler words", "café crème",
               "february notes", "東京", "nothing matches this"]
    assert all(build_match_query(q) for q in queries) and all(content_terms(q) for q in queries[:-1])
    kept = _rank(agent, queries), _rank(agent, queries, FtsBudget(budget=20, small=10))
    assert any(kept[0]) and kept[0] != kept[1]  # (the small budget changes what is ranked)
    _alter(agent, "DROP TABLE {terms}", "DROP TABLE {contexts}")
    counted = _rank(agent, queries), _rank(agent, queries, FtsBudget(budget=20, small=10))
    assert kept == counted


@pytest.mark.parametrize("gone", ["terms", "both"])
def test_a_generation_without_counts_keeps_working_and_gets_none(agent, gone):
    # A store indexed before the counts existed: writes and deletes neither fail nor create them.
    agent.write("memory/a.md", "# A\nalpha beta\n")
    agent.index()
    _alter(agent, "DROP TABLE {terms}", *(["DROP TABLE {contexts}"] if gone == "both" else []))
    agent.write("memory/a.md", "# A\nalpha gamma\n")
    agent.write("memory/b.md", "# B\ngamma delta\n")
    agent.index()
    res = agent.search("gamma", min_score=0.0)
    assert {r["path"] for r in res["results"]} == {"memory/a.md", "memory/b.md"}
    r = open_reader(agent.settings())
    try:
        conn = r.conn()
        assert TermCounts().counts(conn, r.state().live_generation, ['"gamma"']) == [None]
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'terms_g%'").fetchone()[0] == 0
    finally:
        r.close()


def test_status_deep_checks_the_counts_against_the_index(agent):
    _index_notes(agent)
    r = open_reader(agent.settings())
    try:
        assert r.check_invariant() == {"ok": True, "problems": []}
    finally:
        r.close()
    gen = _alter(agent, "UPDATE {terms} SET docs = docs + 1 WHERE term = 'mara'",
                 "DELETE FROM {terms} WHERE term = 'lisbon'")
    r = open_reader(agent.settings())
    try:
        assert r.check_invariant()["problems"] == [f"generation {gen}: 2 term count(s) that differ from the FTS index"]
    finally:
        r.close()


def test_session_appends_and_rebuilds_keep_the_counts(agent):
    # Session deltas add chunks to a file already indexed (the writer's append path); a
    # truncated transcript is rebuilt (its chunks deleted and written again).
    from memindex.producers import session_delta
    from tests.test_session_delta import Sess, msg

    session_delta._inflight.clear()  # (as test_session_delta's fixture: no work in flight from another test)
    try:
        s = Sess(agent, delta_messages=3)
        s.append(b"".join(msg("user", f"kestrel sighting {i} near the ospreys") for i in range(5)))
        assert s.check() == 1
        s.append(b"".join(msg("assistant", f"noted kestrel {i}, herons too") for i in range(4)))
        assert s.check() == 1
        kept, fts, _ = _kept_counts(agent)
        assert kept == fts and kept["kestrel"] >= 2, kept
        with open(s.path, "r+b") as fh:
            fh.truncate(0)
            fh.write(msg("user", "a fresh start with puffins"))
        assert s.check() == 1
        kept, fts, _ = _kept_counts(agent)
        assert kept == fts and "kestrel" not in kept and kept["puffin"] == 1, kept
    finally:
        session_delta._inflight.clear()


def test_a_scratch_table_that_cannot_be_used_falls_back_to_match_counts(agent):
    # TEMP holding something else under the scratch table's name (as a failed TEMP would): the
    # lookup says "not answered" and the caller counts by MATCH, instead of failing the search.
    _index_notes(agent)
    r = open_reader(agent.settings())
    try:
        conn, gen = r.conn(), r.state().live_generation
        conn.execute("CREATE TABLE temp.memindex_query_tokens (x)")
        assert TermCounts().counts(conn, gen, ['"mara"', '"deploys"']) == [None, None]
        with r.snapshot() as snap:
            assert snap.term_counts(['"mara"', '"deploys"']) == [2, 2]
    finally:
        r.close()
