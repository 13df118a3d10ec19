"""Speed on real text: memindex (keyword-only, embedded default) vs QMD on one corpus.

    python bench/corpus.py [--corpus ../shared/bench/md-corpus-1k] [--qmd CMD]

The corpus is copied to a temp dir (so one file can be edited) and used as the
agent's extraPaths. Every memindex number is an end-to-end CLI run in a fresh
process unless it says in-process. When a qmd command is available (``--qmd``,
``$MEMINDEX_QMD_COMMAND`` or ``qmd`` on PATH) the same steps run through QMD
in the same run and the ratios are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

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


def run_with_rss(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, int, str]:
    """Wall seconds, the child's peak RSS (KiB, via wait4) and its stdout."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd, text=True)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    dt = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}… failed ({proc.returncode}): {err[-2000:]}")
    return dt, usage.ru_maxrss, out


def memindex_cmd(root: Path, *args: str) -> list[str]:
    # The interpreter's own console script, not a version-manager shim (pyenv's adds ~80 ms).
    exe = Path(sys.executable).parent / "memindex"
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "memindex"]
    return [*base, "--config", str(root / "openclaw.json"), "--state-dir", str(root / "state"),
            "--workspace", str(root / "ws"), *args]


def bench_memindex(root: Path, corpus: Path, edit_file: Path) -> dict[str, float]:
    (root / "ws").mkdir(parents=True)
    (root / "openclaw.json").write_text(json.dumps(
        {"agents": {"defaults": {"memorySearch": {"extraPaths": [str(corpus)], "provider": "auto"}}}}))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("MEMINDEX_BROKER_URL", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure what a user runs: with cached bytecode
    subprocess.run(memindex_cmd(root, "--help"), env=env, capture_output=True, cwd=REPO)  # warm the pyc cache
    r: dict[str, float] = {}
    r["cold_s"], r["cold_rss_kb"], out = run_with_rss(memindex_cmd(root, "index", "-q"), env, REPO)
    r["resync_s"], r["resync_rss_kb"], _ = run_with_rss(memindex_cmd(root, "index", "-q"), env, REPO)
    with open(edit_file, "a", encoding="utf-8") as fh:
        fh.write("\nA freshly appended line about zanzibar-benchmark-token.\n")
    r["edit_s"], _, _ = run_with_rss(memindex_cmd(root, "index", "-q"), env, REPO)
    cli, rss = [], []
    for q in QUERIES:
        dt, kb, out = run_with_rss(memindex_cmd(root, "search", "--json", q), env, REPO)
        cli.append(dt)
        rss.append(kb)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "bench" / "md-corpus-1k")
    ap.add_argument("--qmd", default=None, help="qmd command (default: $MEMINDEX_QMD_COMMAND or qmd on PATH)")
    args = ap.parse_args()
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
