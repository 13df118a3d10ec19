"""What an agent's index holds and which backend/provider serves it."""

from __future__ import annotations

import json
from typing import Any

from memindex.pipeline.store import db
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.store.schema import fts_table, vec_table
from memindex.pipeline.store.core import ReadSnapshot, StoreReader, open_reader


def index_status(settings: AgentSettings, provider: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON-able status report. ``provider`` describes the embedding provider, if any."""
    reader = open_reader(settings)
    out: dict[str, Any] = {
        "agent": settings.agent_id,
        "backend": settings.memory["backend"],
        "enabled": settings.enabled,
        "workspace": str(settings.workspace),
        "store": str(settings.store_path),
        "driver": db.DRIVER,
        "sources": settings.sources,
        "extraPaths": settings.memory_search["extraPaths"],
        "provider": (provider or {}).get("provider", "none"),
        "model": (provider or {}).get("model", "fts-only"),
        "providerReason": (provider or {}).get("reason"),
        "files": 0,
        "chunks": 0,
        "sourceCounts": [],
        "pending": 0,
        "problems": [],
    }
    try:
        with reader.snapshot() as snap:  # counts of one generation, even while a rebuild replaces it
            _fill_index_status(out, settings, reader, snap)
        return out
    finally:
        reader.close()


def _fill_index_status(out: dict[str, Any], settings: AgentSettings, reader: StoreReader,
                       snap: ReadSnapshot) -> None:
    st = snap.state
    gen = st.live_generation
    out["indexed"] = gen is not None
    out["generation"] = gen
    out["fingerprint"] = st.live_fingerprint
    if st.building_generation is not None:
        out["rebuilding"] = {"generation": st.building_generation, "fingerprint": st.building_fingerprint}
    last = st.extra.get("last_sync_at")
    out["lastSyncAt"] = int(last) if last else None
    vec_dims = st.extra.get(f"vec_dims_g{gen}") if gen else None
    if gen is None:
        out["vector"] = _vector_info(reader, False, None)
        out["fts"] = {"available": None}
        return
    for source, files, chunks in snap.source_counts():
        out["sourceCounts"].append({"source": source, "files": files, "chunks": chunks})
        out["files"] += files
    out["chunks"] = snap.chunk_count()
    out["pending"] = snap.pending_count()
    out["problems"] = [{"path": p, "error": e} for p, e in snap.problems(50)]
    out["fts"] = {"available": snap.table_exists(fts_table(gen))}
    out["vector"] = _vector_info(reader, snap.table_exists(vec_table(gen)), vec_dims)
    out["cache"] = {
        "enabled": settings.memory_search["cache"]["enabled"],
        "entries": snap.cache_entries(),
        "maxEntries": settings.memory_search["cache"]["maxEntries"],
    }


def _vector_info(reader: Any, has_table: bool, dims: str | None) -> dict[str, Any]:
    enabled = reader.vector_enabled
    if not enabled:
        backend = "off"
    elif reader.vector_error is None:
        backend = "sqlite-vec"
    else:
        backend = "in-process"
    return {"enabled": enabled, "backend": backend, "loadError": reader.vector_error,
            "dims": int(dims) if dims else None, "table": has_table}


def format_status(s: dict[str, Any]) -> str:
    lines = [
        f"agent:        {s['agent']}  (backend {s['backend']}{'' if s['enabled'] else ', DISABLED'})",
        f"workspace:    {s['workspace']}",
        f"store:        {s['store']}  (driver {s['driver']})",
        f"indexed:      {s['files']} files, {s['chunks']} chunks"
        + (f", {s['pending']} pending" if s.get("pending") else "")
        + ("" if s.get("indexed") else "  (never indexed: run `memindex index`)"),
    ]
    for sc in s["sourceCounts"]:
        lines.append(f"  {sc['source']:<10} {sc['files']} files, {sc['chunks']} chunks")
    prov = s["provider"] if s["provider"] != "none" else "none (keyword search only)"
    lines.append(f"provider:     {prov}" + (f" / {s['model']}" if s["provider"] != "none" else ""))
    if s.get("providerReason"):
        lines.append(f"              {s['providerReason']}")
    v = s["vector"]
    lines.append(f"vector:       {v['backend']}" + (f", {v['dims']} dims" if v.get("dims") else "")
                 + (f"  ({v['loadError']})" if v.get("loadError") and v["enabled"] else ""))
    fts = s.get("fts", {}).get("available")
    lines.append(f"fts5:         {'on' if fts else ('off' if fts is False else 'unknown')}")
    if s.get("cache"):
        c = s["cache"]
        lines.append(f"cache:        {c['entries']} embeddings (max {c['maxEntries']})")
    if s.get("fingerprint"):
        lines.append(f"fingerprint:  {json.dumps(s['fingerprint'], sort_keys=True)}")
    if s.get("rebuilding"):
        lines.append(f"rebuilding:   generation {s['rebuilding']['generation']} in progress")
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
    for p in s.get("problems", []):
        lines.append(f"problem:      {p['path']}: {p['error']}")
    return "\n".join(lines)
