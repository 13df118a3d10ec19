"""Scale benchmark (issue 18): many agents through Redis, P compute processes, S writer shards.

    python bench/scale.py                                  # 50 agents x 200 daily notes
    python bench/scale.py --agents 10 --notes 40 --procs 1 4 --shards 1

The embedder is the local OpenAI-wire fake (``tests/provider_server.py``) answering every
request after a fixed 20 ms sleep: simulated network latency, not CPU. For each (compute
processes, writer shards) pair it starts a fresh redis-server, one file-side worker
(``memindex worker --queues sync --processes 1 --threads FILE_THREADS``: plans, reads,
chunks), P compute workers (``memindex worker --queues embed --processes P --threads 1``:
embedding only, no filesystem) and S writers (``memindex worker --writer --shard K/S``), plans
every agent's sync from one process, and times until every store holds every file. Prints
files/s per configuration, and the speed-up of the largest process count over one (target:
4 compute processes >= 3x 1).

The fake takes at most ``--max-inputs`` texts per request (default 8; it refuses more with
OpenAI's "too many inputs", and each process's service learns the cap on its first refusal), so
a message of 32 notes costs 4 sequential round trips, and the compute side is the stage being
measured. ``--max-inputs 0`` lifts the cap: one request per message, and 20 ms per request is
no load at all (the table then shows what limits the other stages). (Ollama's wire, one text
per request, is no use here: its registry row caps it at one request in flight per cluster.)
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
sys.path.append(str(REPO))  # after site-packages: the repo's memindex/ alone is not the package

from tests.conftest import RedisServer, free_port  # noqa: E402  (the same helpers the tests use)
from tests.provider_server import ProviderServer  # noqa: E402

LATENCY_S = 0.020
PLAN_S: list[float] = []  # per run: seconds spent planning every agent's sync (included in files/s)
CPU_S: list[dict[str, float]] = []  # per run: CPU seconds by process kind (files, compute, writer, redis)


def _cpu_by_session(sids: dict[int, str]) -> dict[str, float]:
    """CPU seconds (user + system) of the live processes in each spawned session, by name."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {name: 0.0 for name in sids.values()}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        sid = int(fields[3])  # after "pid (comm)": state ppid pgrp session ...
        if sid in sids:
            out[sids[sid]] += (int(fields[11]) + int(fields[12])) / tick
    return out


def _cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _indexed(ctxs: list[list[str]]) -> int:
    """Files written (not pending) in every agent's live generation."""
    from memindex.pipeline.config.agents import settings_for
    from memindex.pipeline.config.settings import Context
    from memindex.pipeline.store.reader import open_reader

    n = 0
    for c in ctxs:
        r = open_reader(settings_for(Context(*c)))
        try:
            st = r.state()
            if st.live_generation is not None:
                n += len(r.indexed_files(st.live_generation)) - r.pending_count(st.live_generation)
        finally:
            r.close()
    return n
FILE_THREADS = 2


def make_agents(root: Path, agents: int, notes: int, provider: str, base_url: str) -> list[dict[str, str]]:
    """Agent workspaces and configs; each config names the fake embedder (64-way concurrency)."""
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
            "provider": provider, "fallback": "none",
            "remote": {"baseUrl": base_url, "apiKey": "sk-bench", "nonBatchConcurrency": 64}}}}}),
            encoding="utf-8")
        out.append({"config": str(cfg), "workspace": str(ws)})
    return out


def run_config(agents: list[dict[str, str]], state_root: Path, notes: int, procs: int, shards: int,
               logdir: Path) -> float:
    redis = RedisServer(free_port())
    redis.start()
    env = dict(os.environ, MEMINDEX_BROKER_URL=redis.url, MEMINDEX_WRITE_SHARDS=str(shards))
    started: list[subprocess.Popen] = []
    names: dict[int, str] = {}

    def spawn(name: str, *args: str) -> None:
        log = open(logdir / f"{name}-p{procs}-s{shards}.log", "wb")
        started.append(subprocess.Popen([sys.executable, "-m", "memindex", *args], cwd=REPO, env=env,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        names[started[-1].pid] = name.rstrip("0123456789") or name  # writer0, writer1 -> writer

    try:
        for k in range(shards):
            spawn(f"writer{k}", "worker", "--writer", "--shard", f"{k}/{shards}")
        spawn("files", "worker", "--queues", "sync", "--processes", "1", "--threads", str(FILE_THREADS))
        spawn("compute", "worker", "--queues", "embed", "--processes", str(procs), "--threads", "1")
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
        planned = time.monotonic() - t0
        total = len(agents) * notes
        while True:
            done = _indexed(ctxs)  # in this process: a polling subprocess would compete for the CPU
            if done >= total:
                break
            if time.monotonic() - t0 > 1800:
                raise RuntimeError(f"timed out at {done}/{total} files")
            time.sleep(0.5)
        PLAN_S.append(planned)
        CPU_S.append(_cpu_by_session(names))
        CPU_S[-1]["redis"] = _cpu_of(redis.proc.pid) if redis.proc else 0.0
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
    ap.add_argument("--max-inputs", type=int, default=8, help="texts per request the fake accepts (0: no cap)")
    args = ap.parse_args()
    args.provider = "openai"
    server = ProviderServer().start()
    server.state.latency_s[args.provider] = LATENCY_S
    if args.max_inputs:
        server.state.max_items[args.provider] = args.max_inputs
    with tempfile.TemporaryDirectory(prefix="memindex-scale-") as tmp:
        root = Path(tmp)
        agents = make_agents(root / "ws", args.agents, args.notes, args.provider, server.base(args.provider))
        print(f"{args.agents} agents x {args.notes} notes = {args.agents * args.notes} files; "
              f"embedder: {args.provider} wire, {LATENCY_S * 1000:.0f} ms per request, "
              f"{args.max_inputs or 'any number of'} texts per request")
        print(f"{'compute procs':>13} {'writer shards':>13} {'files/s':>9} {'requests':>9} {'plan s':>7}")
        results: dict[tuple[int, int], float] = {}
        for shards in args.shards:
            for procs in args.procs:
                before = server.count(args.provider)
                fps = run_config(agents, root / f"state-p{procs}-s{shards}", args.notes, procs, shards, root)
                results[(procs, shards)] = fps
                print(f"{procs:>13} {shards:>13} {fps:>9.1f} {server.count(args.provider) - before:>9} {PLAN_S[-1]:>7.1f}  cpu s: "
                      + " ".join(f"{k}={v:.1f}" for k, v in sorted(CPU_S[-1].items())), flush=True)
        lo, hi = min(args.procs), max(args.procs)
        for shards in args.shards:
            print(f"shards={shards}: {hi} procs / {lo} proc = {results[(hi, shards)] / results[(lo, shards)]:.2f}x"
                  f" (target >= 3x for 4 vs 1)")
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
