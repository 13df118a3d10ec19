"""Imports of memindex's own code sit at the top of modules; one inside a function is an exception
that says why on a ``# lazy: <reason>`` comment just above it or on its line (issue 43), and there
are at most ``LIMIT`` of them in the whole package. The CLI's laziness lives in its command table
(producers/cli/commands.py), which loads a command's module with importlib; the queue side of a
sync request in producers/dispatch.py, which producers/enqueue.py loads only when work is sent."""

from __future__ import annotations

import ast
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
