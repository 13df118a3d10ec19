"""What an agent's index holds and which backend/provider serves it."""

from __future__ import annotations

import json
from typing import Any

from . import db
from .config import AgentSettings
from .schema import chunks_table, files_table, vec_table
from .store import open_reader


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
    conn = reader.conn()
    try:
        st = reader.state()
        gen = st.live_generation
        out["indexed"] = gen is not None
        out["generation"] = gen
        out["fingerprint"] = st.live_fingerprint
        if st.building_generation is not None:
            out["rebuilding"] = {"generation": st.building_generation, "fingerprint": st.building_fingerprint}
        last = st.extra.get("last_sync_at")
        out["lastSyncAt"] = int(last) if last else None
        vec_dims = st.extra.get(f"vec_dims_g{gen}") if gen else None
        if conn is None or gen is None:
            out["vector"] = _vector_info(reader, False, None)
            out["fts"] = {"available": None}
            return out
        for source, files, chunks in conn.execute(
            f"SELECT f.source, count(*), coalesce(sum(f.chunks), 0) FROM {files_table(gen)} f GROUP BY f.source"
        ):
            out["sourceCounts"].append({"source": source, "files": files, "chunks": chunks})
            out["files"] += files
        out["chunks"] = conn.execute(f"SELECT count(*) FROM {chunks_table(gen)}").fetchone()[0]
        out["pending"] = reader.pending_count(gen)
        out["problems"] = [
            {"path": p, "error": e} for p, e in conn.execute(
                f"SELECT path, error FROM {files_table(gen)} WHERE error IS NOT NULL ORDER BY path LIMIT 50")
        ]
        out["fts"] = {"available": reader.table_exists(f"fts_g{gen}")}
        out["vector"] = _vector_info(reader, reader.table_exists(vec_table(gen)), vec_dims)
        out["cache"] = {
            "enabled": settings.memory_search["cache"]["enabled"],
            "entries": conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0],
            "maxEntries": settings.memory_search["cache"]["maxEntries"],
        }
        return out
    finally:
        reader.close()


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
