"""One agent's qmd: collections, update/embed runs and searches.

The manager only *does* things when asked: producers (``memindex.producers.qmd_sync``)
decide when to update and embed; the search path only searches. Every
failure surfaces as a ``QmdError`` so the caller (``memindex.pipeline.search.backend``) can
fall back to the built-in store.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Callable

from memindex.pipeline.config.agents import PerSettings
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.search.engine import SearchResult
from memindex.pipeline.search.qmd.collections import Collection, ensure_collections, managed_collections
from memindex.pipeline.search.qmd.parse import map_results, parse_search_json
from memindex.pipeline.errors import QmdError
from memindex.pipeline.search.qmd.runner import QmdFailed, QmdOutput, QmdRunner, QmdTimeout, qmd_home
from memindex.pipeline.search.qmd.sessions_export import export_sessions

log = logging.getLogger("memindex.qmd")

_UNKNOWN_FLAG = re.compile(r"unknown (flag|option)|unrecognized (option|argument)|invalid option|"
                           r"unexpected (flag|option|argument)", re.I)
_MISSING_COLLECTION = re.compile(r"collection (not found|.*does not exist|.*not exist)", re.I)
_BUSY = re.compile(r"SQLITE_BUSY|database is locked", re.I)
_NEEDS_REBUILD = re.compile(r"UNIQUE constraint failed: documents\.collection, documents\.path|ENOTDIR", re.I)

# Embedding loads a model per process: one embed at a time across all agents.
_EMBED_LOCK = threading.Lock()
PENDING_UPDATE_WAIT_S = 0.5
BOOT_UPDATE_ATTEMPTS = 3


class QmdManager:
    """Thread-safe; share one per agent (``manager_for``) so debounce and locks are shared."""

    def __init__(self, settings: AgentSettings, *, runner: QmdRunner | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        self.cfg = settings.memory.qmd
        self.runner = runner or QmdRunner(settings)
        self.collections: list[Collection] = managed_collections(settings)
        self.clock = clock
        self.sleep = sleep
        self._update_lock = threading.Lock()
        self._collections_lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._collections_ready = False
        self._mode_override: str | None = None
        self.last_update_at: float | None = None  # wall clock, for status
        self._last_update_mono: float | None = None
        self._last_embed_mono: float | None = None
        self.last_embed_at: float | None = None
        self.embed_failures = 0
        self._embed_backoff_until = 0.0
        self.last_error: str | None = None

    # -- collections ---------------------------------------------------------------
    def ensure_collections(self, *, force: bool = False) -> dict[str, Any]:
        with self._collections_lock:  # an update and a search repair may race here
            if self._collections_ready and not force:
                return {}
            report = ensure_collections(self.runner, self.settings)
            self._collections_ready = not report["errors"]
            return report

    # -- update / embed -------------------------------------------------------------
    def update(self, reason: str = "manual", *, force: bool = False) -> dict[str, Any]:
        """Export sessions, ``qmd update``, then ``qmd embed`` when due.

        Non-forced calls are skipped within ``debounceMs`` of the last update
        and join a running one; forced calls queue behind it. Raises QmdError
        when ``qmd update`` fails (an embed failure only backs embedding off).
        """
        if not force:
            if self._update_lock.locked():
                self._idle.wait()
                return {"reason": reason, "skipped": "joined a running update"}
            last = self._last_update_mono
            if last is not None and (self.clock() - last) * 1000 < self.cfg.update.debounce_ms:
                return {"reason": reason, "skipped": "debounced"}
        with self._update_lock:
            self._idle.clear()
            try:
                report = self._run_update(reason, force)
                self.last_error = None
                return report
            except QmdError as exc:
                self.last_error = str(exc)
                raise
            finally:
                self._idle.set()

    def _run_update(self, reason: str, force: bool) -> dict[str, Any]:
        up = self.cfg.update
        report: dict[str, Any] = {"reason": reason}
        if self.cfg.sessions.enabled:
            exp = export_sessions(self.settings)
            report["sessions"] = {"written": len(exp.written), "deleted": len(exp.deleted),
                                  "skippedOld": len(exp.skipped_old)}
        report["collections"] = self.ensure_collections()
        attempts = BOOT_UPDATE_ATTEMPTS if reason == "boot" else 1
        repaired = False
        n = 0
        while True:
            n += 1
            try:
                self.runner.run(["update"], timeout_ms=up.update_timeout_ms, discard_stdout=True)
                break
            except QmdFailed as exc:
                if not repaired and _NEEDS_REBUILD.search(exc.stderr):
                    repaired = True
                    self._rebuild_collections()
                    continue
                if n < attempts and _BUSY.search(exc.stderr):
                    self.sleep(0.5 * 2 ** (n - 1))
                    continue
                raise
            except QmdTimeout:
                if n < attempts:
                    self.sleep(0.5 * 2 ** (n - 1))
                    continue
                raise
        report["updated"] = True
        report["embed"] = self._maybe_embed(force)
        self._last_update_mono = self.clock()
        self.last_update_at = time.time()
        return report

    def _rebuild_collections(self) -> None:
        timeout = self.cfg.update.command_timeout_ms
        for c in self.collections:
            self.runner.run(["collection", "remove", c.name], timeout_ms=timeout, check=False)
        self.ensure_collections(force=True)

    def embed_due(self, force: bool = False) -> bool:
        if self.cfg.search_mode == "search":  # BM25 only: vectors would never be read
            return False
        now = self.clock()
        if now < self._embed_backoff_until:
            return False
        last = self._last_embed_mono
        return force or last is None or (now - last) * 1000 >= self.cfg.update.embed_interval

    def _maybe_embed(self, force: bool) -> str:
        if not self.embed_due(force):
            return "skipped"
        with _EMBED_LOCK:
            try:
                self.runner.run(["embed"], timeout_ms=self.cfg.update.embed_timeout_ms, discard_stdout=True)
            except QmdError as exc:
                self.embed_failures += 1
                backoff = min(3600.0, 60.0 * 2 ** (self.embed_failures - 1))
                self._embed_backoff_until = self.clock() + backoff
                log.warning("qmd embed failed for %s (%s); next try in %.0f s",
                            self.settings.agent_id, exc, backoff)
                return f"failed: {exc}"
        self.embed_failures = 0
        self._last_embed_mono = self.clock()
        self.last_embed_at = time.time()
        return "done"

    # -- search ------------------------------------------------------------------------
    @property
    def search_mode(self) -> str:
        return self._mode_override or self.cfg.search_mode

    def search(self, query: str, *, max_results: int | None = None,
               min_score: float | None = None) -> list[SearchResult]:
        """qmd's results mapped to ours; raises QmdError when qmd cannot answer."""
        limits = self.cfg.limits
        limit = min(limits.max_results, max_results or limits.max_results)
        if not self.collections or limit <= 0:
            return []
        self._idle.wait(PENDING_UPDATE_WAIT_S)  # a just-started update may be about to land
        out = self._run_search(self.search_mode, query, limit)
        items = parse_search_json(out.stdout, out.stderr)
        return map_results(items, self.collections, self.settings.workspace,
                           max_snippet_chars=limits.max_snippet_chars,
                           min_score=0.0 if min_score is None else min_score)[:limit]

    def _search_args(self, mode: str, query: str, limit: int) -> list[str]:
        flags = ["--json", "-n", str(limit)]
        for c in self.collections:
            flags += ["-c", c.name]
        # A query starting with "-" would be read as a flag: end the options first.
        return [mode, *flags, "--", query] if query.startswith("-") else [mode, query, *flags]

    def _run_search(self, mode: str, query: str, limit: int) -> QmdOutput:
        timeout = self.cfg.limits.timeout_ms
        repaired = False
        while True:
            try:
                return self.runner.run(self._search_args(mode, query, limit), timeout_ms=timeout)
            except QmdFailed as exc:
                text = exc.stderr + exc.stdout
                if mode != "query" and _UNKNOWN_FLAG.search(text):
                    log.warning("qmd %s rejected its flags (%s); retrying with qmd query",
                                mode, text.strip()[:200])
                    mode = self._mode_override = "query"
                    continue
                if not repaired and _MISSING_COLLECTION.search(text):
                    repaired = True
                    self.ensure_collections(force=True)
                    continue
                raise

    # -- status -----------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        index = qmd_home(self.settings) / "xdg-cache" / "qmd" / "index.sqlite"
        return {
            "command": self.runner.command,
            "searchMode": self.cfg.search_mode,
            "effectiveSearchMode": self.search_mode,
            "collections": [{"name": c.name, "path": str(c.path), "pattern": c.pattern, "kind": c.kind}
                            for c in self.collections],
            "home": str(qmd_home(self.settings)),
            "index": str(index),
            "indexBytes": index.stat().st_size if index.exists() else None,
            "lastUpdateAt": self.last_update_at,
            "lastEmbedAt": self.last_embed_at,
            "embedFailures": self.embed_failures,
            "lastError": self.last_error,
        }

    def probe(self) -> None:
        """Cheap liveness check (``qmd collection list``); raises QmdError."""
        self.runner.run(["collection", "list"], timeout_ms=min(5000, self.cfg.update.command_timeout_ms))

    def close(self) -> None:
        self.runner.kill_all()


_managers: PerSettings[QmdManager] = PerSettings()


def manager_for(settings: AgentSettings, **kwargs: Any) -> QmdManager:
    """One shared manager per agent settings (search and sync must share debounce state)."""
    return _managers.get(settings, lambda: QmdManager(settings, **kwargs))


def close_managers() -> None:
    for m in _managers.pop_all():
        m.close()
