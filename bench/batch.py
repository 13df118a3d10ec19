"""A 10,000-chunk backfill, batch API vs synchronous embeddings.

    python bench/batch.py [--chunks 10000] [--poll-ms 200] [--batch-turnaround-s 1] [--sync-latency-ms 0]

Builds a workspace of real Markdown (shared/bench/md-corpus-1k) cut to the
requested number of chunks, then backfills it twice through the real
pipeline on the embedded broker with the real openai SDK, against the local
wire-protocol server (tests/batch_server.py): once synchronously, once
through the Batch API (files + batches, polled as delayed queue messages).
Prints HTTP requests, wall time, and the estimated cost of each at the
providers' published per-token prices with their batch discounts.

Wall times are against a local server: the batch turnaround is simulated
(``--batch-turnaround-s``; real batches finish within the 24 h / 12 h
window, usually minutes) and synchronous requests answer instantly unless
``--sync-latency-ms`` adds latency. Request counts and costs do not depend
on that.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: the repo's memindex/ alone is not the package

CORPUS = REPO.parent / "shared" / "bench" / "md-corpus-1k"

# Published list prices, USD per 1M input tokens: (standard, batch). Taken on 2026-11-30 from stored
# copies of the providers' pages (verify before quoting):
# - OpenAI text-embedding-3-small: $0.02, Batch API $0.01 (50% off) - developers.openai.com model page.
# - Gemini gemini-embedding-001: $0.15, Batch API $0.075 (50% off) - Google Developers Blog,
#   "Gemini Batch API now supports Embeddings and OpenAI Compatibility", 2025-09-10.
# - Voyage voyage-4-large: $0.12, Batch API 33% off -> $0.0804 - docs.voyageai.com pricing and
#   batch-inference pages (the first 200M tokens per account are free; ignored here).
PRICES = {
    "openai text-embedding-3-small": (0.02, 0.01),
    "gemini gemini-embedding-001": (0.15, 0.075),
    "voyage voyage-4-large": (0.12, 0.12 * (1 - 0.33)),
}


def build_workspace(root: Path, n_chunks: int) -> tuple[int, int]:
    """Copy corpus files into root/memory until they chunk to n_chunks; returns (files, chunks)."""
    from memindex.pipeline.index.chunking import chunk_markdown

    mem = root / "memory"
    mem.mkdir(parents=True, exist_ok=True)
    total = files = 0
    for src in sorted(CORPUS.glob("*.md")):
        text = src.read_text(errors="replace")
        chunks = chunk_markdown(text)
        if total + len(chunks) > n_chunks:  # cut the last file so the total lands on n_chunks
            keep = n_chunks - total
            if keep <= 0:
                break
            text = "\n".join(text.split("\n")[: chunks[keep - 1].end_line]) + "\n"
            chunks = chunk_markdown(text)
        (mem / src.name).write_text(text, encoding="utf-8")
        total += len(chunks)
        files += 1
        if total >= n_chunks:
            break
    return files, total


def tokens(texts: list[str]) -> int:
    return sum(max(1, len(t) // 4) for t in texts)  # the chunker's 4 chars/token estimate


def run(label: str, srv, root: Path, batch: dict, sync_latency_s: float) -> dict:
    from memindex.pipeline.embeddings.embedder import reset_services
    from tests.conftest import Agent
    from memindex.producers.enqueue import sync_and_wait

    srv.reset()
    if sync_latency_s:
        srv.always("openai", {"kind": "delay", "seconds": sync_latency_s})
    reset_services()
    a = Agent(root)
    a.memory_config({"provider": "openai",
                     "remote": {"baseUrl": srv.base("openai"), "apiKey": "sk-bench", "batch": batch}})
    t0 = time.perf_counter()
    counts = sync_and_wait(a.ctx, timeout=3600)
    wall = time.perf_counter() - t0
    log = srv.log_for("openai")
    sync_reqs = [r for r in log if r.path.endswith("/embeddings")]
    sync_texts = [t for r in sync_reqs for t in ((r.body or {}).get("input") or [])]
    batch_texts = srv.submitted_texts("openai")
    calls = {w: srv.count_events("openai", w) for w in ("upload", "create", "status", "download", "cancel")}
    return {"label": label, "wall": wall, "files": counts["to_index"], "agent": a,
            "requests": len(log), "sync_requests": len(sync_reqs), "calls": calls,
            "batches": len(srv.created("openai")), "sync_tokens": tokens(sync_texts),
            "batch_tokens": tokens(batch_texts), "batch_texts": len(batch_texts), "sync_texts": len(sync_texts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--poll-ms", type=int, default=200, help="remote.batch.pollIntervalMs")
    ap.add_argument("--batch-turnaround-s", type=float, default=1.0, help="simulated time a batch runs")
    ap.add_argument("--sync-latency-ms", type=float, default=0.0, help="added to every synchronous request")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("MEMINDEX_RETRY_BASE_DELAY_S", "0.05")

    from tests.batch_server import BatchServer, Plan
    from tests.conftest import live_vectors
    from memindex.workers import embedded

    tmp = Path(tempfile.mkdtemp(prefix="memindex-bench-batch-"))
    files, chunks = build_workspace(tmp / "sync" / "workspace", args.chunks)
    build_workspace(tmp / "batch" / "workspace", args.chunks)
    print(f"backfill of {chunks:,} chunks in {files} files (md-corpus-1k), provider openai "
          f"text-embedding-3-small, local server, embedded broker")
    with BatchServer() as srv:
        srv.set_default("openai", Plan(validate_s=0.1, run_s=args.batch_turnaround_s, finalize_s=0.1))
        sync = run("synchronous", srv, tmp / "sync", {"enabled": False}, args.sync_latency_ms / 1000)
        batch = run("batch API", srv, tmp / "batch", {"enabled": True, "pollIntervalMs": args.poll_ms},
                    args.sync_latency_ms / 1000)
    embedded.stop()
    same = live_vectors(sync["agent"]) == live_vectors(batch["agent"])

    print(f"\n{'mode':<12} {'HTTP requests':>14}  {'wall time':>9}  detail")
    print(f"{'synchronous':<12} {sync['requests']:>14,}  {sync['wall']:>8.1f}s  "
          f"{sync['sync_requests']} POST /embeddings carrying {sync['sync_texts']:,} inputs")
    c = batch["calls"]
    print(f"{'batch API':<12} {batch['requests']:>14,}  {batch['wall']:>8.1f}s  "
          f"{batch['batches']} batch job(s): {c['upload']} upload, {c['create']} create, {c['status']} status "
          f"polls, {c['download']} download; {batch['batch_texts']:,} inputs batched, "
          f"{batch['sync_texts']} embedded synchronously")
    print(f"identical vectors in both stores: {'yes' if same else 'NO'}")

    sync_tok = sync["sync_tokens"]
    batch_tok, batch_sync_tok = batch["batch_tokens"], batch["sync_tokens"]
    print(f"\nestimated cost (~{sync_tok:,} tokens at 4 chars/token; list prices per 1M tokens, "
          "standard / batch, as of 2026-11-30)")
    print(f"  {'model':<32} {'synchronous':>12} {'batch API':>12} {'saved':>7}")
    for model, (std, disc) in PRICES.items():
        cost_sync = sync_tok / 1e6 * std
        cost_batch = batch_tok / 1e6 * disc + batch_sync_tok / 1e6 * std
        print(f"  {model:<32} ${cost_sync:>11.4f} ${cost_batch:>11.4f} {1 - cost_batch / cost_sync:>6.0%}")
    print("  prices: OpenAI $0.02 -> $0.01 (developers.openai.com), Gemini $0.15 -> $0.075 (Google Developers "
          "Blog 2025-09-10), Voyage $0.12 -> 33% off (docs.voyageai.com)")
    print(f"\n(workspaces under {tmp})")


if __name__ == "__main__":
    main()
