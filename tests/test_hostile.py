"""Issue 20: nothing a workspace, a store or a failing service does can hang the index,
poison it, leak from it, or stall search."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st

from tests.conftest import Agent, module_server, run_cli
from tests.provider_server import ProviderServer

server = module_server(ProviderServer)

INDEX_BOUND_S = 60  # generous: the bug this guards against never returned at all


def _status(agent: Agent) -> dict:
    from memindex.pipeline.status import index_status

    return index_status(agent.settings(), invariant=True)


def _found(agent: Agent, token: str) -> set[str]:
    return {r["path"] for r in agent.search(token, max_results=20)["results"]}


def _cli(agent: Agent, *args: str, **kw) -> subprocess.CompletedProcess:
    return run_cli("--config", str(agent.config_path), "--state-dir", str(agent.state),
                   "--workspace", str(agent.workspace), *args, cwd=agent.root, **kw)


def _one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode != 0, proc
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0], proc.stderr


# --------------------------------------------------------------------- hostile workspaces

NAME_KINDS = ("plain", "non_utf8", "odd", "upper", "deep")
BODY_KINDS = ("text", "huge_line", "cr_only", "mixed", "nul", "utf16", "binary", "empty")


def _name(kind: str, i: int) -> tuple[bytes, str]:
    """(the name on disk, as bytes; the path search and status show)."""
    if kind == "non_utf8":
        return b"memory/bad\xff\xfe%d.md" % i, f"memory/bad\\xff\\xfe{i}.md"
    if kind == "odd":
        shown = f"memory/ sp\u00e4ce 'q' -{i} .md"
        return shown.encode(), shown
    if kind == "upper":
        return b"memory/UP%d.MD" % i, f"memory/UP{i}.MD"
    if kind == "deep":
        shown = "memory/" + "/".join(f"d{k}" for k in range(25)) + f"/f{i}.md"
        return shown.encode(), shown
    return b"memory/f%d.md" % i, f"memory/f{i}.md"


def _body(kind: str, token: str) -> bytes:
    return {
        "text": f"# note\n{token} alpha beta\n".encode(),
        # pieces of one over-long line with identical text: the duplicate-chunk-id bug
        "huge_line": (f"{token} " + "kiwi banana " * 4000).encode(),
        "cr_only": f"first\r{token} second\rthird\r".encode(),
        "mixed": f"a\r\n{token} b\rc\nd".encode(),
        "nul": f"{token}\x00 stray".encode(),  # one NUL in text: indexed, reported
        "utf16": f"{token} wide".encode("utf-16-le"),  # NUL every other byte: binary
        "binary": b"\xff\xfe" + token.encode() + b" \x80\x81 text",
        "empty": b"",
    }[kind]


class Spec:
    def __init__(self, i: int, name_kind: str, body_kind: str):
        self.i, self.name_kind, self.body_kind = i, name_kind, body_kind
        self.raw, self.shown = _name(name_kind, i)
        self.round = 0

    @property
    def token(self) -> str:
        return f"tok{self.i}q{self.round}z"

    @property
    def searchable(self) -> bool:
        return self.name_kind != "non_utf8" and self.body_kind not in ("utf16", "empty")

    @property
    def reported(self) -> bool:
        return self.name_kind == "non_utf8" or self.body_kind in ("nul", "utf16", "binary")

    def write(self, ws: Path) -> None:
        p = os.path.join(os.fsencode(ws), self.raw)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as fh:
            fh.write(_body(self.body_kind, self.token))
        st_ = os.stat(p)  # a same-size rewrite within one mtime tick must still be seen
        os.utime(p, ns=(st_.st_atime_ns, st_.st_mtime_ns + self.round * 1_000_000_000 + 1))

    def remove(self, ws: Path) -> None:
        os.unlink(os.path.join(os.fsencode(ws), self.raw))


def _check(agent: Agent, live: list[Spec], gone: list[Spec]) -> None:
    status = _status(agent)
    assert status["invariant"] == {"ok": True, "problems": []}, status["invariant"]
    problems = {p["path"] for p in status["problems"]}
    for s in live:
        if s.searchable:
            assert s.shown in _found(agent, s.token), (s.name_kind, s.body_kind)
        else:
            assert s.shown not in _found(agent, s.token)
        assert (s.shown in problems) == s.reported, (s.name_kind, s.body_kind, problems)
    for s in gone:
        assert s.shown not in _found(agent, s.token)
        assert s.shown not in problems


def _timed_index(agent: Agent) -> None:
    t0 = time.monotonic()
    agent.index()
    assert time.monotonic() - t0 < INDEX_BOUND_S


@hsettings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(files=[(n, b) for n, b in zip(NAME_KINDS * 2, BODY_KINDS)], fifo=True,  # every ingredient once
         edits=["rewrite", "delete", "add", "rewrite"])
@given(files=st.lists(st.tuples(st.sampled_from(NAME_KINDS), st.sampled_from(BODY_KINDS)), min_size=1, max_size=6),
       fifo=st.booleans(), edits=st.lists(st.sampled_from(("rewrite", "delete", "add")), min_size=1, max_size=4))
def test_hostile_workspaces_index_and_stay_consistent(files, fifo, edits):
    root = Path(tempfile.mkdtemp(prefix="hostile-"))
    try:
        agent = Agent(root)
        ws = agent.workspace
        specs = [Spec(i, n, b) for i, (n, b) in enumerate(files)]
        for s in specs:
            s.write(ws)
        if fifo:
            os.mkfifo(ws / "memory" / "pipe.md")  # never opened: a read would block forever
        _timed_index(agent)
        _check(agent, specs, [])

        gone: list[Spec] = []
        for k, edit in enumerate(edits):
            if edit == "add" or not specs:
                s = Spec(len(specs) + len(gone), files[k % len(files)][0], files[k % len(files)][1])
                s.write(ws)
                specs.append(s)
            elif edit == "rewrite":
                specs[k % len(specs)].round += 1
                specs[k % len(specs)].write(ws)
            else:
                s = specs.pop(k % len(specs))
                s.remove(ws)
                gone.append(s)
        # Files deleted and rewritten while a sync runs: the next sync converges.
        victim = specs[0] if specs else None
        runner = threading.Thread(target=agent.index)
        runner.start()
        if victim is not None:
            victim.round += 1
            victim.write(ws)
        runner.join(INDEX_BOUND_S)
        assert not runner.is_alive()
        _timed_index(agent)
        _check(agent, specs, gone)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_repeated_pieces_of_one_line_get_distinct_chunks(agent):
    agent.memory_config({"chunking": {"tokens": 16, "overlap": 0}})
    agent.write("memory/rep.md", "kiwi pie" * 800)  # 8 chars: every 64-char piece is the same text
    agent.index()
    rows = agent.store_rows()
    assert len(rows) == 100 and len({r[5] for r in rows}) == 1  # identical pieces, all kept
    agent.write("memory/rep.md", "kiwi pie" * 600 + " edited")  # the edit that used to hit IntegrityError
    agent.index()
    agent.write("memory/new.md", "a new file after the edit\n")
    agent.index()
    assert _status(agent)["invariant"]["ok"]
    assert "memory/new.md" in _found(agent, "new file")


def test_cr_only_lines_and_upper_case_extension(agent):
    agent.write("memory/CR.MD", b"one\rtwo wombat\rthree\r")
    agent.index()
    hit = agent.search("wombat")["results"][0]
    assert (hit["path"], hit["startLine"], hit["endLine"]) == ("memory/CR.MD", 1, 3)
    from memindex.pipeline.search.get import memory_get

    assert memory_get(agent.settings(), "memory/CR.MD", from_line=2, lines=1).text == "two wombat"


# --------------------------------------------------------------------- workspaces that are not there

def test_renamed_away_workspace_leaves_the_index_intact(agent):
    agent.write("memory/a.md", "the quick brown fox\n")
    agent.index()
    rows = agent.store_rows()
    moved = agent.root / "moved"
    agent.workspace.rename(moved)
    _one_line_error(_cli(agent, "index"), "does not exist")
    assert agent.store_rows() == rows
    agent.workspace.write_text("a file, not a directory")
    _one_line_error(_cli(agent, "index"), "is not a directory")
    assert agent.store_rows() == rows


def test_broad_extra_paths_are_refused_unless_opted_in(agent):
    agent.write("memory/a.md", "fox\n")
    agent.memory_config({"extraPaths": ["/"]})
    _one_line_error(_cli(agent, "index"), "too broad")
    agent.memory_config({"extraPaths": [str(agent.state)]})
    _one_line_error(_cli(agent, "index"), "too broad")
    agent.memory_config({"extraPaths": ["notes"]})
    assert _cli(agent, "index").returncode == 0
    # helper-56: "~" is $OPENCLAW_HOME in the config, and the check compared the OS home only,
    # so with OPENCLAW_HOME set `extraPaths: ["~"]` indexed all of it.
    oc_home = agent.root / "oc-home"
    (oc_home / "sub").mkdir(parents=True)
    agent.memory_config({"extraPaths": ["~"]})
    _one_line_error(_cli(agent, "index", env={"OPENCLAW_HOME": str(oc_home)}), "too broad")


# --------------------------------------------------------------------- stores

def test_truncated_or_garbage_store_is_reported_and_rebuilt_by_index(agent):
    agent.write("memory/a.md", "the quick brown fox\n")
    for i in range(200):
        agent.write(f"memory/n{i}.md", f"note {i} " * 50 + "\n")
    assert _cli(agent, "index").returncode == 0
    store = agent.settings().store_path
    for damage in ("truncate", "garbage"):
        if damage == "truncate":
            os.truncate(store, store.stat().st_size // 2)
        else:
            store.write_bytes(b"this is not a database" * 100)
        status = _cli(agent, "status", "--json")
        assert "Traceback" not in status.stderr and "damaged" in status.stdout, status
        # The text says so on its "indexed" line too (it said "never indexed: run `memindex index`").
        text = _cli(agent, "status").stdout
        (indexed,) = [ln for ln in text.splitlines() if ln.startswith("indexed:")]
        assert "store damaged" in indexed and "never indexed" not in indexed, text
        res = agent.search("fox")  # never raises
        assert res["results"] == [] and "damaged" in res["warning"]
        assert _cli(agent, "index").returncode == 0  # one command: moved aside, rebuilt
        assert "memory/a.md" in _found(agent, "fox")
        assert _status(agent)["invariant"]["ok"]


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads the process's POSIX locks in /proc/locks")
def test_telling_whose_a_store_is_keeps_the_locks_this_process_holds_on_it(agent, tmp_path):
    """helper-20: a sync worker moved a healthy store aside as damaged ("database disk image is
    malformed") four times in two minutes, its embedding cache lost each time. health.classify looked
    at the file through the stdlib's SQLite beside the store's sqlean: its close dropped the shared
    lock this process's open store connections held, SQLite never took it again, and the writer's
    next close deleted the WAL under them. A subprocess: this one's locks are not to be touched."""
    agent.write("memory/a.md", "the quick brown fox\n")
    assert _cli(agent, "index").returncode == 0
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from memindex.pipeline.store import db, health

        path = Path({str(agent.settings().store_path)!r})
        ino = os.stat(path).st_ino

        def locks():
            mine = []
            for line in open("/proc/locks"):
                f = line.split()
                if f[1] == "POSIX" and f[4] == str(os.getpid()) and f[5].rsplit(":", 1)[1] == str(ino):
                    mine.append(f[3])
            return mine

        reader = db.connect(path, readonly=True)  # a store connection of this process (WAL: shared lock)
        reader.execute("SELECT count(*) FROM sqlite_master").fetchone()
        held = locks()
        assert held, "the reader holds no lock on the store file"
        assert health.classify(path) == health.MEMINDEX  # a first look in this process: it reads the file
        assert locks() == held, (held, locks())
        print("kept", held)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("kept"), out.stderr


def test_a_damaged_read_is_judged_again_before_the_store_is_moved_aside(agent):
    """The planner moved a store aside on one read that failed as damage: it is now judged again on
    a fresh connection (header checks and quick_check), and a file that checks out stays."""
    from memindex.pipeline.store.health import confirmed_damage

    agent.write("memory/a.md", "the quick brown fox\n")
    assert _cli(agent, "index").returncode == 0
    store = agent.settings().store_path
    assert confirmed_damage(store) is None
    os.truncate(store, store.stat().st_size // 2)
    assert confirmed_damage(store)  # (truncated: malformed pages, or the header's count)
    store.write_bytes(b"this is not a database" * 100)
    assert "not a" in (confirmed_damage(store) or "")


def test_read_only_state_dir_is_one_error_line(agent):
    agent.write("memory/a.md", "fox\n")
    assert _cli(agent, "index").returncode == 0
    if os.geteuid() != 0:
        os.chmod(agent.state / "memory", 0o555)
        try:
            proc = _cli(agent, "index", "--force")
        finally:
            os.chmod(agent.state / "memory", 0o755)
    else:  # root writes anywhere: make the state dir a read-only mount in a private namespace
        if shutil.which("unshare") is None:
            pytest.skip("unshare not available")
        args = [sys.executable, "-m", "memindex", "--config", str(agent.config_path), "--state-dir",
                str(agent.state), "--workspace", str(agent.workspace), "index", "--force"]
        proc = subprocess.run(["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"',
                               str(agent.state), *args], capture_output=True, text=True, timeout=120)
        if "mount" in proc.stderr and "error:" not in proc.stderr:
            pytest.skip(f"cannot make a read-only mount here: {proc.stderr.strip()}")
    _one_line_error(proc, "read-only")


def test_a_state_dir_that_is_a_file_is_one_error_line_before_any_work(agent, tmp_path):
    """helper-53: `--state-dir ~/notes.txt` passed the writable check (the file is writable), so a
    whole sync was read and embedded, then every write failed ("Not a directory") and the hint
    blamed a read-only state dir."""
    agent.write("memory/a.md", "fox\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    proc = run_cli("--config", str(agent.config_path), "--state-dir", str(notes), "--workspace",
                   str(agent.workspace), "index", timeout=120)
    _one_line_error(proc, f"{notes} is a file, not a directory")
    assert notes.read_text() == "my notes\n"


def _cli_without_root_override(agent: Agent, *args: str) -> subprocess.CompletedProcess:
    """The CLI as a user whom file permissions apply to (root reads every directory: its
    override capabilities are dropped with setpriv)."""
    if os.geteuid() != 0:
        return _cli(agent, *args, timeout=INDEX_BOUND_S)
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv not available")
    caps = "-dac_override,-dac_read_search"
    return subprocess.run(["setpriv", "--bounding-set", caps, "--inh-caps", caps, sys.executable, "-m", "memindex",
                           "--config", str(agent.config_path), "--state-dir", str(agent.state),
                           "--workspace", str(agent.workspace), *args],
                          capture_output=True, text=True, timeout=INDEX_BOUND_S, cwd=agent.root)


def test_an_unreadable_directory_keeps_its_files_and_status_names_it(agent):
    """It used to look deleted: the writer's check that the files were gone raised EACCES and
    the sync retried for minutes before dead-lettering; a subdirectory was skipped silently."""
    agent.write("MEMORY.md", "# Root\nrootword\n")
    agent.write("memory/2026-01-01.md", "dayword\n")
    agent.write("memory/sub/a.md", "subword\n")
    os.symlink(agent.workspace / "memory" / "2026-01-01.md", agent.workspace / "memory" / "link.md")
    assert _cli(agent, "index").returncode == 0
    issues = json.loads(_cli(agent, "status", "--json").stdout)[0]["scan"]["issues"]
    assert any("symlink(s) not followed" in i and "memory/link.md" in i for i in issues), issues
    for locked in (agent.workspace / "memory" / "sub", agent.workspace / "memory"):
        os.chmod(locked, 0)
        try:
            out = _cli_without_root_override(agent, "index")
            st = json.loads(_cli_without_root_override(agent, "status", "--json").stdout)[0]
        finally:
            os.chmod(locked, 0o755)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        assert "removed 0" in out.stdout, out.stdout
        rel = locked.relative_to(agent.workspace).as_posix()
        assert any(f"cannot read directory {rel} (Permission denied)" in i for i in st["scan"]["issues"]), st["scan"]
        assert _found(agent, "subword") == {"memory/sub/a.md"} and _found(agent, "dayword"), rel


def test_a_folder_moved_behind_a_symlink_has_its_files_removed_from_the_index(agent, tmp_path):
    """helper-50: `memory/` (or a folder in it) replaced by a symlink to a synced folder: the walk
    stops listing its files, as OpenClaw's does, but the writer's "still on disk?" check followed
    the symlinked folder, so every run said "removed 1" and removed nothing; the old text stayed
    searchable and status counted more indexed files than exist."""
    agent.write("MEMORY.md", "# Root\nrootword\n")
    agent.write("memory/sub/a.md", "wombatword\n")
    agent.write("memory/b.md", "quokkaword\n")
    assert _cli(agent, "index").returncode == 0 and _found(agent, "wombatword") == {"memory/sub/a.md"}
    synced = tmp_path / "synced-sub"
    (agent.workspace / "memory" / "sub").rename(synced)
    os.symlink(synced, agent.workspace / "memory" / "sub")
    out = _cli(agent, "index")
    assert out.returncode == 0 and "removed 1" in out.stdout, out.stdout + out.stderr
    assert _found(agent, "wombatword") == set() and _found(agent, "quokkaword") == {"memory/b.md"}
    again = _cli(agent, "index")
    assert "removed 0" in again.stdout, again.stdout  # applied, not announced again by every run
    status = json.loads(_cli(agent, "status", "--json").stdout)[0]["status"]
    assert status["files"] == 2, status
    # memory/ itself behind a symlink: both its files go, MEMORY.md stays.
    moved = tmp_path / "synced-memory"
    (agent.workspace / "memory").rename(moved)
    os.symlink(moved, agent.workspace / "memory")
    assert "removed 1" in _cli(agent, "index").stdout
    assert _found(agent, "quokkaword") == set() and _found(agent, "rootword") == {"MEMORY.md"}


def test_notes_in_folders_named_like_build_output_are_indexed(agent):
    """helper-50: `memory/target/plan.md`, `memory/projects/build/plan.md` and `memory/Target/...`
    were silently never indexed (and `get` refused them) because the walk skipped every folder
    named build, dist or target. OpenClaw's walk skips none; tool trees (.git, node_modules,
    virtualenvs, caches) stay skipped."""
    notes = {"memory/target/plan.md": "targetword", "memory/projects/build/plan.md": "buildword",
             "memory/Dist/plan.md": "distword", "memory/node_modules/pkg/README.md": "npmword",
             "memory/.git/notes.md": "gitword"}
    for path, word in notes.items():
        agent.write(path, f"# Plan\n{word}\n")
    assert _cli(agent, "index").returncode == 0
    for path, word in list(notes.items())[:3]:
        assert _found(agent, word) == {path}, word
        out = _cli(agent, "get", path)
        assert out.returncode == 0 and word in out.stdout, out.stderr
    assert _found(agent, "npmword") == set() and _found(agent, "gitword") == set()


def test_a_note_made_readable_again_is_indexed_by_the_next_sync(agent):
    """helper-50: a note recorded "unreadable: Permission denied" stayed unindexed after `chmod
    644` (which changes neither size nor mtime): `index` said "0 indexed" and status kept the old
    error until the note changed or `--force`."""
    agent.write("MEMORY.md", "# Root\nrootword\n")
    note = agent.write("memory/locked.md", "# Locked\npangolinword\n")
    os.chmod(note, 0)
    try:
        assert _cli_without_root_override(agent, "index").returncode == 0
        st = json.loads(_cli_without_root_override(agent, "status", "--json").stdout)[0]["status"]
        assert any(p["path"] == "memory/locked.md" and "Permission denied" in p["error"] for p in st["problems"]), st
        again = _cli_without_root_override(agent, "index")  # still unreadable: still a problem, no churn
        assert "indexed 0 file(s)" in again.stdout, again.stdout
    finally:
        os.chmod(note, 0o644)
    out = _cli_without_root_override(agent, "index")
    assert out.returncode == 0 and "indexed 1 file(s)" in out.stdout, out.stdout
    assert _found(agent, "pangolinword") == {"memory/locked.md"}
    st = json.loads(_cli_without_root_override(agent, "status", "--json").stdout)[0]["status"]
    assert not st.get("problems"), st
    assert "indexed 0 file(s)" in _cli_without_root_override(agent, "index").stdout


def test_a_utf16_note_with_a_byte_order_mark_is_read_as_text(agent):
    """helper-50: a note saved as UTF-16 (Notepad's "Unicode") was skipped as "binary file
    (contains NUL bytes)". It is text: indexed, and `get` returns the lines search cites."""
    note = agent.workspace / "memory" / "wide.md"
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_bytes("# Wide\r\nfirst line\r\nthe capybara ledger ünïcode\r\n".encode("utf-16"))
    assert _cli(agent, "index").returncode == 0
    out = _cli(agent, "search", "--json", "capybara")
    [hit] = json.loads(out.stdout)["results"]
    assert hit["path"] == "memory/wide.md" and "capybara ledger ünïcode" in hit["snippet"], hit
    got = _cli(agent, "get", "memory/wide.md", "--from", "3", "--lines", "1")
    assert got.returncode == 0 and got.stdout.strip() == "the capybara ledger ünïcode", got.stdout
    st = json.loads(_cli(agent, "status", "--json").stdout)[0]["status"]
    assert not st.get("problems"), st


def test_a_search_that_fails_says_so_and_a_directory_store_is_one_line(agent, tmp_path):
    """helper-51: a store path that is a directory: `search` printed "No matches." (exit 0), the
    servers answered 200 with an empty list, and `index` died with a traceback ("disk I/O error").
    A failed search now answers OpenClaw's failure shape and exits 1; the store path is named."""
    agent.write("memory/a.md", "# A\nkumquat\n")
    store = tmp_path / "storedir"
    store.mkdir()
    agent.memory_config({"provider": "none", "store": {"path": str(store)}})
    out = _cli(agent, "search", "kumquat")
    assert out.returncode == 1 and out.stdout == "", out.stdout
    assert "memory search is unavailable" in out.stderr and "is a directory, not a SQLite file" in out.stderr
    out = _cli(agent, "search", "--json", "kumquat")
    payload = json.loads(out.stdout)
    assert out.returncode == 1 and payload["results"] == [] and payload["unavailable"] is True
    assert payload["disabled"] is True and "is a directory" in payload["error"] and payload["action"]
    out = _cli(agent, "index")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"the store path {store} is a directory" in out.stderr, out.stderr
    text = _cli(agent, "status").stdout
    assert "store unusable: see the problem line" in text and "moves it aside" not in text, text


# --------------------------------------------------------------------- failing services

def _openai(server, **remote) -> dict:
    return {"provider": "openai", "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-test-123", **remote}}


def test_failing_provider_costs_one_attempt_then_search_is_keyword_only(agent, fresh_services, server):
    from memindex.pipeline.search.engine import MemorySearch

    agent.write("MEMORY.md", "the router is an Omada ER605\n")
    agent.memory_config(_openai(server))
    agent.index()
    server.always("openai", {"status": 500, "message": "down"})
    eng = MemorySearch(agent.settings())
    try:
        t0 = time.monotonic()
        first = eng.search("router")
        assert time.monotonic() - t0 < 10  # one attempt, no retries (the bound is for a loaded CI)
        assert first.results and first.mode == "fts-only" and "keyword-only" in first.warning
        calls = server.count("openai")
        for _ in range(5):
            later = eng.search("router")
            assert later.results and later.mode == "fts-only" and "keyword-only" in later.warning
        assert server.count("openai") == calls  # the breaker is open: nothing waits on the provider
    finally:
        eng.close()
    # Keyword indexing never waits for embeddings: a new file is searchable after one sync.
    agent.write("memory/new.md", "a quokka was seen near the router\n")
    agent.index()
    assert "memory/new.md" in _found(agent, "quokka")
    assert _status(agent)["invariant"]["ok"]


def test_a_failing_query_endpoint_is_paid_once_across_cli_searches(agent, fresh_services, server):
    """A runtime that shells out one `memindex search` per call: each process started with a
    closed breaker, so every search paid the dead endpoint's attempt (and a slow one's timeout).
    The query side's open state is shared by the agent's processes for the cooldown."""
    agent.write("MEMORY.md", "the router is an Omada ER605\n")
    agent.memory_config(_openai(server))
    agent.index()
    server.always("openai", {"status": 500, "message": "down"})
    calls = server.count("openai")
    first = _cli(agent, "search", "--json", "router")
    assert first.returncode == 0 and json.loads(first.stdout)["results"], first.stderr
    paid = server.count("openai")
    assert paid > calls
    for _ in range(3):
        out = _cli(agent, "search", "--json", "router")
        body = json.loads(out.stdout)
        assert out.returncode == 0 and body["results"] and "keyword-only" in body["warning"], out.stdout
        assert "500" in body["warning"] or "down" in body["warning"], body["warning"]  # the first one's reason
    assert server.count("openai") == paid  # nothing waited on the provider again


def test_shared_open_state_lets_one_probe_through_after_the_cooldown(tmp_path):
    from memindex.pipeline.embeddings.breaker import SharedOpen

    now = [1000.0]
    a = SharedOpen(tmp_path / "s.json", cooldown_s=30, clock=lambda: now[0])
    b = SharedOpen(tmp_path / "s.json", cooldown_s=30, clock=lambda: now[0])  # another process
    assert a.reason("k") is None and not (tmp_path / "s.json").exists()
    a.failure("k", "500: down")
    assert b.reason("k") == "500: down" and b.reason("other") is None
    now[0] += 31
    assert b.reason("k") is None  # the cooldown is over: this caller probes
    b.success("k")
    assert not (tmp_path / "s.json").exists() and a.reason("k") is None
    (tmp_path / "s.json").write_text("{not json")
    assert a.reason("k") is None  # unreadable: closed, never an error


def test_header_secret_echoed_by_a_401_never_appears_at_debug(agent, fresh_services, server):
    secret = "hdr-secret-7f3a9c"
    agent.write("MEMORY.md", "the router is an Omada ER605\n")
    agent.memory_config(_openai(server, headers={"X-Api-Key": secret}))
    server.always("openai", {"status": 401, "message": f"bad key: X-Api-Key={secret} sk-test-123",
                             "headers": {"X-Echo": secret}})
    out = []
    for args in (("-vv", "index"), ("-vv", "search", "router"), ("-vv", "status")):
        proc = _cli(agent, *args)
        out.append(proc.stdout + proc.stderr)
    text = "\n".join(out)
    assert "401" in text or "bad key" in text  # the failure itself is visible
    assert secret not in text and "sk-test-123" not in text


def test_a_half_masked_key_echoed_by_the_provider_never_appears(agent, fresh_services, server):
    """helper-52: OpenAI's 401 echoes the key half-masked ("sk-proj-****...cdef"); the full key was
    scrubbed but that echo, the key's prefix and last characters, was kept in `index`'s line,
    status, the logs and the store."""
    import sqlite3

    agent.write("MEMORY.md", "the router is an Omada ER605\n")
    agent.memory_config(_openai(server))
    echo = "sk-proj-" + "*" * 40 + "-123"
    server.always("openai", {"status": 401, "message": f"Incorrect API key provided: {echo}. You can find your "
                                                       "API key at https://platform.openai.com/account/api-keys."})
    out = [_cli(agent, *args) for args in (("-vv", "index"), ("status",), ("status", "--json"))]
    text = "\n".join(p.stdout + p.stderr for p in out)
    assert out[0].returncode == 1 and "Incorrect API key provided: ***" in text, text
    assert "****" not in text and "sk-proj-" not in text, text
    conn = sqlite3.connect(agent.settings().store_path)
    try:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE "
                                             "'files%'")]
        stored = " ".join(str(e) for t in tables for (e,) in conn.execute(f"SELECT error FROM {t} WHERE error "
                                                                          "IS NOT NULL"))
    finally:
        conn.close()
    assert "Incorrect API key" in stored and "sk-proj-" not in stored and "****" not in stored, stored


def test_hung_redis_does_not_stall_search(agent, tmp_path):
    agent.memory_config({"sync": {"onSearch": True}})
    for i in range(30):
        agent.write(f"memory/n{i}.md", f"alpaca note {i}\n")
    agent.index()
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)  # accepts connections into the backlog, never answers
    script = tmp_path / "measure.py"
    script.write_text(f"""
import json, os, sys, time
import memindex
from memindex.pipeline.search.engine import MemorySearch
settings = memindex.load_settings(memindex.Context("main", {str(agent.config_path)!r}, {str(agent.state)!r},
                                                   {str(agent.workspace)!r}))
plain = MemorySearch(settings)
hung = MemorySearch(settings, schedule_sync=memindex.schedule_sync)
times = {{"plain": [], "hung": []}}
for name, eng in (("plain", plain), ("hung", hung)):
    eng.search("alpaca")  # warm
for _ in range(40):
    for name, eng in (("plain", plain), ("hung", hung)):
        t = time.perf_counter()
        assert eng.search("alpaca").results
        times[name].append(time.perf_counter() - t)
p95 = {{k: sorted(v)[int(len(v) * 0.95) - 1] for k, v in times.items()}}
print(json.dumps(p95), flush=True)
os._exit(0)
""")
    env = dict(os.environ, MEMINDEX_BROKER_URL=f"redis://127.0.0.1:{hung.getsockname()[1]}/0")
    try:
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    finally:
        hung.close()
    assert proc.returncode == 0, proc.stderr
    p95 = json.loads(proc.stdout.strip().splitlines()[-1])
    # A search that waited on the hung broker took seconds (its socket timeout); 3x plus 50 ms of
    # slack keeps that apart from a loaded machine's jitter on sub-millisecond searches (a helper
    # saw 14 ms against a 5.9 ms bound with other suites running).
    assert p95["hung"] <= 3 * p95["plain"] + 0.05, p95


def test_writer_that_lost_its_wal_reopens_and_replans(agent):
    agent.write("memory/a.md", "the quick brown fox\n")
    agent.index()  # the embedded writer keeps the store (and its WAL) open
    wal = Path(f"{agent.settings().store_path}-wal")
    assert wal.exists()
    wal.unlink()  # mid-index: the next message the writer takes must notice
    agent.write("memory/b.md", "a lazy dog\n")
    from memindex.workers import embedded
    from memindex.workers.wire import WriteTouch
    from memindex.workers.writer import write_touch

    write_touch(WriteTouch(agent.ctx, 1, []))  # reopens, and asks for a re-planning sync
    embedded.wait_idle(timeout=30)
    assert "memory/b.md" in _found(agent, "lazy dog")
    assert "memory/a.md" in _found(agent, "fox")
    assert _status(agent)["invariant"]["ok"]


def test_a_record_the_store_cannot_take_is_that_files_problem_only(agent):
    from memindex.pipeline.index.records import ChunkRecord, FileRecord
    from memindex.pipeline.store.writer import open_writer

    agent.write("memory/a.md", "fox\n")
    agent.index()

    def rec(path: str, text: str) -> FileRecord:
        return FileRecord("memory", path, str(agent.workspace / path), "h-" + path, 1, 1, "markdown", None,
                          [ChunkRecord(1, 1, "c-" + path, text, None, False)], None)

    w = open_writer(agent.settings())
    try:  # text SQLite refuses (a lone surrogate) used to fail, and retry, the whole batch
        written, rejected = w.write_files(1, [rec("memory/bad.md", "x\udcffy"), rec("memory/ok.md", "zebra")])
    finally:
        w.close()
    assert (written, rejected) == (1, [])
    problems = {p["path"]: p["error"] for p in _status(agent)["problems"]}
    assert problems["memory/bad.md"].startswith("could not be stored")
    assert "memory/ok.md" in _found(agent, "zebra")
    assert _status(agent)["invariant"]["ok"]


def test_status_deep_checks_the_store_invariant(agent) -> None:
    agent.write("memory/a.md", "kiwi notes\n")
    agent.index()
    args = ["--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(agent.workspace)]
    r = run_cli(*args, "status", "--deep", "--json")
    assert r.returncode == 0, r.stderr
    entry = json.loads(r.stdout)[0]
    assert entry["status"]["invariant"] == {"ok": True, "problems": []}
    text = run_cli(*args, "status", "--deep")
    assert "store check:  ok" in text.stdout
    plain = run_cli(*args, "status", "--json")
    assert "invariant" not in json.loads(plain.stdout)[0]["status"]


def test_former_tracebacks_are_one_line_errors(agent, tmp_path) -> None:
    """`search --queries` on a bad/missing/directory file, and broker-touching commands with Redis down."""
    agent.write("memory/a.md", "kiwi notes\n")
    args = ["--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(agent.workspace)]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\xff\xfe{}\n")
    down = {"MEMINDEX_BROKER_URL": "redis://:hunter2@127.0.0.1:1/0"}
    cases = [
        (["search", "--queries", str(bad)], {}, "not valid UTF-8"),
        (["search", "--queries", str(tmp_path / "missing.jsonl")], {}, "No such file"),
        (["search", "--queries", str(tmp_path)], {}, "Is a directory"),
        (["index"], down, "cannot reach the broker"),
        (["backfill"], down, "cannot reach the broker"),
        (["dead-letters"], down, "cannot reach the broker"),
    ]
    # Not a Redis URL at all: redis-py's ValueError was a traceback from every command.
    wrong = {"MEMINDEX_BROKER_URL": "http://:hunter2@127.0.0.1:6392/0"}
    cases += [([c], wrong, "MEMINDEX_BROKER_URL: expected a redis://") for c in
              ("index", "status", "health", "dead-letters", "queues", "worker")]
    for argv, env, needle in cases:
        r = run_cli(*args, *argv, env=env, timeout=120)
        assert r.returncode != 0, argv
        assert "Traceback" not in r.stderr, (argv, r.stderr)
        assert needle in r.stderr, (argv, r.stderr)
        assert "hunter2" not in r.stderr + r.stdout
    # helper-56: with nothing to index no broker is asked, and the wrong URL was "0 indexed", exit 0.
    assert run_cli(*args, "index").returncode == 0
    r = run_cli(*args, "index", env=wrong)
    assert r.returncode == 2 and "MEMINDEX_BROKER_URL: expected a redis://" in r.stderr, r.stderr


def test_a_config_path_that_is_a_device_or_fifo_is_refused_not_read(agent, tmp_path) -> None:
    """`--config` naming /dev/zero (here through a symlink) read until the machine ran out of
    memory (a global OOM kill); a FIFO blocked for good. Neither is a config file."""
    import os

    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path in (zero, fifo):
        r = run_cli("--config", str(path), "--state-dir", str(agent.state), "status", timeout=60)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert "not a regular file (a device, FIFO or socket)" in r.stderr, r.stderr


@pytest.mark.redis
def test_a_broker_refusing_the_password_says_so_not_start_redis(agent, redis_server) -> None:
    import redis

    redis.Redis.from_url(redis_server.url).config_set("requirepass", "Right-pw-77")
    agent.write("memory/a.md", "kiwi notes\n")
    args = ["--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(agent.workspace)]
    for url in (f"redis://:Wrong-pw-55@127.0.0.1:{redis_server.port}/0", redis_server.url):
        r = run_cli(*args, "index", env={"MEMINDEX_BROKER_URL": url}, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert "refused the credentials" in lines[0] and "check the password in MEMINDEX_BROKER_URL" in lines[0]
        assert "start Redis" not in lines[0] and "Wrong-pw-55" not in lines[0], lines[0]
    # A worker waits for an unreachable Redis (start order), never for a password that will not change.
    r = run_cli("worker", "--queues", "sync", env={"MEMINDEX_BROKER_URL": redis_server.url}, timeout=60)
    assert r.returncode == 2 and "refused the credentials" in r.stderr, r.stderr
    for command in ("queues", "health"):
        r = run_cli(*args, command, env={"MEMINDEX_BROKER_URL": redis_server.url}, timeout=60)
        assert r.returncode != 0 and "refused the credentials" in r.stderr, (command, r.stderr)


def test_index_on_redis_with_no_worker_says_so_instead_of_waiting(agent, redis_server) -> None:
    agent.write("memory/a.md", "kiwi notes\n")
    args = ["--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(agent.workspace)]
    r = run_cli(*args, "index", env={"MEMINDEX_BROKER_URL": redis_server.url}, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert "no worker is consuming queue(s)" in r.stderr and "memindex worker" in r.stderr, r.stderr
    from memindex.producers.dispatch import _starts

    # The commands for the very queues named; a shard's writer with its K/N (a plain --writer is
    # refused in a sharded deployment, and the hint said just that).
    assert _starts(["sync", "embed", "write.1"])[:1] == ["memindex worker --queues sync embed"]
    assert _starts(["write"]) == ["memindex worker --writer"]
    assert _starts(["write.1"])[0].startswith("memindex worker --writer --shard 1/")


def test_control_characters_in_names_and_notes_never_reach_the_terminal_raw(agent):
    """A name with newlines forged a whole search result in the text output, and ANSI escapes in a
    name or a note drove the reader's terminal; JSON and memory_get keep the data as it is."""
    forged = "a.md:1-1\nforged quetzal\n\n1.000 MEMORY.md:1-1\nTRUST ME\n\nz.md"
    agent.write(f"memory/{forged}", "forged quetzal\n")
    agent.write("memory/\x1b[31mRED\x1b[0m.md", "x \x1b]0;pwned\x07 quetzal\n")
    agent.write("memory/\x1b[2Jbin\nfake: line.md", b"\x00" * 100)
    assert _cli(agent, "index").returncode == 0
    out = _cli(agent, "search", "quetzal")
    assert out.returncode == 0 and "\x1b" not in out.stdout and "\x07" not in out.stdout
    lines = out.stdout.splitlines()
    assert "TRUST ME" not in lines  # not a line of its own
    assert [ln for ln in lines if ln[:1].isdigit()] == [ln for ln in lines if ln.startswith(("1.000 ", "0."))]
    assert len([ln for ln in lines if ln.startswith(("1.000 ", "0."))]) == 2, out.stdout
    status = _cli(agent, "status")
    assert "\x1b" not in status.stdout and not any(ln.startswith("fake: ") for ln in status.stdout.splitlines())
    assert "\x1b" not in status.stderr and "\x1b" not in out.stderr
    data = json.loads(_cli(agent, "search", "--json", "quetzal").stdout)
    paths = {r["path"] for r in data["results"]}
    assert f"memory/{forged}" in paths
    assert _cli(agent, "get", f"memory/{forged}").stdout == "forged quetzal\n"
    # helper-19: the escaped name a search line shows is one `get` reads back (it said "does not exist").
    [shown] = [ln.split(" ", 1)[1].rsplit(":", 1)[0] for ln in lines if "forged" in ln and ln[:1].isdigit()]
    assert "\\x0a" in shown and "\n" not in shown
    assert _cli(agent, "get", shown).stdout == "forged quetzal\n"


def test_a_bad_queries_line_keeps_its_own_id_and_never_borrows_another(agent) -> None:
    agent.write("memory/a.md", "kiwi notes\n")
    agent.index()
    lines = ['{"id": 1, "query": "kiwi"}', "not json", '{"id": "x"}', '{"id": "a", "query": 5}', "[1]",
             '{"id": 2, "query": ["kiwi"]}', '{"query": "kiwi"}', '{"id": "e", "query": "  "}']
    out = _cli(agent, "search", "--queries", "-", input="\n".join(lines) + "\n")
    # Every line answered, then exit 1 and one line (a script saw exit 0 with errors in the output).
    assert out.returncode == 1 and "error: 6 line(s) of - could not be searched" in out.stderr, out.stderr
    got = [json.loads(line) for line in out.stdout.splitlines()]
    assert [g["id"] for g in got] == [1, None, "x", "a", None, 2, 7, "e"]
    assert [g.get("line") for g in got] == [None, 2, 3, 4, 5, 6, None, 8]
    assert got[0]["results"] and got[6]["results"] and not any("results" in g for g in got[1:6] + got[7:])
    assert "not JSON" in got[1]["error"] and 'no "query"' in got[2]["error"]
    assert "not a string" in got[3]["error"] and "not a string" in got[5]["error"]
    assert "empty query" in got[7]["error"]  # as `search ""` is a usage error (it answered [] here)
    # helper-53: fields a line cannot take were dropped ("agent" answered from the default agent),
    # and query words given beside --queries were ignored with exit 0.
    out = _cli(agent, "search", "--queries", "-", input='{"id": "z", "query": "kiwi", "agent": "ops"}\n')
    [got] = [json.loads(line) for line in out.stdout.splitlines()]
    assert out.returncode == 1 and got["id"] == "z" and "'agent'" in got["error"] and "results" not in got, got
    out = _cli(agent, "search", "kiwi", "--queries", "-", input='{"query": "kiwi"}\n')
    assert out.returncode == 2 and "not both" in out.stderr and out.stdout == "", out.stderr


def test_a_query_longer_than_the_keyword_budget_says_what_was_searched(agent) -> None:
    from memindex.pipeline.store.fts_text import MAX_QUERY_CHARS

    agent.write("memory/a.md", "the heron flies over the quarry\n")
    agent.index()
    res = agent.search("padding " * (MAX_QUERY_CHARS // 8 + 10) + "heron")
    assert f"{MAX_QUERY_CHARS:,}" in res["warning"] and "first" in res["warning"]
    assert "warning" not in agent.search("heron")


def test_library_calls_that_enqueue_raise_the_error_root_when_redis_is_down(agent) -> None:
    """sync_and_wait, on_session_start and schedule_sync raised redis-py's ConnectionError, which
    `except memindex.MemindexError` did not catch; now BrokerUnavailable, with the CLI's one line."""
    agent.write("memory/a.md", "kiwi notes\n")
    script = textwrap.dedent('''
        import os, memindex
        ctx = memindex.Context("main", workspace=os.environ["T_WS"])
        for name, call in (("sync_and_wait", lambda: memindex.sync_and_wait(ctx)),
                           ("on_session_start", lambda: memindex.on_session_start(ctx, "agent:main:x")),
                           ("schedule_sync", lambda: memindex.schedule_sync(memindex.load_settings(ctx), "watch"))):
            try:
                call()
                print(name, "no error")
            except memindex.MemindexError as exc:
                print(name, type(exc).__name__, isinstance(exc, ConnectionError),
                      type(exc.__cause__).__module__.split(".")[0], "|", exc)
    ''')
    env = {**agent.env(broker_url="redis://:hunter2@127.0.0.1:1/0"), "T_WS": str(agent.workspace)}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3, r.stdout
    for line in lines:
        assert " BrokerUnavailable True redis | cannot reach the broker at redis://***@127.0.0.1:1/0" in line, line
        assert "hunter2" not in line


def test_a_search_that_cannot_schedule_its_sync_says_so_once_not_per_search(agent, caplog) -> None:
    """helper-68: `serve` with Redis down logged "could not schedule a search sync" on every search
    (~400 lines in 25 s). Now once, then once a minute while it lasts, and a line when it works again."""
    import logging

    import memindex

    agent.write("memory/a.md", "kiwi notes\n")
    agent.memory_config({"provider": "none", "sync": {"onSessionStart": False}})  # one schedule per search
    agent.index()
    down = {"on": True}
    calls: list[str] = []

    def schedule(settings, reason):
        calls.append(reason)
        if down["on"]:
            raise memindex.BrokerUnavailable("cannot reach the broker at redis://127.0.0.1:1/0")

    caplog.set_level(logging.DEBUG, logger="memindex.search")
    with memindex.open_search(agent.settings(), schedule_sync=schedule) as engine:
        def settle(n: int) -> None:
            deadline = time.monotonic() + 10
            while len(calls) < n and time.monotonic() < deadline:
                time.sleep(0.01)
            while engine._scheduling and time.monotonic() < deadline:
                time.sleep(0.01)

        for i in range(1, 21):
            assert engine.search("kiwi").results
            settle(i)
        down["on"] = False
        engine.search("kiwi")
        settle(21)
    said = [r for r in caplog.records if r.levelno >= logging.INFO and "schedul" in r.getMessage()]
    assert calls == ["search"] * 21, calls
    assert [r.levelno for r in said] == [logging.WARNING, logging.INFO], [r.getMessage() for r in said]
    assert "said again every 60 s" in said[0].getMessage() and "scheduled again" in said[1].getMessage()


def test_a_second_outage_is_announced_as_new_for_an_agent_not_searched_between(agent, caplog) -> None:
    """helper-72: each engine kept its failing state until its own schedule worked, so an agent not
    searched between two outages counted the second from the first one's start ("still cannot
    schedule ... after 64 s" for an outage 2 s old). A schedule that works anywhere ends it."""
    import logging

    import memindex

    agent.write("memory/a.md", "kiwi notes\n")
    agent.memory_config({"provider": "none", "sync": {"onSessionStart": False}})
    agent.index()
    down = {"on": True}

    def schedule(settings, reason):
        if down["on"]:
            raise memindex.BrokerUnavailable("cannot reach the broker")

    def search(engine) -> None:
        engine.search("kiwi")
        deadline = time.monotonic() + 10
        while engine._scheduling and time.monotonic() < deadline:
            time.sleep(0.01)

    caplog.set_level(logging.INFO, logger="memindex.search")
    with memindex.open_search(agent.settings(), schedule_sync=schedule) as main, \
            memindex.open_search(agent.settings(), schedule_sync=schedule) as ops:
        search(main), search(ops)  # outage 1: each says it once
        down["on"] = False
        search(main)  # scheduled again: the outage is over for the process
        down["on"] = True
        search(ops)  # outage 2, ops's first search since outage 1: a new outage
        down["on"] = False
        search(ops)
    lines = [r.getMessage() for r in caplog.records if "schedul" in r.getMessage()]
    assert [ln.split(" sync")[0] for ln in lines] == [
        "could not schedule a search", "could not schedule a search", "search", "could not schedule a search",
        "search"], lines
    assert all("still cannot" not in ln for ln in lines) and lines[-1].endswith("(after 0 s)"), lines


def test_status_reads_the_store_while_the_broker_is_down(agent) -> None:
    agent.write("memory/a.md", "kiwi notes\n")
    agent.index()
    down = {"MEMINDEX_BROKER_URL": "redis://:hunter2@127.0.0.1:1/0"}
    text = _cli(agent, "status", env=down)
    assert text.returncode == 0 and "1/1 files" in text.stdout, text
    assert "broker:" in text.stdout and "cannot reach the broker" in text.stdout and "hunter2" not in text.stdout
    data = json.loads(_cli(agent, "status", "--json", env=down).stdout)[0]["status"]
    assert data["files"] == 1 and "cannot reach the broker" in data["brokerError"]


def test_credentials_in_the_base_url_never_appear_at_debug(agent, fresh_services, server):
    """A proxy's user:password and a ?token= in remote.baseUrl: httpx logs the whole URL at -vv."""
    password, token = "urlpass-3141x", "urltoken-2718y"
    base = server.base("openai").replace("http://", f"http://proxyuser:{password}@") + f"?token={token}"
    agent.write("MEMORY.md", "the router is an Omada ER605\n")
    agent.memory_config({"provider": "openai", "fallback": "none", "remote": {"baseUrl": base, "apiKey": "sk-test-123"}})
    out = []
    for args in (("-vv", "index"), ("-vv", "search", "router"), ("-vv", "--log-format", "json", "status", "--deep")):
        proc = _cli(agent, *args)
        out.append(proc.stdout + proc.stderr)
    text = "\n".join(out)
    assert "HTTP Request: POST" in text  # httpx's line, with the URL, was logged
    assert password not in text and token not in text and "sk-test-123" not in text


def test_status_deep_makes_one_attempt_at_a_provider_that_refuses_connections(agent, fresh_services) -> None:
    """One timed request, as the README says: the indexing path's retries made it take 19 s."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent.write("memory/a.md", "kiwi notes\n")
    agent.memory_config({"provider": "openai", "fallback": "none",
                         "remote": {"baseUrl": f"http://127.0.0.1:{port}/v1", "apiKey": "sk-test-123"}})
    args = ["--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(agent.workspace)]
    t0 = time.monotonic()
    r = run_cli(*args, "status", "--deep", "--json")
    took = time.monotonic() - t0
    probe = json.loads(r.stdout)[0]["embeddingProbe"]
    assert probe["ok"] is False and "onnect" in probe["error"], probe
    assert "retry" not in r.stderr.lower(), r.stderr  # no retry lines: one attempt
    assert took < 15, took  # generous for a loaded CI; the retries took ~19 s


def test_special_files_with_memory_names_are_named_by_status(agent):
    """A FIFO named memory/note.md (or MEMORY.md) was never opened - right - but passed over
    without a word: status listed it nowhere (found by a user trial)."""
    from memindex.pipeline.status import source_scan

    agent.write("memory/ok.md", "a regular note\n")
    os.mkfifo(agent.workspace / "memory" / "note.md")
    os.mkfifo(agent.workspace / "MEMORY.md")
    os.mkfifo(agent.workspace / "memory" / "pipe.txt")  # not a memory name: not ours to report
    agent.index()
    issues = source_scan(agent.settings())["issues"]
    line = [i for i in issues if "special file" in i]
    assert line == ["2 special file(s) (FIFO, socket or device) with a memory file's name not read: "
                    "MEMORY.md, memory/note.md"], issues


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a tmpfs)")
def test_index_on_a_full_disk_does_not_count_unwritten_files_as_indexed(tmp_path) -> None:
    """helper-43: on a full disk `index` said "indexed 60 file(s) (60 not fully ...)" when no
    row was written (the writes were rolled back). The line now says they were not written."""
    ws, state = tmp_path / "ws", tmp_path / "state"
    (ws / "memory").mkdir(parents=True)
    state.mkdir()
    for i in range(60):
        (ws / "memory" / f"n{i}.md").write_text(f"# Note {i}\n" + f"The kestrel {i} nests on tower {i}. " * 300)
    cfg = tmp_path / "openclaw.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws), "memorySearch": {"provider": "none"}}}}))
    cli = f"{sys.executable} -m memindex --config {cfg} --state-dir {state} index"
    r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=400k tmpfs {state} && {cli}"],
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                       env=dict(os.environ))
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("main: "))
    assert line.startswith("main: indexed 0 file(s), 60 not written (see below)"), line
    assert "its disk is full" in r.stderr, r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a mount)")
def test_a_store_on_a_read_only_mount_says_why_it_cannot_be_read(tmp_path) -> None:
    """helper-58: a cleanly closed store (no -shm file) on a read-only mount: `search` said "cannot read
    the store ...: OperationalError: unable to open database file", as for a damaged or missing one;
    SQLite must create the -shm file to read a WAL store."""
    ws, state = tmp_path / "ws", tmp_path / "state"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("# A\nThe kestrel nests on the tower.\n")
    cfg = tmp_path / "openclaw.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws), "memorySearch": {"provider": "none"}}}}))
    cli = f"{sys.executable} -m memindex --config {cfg} --state-dir {state}"
    assert subprocess.run(f"{cli} index", shell=True, capture_output=True, timeout=120).returncode == 0
    for extra in state.glob("memory/*.sqlite-*"):
        extra.unlink()
    script = (f"mount --bind {state} {state} && mount -o remount,bind,ro {state} && {cli} search kestrel")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path), env=dict(os.environ))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "SQLite must create main.sqlite-shm beside it to read it" in r.stderr, r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a tmpfs)")
def test_index_on_a_full_disk_embeds_nothing(tmp_path, server) -> None:
    """helper-58: with the store's disk full, every `index` embedded the whole backlog (3.5 min of a
    local model; a paid API's tokens) and then failed every write, again at each retry."""
    ws, state = tmp_path / "ws", tmp_path / "state"
    (ws / "memory").mkdir(parents=True)
    state.mkdir()
    cfg = tmp_path / "openclaw.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws), "memorySearch": {
        "provider": "openai", "fallback": "none", "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-t"}}}}}))
    for i in range(20):
        (ws / "memory" / f"new{i}.md").write_text(f"# New {i}\nThe heron {i} fishes at dawn.\n")
    cli = f"{sys.executable} -m memindex --config {cfg} --state-dir {state}"
    before = server.count("openai")
    script = (f"mount -t tmpfs -o size=2m tmpfs {state} && dd if=/dev/zero of={state}/fill bs=64k 2>/dev/null; "
              f"{cli} index")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                       cwd=str(tmp_path), env=dict(os.environ))
    assert r.returncode == 1 and "its disk is full" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert server.count("openai") == before, "embedded before finding the disk full"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a tmpfs)")
def test_commands_on_a_store_whose_disk_is_full_say_so_in_one_line(tmp_path) -> None:
    """helper-54: with the store's disk completely full, `status`, `index` and `index --force`
    died with a traceback ("disk I/O error" from PRAGMA cache_size: even a read-only open
    creates the -shm file), and `search` did not name the disk."""
    ws, state = tmp_path / "ws", tmp_path / "state"
    (ws / "memory").mkdir(parents=True)
    state.mkdir()
    for i in range(5):
        (ws / "memory" / f"n{i}.md").write_text(f"# Note {i}\nThe kestrel {i} nests on tower {i}.\n")
    cfg = tmp_path / "openclaw.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws), "memorySearch": {"provider": "none"}}}}))
    cli = f"{sys.executable} -m memindex --config {cfg} --state-dir {state}"
    script = (f"mount -t tmpfs -o size=2m tmpfs {state} && {cli} index >/dev/null && "
              f"rm -f {state}/memory/*-shm {state}/memory/*-wal; dd if=/dev/zero of={state}/fill bs=64k 2>/dev/null; "
              f"for c in status index 'index --force' 'search kestrel'; do echo \"== $c\" >&2; {cli} $c; "
              "echo \"rc=$?\" >&2; done")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                       cwd=str(tmp_path), env=dict(os.environ))
    assert "Traceback" not in r.stderr, r.stderr
    for part in r.stderr.split("== ")[2:4]:  # index, index --force: one line naming the full disk
        assert "its disk is full" in part and "rc=1" in part, part
    assert "its disk is full" in r.stdout + r.stderr.split("== ")[1], r.stdout + r.stderr  # status
