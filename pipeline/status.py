"""What an agent's index holds and which backend/provider serves it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from memindex.pipeline.display import escape_controls
from memindex.pipeline.errors import StoreCorrupt, StoreError, checked_call, require
from memindex.pipeline.store import db
from memindex.pipeline.config.openclaw_schema import reads_store_path
from memindex.pipeline.config.settings import STORE_PATH_ENV, AgentSettings
from memindex.pipeline.embeddings.embedder import chunk_embedder_for, probe_timeout_s, provider_answered, provider_info
from memindex.pipeline.index.sessions import discover_sessions, symlink_on_the_way
from memindex.pipeline.index.workspace import (
    MEMORY_DIR, ListingFacts, iter_discover, rel_path, resolve_extra_paths, roots_refusal,
)
from memindex.pipeline.store.schema import fts_table, vec_dims_key, vec_table
from memindex.pipeline.index.failures import read_failures
from memindex.pipeline.index.fingerprint import other_workspace
from memindex.pipeline.store.health import disk_free
from memindex.pipeline.store.reader import ReadSnapshot, StoreReader, open_reader


@checked_call("index_status")
def index_status(settings: AgentSettings, provider: dict[str, Any] | None = None, *,
                 invariant: bool = False) -> dict[str, Any]:
    """A JSON-able status report. ``provider`` describes the embedding provider, if any (the CLI
    resolves the configured one); without it, the provider whose vectors the live index holds.
    ``invariant`` (``status --deep``) adds the store invariant check, which reads every row."""
    require("settings", settings, AgentSettings)
    require("provider", provider, dict, optional=True)
    reader = open_reader(settings)
    out: dict[str, Any] = {
        "agent": settings.agent_id,
        "backend": settings.memory.backend,
        "enabled": settings.enabled,
        "workspace": str(settings.workspace),
        "store": str(settings.store_path),
        "driver": db.DRIVER,
        "configSchema": settings.config_schema,
        "openclawIndex": _openclaw_index(settings),
        "sources": settings.sources,
        "extraPaths": settings.memory_search.extra_paths,
        "provider": (provider or {}).get("provider", "none"),
        "model": (provider or {}).get("model", "fts-only"),
        "providerReason": (provider or {}).get("reason"),
        "providerFallback": bool((provider or {}).get("fallback")),
        "providerFallbackReason": (provider or {}).get("fallbackReason"),
        "requestedProvider": settings.memory_search.provider,
        "files": 0,
        "chunks": 0,
        "sourceCounts": [],
        "pending": 0,
        "problems": [],
        "batch": _batch_settings(settings),
    }
    try:
        try:
            with reader.snapshot() as snap:  # counts of one generation, even while a rebuild replaces it
                _fill_index_status(out, settings, reader, snap)
                _add_failures(out, settings, reader, snap.state)
            if invariant:
                out["invariant"] = reader.check_invariant()
        except StoreError as exc:  # a damaged store is reported, never a traceback
            out.setdefault("indexed", False)
            out.setdefault("vector", _vector_info(reader, False, None))
            out.setdefault("fts", {"enabled": True, "available": None, "error": None})
            out["damaged"] = str(exc)
            if not isinstance(exc, StoreCorrupt):  # not moved aside and rebuilt: the problem says why
                out["corrupt"] = False
            out["problems"].append({"path": str(settings.store_path), "error": str(exc)})
            if invariant:
                out["invariant"] = {"ok": False, "problems": [str(exc)]}
        refused = roots_refusal(settings) if settings.enabled and "memory" in settings.sources else None
        if refused:  # cheap (the walk is `scan`'s): no sync runs while it holds
            out["indexRefused"] = refused
        # OpenClaw's "dirty": the index does not yet reflect the disk (never built, files
        # waiting for their write, or a rebuild in progress).
        live = out.get("fingerprint") or {}
        if provider is None and live.get("provider"):  # (a library caller: the index says who serves)
            out["provider"], out["model"] = live["provider"], live.get("model", out["model"])
        fallback = settings.memory_search.fallback
        if (live.get("provider") not in (None, "none", out["provider"]) and fallback not in (None, "none")
                and live.get("provider") == fallback):
            # The primary failed while indexing and the fallback built the index: say who serves.
            out["providerFallback"] = True
            out["providerFallbackReason"] = out["providerFallbackReason"] or (
                f"{out['provider']} failed while indexing; the index holds {fallback}'s vectors")
            out["provider"], out["model"] = live["provider"], live.get("model", out["model"])
        stale = []
        broken = (provider or {}).get("error")
        if out.get("indexed") and broken and live.get("provider") not in (None, "none"):
            # The configured provider cannot be built (its model file gone, ...): no sync rebuilds
            # anything (`index` fails on it), so "the config now selects none: index rebuilds it" misled.
            stale.append(f"the configured provider cannot be used ({broken}): "
                         f"the index keeps its {live['provider']} / {live.get('model')} vectors and searches "
                         "are keyword-only until that is fixed")
        elif (out.get("indexed") and provider is not None and live.get("provider") is not None
                and (live["provider"], live.get("model")) != (out["provider"], out["model"])):
            # The config now selects another provider or model: until a sync rebuilds, searches
            # cannot embed queries in the index's space and answer by keyword only.
            stale.append(f"the index holds {live['provider']} / {live.get('model')} vectors, the config now "
                         f"selects {out['provider']} / {out['model']}: `memindex index` rebuilds it "
                         "(searches are keyword-only until then)")
        elif (out.get("indexed") and provider is not None and provider.get("providerKey")
              and live.get("provider") == out["provider"] and live.get("providerKey") not in (None, provider["providerKey"])
              and not out.get("providerFallback")):
            # Same provider and model, another endpoint: remote.baseUrl, outputDimensionality or a
            # header changed. Search already refuses the index's space ("reindex needed").
            stale.append(f"the index holds {live['provider']} / {live.get('model')} vectors from another endpoint "
                         "or size (remote.baseUrl, outputDimensionality or remote.headers changed): "
                         "`memindex index` rebuilds it (searches are keyword-only until then)")
        indexed_sources = live.get("sources")
        if out.get("indexed") and indexed_sources is not None and indexed_sources != sorted(settings.sources):
            # Search already serves only the configured sources; the store catches up on the next sync.
            stale.append(f"the index holds sources {indexed_sources}, the config now names "
                         f"{sorted(settings.sources)}: run `memindex index`")
        for key, want in (("chunkTokens", settings.chunk_tokens), ("chunkOverlap", settings.chunk_overlap)):
            have = live.get(key)
            if out.get("indexed") and have is not None and have != want:
                stale.append(f"the index was chunked with {key} {have}, the config now says {want}: "
                             "`memindex index` rebuilds it")
        held = other_workspace(live, settings)
        if out.get("indexed") and held is not None:
            stale.append(f"the index holds the files of workspace {held}, not {settings.workspace}: "
                         "`memindex index` rebuilds it (searches answer nothing until then)")
        if stale:
            out["configChanged"] = "; ".join(stale)
        out["diskFree"] = disk_free(settings.store_path)
        # Files waiting for their vectors (the provider failed) are keyword-only until a sync retries them.
        out["dirty"] = bool(not out["indexed"] or out["pending"] or out.get("rebuilding") or out.get("configChanged")
                            or out.get("vectorsPending"))
        return out
    finally:
        reader.close()


def described_status(settings: AgentSettings) -> dict[str, Any]:
    """``index_status`` with the provider as ``memindex status`` describes it: the configured
    one, with the reason when there is none."""
    return index_status(settings, provider_info(settings))


# Below this much free space on the store's filesystem `status` says writes may fail: a full disk
# can leave nothing written beside the store either, so no recorded error would say why.
LOW_DISK_BYTES = 16 * 2**20


def _fill_index_status(out: dict[str, Any], settings: AgentSettings, reader: StoreReader,
                       snap: ReadSnapshot) -> None:
    st = snap.state
    gen = st.live_generation
    out["indexed"] = gen is not None
    out["generation"] = gen
    out["fingerprint"] = st.live_fingerprint
    if st.building_generation is not None:
        # Its files still to write: `pending` counts the live generation's only, and read 0 while
        # `memindex queues` showed 215 files of the rebuild waiting.
        out["rebuilding"] = {"generation": st.building_generation, "fingerprint": st.building_fingerprint,
                             "pending": reader.pending_count(st.building_generation)}
    last = st.extra.get("last_sync_at")
    out["lastSyncAt"] = int(last) if last else None
    vec_dims = st.extra.get(vec_dims_key(gen)) if gen else None
    if gen is None:
        out["vector"] = _vector_info(reader, False, None)
        out["fts"] = {"enabled": True, "available": None, "error": None}
        return
    for source, files, chunks in snap.source_counts():
        out["sourceCounts"].append({"source": source, "files": files, "chunks": chunks})
        out["files"] += files
    out["chunks"] = snap.chunk_count()
    out["pending"] = snap.pending_count()
    out["problems"] = [{"path": p, "error": e} for p, e in snap.problems(50)]
    counts = snap.problem_counts()
    out["problemCount"] = counts["problems"]  # the list above stops at 50
    out["skipped"], out["vectorsPending"] = counts["skipped"], counts["vectorsPending"]
    out["vectorsQueued"] = counts["vectorsQueued"]
    fts = snap.table_exists(fts_table(gen))
    out["fts"] = {"enabled": True, "available": fts, "error": None if fts else "no FTS5 table in the live index"}
    out["vector"] = _vector_info(reader, snap.table_exists(vec_table(gen)), vec_dims)
    out["cache"] = {
        "enabled": settings.memory_search.cache.enabled,
        "entries": snap.cache_entries(),
        "maxEntries": settings.memory_search.cache.max_entries,
    }


def _add_failures(out: dict[str, Any], settings: AgentSettings, reader: StoreReader, st: Any) -> None:
    """The last error the workers recorded, and the files still pending because they failed."""
    rec = read_failures(settings.store_path)
    pending = reader.pending_paths(st.building_generation or st.live_generation)
    # Failures before the plan these files are pending in belong to earlier attempts: a healthy
    # rebuild listed every file that had ever failed (50 files "503: down" from an outage long over).
    planned_ms = st.last_plan_ns // 1_000_000
    failing = [{"path": p, "error": f["reason"], "hint": f.get("hint")}
               for p, f in rec["files"].items() if p in pending and int(f.get("at") or 0) >= planned_ms]
    out["problems"].extend(failing[:50])
    # The last error while it still holds something back: files pending or keyword-only. Once a
    # later sync has written everything, it is history (it stayed, and its count grew, forever).
    last = rec["lastError"]
    if last is not None:
        still = sum(1 for f in failing if f["error"] == last.get("reason"))
        if still:
            last = {**last, "count": still}
        elif (not pending and not out.get("vectorsPending")) or int(last.get("at") or 0) < planned_ms:
            last = None
    out["lastError"] = last


def _vectors_pending(pending: int, queued: int) -> str:
    """Files searchable by keyword only: those whose vectors failed (a provider error) and those
    written text-first whose vectors are queued or were cut off (an interrupted `watch` or `index`:
    nothing failed, and "vectors failed" sent people looking for an error)."""
    failed = pending - queued
    return ((f", {failed} keyword-only (vectors failed; the next sync retries)" if failed else "")
            + (f", {queued} keyword-only until their queued vectors are written (if none runs, `memindex index` "
               "takes them)" if queued else ""))


def _indexed_files(indexed: int, scan: dict[str, Any] | None) -> str:
    """OpenClaw's "indexed/on disk" ("12/14 files"). More indexed than listed ("2/1") read as a
    miscount: the rest are files kept from a directory that cannot be read now, deleted since the
    last sync, or of another workspace, which the lines below name."""
    total = (scan or {}).get("totalFiles")
    if total is None:
        return f"{indexed}/? files"
    if indexed > total:
        return f"{indexed} files ({total} listed on disk now; the lines below say why)"
    return f"{indexed}/{total} files"


def _vector_info(reader: Any, has_table: bool, dims: str | None) -> dict[str, Any]:
    enabled = reader.vector_enabled
    if not enabled:
        backend = "off"
    elif reader.vector_error is None:
        backend = "sqlite-vec"
    else:
        backend = "in-process"
    return {"enabled": enabled, "available": enabled and (has_table or backend == "in-process"),
            "backend": backend, "extensionPath": reader.extension_path if backend == "sqlite-vec" else None,
            "loadError": reader.vector_error, "dims": int(dims) if dims else None, "table": has_table}


def _batch_settings(settings: AgentSettings) -> dict[str, Any]:
    """remote.batch as OpenClaw's status reports it (job counts live with the batch workers)."""
    b = settings.memory_search.remote.batch
    return {"enabled": bool(b.enabled), "wait": bool(b.wait), "concurrency": b.concurrency,
            "pollIntervalMs": b.poll_interval_ms, "timeoutMs": int(b.timeout_minutes * 60_000)}


def _first_few(ws: Path, paths: list[str]) -> str:
    """Three workspace-relative paths, and how many more."""
    n = len(paths)
    return ", ".join(rel_path(ws, Path(s)) for s in paths[:3]) + (f" and {n - 3} more" if n > 3 else "")


def _skipped_entries(facts: ListingFacts, root: Path, symlinks: str, specials: str) -> list[str]:
    """The issue lines for the symlinks and special files a listing skipped."""
    out = []
    if facts.symlinks:
        out.append(f"{len(facts.symlinks)} {symlinks}: {_first_few(root, facts.symlinks)}")
    if facts.specials:
        out.append(f"{len(facts.specials)} special file(s) (FIFO, socket or device) {specials} not read: "
                   f"{_first_few(root, facts.specials)}")
    return out


def source_scan(settings: AgentSettings) -> dict[str, Any]:
    """Files on disk per source and what looks wrong (OpenClaw's ``scan`` in ``status --json``)."""
    scans: list[dict[str, Any]] = []
    if "memory" in settings.sources:
        issues: list[str] = []
        ws = settings.workspace
        # What makes `index` refuse this agent (a missing workspace, a too-broad extraPaths entry);
        # a disabled agent is never indexed: nothing is refused.
        refused = roots_refusal(settings) if settings.enabled else None
        if refused:
            issues.append(f"index refused: {refused}")
        if ws.is_dir() and not (ws / MEMORY_DIR).is_dir():
            issues.append(f"memory directory missing ({ws / MEMORY_DIR})")
        for extra in resolve_extra_paths(settings):
            if not os.path.lexists(extra):
                issues.append(f"additional memory path missing ({extra})")
        facts = ListingFacts()
        total = sum(1 for f in iter_discover(settings, facts=facts) if f.kind == "markdown")
        for d, why in facts.unreadable[:5]:
            issues.append(f"cannot read directory {rel_path(ws, Path(d))} ({why}); the files indexed from it are "
                          "kept as they were")
        if len(facts.unreadable) > 5:
            issues.append(f"{len(facts.unreadable) - 5} more unreadable directories")
        issues += _skipped_entries(facts, ws, "symlink(s) not followed (memory files are never read through a "
                                   "symlink; move the files themselves in place)", "with a memory file's name")
        if total == 0 and not issues:
            issues.append(f"no memory files found in {ws}")
        scans.append({"source": "memory", "totalFiles": total, "issues": issues})
    if "sessions" in settings.sources:
        sessions_dir = settings.sessions_dir
        try:
            link = symlink_on_the_way(settings)
            if link is not None:  # refused (it could be another agent's transcripts): said, not silent
                what = "sessions directory" if link == sessions_dir else "agent directory"
                scans.append({"source": "sessions", "totalFiles": 0, "issues": [
                    f"{what} {link} is a symlink; not read (transcripts are never read through a "
                    "symlink: it could point at another agent's)"]})
            else:
                os.scandir(sessions_dir).close()  # missing / not accessible: the lines below
                facts = ListingFacts()
                total = len(discover_sessions(settings, facts))
                issues = _skipped_entries(facts, sessions_dir, "symlinked transcript(s) not followed",
                                          "named like a transcript")
                scans.append({"source": "sessions", "totalFiles": total, "issues": issues})
        except FileNotFoundError:
            scans.append({"source": "sessions", "totalFiles": 0,
                          "issues": [f"sessions directory missing ({sessions_dir})"]})
        except OSError as exc:
            scans.append({"source": "sessions", "totalFiles": None,
                          "issues": [f"sessions directory not accessible ({sessions_dir}): {exc.strerror}"]})
    totals = [sc["totalFiles"] for sc in scans]
    return {"sources": scans, "totalFiles": None if None in totals else sum(totals),
            "issues": [i for sc in scans for i in sc["issues"]]}


def embedding_probe(settings: AgentSettings) -> dict[str, Any]:
    """``status --deep``: one real embedding request (OpenClaw embeds ``"ping"``), with its latency.

    One attempt, bounded by ``PROBE_TIMEOUT_S`` (or the provider's own query budget, if longer):
    the indexing path's retries and backoff made a refused connection take 19 s and a provider
    that never answers 240 s."""
    try:
        embedder = chunk_embedder_for(settings)
        if embedder is None:
            return {"ok": False, "error": provider_info(settings).get("reason") or "no embedding provider"}
        started = time.monotonic()
        pid = embedder.service.choice.primary.id if embedder.service.choice.primary else None
        result = embedder.service.embed_query("ping", timeout_s=probe_timeout_s(pid))
    except Exception as exc:  # noqa: BLE001 - the probe reports any failure, it never raises
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    provider_answered(settings, result.fingerprint)
    return {"ok": True, "provider": result.provider_id, "model": result.model, "fallback": result.fallback_used,
            "dims": len(result.vectors[0]),
            "latencyMs": round((time.monotonic() - started) * 1000, 1)}


def note_probe(report: dict[str, Any], probe: dict[str, Any] | None) -> None:
    """What a ``status --deep`` probe says about the index: vectors of another size than the
    provider answers now (an endpoint that changed what it serves) make it stale."""
    held = (report.get("vector") or {}).get("dims")
    if not probe or not probe.get("ok") or not held or probe.get("dims") in (None, held):
        return
    if probe.get("provider") != report.get("provider"):
        return  # the fallback answered: its size says nothing about the primary's index
    why = (f"the provider now answers {probe['dims']}-dim vectors and the index holds {held}: "
           "`memindex index --force` rebuilds it (searches are keyword-only until then)")
    report["configChanged"] = f"{report['configChanged']}; {why}" if report.get("configChanged") else why
    report["dirty"] = True


def _openclaw_index(settings: AgentSettings) -> dict[str, Any] | None:
    """Where OpenClaw keeps its own index for this agent, when there is one (memindex never opens it)."""
    path = settings.openclaw_store
    if path == settings.store_path:  # 2026.3's memorySearch.store.path names OpenClaw's file too
        return {"path": str(path), "sameFile": True, "setting": settings.store_setting}
    if path is None or not path.exists():
        return None
    return {"path": str(path), "bytes": path.stat().st_size}


def _openclaw_line(oc: dict[str, Any], schema: str) -> str:
    if not oc.get("sameFile"):
        return f"openclaw:     {oc['path']}  (OpenClaw's own index; memindex never opens it)"
    setting = oc.get("setting") or "memorySearch.store.path"
    if setting != STORE_PATH_ENV and reads_store_path(schema):  # 2026.3: the one key names both files
        return (f"openclaw:     the same file is OpenClaw's index path ({setting} is its key too): "
                "set MEMINDEX_STORE_PATH to run memindex beside OpenClaw")
    return (f"openclaw:     the same file is OpenClaw's index path ({setting} points memindex at it): "
            "set MEMINDEX_STORE_PATH to a file of memindex's own")


def format_status(s: dict[str, Any], *, probe: dict[str, Any] | None = None, index_error: str | None = None,
                  scan: dict[str, Any] | None = None) -> str:
    lines = [
        f"agent:        {s['agent']}  (backend {s['backend']}{'' if s['enabled'] else ', DISABLED'})",
        f"workspace:    {s['workspace']}",
        f"sources:      {', '.join(s['sources'])}",
        f"store:        {s['store']}  (driver {s['driver']})",
        *([_openclaw_line(s["openclawIndex"], s.get("configSchema") or "")] if s.get("openclawIndex") else []),
        *([f"config:       {s['configSchema']}"] if s.get("configSchema") else []),
        f"indexed:      {_indexed_files(s['files'] - s.get('skipped', 0), scan)}, {s['chunks']} chunks"
        + (f", {s['pending']} pending (queued by a sync; if none runs, `memindex index` takes them)"
           if s.get("pending") else "")
        + (f", {s['skipped']} skipped (see problem lines)" if s.get("skipped") else "")
        + _vectors_pending(s.get("vectorsPending") or 0, s.get("vectorsQueued") or 0)
        + ("" if s.get("indexed") else "  (memory search disabled for this agent: not indexed)"
           if not s.get("enabled", True) else "  (store damaged: `memindex index` moves it aside and rebuilds it)"
           if s.get("damaged") and s.get("corrupt", True) else "  (store unusable: see the problem line)"
           if s.get("damaged") else "  (never indexed: run `memindex index`)"),
    ]
    for sc in s["sourceCounts"]:
        lines.append(f"  {sc['source']:<10} {sc['files']} files, {sc['chunks']} chunks")
    if s.get("extraPaths"):
        lines.append(f"extra paths:  {', '.join(s['extraPaths'])}")
    prov = s["provider"] if s["provider"] != "none" else "none (keyword search only)"
    lines.append(f"provider:     {prov}" + (f" / {s['model']}" if s["provider"] != "none" else ""))
    if s.get("providerReason"):
        lines.append(f"              {s['providerReason']}")
    if s.get("providerFallback") and s.get("providerFallbackReason"):
        lines.append(f"              fallback: {s['providerFallbackReason']}")
    v = s["vector"]
    lines.append(f"vector:       {v['backend']}" + (f", {v['dims']} dims" if v.get("dims") else "")
                 + (f"  ({v['loadError']})" if v.get("loadError") and v["enabled"] else ""))
    fts = s.get("fts", {}).get("available")
    lines.append(f"fts5:         {'on' if fts else ('off' if fts is False else 'not known until the first index')}")
    if s.get("cache"):
        c = s["cache"]
        if c.get("enabled") is False:
            lines.append(f"cache:        disabled ({c['entries']} embeddings kept from before)")
        else:  # maxEntries None or 0: never pruned (OpenClaw prunes only when it is above 0)
            limit = f"max {c['maxEntries']}" if c.get("maxEntries") else "no limit"
            lines.append(f"cache:        {c['entries']} embeddings ({limit})")
    if s.get("batch") is not None:  # OpenClaw's "Batch: enabled|disabled" line
        lines.append(f"batch:        {'enabled' if s['batch'].get('enabled') else 'disabled'}")
    if s.get("fingerprint"):
        lines.append(f"fingerprint:  {json.dumps(s['fingerprint'], sort_keys=True)}")
    if s.get("rebuilding"):
        r = s["rebuilding"]
        lines.append(f"rebuilding:   generation {r['generation']} in progress"
                     + (f", {r['pending']} file(s) still to write" if r.get("pending") else ""))
    if s.get("configChanged"):
        lines.append(f"stale:        {s['configChanged']}")
    if s.get("diskChanges"):
        d = s["diskChanges"]
        lines.append(f"changed:      {d['toIndex']} file(s) new or changed on disk, {d['toDelete']} deleted since the "
                     "last sync (`memindex index`, or a running `memindex watch`, takes them)")
    if s.get("lastSyncAt"):
        import datetime as _dt

        ts = _dt.datetime.fromtimestamp(s["lastSyncAt"] / 1000, tz=_dt.timezone.utc)
        lines.append(f"last sync:    {ts.isoformat(timespec='seconds')}")
    if s.get("qmd"):
        q = s["qmd"]
        lines.append(f"qmd:          {len(q['collections'])} collections ({q['effectiveSearchMode']}), "
                     f"index {q['index']}" + (f"  (last error: {q['lastError']})" if q.get("lastError") else ""))
    if s.get("fallback"):
        fb = s["fallback"]
        lines.append(f"fallback:     {fb['from']} unavailable, serving builtin ({fb.get('reason')})")
    if s.get("diskFree") is not None and s["diskFree"] < LOW_DISK_BYTES:
        lines.append(f"disk:         {s['diskFree']:,} bytes free where the store is: writes fail when it is full "
                     "(free some space, then `memindex index` writes what is pending)")
    if s.get("lastError"):
        import datetime as _dt

        e = s["lastError"]
        ts = _dt.datetime.fromtimestamp(e["at"] / 1000, tz=_dt.timezone.utc)
        lines.append(f"last error:   {ts.isoformat(timespec='seconds')}  {e['reason']}  ({e['count']} file(s); "
                     f"{e.get('hint')})")
    if probe is not None:
        lines.append(f"embeddings:   ready ({probe['provider']} / {probe['model']}, {probe['latencyMs']} ms)"
                     if probe["ok"] else f"embeddings:   unavailable ({probe['error']})")
    if index_error:
        lines.append(f"index error:  {index_error}")
    if s.get("brokerError"):
        lines.append(f"broker:       {s['brokerError']} (batch jobs unknown; the index above is read from the store)")
    if s.get("brokerFull"):  # Redis out of memory: pending files wait for it
        lines.append(f"broker:       {s['brokerFull']}")
    if s.get("invariant") is not None:
        inv = s["invariant"]
        lines.append("store check:  ok (integrity, no orphan rows)" if inv["ok"]
                     else f"store check:  FAILED: {'; '.join(inv['problems'])}")
    # One line per distinct error once three files share it (a provider failure printed 50
    # identical lines per agent).
    by_error: dict[str, list[str]] = {}
    for p in s.get("problems", []):
        by_error.setdefault(p["error"], []).append(p["path"])
    for error, paths in by_error.items():
        if len(paths) < 3:
            lines.extend(f"problem:      {path}: {error}" for path in paths)
        else:
            lines.append(f"problem:      {len(paths)} file(s) ({', '.join(paths[:2])}, ...): {error}")
    more = s.get("problemCount", 0) - sum(1 for p in s.get("problems", []) if "hint" not in p)
    if more > 0:
        lines.append(f"problem:      ... and {more} more file(s) (status --json lists 50)")
    for issue in (scan or {}).get("issues", []):
        lines.append(f"issue:        {issue}")
    return "\n".join(map(escape_controls, lines))  # a file name with a newline is still one line


# --- OpenClaw's shape ---------------------------------------------------------------------------

# OpenClaw's status() keys, in its order; each is always present in ours.
STATUS_KEYS = ("backend", "files", "chunks", "dirty", "workspaceDir", "dbPath", "provider", "model",
               "requestedProvider", "sources", "extraPaths", "sourceCounts", "cache", "fts", "fallback",
               "vector", "batch")


def status_entry(report: dict[str, Any], *, embedding_probe: dict[str, Any] | None = None,
                 index_error: str | None = None, scan: dict[str, Any] | None = None,
                 batch_jobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One element of ``status --json``: ``{agentId, status, embeddingProbe, indexError, scan}``."""
    status = dict(report)
    status["workspaceDir"] = report["workspace"]
    status["dbPath"] = report["store"]
    status["fallback"] = report.get("fallback") or _provider_fallback(report)
    status.setdefault("cache", {"enabled": None, "entries": None, "maxEntries": None})
    status["batch"] = {**report["batch"], **_batch_counts(batch_jobs or [])}
    status["custom"] = {"searchMode": "fts-only" if report["provider"] == "none" else "hybrid",
                        "providerUnavailableReason": report.get("providerReason")
                        if report["provider"] == "none" else None}
    ordered = {k: status[k] for k in STATUS_KEYS}
    ordered.update((k, v) for k, v in status.items() if k not in ordered)
    return {"agentId": report["agent"], "status": ordered, "embeddingProbe": embedding_probe,
            "indexError": index_error, "scan": scan}


def _provider_fallback(report: dict[str, Any]) -> dict[str, Any] | None:
    """A provider that failed over: OpenClaw's ``fallback {from, reason}``."""
    if not report.get("providerFallback"):
        return None
    return {"from": report.get("requestedProvider"), "reason": report.get("providerFallbackReason")}


def _batch_counts(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Failure counts from the batch jobs on record. memindex never switches batching off after
    failures (each failed item goes the synchronous way), hence no ``limit``."""
    failed = [j for j in jobs if j.get("error")]
    last = jobs[0] if jobs else None
    return {"failures": len(failed), "limit": None, "lastError": failed[0]["error"] if failed else None,
            "lastProvider": last["provider"] if last else None}
