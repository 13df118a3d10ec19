"""The changed-file walk (issue 43): which of memindex's source files one changed file's sync enters.

Indexes a small workspace (the local MiniLM GGUF model when it is there, else keyword-only) on the
embedded broker, changes one note, and then records, with ``sys.setprofile`` on every thread, each
Python call made from the moment ``sync_and_wait`` is asked for that one file until it returns. It
prints:

- ``files``: distinct memindex source files entered (the issue's "29 files"),
- ``steps``: calls that cross from one memindex file into another (a call within a file is no step),
- ``returns``: steps into a file that the walk had already left before (the "climbs back up"),
- ``context_files``/``context_steps``: the same for calls handed the sync's context (the Context, its
  dict form, or a message holding it): the walk "following ``sync_agent``'s context" of the issue,
- ``actors``: the same three numbers inside the actors' own call trees only (from dramatiq's
  ``Actor.__call__`` into our function, broker middleware and queue plumbing left out), in total and
  per actor under its real name (the wire's ``edge`` wrapper is seen through); with ``--actors`` each
  actor's files with how often each was entered,
- ``planner``: the same three numbers for the body of the ``sync_agent`` actor (``run_sync``: read the
  settings, plan, send the work) on its own thread, for a second change of the same note: the walk
  issue 43 counted ("94 steps through 29 files"; this measure gives 29 files at the issue-filing
  tree dc7fe25); with ``--planner`` its files with how often each was entered,
- and, with ``--list``, the files with how often each was entered (all calls, context calls).

Run: ``python bench/walk.py [--list] [--actors] [--planner] [--trace] [--keyword]`` (``--trace``: the planner's steps in order). The script runs unchanged on older
trees (it only needs ``Context``, ``sync_and_wait`` and ``workers.embedded``), so a before/after uses
the same measure. Numbers vary a little with the thread timing of the
embedded workers (a commit thread may or may not tick inside the window); run it twice.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

MODEL = Path(__file__).resolve().parents[2] / "shared" / "models" / "all-MiniLM-L6-v2.F16.gguf"


def _package_root() -> str:
    import memindex

    return str(Path(memindex.__file__).resolve().parent.parent)  # the checkout (editable) or site-packages


class Walk:
    """Per thread: the memindex file of the innermost memindex frame; steps between files."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.entered: Counter[str] = Counter()
        self.steps = 0
        self.returns = 0
        self._left: set[str] = set()
        self._where = threading.local()
        self._lock = threading.Lock()
        self.ctx_entered: Counter[str] = Counter()  # the same, for calls handed the sync's context
        self.active = False  # installed before the worker threads start (they inherit it), on for the walk only
        self.thread: int | None = None  # set: count calls made on that thread only
        self.trace: list[str] = []  # each step, in order: "caller:function -> file:function"

    def _ours(self, filename: str) -> str | None:
        if not filename.startswith(self.root) or "/bench/" in filename or "/tests/" in filename:
            return None
        return os.path.relpath(filename, self.root)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self.active:
            return
        if self.thread is not None and threading.get_ident() != self.thread:
            return
        mine = self._ours(frame.f_code.co_filename)
        if mine is None:
            return
        # the memindex file this call came from: the nearest memindex frame below it
        back = frame.f_back
        caller = None
        back_name = "?"
        while back is not None and caller is None:
            caller = self._ours(back.f_code.co_filename)
            back_name = back.f_code.co_name
            back = back.f_back
        if caller == mine:
            return
        with self._lock:
            self.steps += 1
            self.trace.append(f"{caller}:{back_name} -> {mine}:{frame.f_code.co_name}")
            if mine in self._left or mine in self.entered:
                self.returns += 1
            self.entered[mine] += 1
            if _carries_context(frame):
                self.ctx_entered[mine] += 1
            if caller is not None:
                self._left.add(caller)


class ActorWalk:
    """Per thread: the actor call being run (entered from dramatiq's ``Actor.__call__``), and inside
    it, as ``Walk`` counts them, the files entered, the steps between files and the returns."""

    def __init__(self, walk: Walk) -> None:
        self.walk = walk  # (its root, its on/off switch)
        self.runs: Counter[str] = Counter()
        self.entered: dict[str, Counter[str]] = {}
        self.steps: Counter[str] = Counter()
        self.returns: Counter[str] = Counter()
        self._where = threading.local()
        self._lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.walk.active:
            return
        where = self._where
        root = getattr(where, "root", None)
        if root is not None and event == "return" and frame is root:
            where.root = None
            return
        if event != "call":
            return
        mine = self.walk._ours(frame.f_code.co_filename)
        if mine is None:
            return
        if root is None:
            back = frame.f_back
            if back is not None and back.f_code.co_name == "__call__" and \
                    back.f_code.co_filename.endswith(os.path.join("dramatiq", "actor.py")):
                where.root, where.left, where.name = frame, set(), _actor_name(frame)
                with self._lock:
                    self.runs[where.name] += 1
                    self.entered.setdefault(where.name, Counter())[mine] += 1
            return
        back = frame.f_back
        caller = None
        while back is not None and caller is None:
            caller = self.walk._ours(back.f_code.co_filename)
            back = back.f_back
        if caller == mine:
            return
        with self._lock:
            self.steps[where.name] += 1
            if mine in where.left:
                self.returns[where.name] += 1
            self.entered.setdefault(where.name, Counter())[mine] += 1
        if caller is not None:
            where.left.add(caller)

    def files(self) -> set[str]:
        return set().union(*self.entered.values()) if self.entered else set()

    def summary(self) -> dict[str, Any]:
        per = {name: {"runs": self.runs[name], "files": len(c), "steps": self.steps[name],
                      "returns": self.returns[name]} for name, c in sorted(self.entered.items())}
        return {"files": len(self.files()), "steps": sum(self.steps.values()),
                "returns": sum(self.returns.values()), "per_actor": per}


def _actor_name(frame: FrameType) -> str:
    """The actor a dramatiq call runs: the function's own name, or, through the wire's ``edge``
    wrapper (a ``Handler``'s method), the name of the function it wraps."""
    handler = frame.f_locals.get("self")
    fn = getattr(handler, "fn", None)
    return getattr(fn, "__name__", None) or frame.f_code.co_name


def _carries_context(frame: FrameType) -> bool:
    """Is the sync's context among this call's arguments: the Context itself, its dict form (a
    message's ``ctx``), or a message/record that holds it (``.ctx``)?"""
    from memindex.pipeline.config.settings import Context

    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    for name in names:
        value = frame.f_locals.get(name)
        if isinstance(value, Context) or isinstance(getattr(value, "ctx", None), (Context, dict)):
            return True
        if isinstance(value, dict) and "agent_id" in value and "state_dir" in value:
            return True
    return False


def _config(root: Path, keyword: bool) -> dict[str, Any]:
    ms: dict[str, Any] = {"provider": "local", "fallback": "none", "local": {"modelPath": str(MODEL)}}
    if keyword or not MODEL.exists():
        ms = {"enabled": True}  # no provider found: a keyword-only index
    return {"agents": {"defaults": {"workspace": str(root / "workspace"), "memorySearch": ms}}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print each file entered and how often")
    ap.add_argument("--actors", action="store_true", help="print each actor's files and how often each was entered")
    ap.add_argument("--planner", action="store_true", help="print the planner's files and how often each was entered")
    ap.add_argument("--trace", action="store_true", help="print the planner's steps in order (caller -> callee)")
    ap.add_argument("--keyword", action="store_true", help="no embedding model (keyword-only index)")
    args = ap.parse_args()
    os.environ.pop("MEMINDEX_BROKER_URL", None)
    with tempfile.TemporaryDirectory(prefix="memindex-walk-") as tmp:
        root = Path(tmp)
        (root / "workspace" / "memory").mkdir(parents=True)
        (root / "state").mkdir()
        for i in range(5):
            (root / "workspace" / "memory" / f"note{i}.md").write_text(
                f"# Note {i}\n\nThe heron waits by the river, day {i}.\n", encoding="utf-8")
        cfg = root / "openclaw.json"
        cfg.write_text(json.dumps(_config(root, args.keyword)), encoding="utf-8")

        from memindex.pipeline.config.settings import Context
        from memindex.producers.enqueue import sync_and_wait

        ctx = Context("main", str(cfg), str(root / "state"), str(root / "workspace"))
        walk = Walk(_package_root())
        actors = ActorWalk(walk)

        planner = Walk(walk.root)
        planner.thread = threading.get_ident()

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            walk(frame, event, arg)
            actors(frame, event, arg)
            planner(frame, event, arg)

        threading.setprofile(profile)  # before the embedded workers' threads start: they inherit it
        sys.setprofile(profile)
        sync_and_wait(ctx, timeout=300)  # the cold index, and every import, outside the walk
        changed = root / "workspace" / "memory" / "note2.md"
        changed.write_text("# Note 2\n\nThe heron caught a fish today.\n", encoding="utf-8")
        st = changed.stat()
        os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))

        walk.active = True
        try:
            counts = sync_and_wait(ctx, timeout=300)
        finally:
            walk.active = False
            sys.setprofile(None)
        # The planner's walk: the body of the sync_agent actor (run_sync) on the calling thread, for
        # the same one changed file; its queued work is then waited for outside the walk.
        from memindex.workers.sync import run_sync

        changed.write_text("# Note 2\n\nThe heron caught two fish today.\n", encoding="utf-8")
        os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 4_000_000_000))
        sys.setprofile(profile)
        planner.active = True
        try:
            run_sync(ctx)
        finally:
            planner.active = False
            sys.setprofile(None)
        sync_and_wait(ctx, timeout=300)
        from memindex.workers import embedded

        embedded.stop()
    print(json.dumps({"synced": counts, "files": len(walk.entered), "steps": walk.steps, "returns": walk.returns,
                      "context_files": len(walk.ctx_entered), "context_steps": sum(walk.ctx_entered.values()),
                      "actors": actors.summary(),
                      "planner": {"files": len(planner.entered), "steps": planner.steps, "returns": planner.returns}}))
    if args.planner:
        for name, n in sorted(planner.entered.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"{n:5d}  {name}")
    if args.trace:
        for i, step in enumerate(planner.trace, 1):
            print(f"{i:4d}  {step}")
    if args.list:
        for name, n in sorted(walk.entered.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"{n:5d} {walk.ctx_entered.get(name, 0):5d}  {name}")
    if args.actors:
        for actor, entered in sorted(actors.entered.items()):
            print(f"## {actor}: {len(entered)} files, {sum(entered.values())} entries")
            for name, n in sorted(entered.items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"{n:5d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
