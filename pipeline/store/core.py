"""The per-agent SQLite store's shared parts (F6): what both sides read (its state, the files
table), and the names they share. ``writer.StoreWriter`` is used only by the writer actor;
``reader.StoreReader`` opens the file read-only (WAL lets it read while the writer writes) and is
what search, sync planning and ``status`` use; ``health`` says when a store is damaged or its disk
full."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple

from memindex.pipeline.store import db
from memindex.pipeline.store.health import corrupt
from memindex.pipeline.store.schema import (
    BUILDING_KEY,
    LAST_PLAN_KEY,
    META_KEY,
    FileKey,
    files_table,
)


class IndexedFile(NamedTuple):
    """One indexed file's row. A tuple: a sync of a huge workspace builds one per file
    (30,000 of them on every no-change resync), and a tuple is built in C."""

    hash: str
    size: int
    mtime_ns: int
    error: str | None = None
    extra: str | None = None  # raw JSON (e.g. a session transcript's delta state)


@dataclass
class StoreState:
    """What a reader sees: the live generation and any rebuild in progress."""

    live_generation: int | None
    live_fingerprint: dict[str, Any] | None
    building_generation: int | None = None
    building_fingerprint: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def last_plan_ns(self) -> int:
        """When the last plan the writer applied was made (0: none recorded)."""
        return int(self.extra.get(LAST_PLAN_KEY) or 0)


def read_state(conn: db.Connection) -> StoreState:
    try:
        rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except db.OperationalError:
        return StoreState(None, None)
    except db.DatabaseError as exc:
        raise corrupt(db.conn_path(conn), exc) from None
    live = json.loads(rows[META_KEY]) if META_KEY in rows else None
    building = json.loads(rows[BUILDING_KEY]) if BUILDING_KEY in rows else None
    extra = {k: v for k, v in rows.items() if k not in (META_KEY, BUILDING_KEY)}
    return StoreState(
        live_generation=live["generation"] if live else None,
        live_fingerprint=live["fingerprint"] if live else None,
        building_generation=building["generation"] if building else None,
        building_fingerprint=building["fingerprint"] if building else None,
        extra=extra,
    )


def read_indexed_files(conn: db.Connection, gen: int) -> dict[FileKey, IndexedFile]:
    if not db.table_exists(conn, files_table(gen)):
        return {}
    rows = conn.execute(f"SELECT source, path, hash, size, mtime_ns, error, extra FROM {files_table(gen)}").fetchall()
    if not rows:
        return {}
    # Built column-wise by C iterators (no Python code per row): a no-change sync of 30,000
    # files reads all of them, and a per-row comprehension took twice as long.
    cols = list(zip(*rows))
    return dict(zip(zip(cols[0], cols[1]), map(tuple.__new__, repeat(IndexedFile), zip(*cols[2:]))))
