"""The resident process behind ``memindex search``/``get`` (producers/cli/resident.py): real
subprocesses, a real resident process, the caller's own stdio passed to it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import proc_stat, process_running, wait_for

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")

SERVED = "memindex: call run by resident process"


class Calls:
    def __init__(self, agent, run_dir: Path, **env: str):
        self.agent = agent
        self.run_dir = run_dir
        self.env = dict(os.environ, XDG_RUNTIME_DIR=str(run_dir), MEMINDEX_RESIDENT="debug",
                        MEMINDEX_RESIDENT_IDLE_S="120", **env)

    def argv(self, *args: str) -> list[str]:
        a = self.agent
        return [sys.executable, "-m", "memindex", "--config", str(a.config_path), "--state-dir", str(a.state),
                "--workspace", str(a.workspace), *args]

    def __call__(self, *args: str, stdin: str | None = None, popen: dict | None = None,
                 **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*args), input=stdin, capture_output=True, text=True, timeout=120,
                              cwd=self.agent.root, env={**self.env, **env}, **(popen or {}))

    def sockets(self) -> list[Path]:
        return sorted((self.run_dir / "memindex").glob("*.sock"))

    def pids(self) -> list[int]:
        out = []
        for lock in (self.run_dir / "memindex").glob("*.lock"):
            text = lock.read_text().strip()
            if text.isdigit() and process_running(int(text)):
                out.append(int(text))
        return out

    def start(self) -> None:
        """A first call (run in-process), then wait until its resident process listens."""
        first = self("search", "--json", "warm up")
        assert first.returncode == 0, first.stderr
        assert "no resident process" in first.stderr and "starting one" in first.stderr, first.stderr
        assert wait_for(self.sockets, 60, step=0.05), "timed out waiting for a resident process to listen"


def without_debug(stderr: str) -> str:
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith("memindex: "))


@pytest.fixture
def calls(agent, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    agent.write("memory/2026-03-01.md", "# Network\n\nThe kumquat router needs a reboot after the VLAN change.\n")
    agent.write("MEMORY.md", "# Facts\n\nRod runs the Tuesday standup.\n")
    agent.index()
    c = Calls(agent, run_dir)
    yield c
    for pid in c.pids():
        os.kill(pid, signal.SIGTERM)
    for pid in c.pids():
        assert wait_for(lambda: not process_running(pid), 30, step=0.05), f"resident process {pid} did not stop"
    assert c.sockets() == []  # a resident process that is sent SIGTERM removes its socket


def test_calls_through_the_resident_process_answer_exactly_as_in_process(calls, agent):
    cases = [
        (("search", "--json", "kumquat router"), None),
        (("search", "kumquat router"), None),                     # OpenClaw's text shape
        (("search", "-v", "Rod standup"), None),                  # stderr lines too
        (("search", "--json", "--queries", "-"), '{"id": "a", "query": "kumquat"}\nnot json\n'),  # stdin
        (("search", "--bogus"), None),                            # usage error: exit 2
        (("get", "memory/2026-03-01.md"), None),
        (("get", "../../etc/passwd"), None),                      # refused: exit 1
        (("search", "--help"), None),
        (("index",), None),                                       # a no-change sync and its summary
    ]
    expected = [calls(*args, stdin=stdin, MEMINDEX_RESIDENT="off") for args, stdin in cases]
    assert expected[0].returncode == 0 and json.loads(expected[0].stdout)["results"]
    assert {r.returncode for r in expected} == {0, 1, 2}
    calls.start()
    for (args, stdin), want in zip(cases, expected):
        got = calls(*args, stdin=stdin)
        assert SERVED in got.stderr, (args, got.stderr)
        assert (got.returncode, got.stdout, without_debug(got.stderr)) == (
            want.returncode, want.stdout, without_debug(want.stderr)), args
    assert len(calls.pids()) == 1

    # Settings and the store are read by each call: a new note and a config change show at once.
    agent.write("memory/2026-03-02.md", "The quince firewall rules were rotated.\n")
    agent.index()
    got = calls("search", "--json", "quince firewall")
    assert SERVED in got.stderr
    assert [r["path"] for r in json.loads(got.stdout)["results"]] == ["memory/2026-03-02.md"]
    agent.memory_config({"query": {"maxResults": 1}})
    got = calls("search", "--json", "kumquat router Rod standup")
    assert SERVED in got.stderr and len(json.loads(got.stdout)["results"]) == 1


def test_another_environment_or_changed_code_is_never_served_by_a_resident_process(calls):
    from memindex.pipeline.search import snippet

    calls.start()
    (first,) = calls.pids()
    want = calls("search", "--json", "kumquat router", MEMINDEX_RESIDENT="off").stdout

    # The shell's own bookkeeping (a background job gets SHLVL 0 from bash) is not another environment.
    same = calls("search", "--json", "kumquat router", SHLVL="0", _="/usr/bin/env", OLDPWD="/")
    assert SERVED in same.stderr and same.stdout == want, same.stderr

    # Another environment (a variable any import could read) is not this resident's caller.
    other = calls("search", "--json", "kumquat router", MEMINDEX_EXTRA_SETTING="1")
    assert SERVED not in other.stderr and "no resident process" in other.stderr, other.stderr
    assert other.stdout == want

    # New code on disk (an upgrade, an edited checkout): run in-process; the stale resident exits.
    path = Path(snippet.__file__)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        got = calls("search", "--json", "kumquat router")
    finally:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert SERVED not in got.stderr and "declined (S)" in got.stderr, got.stderr
    assert got.returncode == 0 and got.stdout == want, got.stderr
    assert wait_for(lambda: not process_running(first), 30, step=0.05), "the stale resident process did not exit"


def _can_unshare_mounts() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def test_a_call_from_another_sandbox_is_never_run_by_a_resident_process_outside_it(calls, agent, tmp_path):
    """What confines the caller - a stricter umask, a resource limit, a lower priority, a mount
    namespace that hides memory - confines its call: a resident process started elsewhere does
    not serve it (it would create files, use resources and see directories the caller cannot)."""
    import resource

    calls.start()
    served = calls("search", "--json", "kumquat router")
    assert SERVED in served.stderr and json.loads(served.stdout)["results"]

    # umask 077: the store a call creates is the caller's alone, as it is in-process.
    fresh = tmp_path / "private-state"
    got = calls("--state-dir", str(fresh), "index", popen={"umask": 0o077})
    assert got.returncode == 0 and SERVED not in got.stderr, got.stderr
    made = [fresh, *fresh.rglob("*")]
    assert any(p.name.endswith(".sqlite") for p in made)
    assert {oct(p.stat().st_mode & 0o077) for p in made} == {"0o0"}, [(p, oct(p.stat().st_mode)) for p in made]

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for label, setup in (("a lower open-files limit", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))),
                         ("a lower priority", lambda: os.nice(1))):
        got = calls("search", "--json", "kumquat router", popen={"preexec_fn": setup})
        assert got.returncode == 0 and SERVED not in got.stderr, (label, got.stderr)
        assert json.loads(got.stdout)["results"], label

    if not _can_unshare_mounts():
        pytest.skip("cannot make a mount namespace here (unshare -m needs root)")
    import shlex

    hide = f"mount -t tmpfs none {shlex.quote(str(agent.workspace / 'memory'))}"
    argv = " ".join(map(shlex.quote, calls.argv("get", "memory/2026-03-01.md")))
    got = subprocess.run(["unshare", "-m", "sh", "-c", f"{hide} && exec {argv}"], capture_output=True, text=True,
                         timeout=120, cwd=agent.root, env=calls.env)
    assert SERVED not in got.stderr, got.stderr
    assert "kumquat" not in got.stdout, "a hidden file was read through a resident process outside the namespace"
    assert "kumquat" in calls("get", "memory/2026-03-01.md").stdout  # outside it, the note is there


def test_resident_process_exits_when_idle_and_is_never_used_from_an_unsafe_directory(calls):
    calls.env["MEMINDEX_RESIDENT_IDLE_S"] = "0.5"
    calls.start()
    (pid,) = calls.pids()
    assert wait_for(lambda: not calls.sockets() and not process_running(pid), 60, step=0.05), \
        "timed out waiting for the idle resident process to exit"

    # A socket directory others can read or enter could hand our stdio to their process: unused.
    calls.env["MEMINDEX_RESIDENT_IDLE_S"] = "120"
    os.chmod(calls.run_dir / "memindex", 0o755)
    for _ in range(2):
        got = calls("search", "--json", "kumquat router")
        assert got.returncode == 0 and json.loads(got.stdout)["results"]
        assert "no safe socket directory" in got.stderr and SERVED not in got.stderr
    time.sleep(0.5)
    assert calls.sockets() == [] and calls.pids() == []


def _children(ppid: int) -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fields = proc_stat(int(pid))
        if fields is not None and int(fields[1]) == ppid and fields[0] != "Z":
            out.append(int(pid))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_killed_caller_takes_its_call_with_it(calls):
    calls.start()
    (server,) = calls.pids()
    # The call's child blocks reading the caller's stdin, which stays open after the caller dies.
    caller = subprocess.Popen(calls.argv("search", "--json", "--queries", "-"), stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=calls.agent.root,
                              env=calls.env)
    try:
        assert wait_for(lambda: _children(server), 60, step=0.05), "the resident process never forked the call"
        (child,) = _children(server)
        caller.kill()
        caller.wait(timeout=30)
        assert wait_for(lambda: not process_running(child), 30, step=0.05), "the call did not end with its caller"
        assert process_running(server)  # the resident process itself serves on
    finally:
        caller.stdin.close()
        if caller.poll() is None:
            caller.kill()


def test_a_directory_removed_and_made_again_is_read_anew(calls, tmp_path):
    # A resident process started in ./wd serves callers in a new ./wd by the same path (the
    # identity is the path): relative paths must name the new directory's files.
    import shutil

    a = calls.agent
    wd = tmp_path / "wd"

    def make(max_results: int) -> None:
        wd.mkdir()
        (wd / "openclaw.json").write_text(json.dumps({"agents": {"defaults": {
            "memorySearch": {"query": {"maxResults": max_results}}}}}))

    def call() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "memindex", "--config", "openclaw.json", "--state-dir",
                               str(a.state), "--workspace", str(a.workspace), "search", "--json",
                               "kumquat router Rod standup"], capture_output=True, text=True, timeout=120,
                              cwd=wd, env=calls.env)

    make(5)
    first = call()
    assert first.returncode == 0 and "starting one" in first.stderr, first.stderr
    assert wait_for(calls.sockets, 60, step=0.05), "timed out waiting for a resident process to listen"
    assert len(json.loads(call().stdout)["results"]) == 2
    shutil.rmtree(wd)
    make(1)
    got = call()
    assert SERVED in got.stderr and got.returncode == 0, got.stderr
    assert len(json.loads(got.stdout)["results"]) == 1


def test_at_most_four_resident_processes_per_user(calls):
    """Four run (the README's number; the fourth used to be refused), and a fifth identity runs
    in-process without starting an interpreter that would only find the limit."""
    for i in range(4):
        got = calls("search", "--json", "kumquat router", MEMINDEX_TRIAL=str(i))
        assert got.returncode == 0 and "starting one" in got.stderr, got.stderr
        assert wait_for(lambda: len(calls.pids()) == i + 1, 60, step=0.05), f"resident {i + 1} did not start"
    fifth = calls("search", "--json", "kumquat router", MEMINDEX_TRIAL="5")
    assert fifth.returncode == 0 and json.loads(fifth.stdout)["results"]
    assert "already run" in fifth.stderr and "starting one" not in fifth.stderr, fifth.stderr
    time.sleep(1.0)
    assert len(calls.pids()) == 4
    served = calls("search", "--json", "kumquat router", MEMINDEX_TRIAL="3")
    assert SERVED in served.stderr
