"""Every actor, declared in one import: ``dramatiq memindex.workers.actors:get_broker``.

The flow: ``sync`` (plan) -> ``index`` (read, chunk, cache lookup: file side, ``sync``
queue) -> ``compute`` (embed the misses: ``embed`` queue, no filesystem) -> ``writer``
(the one writer per store), plus the batch-API actors (file side, ``batch`` queue). Importing
this module registers them with ``workers/wire.py``, which declares them on the broker when
``get_broker()`` builds it (what a worker process, ``memindex worker``, and the embedded default
call before they consume). Importing it builds no broker and connects nowhere.
"""

# (``x as x``: re-exported; the actors' names as strings live in workers/wire.py only)
from memindex.workers.batch.actors import batch_finish as batch_finish, batch_poll as batch_poll
from memindex.workers.batch.actors import batch_submit as batch_submit
from memindex.workers.broker import get_broker as get_broker
from memindex.workers.compute import embed_chunks as embed_chunks
from memindex.workers.index import index_files as index_files, index_session_delta as index_session_delta
from memindex.workers.sync import dispatch_plan as dispatch_plan, run_sync as run_sync, sync_agent as sync_agent
from memindex.workers.writer import close_writers as close_writers, write_deletes as write_deletes
from memindex.workers.writer import write_files as write_files, write_parts as write_parts, write_plan as write_plan
from memindex.workers.writer import write_session_append as write_session_append
from memindex.workers.writer import write_text_first as write_text_first, write_touch as write_touch
