"""``memindex serve --daemon / --pid-file / --stop / --socket``: a server the user starts and stops.

Nothing here starts by itself: a server runs because a user (or their supervisor) ran
``memindex serve``. ``--daemon`` detaches it (its own session, stdio to a log file) once it is
ready to answer, so the command's exit code says whether it started; ``--pid-file`` names it,
and ``--stop`` ends the one a pid file names (only if that process is a ``memindex serve``).
A Unix socket is made 0600 in a directory that is this user's alone (0700): it is the socket's
only lock, and ``--server`` clients check that its owner is themselves (producers/cli/remote.py).

Standard library only (``--stop`` needs nothing else).
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import time
from pathlib import Path

from memindex.pipeline.errors import MemindexError


class ServeError(MemindexError):
    """A pid file, socket path or daemon start that cannot be used: one line, exit 1 or 2."""


def runtime_dir() -> Path:
    """This user's directory for sockets and pid files: ``$XDG_RUNTIME_DIR/memindex``, else
    ``$TMPDIR/memindex-<uid>`` (created 0700)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        return Path(base) / "memindex"
    return Path(os.environ.get("TMPDIR") or "/tmp") / f"memindex-{os.getuid()}"


def default_pid_file() -> Path:
    return runtime_dir() / "serve.pid"


def private_dir(path: Path) -> Path:
    """``path`` as a directory only this user can enter: made 0700 when missing; an existing one
    must be ours and closed to group and others, else anyone who can write in it could replace
    the socket or the pid file."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise ServeError(f"cannot use {path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ServeError(f"{path} is not a directory")
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ServeError(f"{path} must be a directory of yours that only you can enter (mode 0700; it is "
                         f"{stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}): the socket's only lock is it")
    return path


def unix_socket(path: Path) -> socket.socket:
    """A listening Unix socket at ``path``, mode 0600, in a private directory. A socket file left
    by a server that is gone is replaced; one with a live server behind it is refused."""
    private_dir(path.parent)
    if path.is_symlink() or (path.exists() and not stat.S_ISSOCK(os.lstat(path).st_mode)):
        raise ServeError(f"{path} exists and is not a socket")
    if path.exists():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(1.0)
            probe.connect(str(path))
            raise ServeError(f"a server is already listening on {path}")
        except OSError:
            path.unlink()  # nobody answers: left behind by a server that is gone
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # created 0600, never briefly wider
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on unix:{path}: {(exc.strerror or str(exc)).lower()}") from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def is_serve(pid: int) -> bool:
    """Whether ``pid`` is a live ``memindex serve`` (a zombie, or a pid since reused, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's: never ours to stop
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, IndexError):
        return True  # no /proc: alive is all that can be told
    return state != "Z" and any(b"memindex" in a for a in cmdline) and b"serve" in cmdline


def claim_pid_file(pid_file: Path) -> None:
    """Refuse to start over a running server's pid file (a stale one is replaced at write)."""
    pid = read_pid(pid_file)
    if pid is not None and pid != os.getpid() and is_serve(pid):
        raise ServeError(f"memindex serve is already running (pid {pid}, pid file {pid_file}); "
                         "`memindex serve --stop` ends it, or give another --pid-file")


def write_pid_file(pid_file: Path) -> None:
    if pid_file.parent == runtime_dir():
        private_dir(pid_file.parent)
    else:
        pid_file.parent.mkdir(parents=True, exist_ok=True)
    claim_pid_file(pid_file)
    tmp = pid_file.with_name(f".{pid_file.name}.{os.getpid()}")
    tmp.write_text(f"{os.getpid()}\n", encoding="ascii")
    os.replace(tmp, pid_file)


def remove_pid_file(pid_file: Path) -> None:
    if read_pid(pid_file) == os.getpid():  # never another server's
        try:
            pid_file.unlink()
        except OSError:
            pass


def stop(pid_file: Path, wait_s: float) -> str:
    """End the server ``pid_file`` names (SIGTERM, then wait for it); the line to print."""
    pid = read_pid(pid_file)
    if pid is None:
        raise ServeError(f"no memindex serve to stop: no pid file at {pid_file}" if not pid_file.exists()
                         else f"no memindex serve to stop: {pid_file} holds no pid")
    if not is_serve(pid):
        try:
            pid_file.unlink()
        except OSError:
            pass
        raise ServeError(f"no memindex serve to stop: pid {pid} of {pid_file} is not running one "
                         "(stale pid file removed)")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not is_serve(pid):
            return f"memindex serve stopped (pid {pid})"
        time.sleep(0.05)
    raise ServeError(f"memindex serve (pid {pid}) did not stop within {wait_s:g} s of SIGTERM")


class Detached:
    """``--daemon``: the process forks; the parent waits until the child says it is serving (or
    exits) and returns its exit code; the child goes on in its own session and calls ``ready``
    once it can answer, which points its stdio at the log file and lets the parent go."""

    def __init__(self, log_file: Path) -> None:
        self.log_file = log_file
        self._w = -1

    def fork(self) -> int | None:
        """None in the child; in the parent, the exit code to return."""
        sys.stdout.flush()
        sys.stderr.flush()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.setsid()  # no controlling terminal: the shell's hang-up or Ctrl-C is not ours
            self._w = w
            return None
        os.close(w)
        with os.fdopen(r, "rb") as fh:
            said = fh.read()
        if said.startswith(b"ok"):
            print(said[2:].decode("utf-8", "replace").strip(), file=sys.stderr)
            return 0
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code <= 0:  # it said nothing (its error line is on this terminal when it did): say it ended
            print(f"error: memindex serve (pid {pid}) ended before it was ready"
                  + (f" (signal {-code})" if code < 0 else ""), file=sys.stderr)
        return code if code > 0 else 1

    def ready(self, line: str) -> None:
        if self._w < 0:
            return
        fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        os.write(self._w, b"ok" + line.encode())
        os.close(self._w)
        self._w = -1
