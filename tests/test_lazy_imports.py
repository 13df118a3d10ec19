"""Imports of memindex's own code sit at the top of modules; one inside a function is an exception
that says why on a ``# lazy: <reason>`` comment just above it or on its line (issue 43), and there
are at most ``LIMIT`` of them in the whole package. The CLI's laziness lives in its command table
(producers/cli/commands.py), which loads a command's module with importlib; the queue side of a
sync request in producers/dispatch.py, which producers/enqueue.py loads only when work is sent."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

# The whole package (what `pip install` ships as memindex).
AREAS = ("memindex", "pipeline", "workers", "producers")
# Issue 43: at most this many function-level imports of our own code over the package.
LIMIT = 40
# Lines above an import that its reason may start on (a reason can take two or three lines).
REASON_SPAN = 4


def _own(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "memindex"
    return any(alias.name.split(".")[0] == "memindex" for alias in node.names)


def function_level_imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[int, ast.Import | ast.ImportFrom] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and _own(node):
                    found[id(node)] = node  # (a nested function's imports are walked twice)
    return sorted(found.values(), key=lambda n: n.lineno)


def says_why(lines: list[str], node: ast.Import | ast.ImportFrom) -> bool:
    """A ``# lazy: <reason>`` comment on one of the REASON_SPAN lines above the import, or on its own lines."""
    above = lines[max(0, node.lineno - 1 - REASON_SPAN):node.lineno - 1]
    own = lines[node.lineno - 1:node.end_lineno or node.lineno]
    return (any(line.strip().startswith("# lazy:") for line in above)
            or any("# lazy:" in line for line in own))


def test_every_function_level_import_of_our_code_says_why() -> None:
    files = sorted(p for area in AREAS for p in (REPO / area).rglob("*.py"))
    assert len(files) > 100  # the areas exist where this test looks (the package has ~200 modules)
    unexplained, found = [], []
    for path in files:
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in function_level_imports(path):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}")
            if not says_why(lines, node):
                unexplained.append(found[-1])
    assert unexplained == [], f"function-level imports without a '# lazy: <reason>' comment: {unexplained}"
    assert len(found) <= LIMIT, f"{len(found)} function-level imports of memindex code (at most {LIMIT}): {found}"


def test_the_walk_finds_a_function_level_import_and_skips_top_level_and_other_packages(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import json\nfrom memindex.pipeline import errors\n\n"
                      "def f():\n    import os\n    from memindex.workers import broker\n\n"
                      "    def g():\n        import memindex.producers.cli.ops\n")
    assert [n.lineno for n in function_level_imports(sample)] == [6, 9]


def test_a_reason_counts_above_the_import_or_on_its_line_and_nowhere_else(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    # lazy: above\n    from memindex import a\n"
                      "    from memindex import b  # lazy: inline\n"
                      "    from memindex import c  # (the reason two lines up covers it)\n"
                      "    x = 1\n    y = 2\n    z = 3\n    w = 4\n    from memindex import d\n"
                      "    # lazy: below does not count\n")
    lines = sample.read_text().splitlines()
    assert [says_why(lines, n) for n in function_level_imports(sample)] == [True, True, True, False]


def _loaded_after(code: str, **env: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_importing_the_hooks_and_enqueue_loads_no_queue_no_planner_no_store() -> None:
    """What the agent runtime imports (the hooks) and what the CLI and library import to ask for a
    sync (enqueue) load the queue side (producers/dispatch.py: dramatiq, the actors) only when
    work is sent, and the planner only when a plan is made."""
    mods = _loaded_after("import memindex.producers.hooks, memindex.producers.enqueue")
    heavy = {"dramatiq", "redis", "sqlite3", "asyncio", "numpy", "memindex.producers.dispatch",
             "memindex.workers.broker", "memindex.workers.actors", "memindex.workers.embedded",
             "memindex.pipeline.index.indexer", "memindex.pipeline.embeddings.embedder",
             "memindex.pipeline.store.reader"}
    assert "memindex.producers.hooks" in mods and not mods & heavy, mods & heavy
    # the long-running producers take the queue layer at their top (this test would see it otherwise)
    assert {"dramatiq", "memindex.producers.dispatch"} <= _loaded_after("import memindex.producers.backfill")


def test_the_serve_guard_reads_its_limits_when_a_server_builds_its_protocol() -> None:
    """guard.py is imported at the top of http.py and mcp.py: a bad limit is said by the server
    that uses it, not by an import (mcp over stdio never reads it)."""
    code = ("import memindex.producers.serve.mcp\n"
            "from memindex.pipeline.errors import ConfigError\n"
            "from memindex.producers.serve.guard import guarded_protocol\n"
            "try:\n    guarded_protocol(5.0)\nexcept ConfigError as exc:\n    print('refused:', exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "MEMINDEX_SERVE_MAX_CONNECTIONS": "lots"})
    assert out.returncode == 0, out.stderr
    assert "refused: MEMINDEX_SERVE_MAX_CONNECTIONS must be a whole number" in out.stdout, out.stdout
