"""The per-agent store schema (F6).

An index lives in *generation* tables (``files_g1``, ``chunks_g1``,
``fts_g1``, ``vec_g1``) inside one SQLite file. ``meta`` names the live
generation. When the fingerprint changes (F7) the writer fills generation
N+1 next to the live one and flips ``meta`` in one transaction once it is
complete: searches keep answering from generation N until then, a rebuild
killed midway leaves the live index untouched, and there are no temporary
database files to orphan. The embedding cache is shared by all generations.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

FileKey = tuple[str, str]  # a files row's key, (source, path): its PRIMARY KEY below

# 2: the FTS table is contentless (issue 19). The version is part of the index
# fingerprint (index/fingerprint.py), so a store built at 1 is rebuilt into a new
# generation on its next sync, the old one answering searches until the flip.
SCHEMA_VERSION = 2
# The live and the building generation's {"generation", "fingerprint"}. The "_v1" is the layout of
# that JSON value, not SCHEMA_VERSION: stores of every schema version read them, so a rebuild
# knows which generation it replaces.
META_KEY = "memory_index_meta_v1"
BUILDING_KEY = "memory_index_building_v1"
# A random id given to a store when it is created: a store deleted and rebuilt is a different store.
STORE_ID_KEY = "store_id"
# When the last plan applied was made (ns): a redelivered older plan is ignored, and a plan's
# progress and failures count from it.
LAST_PLAN_KEY = "last_plan_ns"
# porter: English stemming ("painted" finds "paint"), applied after unicode61's
# diacritic folding; non-English words stem rarely and identically on both sides.
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"

# The files-row error of a file stored keyword-only whose vectors are still to come (a provider
# failure, or vectors of another size): ``status`` counts these as "vectors pending".
EMBED_PENDING = "embedding pending"
# The files-row error of a file written for keyword search before its vectors (issue 44): its text
# is searchable as soon as it is read, and the write with its vectors, already queued, replaces it.
# The file stays pending meanwhile; a plan leaves it to that write unless nothing is in flight.
VECTORS_QUEUED = f"{EMBED_PENDING} (queued; keyword-searchable until its vectors are written)"
# The files-row hash of a file recorded unreadable (``error:<errno>``): each plan checks it can read
# it now. (``error:<exception name>`` is a file that could not be prepared: left alone until it changes.)
READ_ERROR = "error:"


def embedding_pending(error: str | None) -> bool:
    """Is this files-row error one of a file whose vectors are still to come (``EMBED_PENDING``)?"""
    return error is not None and error.startswith(EMBED_PENDING)


# What these codes say of a files row, in SQL (each 0 or 1): the reader decodes them as it reads
# the rows (reader.IndexedFile), so a plan comparing 30,000 of them runs no Python per row for it.
# A file whose vectors are still to come (``embedding_pending``), of those one whose vectors are
# already queued, and a file recorded unreadable (``READ_ERROR`` and an errno, nothing else).
VECTORS_PENDING_SQL = f"coalesce(instr(error, '{EMBED_PENDING}') = 1, 0)"
VECTORS_QUEUED_SQL = f"coalesce(instr(error, '{VECTORS_QUEUED}') = 1, 0)"
# (A CASE, not an AND: SQLite ran the digits check over every content hash too, and reading 30,000
# rows took twice as long.)
UNREADABLE_SQL = (f"CASE WHEN hash GLOB '{READ_ERROR}[0-9]*' "
                  f"THEN substr(hash, {len(READ_ERROR) + 1}) NOT GLOB '*[^0-9]*' ELSE 0 END")

BASE_DDL = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS embedding_cache (
  provider TEXT NOT NULL,
  model TEXT NOT NULL,
  provider_key TEXT NOT NULL,
  dims INTEGER NOT NULL,
  hash TEXT NOT NULL,
  embedding BLOB NOT NULL,
  updated_at INTEGER NOT NULL,
  used_at INTEGER NOT NULL,
  PRIMARY KEY (provider, model, provider_key, dims, hash)
);
CREATE INDEX IF NOT EXISTS idx_embedding_cache_used_at ON embedding_cache(used_at);
INSERT OR IGNORE INTO meta(key, value) VALUES ('{STORE_ID_KEY}', lower(hex(randomblob(8))));
"""


def files_table(gen: int) -> str:
    return f"files_g{int(gen)}"


def chunks_table(gen: int) -> str:
    return f"chunks_g{int(gen)}"


def chunk_id(source: str, path: str, seq: int, start: int, end: int, chunk_hash: str, model: str) -> str:
    """A chunks row's ``id``. Unique by construction: ``seq`` is the chunk's position in its file,
    so two chunks with the same lines and text (pieces of one long line repeating itself) still differ."""
    return hashlib.sha256(
        f"{source}:{path}:{seq}:{start}:{end}:{chunk_hash}:{model}".encode("utf-8", "surrogatepass")).hexdigest()


def fts_table(gen: int) -> str:
    return f"fts_g{int(gen)}"


def vec_table(gen: int) -> str:
    return f"vec_g{int(gen)}"


def terms_table(gen: int) -> str:
    """Term -> how many of ``gen``'s chunks hold it, kept by the writer (store/terms.py)."""
    return f"terms_g{int(gen)}"


def contexts_table(gen: int) -> str:
    """Chunk rowid -> the file context indexed with its text (store/terms.py)."""
    return f"contexts_g{int(gen)}"


def pending_table(gen: int) -> str:
    """The files the last plan for ``gen`` sent and the writer has not written yet: a rebuilding
    generation goes live only when this is empty (``maybe_promote``), and a kept-over plan knows
    which files are still owed. Rows, not a count, so a duplicated write cannot empty it early."""
    return f"pending_g{int(gen)}"


@dataclass(frozen=True)
class Tables:
    """One generation's table names and meta keys, spelt out once: the writer keeps one per
    generation it writes (``StoreWriter.tables``) instead of building each name per statement."""

    gen: int
    files: str
    chunks: str
    fts: str
    vec: str
    pending: str
    vec_dims_key: str
    files_version_key: str

    @classmethod
    def of(cls, gen: int) -> "Tables":
        return cls(int(gen), files_table(gen), chunks_table(gen), fts_table(gen), vec_table(gen), pending_table(gen),
                   vec_dims_key(gen), files_version_key(gen))


def generation_ddl(gen: int) -> str:
    f, c, p = files_table(gen), chunks_table(gen), pending_table(gen)
    return f"""
CREATE TABLE IF NOT EXISTS {f} (
  source TEXT NOT NULL,
  path TEXT NOT NULL,
  hash TEXT NOT NULL,
  size INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL,
  kind TEXT NOT NULL DEFAULT 'markdown',
  chunks INTEGER NOT NULL DEFAULT 0,
  error TEXT,
  indexed_at INTEGER NOT NULL,
  extra TEXT,
  PRIMARY KEY (source, path)
);
CREATE TABLE IF NOT EXISTS {c} (
  rowid INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  source TEXT NOT NULL,
  path TEXT NOT NULL,
  start_line INTEGER NOT NULL,
  end_line INTEGER NOT NULL,
  hash TEXT NOT NULL,
  kind TEXT NOT NULL DEFAULT 'markdown',
  text TEXT NOT NULL,
  embedding BLOB,   -- also in vec_g<N>: kept here for the in-process cosine when sqlite-vec cannot
                    -- load (F6), and for chunk_cosines (a keyword hit's cosine, by chunk id)
  updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_{c}_path ON {c}(source, path);
CREATE TABLE IF NOT EXISTS {p} (source TEXT NOT NULL, path TEXT NOT NULL, PRIMARY KEY (source, path));
"""


def files_version_key(gen: int) -> str:
    return f"files_version_g{int(gen)}"


def vec_dims_key(gen: int) -> str:
    """The meta key holding a generation's vector dims (set by its first vector, then fixed)."""
    return f"vec_dims_g{int(gen)}"


def files_version_ddl(gen: int) -> list[str]:
    """Triggers that count every insert, update and delete of a generation's file rows.

    The count (in ``meta``) is how a planner knows, without reading the rows, that they are
    the ones it compared last time (the no-change mark in index/indexer.py). Triggers, not writer code: no write
    path, present or future, can change a file row and forget to bump it. Each statement is
    run on its own (their bodies hold semicolons).
    """
    f, key = files_table(gen), files_version_key(gen)
    bump = f"UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = '{key}'"
    return [
        f"INSERT OR IGNORE INTO meta(key, value) VALUES ('{key}', '0')",
        *(f"CREATE TRIGGER IF NOT EXISTS {f}_{op.lower()}_version AFTER {op} ON {f} BEGIN {bump}; END"
          for op in ("INSERT", "UPDATE", "DELETE")),
    ]


def fts_ddl(gen: int, *, contentless: bool = True) -> str:
    # Keyed by the chunk rowid; the indexed text is fts_text.index_text(text), which spaces
    # out CJK/Thai so unicode61 can find them. Contentless: nothing reads text back from
    # the FTS table (snippets come from the chunks table), so its own copy of every chunk
    # was a third of the store. contentless_delete (SQLite >= 3.43) keeps DELETE by rowid
    # working; an older SQLite gets the plain table, which behaves the same.
    options = ", content='', contentless_delete=1" if contentless else ""
    return (f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts_table(gen)} "
            f"USING fts5(text, tokenize='{FTS_TOKENIZER}'{options})")


# FTS5 merges a level's segments once this many exist (its default is 4). A cold index writes a
# level-0 segment per writer transaction, and at 4 the merges re-copied the growing index often
# enough to be ~10% of a 10,000-file cold index's CPU; at 8 that CPU is saved (measured
# interleaved, 31.8 -> 28.4 s and 33.0 -> 29.6 s) for the same store size and ~0.2 ms more per
# keyword query (more segments to read; bench/README.md, issue 19).
FTS_AUTOMERGE = 8


# Settings FTS5 keeps in the table itself (its ``_config`` table), applied by the writer to
# every generation it plans into, so a store built before a setting gets it at its next sync.
FTS_CONFIG = {"automerge": FTS_AUTOMERGE}


def fts_config_sql(gen: int, current: dict[str, str]) -> list[str]:
    """The statements that bring ``gen``'s FTS table to :data:`FTS_CONFIG` (``current``: its
    ``_config`` rows); none when it is there already (a config write makes every reader reload)."""
    t = fts_table(gen)
    return [f"INSERT INTO {t}({t}, rank) VALUES('{k}', {int(v)})"
            for k, v in FTS_CONFIG.items() if current.get(k) != str(v)]


def vec_ddl(gen: int, dims: int) -> str:
    return (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {vec_table(gen)} "
        f"USING vec0(embedding float[{int(dims)}] distance_metric=cosine)"
    )


def drop_generation_sql(gen: int) -> list[str]:
    return [
        f"DROP TABLE IF EXISTS {t}"
        for t in (vec_table(gen), fts_table(gen), chunks_table(gen), files_table(gen), pending_table(gen),
                  terms_table(gen), contexts_table(gen))
    ]
