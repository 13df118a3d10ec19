"""Scale benchmark (issue 18): many agents through Redis, N worker processes, S writer shards.

    python bench/scale.py                                  # 50 agents x 200 daily notes
    python bench/scale.py --agents 10 --notes 40 --procs 1 4 --shards 1

The embedder is the local OpenAI-wire fake (``tests/provider_server.py``) answering every
request after a fixed 20 ms sleep: simulated network latency, not CPU. For each (worker
processes, writer shards) pair it starts a fresh redis-server, the workers
(``memindex worker --queues sync embed batch --processes P --threads 1``) and S writers
(``memindex worker --writer --shard K/S``), plans every agent's sync from one process, and
times until every store holds every file. Prints files/s per configuration, and the
speed-up of the largest process count over one (target: 4 processes >= 3x 1).

Caveat: the "compute" processes here still read the files (the file-side/compute split of
issue 18 is not built yet); what scales is concurrent embedding requests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import RedisServer, free_port  # noqa: E402  (the same helpers the tests use)
from tests.provider_server import ProviderServer  # noqa: E402

LATENCY_S = 0.020


def make_agents(root: Path, agents: int, notes: int, base_url: str) -> list[dict[str, str]]:
    out = []
    for a in range(agents):
        ws = root / f"agent{a:03d}" / "workspace"
        (ws / "memory").mkdir(parents=True, exist_ok=True)
        for d in range(notes):
            (ws / "memory" / f"2026-{1 + d // 28:02d}-{1 + d % 28:02d}.md").write_text(
                f"# agent {a} day {d}\n\nMet with team {d % 9} about project {a}-{d % 13}.\n"
                f"Decided to revisit topic{(a * d) % 31} next week.\n", encoding="utf-8")
        cfg = root / f"agent{a:03d}" / "openclaw.json"
        cfg.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {
            "provider": "openai", "remote": {"baseUrl": base_url, "apiKey": "sk-bench",
                                             "nonBatchConcurrency": 64}}}}}), encoding="utf-8")
        out.append({"config": str(cfg), "workspace": str(ws)})
    return out


def run_config(agents: list[dict[str, str]], state_root: Path, notes: int, procs: int, shards: int,
               logdir: Path) -> float:
    redis = RedisServer(free_port())
    redis.start()
    env = dict(os.environ, MEMINDEX_BROKER_URL=redis.url, MEMINDEX_WRITE_SHARDS=str(shards))
    started: list[subprocess.Popen] = []

    def spawn(name: str, *args: str) -> None:
        log = open(logdir / f"{name}-p{procs}-s{shards}.log", "wb")
        started.append(subprocess.Popen([sys.executable, "-m", "memindex", *args], cwd=REPO, env=env,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    try:
        for k in range(shards):
            spawn(f"writer{k}", "worker", "--writer", "--shard", f"{k}/{shards}")
        spawn("worker", "worker", "--queues", "sync", "embed", "batch", "--processes", str(procs), "--threads", "1")
        time.sleep(3.0)  # let every process boot and declare its queues
        ctxs = [["main", a["config"], str(state_root / f"s{i:03d}"), a["workspace"]] for i, a in enumerate(agents)]
        for c in ctxs:
            Path(c[2]).mkdir(parents=True, exist_ok=True)
        code = ("import json,sys\nfrom memindex.pipeline.config.settings import Context\n"
                "from memindex.workers.sync import run_sync\n"
                "for c in json.loads(sys.argv[1]): run_sync(Context(*c))\n")
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", code, json.dumps(ctxs)], cwd=REPO, env=env, check=True,
                       capture_output=True)
        check = ("import json,sys\nfrom memindex.pipeline.config.settings import Context\n"
                 "from memindex.pipeline.config.agents import settings_for\n"
                 "from memindex.pipeline.store.core import open_reader\nn=0\n"
                 "for c in json.loads(sys.argv[1]):\n"
                 "    r=open_reader(settings_for(Context(*c)))\n"
                 "    st=r.state()\n"
                 "    n+=0 if st.live_generation is None else len(r.indexed_files(st.live_generation))"
                 " - r.pending_count(st.live_generation)\n"
                 "    r.close()\nprint(n)\n")
        total = len(agents) * notes
        while True:
            done = int(subprocess.run([sys.executable, "-c", check, json.dumps(ctxs)], cwd=REPO, env=env,
                                      check=True, capture_output=True, text=True).stdout)
            if done >= total:
                break
            if time.monotonic() - t0 > 1800:
                raise RuntimeError(f"timed out at {done}/{total} files")
            time.sleep(0.5)
        return total / (time.monotonic() - t0)
    finally:
        for p in started:
            try:
                os.killpg(p.pid, 15)
                p.wait(20)
            except Exception:  # noqa: BLE001
                os.killpg(p.pid, 9)
        redis.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=50)
    ap.add_argument("--notes", type=int, default=200)
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    server = ProviderServer().start()
    server.always("openai", {"kind": "delay", "seconds": LATENCY_S})
    with tempfile.TemporaryDirectory(prefix="memindex-scale-") as tmp:
        root = Path(tmp)
        agents = make_agents(root / "ws", args.agents, args.notes, server.base("openai"))
        print(f"{args.agents} agents x {args.notes} notes = {args.agents * args.notes} files; "
              f"embedder: {LATENCY_S * 1000:.0f} ms per request")
        print(f"{'worker procs':>12} {'writer shards':>13} {'files/s':>9} {'requests':>9}")
        results: dict[tuple[int, int], float] = {}
        for shards in args.shards:
            for procs in args.procs:
                before = server.count("openai")
                fps = run_config(agents, root / f"state-p{procs}-s{shards}", args.notes, procs, shards, root)
                results[(procs, shards)] = fps
                print(f"{procs:>12} {shards:>13} {fps:>9.1f} {server.count('openai') - before:>9}", flush=True)
        lo, hi = min(args.procs), max(args.procs)
        for shards in args.shards:
            print(f"shards={shards}: {hi} procs / {lo} proc = {results[(hi, shards)] / results[(lo, shards)]:.2f}x"
                  f" (target >= 3x for 4 vs 1)")
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
