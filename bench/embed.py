"""Embedding throughput and request counts.

    python bench/embed.py [--chunks 1000] [--local-texts 64] [--threads-texts 32] [--only-threads]

Prints (1) local GGUF embeddings/s at several batch sizes (the shared
all-MiniLM-L6-v2 model through llama-cpp-python, if installed), (2) chunks/s
with 1 and 2 llama.cpp threads at idle and beside two busy CPU hogs, with the
thread count this machine would choose, and (3) API
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


def _hog() -> "subprocess.Popen[bytes]":
    """One busy CPU: a process that spins until killed (what the other helpers of a loaded
    machine look like to llama.cpp's threads)."""
    import subprocess

    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def bench_threads(texts: list[str], hogs: int = 2) -> None:
    """chunks/s with 1 and 2 llama.cpp threads, at idle and with ``hogs`` busy processes, next to
    the thread count this process would choose (MEMINDEX_LOCAL_THREADS, else the CPUs available)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("local GGUF threads: skipped (llama-cpp-python not installed)")
        return
    from memindex.pipeline.embeddings.providers.local import LocalProvider, available_cpus, threads_default

    print(f"\nlocal GGUF threads ({len(texts)} real chunks, batch 8; CPUs available {available_cpus()} of "
          f"{os.cpu_count()}; load average {os.getloadavg()[0]:.1f} before)")
    for load in ("idle", f"{hogs} CPU hogs"):
        procs = [_hog() for _ in range(hogs)] if load != "idle" else []
        try:
            time.sleep(0.5 if procs else 0)
            for n in (1, 2):
                prov = LocalProvider(str(GGUF), "/tmp", n_threads=n)
                prov.embed_documents(texts[:1])  # load + warm up
                t0 = time.perf_counter()
                for i in range(0, len(texts), 8):
                    prov.embed_documents(texts[i : i + 8])
                dt = time.perf_counter() - t0
                print(f"  {load:<12} {n} thread(s): {len(texts) / dt:6.2f} chunks/s  ({dt / len(texts) * 1000:6.0f} ms/chunk)")
        finally:
            for p in procs:
                p.kill()
                p.wait()
    print(f"  chosen default here: {threads_default()} thread(s) per process (MEMINDEX_LOCAL_THREADS, else the "
          "CPUs available shared by the command's worker processes, 1..4)")


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
    ap.add_argument("--threads-texts", type=int, default=32, help="chunks per thread-count measurement")
    ap.add_argument("--only-threads", action="store_true", help="only the thread-count section")
    args = ap.parse_args()
    texts = corpus_chunks(max(args.chunks, args.local_texts, args.threads_texts))
    if not args.only_threads:
        bench_local(texts[: args.local_texts])
    bench_threads(texts[: args.threads_texts])
    if not args.only_threads:
        bench_remote(texts[: args.chunks])


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    main()
