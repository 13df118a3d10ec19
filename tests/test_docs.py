"""The README and docs/ say only what is true of the code.

- every ``memindex ...`` command line in a ```bash / ```sh block parses with the real CLI parser
  (the one ``memindex`` itself builds), so a renamed or removed flag fails here, not for a reader;
- other command lines name files that exist: ``python bench/x.py --flag`` (the script, and the
  flag in its source), ``pip install .``, ``honcho start`` (the Procfile), ``docker compose
  --profile P`` (docker-compose.yml and its profile), ``cd DIR``, ``bash script.sh``, ``./paths``;
- every relative link points to an existing file, and every ``#anchor`` to a heading of it;
- the library page lists every name of ``memindex.__all__``;
- `.ci/run` runs exactly the README's test command.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import memindex

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_LANGS = {"bash", "sh", "shell", "console"}
OPERATORS = {"&&", "||", ";", "|", "&", ";;"}


@dataclass(frozen=True)
class CommandLine:
    doc: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}: {self.text}"


def _fenced_blocks(doc: Path) -> Iterator[tuple[str, int, list[str]]]:
    """(language, line number of the block's first line, its lines) for each fenced block."""
    lang: str | None = None
    start, body = 0, list[str]()
    for no, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.match(r"^\s*```(\S*)", line)
        if lang is None:
            if fence:
                lang, start, body = fence.group(1).lower(), no + 1, []
        elif fence:
            yield lang, start, body
            lang = None
        else:
            body.append(line)


def _shell_lines() -> list[CommandLine]:
    out = []
    for doc in DOCS:
        for lang, start, body in _fenced_blocks(doc):
            if lang not in SHELL_LANGS:
                continue
            pending, first = "", 0
            for offset, raw in enumerate(body):
                if not pending:
                    first = start + offset
                if raw.rstrip().endswith("\\"):  # a continued line
                    pending += raw.rstrip()[:-1] + " "
                    continue
                text = (pending + raw).strip()
                pending = ""
                if text and not text.startswith("#"):
                    out.append(CommandLine(doc, first, text))
    return out


def _segments(text: str) -> list[list[str]]:
    """The simple commands of one shell line: split at && || ; | &, comments dropped, and the
    commands inside $(...) (e.g. ``eval "$(memindex completion bash)"``) as segments of their own."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    segments: list[list[str]] = [[]]
    for token in lexer:
        if token in OPERATORS:
            segments.append([])
            continue
        for inner in re.findall(r"\$\(([^()]*)\)", token):
            segments.extend(_segments(inner))
        segments[-1].append(token)
    words = [[w for w in seg] for seg in segments if seg]
    # VAR=value prefixes are the command's environment, not the command.
    return [seg[next((i for i, w in enumerate(seg) if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)), len(seg)):]
            for seg in words]


def _memindex_argv(seg: list[str]) -> list[str] | None:
    """The arguments of a memindex invocation in this segment (None: it runs something else)."""
    if not seg:
        return None
    if seg[0] == "memindex":
        return seg[1:]
    if seg[0] in ("python", "python3") and seg[1:3] == ["-m", "memindex"]:
        return seg[3:]
    if "--" in seg and seg[seg.index("--") + 1:seg.index("--") + 2] == ["memindex"]:  # claude mcp add x -- memindex
        return seg[seg.index("--") + 2:]
    return None


LINES = _shell_lines()
MEMINDEX_LINES = [(c, argv) for c in LINES for seg in _segments(c.text) if (argv := _memindex_argv(seg)) is not None]


# --- the real parser ---------------------------------------------------------------------------

def _find_parser_builder() -> Callable[[], argparse.ArgumentParser] | None:
    """The function ``memindex`` builds its parser with: ``build_parser`` in the CLI's main module
    today; the CLI may move it, so look in every module of the package before giving up."""
    import importlib
    import pkgutil

    import memindex.producers.cli as cli

    modules = [importlib.import_module("memindex.producers.cli.main")]
    modules += [importlib.import_module(f"memindex.producers.cli.{m.name}")
                for m in pkgutil.iter_modules(cli.__path__) if m.name != "main"]
    for mod in modules:
        for name in ("build_parser", "make_parser", "parser"):
            fn = getattr(mod, name, None)
            if callable(fn):
                try:
                    parser = fn()
                except TypeError:
                    continue
                if isinstance(parser, argparse.ArgumentParser):
                    return fn  # type: ignore[no-any-return]  # found by name; checked by calling it
    return None


BUILDER = _find_parser_builder()


def _parse_in_process(argv: list[str]) -> str | None:
    """None when argparse accepts ``argv``, else its error message."""
    assert BUILDER is not None
    parser = BUILDER()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            args, extra = parser.parse_known_args(argv)
        except SystemExit as exc:
            return None if exc.code == 0 else err.getvalue().strip() or f"exit {exc.code}"
    if extra:
        return f"unrecognized arguments: {' '.join(extra)}"
    if getattr(args, "command", None) is None and "--version" not in argv:
        return "no command"
    return None


def _help(words: list[str]) -> str:
    r = subprocess.run([sys.executable, "-m", "memindex", *words, "--help"], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _parse_by_help(argv: list[str]) -> str | None:
    """Without a parser to import: the command is one ``memindex --help`` lists, and each option
    is one its ``--help`` shows (what the public entry point says, whatever the module layout)."""
    commands = re.findall(r"^    (\S+)", _help([]), re.M)
    command = next((w for w in argv if not w.startswith("-") and w in commands), None)
    if command is None:
        return None if "--version" in argv else f"no command of {commands}"
    text = _help([command])
    shown = set(re.findall(r"(?<![\w-])(-[-\w]+)", text))
    bad = [w.split("=")[0] for w in argv if w.startswith("-") and w != "--" and w.split("=")[0] not in shown]
    return f"{command} takes no {bad}" if bad else None


@pytest.mark.parametrize("cmd,argv", MEMINDEX_LINES, ids=[str(c) for c, _ in MEMINDEX_LINES])
def test_documented_memindex_command_parses(cmd: CommandLine, argv: list[str]) -> None:
    problem = _parse_in_process(argv) if BUILDER is not None else _parse_by_help(argv)
    assert problem is None, f"{cmd}\n  memindex {' '.join(argv)}: {problem}"


def test_docs_show_the_commands_they_are_checked_by() -> None:
    """The parametrised test above is not vacuous: the docs hold many memindex lines, across pages,
    and the parser refuses what it should (a flag no command has)."""
    assert len(MEMINDEX_LINES) >= 30
    assert {c.doc.name for c, _ in MEMINDEX_LINES} >= {"README.md", "cli.md", "operations.md", "servers.md"}
    check = _parse_in_process if BUILDER is not None else _parse_by_help
    assert check(["search", "--max-result", "3", "x"]) is not None
    assert check(["status", "--no-such-flag"]) is not None
    assert check(["index", "--force"]) is None


# --- other command lines -------------------------------------------------------------------------

def _exists(cwd: Path, path: str) -> bool:
    path = re.sub(r"\[[^\]]*\]$", "", path)  # pip's .[test,local]
    return path.startswith(("/", "~", "$")) or (cwd / path).exists()


def _check_python(cwd: Path, args: list[str]) -> list[str]:
    if not args or args[0] == "-m":
        if args[1:2] == ["pytest"]:
            return [a for a in args[2:] if a.startswith("tests/") and not _exists(cwd, a.split("::")[0])]
        return []
    script = cwd / args[0]
    if not script.exists():
        return [args[0]]
    source = script.read_text(encoding="utf-8")
    return [f"{args[0]} {a}" for a in args[1:] if a.startswith("--") and f'"{a.split("=")[0]}"' not in source]


def _check_pip(cwd: Path, args: list[str]) -> list[str]:
    paths = [a for a in args if a.startswith(".")]
    return [a for a in paths if not _exists(cwd, a)]


def _check_honcho(cwd: Path, args: list[str]) -> list[str]:
    procfile = args[args.index("-f") + 1] if "-f" in args else "Procfile"
    return [] if _exists(cwd, procfile) else [procfile]


def _check_docker(cwd: Path, args: list[str]) -> list[str]:
    if args[:1] != ["compose"]:
        return []
    compose = cwd / (args[args.index("-f") + 1] if "-f" in args else "docker-compose.yml")
    if not compose.exists():
        return [str(compose)]
    text = compose.read_text(encoding="utf-8")
    profiles = [args[i + 1] for i, a in enumerate(args) if a == "--profile"]
    return [f"--profile {p}" for p in profiles if not re.search(rf"profiles:\s*\[[^\]]*\b{re.escape(p)}\b", text)]


def _check_script(cwd: Path, args: list[str]) -> list[str]:
    return [a for a in args[:1] if not _exists(cwd, a)]


CHECKS: dict[str, Callable[[Path, list[str]], list[str]]] = {
    "python": _check_python, "python3": _check_python, "pip": _check_pip, "honcho": _check_honcho,
    "docker": _check_docker, "bash": _check_script, "sh": _check_script,
}


@pytest.mark.parametrize("cmd", LINES, ids=[str(c) for c in LINES])
def test_documented_command_names_existing_files(cmd: CommandLine) -> None:
    cwd, missing = REPO, []
    for seg in _segments(cmd.text):
        if not seg or _memindex_argv(seg) is not None:
            continue
        name, args = seg[0], seg[1:]
        if name == "cd":
            if args and args[0] != "-" and not args[0].startswith(("/", "~", "$")):
                missing += [] if (cwd / args[0]).is_dir() else [args[0]]
                cwd = cwd / args[0]
            else:
                cwd = REPO
            continue
        if name == "npm" and args[:1] == ["ci"] and not (cwd / "package-lock.json").exists():
            missing.append(f"{cwd.relative_to(REPO)}/package-lock.json")
        check = CHECKS.get(name)
        missing += check(cwd, args) if check is not None else []
        missing += [a for a in args if a.startswith("./") and not _exists(cwd, a)]
    assert not missing, f"{cmd}\n  names what does not exist: {missing}"


# --- links ---------------------------------------------------------------------------------------

def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link's text only
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    in_code = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            anchors.add(slug if n == 0 else f"{slug}-{n}")
            seen[slug] = n + 1
        anchors.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
    return anchors


def _links(doc: Path) -> Iterator[tuple[int, str]]:
    in_code = False
    for no, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # code spans hold no links
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto: ...
                yield no, target


LINKS = [(doc, no, target) for doc in DOCS for no, target in _links(doc)]


@pytest.mark.parametrize("doc,no,target", LINKS, ids=[f"{d.relative_to(REPO)}:{n}:{t}" for d, n, t in LINKS])
def test_relative_link_resolves(doc: Path, no: int, target: str) -> None:
    path, _, anchor = target.partition("#")
    dest = (doc.parent / path).resolve() if path else doc
    assert dest.exists(), f"{doc.relative_to(REPO)}:{no}: {target}: no such file"
    if anchor:
        assert dest.suffix == ".md", f"{doc.relative_to(REPO)}:{no}: {target}: an anchor into a non-Markdown file"
        assert anchor in _anchors(dest), (f"{doc.relative_to(REPO)}:{no}: {target}: no heading "
                                         f"#{anchor} in {dest.relative_to(REPO)}")


def test_links_are_checked_at_all() -> None:
    assert len(LINKS) >= 50
    assert "the-two-paths" in _anchors(REPO / "docs" / "architecture.md")
    assert _slug("Speed at 1k-30k files (`bench/corpus.py --scale`, issue 19)") == \
        "speed-at-1k-30k-files-benchcorpuspy---scale-issue-19"


def test_the_readme_links_every_docs_page() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    pages = {p.name for p in (REPO / "docs").glob("*.md")}
    linked = set(re.findall(r"\]\(docs/([^)#]+\.md)", readme))
    assert pages <= linked, f"docs pages the README's table of contents does not link: {sorted(pages - linked)}"


# --- facts ---------------------------------------------------------------------------------------

def test_library_page_lists_the_whole_public_api() -> None:
    text = (REPO / "docs" / "library.md").read_text(encoding="utf-8")
    table = text[text.index("## Everything in `memindex.__all__`"):]
    named = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", table))
    assert set(memindex.__all__) <= named, sorted(set(memindex.__all__) - named)


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Two commands"):readme.index("\n## ", readme.index("## Two commands") + 1)]
    blocks = re.findall(r"```bash\n(.*?)\n```", section, re.S)
    assert len(blocks) == 2, "the README's Two commands section holds two bash commands"
    ci = [line for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1].strip() == blocks[1].strip()
    assert blocks[1].strip() == "pip install -q -e '.[test,local]' && python -m pytest -q"


def _config_table() -> dict[str, object]:
    """``key -> default`` from the configuration page's table (a row may name several keys)."""
    import json

    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    table = text[text.index("## The `memorySearch` keys"):]
    table = table[:table.index("\n## ")]
    rows: dict[str, object] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        keys = re.findall(r"`([\w.]+)`", cells[0])
        defaults = [json.loads(d) for d in re.findall(r"`([^`]+)`", cells[1])]
        if len(defaults) == 1:
            defaults *= len(keys)
        assert len(defaults) == len(keys), line
        rows.update(zip(keys, defaults))
    return rows


def test_documented_config_defaults_are_the_defaults(tmp_path: Path) -> None:
    """A config that sets every key of the table to its documented default resolves exactly as an
    empty one (a key the loader does not take fails too: unknown keys are errors)."""
    import json

    rows = _config_table()
    assert len(rows) >= 45 and rows["query.minScore"] == 0.35
    settings = []
    for name, search in (("empty", {}), ("documented", rows)):
        state = tmp_path / name
        (state / "ws").mkdir(parents=True)
        tree: dict[str, Any] = {}
        for key, value in search.items():
            *parents, leaf = key.split(".")
            node = tree
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        cfg = {"agents": {"defaults": {"workspace": str(tmp_path / "ws"), "memorySearch": tree}}}
        (state / "openclaw.json").write_text(json.dumps(cfg), encoding="utf-8")
        ctx = memindex.Context(agent_id="main", config=str(state / "openclaw.json"), state_dir=str(state))
        shown = repr(memindex.load_settings(ctx, env={})).replace(str(state), "<state>")
        settings.append(re.sub(r"\b(\d+)\.0\b", r"\1", shown))  # 60 and 60.0 are one number to a config
    assert settings[0] == settings[1]


def _commands() -> set[str]:
    if BUILDER is not None:
        sub = next(a for a in BUILDER()._actions if isinstance(a, argparse._SubParsersAction))
        return set(sub.choices)
    return set(re.findall(r"^    (\S+)", _help([]), re.M))


def test_cli_reference_lists_every_command() -> None:
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `memindex ([\w-]+)", text, re.M))
    assert listed == _commands()


def test_every_memindex_variable_the_code_reads_is_documented() -> None:
    """And every one documented still exists (in the code, the compose file or the tests)."""
    def names(paths: list[Path]) -> set[str]:
        found: set[str] = set()
        for path in paths:
            found |= set(re.findall(r"\bMEMINDEX_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")))
        return found

    code = names([p for d in ("memindex", "pipeline", "workers", "producers") for p in (REPO / d).rglob("*.py")])
    documented = names([REPO / "docs" / "environment.md"])
    assert len(code) >= 30
    assert code <= documented, f"not in docs/environment.md: {sorted(code - documented)}"
    known = code | names([REPO / "docker-compose.yml", *(REPO / "tests").glob("*.py"), REPO / ".ci" / "run"])
    assert documented <= known, f"documented but read nowhere: {sorted(documented - known)}"
