"""What ``openclaw memory status|search`` print, built from our own reports.

Maps memindex's search responses onto OpenClaw's output shapes (``src/cli/memory-cli.ts``),
so scripts written against ``openclaw memory`` read ours unchanged. The status half
(``status_entry``: ``status --json``'s element, also what the servers' status answers)
lives in ``pipeline/status.py``, beside the report it maps.
"""

from __future__ import annotations

from typing import Any, Iterable

from memindex.pipeline.display import escape_controls

__all__ = ["search_text", "without_citations"]


def without_citations(results: Iterable[Any]) -> None:
    """Drop the ``Source:`` footers: ``openclaw memory search`` prints the manager's results, which
    carry none (the citations are the memory_search tool's, for a chat)."""
    for r in results:
        tail = f"\n\nSource: {r.citation}" if getattr(r, "citation", None) else None
        if tail and r.snippet.endswith(tail):
            r.snippet = r.snippet[: -len(tail)]
        r.citation = None


def search_text(results: Iterable[Any]) -> str:
    """``<score.toFixed(3)> <path>:<start>-<end>``, the snippet, a blank line; ``No matches.``"""
    # A control character in a file name or a note must not forge a result line or drive the terminal.
    blocks = [f"{r.score:.3f} {escape_controls(r.path)}:{r.startLine}-{r.endLine}\n"
              f"{escape_controls(r.snippet, keep_newlines=True)}" for r in results]
    return "\n\n".join(blocks).strip() if blocks else "No matches."
