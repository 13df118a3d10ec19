"""The ``memindex`` entry point, and a resident process for the latency-bound commands.

An agent runtime that shells out to ``memindex search`` (or ``get``, or ``index`` on a timer)
per call pays the interpreter's start-up and ~0.1 s of imports every time, ten times the
search itself. So
the first such call runs in-process as always and starts a resident process beside it: it
imports the CLI once and then forks one child per call. The child takes the caller's own
stdin, stdout and stderr (passed over a Unix socket), runs the same ``main(argv)`` and
reports its exit code, so output, exit codes and errors are the in-process ones. Settings
and the store are read afresh by every child, exactly as an in-process run reads them.
What a resident process could hold stale - the code and the environment it started with -
is checked on every call:

- the caller's environment, working directory, interpreter, ``sys.path`` and flags, and what
  confines it (umask, ids, capabilities, limits, priority, cgroup, namespaces, root: see
  :func:`_confinement`) must equal the resident's (a digest names the socket; the full text
  is compared), else the call runs in-process;
- if any memindex module it loaded has changed on disk (an upgrade, an edited checkout), or
  a package was installed or removed, the call runs in-process and the resident process exits.

A call's child ends with its caller (Ctrl-C is forwarded; a killed caller closes the
connection). A resident process exits after :data:`IDLE_ENV` seconds without a call (default
:data:`DEFAULT_IDLE_S`); at most :data:`MAX_RESIDENT` run per user. Sockets live in a
0700 directory of the user's (``$XDG_RUNTIME_DIR/memindex``, else ``$TMPDIR/memindex-<uid>``),
and a connection from another user is refused. ``MEMINDEX_RESIDENT=off`` turns it all off,
``MEMINDEX_RESIDENT=debug`` says on stderr how each call ran. POSIX only (``fork``, descriptor passing); elsewhere every call runs in-process.

This module is imported on every ``memindex`` run, so it uses only what the interpreter
has already loaded or loads cheaply; the CLI proper is imported only when it runs here.
"""

from __future__ import annotations

import os
import sys

from memindex.producers.cli.argv import command_of

RESIDENT_ENV = "MEMINDEX_RESIDENT"
IDLE_ENV = "MEMINDEX_RESIDENT_IDLE_S"
DEFAULT_IDLE_S = 300.0
# What MEMINDEX_RESIDENT may say (any case), and what each spelling means; any other word is
# refused like a bad --log-level (it was taken for "on" without a word).
MODES = {"on": "on", "1": "on", "true": "on", "yes": "on", "off": "off", "0": "off", "false": "off", "no": "off",
         "debug": "debug"}
MAX_RESIDENT = 4
# The commands an agent runtime shells out to per tool call or on a timer (QMD's backend in
# OpenClaw runs `qmd update` that way): their latency is mostly start-up.
RESIDENT_COMMANDS = frozenset(("search", "get", "index"))
# A resident process that has not forked a child for the call within this long is not used.
_ACK_TIMEOUT_S = 3.0
# Modules these commands import lazily (a no-change index included; the queue machinery
# that an index with work starts is not): imported once by the resident process instead.
_WARM_MODULES = (
    "memindex.producers.cli.main",
    "memindex.producers.cli.failures",
    "memindex.producers.enqueue",
    "memindex.pipeline.config.agents",
    "memindex.pipeline.embeddings.embedder",
    "memindex.pipeline.index.indexer",
    "memindex.pipeline.search.backend",
    "memindex.pipeline.search.get",
    "memindex.workers.logs",
)


def main(argv: list[str] | None = None) -> int:
    """``memindex``: a search or get through the resident process when one answers, else in-process."""
    args = sys.argv[1:] if argv is None else list(argv)
    place = _place(args)
    if place is not None:
        try:
            code = _call(place, args)
        except KeyboardInterrupt:
            return 130
        if code is not None:
            return code
    # In-process from here (the pipeline's modules cost more than this import): a setting the
    # resident process reads, or a number the CLI's modules read as they load, that is not one
    # is the CLI's one error line and exit code, not a traceback.
    from memindex.pipeline.errors import ConfigError

    try:
        _check_settings()
        from memindex.producers.cli.main import main as cli_main
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return cli_main(args)


def _check_settings() -> None:
    """Refuse a ``MEMINDEX_RESIDENT`` or ``MEMINDEX_RESIDENT_IDLE_S`` this module cannot take
    (``EnvError``). Only on the in-process path: a resident process serves only callers with its
    own environment, and it started only with good ones (``serve``)."""
    from memindex.pipeline.config.environ import env_choice

    env_choice(RESIDENT_ENV, MODES)
    _idle_s()


def _idle_s() -> float:
    from memindex.pipeline.config.environ import env_number

    return env_number(IDLE_ENV, DEFAULT_IDLE_S, above=0)


# --- the caller's side ------------------------------------------------------------------------

def _mode() -> str | None:
    """on, off or debug; None for a value ``MODES`` does not know (``main`` refuses it in-process)."""
    value = os.environ.get(RESIDENT_ENV, "").strip().lower()
    return MODES.get(value) if value else "on"


def _enabled() -> bool:
    return (_mode() in ("on", "debug")
            and hasattr(os, "fork") and hasattr(os, "posix_spawn") and "_ARGCOMPLETE" not in os.environ)


# Set by the shell per command or per job (the program's path, the previous directory, the
# nesting depth: bash exports SHLVL 0 to a background job), read by nothing here.
_SHELL_NOISE = frozenset(("_", "OLDPWD", "SHLVL"))


def _identity() -> str:
    """Everything an import-time or run-time decision may read, and everything that confines
    what the call may see or do: equal identities, equal runs."""
    env = "\0".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k not in _SHELL_NOISE)
    return "\0".join(("memindex-resident 2", sys.executable, __file__, os.getcwd(), repr(sys.path),
                      repr(sys.flags), repr(sys._xoptions), repr(sys.warnoptions), env, _confinement()))


# The lines of /proc/self/status that confine a process: the file mode mask its files get,
# its user and groups, its capabilities, seccomp and no-new-privileges, the CPUs and memory
# nodes it may use.
_STATUS_LINES = ("Umask:", "Uid:", "Gid:", "Groups:", "Cap", "NoNewPrivs:", "Seccomp", "Cpus_allowed_list:",
                 "Mems_allowed_list:")
# Per-process files that confine it further: resource limits, control group, memory-pressure
# kill priority, security label (AppArmor/SELinux).
_PROC_FILES = ("limits", "cgroup", "oom_score_adj", "attr/current")
_NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts")


def _confinement() -> str:
    """What confines this process beyond its environment and working directory, so that a call
    from a sandbox (a mount namespace that hides other agents' memory, a container, a cgroup, a
    resource limit, a stricter umask, a lower priority) is never run by a process outside it:
    the resident process was started by such a caller and inherited all of it, or it is not
    used. Read from /proc where there is one (a few small reads), else what ``os`` can tell."""
    root = os.stat("/")
    parts = [f"root={root.st_dev}:{root.st_ino}"]  # a chroot
    try:
        parts.append(f"nice={os.getpriority(os.PRIO_PROCESS, 0)} sched={os.sched_getscheduler(0)}")
    except (AttributeError, OSError):
        pass
    try:
        with open("/proc/self/status", "rb") as fh:
            status = fh.read().decode("ascii", "replace")
    except OSError:
        status = ""
    if "\nUmask:" in status:
        parts += [line for line in status.splitlines() if line.startswith(_STATUS_LINES)]
    else:  # no /proc (or a kernel without the Umask line): the mask, ids and limits through os
        mask = os.umask(0o077)
        os.umask(mask)
        parts.append(f"umask={mask:o} ids={os.getuid()},{os.geteuid()},{os.getgid()},{os.getegid()},"
                     f"{sorted(os.getgroups())}")
        try:
            import resource

            parts.append(repr([resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource))
                               if n.startswith("RLIMIT_")]))
        except ImportError:
            pass
    if status:
        for name in _PROC_FILES:
            try:
                with open(f"/proc/self/{name}", "rb") as fh:
                    parts.append(f"{name}={fh.read().decode('utf-8', 'replace')}")
            except OSError:
                pass
        for name in _NAMESPACES:
            try:
                parts.append(os.readlink(f"/proc/self/ns/{name}"))
            except OSError:
                pass
    return "\0".join(parts)


def _directory() -> str | None:
    """The user's socket directory (created 0700), or None when it is not safely ours."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = os.path.join(base, "memindex") if base else os.path.join(
        os.environ.get("TMPDIR") or "/tmp", f"memindex-{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return None
    # Another user's directory (or a symlink planted in /tmp) must never receive our descriptors.
    if not (os.path.isdir(path) and not os.path.islink(path) and st.st_uid == os.getuid()
            and st.st_mode & 0o077 == 0):
        return None
    return path


class _Place:
    __slots__ = ("identity", "socket", "lock")

    def __init__(self, identity: str, directory: str) -> None:
        import zlib

        raw = identity.encode("utf-8", "surrogateescape")
        name = f"{zlib.crc32(raw):08x}{zlib.adler32(raw):08x}"
        self.identity = identity
        self.socket = os.path.join(directory, name + ".sock")
        self.lock = os.path.join(directory, name + ".lock")


def _place(args: list[str]) -> _Place | None:
    if command_of(args) not in RESIDENT_COMMANDS or not _enabled():
        return None
    directory = _directory()
    try:
        identity = _identity()
    except OSError:  # the working directory is gone
        return None
    if directory is None:
        _debug("no safe socket directory (it must be the user's own, mode 0700, not a symlink: "
               "$XDG_RUNTIME_DIR/memindex or $TMPDIR/memindex-<uid>); running in-process")
        return None
    if len(directory) > 80:  # AF_UNIX paths are capped at ~104 bytes
        _debug(f"socket directory path too long for a Unix socket ({directory}); running in-process")
        return None
    return _Place(identity, directory)


def _frame(parts: list[str]) -> bytes:
    out = bytearray()
    for p in parts:
        b = p.encode("utf-8", "surrogateescape")
        out += len(b).to_bytes(4, "big") + b
    return bytes(out)


def _unframe(data: bytes) -> list[str]:
    parts, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        parts.append(data[i + 4:i + 4 + n].decode("utf-8", "surrogateescape"))
        i += 4 + n
    return parts


def _readline(conn) -> bytes:
    buf = bytearray()
    while not buf.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def _call(place: _Place, args: list[str]) -> int | None:
    """The exit code of the call run by the resident process, or None: run it in-process (nothing
    has been written to stdout or stderr yet)."""
    # _socket, not socket: the wrapper module imports enum, selectors and array (~10 ms a call).
    import _socket as socket

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(_ACK_TIMEOUT_S)
        try:
            conn.connect(place.socket)
        except (FileNotFoundError, ConnectionRefusedError):
            if _live_others(os.path.dirname(place.socket), place.lock) >= MAX_RESIDENT:
                # Not another interpreter per call that would only find the limit and exit.
                _debug(f"no resident process for this identity, and {MAX_RESIDENT} already run (the most "
                       "per user); running in-process")
                return None
            _debug(f"no resident process at {place.socket}; starting one, running this call in-process")
            _start(place)
            return None
        except OSError as exc:
            _debug(f"cannot reach the resident process at {place.socket} ({exc}); running in-process")
            return None
        try:
            payload = _frame([place.identity, *args])
            body = len(payload).to_bytes(4, "big") + payload
            rights = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))  # an int array
            step = "send"
            sent = conn.sendmsg([body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
            if sent < len(body):  # never an empty send: one to a resident that has already
                conn.sendall(body[sent:])  # answered "S" and closed fails with EPIPE
            step = "ack"
            ack = _readline(conn)
            if not ack.startswith(b"A "):
                _debug(f"resident process at {place.socket} declined ({ack.strip().decode() or 'closed'}); "
                       "running in-process")
                return None  # another identity ("M") or changed code ("S")
            pid, server_pid = (int(x) for x in ack[2:].split())
            # The child runs only after this go-ahead, so a caller that gave up above (and runs
            # the call itself) is never answered twice.
            step = f"go after {ack!r}"
            conn.sendall(b"G")
            conn.settimeout(None)
        except (OSError, ValueError) as exc:
            _debug(f"no answer from the resident process at {place.socket} ({step}: {exc!r}); running in-process")
            return None
        try:
            done = _readline(conn)
        except KeyboardInterrupt:
            import signal

            try:
                os.kill(pid, signal.SIGINT)
                conn.settimeout(5.0)
                done = _readline(conn)
            except (OSError, KeyboardInterrupt):
                done = b""
            return int(done[2:]) if done.startswith(b"X ") else 130
        if done.startswith(b"X "):
            _debug(f"call run by resident process {server_pid} (child {pid})")
            return int(done[2:])
        print("error: the resident memindex process ended without an exit status "
              f"(set {RESIDENT_ENV}=off to run every call in-process)", file=sys.stderr)
        return 1
    finally:
        conn.close()


def _debug(line: str) -> None:
    """``MEMINDEX_RESIDENT=debug``: say on stderr how each call was run."""
    if _mode() == "debug":
        print(f"memindex: {line}", file=sys.stderr)


def _start(place: _Place) -> None:
    """Start a resident process for this identity in the background (it imports while we run)."""
    try:
        os.unlink(place.socket)  # a dead one's (connection refused); a live one holds its lock
    except OSError:
        pass
    code = ("import json, sys; sys.path[:] = json.loads(sys.argv[2]); "
            "from memindex.producers.cli.resident import serve; serve(sys.argv[1])")
    import json

    devnull = os.devnull
    try:
        os.posix_spawn(sys.executable, [sys.executable, "-c", code, place.socket, json.dumps(sys.path)],
                       os.environ, setsid=True, file_actions=[
                           (os.POSIX_SPAWN_OPEN, 0, devnull, os.O_RDONLY, 0),
                           (os.POSIX_SPAWN_OPEN, 1, devnull, os.O_WRONLY, 0),
                           (os.POSIX_SPAWN_OPEN, 2, devnull, os.O_WRONLY, 0)])
    except (OSError, NotImplementedError, TypeError):
        pass  # no resident process: every call runs in-process


# --- the resident process -----------------------------------------------------------------------

def serve(socket_path: str) -> None:
    """Run the resident process for this process's identity at ``socket_path`` until idle."""
    import fcntl
    import signal
    import socket

    identity, cwd = _identity(), os.getcwd()
    idle = _idle_s()  # a bad value ends this process (its caller says why, in-process)
    directory = os.path.dirname(socket_path)
    place = _Place(identity, directory)
    if place.socket != socket_path or _directory() != directory:
        return  # started by a caller with another identity: serve nobody
    lock_fd = os.open(place.lock, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock_fd)
        return  # another caller's start won the race
    os.ftruncate(lock_fd, 0)
    os.write(lock_fd, f"{os.getpid()}\n".encode())  # who holds it (for operators and tests)
    try:
        if _live_others(directory, place.lock) >= MAX_RESIDENT:  # this one would be one too many
            return
        _warm()
        from memindex.producers.journal import ChangeJournal

        journal = ChangeJournal.create()  # before any fork: every call's child shares it
        code_stamp = _code_stamp()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.unlink(socket_path)
        except FileNotFoundError:
            pass
        server.bind(socket_path)
        os.chmod(socket_path, 0o600)
        server.listen(16)
        server.settimeout(max(idle, 0.1))
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a kill takes its socket with it
        try:
            while True:
                try:
                    conn, _ = server.accept()
                except socket.timeout:
                    return
                if not _handle(conn, server, identity, code_stamp, cwd, journal):
                    return
        finally:
            server.close()
            if journal is not None:
                journal.close()
            try:
                os.unlink(socket_path)
            except OSError:
                pass
    finally:
        os.close(lock_fd)


def _warm() -> None:
    """Do once, before any fork, what every call would otherwise do for the first time: the
    imports, the parsers (argparse's formatter imports shutil, bz2 and lzma), loading sqlite-vec
    into the process, the text functions' lazily compiled patterns. No store is opened here:
    a SQLite connection must never cross a fork."""
    import importlib

    for name in _WARM_MODULES:
        importlib.import_module(name)
    from memindex.pipeline.search.snippet import centred_snippet
    from memindex.pipeline.store import db
    from memindex.pipeline.store.fts_text import build_match_query, query_keywords
    from memindex.producers.cli.main import build_parser

    for argv in (["search", "q"], ["get", "MEMORY.md"], ["index"]):  # argparse compiles its patterns lazily
        build_parser(full=False, only=argv[0]).parse_args(argv)
    conn = db.connect(":memory:", readonly=True)
    try:
        db.load_vector_extension(conn)
    finally:
        conn.close()
    text = "What did Rod's team decide about the VLAN-42 router?"
    build_match_query(text)
    centred_snippet(text + "\nThe router moved.", 1, 2, query_keywords(text))


def _live_others(directory: str, own_lock: str) -> int:
    """Resident processes of this user still holding their lock (stale files are removed)."""
    import fcntl

    live = 0
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if not name.endswith(".lock") or path == own_lock:
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            live += 1
            continue
        finally:
            os.close(fd)
        for stale in (path, path[: -len(".lock")] + ".sock"):
            try:
                os.unlink(stale)
            except OSError:
                pass
    return live


def _code_stamp() -> dict[str, int]:
    """mtimes that change with the code: every loaded memindex module's file (an edited
    checkout, an upgrade), and each site-packages directory (pip replaces a package's
    dist-info directory on any install, upgrade or removal, so a changed dependency shows too)."""
    paths = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if path and (name == "memindex" or name.startswith("memindex.")):
            paths.append(path)
    return _mtimes(paths)


def _mtimes(paths) -> dict[str, int]:
    out = {}
    for path in paths:
        try:
            out[path] = os.stat(path).st_mtime_ns
        except OSError:
            out[path] = -1  # missing: stale only once it appears
    return out


def _stale(stamp: dict[str, int]) -> bool:
    return _mtimes(stamp) != stamp


def _handle(conn, server, identity: str, code_stamp: dict[str, int], cwd: str, journal=None) -> bool:
    """Answer one call (fork its child); False: this process must exit."""
    import socket

    fds: list[int] = []
    try:
        conn.settimeout(_ACK_TIMEOUT_S)
        if hasattr(socket, "SO_PEERCRED"):
            import struct

            cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            if struct.unpack("3i", cred)[1] != os.getuid():
                return True
        data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
        if len(data) < 4 or len(fds) != 3:
            return True
        need = int.from_bytes(data[:4], "big") + 4
        while len(data) < need:
            more = conn.recv(need - len(data))
            if not more:
                return True
            data += more
        parts = _unframe(data[4:need])
        if not parts or parts[0] != identity:
            conn.sendall(b"M\n")
            return True
        if _stale(code_stamp):
            conn.sendall(b"S\n")
            return False
        if journal is not None:
            journal.refresh()  # what changed since the last call, as of this fork
        pid = os.fork()
        if pid == 0:
            server.close()
            if journal is not None:
                from memindex.producers import journal as change_journal

                change_journal.use(journal, debug=_mode() == "debug")
            _child(conn, fds, parts[1:], cwd)  # never returns
        return True
    except OSError:
        return True
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()


def _child(conn, fds: list[int], argv: list[str], cwd: str) -> None:
    import signal

    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the caller watch ends this child with it
        conn.sendall(f"A {os.getpid()} {os.getppid()}\n".encode())
        if conn.recv(1) != b"G":
            os._exit(0)
        conn.settimeout(None)
        _end_with_caller(conn)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        try:
            # The caller's directory by its path (equal identities, equal paths): if the one this
            # process started in was removed and made again, relative paths must name the new one.
            os.chdir(cwd)

            _reopen_stdio()
            from memindex.producers.cli.main import main as cli_main

            code = cli_main(argv)
        except SystemExit as exc:  # argparse's usage errors and --help
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int) and exc.code is not None:
                print(exc.code, file=sys.stderr)
        except KeyboardInterrupt:
            code = 130
        except BaseException:  # noqa: BLE001 - what the interpreter would print in-process
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a reader that left
                pass
        try:
            conn.sendall(f"X {code}\n".encode())
        except OSError:
            pass
        os._exit(code if 0 <= code < 256 else 1)


def _end_with_caller(conn) -> None:
    """Die with the caller, as an in-process run would: the caller sends nothing after its
    go-ahead, so the connection reads end-of-file only when the caller has exited (killed,
    or timed out by a runtime) - then this child terminates instead of working on unseen."""
    import signal
    import threading

    def watch() -> None:
        try:
            conn.recv(1)
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="memindex-resident-caller", daemon=True).start()


def _reopen_stdio() -> None:
    """New stdio objects over the caller's descriptors (interactive stdout is line-buffered)."""
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        old = getattr(sys, name)
        line = fd == 2 or (fd == 1 and os.isatty(1))
        setattr(sys, name, open(fd, mode, buffering=1 if line else -1, encoding=old.encoding,
                                errors=old.errors, closefd=False))
