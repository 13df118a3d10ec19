"""Hybrid search latency and memory at 10,000 and 100,000 chunks.

    python bench/search.py [--sizes 10000 100000] [--state /tmp/memindex-search-bench]

Builds one store per size with the real ``StoreWriter`` (chunks of real
Markdown from ``../shared/bench/md-corpus-1k``, recycled with a unique tag
line per copy; 384-dim vectors from the offline hash embedder plus per-copy
noise, so near-duplicates are near but not equal). Each configuration is then
measured in a fresh subprocess (so peak RSS is its own): sqlite-vec ``vec0``
KNN or the in-process numpy fallback (``store.vector.enabled: false``), with
temporal decay + MMR off and on. Query vectors are precomputed, so the timing
is the search path only: both candidate arms, fetching rows, merge, decay,
MMR, snippets. ~50 varied queries (natural-language questions, keywords,
exact identifiers), 3 timed rounds after one warm-up round.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # after site-packages: the repo's memindex/ alone is not the package

CORPUS = REPO.parent / "shared" / "bench" / "md-corpus-1k"
DIMS = 384
CHUNKS_PER_FILE = 50
NOISE = 0.35  # per-copy vector noise (relative to a unit vector)

QUESTIONS = [
    "how do I install a specific python version with pyenv",
    "what does the memory flush before compaction do",
    "how are embeddings cached between reindexes",
    "which command shows the queue depth",
    "how to configure a custom OpenAI compatible endpoint",
    "where are session transcripts stored",
    "how do I uninstall pyenv completely",
    "what is the default half life for temporal decay",
    "how does qmd rerank search results",
    "which licence covers the package documentation",
    "how do I report a security vulnerability",
    "what changed in the latest release",
    "how to set the shell for pyenv init",
    "why does the build fail with missing openssl headers",
    "how to contribute a feature request",
]
KEYWORDS = [
    "VLAN", "embedding cache", "virtualenv", "changelog", "systemd", "copyright", "gateway token",
    "hybrid search", "MMR lambda", "debian/control", "cron", "sandbox", "heartbeat", "BM25",
    "Telegram bot",
]


# ---------------------------------------------------------------------- build


def corpus_chunks(limit_files: int | None = None) -> list[tuple[str, int, int, str]]:
    from memindex.pipeline.index.chunking import chunk_markdown

    out = []
    for p in sorted(CORPUS.glob("*.md"))[:limit_files]:
        for c in chunk_markdown(p.read_text(encoding="utf-8", errors="replace")):
            if c.text.strip():
                out.append((p.name, c.start_line, c.end_line, c.text))
    return out


def _unit(v: Any) -> Any:
    import numpy as np

    n = np.linalg.norm(v, axis=-1, keepdims=True)
    n[n == 0] = 1.0
    return v / n


def build_store(path: Path, n: int, base: list[tuple[str, int, int, str]], base_vecs: Any) -> float:
    """Fill a store with ``n`` chunks through StoreWriter.write_files; returns seconds."""
    import numpy as np

    from memindex.pipeline.index.fingerprint import EmbeddingIdentity
    from memindex.pipeline.index.records import ChunkRecord, FileRecord
    from memindex.pipeline.store.writer import StoreWriter

    rng = np.random.default_rng(n)
    if path.exists():
        path.unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    t0 = time.perf_counter()
    w = StoreWriter(path)
    fp = {"provider": "hash", "model": "hash-v1", "providerKey": "bench", "sources": ["memory"],
          "chunkTokens": 400, "chunkOverlap": 80, "vectorDims": DIMS}
    w.plan(1, fp, [], [])
    ident = EmbeddingIdentity("hash", "hash-v1", "bench", DIMS)
    records: list[FileRecord] = []
    for start in range(0, n, CHUNKS_PER_FILE):
        idx = np.arange(start, min(n, start + CHUNKS_PER_FILE))
        vecs = _unit(base_vecs[idx % len(base)] + NOISE / np.sqrt(DIMS) * rng.standard_normal((len(idx), DIMS)))
        fno = start // CHUNKS_PER_FILE
        # two thirds dated daily logs (decay applies), one third evergreen topic notes
        path_ = (f"memory/d{fno}/{2025 - fno % 2}-{1 + fno % 12:02d}-{1 + fno % 28:02d}.md" if fno % 3
                 else f"memory/topic-{fno}.md")
        chunks = []
        line = 1
        for j, i in enumerate(idx):
            name, _s, _e, text = base[i % len(base)]
            copy = i // len(base)
            text = f"{text}\n<!-- {name} copy {copy} tag{i} -->"
            nl = text.count("\n") + 1
            chunks.append(ChunkRecord(line, line + nl - 1, f"h{i}", text, vecs[j].tolist()))
            line += nl
        records.append(FileRecord("memory", path_, path_, f"f{fno}", 0, 0, chunks=chunks, embedding=ident))
        if len(records) >= 40:
            w.write_files(1, records)
            records = []
    if records:
        w.write_files(1, records)
    w.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    w.close()
    return time.perf_counter() - t0


def make_queries(base: list[tuple[str, int, int, str]], seed: int = 7) -> list[str]:
    """~50 queries: questions, keywords, exact identifiers and phrases lifted from the corpus."""
    rng = random.Random(seed)
    idents: list[str] = []
    for _name, _s, _e, text in rng.sample(base, min(400, len(base))):
        idents += re.findall(r"\b[A-Za-z]+_[A-Za-z0-9_]{3,}\b|\b[A-Z]{2,}[0-9]+\b", text)
    idents = sorted(set(idents))
    exact = rng.sample(idents, min(10, len(idents)))
    phrases = []
    for _name, _s, _e, text in rng.sample(base, 10):
        words = re.findall(r"[A-Za-z]{3,}", text)
        if len(words) > 8:
            k = rng.randrange(0, len(words) - 6)
            phrases.append(" ".join(words[k : k + rng.choice((3, 5, 6))]))
    return QUESTIONS + KEYWORDS + exact + phrases


# -------------------------------------------------------------------- measure


def peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(store: Path, backend: str, extras: bool, queries: list[str], rounds: int) -> dict[str, Any]:
    """Runs in a fresh subprocess: returns latency percentiles (ms) and peak RSS (MB)."""
    from memindex.pipeline.config.settings import resolve_agent
    from memindex.pipeline.embeddings.providers.hashing import HashProvider
    from memindex.pipeline.search.engine import MemorySearch, QueryEmbedder

    hy: dict[str, Any] = {}
    if extras:
        hy = {"temporalDecay": {"enabled": True}, "mmr": {"enabled": True}}
    ms = {"store": {"path": str(store), "vector": {"enabled": backend == "sqlite-vec"}},
          "sync": {"onSearch": False, "onSessionStart": False}, "query": {"hybrid": hy}}
    settings = resolve_agent({"agents": {"defaults": {"memorySearch": ms}}}, "main",
                             state_dir=store.parent, workspace_override=str(store.parent / "ws"))
    hp = HashProvider(dims=DIMS)
    vecs = {q: hp.embed_query(q) for q in queries}  # query embedding excluded from the timing

    class Precomputed(QueryEmbedder):
        provider, model = "hash", "hash-v1"

        def embed_query(self, text: str, fp: Any = None) -> list[float]:
            return vecs[text]

    eng = MemorySearch(settings, query_embedder=Precomputed(), clock=lambda: 1767225600.0)  # 2026-01-01
    t0 = time.perf_counter()
    first = eng.search(queries[0])
    cold_ms = (time.perf_counter() - t0) * 1000
    if backend == "sqlite-vec":
        assert eng.reader.vector_error is None, eng.reader.vector_error
    for q in queries:  # warm-up round
        eng.search(q)
    # Steady state: with sqlite-vec a large store is searched in an in-memory mirror that
    # loads in the background while vec0 answers; wait for it (bounded) and report how long.
    with eng.reader.snapshot() as snap:
        gen, worthwhile = snap.generation, eng._mirror_worthwhile(snap, DIMS)
    ready = None
    if worthwhile or backend != "sqlite-vec":
        deadline = time.perf_counter() + 60
        while time.perf_counter() < deadline:
            eng.search(queries[0])
            if eng._mirror.fresh(gen, DIMS) is not None:
                ready = time.perf_counter() - t0
                break
            time.sleep(0.05)
    lat: list[float] = []
    cpu: list[float] = []  # this thread's CPU per search: what latency would be on an idle machine
    n_results = 0
    for _ in range(rounds):
        for q in queries:
            t, c = time.perf_counter(), time.thread_time()
            r = eng.search(q)
            lat.append((time.perf_counter() - t) * 1000)
            cpu.append((time.thread_time() - c) * 1000)
            n_results += len(r.results)
    eng.close()
    lat.sort()
    cpu.sort()
    return {
        "p50": statistics.median(lat), "p95": lat[int(0.95 * (len(lat) - 1))], "max": lat[-1],
        "cold_ms": cold_ms, "rss_mb": peak_rss_mb(), "n": len(lat),
        "avg_results": n_results / len(lat), "mode": first.mode, "mirror_ready_s": ready,
        "cpu_p50": statistics.median(cpu), "cpu_p95": cpu[int(0.95 * (len(cpu) - 1))],
        "load": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--state", type=Path, default=Path("/tmp/memindex-search-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rebuild", action="store_true", help="rebuild stores even if present")
    ap.add_argument("--measure", nargs=3, metavar=("STORE", "BACKEND", "EXTRAS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.state.mkdir(parents=True, exist_ok=True)
    qfile = args.state / "queries.json"

    if args.measure:  # child process
        store, backend, extras = args.measure
        res = measure(Path(store), backend, extras == "on", json.loads(qfile.read_text()), args.rounds)
        print(json.dumps(res))
        return 0

    from memindex.pipeline.embeddings.providers.hashing import HashProvider
    import numpy as np

    base = corpus_chunks()
    queries = make_queries(base)
    qfile.write_text(json.dumps(queries))
    print(f"corpus: {len(base)} distinct chunks from {CORPUS.name}; {len(queries)} queries", file=sys.stderr)
    base_vecs = None
    rows = []
    for n in args.sizes:
        store = args.state / f"store-{n}.sqlite"
        marker = args.state / f"store-{n}.ok"
        if args.rebuild or not marker.exists():
            if base_vecs is None:
                t = time.perf_counter()
                base_vecs = np.asarray(HashProvider(dims=DIMS).embed_documents([b[3] for b in base]), dtype="<f4")
                print(f"hash-embedded {len(base)} base chunks in {time.perf_counter() - t:.1f}s", file=sys.stderr)
            secs = build_store(store, n, base, base_vecs)
            marker.write_text(str(secs))
            print(f"built {n} chunks in {secs:.1f}s ({store.stat().st_size / 2**20:.0f} MiB)", file=sys.stderr)
        for backend in ("sqlite-vec", "in-process"):
            for extras in ("off", "on"):
                out = subprocess.run(
                    [sys.executable, __file__, "--state", str(args.state), "--rounds", str(args.rounds),
                     "--measure", str(store), backend, extras],
                    capture_output=True, text=True, check=True,
                ).stdout
                rows.append((n, backend, extras, json.loads(out.strip().splitlines()[-1])))
                r = rows[-1][3]
                print(f"  {n} {backend} decay+mmr={extras}: p50 {r['p50']:.1f} p95 {r['p95']:.1f}", file=sys.stderr)
    print("| chunks | vector backend | decay+MMR | p50 ms | p95 ms | max ms | CPU p50 / p95 ms | first search ms "
          "| in-memory vectors ready after s | peak RSS MB | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, backend, extras, r in rows:
        ready = "-" if r["mirror_ready_s"] is None else f"{r['mirror_ready_s']:.1f}"
        print(f"| {n:,} | {backend} | {extras} | {r['p50']:.1f} | {r['p95']:.1f} | {r['max']:.1f} | "
              f"{r['cpu_p50']:.1f} / {r['cpu_p95']:.1f} | {r['cold_ms']:.0f} | {ready} | {r['rss_mb']:.0f} | "
              f"{r['load']:.1f} |")
    print(f"({len(queries)} queries x {args.rounds} rounds per row after a warm-up round, maxResults 6 / "
          f"candidates 24 per arm, hybrid 0.7/0.3, query vectors precomputed; CPU = the searching thread's "
          f"CPU time, i.e. latency without other load; load avg = 1-min load of this {os.cpu_count()}-core "
          f"machine during the row)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
