"""A work budget for the keyword arm's OR query on large stores.

FTS5's ``bm25()`` costs ~1 us per matching chunk (its document length, its
phrase hits, the sort) plus one pass over every phrase's whole posting list for
the IDF: it has no top-k pruning, so ``ORDER BY bm25 LIMIT k`` pays for *every*
chunk the MATCH expression matches. A natural-language question OR-ed term by
term matches most of a large store: at 300,000 chunks one common word matches
180,000 of them (~200 ms). BM25 weighs those words least (IDF falls with
document frequency), so when the summed document frequencies of a query's
phrases exceed the budget we keep the rarest phrases that fit it and drop the
most common ones. When even the rarest phrase is over the budget, no exact
bm25 ordering is affordable: the chunks holding *all* the phrases (an AND
query, usually far fewer) are ranked instead, and if those are still too many
a budget's worth of the newest matches is ranked (``FtsPlan.ranked`` False, ``sample``), or,
for phrases in most of a huge store, the newest matches are taken unranked. Stores whose
size times phrase count fits the budget - every workspace below ~75 chunks
for a 10-term question - are never touched, so small-store behaviour is exactly
plain BM25 over all terms.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from memindex.pipeline.store import db, terms
from memindex.pipeline.store.schema import chunks_table, fts_table

# Postings (summed document frequency) ranked per query: ~1.2-2.7 ms of bm25() on this 2-core
# machine (~0.8-1.8 us each). A phrase over it is in >14% of a 10k-chunk store (IDF <= ln 6 ~ 1.8,
# against ~7-9 for a rare word), in >0.5% of a 300k-chunk one.
FTS_RANK_BUDGET = 1_500
# Smaller stores rank at most this many, or FTS_BUDGET_SHARE of their chunks if more: what such
# a budget drops is phrases in over ~7% of the chunks (IDF <= ~2.6), and there that costs
# nothing measurable. The LoCoMo dev questions, each conversation indexed with the 1,000-file
# corpus beside it (10,700 chunks), keyword-only: R@10 / MRR 0.824 / 0.634 at 1,500 and
# 0.824 / 0.636 at 750 and 500, for a p95 ~20% lower (the 200 corpus queries, 3.5 -> 2.8 ms).
# With the 10,000-file corpus (107,000 chunks) lower budgets do cost: 0.822 at 3,000, 0.812 at
# 1,500, 0.807 at 750, 0.799 at 500 - there the share keeps 1,500.
FTS_RANK_BUDGET_SMALL = 750
FTS_BUDGET_SHARE = 0.07
# Document frequencies are taken up to 4x the small budget: enough to order the phrases a budget
# can still use. A phrase's comes from the writer's term counts (store/terms.py, one lookup); an
# AND of phrases, or a phrase in a generation without counts, is counted by walking its matches
# (~0.06 us a posting: 0.38 ms for a word in 6,000 chunks), bounded for the words in half the store.
DF_COUNT_FACTOR = 4
_CACHE_MAX = 4096


class FtsPlan(NamedTuple):
    """The MATCH expression to run, whether to order it by bm25 (False: take the first
    matches; the budget could not afford ranking them), and an expression whose first
    matches fill the list when ``match`` (an AND of common phrases) finds too few."""

    match: str
    ranked: bool = True
    fill: str | None = None
    # Unranked: bm25 over this many of the newest matches, best first (0: take the newest as
    # they come). One common word over the budget took the first matches in index order, all
    # scored alike: on a 107,000-chunk store "telegram" answered 20 results at 1.000 from the
    # oldest folder, the telegram page twelfth.
    sample: int = 0
    # The sample's ranking expression when some of ``match``'s phrases are too common to rank by:
    # bm25() walks every phrase's whole posting list for its IDF, once per query, so one phrase in
    # a third of a 300,000-chunk store cost ~5 ms whatever the sample (warm search p95 3.6x from
    # 1k to 30k files). The sample is then ranked by the AND of the phrases whose lists are
    # bounded (counted within the cap), and kept to the chunks holding every phrase.
    rank_by: str | None = None


class FtsBudget:
    """Per-search-engine document-frequency cache + the trimming rule. Thread-safe."""

    def __init__(self, budget: int = FTS_RANK_BUDGET, small: int = FTS_RANK_BUDGET_SMALL) -> None:
        self.budget, self.small = budget, small
        self._df: dict[tuple[int, str, int], int] = {}
        self._lock = threading.Lock()

    def trim(self, conn: db.Connection, gen: int, match: str) -> str:
        """``match`` (phrases joined by `` OR ``) without its most common phrases, if over budget
        (never empty: at least the rarest phrase stays)."""
        return self._trim(conn, gen, match)[0]

    def plan(self, conn: db.Connection, gen: int, match: str) -> FtsPlan:
        """What to run for ``match``: the trimmed OR query, or for a query of only very common
        phrases, their AND (ranked when it matches few enough chunks, else unranked)."""
        trimmed, rarest_df, size = self._trim(conn, gen, match)
        budget, cap = self.budget_for(size), self.count_cap_for(size)
        if rarest_df <= budget:
            return FtsPlan(trimmed)
        # Every phrase is over the budget. Chunks holding all of them rank best under the OR
        # query too (each phrase adds to bm25); there are usually few.
        phrases = match.split(" OR ")
        every = " AND ".join(phrases) if len(phrases) > 1 else match
        # bm25 still walks each phrase's whole posting list once for its IDF (~0.05 us a posting),
        # so ranking the AND needs both few matches and posting lists short enough to walk.
        if (len(phrases) > 1 and sum(self._doc_freq(conn, gen, p, cap) for p in phrases) <= cap
                and self._doc_freq(conn, gen, every, cap) <= budget):
            return FtsPlan(every, fill=trimmed)
        # Too many to rank them all: rank a sample of the newest, when the phrases' posting lists
        # are short enough for bm25's IDF walk (counted up to ``cap``); else the newest, unranked.
        # The sample, and the posting lists its ranking may walk, are sized for the small budget
        # whatever the store's size: their cost then stays flat from 1k to 30k files (issue 45).
        # The AND matches at most its rarest phrase's chunks, so it is not counted (counting an AND
        # of common phrases walked their lists to the end: ~1 ms at 30k files, 0.2 ms at 1k).
        # When every phrase is over the cap, each one's IDF walk grows with the store: the newest,
        # unranked; else the sample is ranked by the phrases within the cap (``rank_by``).
        bounded = [p for p in phrases if self._doc_freq(conn, gen, p, cap) <= cap]
        sample = self.small if bounded else 0
        rank_by = " AND ".join(bounded) if bounded and len(bounded) < len(phrases) else None
        return FtsPlan(every, ranked=False, fill=trimmed if len(phrases) > 1 else None, sample=sample,
                       rank_by=rank_by)

    def budget_for(self, size: int) -> int:
        """The postings a query may rank in a store of ``size`` chunks."""
        return min(self.budget, max(self.small, int(FTS_BUDGET_SHARE * size)))

    def count_cap_for(self, size: int) -> int:
        """How far a phrase's document frequency is counted: the same at every store size (a count
        without the writer's term counts walks the posting list up to it; sized by the larger
        budget it doubled that work from 1k to 30k files). Beyond it only the order among phrases
        over every budget is lost, which trimming does not use (and the plans stay the same
        whichever way a count was taken)."""
        return DF_COUNT_FACTOR * self.small

    def _trim(self, conn: db.Connection, gen: int, match: str) -> tuple[str, int, int]:
        """(trimmed match, document frequency of its rarest phrase (0: not counted), store size)."""
        # build_match_query quotes every phrase and lowercases its tokens, so " OR " never occurs inside one.
        phrases = match.split(" OR ")
        # max(rowid) is an O(log n) upper bound of the chunk count (rowids are never far above it).
        size = db.count(conn, f"SELECT max(rowid) FROM {chunks_table(gen)}")
        budget = self.budget_for(size)
        if size * len(phrases) <= budget:
            return match, 0, size
        cap = self.count_cap_for(size)
        ranked = sorted(range(len(phrases)), key=lambda i: (self._doc_freq(conn, gen, phrases[i], cap), i))
        rarest = self._doc_freq(conn, gen, phrases[ranked[0]], cap)
        keep: list[int] = []
        spent = 0
        for i in ranked:
            df = self._doc_freq(conn, gen, phrases[i], cap)
            # A phrase in over half the chunks has FTS5 IDF <= 0 (clamped to 1e-6): it adds
            # nothing to any bm25() score, only rows to rank. Over budget, it is dropped first.
            if keep and (spent + df > budget or 2 * df > size):
                break
            keep.append(i)
            spent += df
        return " OR ".join(phrases[i] for i in sorted(keep)), rarest, size

    def _doc_freq(self, conn: db.Connection, gen: int, phrase: str, cap: int) -> int:
        # A phrase's (or an AND of phrases') bounded count. Cached without invalidation on writes: a slightly stale count only shifts
        # which common phrase is dropped, never correctness of the matches.
        key = (gen, phrase, cap)
        with self._lock:
            hit = self._df.get(key)
        if hit is not None:
            return hit
        n = self._count(conn, gen, phrase, cap)
        with self._lock:
            if len(self._df) >= _CACHE_MAX:
                self._df.clear()
            self._df[key] = n
        return n

    def _count(self, conn: db.Connection, gen: int, expr: str, cap: int) -> int:
        """Chunks matching ``expr``, counted up to ``cap + 1``: a phrase's from the writer's term
        counts (one lookup, store/terms.py), else by walking its matches (~0.06 us each)."""
        if " AND " not in expr:
            n = terms.phrase_counts(conn, gen, [expr])[0]
            if n is not None:
                return min(n, cap + 1)
        ft = fts_table(gen)
        return db.count(conn, f"SELECT count(*) FROM (SELECT 1 FROM {ft} WHERE {ft} MATCH ? LIMIT ?)",
                        (expr, cap + 1))
