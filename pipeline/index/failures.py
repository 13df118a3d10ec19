"""Failed indexing work, recorded next to the agent's store so every process sees it.

A worker whose message fails for good (a rejected key, a 404, retries used up)
records why here; ``memindex index`` summarises the failures of its run and
``memindex status`` shows the last error and the files still pending because
of it. The record is a small JSON file beside the store (the store itself has
one writer, and a failure may be exactly that the writer never got the work),
updated under an exclusive file lock by any number of worker processes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, ContextManager, Iterable

from memindex.pipeline.store.locks import file_lock

# A log record with this attribute set reports a failure that is also recorded here: a command
# that prints its run's failures from the record at the end (`index`, its workers in-process on
# the embedded broker) hides such lines unless -v, so the reason is said once, not three times.
SUMMARISED = "memindex_summarised"

# Per-file entries kept: enough to list what is stuck, bounded for a huge workspace.
# Appended to the reason of files skipped for their content (not retried until they change),
# so that `index` does not promise that the next sync retries them.
SKIPPED_NOTE = " (skipped until the file changes)"
MAX_FILES = 1000
MAX_REASONS = 20


def _path(store_path: Path | str) -> Path:
    return Path(f"{store_path}.failures.json")


def _locked(store_path: Path | str) -> ContextManager[None]:
    return file_lock(f"{store_path}.failures.lock")


# Records this process could not write (a full disk: the very failure may be that nothing can be
# written beside the store), kept here so that a run in this process (`memindex index` on the
# embedded broker) still reports them instead of ending as if all went well.
_unwritten: dict[str, dict[str, Any]] = {}


def read_failures(store_path: Path | str) -> dict[str, Any]:
    """{"lastError": {...} | None, "reasons": {reason: {"at", "hint"}}, "files": {path: {"reason", "at"}}}."""
    try:
        data = json.loads(_path(store_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    out = {"lastError": data.get("lastError"), "reasons": data.get("reasons") or {},
           "files": data.get("files") or {}}
    held = _unwritten.get(str(store_path))
    if held is not None:  # newer than anything on disk: they were recorded after it, or instead of it
        out["lastError"] = held["lastError"]
        out["reasons"] = {**out["reasons"], **held["reasons"]}
        out["files"] = {**out["files"], **held["files"]}
    return out


def record_failure(store_path: Path | str, *, reason: str, provider: str | None, hint: str,
                   paths: Iterable[str]) -> None:
    """Add one failure (of a message covering ``paths``) to the agent's record."""
    now = int(time.time() * 1000)
    paths = list(paths)
    with _locked(store_path):
        data = read_failures(store_path)
        last = data["lastError"] or {}
        same = last.get("reason") == reason
        data["lastError"] = {"at": now, "reason": reason, "provider": provider, "hint": hint,
                             "count": (int(last.get("count") or 0) if same else 0) + max(1, len(paths))}
        data["reasons"].pop(reason, None)
        data["reasons"][reason] = {"at": now, "hint": hint}
        for r in list(data["reasons"])[: max(0, len(data["reasons"]) - MAX_REASONS)]:
            del data["reasons"][r]
        files = data["files"]
        for p in paths:
            files.pop(p, None)  # re-inserted last: the oldest entries go first below
            files[p] = {"reason": reason, "at": now, "hint": hint}
        for p in list(files)[: max(0, len(files) - MAX_FILES)]:
            del files[p]
        # The files failing for this reason now (a retried file counts once, not once per attempt).
        data["lastError"]["count"] = max(1, sum(1 for f in files.values() if f["reason"] == reason))
        tmp = _path(store_path).with_suffix(f".tmp{os.getpid()}")
        try:
            tmp.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp, _path(store_path))
        except OSError:
            _unwritten[str(store_path)] = data
            tmp.unlink(missing_ok=True)
            raise  # the caller logs that the record is only in this process
        _unwritten.pop(str(store_path), None)


def failures_since(store_path: Path | str, since_ms: int) -> dict[str, dict[str, Any]]:
    """What failed at or after ``since_ms``, by reason: {"count" (files, or 1 for work
    that names none, such as a sync), "hint", "paths"}."""
    data = read_failures(store_path)
    groups: dict[str, dict[str, Any]] = {r: {"count": 0, "hint": v.get("hint") or "", "paths": []}
              for r, v in data["reasons"].items() if int(v.get("at") or 0) >= since_ms}
    for path, f in data["files"].items():
        if int(f.get("at") or 0) >= since_ms and f["reason"] in groups:
            groups[f["reason"]]["count"] += 1
            groups[f["reason"]]["paths"].append(path)
    for g in groups.values():
        g["count"] = max(1, g["count"])
    return groups
