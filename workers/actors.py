"""Every actor, declared in one import: ``dramatiq memindex.workers.actors:get_broker``.

The flow: ``sync`` (plan) -> ``index`` (read, chunk, cache lookup: file side, ``sync``
queue) -> ``compute`` (embed the misses: ``embed`` queue, no filesystem) -> ``writer``
(the one writer per store), plus the batch-API actors (file side, ``batch`` queue). Importing
this module registers them with ``workers/wire.py``, which declares them on the broker when
``get_broker()`` builds it (what a worker process, ``memindex worker``, and the embedded default
call before they consume). Importing it builds no broker and connects nowhere.
"""

from memindex.workers.batch.actors import batch_finish, batch_poll, batch_submit
from memindex.workers.broker import get_broker
from memindex.workers.compute import embed_chunks
from memindex.workers.index import index_files, index_session_delta
from memindex.workers.sync import dispatch_plan, run_sync, sync_agent
from memindex.workers.writer import (
    close_writers,
    write_deletes,
    write_files,
    write_parts,
    write_plan,
    write_session_append,
    write_text_first,
    write_touch,
)

__all__ = [
    "batch_submit", "batch_poll", "batch_finish", "get_broker",
    "close_writers", "dispatch_plan", "embed_chunks", "index_files", "index_session_delta", "run_sync", "sync_agent",
    "write_deletes", "write_files", "write_parts", "write_plan", "write_session_append", "write_text_first",
    "write_touch",
]
