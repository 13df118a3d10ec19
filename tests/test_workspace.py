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
