"""The one place that chooses the SQLite driver and loads sqlite-vec, and the few helpers every
connection to a store uses (which file it reads, whether a table exists, DDL run statement by statement).

The stdlib ``sqlite3`` on many Python builds cannot load extensions, so we
prefer ``sqlean`` (a drop-in ``sqlite3`` with extension loading and FTS5) and
fall back to the stdlib. Everything else imports ``sqlite3`` from here.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from memindex.pipeline.errors import StoreError

if TYPE_CHECKING:
    # sqlean ships no types; it is the stdlib module's API (a drop-in), so check against that.
    import sqlite3

    DRIVER: str
else:
    try:  # pragma: no cover - import choice depends on the environment
        import sqlean as sqlite3

        DRIVER = "sqlean"
    except ImportError:  # pragma: no cover
        import sqlite3

        DRIVER = "sqlite3"

log = logging.getLogger("memindex.db")

Connection = sqlite3.Connection
Error = sqlite3.Error
OperationalError = sqlite3.OperationalError
DatabaseError = sqlite3.DatabaseError
IntegrityError = sqlite3.IntegrityError

BUSY_TIMEOUT_MS = 30_000
# Read connections: address space, not memory (pages are shared with the OS cache); a 30k-file
# store is ~300 MB. The page cache holds the hot b-tree interior pages between searches.
READER_MMAP_BYTES = 1 << 30
READER_CACHE_KIB = 32 * 1024
# FTS5's contentless_delete=1 (a contentless table that still deletes by rowid) needs 3.43.
CONTENTLESS_DELETE = sqlite3.sqlite_version_info >= (3, 43, 0)


def count(conn: Connection, sql: str, params: Sequence[object] = ()) -> int:
    """The one integer a COUNT/MAX query answers (0 for NULL: MAX over no rows). SQLite's rows
    are untyped: this is where a count becomes an ``int``."""
    row = conn.execute(sql, params).fetchone()
    return int(row[0] or 0) if row is not None else 0


def conn_path(conn: Connection) -> str:
    """The file ``conn`` reads ("?" when SQLite does not say), for messages."""
    row = conn.execute("PRAGMA database_list").fetchone()
    return row[2] if row else "?"


def table_exists(conn: Connection, name: str) -> bool:
    return conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = ? AND type IN ('table','view')", (name,)
    ).fetchone() is not None


def run_script(conn: Connection, script: str) -> None:
    """Run DDL statement by statement: ``executescript`` would COMMIT an open transaction."""
    for stmt in script.split(";"):
        if stmt.strip():
            conn.execute(stmt)


def now_ms() -> int:
    """A timestamp as the store writes it: milliseconds since the epoch."""
    return int(time.time() * 1000)


def connect(path: Path | str, *, readonly: bool = False, setting: str = "the store path") -> Connection:
    """Open a store. Writers get WAL; readers open ``mode=ro`` and never write. ``setting``: what
    sets ``path``, as the agent's config spells it (``AgentSettings.store_setting``), for messages."""
    if Path(path).is_dir():  # SQLite says only "disk I/O error" (a traceback from `index`)
        raise StoreError(f"the store path {path} is a directory, not a SQLite file: point "
                         f"{setting} at a file (e.g. {{agentId}}.sqlite) or move the directory")
    if readonly:
        uri = f"file:{Path(path).as_posix()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        # A search walks FTS5 doclists spread over many pages: mapped, they are read in place
        # instead of copied through the 2 MiB default page cache on every query (issue 19).
        conn.execute(f"PRAGMA mmap_size={READER_MMAP_BYTES}")
        conn.execute(f"PRAGMA cache_size=-{READER_CACHE_KIB}")
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    return conn


def peek(path: Path | str) -> Connection:
    """A look at a SQLite file that takes no lock and writes nothing (``immutable=1``: no journal,
    no ``-shm``), through this same driver. Never through another SQLite library (the stdlib's,
    beside sqlean): its close drops every POSIX lock this process's store connections hold on the
    file, SQLite's bookkeeping then never takes them again, and another process's last close
    checkpoints and deletes the WAL under them ("database disk image is malformed" on a healthy
    store, moved aside and rebuilt). One library tracks its own opens of a file and keeps them."""
    return sqlite3.connect(f"file:{Path(path).as_posix()}?mode=ro&immutable=1", uri=True, check_same_thread=False)


_vec_lock = threading.Lock()


def bundled_vec_path() -> str:
    """The sqlite-vec loadable from the ``sqlite-vec`` wheel, found without importing
    the package (its ``__init__`` imports numpy: ~60 ms of CLI start-up)."""
    import importlib.util

    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the sqlite-vec package is not installed")
    return str(Path(list(spec.submodule_search_locations)[0]) / "vec0")


def load_vector_extension(conn: Connection, extension_path: str | None = None) -> str | None:
    """Load sqlite-vec into ``conn``. Returns None on success, else the error text.

    A failure is never fatal: the store falls back to in-process cosine (F6).
    """
    if extension_path and not Path(extension_path).expanduser().is_file():
        # SQLite retries a missing name with ".so" appended and reports that ("vec0.so.so").
        return f"store.vector.extensionPath {extension_path}: no such file"
    try:
        with _vec_lock:
            conn.enable_load_extension(True)
            try:
                conn.load_extension(str(Path(extension_path).expanduser()) if extension_path
                                    else bundled_vec_path())
            finally:
                conn.enable_load_extension(False)
        conn.execute("SELECT vec_version()").fetchone()
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means "no sqlite-vec"
        return f"{type(exc).__name__}: {exc}"


def fts5_available(conn: Connection) -> bool:
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.__fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.__fts5_probe")
        return True
    except Error:
        return False


