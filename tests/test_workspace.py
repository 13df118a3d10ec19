import json
import os

import pytest

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import Context, resolve_agent
from memindex.pipeline.index.workspace import iter_discover


def discover(settings, **kw):
    return list(iter_discover(settings, **kw))


def _settings(tmp_path, ws, extra=()):
    cfg = {"agents": {"defaults": {"workspace": str(ws), "memorySearch": {"extraPaths": list(extra)}}}}
    return resolve_agent(cfg, state_dir=tmp_path / "state")


def test_default_roots_and_extra_paths(tmp_path):
    ws = tmp_path / "ws"
    (ws / "memory" / "2026").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("root")
    (ws / "memory" / "a.md").write_text("a")
    (ws / "memory" / "2026" / "2026-01-02.md").write_text("b")
    (ws / "memory" / "notes.txt").write_text("not markdown")
    (ws / "README.md").write_text("not memory")
    (ws / "team").mkdir()
    (ws / "team" / "t.md").write_text("t")
    (ws / "team" / "node_modules").mkdir()
    (ws / "team" / "node_modules" / "junk.md").write_text("skip")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.md").write_text("o")
    (outside / "o.png").write_bytes(b"\x89PNG")
    single = tmp_path / "single.md"
    single.write_text("s")
    s = _settings(tmp_path, ws, ["team", str(outside), str(single), "missing-dir"])
    paths = sorted(f.path for f in discover(s))
    assert paths == sorted(["MEMORY.md", "memory/a.md", "memory/2026/2026-01-02.md", "team/t.md",
                            "../outside/o.md", "../single.md"])


def test_symlinks_are_ignored(tmp_path):
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "s.md").write_text("secret")
    os.symlink(secret / "s.md", ws / "memory" / "link.md")
    os.symlink(secret, ws / "memory" / "linkdir")
    os.symlink(secret, ws / "extra-link")
    os.symlink(secret / "s.md", ws / "MEMORY.md")
    (ws / "memory" / "real.md").write_text("real")
    s = _settings(tmp_path, ws, ["extra-link"])
    assert [f.path for f in discover(s)] == ["memory/real.md"]


def test_memory_dir_symlink_is_ignored(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    real = tmp_path / "real"
    real.mkdir()
    (real / "x.md").write_text("x")
    os.symlink(real, ws / "memory")
    assert discover(_settings(tmp_path, ws)) == []


def test_duplicates_by_realpath_listed_once(tmp_path):
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "a.md").write_text("a")
    s = _settings(tmp_path, ws, ["memory", str(ws / "memory" / "a.md")])
    assert [f.path for f in discover(s)] == ["memory/a.md"]


def _big_tree(tmp_path):
    """memory/ with files of its own, nested folders, ignored dirs, symlinks and non-Markdown."""
    ws = tmp_path / "ws"
    mem = ws / "memory"
    for i in range(12):
        d = mem / f"d{i:02d}" / ("deep" if i % 3 == 0 else "")
        d.mkdir(parents=True, exist_ok=True)
        for j in range(25):
            (d / f"n{j:02d}.md").write_text(f"{i}-{j}")
        (d / "skip.txt").write_text("x")
    (mem / "top.md").write_text("top")
    (mem / "d03" / "node_modules").mkdir()
    (mem / "d03" / "node_modules" / "junk.md").write_text("skip")
    (mem / "d05" / "link.md").symlink_to(mem / "top.md")
    (mem / "d07" / "loop").symlink_to(mem, target_is_directory=True)
    return _settings(tmp_path, ws)


def test_a_large_walk_split_across_two_processes_lists_exactly_what_one_process_lists(tmp_path, monkeypatch):
    import memindex.pipeline.index.workspace as workspace

    if not hasattr(os, "fork") or not workspace._spare_cpu():
        import pytest

        pytest.skip("needs fork and two CPUs")
    s = _big_tree(tmp_path)
    monkeypatch.setattr(workspace, "SPLIT_WALK_AFTER", 10**9)
    one = discover(s)
    assert len(one) == 12 * 25 + 1 and len({f.path for f in one}) == len(one)

    forks = []
    real_fork = os.fork

    def counting_fork():
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(workspace, "SPLIT_WALK_AFTER", 30)
    monkeypatch.setattr(os, "fork", counting_fork)
    assert discover(s) == one  # same files, same sizes and mtimes, same order
    assert len(forks) == 1

    # A helper that cannot be forked, or dies before answering: the walk reads its part itself.
    def no_fork():
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    assert discover(s) == one
    monkeypatch.setattr(os, "fork", real_fork)
    parent = os.getpid()

    def dying_keep(name):
        if os.getpid() != parent:
            os._exit(3)
        return workspace._markdown_only(name)

    files = list(workspace._walk(s.workspace / "memory", dying_keep, workspace.ListingFacts()))
    assert [f[0] for f in files] == [f.abs_path for f in one]


def _cfg(tmp_path, ws, *extra):
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws), "memorySearch": {
        "provider": "none", "extraPaths": list(extra)}}}}))
    st = path.stat()  # a rewrite within the same mtime tick must still be seen
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    return path


@pytest.mark.parametrize("change", ["removed", "narrowed", "file entry removed"])
def test_files_of_an_extra_path_no_longer_configured_are_deleted(tmp_path, change):
    """helper-58: after an extraPaths entry was removed (or narrowed to a subfolder), every sync said
    "removed N" and kept the rows (the files were still on disk), status read "indexed: 305/5 files"
    forever, and the hidden rows took search's candidate slots (a relevant note scored 0 results)."""
    from memindex.pipeline.status import index_status
    from memindex.producers.enqueue import sync_and_wait

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-07-01.md").write_text("Salamander habitat survey at the north pond.\n")
    team = tmp_path / "team"
    (team / "keep").mkdir(parents=True)
    for i in range(30):
        (team / f"n{i}.md").write_text(f"salamander salamander habitat habitat survey survey note {i}\n")
    (team / "keep" / "k.md").write_text("a kept note about newts\n")
    single = tmp_path / "single.md"
    single.write_text("salamander habitat survey single file\n")
    before = {"removed": [str(team)], "narrowed": [str(team)], "file entry removed": [str(team), str(single)]}[change]
    after = {"removed": [], "narrowed": [str(team / "keep")], "file entry removed": [str(team)]}[change]
    ctx = Context(state_dir=str(tmp_path / "state"), workspace=str(ws), config=str(_cfg(tmp_path, ws, *before)))
    sync_and_wait(ctx, timeout=120)
    ctx = Context(state_dir=str(tmp_path / "state"), workspace=str(ws), config=str(_cfg(tmp_path, ws, *after)))
    counts = sync_and_wait(ctx, timeout=120)
    expected = {"removed": 1, "narrowed": 2, "file entry removed": 32}[change]
    status = index_status(settings_for(ctx))
    assert status["files"] == expected, (counts, status["files"])
    assert sync_and_wait(ctx, timeout=120)["to_delete"] == 0  # converged: nothing is re-announced
