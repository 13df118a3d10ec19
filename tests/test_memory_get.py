import json
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
    # OpenClaw's count = max(1, lines ?? total): lines 0 with a start is one line (helper-55: the
    # rest of the file); both 0 are "not given", the whole file.
    assert memory_get(s, "memory/2026-02-10.md", from_line=2, lines=0).text == "b"
    assert memory_get(s, "MEMORY.md", from_line=0, lines=0).text == "root\nline2\nline3\n"


def test_a_final_line_end_does_not_count_as_a_line(ws):
    # "a\nb\nc\nd\n" is 4 lines (as `wc -l` and the citations count them), not 5 with an empty one.
    s = ws.settings()
    r = memory_get(s, "memory/2026-02-10.md", from_line=3, lines=5)
    assert (r.text, r.lines, r.total_lines) == ("c\nd", 2, 4)
    assert memory_get(s, "memory/2026-02-10.md", from_line=5).text == ""
    ws.write("memory/crlf.md", "one\r\ntwo\r\n")
    assert memory_get(s, "memory/crlf.md", from_line=1).total_lines == 2
    ws.write("memory/blank-end.md", "one\n\n")  # a blank last line is still a line
    assert memory_get(s, "memory/blank-end.md", from_line=1).total_lines == 2


LINE_END_FILES = {  # the same four lines with CRLF, lone-CR and mixed line ends
    "memory/crlf.md": "# CRLF note\r\nline two\r\nthe marmoset code is XJ-9\r\nline four\r\n",
    "memory/cr.md": "# CR note\rline two\rthe ocelot code is XJ-9\rline four\r",
    "memory/mixed.md": "# Mixed note\r\nline two\rthe quokka code is XJ-9\nline four\r\n",
}


def test_every_read_ends_its_lines_in_lf_whatever_the_file_uses(agent):
    """A window of a CRLF file kept every CR ("line two\r\n...XJ-9\r", one dangling), a window of a
    lone-CR file turned its CRs into LF while the whole-file read kept them. Now every read, whole
    file or window, ends its lines in LF: a window is a slice of the whole file, as snippets show it."""
    for rel, text in LINE_END_FILES.items():
        agent.write(rel, text)
    s = agent.settings()
    for rel, raw in LINE_END_FILES.items():
        whole = memory_get(s, rel).text
        title = raw.split("\r")[0]
        animal = raw.split("the ")[1].split(" ")[0]
        assert whole == f"{title}\nline two\nthe {animal} code is XJ-9\nline four\n", rel
        r = memory_get(s, rel, from_line=2, lines=2)
        assert (r.text, r.lines, r.total_lines) == (f"line two\nthe {animal} code is XJ-9", 2, 4), rel
        assert r.text == "\n".join(whole.split("\n")[1:3])
        assert memory_get(s, rel, from_line=1, lines=4).text == whole.rstrip("\n")
        assert memory_get(s, rel, from_line=4).text == "line four"


def test_get_of_a_cited_range_prints_the_snippet_for_any_line_end(agent):
    """The README's promise, through the CLI: `get PATH --from snippetStartLine --lines N` prints the
    snippet's text. For a CRLF file it printed the lines with their CRs (the snippet has none)."""
    agent.memory_config({}, memory={"citations": "off"})
    for rel, text in LINE_END_FILES.items():
        agent.write(rel, text)
    from tests.conftest import run_cli

    base = ("--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(agent.workspace))
    assert run_cli(*base, "index").returncode == 0
    for rel, animal in (("memory/crlf.md", "marmoset"), ("memory/cr.md", "ocelot"), ("memory/mixed.md", "quokka")):
        out = run_cli(*base, "search", "--json", animal)
        [hit] = json.loads(out.stdout)["results"]
        start, end = hit["snippetStartLine"], hit["snippetEndLine"]
        got = run_cli(*base, "get", "--json", rel, "--from", str(start), "--lines", str(end - start + 1))
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["text"] == hit["snippet"], (rel, hit)
        assert "\r" not in hit["snippet"] and animal in hit["snippet"]


def test_missing_file_is_empty_not_an_error(ws):
    res = memory_get(ws.settings(), "memory/2030-01-01.md")
    assert res.text == "" and res.missing and res.as_dict() == {"path": "memory/2030-01-01.md", "text": ""}
    assert not memory_get(ws.settings(), "memory/2026-02-10.md").missing
    # The CLI prints nothing on stdout (as OpenClaw) and says why on stderr (it printed nothing at all).
    from tests.conftest import run_cli

    out = run_cli("--config", str(ws.config_path), "--state-dir", str(ws.state), "--workspace", str(ws.workspace),
                  "get", "memory/2030-01-01.md")
    assert out.returncode == 0 and out.stdout == "", out
    assert out.stderr == "note: memory/2030-01-01.md does not exist (nothing recorded yet)\n", out.stderr


def test_a_missing_workspace_is_said_not_just_an_empty_file(agent, tmp_path):
    """An MCP client that started the server with another HOME read a workspace that is not there:
    every memory_get answered {"text": ""} as for a note not yet written (search warned)."""
    gone = tmp_path / "nowhere"
    from dataclasses import replace

    s = replace(agent.settings(), workspace=gone)
    res = memory_get(s, "memory/2026-02-10.md")
    assert res.missing and res.text == ""
    assert res.as_dict()["warning"] == f"the workspace of agent 'main', {gone}, does not exist"
    from tests.conftest import run_cli

    out = run_cli("--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(gone),
                  "get", "memory/2026-02-10.md")
    assert out.returncode == 0 and out.stdout == "", out
    assert f"does not exist (the workspace of agent 'main', {gone}, does not exist)" in out.stderr, out.stderr


@pytest.mark.parametrize("path, rule", [
    ("../secret.md", "outside the memory files"),
    ("memory/../../secret.md", "outside the memory files"),
    ("memory/../README.md", "outside the memory files"),
    ("/etc/passwd", "Markdown"),
    ("/etc/passwd.md", "outside the memory files"),
    ("README.md", "outside the memory files"),
    ("memory/notes.txt", "Markdown"),
    ("", "path required"),
    ("   ", "path required"),
    ("memory/a\x00.md", "NUL"),
    ("~/secret.md", "outside the memory files"),
    ("MEMORY.md/", "names a directory"),  # normpath alone drops the slash and read MEMORY.md
    ("memory/2026-02-10.md/", "names a directory"),
])
def test_rejections_say_which_rule(ws, path, rule):
    with pytest.raises(MemoryGetError) as err:
        memory_get(ws.settings(), path)
    assert rule in str(err.value)


def test_a_refused_path_is_named_short(ws):
    """helper-19: a 100 KB path came back whole in the error (and so in logs and the model's context)."""
    for path in ("x/" * 50_000 + "a.md", "memory/" + "d" * 100_000 + "/"):
        with pytest.raises(MemoryGetError) as err:
            memory_get(ws.settings(), path)
        assert len(str(err.value)) < 400 and f"({len(path):,} characters)" in str(err.value), str(err.value)[:500]


def test_symlinks_refused(ws):
    os.symlink(ws.root / "secret.md", ws.workspace / "memory" / "link.md")
    outside = ws.root / "outside"
    outside.mkdir()
    (outside / "x.md").write_text("outside")
    os.symlink(outside, ws.workspace / "memory" / "linkdir")
    for p in ("memory/link.md", "memory/linkdir/x.md"):
        with pytest.raises(MemoryGetError, match="symlink"):
            memory_get(ws.settings(), p)


@pytest.mark.parametrize("swap", ["file", "folder"])
def test_a_file_swapped_for_a_symlink_while_read_never_reads_outside(ws, swap):
    """helper-62: the checks (lstat, realpath) and the open() were apart, so a file (or its folder)
    swapped for a symlink in between was read through it: 46 of 440 reads returned a file outside
    the workspace. The swapper runs in its own process, as the attacker's writes would."""
    import subprocess
    import sys
    import time

    outside = ws.root / "outside"
    outside.mkdir()
    (outside / "race.md").write_text("TOPSECRET outside\n")
    sub = ws.workspace / "memory" / "sub"
    sub.mkdir()
    (sub / "race.md").write_text("harmless\n")
    # Each loop puts the symlink in place, then the real file (or folder) back.
    loop = {
        "file": f"""
f, tmp = {str(sub / "race.md")!r}, {str(sub / "race.tmp")!r}
while True:
    os.symlink({str(outside / "race.md")!r}, tmp); os.replace(tmp, f)
    open(tmp, "w").write("harmless\\n"); os.replace(tmp, f)
""",
        "folder": f"""
d, keep = {str(sub)!r}, {str(sub) + ".keep"!r}
while True:
    os.rename(d, keep); os.symlink({str(outside)!r}, d)
    os.unlink(d); os.rename(keep, d)
"""}[swap]
    swapper = subprocess.Popen([sys.executable, "-c", "import os" + loop])
    try:
        leaked, reads, deadline = 0, 0, time.monotonic() + 6
        while time.monotonic() < deadline:
            try:
                got = memory_get(ws.settings(), "memory/sub/race.md").text
            except MemoryGetError:
                continue
            reads += 1
            leaked += "TOPSECRET" in got
        assert leaked == 0, f"{leaked} of {reads} reads returned the file outside"
        assert swapper.poll() is None, "the swapper stopped: the race was not run"
    finally:
        swapper.kill()
        swapper.wait()


def test_directory_refused(ws):
    (ws.workspace / "memory" / "dir.md").mkdir()
    with pytest.raises(MemoryGetError, match="regular file"):
        memory_get(ws.settings(), "memory/dir.md")


def test_extra_path_inside_workspace_is_readable(ws):
    ws.write("team/plan.md", "plan")
    ws.memory_config({"extraPaths": ["team"]})
    assert memory_get(ws.settings(), "team/plan.md").text == "plan"


def test_absolute_path_to_a_memory_file_is_readable(ws):
    r = memory_get(ws.settings(), str(ws.workspace / "memory" / "2026-02-10.md"), from_line=1, lines=1)
    assert (r.text, r.path) == ("a", "memory/2026-02-10.md")


def test_a_path_with_two_leading_slashes_is_the_absolute_path(ws):
    # POSIX normpath keeps "//": it crashed the root check with a ValueError and a traceback.
    r = memory_get(ws.settings(), "/" + str(ws.workspace / "memory" / "2026-02-10.md"), from_line=1, lines=1)
    assert (r.text, r.path) == ("a", "memory/2026-02-10.md")
    with pytest.raises(MemoryGetError, match="outside the memory files"):
        memory_get(ws.settings(), "//etc/passwd.md")


@pytest.mark.parametrize("args", [(None,), ("MEMORY.md", "1"), ("MEMORY.md", None, 2.5), (b"MEMORY.md",)])
def test_arguments_of_the_wrong_type_are_a_usage_error(ws, args):
    from memindex import UsageError

    with pytest.raises(UsageError):
        memory_get(ws.settings(), *args)


@pytest.fixture
def team(ws):
    """An extraPaths directory outside the workspace, plus a sibling that is not configured."""
    team = ws.root / "team"
    (team / "sub").mkdir(parents=True)
    (team / "t.md").write_text("team note\nsecond\n")
    (team / "sub" / "deep.md").write_text("deep")
    (ws.root / "other").mkdir()
    (ws.root / "other" / "o.md").write_text("not configured")
    ws.memory_config({"provider": "hash", "extraPaths": [str(team)]})
    return team


def test_every_search_result_path_reads_back(ws, team):
    ws.write("memory/2026-02-10.md", "kumquat in the workspace\n")
    (team / "t.md").write_text("kumquat in the team docs\n")
    ws.index()
    results = ws.search("kumquat")["results"]
    paths = {r["path"] for r in results}
    assert paths == {"memory/2026-02-10.md", "../team/t.md"}
    for r in results:
        got = memory_get(ws.settings(), r["path"])
        assert got.path == r["path"] and "kumquat" in got.text


def test_extra_path_outside_workspace_by_absolute_path(ws, team):
    s = ws.settings()
    assert memory_get(s, str(team / "sub" / "deep.md")).text == "deep"
    assert memory_get(s, str(team / "sub" / "deep.md")).path == "../team/sub/deep.md"
    assert memory_get(s, "../team/t.md", from_line=2, lines=1).text == "second"


@pytest.mark.parametrize("path", [
    "../other/o.md",                 # a sibling directory that is not an extraPath
    "../team/../other/o.md",         # traversal out of the extraPath
    "../team/../secret.md",
    "team/t.md",                     # not inside the workspace either
])
def test_extra_path_traversal_refused(ws, team, path):
    with pytest.raises(MemoryGetError, match="outside the memory files"):
        memory_get(ws.settings(), path)


def test_extra_path_symlinks_refused(ws, team):
    os.symlink(ws.root / "other" / "o.md", team / "link.md")
    os.symlink(ws.root / "other", team / "linkdir")
    for p in ("../team/link.md", "../team/linkdir/o.md"):
        with pytest.raises(MemoryGetError, match="symlink"):
            memory_get(ws.settings(), p)


def test_symlinked_extra_path_entry_is_ignored(ws):
    os.symlink(ws.root / "other_real", ws.root / "team_link")
    (ws.root / "other_real").mkdir()
    (ws.root / "other_real" / "x.md").write_text("x")
    ws.memory_config({"extraPaths": [str(ws.root / "team_link")]})
    with pytest.raises(MemoryGetError, match="outside the memory files"):
        memory_get(ws.settings(), "../team_link/x.md")


def test_an_unreadable_name_is_our_error_and_never_shows_the_workspace(ws):
    """What the OS refuses (a name too long) is a MemoryGetError naming the path as given: the
    HTTP API answered 500 with the absolute workspace path, MCP answered nothing useful."""
    from memindex import MemindexError

    s = ws.settings()
    with pytest.raises(MemindexError) as err:
        memory_get(s, "memory/" + "a" * 300 + ".md")
    assert isinstance(err.value, MemoryGetError) and "too long" in str(err.value)
    assert str(ws.workspace) not in str(err.value)
    # A file where a directory would be: no such memory file, like any missing one.
    assert memory_get(s, "memory/2026-02-10.md/x.md").text == ""


def test_a_name_indexing_skips_is_not_read_either(ws):
    name = "memory/bad\udcffname.md"  # the byte 0xff, as Python carries an undecodable file name
    path = ws.workspace / name
    path.write_bytes(b"not valid utf-8 name\n")
    with pytest.raises(MemoryGetError, match="not valid UTF-8"):
        memory_get(ws.settings(), name)
