"""Shared fixtures: a scratch workspace + state dir, indexing through the real
embedded broker, and real redis-server instances on free ports."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memindex.pipeline.embeddings.registry import env_var_names

# Tests must never pick up a developer's Redis, OpenClaw state or provider keys by accident.
os.environ.pop("MEMINDEX_BROKER_URL", None)
os.environ.pop("MEMINDEX_SERVER", None)  # a developer's server must not answer the tests' CLI calls
for _k in (*sorted(env_var_names()), "OPENCLAW_CONFIG_PATH", "OPENCLAW_STATE_DIR",
           "OPENCLAW_HOME", "OPENCLAW_PROFILE"):
    os.environ.pop(_k, None)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
GGUF = SHARED / "models" / "all-MiniLM-L6-v2.F16.gguf"

# The repository keeps fixed top-level folders; installed, they live under the one name `memindex`.
INSTALLED_PACKAGES = {"memindex": REPO / "memindex", "memindex/pipeline": REPO / "pipeline",
                      "memindex/workers": REPO / "workers", "memindex/producers": REPO / "producers"}


def installed_layout(dest: Path) -> Path:
    """The source tree copied as it lands in site-packages (tools that cannot follow the editable
    install's package-dir mapping, mypy and lint-imports, read this copy)."""
    for rel, src in INSTALLED_PACKAGES.items():
        shutil.copytree(src, dest / rel, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


class Agent:
    """A scratch agent: workspace, state dir, optional config, and helpers."""

    def __init__(self, root: Path, agent_id: str = "main"):
        self.root = root
        self.workspace = root / "workspace"
        self.state = root / "state"
        self.config_path = root / "openclaw.json"
        self.agent_id = agent_id
        (self.workspace / "memory").mkdir(parents=True, exist_ok=True)
        self.state.mkdir(parents=True, exist_ok=True)
        self.write_config({})

    def write_config(self, cfg: dict) -> None:
        self.config_path.write_text(json.dumps(cfg), encoding="utf-8")
        # Config reloads key on mtime; make sure a rewrite is always seen.
        st = self.config_path.stat()
        os.utime(self.config_path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))

    def memory_config(self, ms: dict, **top) -> None:
        self.write_config({"agents": {"defaults": {"memorySearch": ms}}, **top})

    def use_openai_at(self, base_url: str) -> None:
        """Embed with the openai provider at a local test server, no fallback (failures stay visible)."""
        self.write_config({"agents": {"defaults": {"workspace": str(self.workspace), "memorySearch": {
            "provider": "openai", "fallback": "none", "remote": {"baseUrl": base_url, "apiKey": "sk-test-123"}}}}})

    def env(self, broker_url: str | None = None) -> dict:
        """os.environ for a CLI or worker subprocess of this agent (on ``broker_url`` when given)."""
        out = dict(os.environ, OPENCLAW_STATE_DIR=str(self.state), OPENCLAW_CONFIG_PATH=str(self.config_path))
        if broker_url:
            out["MEMINDEX_BROKER_URL"] = broker_url
        return out

    @property
    def ctx(self):
        from memindex.pipeline.config.settings import Context

        return Context(self.agent_id, str(self.config_path), str(self.state), str(self.workspace))

    def settings(self):
        from memindex.pipeline.config.agents import settings_for

        return settings_for(self.ctx)

    def write(self, rel: str, text: str | bytes) -> Path:
        p = self.workspace / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text, encoding="utf-8")
        return p

    def index(self, force: bool = False) -> dict:
        from memindex.producers.enqueue import sync_and_wait

        return sync_and_wait(self.ctx, force=force, timeout=120)

    def search(self, query: str, **kw) -> dict:
        from memindex.pipeline.search.engine import MemorySearch

        eng = MemorySearch(self.settings())
        try:
            return eng.search(query, **kw).as_dict()
        finally:
            eng.close()

    def store_rows(self) -> list[tuple]:
        """The live generation's chunk set, for comparing stores."""
        from memindex.pipeline.store.reader import open_reader

        r = open_reader(self.settings())
        try:
            gen = r.state().live_generation
            if gen is None:
                return []
            return sorted(r.conn().execute(
                f"SELECT source, path, start_line, end_line, hash, text FROM chunks_g{gen}").fetchall())
        finally:
            r.close()


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    return Agent(tmp_path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, port: int):
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        exe = shutil.which("redis-server")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def redis_server():
    if shutil.which("redis-server") is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is required under CI (install Debian's redis-server)")
        pytest.skip("redis-server not installed")
    srv = RedisServer(free_port())
    srv.start()
    yield srv
    srv.stop()


def run_cli(*args: str, env: dict | None = None, timeout: float = 120, cwd: Path | None = None,
            input: str | None = None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "memindex", *args], capture_output=True, text=True,
                          env=e, timeout=timeout, cwd=cwd or REPO, input=input)


def start_workers(broker_url: str, *, queues: tuple[str, ...] = ("sync", "embed", "batch"),
                  threads: int = 2, extra_env: dict | None = None) -> subprocess.Popen:
    """A real ``dramatiq`` worker process consuming the given queues."""
    env = dict(os.environ, MEMINDEX_BROKER_URL=broker_url, **(extra_env or {}))
    return subprocess.Popen(
        [sys.executable, "-m", "dramatiq", "memindex.workers.actors:get_broker", "--processes", "1", "--threads", str(threads),
         "--queues", *queues],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )


# --- a fake provider API server per test file ------------------------------------------------
# A test file picks the server class, ``server = module_server(ProviderServer)`` (or BatchServer),
# and clears it around each test with ``fresh_server``, or with ``fresh_services`` for tests that
# embed through the pipeline.

def module_server(server_cls: type):
    """A module-scoped ``server`` fixture: one ``server_cls`` instance for the whole test file."""

    @pytest.fixture(scope="module", name="server")
    def _server():
        with server_cls() as srv:
            yield srv

    return _server


@pytest.fixture
def fresh_server(server):
    """The test file's ``server`` with its logs, plans and counters cleared."""
    server.reset()
    return server


@pytest.fixture
def fresh_services(fresh_server, monkeypatch):
    """A cleared server, no cached embedding services before or after, and fast provider retries."""
    from memindex.pipeline.embeddings.embedder import reset_services

    reset_services()
    monkeypatch.setenv("MEMINDEX_RETRY_BASE_DELAY_S", "0.01")
    monkeypatch.setenv("MEMINDEX_RETRY_ATTEMPTS", "2")
    yield
    reset_services()


def live_vectors(agent: Agent) -> dict:
    """chunk hash -> stored embedding blob (None = not embedded) of the agent's live generation."""
    from memindex.pipeline.store.reader import open_reader

    r = open_reader(agent.settings())
    try:
        gen = r.state().live_generation
        return dict(r.conn().execute(f"SELECT hash, embedding FROM chunks_g{gen}").fetchall())
    finally:
        r.close()


def errors_in_threads(fn, n: int = 4) -> list[BaseException]:
    """Run ``fn`` in ``n`` threads at once; returns the exceptions they raised."""
    import threading

    errors: list[BaseException] = []

    def run():
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def wait_for(cond, timeout: float, step: float = 0.25) -> bool:
    """Poll ``cond`` until it holds or ``timeout`` seconds pass; one last check at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, ...), or None: no
    such process, or no procfs. Split at the last ")": a command name may hold spaces and ")"."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_running(pid: int) -> bool:
    """Whether ``pid`` still runs: kill(0) answers and it is not a zombie (a zombie has exited;
    only its parent has not reaped it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    fields = proc_stat(pid)
    if fields is None:  # gone since kill(0), or no procfs (then kill(0) is all there is to know)
        return not os.path.isdir("/proc/self")
    return fields[0] != "Z"


def kill_groups(procs, sig: int = signal.SIGKILL, wait_s: float = 10) -> None:
    """Signal each process group started with ``start_new_session`` (SIGKILL unless ``sig``) and
    reap its leader, waiting up to ``wait_s`` for each."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, sig)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(wait_s)


async def timed(coro):
    """(what ``coro`` returns, seconds it took)."""
    t0 = time.monotonic()
    result = await coro
    return result, time.monotonic() - t0
