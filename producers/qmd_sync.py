"""Keep an agent's qmd index fresh: boot update, then ``update.interval`` /
``embedInterval`` runs (F15). Producers own this schedule; the search path
never triggers an update.

``start_qmd_sync(settings)`` is what a long-running process (watch, worker
host) calls; ``sync_qmd_now(settings)`` is the one-shot for ``memindex index``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.search.qmd.manager import QmdManager, manager_for
from memindex.pipeline.errors import QmdError

log = logging.getLogger("memindex.qmd_sync")


class QmdSyncLoop:
    """A daemon thread calling ``QmdManager.update`` on the configured schedule."""

    def __init__(self, manager: QmdManager) -> None:
        self.manager = manager
        up = manager.cfg.update
        self.interval_s = up.interval / 1000 if up.interval > 0 else None
        embed_s = up.embed_interval / 1000 if up.embed_interval > 0 else None
        if manager.cfg.search_mode == "search":
            embed_s = None  # nothing to embed for BM25-only search
        # Wake often enough for whichever of update/embed is due first.
        ticks = [t for t in (self.interval_s, embed_s) if t]
        self.tick_s = min(ticks) if ticks else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0

    def start(self) -> "QmdSyncLoop":
        up = self.manager.cfg.update
        boot = up.on_boot
        if boot and up.wait_for_boot_sync:
            self._run("boot", force=True)
            boot = False
        self._thread = threading.Thread(target=self._loop, args=(boot,), daemon=True,
                                        name=f"qmd-sync-{self.manager.settings.agent_id}")
        self._thread.start()
        return self

    def _run(self, reason: str, *, force: bool = False) -> None:
        try:
            self.manager.update(reason, force=force)
        except QmdError as exc:
            log.warning("qmd %s update failed for %s: %s", reason, self.manager.settings.agent_id, exc)
        except Exception:  # noqa: BLE001 - the schedule must survive anything one run does
            log.exception("qmd %s update crashed", reason)
        self.runs += 1

    def _loop(self, boot: bool) -> None:
        if boot:
            self._run("boot", force=True)
        if self.tick_s is None:
            return
        while not self._stop.wait(self.tick_s):
            self._run("interval")

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        # Do not wait out a long embed (searches sharing the runner keep running).
        self.manager.runner.kill_all(("update", "embed", "collection"))
        if self._thread is not None:
            self._thread.join(timeout)


def start_qmd_sync(settings: AgentSettings, *, manager: QmdManager | None = None) -> QmdSyncLoop | None:
    """Start the schedule for a qmd-backed agent; None for the builtin backend."""
    if settings.memory.backend != "qmd" or not settings.enabled:
        return None
    return QmdSyncLoop(manager or manager_for(settings)).start()


def sync_qmd_now(settings: AgentSettings, *, reason: str = "cli", force: bool = True,
                 manager: QmdManager | None = None) -> dict[str, Any]:
    """One update (+ embed when due) now; raises QmdError if qmd fails."""
    return (manager or manager_for(settings)).update(reason, force=force)
