"""The local (llama.cpp) provider's thread count follows the CPUs this process may use: its
affinity mask and its cgroup v2 CPU quota, shared by the command's worker processes, and a
setting (MEMINDEX_LOCAL_THREADS) overrides it. bench/embed.py measures why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memindex.pipeline.config.environ import EnvError
from memindex.pipeline.embeddings.providers import local
from tests.conftest import GGUF


def _cgroup_dir(root: Path) -> Path:
    """This process's cgroup v2 directory under a stand-in root (the path /proc/self/cgroup names)."""
    rel = next((line.strip()[3:] for line in Path("/proc/self/cgroup").read_text().splitlines()
                if line.startswith("0::")), "/")
    d = root / rel.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.mark.skipif(not Path("/proc/self/cgroup").exists(), reason="no /proc")
def test_the_tightest_cgroup_quota_on_the_path_counts_rounded_up(tmp_path):
    leaf = _cgroup_dir(tmp_path)
    (leaf / "cpu.max").write_text("max 100000\n")
    assert local._cgroup_quota(str(tmp_path)) is None  # "max": no quota anywhere on the path
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs on an ancestor (or the root itself)
    assert local._cgroup_quota(str(tmp_path)) == 2
    if leaf != tmp_path:
        (leaf / "cpu.max").write_text("50000 100000\n")  # half a CPU below it: the tighter one wins
        assert local._cgroup_quota(str(tmp_path)) == 1
    assert local.available_cpus(str(tmp_path)) <= 2


def test_the_quota_is_absent_without_cgroup_files(tmp_path):
    assert local._cgroup_quota(str(tmp_path / "nothing")) is None
    assert local.available_cpus(str(tmp_path / "nothing")) == len(os.sched_getaffinity(0))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_a_process_pinned_to_one_cpu_counts_one():
    code = ("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
            "from memindex.pipeline.embeddings.providers.local import available_cpus, threads_default; "
            "print(available_cpus(), threads_default())")
    env = {k: v for k, v in os.environ.items() if k not in (local.THREADS_ENV, local.PROCESSES_ENV)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1"]  # one CPU: one thread, whatever the host has


def test_the_default_shares_the_cpus_between_the_commands_processes(monkeypatch):
    monkeypatch.delenv(local.THREADS_ENV, raising=False)
    for cpus, processes, want in ((1, 1, 1), (2, 1, 2), (2, 2, 1), (4, 1, 4), (8, 2, 4), (16, 1, 4), (16, 8, 2),
                                  (3, 4, 1)):
        monkeypatch.setattr(local, "available_cpus", lambda cpus=cpus: cpus)
        monkeypatch.setenv(local.PROCESSES_ENV, str(processes))
        assert local.threads_default() == want, (cpus, processes)


def test_the_setting_overrides_and_is_checked(monkeypatch):
    monkeypatch.setenv(local.THREADS_ENV, "3")
    assert local.threads_default() == 3
    monkeypatch.setenv(local.THREADS_ENV, "0")
    with pytest.raises(EnvError):
        local.threads_default()
    monkeypatch.setenv(local.THREADS_ENV, "two")
    with pytest.raises(EnvError):
        local.threads_default()


@pytest.mark.skipif(not local.llama_available() or not GGUF.is_file(), reason="llama-cpp-python or the GGUF missing")
def test_the_model_is_loaded_with_the_chosen_thread_count(monkeypatch):
    monkeypatch.setenv(local.THREADS_ENV, "1")
    prov = local.LocalProvider(str(GGUF), "/tmp")
    assert len(prov.embed_query("how many threads")) == 384
    assert prov._loaded.llm.context_params.n_threads == 1
    assert prov._loaded.llm.context_params.n_threads_batch == 1
