"""A work budget for the keyword arm's OR query on large stores.

FTS5 computes ``bm25()`` for *every* chunk matching a MATCH expression before
``ORDER BY rank LIMIT k`` can pick the best ones (it has no top-k pruning).
A natural-language question OR-ed term by term matches most of a large store:
at 100,000 chunks one common word can match 50,000 chunks, ~1 us of ranking
each. BM25 weighs those words least (IDF falls with document frequency), so
when the summed document frequencies of a query's phrases exceed the budget we
keep the rarest phrases that fit it (always at least one) and drop the most
common ones. Stores whose size times phrase count fits the budget - every
workspace below ~1,000 chunks for a 10-term question - are never touched, so
small-store behaviour is exactly plain BM25 over all terms.
"""

from __future__ import annotations

import threading

from memindex.pipeline.store import db
from memindex.pipeline.store.schema import chunks_table, fts_table

# Postings (summed document frequency) ranked per query: ~10 ms of bm25() on this CPU. A phrase
# over it is in >10% of a 100k-chunk store: IDF <= ln 9 ~ 2.2, against ~7-9 for a rare word.
FTS_RANK_BUDGET = 6_000
_CACHE_MAX = 4096


class FtsBudget:
    """Per-search-engine document-frequency cache + the trimming rule. Thread-safe."""

    def __init__(self, budget: int = FTS_RANK_BUDGET) -> None:
        self.budget = budget
        self._df: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    def trim(self, conn: db.Connection, gen: int, match: str) -> str:
        """``match`` (phrases joined by `` OR ``) without its most common phrases, if over budget."""
        # build_match_query quotes every phrase and lowercases its tokens, so " OR " never occurs inside one.
        phrases = match.split(" OR ")
        if len(phrases) < 2:
            return match
        # max(rowid) is an O(log n) upper bound of the chunk count (rowids are never far above it).
        size = conn.execute(f"SELECT max(rowid) FROM {chunks_table(gen)}").fetchone()[0] or 0
        if size * len(phrases) <= self.budget:
            return match
        ranked = sorted(range(len(phrases)), key=lambda i: (self._doc_freq(conn, gen, phrases[i]), i))
        keep, spent = [], 0
        for i in ranked:
            df = self._doc_freq(conn, gen, phrases[i])
            # A phrase in over half the chunks has FTS5 IDF <= 0 (clamped to 1e-6): it adds
            # nothing to any bm25() score, only rows to rank. Over budget, it is dropped first.
            if keep and (spent + df > self.budget or 2 * df > size):
                break
            keep.append(i)
            spent += df
        return " OR ".join(phrases[i] for i in sorted(keep))

    def _doc_freq(self, conn: db.Connection, gen: int, phrase: str) -> int:
        # Cached without invalidation on writes: a slightly stale count only shifts
        # which common phrase is dropped, never correctness of the matches.
        key = (gen, phrase)
        with self._lock:
            hit = self._df.get(key)
        if hit is not None:
            return hit
        ft = fts_table(gen)
        n = conn.execute(f"SELECT count(*) FROM {ft} WHERE {ft} MATCH ?", (phrase,)).fetchone()[0]
        with self._lock:
            if len(self._df) >= _CACHE_MAX:
                self._df.clear()
            self._df[key] = n
        return n
