"""Embedding throughput and request counts.

    python bench/embed.py [--chunks 1000] [--local-texts 64]

Prints (1) local GGUF embeddings/s at several batch sizes (the shared
all-MiniLM-L6-v2 model through llama-cpp-python, if installed), and (2) API
requests per 1,000 chunks for each remote provider, driving the real SDK
clients against the local wire-protocol server in tests/provider_server.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: the repo's memindex/ alone is not the package

from memindex.pipeline.index.chunking import chunk_markdown  # noqa: E402
from memindex.pipeline.embeddings import EmbeddingService, RetryPolicy, select_provider  # noqa: E402

GGUF = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2.F16.gguf"
CORPUS = REPO.parent / "shared" / "bench" / "md-corpus-1k"


def corpus_chunks(n: int) -> list[str]:
    out: list[str] = []
    for p in sorted(CORPUS.glob("*.md")):
        out.extend(c.text for c in chunk_markdown(p.read_text(errors="replace")))
        if len(out) >= n:
            break
    return out[:n]


def bench_local(texts: list[str]) -> None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("local GGUF: skipped (llama-cpp-python not installed)")
        return
    from memindex.pipeline.embeddings.providers.local import LocalProvider

    print(f"local GGUF ({GGUF.name}, 2 threads, {len(texts)} real ~400-token chunks)")
    for max_tokens in (512, 256):
        prov = LocalProvider(str(GGUF), "/tmp", max_input_tokens=max_tokens)
        prov.embed_documents(texts[:2])  # load + warm up
        for batch in (1, 8, 32):
            t0 = time.perf_counter()
            for i in range(0, len(texts), batch):
                prov.embed_documents(texts[i : i + batch])
            dt = time.perf_counter() - t0
            print(f"  maxInputTokens {max_tokens:>3}  batch {batch:>2}: {len(texts) / dt:6.1f} embeddings/s")
    prov = LocalProvider(str(GGUF), "/tmp", max_input_tokens=512)
    queries = ["where is the router", "what did Mara fix", "standup time"] * 10
    t0 = time.perf_counter()
    for q in queries:
        prov.embed_query(q)
    print(f"  short queries one by one: {len(queries) / (time.perf_counter() - t0):6.1f} /s")


def bench_remote(texts: list[str]) -> None:
    from tests.provider_server import ProviderServer

    print(f"\nremote providers: requests per {len(texts)} chunks (local wire-protocol server)")
    with ProviderServer() as srv:
        for pid in ("openai", "gemini", "voyage", "mistral", "ollama"):
            srv.reset()
            ms = {"provider": pid, "model": "", "remote": {"baseUrl": srv.base(pid), "apiKey": "k", "headers": {}}}
            service = EmbeddingService(select_provider(ms, {}, {}, cache_dir="/tmp"), retry=RetryPolicy())
            t0 = time.perf_counter()
            service.embed_documents(texts)
            dt = time.perf_counter() - t0
            print(f"  {pid:<8} {srv.count(pid):>5} requests  ({dt:5.2f} s against the local server)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--local-texts", type=int, default=64)
    args = ap.parse_args()
    texts = corpus_chunks(max(args.chunks, args.local_texts))
    bench_local(texts[: args.local_texts])
    bench_remote(texts[: args.chunks])


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    main()
