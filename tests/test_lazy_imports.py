"""Imports of memindex's own code sit at the top of modules; one inside a function is an exception
that says why on a ``# lazy: <reason>`` comment just above it (issue 43). The CLI's laziness lives
in its command table (producers/cli/commands.py), which loads a command's module with importlib."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

# The folders held to the rule so far; the rest of the package joins as it is converted (issue 43).
AREAS = ("producers/cli", "producers/serve")
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


def test_every_function_level_import_of_our_code_says_why() -> None:
    files = sorted(p for area in AREAS for p in (REPO / area).glob("*.py"))
    assert len(files) > 10  # the areas exist where this test looks
    unexplained, total = [], 0
    for path in files:
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in function_level_imports(path):
            total += 1
            above = lines[max(0, node.lineno - 1 - REASON_SPAN):node.lineno - 1]
            if not any(line.strip().startswith("# lazy:") for line in above):
                unexplained.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert unexplained == [], f"function-level imports without a '# lazy: <reason>' comment: {unexplained}"
    assert total <= 20, f"{total} function-level imports of memindex code in {', '.join(AREAS)}"


def test_the_walk_finds_a_function_level_import_and_skips_top_level_and_other_packages(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import json\nfrom memindex.pipeline import errors\n\n"
                      "def f():\n    import os\n    from memindex.workers import broker\n\n"
                      "    def g():\n        import memindex.producers.cli.ops\n")
    assert [n.lineno for n in function_level_imports(sample)] == [6, 9]
