"""FTS5's corpus totals (row count, token count) kept true across deletes.

A ``contentless_delete=1`` FTS5 table does not subtract a deleted row from the totals its
``bm25()`` reads (the "averages" record, ``<fts>_data`` id 1: the row count, then each column's
token count): it cannot, it never sees the row's text. Every rewrite of a file's chunks (each
edit of a daily note, and every file once under keyword-first indexing, whose vector write
replaces its text-only rows) therefore left the totals growing: ``bm25()`` then ranks against
a corpus twice the size, its scores drift from the document frequencies keyword evidence is
normalised by (``ranking.keyword_evidence``), and a store's ranking depended on its edit history
(the meaning dev set's e5 hybrid R@1 fell 0.405 -> 0.367 after keyword-first writes).

So the writer does the subtraction itself. Before it deletes FTS rows it reads their sizes from
``<fts>_docsize`` (FTS5 keeps it, and drops the rows with them) and adds them to a meta row in the
same transaction (``record_gone``); after the commit ``settle`` applies those rows to the averages
record in a transaction of its own. Not in the deleting transaction itself: FTS5 caches the totals
for the rest of a write transaction and saves its cached copy at the commit. A crash between the
two leaves the meta rows, applied by the next ``settle`` (the writer runs it when it opens a
store). Stores written before this module existed are recounted from ``<fts>_docsize`` once
(``recount``, remembered under ``TOTALS_KEY``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from memindex.pipeline.store import db

__all__ = ["decode_varints", "encode_varint", "record_gone", "pending", "settle", "recount", "totals",
           "TOTALS_KEY"]

GONE_PREFIX = "fts_gone:"  # meta key prefix + FTS table name -> "rows tokens" deleted, not yet settled
TOTALS_KEY = "fts_totals_v1"  # meta key: the totals of every FTS table here were recounted once
AVERAGES_ID = 1  # FTS5's id of the averages record in <fts>_data
_IN_MAX = 500  # rowids per IN (...) (SQLite's variable limit is larger; keep statements small)


def decode_varints(blob: bytes) -> list[int]:
    """SQLite's big-endian varints (7 bits a byte, the 9th byte all 8), as FTS5 writes its records."""
    out: list[int] = []
    i, n = 0, len(blob)
    while i < n:
        value = 0
        for k in range(9):
            if i >= n:
                break
            byte = blob[i]
            i += 1
            if k == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        out.append(value)
    return out


def encode_varint(value: int) -> bytes:
    """One SQLite varint (the inverse of :func:`decode_varints` for one value >= 0)."""
    value = max(0, int(value))
    if value > 0x00FFFFFFFFFFFFFF:  # the 9-byte form: 8 groups of 7 bits, then a full byte
        out = [value & 0xFF]
        value >>= 8
        for _ in range(8):
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        return bytes(reversed(out))
    groups = [value & 0x7F]
    value >>= 7
    while value:
        groups.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(reversed(groups))


_GONE_RANGE = (GONE_PREFIX, GONE_PREFIX[:-1] + chr(ord(GONE_PREFIX[-1]) + 1))  # every key with the prefix


@contextmanager
def _own_transaction(conn: Any) -> Iterator[None]:
    """A write transaction of its own, committed, or rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _add(acc: list[int], sz: Any) -> None:
    """One docsize row (its columns' token counts) into ``acc`` = [rows, column 0, column 1, ...]."""
    acc[0] += 1
    for i, n in enumerate(decode_varints(bytes(sz or b""))):
        if len(acc) < i + 2:
            acc.append(0)
        acc[i + 1] += n


def _sizes(conn: Any, ft: str, rowids: Sequence[int]) -> list[int]:
    """[rows, tokens per column] of ``rowids`` in ``ft``'s docsize table (rows it lacks count nothing)."""
    acc = [0]
    for i in range(0, len(rowids), _IN_MAX):
        part = list(rowids[i:i + _IN_MAX])
        for (sz,) in conn.execute(f"SELECT sz FROM {ft}_docsize WHERE id IN ({','.join('?' * len(part))})", part):
            _add(acc, sz)
    return acc


def _combine(a: list[int], b: list[int], sign: int) -> list[int]:
    """``a + sign * b`` element-wise (the shorter one padded with zeros), never below 0."""
    n = max(len(a), len(b))
    a, b = a + [0] * (n - len(a)), b + [0] * (n - len(b))
    return [max(0, x + sign * y) for x, y in zip(a, b)]


def record_gone(conn: Any, ft: str, rowids: Sequence[int]) -> None:
    """Before ``DELETE FROM ft WHERE rowid IN rowids``, in the same transaction: remember what the
    deleted rows add to ``ft``'s totals, for :func:`settle` to take off after the commit."""
    if not rowids or not db.table_exists(conn, f"{ft}_docsize"):
        return
    gone = _sizes(conn, ft, rowids)
    if not gone[0]:
        return
    key = GONE_PREFIX + ft
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    if row is not None:
        gone = _combine(gone, [int(x) for x in str(row[0]).split()], +1)
    conn.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                 (key, " ".join(map(str, gone))))


def pending(conn: Any) -> bool:
    """Are there deletes whose totals are still to be settled?"""
    return conn.execute("SELECT 1 FROM meta WHERE key >= ? AND key < ? LIMIT 1", _GONE_RANGE).fetchone() is not None


def _write_totals(conn: Any, ft: str, values: list[int]) -> None:
    conn.execute(f"UPDATE {ft}_data SET block = ? WHERE id = ?",
                 (b"".join(encode_varint(v) for v in values), AVERAGES_ID))


def totals(conn: Any, ft: str) -> list[int]:
    """``ft``'s averages record: [rows, tokens of column 0, ...] ([] when it has none yet)."""
    row = conn.execute(f"SELECT block FROM {ft}_data WHERE id = ?", (AVERAGES_ID,)).fetchone()
    return decode_varints(bytes(row[0])) if row and row[0] else []


def settle(conn: Any) -> int:
    """Take every recorded delete off its table's totals, in a transaction of its own (the caller
    holds none). Returns how many tables were settled."""
    if conn.in_transaction or not pending(conn):
        return 0
    done = 0
    with _own_transaction(conn):
        for key, value in conn.execute("SELECT key, value FROM meta WHERE key >= ? AND key < ?", _GONE_RANGE).fetchall():
            ft = key[len(GONE_PREFIX):]
            if db.table_exists(conn, f"{ft}_data"):  # (a dropped generation's table: nothing to correct)
                values = totals(conn, ft)
                if values:
                    _write_totals(conn, ft, _combine(values, [int(x) for x in str(value).split()], -1))
                    done += 1
            conn.execute("DELETE FROM meta WHERE key = ?", (key,))
    return done


def recount(conn: Any, fts_tables: Sequence[str]) -> None:
    """Once per store: set each table's totals to what its docsize rows say (the totals of a store
    written before :func:`record_gone` existed include every row it ever deleted). O(chunks), once."""
    if conn.in_transaction:
        return
    if conn.execute("SELECT 1 FROM meta WHERE key = ?", (TOTALS_KEY,)).fetchone() is not None:
        return
    with _own_transaction(conn):
        for ft in fts_tables:
            if not (db.table_exists(conn, f"{ft}_docsize") and db.table_exists(conn, f"{ft}_data")):
                continue
            values = totals(conn, ft)
            if not values:
                continue
            acc = [0] * len(values)  # the record's shape: rows, then every column
            for (sz,) in conn.execute(f"SELECT sz FROM {ft}_docsize"):
                _add(acc, sz)
            _write_totals(conn, ft, acc)
        conn.execute("DELETE FROM meta WHERE key >= ? AND key < ?", _GONE_RANGE)
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, '1')", (TOTALS_KEY,))
