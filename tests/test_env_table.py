"""Every ``MEMINDEX_*`` variable is defined once, in ``pipeline/config/environ.py``'s table, with its
default and check, and read only through it (issue 43: 33 variables were read in 20 files, each
with its own default and its own parsing).

The package's sources are read as text and as syntax trees: no module but the table holds a
variable's name as a string of its own (so none can hand it to ``os.environ``), no module reads the
environment keyed by a table entry's ``.name``, and every name any source mentions (a message, a
docstring) is one the table defines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from memindex.pipeline.config import environ
from memindex.pipeline.errors import ConfigError, EnvError

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "pipeline" / "config" / "environ.py"
NAME = re.compile(r"MEMINDEX_[A-Z0-9_]*")


def _sources() -> list[Path]:
    files = [p for d in ("pipeline", "workers", "producers", "memindex") for p in (ROOT / d).rglob("*.py")]
    assert len(files) > 100 and TABLE in files  # the package itself, not an empty directory
    return sorted(files)


def _env_reads(tree: ast.AST) -> list[int]:
    """Lines reading os.environ / getenv (or an ``env`` mapping) with a key that is a table entry's
    ``.name`` or a ``*_ENV`` alias of one: a read that skips the entry's parsing and default."""

    def keyed_by_table(key: ast.expr) -> bool:
        return ((isinstance(key, ast.Attribute) and key.attr == "name")
                or (isinstance(key, ast.Name) and key.id.endswith("_ENV")))

    def is_environ(node: ast.expr) -> bool:
        text = ast.unparse(node)
        return text in ("os.environ", "environ", "env") or text.endswith(".environ")

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and keyed_by_table(node.args[0]):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "get" and is_environ(func.value)) or \
                    ast.unparse(func) in ("os.getenv", "getenv"):
                lines.append(node.lineno)
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_environ(node.value)
                and keyed_by_table(node.slice)):
            lines.append(node.lineno)
    return lines


def test_no_module_but_the_table_names_or_reads_a_variable():
    named, read = [], []
    for path in _sources():
        if path == TABLE:
            continue
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(ROOT)
        named += [f"{where}:{n.lineno}: {n.value}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and NAME.fullmatch(n.value)]
        read += [f"{where}:{line}" for line in _env_reads(tree)]
    assert not named, "a MEMINDEX_ name outside pipeline/config/environ.py (use its table entry):\n" + "\n".join(named)
    assert not read, "the environment read by a variable's name (use the entry's get/raw/text):\n" + "\n".join(read)


def test_the_checks_catch_what_they_are_for():
    """The two scans above find a bare name and a read by ``.name`` (else they could pass on anything)."""
    bad = ast.parse('import os\nX = "MEMINDEX_POLL_MS"\nos.environ.get(environ.POLL_MS.name)\n'
                    'os.environ[TOKEN_ENV]\nos.environ[TOKEN_ENV] = "t"\n')
    assert [n.value for n in ast.walk(bad) if isinstance(n, ast.Constant) and NAME.fullmatch(str(n.value))] \
        == ["MEMINDEX_POLL_MS"]
    assert _env_reads(bad) == [3, 4]  # line 5 sets the variable for a child process: allowed


def test_every_name_the_sources_mention_is_in_the_table():
    unknown = set()
    for path in _sources():
        for name in NAME.findall(path.read_text()):
            if name.endswith("_"):  # a family, "MEMINDEX_RETRY_*": some entry must start with it
                if name != "MEMINDEX_" and not any(v.startswith(name) for v in environ.VARS):
                    unknown.add(name)
            elif name not in environ.VARS:
                unknown.add(name)
    assert not unknown, f"named in the sources but not defined in pipeline/config/environ.py: {sorted(unknown)}"


NUMBERS = [v for v in environ.VARS.values() if isinstance(v, environ.Number)]
CHOICES = [v for v in environ.VARS.values() if isinstance(v, environ.Choice)]


@pytest.mark.parametrize("var", NUMBERS, ids=lambda v: v.name)
def test_each_number_has_its_default_and_refuses_what_it_cannot_take(var):
    assert var.get({}) == var.default and var.get({var.name: "  "}) == var.default  # unset or blank
    for bad in ("abc", "nan", "inf", "-1", "0" if var.above is not None or (var.minimum or 0) > 0 else "-5"):
        with pytest.raises(EnvError) as err:
            var.get({var.name: bad})
        assert isinstance(err.value, ConfigError) and var.name in str(err.value) and repr(bad) in str(err.value)
    good = "7" if (var.minimum or 0) <= 7 else str(int(var.minimum or 0))
    value = var.get({var.name: f" {good} "})
    assert value == float(good) and isinstance(value, int if var.whole or isinstance(var.default, int) else float)


@pytest.mark.parametrize("var", CHOICES, ids=lambda v: v.name)
def test_each_choice_takes_its_choices_and_names_them_when_refusing(var):
    assert var.get({}) == var.default
    assert var.get({var.name: var.choices[-1].upper()}) == var.choices[-1]
    with pytest.raises(EnvError, match=re.escape(var.name)) as err:
        var.get({var.name: "verbose"})
    assert all(c in str(err.value) for c in var.choices)


def test_the_table_describes_every_entry_once():
    text = environ.describe()
    assert [line.split()[0] for line in text.splitlines()] == list(environ.VARS)
    assert "MEMINDEX_POLL_MS" in text and "(default: 100)" in text
    with pytest.raises(ValueError, match="defined twice"):
        environ.Var("MEMINDEX_POLL_MS", "again")
    flag = environ.ALLOW_BROAD_EXTRA_PATHS
    assert [flag.on({flag.name: v}) for v in ("1", " TRUE ", "yes", "0", "", "no")] == [True] * 3 + [False] * 3
