import os

from memindex.pipeline.config.settings import resolve_agent
from memindex.pipeline.index.workspace import discover


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
