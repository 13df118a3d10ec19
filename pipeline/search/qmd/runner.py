"""Run one ``qmd`` command as a subprocess, bounded in time and output.

Each agent gets a self-contained qmd home under ``<state>/agents/<id>/qmd/``
so agents never share (or clobber) a qmd index. A timed-out command is killed
with its whole process group: qmd runs under Bun/Node, which may have spawned
model-loading helpers that would otherwise linger.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable, Mapping, Sequence

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.errors import QmdError, QmdMissing as QmdMissing  # (defined with the error root)

OUTPUT_CAP_CHARS = 200_000
_KILL_GRACE_S = 2.0


class QmdTimeout(QmdError):
    kind = "timeout"


class QmdFailed(QmdError):
    kind = "exit"

    def __init__(self, message: str, returncode: int, stdout: str = "", stderr: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


class QmdBadOutput(QmdError):
    kind = "invalid-json"


class QmdHomeRefused(QmdError):
    """The agent's directory under the state dir is a symlink: its qmd home (index, config) could
    be another agent's (``agents/ops -> main`` searched main's qmd index as ops')."""

    kind = "refused"


@dataclass
class QmdOutput:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def qmd_home(settings: AgentSettings) -> Path:
    return settings.state_dir / "agents" / settings.agent_id / "qmd"


def qmd_env(settings: AgentSettings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment: inherited, plus the agent's private XDG dirs."""
    home = qmd_home(settings)
    config_dir = str(home / "xdg-config")
    env = dict(os.environ if base is None else base)
    env.update({
        "XDG_CONFIG_HOME": config_dir,
        # qmd 2.x reads QMD_CONFIG_DIR before XDG_CONFIG_HOME (tobi/qmd#132).
        "QMD_CONFIG_DIR": config_dir,
        "XDG_CACHE_HOME": str(home / "xdg-cache"),
        "NO_COLOR": "1",
    })
    return env


def qmd_command(settings: AgentSettings) -> list[str]:
    """``memory.qmd.command`` shell-split; extra tokens allow e.g. ``bun /x/qmd.js``."""
    argv = shlex.split(settings.memory.qmd.command) or ["qmd"]
    argv[0] = os.path.expanduser(argv[0])
    return argv


def _drain(stream: IO[bytes], cap: int, sink: list[str], total: list[int]) -> None:
    # Keep reading past the cap so the child never blocks on a full pipe.
    for chunk in iter(lambda: stream.read(65536), b""):
        have = total[0]
        if have < cap:
            sink.append(chunk[: cap - have].decode("utf-8", errors="replace"))
        total[0] = have + len(chunk)
    stream.close()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(_KILL_GRACE_S)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        pass


def link_shared_models(agent_cache: Path, base: Mapping[str, str] | None = None) -> None:
    """Point the agent's ``qmd/models`` at the user's, so GGUF models are not fetched per agent."""
    env = os.environ if base is None else base
    user_cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    shared = user_cache / "qmd" / "models"
    mine = agent_cache / "qmd" / "models"
    if shared == mine or not shared.is_dir() or os.path.lexists(mine):
        return
    try:
        mine.parent.mkdir(parents=True, exist_ok=True)
        mine.symlink_to(shared, target_is_directory=True)
    except OSError:
        pass  # not fatal: qmd would download into the agent's own cache


class QmdRunner:
    """Runs ``qmd <args>`` for one agent: env, cwd = workspace, timeouts, output cap."""

    def __init__(self, settings: AgentSettings, *, output_cap: int = OUTPUT_CAP_CHARS) -> None:
        self.settings = settings
        self.command = qmd_command(settings)
        self.env = qmd_env(settings)
        self.cwd = settings.workspace
        self.output_cap = output_cap
        self._procs: dict[subprocess.Popen[bytes], str] = {}  # running process -> qmd subcommand
        self._lock = threading.Lock()

    def prepare_dirs(self) -> None:
        agent_dir = qmd_home(self.settings).parent
        if agent_dir.is_symlink():  # as the transcripts behind it are never read (index/sessions.py)
            raise QmdHomeRefused(f"the agent directory {agent_dir} is a symlink; its qmd index could be "
                                 "another agent's, so qmd is not used for this agent")
        for key in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
            Path(self.env[key]).mkdir(parents=True, exist_ok=True)
        link_shared_models(Path(self.env["XDG_CACHE_HOME"]))

    def run(self, args: Sequence[str], *, timeout_ms: int, discard_stdout: bool = False,
            check: bool = True) -> QmdOutput:
        """Run qmd; raise QmdMissing / QmdTimeout / QmdFailed (non-zero exit, if ``check``)."""
        self.prepare_dirs()
        argv = [*self.command, *args]
        cwd = self.cwd if self.cwd.is_dir() else None
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=self.env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL if discard_stdout else subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,  # own group: killable as a whole
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            raise QmdMissing(f"qmd command not runnable ({argv[0]}): {exc.strerror or exc}") from None
        with self._lock:
            self._procs[proc] = args[0] if args else ""
        out: list[str] = []
        err: list[str] = []
        readers = [threading.Thread(target=_drain, args=(proc.stderr, self.output_cap, err, [0]), daemon=True)]
        if proc.stdout is not None:
            readers.append(threading.Thread(target=_drain, args=(proc.stdout, self.output_cap, out, [0]),
                                            daemon=True))
        for t in readers:
            t.start()
        try:
            proc.wait(max(0.001, timeout_ms / 1000))
        except subprocess.TimeoutExpired:
            raise QmdTimeout(f"qmd {' '.join(args[:1])} timed out after {timeout_ms} ms") from None
        finally:
            if proc.returncode is None:
                # Timed out or interrupted: kill the group while the leader is unreaped
                # (so its pid, the group id, cannot have been reused).
                _kill_group(proc)
            with self._lock:
                self._procs.pop(proc, None)
            for t in readers:
                t.join(_KILL_GRACE_S)
        res = QmdOutput(argv, proc.returncode, "".join(out), "".join(err), time.monotonic() - started)
        if check and res.returncode != 0:
            detail = (res.stderr.strip() or res.stdout.strip())[:500]
            raise QmdFailed(f"qmd {' '.join(args[:1])} exited with {res.returncode}: {detail}",
                            res.returncode, res.stdout, res.stderr)
        return res

    def kill_all(self, commands: Iterable[str] | None = None) -> None:
        """Stop running qmd commands of this runner (all, or those subcommands)."""
        wanted = None if commands is None else set(commands)
        with self._lock:
            procs = [p for p, cmd in self._procs.items() if wanted is None or cmd in wanted]
        for p in procs:
            _kill_group(p)
