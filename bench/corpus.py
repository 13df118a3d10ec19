"""Speed on real text: memindex (keyword-only, embedded default) vs QMD on one corpus.

    python bench/corpus.py [--corpus ../shared/bench/md-corpus-1k] [--qmd CMD]
    python bench/corpus.py --scale 1k,10k,30k [--cache /tmp/memindex-corpora] [--qmd CMD]
    python bench/corpus.py --scale 1k,30k --warm [--cache DIR]

``--scale`` (issue 19) builds corpora of N files from copies of the base corpus,
each copy with a unique first line (built once under ``--cache``, reused), and
for every scale runs memindex and QMD interleaved step by step, printing CPU
time (user+sys of the child, via wait4) next to wall time: cold index, no-change
and single-edit resync, CLI search p50/p95 (and its CPU p50), warm in-process search
p50/p95 over 200 distinct queries drawn from the corpus text (wall, and the search
thread's CPU), peak RSS and store size. ``--warm`` (issue 45) measures only the warm
in-process search at each size (an index built once under ``--cache``), the ratio of the
largest to the smallest, and the bare FTS5 query floor.

The corpus is copied to a temp dir (so one file can be edited) and used as the
agent's extraPaths. Every memindex number is an end-to-end CLI run in a fresh
process unless it says in-process. When a qmd command is available (``--qmd``, ``$MEMINDEX_QMD_COMMAND`` or ``qmd`` on PATH) the
same steps run through QMD in the same run and the ratios are printed.

    python bench/corpus.py --cli 1k,30k [--cache /tmp/memindex-corpora]

``--cli`` (issue 40): keyword-only ``memindex search`` p50 per scale, as an agent runtime that
shells out pays it: in-process (a fresh process per call), through ``--server`` to a running
``memindex serve`` on a Unix socket, and a bare ``python -c "import sqlite3"`` (the floor of
any Python CLI), with their ratios; and in-process with a 10 KB commented JSON5 openclaw.json
against a minimal one. Calls are interleaved round by round, so load drifts hit all alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: the repo's memindex/ alone is not the package

QUERIES = [
    "gateway configuration reload", "how do I configure the slack channel", "cron job schedule syntax",
    "memory search hybrid weights", "OPENAI_API_KEY", "sandbox docker backend", "pyenv install python version",
    "session compaction maintenance", "plugin sdk registration", "opentelemetry trace context privacy",
    "troubleshooting config validation", "voice call plugin", "android platform setup", "license MIT",
    "update methods npm", "rpc methods protocol handshake", "qmd collection add", "heartbeat interval",
    "approvals cli", "embedding provider fallback",
]


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


# Reads a child's own peak RSS (see run_child).
GNU_TIME = shutil.which("time", path="/usr/bin:/bin") if sys.platform.startswith("linux") else None


def run_child(cmd: list[str], env: dict[str, str] | None = None,
              cwd: Path | None = None) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds (user+sys), the child's peak RSS (KiB) and its stdout.

    Reaped with wait4 for the child's own rusage (stderr goes to a file so reading
    stdout to the end cannot deadlock on a full stderr pipe). The peak RSS comes from
    GNU time when there is one: a child's ru_maxrss starts at its parent's RSS when it
    forks (Linux records the old memory's high-water mark at exec), so once this process
    held ~190 MB every child "peaked" there. time's own child forks from a ~2 MB process.
    """
    with tempfile.TemporaryFile("w+") as errf, tempfile.NamedTemporaryFile("r") as rssf:
        wrapped = [GNU_TIME, "-f", "%M", "-o", rssf.name, *cmd] if GNU_TIME else cmd
        t0 = time.perf_counter()
        proc = subprocess.Popen(wrapped, stdout=subprocess.PIPE, stderr=errf, env=env, cwd=cwd, text=True)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        dt = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            errf.seek(0)
            raise RuntimeError(f"{' '.join(cmd[:4])}… failed ({proc.returncode}): {errf.read()[-2000:]}")
        peak = usage.ru_maxrss
        if GNU_TIME:
            rssf.seek(0)
            peak = int(rssf.read().split()[-1])
    return dt, usage.ru_utime + usage.ru_stime, peak, out


def run_with_rss(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, int, str]:
    """Wall seconds, the child's peak RSS (KiB, via wait4) and its stdout."""
    dt, _, kb, out = run_child(cmd, env, cwd)
    return dt, kb, out


def memindex_cmd(root: Path, *args: str) -> list[str]:
    # The interpreter's own console script, not a version-manager shim (pyenv's adds ~80 ms).
    exe = Path(sys.executable).parent / "memindex"
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "memindex"]
    return [*base, "--config", str(root / "openclaw.json"), "--state-dir", str(root / "state"),
            "--workspace", str(root / "ws"), *args]


def user_env() -> dict[str, str]:
    """memindex's environment as a user's: keyword-only (no provider keys), the embedded broker,
    and cached bytecode (the tool environment sets PYTHONDONTWRITEBYTECODE)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("MEMINDEX_BROKER_URL", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def bench_memindex(root: Path, corpus: Path, edit_file: Path) -> dict[str, float]:
    (root / "ws").mkdir(parents=True)
    (root / "openclaw.json").write_text(json.dumps(
        {"agents": {"defaults": {"memorySearch": {"extraPaths": [str(corpus)], "provider": "auto"}}}}))
    env = user_env()
    subprocess.run(memindex_cmd(root, "--help"), env=env, capture_output=True, cwd=REPO)  # warm the pyc cache
    off = env
    r: dict[str, float] = {}
    r["cold_s"], r["cold_rss_kb"], out = run_with_rss(memindex_cmd(root, "index", "-q"), off, REPO)
    r["resync_s"], r["resync_rss_kb"], _ = run_with_rss(memindex_cmd(root, "index", "-q"), off, REPO)
    with open(edit_file, "a", encoding="utf-8") as fh:
        fh.write("\nA freshly appended line about zanzibar-benchmark-token.\n")
    r["edit_s"], _, _ = run_with_rss(memindex_cmd(root, "index", "-q"), off, REPO)
    cli, rss = [], []
    for q in QUERIES:
        cli.append(run_with_rss(memindex_cmd(root, "search", "--json", q), env, REPO)[0])
        rss.append(run_with_rss(memindex_cmd(root, "search", "--json", q), off, REPO)[1])
    r["cli_p50"], r["cli_p95"], r["cli_rss_kb"] = pct(cli, 50), pct(cli, 95), max(rss)
    found = run_with_rss(memindex_cmd(root, "search", "--json", "zanzibar-benchmark-token"), env, REPO)[2]
    r["edit_found"] = float(bool(json.loads(found)["results"]))
    # In-process search on a warm engine (what the agent runtime pays per call).
    from memindex.pipeline.config.settings import Context, load_settings
    from memindex.pipeline.search.engine import MemorySearch

    settings = load_settings(Context("main", str(root / "openclaw.json"), str(root / "state"), str(root / "ws")))
    eng = MemorySearch(settings)
    for q in QUERIES:
        eng.search(q)
    lat = []
    for _ in range(5):
        for q in QUERIES:
            t0 = time.perf_counter()
            eng.search(q)
            lat.append((time.perf_counter() - t0) * 1000)
    r["inproc_p50_ms"], r["inproc_p95_ms"] = pct(lat, 50), pct(lat, 95)
    return r


def find_qmd(explicit: str | None) -> str | None:
    for cand in (explicit, os.environ.get("MEMINDEX_QMD_COMMAND"), shutil.which("qmd")):
        if cand and (Path(cand).exists() or shutil.which(cand)):
            return cand
    return None


def bench_qmd(qmd: str, root: Path, corpus: Path, edit_file: Path) -> dict[str, float]:
    env = dict(os.environ, XDG_CONFIG_HOME=str(root / "xdg-config"), XDG_CACHE_HOME=str(root / "xdg-cache"),
               NO_COLOR="1")
    r: dict[str, float] = {}
    r["cold_s"], r["cold_rss_kb"], _ = run_with_rss([qmd, "collection", "add", str(corpus), "--name", "bench",
                                                      "--mask", "**/*.md"], env)
    r["resync_s"], r["resync_rss_kb"], _ = run_with_rss([qmd, "update"], env)
    with open(edit_file, "a", encoding="utf-8") as fh:
        fh.write("\nAnother appended line for qmd.\n")
    r["edit_s"], _, _ = run_with_rss([qmd, "update"], env)
    cli, rss = [], []
    for q in QUERIES:
        dt, kb, _ = run_with_rss([qmd, "search", q, "--json", "-n", "6"], env)
        cli.append(dt)
        rss.append(kb)
    r["cli_p50"], r["cli_p95"], r["cli_rss_kb"] = pct(cli, 50), pct(cli, 95), max(rss)
    return r



# ---------------------------------------------------------------- --scale (issue 19)

def build_corpus(base: Path, n: int, cache: Path) -> Path:
    """n files from copies of `base`, each copy's first line unique; built once, reused."""
    out = cache / f"{n}"
    if (out / ".complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    src = sorted(base.rglob("*.md"))
    for i in range(n):
        copy, f = divmod(i, len(src))
        d = out / f"c{copy:03d}"
        d.mkdir(parents=True, exist_ok=True)
        text = src[f].read_text(encoding="utf-8", errors="replace")
        (d / src[f].name).write_text(f"Copy {copy} of {src[f].stem}, file {i}.\n\n{text}", encoding="utf-8")
    (out / ".complete").touch()
    return out


def corpus_queries(base: Path, k: int = 200, seed: int = 19) -> list[str]:
    """k distinct 2-4 word queries cut from the corpus's own text (seeded, so runs compare)."""
    import random
    import re

    rng = random.Random(seed)
    files = sorted(base.rglob("*.md"))
    word = re.compile(r"[A-Za-z][a-z]{2,}")
    seen: dict[str, None] = {}
    while len(seen) < k:
        lines = [ln for ln in files[rng.randrange(len(files))].read_text(errors="replace").splitlines()
                 if len(word.findall(ln)) >= 4]
        if not lines:
            continue
        words = word.findall(rng.choice(lines))
        n = rng.randint(2, 4)
        at = rng.randrange(len(words) - n + 1)
        seen.setdefault(" ".join(w.lower() for w in words[at:at + n]), None)
    return list(seen)


def dir_bytes(path: Path, pattern: str = "*") -> int:
    return sum(f.stat().st_size for f in path.rglob(pattern) if f.is_file())


def fts_floor_ms(store: Path, queries: list[str], limit: int = 24) -> tuple[float, float]:
    """p50/p95 of the bare FTS5 query our search issues (the same plan from the same work budget:
    the trimmed OR query by bm25, or for all-common queries their AND, ranked or the first rows;
    the default 6 results x 4 candidates; no fill) in a plain connection: the floor."""
    import re

    from memindex.pipeline.store import db
    from memindex.pipeline.store.fts_budget import FtsBudget
    from memindex.pipeline.store.fts_text import build_match_query

    con = db.connect(store, readonly=True)  # the store's own driver (its FTS5 options need SQLite >= 3.43)
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    table = max((t for t in names if re.fullmatch(r"fts_g\d+", t)), key=lambda t: int(t[5:]))
    gen = int(table[5:])
    budget = FtsBudget()
    lat = []
    for _ in range(2):
        for q in queries:
            t0 = time.perf_counter()
            match = build_match_query(q)
            if match:
                plan = budget.plan(con, gen, match)
                if plan.ranked:
                    con.execute(f"SELECT rowid, bm25({table}) FROM {table} WHERE {table} MATCH ? "
                                f"ORDER BY bm25({table}) LIMIT ?", (plan.match, limit)).fetchall()
                else:
                    con.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ? LIMIT ?",
                                (plan.match, limit)).fetchall()
            lat.append((time.perf_counter() - t0) * 1000)
    con.close()
    return pct(lat, 50), pct(lat, 95)


def bench_scale(n: int, corpus: Path, root: Path, qmd: str | None, queries: list[str]) -> dict[str, dict[str, float]]:
    """memindex and QMD step by step on one corpus (the edit is reverted afterwards)."""
    mroot, qroot = root / "memindex", root / "qmd"
    (mroot / "ws").mkdir(parents=True)
    (mroot / "openclaw.json").write_text(json.dumps(
        {"agents": {"defaults": {"memorySearch": {"extraPaths": [str(corpus)], "provider": "auto"}}}}))
    uenv = menv = user_env()
    subprocess.run(memindex_cmd(mroot, "--help"), env=menv, capture_output=True, cwd=REPO)
    qenv = dict(os.environ, XDG_CONFIG_HOME=str(qroot / "xdg-config"), XDG_CACHE_HOME=str(qroot / "xdg-cache"),
                NO_COLOR="1")
    steps: dict[str, tuple[list[str], list[str]]] = {
        "cold": (memindex_cmd(mroot, "index", "-q"),
                 [qmd or "", "collection", "add", str(corpus), "--name", "bench", "--mask", "**/*.md"]),
        "resync": (memindex_cmd(mroot, "index", "-q"), [qmd or "", "update"]),
        # Again: the first no-change sync compares every file row and leaves the no-change mark
        # (the no-change mark in index/indexer.py); from the second on, a sync that finds nothing reads no rows.
        "resync2": (memindex_cmd(mroot, "index", "-q"), [qmd or "", "update"]),
    }
    m: dict[str, float] = {}
    q: dict[str, float] = {}

    def step(name: str, mcmd: list[str], qcmd: list[str]) -> None:
        m[f"{name}_s"], m[f"{name}_cpu"], m[f"{name}_rss_kb"], _ = run_child(mcmd, menv, REPO)
        if qmd:
            q[f"{name}_s"], q[f"{name}_cpu"], q[f"{name}_rss_kb"], _ = run_child(qcmd, qenv)

    for name, (mcmd, qcmd) in steps.items():
        step(name, mcmd, qcmd)
    edit_file = sorted(corpus.rglob("*.md"))[n // 2]
    original = edit_file.read_bytes()
    try:
        with open(edit_file, "a", encoding="utf-8") as fh:
            fh.write("\nA freshly appended line about zanzibar-benchmark-token.\n")
        step("edit", memindex_cmd(mroot, "index", "-q"), [qmd or "", "update"])
        found = run_child(memindex_cmd(mroot, "search", "--json", "zanzibar-benchmark-token"), menv, REPO)[3]
        m["edit_found"] = float(bool(json.loads(found)["results"]))
    finally:
        edit_file.write_bytes(original)
    mcli, minp, qcli, mcpu, qcpu = [], [], [], [], []
    for text in QUERIES + QUERIES:  # two rounds: ~60 ms calls on a shared machine are noisy
        mcli.append(run_child(memindex_cmd(mroot, "search", "--json", text), uenv, REPO)[0])
    for text in QUERIES:
        wall, cpu, _, _ = run_child(memindex_cmd(mroot, "search", "--json", text), menv, REPO)
        minp.append(wall)
        mcpu.append(cpu)
        if qmd:
            wall, cpu, _, _ = run_child([qmd, "search", text, "--json", "-n", "6"], qenv)
            qcli.append(wall)
            qcpu.append(cpu)
    # CPU next to wall: on a shared machine the wall time mostly measures the other jobs.
    m["cli_p50"], m["cli_p95"] = pct(mcli, 50), pct(mcli, 95)
    m["cli_inproc_p50"], m["cli_cpu_p50"] = pct(minp, 50), pct(mcpu, 50)
    if qcli:
        q["cli_p50"], q["cli_p95"], q["cli_cpu_p50"] = pct(qcli, 50), pct(qcli, 95), pct(qcpu, 50)
    store = mroot / "state" / "memindex" / "main.sqlite"  # the default store path (store/health.py)
    m["store_mb"] = dir_bytes(store.parent) / 1e6
    if qmd:
        q["store_mb"] = dir_bytes(qroot / "xdg-cache" / "qmd") / 1e6
    from memindex.pipeline.config.settings import Context, load_settings
    from memindex.pipeline.search.engine import MemorySearch

    eng = MemorySearch(load_settings(Context("main", str(mroot / "openclaw.json"), str(mroot / "state"),
                                             str(mroot / "ws"))))
    for text in queries[:20]:
        eng.search(text)
    lat, cpu = [], []
    for _ in range(2):
        for text in queries:
            t0, c0 = time.perf_counter(), time.thread_time()
            eng.search(text)
            lat.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.thread_time() - c0) * 1000)
    eng.close()
    m["inproc_p50_ms"], m["inproc_p95_ms"] = pct(lat, 50), pct(lat, 95)
    m["inproc_cpu_p50_ms"], m["inproc_cpu_p95_ms"] = pct(cpu, 50), pct(cpu, 95)
    try:
        m["fts_p50_ms"], m["fts_p95_ms"] = fts_floor_ms(store, queries)
    except Exception as exc:  # noqa: BLE001 - the floor is context, not a result
        print(f"  (FTS5 floor not measured: {exc})")
    for r in (m, q):
        if "cold_cpu" in r:
            r["cpu_per_file_ms"] = r["cold_cpu"] / n * 1000
    return {"memindex": m, "qmd": q}


SCALE_ROWS = [
    ("cold index wall (s)", "cold_s"), ("cold index CPU (s)", "cold_cpu"), ("cold CPU per file (ms)", "cpu_per_file_ms"),
    ("cold peak RSS (MB)", "cold_rss_kb"), ("no-change resync wall (s)", "resync_s"),
    ("no-change resync CPU (s)", "resync_cpu"), ("repeat no-change resync wall (s)", "resync2_s"),
    ("repeat no-change resync CPU (s)", "resync2_cpu"), ("single-edit resync wall (s)", "edit_s"),
    ("single-edit resync CPU (s)", "edit_cpu"),
    ("CLI search p50 (s)", "cli_p50"), ("CLI search p95 (s)", "cli_p95"),
    ("CLI search p50, in-process (s)", "cli_inproc_p50"), ("CLI search CPU p50, in-process (s)", "cli_cpu_p50"),
    ("warm search p50 (ms)", "inproc_p50_ms"), ("warm search p95 (ms)", "inproc_p95_ms"),
    ("warm search CPU p50 (ms)", "inproc_cpu_p50_ms"), ("warm search CPU p95 (ms)", "inproc_cpu_p95_ms"),
    ("bare FTS5 query p50 (ms)", "fts_p50_ms"), ("bare FTS5 query p95 (ms)", "fts_p95_ms"), ("store size (MB)", "store_mb"),
]


def parse_scale(text: str) -> list[int]:
    return [int(float(t[:-1]) * 1000) if t.lower().endswith("k") else int(t) for t in text.split(",") if t]


def main_scale(args: argparse.Namespace) -> None:
    qmd = None if args.no_qmd else find_qmd(args.qmd)
    queries = corpus_queries(args.corpus)
    results: dict[int, dict[str, dict[str, float]]] = {}
    for n in parse_scale(args.scale):
        corpus = build_corpus(args.corpus, n, args.cache)
        size = dir_bytes(corpus, "*.md")
        print(f"\n== {n} files, {size / 1e6:.0f} MB ({corpus}); qmd: {qmd or 'not run'}", flush=True)
        with tempfile.TemporaryDirectory(prefix=f"memindex-scale-{n}-") as tmp:
            res = bench_scale(n, corpus, Path(tmp), qmd, queries)
        results[n] = res
        m, q = res["memindex"], res["qmd"]
        print(f"{'':<38}{'memindex':>10}" + (f"{'qmd':>10}{'ours/qmd':>10}" if q else ""))
        for label, key in SCALE_ROWS:
            if key not in m:
                continue
            val = m[key] / 1024 if key.endswith("_kb") else m[key]
            line = f"{label:<38}{val:>10.3f}"
            if key in q:
                qv = q[key] / 1024 if key.endswith("_kb") else q[key]
                line += f"{qv:>10.3f}{(val / qv if qv else float('inf')):>9.2f}x"
            print(line, flush=True)
        print(f"edited file searchable after resync: {'yes' if m.get('edit_found') else 'NO'}", flush=True)
    print("\nissue 19 'Done when':")
    ns = sorted(results)
    lo, hi = ns[0], ns[-1]
    m_lo, m_hi = results[lo]["memindex"], results[hi]["memindex"]
    checks = [(f"cold CPU/file at {hi} within 10% of {lo}",
               m_hi["cpu_per_file_ms"] <= 1.10 * m_lo["cpu_per_file_ms"],
               f"{m_hi['cpu_per_file_ms']:.2f} vs {m_lo['cpu_per_file_ms']:.2f} ms")]
    for n in ns:
        m, q = results[n]["memindex"], results[n]["qmd"]
        if n >= 10_000 and "cold_cpu" in q:
            checks.append((f"cold CPU <= 0.75x QMD at {n}", m["cold_cpu"] <= 0.75 * q["cold_cpu"],
                           f"{m['cold_cpu'] / q['cold_cpu']:.2f}x"))
        if n >= 30_000:
            checks.append((f"warm search p95 <= 10 ms at {n}", m["inproc_p95_ms"] <= 10, f"{m['inproc_p95_ms']:.1f} ms"))
            for key, which in (("resync_s", "first after the index"), ("resync2_s", "repeated")):
                checks.append((f"no-change resync <= 0.25 s at {n} ({which})", m[key] <= 0.25, f"{m[key]:.3f} s"))
        if n <= 1_000:
            checks.append((f"warm search p95 <= 3 ms at {n}", m["inproc_p95_ms"] <= 3, f"{m['inproc_p95_ms']:.1f} ms"))
            checks.append((f"CLI search p50 <= 0.08 s at {n} (in-process)", m["cli_inproc_p50"] <= 0.08,
                           f"{m['cli_inproc_p50']:.3f} s"))
        if n == 10_000 and "store_mb" in q:
            checks.append((f"store size <= QMD's at {n}", m["store_mb"] <= q["store_mb"],
                           f"{m['store_mb']:.1f} vs {q['store_mb']:.1f} MB"))
    for label, ok, detail in checks:
        print(f"  {'met' if ok else 'NOT met':<8} {label}: {detail}")


# ---------------------------------------------------------------- --cli (issue 40)

def commented_config(settings: dict, size: int = 10 * 1024) -> str:
    """``settings`` as an openclaw.json a person keeps: JSON5 with unquoted keys, single quotes,
    trailing commas, and ``size`` bytes of comments explaining it (OpenClaw's docs' style)."""
    def render(value: object, depth: int) -> str:
        pad = "  " * depth
        if isinstance(value, dict):
            items = "".join(f"{pad}  // {k}: see the OpenClaw docs for what this section does\n"
                            f"{pad}  {k}: {render(v, depth + 1)},\n" for k, v in value.items())
            return "{\n" + items + pad + "}"
        if isinstance(value, list):
            return "[" + ", ".join(render(v, depth + 1) for v in value) + ",]"
        if isinstance(value, str):
            return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return json.dumps(value)

    body = render(settings, 0)
    note = ("/* Memory search indexes MEMORY.md, memory/**.md and extraPaths; keyword search runs without\n"
            " * any provider, and a provider key adds vectors. Keep secrets in <state>/.env. */\n")
    head = ""
    while len(head) + len(body) < size:
        head += note
    return head + body + "\n"


def bench_cli_latency(n: int, corpus: Path, root: Path, rounds: int) -> dict[str, float]:
    """Per-call wall time (s) of keyword-only searches, interleaved round by round: bare Python,
    in-process (minimal and 10 KB commented config), and --server to a warm `memindex serve`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "ws").mkdir(exist_ok=True)
    settings = {"agents": {"defaults": {"workspace": str(root / "ws"),
                                        "memorySearch": {"extraPaths": [str(corpus)], "provider": "auto"}}}}
    minimal, commented = root / "openclaw.json", root / "openclaw-commented.json5"
    minimal.write_text(json.dumps(settings))
    commented.write_text(commented_config(settings))
    base = user_env()
    env = dict(base, OPENCLAW_CONFIG_PATH=str(minimal), OPENCLAW_STATE_DIR=str(root / "state"))
    env_big = dict(env, OPENCLAW_CONFIG_PATH=str(commented))
    exe = Path(sys.executable).parent / "memindex"
    cli = [str(exe)] if exe.exists() else [sys.executable, "-m", "memindex"]
    t0 = time.perf_counter()
    subprocess.run([*cli, "index", "-q"], env=env, check=True, cwd=root)  # (a cached store: a no-change sync)
    print(f"  index -q: {time.perf_counter() - t0:.1f} s; configs {minimal.stat().st_size} / "
          f"{commented.stat().st_size} bytes", flush=True)
    same = [subprocess.run([*cli, "search", "--json", "gateway"], env=e, capture_output=True, text=True, cwd=root).stdout
            for e in (env, env_big)]
    assert same[0] == same[1] and json.loads(same[0])["results"], "the two configs must search alike"
    sock = root / "run" / "serve.sock"
    server = subprocess.Popen([*cli, "serve", "--socket", str(sock)], env=env, cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not sock.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"memindex serve did not start: {server.stderr.read() if server.stderr else ''}")
            time.sleep(0.1)
        kinds = {
            "bare": ([sys.executable, "-c", "import sqlite3"], env),
            "inproc": ([*cli, "search"], env),
            "inproc_10k": ([*cli, "search"], env_big),
            "server": ([*cli, "search", "--server", f"unix:{sock}"], env),
        }
        for q in QUERIES[:3]:  # warm: the page cache, the server's engine
            for cmd, e in kinds.values():
                run_child([*cmd, q] if cmd[-1] != "import sqlite3" else cmd, e, root)
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(rounds):
            for q in QUERIES:
                for kind, (cmd, e) in kinds.items():
                    times[kind].append(run_child(cmd if kind == "bare" else [*cmd, q], e, root)[0])
    finally:
        server.terminate()
        server.wait(30)
    return {f"{k}_p50": pct(v, 50) for k, v in times.items()} | {f"{k}_p95": pct(v, 95) for k, v in times.items()}


def main_cli(args: argparse.Namespace) -> None:
    results: dict[int, dict[str, float]] = {}
    for n in parse_scale(args.cli):
        corpus = build_corpus(args.corpus, n, args.cache)
        print(f"\n== {n} files ({corpus})", flush=True)
        results[n] = r = bench_cli_latency(n, corpus, args.cache / f"cli-{n}", args.rounds)
        print(f"{'keyword-only search, per call':<44}{'p50 (s)':>9}{'p95 (s)':>9}{'p50 / bare':>12}")
        for label, key in (("bare python -c 'import sqlite3'", "bare"), ("memindex search, in-process", "inproc"),
                           ("memindex search --server (unix socket)", "server"),
                           ("in-process, 10 KB commented config", "inproc_10k")):
            print(f"{label:<44}{r[key + '_p50']:>9.3f}{r[key + '_p95']:>9.3f}{r[key + '_p50'] / r['bare_p50']:>11.2f}x",
                  flush=True)
    print("\nissue 40 'Done when':")
    for n, r in results.items():
        bare = r["bare_p50"]
        for label, ok, detail in (
                (f"in-process p50 <= 2.5x bare python at {n}", r["inproc_p50"] <= 2.5 * bare,
                 f"{r['inproc_p50'] / bare:.2f}x"),
                (f"--server p50 <= 1.5x bare python at {n}", r["server_p50"] <= 1.5 * bare,
                 f"{r['server_p50'] / bare:.2f}x"),
                (f"10 KB commented config <= 1.10x minimal at {n}", r["inproc_10k_p50"] <= 1.10 * r["inproc_p50"],
                 f"{r['inproc_10k_p50'] / r['inproc_p50']:.3f}x")):
            print(f"  {'met' if ok else 'NOT met':<8} {label}: {detail}")


# --- warm search at two sizes (issue 45): --scale 1k,30k --warm ---------------------------------

def warm_store(n: int, corpus: Path, cache: Path) -> Path:
    """A keyword-only index of the n-file corpus under ``cache/warm-<n>``, built once, reused."""
    root = cache / f"warm-{n}"
    if (root / ".complete").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    (root / "ws").mkdir(parents=True)
    (root / "openclaw.json").write_text(json.dumps(
        {"agents": {"defaults": {"memorySearch": {"extraPaths": [str(corpus)], "provider": "auto"}}}}))
    t0 = time.perf_counter()
    subprocess.run(memindex_cmd(root, "index", "-q"), env=user_env(), cwd=REPO,
                   check=True)
    print(f"  (indexed {n} files in {time.perf_counter() - t0:.0f} s into {root})", flush=True)
    (root / ".complete").touch()
    return root


def warm_search(root: Path, queries: list[str], rounds: int = 3) -> dict[str, float]:
    """In-process warm keyword search: p50/p95 wall and search-thread CPU over ``rounds`` rounds of
    ``queries`` after 20 warm-up searches, and the bare FTS5 query floor on the same store.
    Every query is new to the engine in its first round (no result cache holds it)."""
    from memindex.pipeline.config.settings import Context, load_settings
    from memindex.pipeline.search.engine import MemorySearch

    eng = MemorySearch(load_settings(Context("main", str(root / "openclaw.json"), str(root / "state"),
                                             str(root / "ws"))))
    for text in queries[:20]:
        eng.search(text)
    lat, cpu, first_lat = [], [], []
    for r in range(rounds):
        for text in queries:
            t0, c0 = time.perf_counter(), time.thread_time()
            eng.search(text)
            lat.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.thread_time() - c0) * 1000)
            if r == 0:
                first_lat.append(cpu[-1])
    store = eng.settings.store_path
    eng.close()
    out = {"p50": pct(lat, 50), "p95": pct(lat, 95), "cpu_p50": pct(cpu, 50), "cpu_p95": pct(cpu, 95),
           "first_cpu_p95": pct(first_lat, 95)}
    out["fts_p50"], out["fts_p95"] = fts_floor_ms(store, queries)
    return out


def main_warm(args: argparse.Namespace) -> None:
    """Warm in-process search at each size, the ratio of the largest to the smallest (target
    <= 1.5x for p95), next to the bare FTS5 query floor. CPU beside wall: on a shared machine
    the wall time mostly measures the other jobs."""
    queries = corpus_queries(args.corpus)
    sizes, res = parse_scale(args.scale), {}
    for n in sizes:
        # (resolved: a corpus reached through a symlink is not indexed, extraPaths skip symlinks)
        root = warm_store(n, build_corpus(args.corpus, n, args.cache).resolve(), args.cache)
        res[n] = warm_search(root, queries)
        print(f"  {n} files: measured", flush=True)
    rows = [("warm search p50 (ms)", "p50"), ("warm search p95 (ms)", "p95"), ("warm search CPU p50 (ms)", "cpu_p50"),
            ("warm search CPU p95 (ms)", "cpu_p95"), ("first-time query CPU p95 (ms)", "first_cpu_p95"),
            ("bare FTS5 query p50 (ms)", "fts_p50"), ("bare FTS5 query p95 (ms)", "fts_p95")]
    lo, hi = sizes[0], sizes[-1]
    print(f"\nwarm in-process keyword search, {len(queries)} corpus queries, load average {os.getloadavg()[0]:.1f}")
    print(f"{'':<32}" + "".join(f"{n:>10}" for n in sizes) + f"{f'{hi}/{lo}':>13}")
    for label, key in rows:
        ratio = res[hi][key] / res[lo][key] if res[lo][key] else float("inf")
        print(f"{label:<32}" + "".join(f"{res[n][key]:>10.2f}" for n in sizes) + f"{ratio:>12.2f}x")
    for key, what in (("p95", "wall"), ("cpu_p95", "CPU")):
        ratio = res[hi][key] / res[lo][key]
        print(f"  {'met' if ratio <= 1.5 else 'NOT met':<8} warm search p95 ({what}) at {hi} within 1.5x of {lo}: "
              f"{ratio:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "bench" / "md-corpus-1k")
    ap.add_argument("--qmd", default=None, help="qmd command (default: $MEMINDEX_QMD_COMMAND or qmd on PATH)")
    ap.add_argument("--scale", default=None, help="comma-separated file counts, e.g. 1k,10k,30k (issue 19)")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "memindex-corpora",
                    help="where --scale builds its corpora (once; reused by later runs)")
    ap.add_argument("--no-qmd", action="store_true", help="--scale: memindex only")
    ap.add_argument("--cli", default=None, metavar="SCALES",
                    help="keyword-only CLI search p50: in-process, --server, bare python (issue 40), e.g. 1k,30k")
    ap.add_argument("--rounds", type=int, default=2, help="--cli: passes over the 20 queries")
    ap.add_argument("--warm", action="store_true",
                    help="--scale: only warm in-process search at each size, its ratio and the FTS5 floor (issue 45)")
    args = ap.parse_args()
    if args.cli:
        main_cli(args)
        return
    if args.scale and args.warm:
        main_warm(args)
        return
    if args.scale:
        main_scale(args)
        return
    with tempfile.TemporaryDirectory(prefix="memindex-corpus-") as tmp:
        tmp_path = Path(tmp)
        corpus = tmp_path / "corpus"
        shutil.copytree(args.corpus, corpus)
        files = sorted(corpus.rglob("*.md"))
        size = sum(f.stat().st_size for f in files)
        print(f"corpus: {len(files)} Markdown files, {size / 1e6:.1f} MB (copied to {corpus})")
        m = bench_memindex(tmp_path / "memindex", corpus, files[len(files) // 2])
        qmd = find_qmd(args.qmd)
        q = None
        if qmd:
            qcorpus = tmp_path / "qcorpus"
            shutil.copytree(args.corpus, qcorpus)
            try:
                q = bench_qmd(qmd, tmp_path / "qmd", qcorpus, sorted(qcorpus.rglob("*.md"))[len(files) // 2])
            except Exception as exc:  # noqa: BLE001 - report and keep our numbers
                print(f"qmd run failed: {exc}")
    rows = [
        ("cold full index (s)", "cold_s", 5.0),
        ("cold index peak RSS (MB)", "cold_rss_kb", None),
        ("no-change resync (s)", "resync_s", 0.15),
        ("single-edit resync (s)", "edit_s", 0.2),
        ("CLI search p50 (s)", "cli_p50", 0.15),
        ("CLI search p95 (s)", "cli_p95", None),
        ("CLI search peak RSS (MB)", "cli_rss_kb", 80.0),
        ("in-process search p50 (ms)", "inproc_p50_ms", None),
        ("in-process search p95 (ms)", "inproc_p95_ms", 5.0),
    ]
    print(f"\n{'':<28}{'memindex':>10}{'target':>9}{'met':>5}" + (f"{'qmd':>10}{'qmd/ours':>10}" if q else ""))
    for label, key, target in rows:
        val = m[key] / 1024 if key.endswith("_kb") else m[key]
        line = f"{label:<28}{val:>10.3f}"
        tgt = target if target is not None else None
        line += f"{tgt if tgt is not None else '':>9}" + (f"{'yes' if val <= tgt else 'NO':>5}" if tgt else f"{'':>5}")
        if q and key in q:
            qv = q[key] / 1024 if key.endswith("_kb") else q[key]
            line += f"{qv:>10.3f}{(qv / val if val else float('inf')):>9.1f}x"
        print(line)
    print(f"\nedited file searchable after resync: {'yes' if m['edit_found'] else 'NO'}")
    if not q:
        print("qmd: not run (no qmd command; scripts/install-qmd.sh installs one)")


if __name__ == "__main__":
    main()
