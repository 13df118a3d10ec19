"""Warm memory_search through the OpenClaw plugin vs ``memindex mcp`` called directly.

    python bench/plugin.py [--corpus ../shared/bench/md-corpus-1k] [--rounds 5]

The corpus is indexed keyword-only as an agent's extraPaths (``bench/serve.py``'s setup). Then the
20 queries are timed per call, warm: through the plugin (``integrations/openclaw``: its
memory_search tool's execute() as OpenClaw calls it in a turn, over the plugin's long-lived
``memindex mcp`` child; ``bench/plugin_driver.mjs``), through a bare MCP TypeScript SDK client on
``memindex mcp`` (same SDK and transport, no plugin), and through the Python MCP SDK client as in
``bench/serve.py``. Target: the plugin's p95 within 2x of memindex mcp called directly.
Needs node and the built plugin (``scripts/install-openclaw.sh`` builds it; so does
``npm ci && npm run build`` in integrations/openclaw).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: the repo's memindex/ alone is not the package

from bench.corpus import QUERIES, memindex_cmd, user_env  # noqa: E402
from bench.serve import bench_mcp, ms_stats, setup  # noqa: E402

PLUGIN = REPO / "integrations" / "openclaw"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "bench" / "md-corpus-1k")
    ap.add_argument("--rounds", type=int, default=5, help="timed passes over the 20 queries")
    ap.add_argument("--node", default=shutil.which("node"), help="node binary (>= 20)")
    args = ap.parse_args()
    if not args.node or not (PLUGIN / "dist" / "index.js").exists():
        print("needs node and a built plugin: cd integrations/openclaw && npm ci && npm run build", file=sys.stderr)
        return 2
    env = user_env()
    with tempfile.TemporaryDirectory(prefix="memindex-plugin-bench-") as tmp:
        root = Path(tmp)
        setup(root, args.corpus, {"provider": "auto"}, env)
        cmd = memindex_cmd(root, "mcp")
        spec = {"pluginDir": str(PLUGIN), "command": cmd[0], "args": cmd[1:], "queries": QUERIES,
                "rounds": args.rounds}
        out = subprocess.run([args.node, str(REPO / "bench" / "plugin_driver.mjs"), json.dumps(spec)],
                             env=env, cwd=root, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            return 1
        times = json.loads(out.stdout.strip().splitlines()[-1])
        rows = {
            "OpenClaw plugin tool (memory_search execute)": ms_stats(times["plugin"]),
            "memindex mcp direct (MCP TypeScript SDK)": ms_stats(times["direct"]),
            "memindex mcp direct (MCP Python SDK)": ms_stats(
                bench_mcp(cmd, "memory_search", lambda q: {"query": q}, env, root, args.rounds)),
        }
    print(f"\nwarm memory_search, ms (p50 / p95), keyword, {args.corpus.name}, {len(QUERIES)} queries x {args.rounds}")
    print("| path | p50 / p95 |\n|---|---|")
    for name, (p50, p95) in rows.items():
        print(f"| {name} | {p50:.1f} / {p95:.1f} |")
    ratio = rows["OpenClaw plugin tool (memory_search execute)"][1] / rows["memindex mcp direct (MCP TypeScript SDK)"][1]
    print(f"plugin p95 / direct p95 = {ratio:.2f} (target <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
