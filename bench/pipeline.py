"""Pipeline benchmark: backfill throughput, no-change resync, write-to-searchable latency.

    python bench/pipeline.py                      # 1,000 and 10,000 files, embedded and Redis
    python bench/pipeline.py --sizes 1000 --edits 10 --modes embedded

For each workspace size (daily-log files generated in a temp dir), broker mode
(the embedded default; Redis with 2 worker processes + 1 writer, started here
on a free port) and embedder (keyword-only, and the deterministic offline
``hash`` test/bench embedder when available), it measures:

- a full backfill: files/s and chunks/s, enqueue to "nothing pending";
- a no-change resync: plan (stat only) + the writer recording the plan;
- write-to-searchable latency under the watcher: append a unique word to one
  daily log, time until ``memory_search`` finds it (includes the 1.5 s debounce).

Each measurement runs in a fresh subprocess (the broker is chosen at import).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"resync_10k_s": 3.0, "backfill_10k_redis_s": 60.0, "p95_s": 2.5}


# --- one measurement (runs in a subprocess) ------------------------------------------------

def run_one(root: Path, config: Path, state: Path, edits: int, seed: int) -> dict:
    sys.path.append(str(REPO))  # after site-packages: the repo's memindex/ alone is not the package
    from memindex.pipeline.config.agents import settings_for
    from memindex.pipeline.config.settings import Context
    from memindex.pipeline.search.engine import MemorySearch
    from memindex.pipeline.store.reader import open_reader
    from memindex.producers import backfill
    from memindex.producers.watcher import watch_agents

    ctx = Context("main", str(config), str(state), str(root / "workspace"))
    settings = settings_for(ctx)

    t = time.perf_counter()
    b = backfill.enqueue(ctx)
    assert backfill.wait(b, timeout=900), "backfill timed out"
    full_s = time.perf_counter() - t
    reader = open_reader(settings)
    gen = reader.state().live_generation
    chunks = reader.conn().execute(f"SELECT count(*) FROM chunks_g{gen}").fetchone()[0]
    reader.close()

    t = time.perf_counter()
    b = backfill.enqueue(ctx)
    assert backfill.wait(b, timeout=120), "resync timed out"
    resync_s = time.perf_counter() - t
    assert b.counts["to_index"] == 0, b.counts

    lat = []
    if edits:
        watcher = watch_agents([ctx])
        eng = MemorySearch(settings)
        rng = random.Random(seed)
        files = sorted((root / "workspace" / "memory").iterdir())
        try:
            time.sleep(0.5)
            for i in range(edits):
                f = rng.choice(files)
                token = f"zqedit{i}w{os.getpid()}x{time.time_ns() % 10**9}"  # new to every run
                t = time.perf_counter()
                with open(f, "a", encoding="utf-8") as fh:
                    fh.write(f"- appended {token}\n")
                deadline = t + 30
                while not eng.search(token).results:
                    if time.perf_counter() > deadline:
                        raise SystemExit(f"edit {i} ({f.name}) not searchable after 30 s; {_diagnose(settings)}")
                    time.sleep(0.01)
                lat.append(time.perf_counter() - t)
                time.sleep(0.3)
        finally:
            watcher.stop()
            eng.close()
    from memindex.workers import embedded

    embedded.stop()
    return {"files": b.counts["unchanged"], "chunks": chunks, "full_s": full_s, "resync_s": resync_s,
            "latencies": lat}


def _diagnose(settings) -> str:
    """What the pipeline looks like when an edit did not arrive (for the failure message)."""
    from memindex.pipeline.store.reader import open_reader
    from memindex.producers.dispatch import pending_files
    from memindex.workers import queues

    r = open_reader(settings)
    try:
        st = r.state()
        state = {"live": st.live_generation, "building": st.building_generation,
                 "last_sync_at": st.extra.get("last_sync_at")}
    finally:
        r.close()
    return json.dumps({"store": state, "pending": pending_files(settings), "queues": queues.depth(),
                       "now_ms": int(time.time() * 1000)})


# --- orchestration ------------------------------------------------------------------------

def gen_daily_logs(ws: Path, n: int) -> None:
    mem = ws / "memory"
    mem.mkdir(parents=True, exist_ok=True)
    day = datetime.date(1990, 1, 1)
    rng = random.Random(n)
    for i in range(n):
        d = day + datetime.timedelta(days=i)
        lines = [f"# {d.isoformat()}", ""]
        for j in range(rng.randint(3, 12)):
            lines.append(f"- {rng.choice(['Met', 'Fixed', 'Planned', 'Noted'])} item {i}-{j} about "
                         f"topic{rng.randrange(200)} with user{rng.randrange(50)}; follow up on project{i % 37}.")
        (mem / f"{d.isoformat()}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def hash_provider_available() -> str | None:
    """None if ``provider: "hash"`` works here, else why not."""
    code = ("from memindex.pipeline.config.settings import resolve_agent\n"
            "from memindex.pipeline.embeddings.embedder import identity_for\n"
            "s = resolve_agent({'agents': {'defaults': {'memorySearch': {'provider': 'hash'}}}})\n"
            "i = identity_for(s)\n"
            "assert i.provider == 'hash', i\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env=_env(None))
    return None if out.returncode == 0 else (out.stderr.strip().splitlines() or ["failed"])[-1]


def _env(broker: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCLAW_", "MEMINDEX_"))}
    for k in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "VOYAGE_API_KEY", "MISTRAL_API_KEY"):
        env.pop(k, None)  # keyword-only must mean keyword-only
    if broker:
        env["MEMINDEX_BROKER_URL"] = broker
    env["PYTHONPATH"] = str(REPO)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A private redis-server and the Procfile's worker + writer processes."""

    def __init__(self, tmp: Path, threads: int):
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.tmp = tmp
        self.threads = threads
        self.procs: list[subprocess.Popen] = []

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")
        p = subprocess.Popen(args, cwd=REPO, env=_env(self.url), stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def __enter__(self) -> "Redis":
        exe = shutil.which("redis-server")
        if exe is None:
            raise SystemExit("redis-server not found (needed for --modes redis)")
        self._spawn([exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                    "redis")
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        cli = [sys.executable, "-m", "memindex", "worker"]
        self._spawn(cli + ["--queues", "sync", "embed", "batch", "--processes", "2", "--threads", str(self.threads)],
                    "worker")
        self._spawn(cli + ["--writer"], "writer")
        time.sleep(2.0)  # let the workers import and start consuming
        return self

    def __exit__(self, *exc) -> None:
        for p in reversed(self.procs):  # workers first, Redis last: they shut down talking to it
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)


def measure(root: Path, n: int, mode: str, provider: str, broker: str | None, edits: int) -> dict:
    tag = f"{mode}-{provider}"
    state = root / f"state-{tag}"
    if state.exists():
        shutil.rmtree(state)
    state.mkdir()
    config = root / f"openclaw-{provider}.json"
    ms = {} if provider == "none" else {"provider": provider}
    config.write_text(json.dumps({"agents": {"defaults": {"memorySearch": ms}}}))
    out = subprocess.run([sys.executable, __file__, "--run-one", str(root), str(config), str(state), str(edits)],
                         cwd=REPO, env=_env(broker), capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{tag} n={n} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs) + 0.5) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--modes", nargs="+", default=["embedded", "redis"], choices=["embedded", "redis"])
    ap.add_argument("--providers", nargs="+", default=["none", "hash"], choices=["none", "hash"])
    ap.add_argument("--edits", type=int, default=20, help="single-file edits timed under the watcher")
    ap.add_argument("--threads", type=int, default=2, help="threads per Redis worker process")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (workspaces, stores, worker logs)")
    ap.add_argument("--run-one", nargs=4, metavar=("ROOT", "CONFIG", "STATE", "EDITS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run_one:
        root, config, state, edits = args.run_one
        print(json.dumps(run_one(Path(root), Path(config), Path(state), int(edits), seed=42)))
        return 0

    providers = list(args.providers)
    notes = []
    if "hash" in providers:
        why = hash_provider_available()
        if why:
            providers.remove("hash")
            notes.append(f"hash embedder skipped: {why}")
    rows = []
    tmpdir = tempfile.mkdtemp(prefix="memindex-bench-")
    try:
        tmp = Path(tmpdir)
        redis = Redis(tmp, args.threads) if "redis" in args.modes else None
        if redis:
            redis.__enter__()
        try:
            for n in args.sizes:
                root = tmp / f"n{n}"
                gen_daily_logs(root / "workspace", n)
                for mode in args.modes:
                    for provider in providers:
                        r = measure(root, n, mode, provider, redis.url if mode == "redis" else None, args.edits)
                        r.update(n=n, mode=mode, provider="keyword-only" if provider == "none" else provider)
                        rows.append(r)
                        _print_row(r, header=len(rows) == 1)
        finally:
            if redis:
                redis.__exit__(None, None, None)
    finally:
        if args.keep:
            print(f"kept {tmpdir}")
        else:
            shutil.rmtree(tmpdir, ignore_errors=True)
    print()
    _print_table(rows, args)
    for note in notes:
        print(f"note: {note}")
    return 0


COLS = ("mode", "embedder", "files", "chunks", "backfill s", "files/s", "chunks/s", "resync s", "p50 s", "p95 s")


def _cells(r: dict) -> list[str]:
    lat = r["latencies"]
    return [r["mode"], r["provider"], f"{r['n']:,}", f"{r['chunks']:,}", f"{r['full_s']:.2f}",
            f"{r['n'] / r['full_s']:,.0f}", f"{r['chunks'] / r['full_s']:,.0f}", f"{r['resync_s']:.2f}",
            f"{pct(lat, 50):.2f}", f"{pct(lat, 95):.2f}"]


def _fmt(cells) -> str:
    return "  ".join(f"{c:>{w}}" for c, w in zip(cells, (9, 12, 7, 7, 10, 8, 9, 8, 6, 6)))


def _print_row(r: dict, header: bool) -> None:
    if header:
        print(_fmt(COLS), flush=True)
    print(_fmt(_cells(r)), flush=True)


def _print_table(rows: list[dict], args) -> None:
    print(f"memindex pipeline bench ({os.cpu_count()} CPUs; Redis: 2 worker processes x {args.threads} "
          f"threads + 1 writer; {args.edits} edits per latency run; debounce 1.5 s)")
    print(_fmt(COLS))
    for r in rows:
        print(_fmt(_cells(r)))
    print("\ntargets:")
    big = [r for r in rows if r["n"] >= 10_000]
    for r in big:
        ok = r["resync_s"] < TARGETS["resync_10k_s"]
        print(f"  no-change resync of {r['n']:,} files < 3 s [{r['mode']}, {r['provider']}]: "
              f"{r['resync_s']:.2f} s -> {'met' if ok else 'MISSED'}")
    for r in big:
        if r["mode"] == "redis" and r["provider"] == "keyword-only":
            ok = r["full_s"] < TARGETS["backfill_10k_redis_s"]
            print(f"  keyword-only backfill of {r['n']:,} files through Redis < 60 s: {r['full_s']:.2f} s -> "
                  f"{'met' if ok else 'MISSED'}")
    for r in rows:
        if r["latencies"]:
            p95 = pct(r["latencies"], 95)
            print(f"  p95 write-to-searchable < 2.5 s [{r['mode']}, {r['provider']}, {r['n']:,} files]: "
                  f"{p95:.2f} s -> {'met' if p95 < TARGETS['p95_s'] else 'MISSED'}")


if __name__ == "__main__":
    sys.exit(main())
