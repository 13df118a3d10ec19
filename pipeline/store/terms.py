"""Document frequencies of the FTS5 index's terms, kept by the writer (issue 45).

Keyword evidence weighs a query's terms by how many chunks hold each (``ranking.term_weights``),
and the work budget orders them the same way (``fts_budget``). FTS5 stores no such count: a
``MATCH`` count, or ``fts5vocab``, walks the term's whole posting list, ~0.03-0.06 us a posting,
so a common word cost ~5-13 ms at 30,000 files against ~0.3 ms at 1,000, the first time a search
met it and (uncached) at every search. The single writer therefore keeps, in the same
transaction as the FTS rows, a ``terms_g<N>`` table of term -> chunks holding it; a search reads
a term's count with one b-tree lookup at any store size.

The counts are FTS5's own: each batch of indexed texts is tokenized by a scratch FTS5 table in
the connection's TEMP schema with the store's tokenizer, and its ``fts5vocab`` rows are added
(or, for deleted chunks, subtracted). A query's phrase is mapped to its stored term the same way
(porter stemming included), so a count never disagrees with what ``MATCH`` finds. Deleting a
chunk needs its indexed text back (the FTS table is contentless): that is its text in the chunks
table plus the file context (``chunking.file_context``) indexed with it, which ``contexts_g<N>``
keeps per chunk. Generations created before this have neither table; their counts come from
``MATCH`` as before, until a rebuild.
"""

from __future__ import annotations

import logging
import threading
from typing import Iterable, Sequence

from memindex.pipeline.store import db
from memindex.pipeline.store.fts_text import index_text
from memindex.pipeline.store.schema import FTS_TOKENIZER, chunks_table, contexts_table, fts_table, terms_table

log = logging.getLogger("memindex.store")

# Scratch tables in TEMP (per connection, never in the store file; a read-only connection may
# write TEMP). The writer's only needs chunk counts per term (detail=none: no positions kept);
# the reader's counts a phrase's tokens (detail=full: one ``instance`` row per token).
_COUNT, _COUNT_ROWS = "temp.memindex_term_count", "temp.memindex_term_count_rows"
_TOKENS, _TOKENS_SEEN = "temp.memindex_query_tokens", "temp.memindex_query_tokens_seen"
_PHRASE_CACHE_MAX = 8192
_SQL_IN_MAX = 500


def fts_text(text: str, context: str) -> str:
    """What the FTS table indexes for a chunk: its file context, then its text."""
    return index_text(f"{context}\n{text}" if context else text)


def keeps_counts(conn: db.Connection, gen: int) -> bool:
    """Whether generation ``gen`` has its term counts (created with it)."""
    return db.table_exists(conn, terms_table(gen))


def create_tables(conn: db.Connection, gen: int) -> None:
    """The counts of a generation that holds no chunk yet (so they start exact)."""
    conn.execute(f"CREATE TABLE IF NOT EXISTS {terms_table(gen)} "
                 "(term TEXT PRIMARY KEY, docs INTEGER NOT NULL) WITHOUT ROWID")
    conn.execute(f"CREATE TABLE IF NOT EXISTS {contexts_table(gen)} (rowid INTEGER PRIMARY KEY, context TEXT NOT NULL)")


def _scratch(conn: db.Connection, table: str, vocab: str, detail: str, kind: str) -> None:
    """Create (once per connection) and empty a scratch table and its vocabulary."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5(text, tokenize='{FTS_TOKENIZER}', "
                 f"content='', detail={detail})")
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocab} USING fts5vocab(temp, {table[5:]}, {kind})")
    _clear(conn, table)  # (first too: a statement that failed midway in an earlier call left rows)


def _clear(conn: db.Connection, table: str) -> None:
    conn.execute(f"INSERT INTO {table}({table[5:]}) VALUES ('delete-all')")


def count(conn: db.Connection, gen: int, texts: Sequence[str], sign: int) -> None:
    """Add (``sign`` 1) or take back (-1) the chunks of ``texts`` (FTS-indexed texts, one per
    chunk) to the count of every term they hold. Runs in the caller's transaction."""
    if not texts:
        return
    _scratch(conn, _COUNT, _COUNT_ROWS, "none", "row")
    conn.executemany(f"INSERT INTO {_COUNT}(text) VALUES (?)", [(t,) for t in texts])
    tt = terms_table(gen)
    # (WHERE true: SQLite's parser needs it before an upsert's ON CONFLICT in INSERT ... SELECT)
    conn.execute(f"INSERT INTO {tt}(term, docs) SELECT term, ? * doc FROM {_COUNT_ROWS} WHERE true "
                 "ON CONFLICT(term) DO UPDATE SET docs = docs + excluded.docs", (sign,))
    if sign < 0:  # a term no chunk holds any more: gone, as from the FTS index
        conn.execute(f"DELETE FROM {tt} WHERE docs <= 0 AND term IN (SELECT term FROM {_COUNT_ROWS})")
    _clear(conn, _COUNT)


def add_contexts(conn: db.Connection, gen: int, rows: Iterable[tuple[int, str]]) -> None:
    """(chunk rowid, file context) of new chunks with a context: their indexed text, recoverable."""
    rows = [r for r in rows if r[1]]
    if rows:
        conn.executemany(f"INSERT INTO {contexts_table(gen)}(rowid, context) VALUES (?, ?)", rows)


def uncount_chunks(conn: db.Connection, gen: int, rowids: Sequence[int]) -> None:
    """Before chunks ``rowids`` are deleted: take their terms back out of the counts."""
    ct, xt = chunks_table(gen), contexts_table(gen)
    for i in range(0, len(rowids), _SQL_IN_MAX):
        part = rowids[i:i + _SQL_IN_MAX]
        marks = ",".join("?" * len(part))
        texts = [fts_text(text, ctx or "") for text, ctx in conn.execute(
            f"SELECT c.text, x.context FROM {ct} c LEFT JOIN {xt} x ON x.rowid = c.rowid "
            f"WHERE c.rowid IN ({marks})", part)]
        count(conn, gen, texts, -1)
        conn.execute(f"DELETE FROM {xt} WHERE rowid IN ({marks})", part)


def count_problems(conn: db.Connection, gen: int) -> int:
    """Terms whose kept count differs from FTS5's own (``status --deep``; walks the whole index)."""
    if not keeps_counts(conn, gen):
        return 0
    vocab = f"temp.memindex_vocab_g{int(gen)}"
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {vocab} USING fts5vocab(main, {fts_table(gen)}, row)")
    tt = terms_table(gen)
    fts, kept = f"SELECT term, doc FROM {vocab}", f"SELECT term, docs FROM {tt}"
    return int(conn.execute(f"SELECT count(*) FROM (SELECT term FROM ({fts} EXCEPT {kept}) "
                            f"UNION SELECT term FROM ({kept} EXCEPT {fts}))").fetchone()[0])


class TermCounts:
    """A reader's lookups of phrases' chunk counts. Thread-safe."""

    def __init__(self) -> None:
        # phrase -> its one stored term ("" when it is several tokens or none): the tokenizer's
        # answer never changes, so it is kept (bounded) across searches and generations.
        self._terms: dict[str, str] = {}
        self._lock = threading.Lock()

    def counts(self, conn: db.Connection, gen: int, phrases: Sequence[str]) -> list[int | None]:
        """The exact number of chunks holding each phrase, from the generation's term counts;
        None for a phrase of several tokens, or for all of them when ``gen`` keeps no counts."""
        if not phrases or not keeps_counts(conn, gen):
            return [None] * len(phrases)
        try:
            terms = self._stored_terms(conn, phrases)
        except db.OperationalError as exc:  # no TEMP space for the scratch table: count by MATCH
            log.warning("term counts unavailable (%s); counting by MATCH", exc)
            return [None] * len(phrases)
        wanted = sorted({t for t in terms if t})
        found = dict(conn.execute(f"SELECT term, docs FROM {terms_table(gen)} WHERE term IN "
                                  f"({','.join('?' * len(wanted))})", wanted)) if wanted else {}
        return [found.get(t, 0) if t else None for t in terms]

    def _stored_terms(self, conn: db.Connection, phrases: Sequence[str]) -> list[str]:
        with self._lock:
            out = {p: t for p in phrases if (t := self._terms.get(p)) is not None}
        new = [p for p in dict.fromkeys(phrases) if p not in out]
        if new:
            _scratch(conn, _TOKENS, _TOKENS_SEEN, "full", "instance")
            conn.executemany(f"INSERT INTO {_TOKENS}(rowid, text) VALUES (?, ?)", list(enumerate(new)))
            seen: dict[int, list[str]] = {}
            for term, doc in conn.execute(f"SELECT term, doc FROM {_TOKENS_SEEN}"):
                seen.setdefault(doc, []).append(term)
            _clear(conn, _TOKENS)
            for i, p in enumerate(new):
                toks = seen.get(i, [])
                out[p] = toks[0] if len(toks) == 1 else ""
            with self._lock:
                if len(self._terms) + len(new) > _PHRASE_CACHE_MAX:
                    self._terms.clear()
                self._terms.update((p, out[p]) for p in new)
        return [out[p] for p in phrases]


# One per process: the phrase -> term answers are the tokenizer's, the same for every store.
_COUNTS = TermCounts()


def phrase_counts(conn: db.Connection, gen: int, phrases: Sequence[str]) -> list[int | None]:
    """:meth:`TermCounts.counts` through the process's phrase cache."""
    return _COUNTS.counts(conn, gen, phrases)
