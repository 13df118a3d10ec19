"""The shape of the package, as a user installs and imports it.

- import-linter contracts (pyproject.toml): producers > workers > pipeline,
  the pipeline's subpackages in layers, no cycles between siblings;
- the public API type-checks under ``mypy --strict``;
- a normal (non-editable) wheel install works from a directory that has its
  own ``pipeline/`` and ``workers/`` packages: the API imports, ``memindex
  index``/``search`` run, and a Redis ``memindex worker`` consumes a sync;
- the in-process snippet of docs/library.md runs as written and honours ``memory.backend``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, installed_layout as _installed_layout


def _env_with_path(path: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(path))


def _lint(tmp_path: Path, root: Path) -> subprocess.CompletedProcess:
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    return subprocess.run([lint, "--config", str(tmp_path / "pyproject.toml"), "--no-cache"], cwd=tmp_path,
                          env=_env_with_path(root), capture_output=True, text=True, timeout=300)


def test_import_contracts_hold(tmp_path: Path) -> None:
    r = _lint(tmp_path, _installed_layout(tmp_path / "site"))
    assert r.returncode == 0, r.stdout + r.stderr
    kept = re.findall(r"KEPT", r.stdout)
    assert len(kept) == 5, r.stdout  # every contract in pyproject.toml was checked


@pytest.mark.parametrize("module, line, contract", [
    # helper-57: both were "3 contracts kept" (no contract looked at third-party packages, and the
    # whitelisted config -> registry edge let a real cycle through).
    ("pipeline/status.py", "import dramatiq", "the library imports no queue package"),
    ("pipeline/search/engine.py", "import redis", "the library imports no queue package"),
    ("pipeline/embeddings/registry.py", "import memindex.pipeline.config.settings", "the provider table"),
    ("pipeline/index/chunking.py", "import memindex.workers.broker", "producers over workers over pipeline"),
])
def test_import_contracts_catch_what_they_say(tmp_path: Path, module: str, line: str, contract: str) -> None:
    root = _installed_layout(tmp_path / "site")
    target = root / "memindex" / module
    target.write_text(target.read_text() + f"\n{line}  # injected\n")
    r = _lint(tmp_path, root)
    assert r.returncode != 0, r.stdout
    broken = [ln for ln in r.stdout.splitlines() if ln.endswith("BROKEN")]
    assert any(ln.startswith(contract) for ln in broken), r.stdout


def test_public_api_type_checks_strict(tmp_path: Path) -> None:
    root = _installed_layout(tmp_path / "site")
    client = tmp_path / "client.py"
    client.write_text(textwrap.dedent('''
        import memindex
        from memindex import Context, SearchEngine, SearchResponse, load_settings, open_search

        def top_paths(agent: str, query: str) -> list[str]:
            settings = load_settings(Context(agent_id=agent))
            engine: SearchEngine = open_search(settings)
            try:
                resp: SearchResponse = engine.search(query, max_results=5, session_key="agent:main:direct:a")
                return [r.path for r in resp.results]
            finally:
                engine.close()

        def read(agent: str) -> str:
            try:
                return memindex.memory_get(load_settings(Context(agent_id=agent)), "MEMORY.md").text
            except memindex.MemindexError as exc:
                return str(exc)

        async def read_async(agent: str) -> str:
            settings = load_settings(Context(agent_id=agent))
            resp: SearchResponse = await open_search(settings).asearch("q", max_results=3)
            return (await memindex.amemory_get(settings, "MEMORY.md", lines=2)).text + str(len(resp.results))
    '''))
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                        "--no-incremental", str(root / "memindex" / "__init__.py"), str(client)],
                       cwd=tmp_path, env=_env_with_path(root), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout


def test_every_error_derives_from_one_root() -> None:
    """Every exception class defined anywhere in the package, found by walking its modules (a list
    kept by hand missed the producers' own errors and the writer lock's timeout)."""
    import memindex

    script = textwrap.dedent('''
        import importlib, inspect, pkgutil
        from memindex.pipeline.errors import MemindexError
        found, outside = [], []
        for top in ("pipeline", "workers", "producers"):
            pkg = importlib.import_module(f"memindex.{top}")
            for name in [pkg.__name__] + [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]:
                for attr, obj in vars(importlib.import_module(name)).items():
                    if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                        found.append(f"{name}.{attr}")
                        if not issubclass(obj, MemindexError):
                            outside.append(f"{name}.{attr}")
        print(len(found), found.count("memindex.producers.serve.tools.OperationError"), outside)
    ''')
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env={k: v for k, v in os.environ.items() if k != "MEMINDEX_BROKER_URL"})
    assert r.returncode == 0, r.stderr
    count, found_tools, outside = r.stdout.split(" ", 2)
    assert int(count) >= 40 and found_tools == "1", r.stdout  # the walk reached every subpackage
    assert outside.strip() == "[]", outside
    for name in ("EnvError", "WorkspaceError", "BrokerUnavailable", "DeadLettered", "NoWorkerError", "IndexTimeout"):
        assert issubclass(getattr(memindex, name), memindex.MemindexError), name
    assert memindex.__all__ == ["__version__", *memindex._EXPORTS]
    for name in memindex.__all__:
        assert getattr(memindex, name) is not None


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed normally (dependencies come from this interpreter's site)."""
    tmp = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                        "-w", str(tmp / "dist"), str(REPO)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    wheel = next((tmp / "dist").glob("memindex-*.whl"))
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"memindex"}, tops
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return venv


def _hostile_cwd(root: Path) -> Path:
    """A project of the user's own with packages named like our internal folders."""
    for name in ("pipeline", "workers", "producers"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "__init__.py").write_text("MINE = True\n")
    (root / "workers" / "actors.py").write_text("raise ImportError('the user\\'s own workers.actors')\n")
    return root


def _venv_env(venv: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MEMINDEX_BROKER_URL")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def _workspace(root: Path) -> tuple[Path, Path, Path]:
    ws, state = root / "ws", root / "state"
    (ws / "memory").mkdir(parents=True)
    state.mkdir()
    (ws / "MEMORY.md").write_text("# Memory\n\nThe router VLAN for the lab is 42.\n")
    (ws / "memory" / "2026-02-10.md").write_text("Replaced the zeppelin NAS disks today.\n")
    cfg = root / "openclaw.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws)}}}))
    return ws, state, cfg


def test_wheel_install_works_next_to_packages_named_like_ours(wheel_venv: Path, tmp_path: Path,
                                                               redis_server) -> None:
    cwd = _hostile_cwd(tmp_path / "project")
    ws, state, cfg = _workspace(tmp_path)
    env = _venv_env(wheel_venv)
    py = str(wheel_venv / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert not any((Path(site) / n).exists() for n in ("pipeline", "workers", "producers"))

    probe = subprocess.run([py, "-c", textwrap.dedent("""
        import memindex, pipeline, workers
        from memindex import Context, load_settings, open_search
        from memindex.pipeline.config.settings import load_settings as internal
        assert pipeline.MINE and workers.MINE
        assert memindex.__file__.startswith(%r), memindex.__file__
        print("ok", memindex.__version__)
    """ % site)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and probe.stdout.startswith("ok"), probe.stdout + probe.stderr

    base = ["memindex", "--config", str(cfg), "--state-dir", str(state)]
    r = subprocess.run([*base, "index"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([*base, "search", "zeppelin", "--json"], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [x["path"] for x in json.loads(r.stdout)["results"]] == ["memory/2026-02-10.md"]

    # A Redis worker started from the user's directory consumes a sync.
    (ws / "memory" / "2026-02-11.md").write_text("The quokka migration finished overnight.\n")
    renv = _venv_env(wheel_venv, MEMINDEX_BROKER_URL=redis_server.url)
    worker = subprocess.Popen([*base, "worker", "--processes", "1", "--threads", "2"], cwd=cwd, env=renv,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    writer = subprocess.Popen([*base, "worker", "--writer"], cwd=cwd, env=renv,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        r = subprocess.run([*base, "index"], cwd=cwd, env=renv, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        deadline = time.monotonic() + 120
        paths: list[str] = []
        while time.monotonic() < deadline:
            out = subprocess.run([*base, "search", "quokka", "--json"], cwd=cwd, env=env,
                                 capture_output=True, text=True, timeout=120)
            paths = [x["path"] for x in json.loads(out.stdout)["results"]] if out.returncode == 0 else []
            if paths:
                break
            time.sleep(0.5)
        assert paths == ["memory/2026-02-11.md"]
        assert worker.poll() is None and writer.poll() is None
    finally:
        for p in (worker, writer):
            try:
                os.killpg(p.pid, 15)
            except ProcessLookupError:
                pass
            p.wait(timeout=60)


def _readme_snippet() -> str:
    """The library page's in-process example (it moved from the README to docs/library.md)."""
    text = (REPO / "docs" / "library.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- in-process-example -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/library.md lost its in-process example"
    return m.group(1)


@pytest.mark.parametrize("backend", ["builtin", "qmd"])
def test_readme_in_process_example_runs_and_honours_backend(tmp_path: Path, backend: str) -> None:
    ws, state, cfg = _workspace(tmp_path)
    (ws / "memory" / "2026-02-10.md").write_text("Checked the router VLAN tags on the core switch.\n" * 3)
    raw = json.loads(cfg.read_text())
    if backend == "qmd":  # a qmd that is not installed: the builtin index answers, and says so
        raw["memory"] = {"backend": "qmd", "qmd": {"command": str(tmp_path / "no-such-qmd")}}
    cfg.write_text(json.dumps(raw))
    env = {k: v for k, v in os.environ.items() if k != "MEMINDEX_BROKER_URL"}
    env.update(OPENCLAW_STATE_DIR=str(state), OPENCLAW_CONFIG_PATH=str(cfg))
    subprocess.run([sys.executable, "-m", "memindex", "index", "-q"], env=env, check=True, timeout=300,
                   capture_output=True)
    script = _readme_snippet() + textwrap.dedent("""
        import json
        print(json.dumps({"payload": payload, "text": text}))
    """)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["payload"]["results"], out
    assert out["payload"]["backend"] == "builtin"
    if backend == "qmd":
        assert out["payload"]["backendFallback"]["from"] == "qmd"
    else:
        assert "backendFallback" not in out["payload"]
    assert "router VLAN" in out["text"]
