"""Procfile and docker-compose.yml start the same processes; `honcho start` really indexes."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, Agent

PROCFILE_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")  # honcho's own grammar


def procfile() -> dict[str, list[str]]:
    out = {}
    for line in (REPO / "Procfile").read_text().splitlines():
        m = PROCFILE_LINE.match(line)
        if m:
            out[m.group(1)] = shlex.split(m.group(2))
    return out


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _command(svc: dict) -> list[str]:
    cmd = svc["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


def test_procfile_and_compose_start_the_same_commands():
    procs = procfile()
    services = {k: v for k, v in compose()["services"].items() if k != "redis"}
    assert set(procs) == set(services) == {"watcher", "worker", "compute", "batch", "writer0", "writer1"}
    for name, cmd in procs.items():
        assert _command(services[name]) == cmd, name


def test_the_writer_is_one_thread_and_workers_skip_the_write_queue():
    from memindex.producers.cli.main import build_parser

    procs = procfile()
    parser = build_parser()
    for k in (0, 1):  # N = 2 write shards, one writer each
        writer = parser.parse_args(procs[f"writer{k}"][1:])
        assert writer.command == "worker" and writer.writer and writer.shard == f"{k}/2"
    for name in ("worker", "compute", "batch"):
        worker = parser.parse_args(procs[name][1:])
        assert worker.command == "worker" and not worker.writer and "write" not in (worker.queues or [])
    from memindex.workers.broker import QUEUES

    assert parser.parse_args(procs["compute"][1:]).queues == ["embed"]  # the filesystem-free kind (issue 18)
    consumed = {q for name in ("worker", "compute", "batch") for q in parser.parse_args(procs[name][1:]).queues}
    assert consumed | {"write"} == set(QUEUES)  # every queue has a consumer
    watcher = parser.parse_args(procs["watcher"][1:])
    assert watcher.command == "watch" and watcher.all


def test_compose_wiring():
    doc = compose()
    svcs = doc["services"]
    assert svcs["redis"]["healthcheck"]["test"]
    for name in ("watcher", "worker", "writer0", "writer1"):
        s = svcs[name]
        assert s["environment"]["MEMINDEX_WRITE_SHARDS"] == "2"
        assert s["environment"]["MEMINDEX_BROKER_URL"].startswith("redis://redis:")
        assert s["environment"]["OPENCLAW_STATE_DIR"] == "/state"
        vols = s["volumes"]
        assert any(v.endswith(":/state") for v in vols), "state volume"
        assert any(v.endswith(":/state/workspace") for v in vols), "workspace volume"
        assert s["depends_on"]["redis"]["condition"] == "service_healthy"
        assert s["healthcheck"]["test"]
        assert s["build"] == "."
    for name in ("compute", "batch"):  # compute side (issue 18): the deployment's env, no store or memory file
        compute = svcs[name]
        assert compute["environment"]["MEMINDEX_BROKER_URL"].startswith("redis://redis:") and compute["healthcheck"]
        assert not any("/state" in v for v in compute["volumes"])
    assert (REPO / "Dockerfile").is_file()
    assert set(doc["volumes"]) >= {"memindex-state"}


def _our_processes(marker: str) -> list[int]:
    """PIDs whose environment carries this test's unique broker URL (honcho's children)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if marker.encode() in (d / "environ").read_bytes():
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


@pytest.mark.redis
def test_honcho_start_runs_the_pipeline(tmp_path, redis_server):
    if shutil.which("honcho") is None and not (Path(sys.executable).parent / "honcho").exists():
        pytest.skip("honcho not installed")
    a = Agent(tmp_path / "a")
    a.write_config({"agents": {"defaults": {"workspace": str(a.workspace),
                                            "memorySearch": {"sync": {"watchDebounceMs": 300}}}}})
    a.write("memory/2026-02-01.md", "honcho started this index of the lychee notes\n")
    envfile = tmp_path / "empty.env"
    envfile.write_text("")
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, MEMINDEX_BROKER_URL=redis_server.url, MEMINDEX_WRITE_SHARDS="2",
               OPENCLAW_STATE_DIR=str(a.state),
               OPENCLAW_CONFIG_PATH=str(a.config_path), PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    honcho = shutil.which("honcho", path=env["PATH"])
    log = open(tmp_path / "honcho.log", "wb")
    proc = subprocess.Popen([honcho, "-f", str(REPO / "Procfile"), "-e", str(envfile), "start"], cwd=REPO,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def found(q: str) -> bool:
        return bool(a.search(q)["results"])

    try:
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and not found("lychee"):
            assert proc.poll() is None, (tmp_path / "honcho.log").read_text()
            time.sleep(0.1)
        assert found("lychee"), (tmp_path / "honcho.log").read_text()
        a.write("memory/2026-02-02.md", "a later note about rambutan\n")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not found("rambutan"):
            time.sleep(0.1)
        assert found("rambutan"), (tmp_path / "honcho.log").read_text()
    finally:
        # honcho stops its children itself (SIGTERM, then SIGKILL after 5 s) ...
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        # ... but they run in sessions of their own: make sure none outlives the test.
        for pid in _our_processes(f"MEMINDEX_BROKER_URL={redis_server.url}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log.close()
