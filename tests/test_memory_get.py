import os

import pytest

from memindex.pipeline.search.get import MemoryGetError, memory_get


@pytest.fixture
def ws(agent):
    agent.write("MEMORY.md", "root\nline2\nline3\n")
    agent.write("memory/2026-02-10.md", "a\nb\nc\nd\n")
    agent.write("memory/notes.txt", "not markdown")
    agent.write("README.md", "not memory")
    (agent.root / "secret.md").write_text("top secret")
    return agent


def test_reads_whole_file_and_windows(ws):
    s = ws.settings()
    assert memory_get(s, "MEMORY.md").text == "root\nline2\nline3\n"
    r = memory_get(s, "memory/2026-02-10.md", from_line=2, lines=2)
    assert (r.text, r.path, r.from_line, r.lines) == ("b\nc", "memory/2026-02-10.md", 2, 2)
    assert memory_get(s, "memory/2026-02-10.md", from_line=99, lines=2).text == ""
    assert memory_get(s, "./memory/2026-02-10.md", from_line=4).text.startswith("d")


def test_missing_file_is_empty_not_an_error(ws):
    assert memory_get(ws.settings(), "memory/2030-01-01.md").text == ""


@pytest.mark.parametrize("path, rule", [
    ("../secret.md", "'..'"),
    ("memory/../../secret.md", "'..'"),
    ("memory/../README.md", "'..'"),
    ("/etc/passwd", "absolute"),
    ("README.md", "outside the memory files"),
    ("memory/notes.txt", "Markdown"),
    ("", "path required"),
    ("   ", "path required"),
    ("memory/a\x00.md", "NUL"),
    ("~/secret.md", "absolute"),
])
def test_rejections_say_which_rule(ws, path, rule):
    with pytest.raises(MemoryGetError) as err:
        memory_get(ws.settings(), path)
    assert rule in str(err.value)


def test_symlinks_refused(ws):
    os.symlink(ws.root / "secret.md", ws.workspace / "memory" / "link.md")
    outside = ws.root / "outside"
    outside.mkdir()
    (outside / "x.md").write_text("outside")
    os.symlink(outside, ws.workspace / "memory" / "linkdir")
    for p in ("memory/link.md", "memory/linkdir/x.md"):
        with pytest.raises(MemoryGetError, match="symlink"):
            memory_get(ws.settings(), p)


def test_directory_refused(ws):
    (ws.workspace / "memory" / "dir.md").mkdir()
    with pytest.raises(MemoryGetError, match="regular file"):
        memory_get(ws.settings(), "memory/dir.md")


def test_extra_path_inside_workspace_is_readable(ws):
    ws.write("team/plan.md", "plan")
    ws.memory_config({"extraPaths": ["team"]})
    assert memory_get(ws.settings(), "team/plan.md").text == "plan"
