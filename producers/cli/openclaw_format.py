"""What ``openclaw memory status|search`` print, built from our own reports.

The one place that maps memindex's status report (``pipeline/status.py``) and
search responses onto OpenClaw's output shapes (``src/cli/memory-cli.ts``), so
scripts written against ``openclaw memory`` read ours unchanged. Our own fields
ride along inside ``status``; OpenClaw's are never missing or renamed.
"""

from __future__ import annotations

from typing import Any, Iterable

from memindex.pipeline.display import escape_controls

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


def _snippet_text(r: Any) -> str:
    """The snippet's lines as lines; its ``Source:`` citation (a path) as one line."""
    tail = f"\n\nSource: {r.citation}" if getattr(r, "citation", None) else None
    if tail and r.snippet.endswith(tail):
        return (escape_controls(r.snippet[: -len(tail)], keep_newlines=True) + "\n\nSource: "
                + escape_controls(r.citation))
    return escape_controls(r.snippet, keep_newlines=True)


def search_text(results: Iterable[Any]) -> str:
    """``<score.toFixed(3)> <path>:<start>-<end>``, the snippet, a blank line; ``No matches.``"""
    # A control character in a file name or a note must not forge a result line or drive the terminal.
    blocks = [f"{r.score:.3f} {escape_controls(r.path)}:{r.startLine}-{r.endLine}\n{_snippet_text(r)}"
              for r in results]
    return "\n\n".join(blocks).strip() if blocks else "No matches."
