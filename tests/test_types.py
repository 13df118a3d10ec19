"""mypy strict over the whole package, with the repository's own ``[tool.mypy]`` settings.

mypy cannot see ``memindex`` through the default editable install (the package-dir mapping is
an import hook, and mypy resolves modules from paths only), so the check runs on a copy laid out
as installed. One mypy run answers three things: the package has no errors, the settings really
are strict (a probe module with an untyped def and a wrong return must be reported), and the run
reached the whole package (the probe is found through ``-p memindex``).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from collections import Counter
from pathlib import Path

from tests.conftest import REPO, installed_layout

# A deliberately wrong module dropped into the copy: strict mode must flag both functions.
PROBE = textwrap.dedent('''
    def untyped(x):
        return x


    def wrong() -> int:
        return "not an int"
''')
PROBE_CODES = {"no-untyped-def", "return-value"}

ERROR_LINE = re.compile(r"^(memindex/[^:]+\.py):\d+: error: .*\[([a-z-]+)\]$")


def _area(path: str) -> str:
    """memindex/pipeline/config/x.py -> pipeline/config; memindex/pipeline/x.py -> pipeline."""
    parts = path.split("/")[1:-1]
    if not parts:
        return "memindex"
    return "/".join(parts[:2]) if parts[0] in ("producers", "pipeline") and len(parts) > 1 and parts[1] in (
        "config", "cli", "serve") else parts[0]


def test_mypy_config_is_strict_without_blanket_ignores() -> None:
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert cfg["strict"] is True
    for key in ("ignore_errors", "ignore_missing_imports", "disable_error_code", "follow_imports", "exclude"):
        assert key not in cfg, f"[tool.mypy] {key} would hide errors package-wide"
    for override in cfg.get("overrides", []):
        modules = override["module"] if isinstance(override["module"], list) else [override["module"]]
        assert not any(m == "memindex" or m.startswith("memindex.") for m in modules), override
        assert set(override) <= {"module", "ignore_missing_imports"}, override  # only third-party stubs


def test_every_type_ignore_names_its_code_and_says_why() -> None:
    bare, silent = [], []
    for top in ("memindex", "pipeline", "workers", "producers"):
        for path in sorted((REPO / top).rglob("*.py")):
            lines = path.read_text(encoding="utf-8").splitlines()
            for i, line in enumerate(lines):
                m = re.search(r"#\s*type:\s*ignore(\[[a-z-, ]+\])?(.*)$", line)
                if not m:
                    continue
                where = f"{path.relative_to(REPO)}:{i + 1}"
                if not m.group(1):
                    bare.append(where)
                # The reason: a comment after the ignore, or a comment line just above the statement.
                elif not m.group(2).strip() and not (i and lines[i - 1].lstrip().startswith("#")):
                    silent.append(where)
    assert not bare, f"type: ignore without an error code: {bare}"
    assert not silent, f"type: ignore without a comment saying why ({len(silent)}): {silent}"


def test_mypy_strict_finds_no_errors_in_the_installed_package(tmp_path: Path) -> None:
    root = installed_layout(tmp_path / "site")
    (root / "memindex" / "_typecheck_probe.py").write_text(PROBE, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
                        "--cache-dir", str(tmp_path / "cache"), "-p", "memindex"],
                       cwd=root, capture_output=True, text=True, timeout=900)
    errors = [(m.group(1), m.group(2)) for m in map(ERROR_LINE.match, r.stdout.splitlines()) if m]
    probe = {code for path, code in errors if path == "memindex/_typecheck_probe.py"}
    assert probe == PROBE_CODES, f"the strict probe was not reported as expected: {probe}\n{r.stdout}{r.stderr}"
    real = [(path, code) for path, code in errors if path != "memindex/_typecheck_probe.py"]
    per_area = Counter(_area(path) for path, _ in real)
    shown = "\n".join(ln for ln in r.stdout.splitlines() if "_typecheck_probe" not in ln)
    assert not real, f"mypy strict: {len(real)} errors, per area {dict(per_area.most_common())}\n{shown}{r.stderr}"
    assert "error" not in r.stderr.lower(), r.stderr  # mypy itself ran cleanly (no crash, no bad config)
