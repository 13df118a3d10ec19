"""Refuse queue messages meant for another deployment (installed on the Redis broker only).

Every message carries its sender's pinned ``Context`` (absolute config path and
state dir). A Redis worker started with ``OPENCLAW_STATE_DIR`` or
``OPENCLAW_CONFIG_PATH`` serves those only: a message naming others fails at
once, before any actor runs, and lands in the dead-letter set with an error
naming both paths (and ``refused`` set); retrying it could never help. dramatiq's own
"Message … was skipped." line for it says "refused and dead-lettered" (``workers/failures.py``). (The embedded broker runs in
the sender's own process, where the sender's flags are the truth.)
"""

from __future__ import annotations

import logging
from typing import Any

from dramatiq.middleware import Middleware, SkipMessage

from memindex.pipeline.config.agents import ContextMismatch, check_message_context
from memindex.pipeline.config.settings import Context
from memindex.workers.failures import _keep_error_on_dead_letter, release_leases

log = logging.getLogger("memindex.guard")
REFUSED = "refused"  # the option a refused message carries on its dead letter


class ContextGuard(Middleware):
    def before_process_message(self, broker: Any, message: Any) -> None:
        ctx = message.args[0] if message.args else None
        if not isinstance(ctx, dict) or "agent_id" not in ctx:
            return  # not an agent message (the batch sweep)
        try:
            check_message_context(Context.from_dict(ctx))
        except ContextMismatch as exc:
            log.error("%s; dead-lettered (`memindex dead-letters` lists it; start this worker with the "
                      "sender's --config/--state-dir paths, then `memindex dead-letters --replay`)", exc)
            message.options["error"] = str(exc)  # what `memindex dead-letters` shows as the reason
            # `backfill --wait` stops waiting for the files it holds, and names it; queues and status count it
            message.options[REFUSED] = True
            _keep_error_on_dead_letter(broker, message)
            release_leases(broker, message)
            message.fail()
            raise SkipMessage(str(exc)) from None
