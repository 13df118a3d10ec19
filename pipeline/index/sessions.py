"""Session transcripts as index input (F9): discovery, sync decisions, writer records.

A transcript is listed like a memory file (source ``sessions``, path
``sessions/<name>.jsonl`` relative to ``<state>/agents/<id>``) and prepared
into the same writer record as Markdown, so the writer, FTS and vectors need
nothing new. What is session-specific travels in the record's ``extra``
(stored on the files row, so it survives restarts):

- ``session``: the :class:`memindex.pipeline.index.transcripts.DeltaState` of what is indexed
  (indexed bytes/lines, head digest, inode), which the delta detector and
  ``plan_sync`` read back to decide between nothing / append / rebuild;
- ``skipped``: per-reason counts of dropped JSONL lines (malformed ones show up
  as the file's problem in ``memindex status``);
- ``text``: the ``session_text.TEXT_VERSION`` its text was cleaned under: a row of another
  version is indexed again whole (a row without one predates redaction and holds keys verbatim).

A *delta* prepares only the turns after the indexed byte offset. Its record
names the files-row ``hash`` it extends (``base_hash``); the writer appends it
only on top of exactly that state, so a duplicated or outdated delta is dropped
instead of indexing turns twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any, Union

from memindex.pipeline.index.chunking import chunk_markdown
from memindex.pipeline.config.settings import AgentSettings
# embed_into_record: the exact Markdown record shape, so the writer needs nothing new.
from memindex.pipeline.index.prepare import ChunkEmbedder, Prepared, build_record, embed_into_record
from memindex.pipeline.index.records import FileJob, FileRecord, SessionDelta
from memindex.pipeline.index.session_text import TEXT_VERSION
from memindex.pipeline.index.transcripts import (
    HEAD_BYTES,
    DeltaState,
    Transcript,
    delta_decision,
    head_fingerprint,
    indexed_state,
    probe_file,
    read_transcript,
    remap_lines,
    transcript_lines,
)
from memindex.pipeline.store.reader import IndexedFile
from memindex.pipeline.index.workspace import ListingFacts, MemoryFile, display_path, name_problem

log = logging.getLogger("memindex.sessions")

SOURCE = "sessions"
KIND = "session"
# One read never loads more than this; a bigger transcript is indexed in consecutive deltas: a
# record read up to the cap says it ``continues``, and the writer asks for the next sync at once.
MAX_READ_BYTES = 32 * 1024 * 1024

Step = Union[str, SessionDelta]  # "unchanged" | "pending" | "full" | a delta to append


# --- discovery -------------------------------------------------------------------

def symlink_on_the_way(settings: AgentSettings) -> Path | None:
    """The symlink between ``<state>/agents`` and this agent's transcripts, if any: ``agents/<id>``
    or ``agents/<id>/sessions``. Either could point at another agent's directory (``agents/ops ->
    main`` served main's transcripts as ops'), so the transcripts behind it are never read.
    ``agents`` itself may be a link: each agent still reads its own directory below it."""
    d = settings.sessions_dir
    return next((p for p in (d.parent, d) if p.is_symlink()), None)


def discover_sessions(settings: AgentSettings, facts: ListingFacts | None = None) -> list[MemoryFile]:
    """``<sessions_dir>/*.jsonl``: top level, regular files only, no symlinks.

    Nothing is listed through a symlinked agent or sessions directory (``symlink_on_the_way``):
    it could point at another agent's transcripts and break per-agent isolation.
    """
    d = settings.sessions_dir
    link = symlink_on_the_way(settings)
    if link is not None:
        if facts is not None:
            facts.symlinks.append(str(link))
        return []
    if not d.is_dir():
        return []
    out: list[MemoryFile] = []
    try:
        entries = sorted(os.scandir(d), key=lambda e: e.name)
    except OSError:
        return []
    for e in entries:
        if not e.name.endswith(".jsonl"):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if facts is not None and not stat.S_ISREG(st.st_mode):  # said by status, as under memory/
            (facts.symlinks if stat.S_ISLNK(st.st_mode) else facts.specials if not stat.S_ISDIR(st.st_mode)
             else []).append(e.path)
        if stat.S_ISREG(st.st_mode):
            # The stored and shown path: a name that is not valid UTF-8 has its bytes escaped
            # (display_path), as for Markdown files; the job then fails on name_problem with a
            # problem row. With the raw name, even that row could not be stored: retried forever.
            out.append(MemoryFile(f"{SOURCE}/{display_path(e.name)}", e.path, SOURCE, st.st_size,
                                  st.st_mtime_ns, KIND))
    return out


# --- stored state ------------------------------------------------------------------

_STATE_FIELDS = {f.name for f in fields(DeltaState)}


def state_from_extra(path: str, extra: dict[str, Any] | None) -> DeltaState | None:
    """The indexed DeltaState stored in a files row's ``extra`` (None if absent/garbled)."""
    raw = (extra or {}).get("session")
    if not isinstance(raw, dict):
        return None
    try:
        return DeltaState(path=path, **{k: v for k, v in raw.items() if k in _STATE_FIELDS and k != "path"})
    except TypeError:
        return None


def parse_extra(raw: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _skipped(t: Transcript, base: dict[str, int] | None = None) -> dict[str, int]:
    # A truncated last line is not counted: it is re-read once it is complete.
    base = base or {}
    out = {
        "blank": base.get("blank", 0) + t.skipped_blank,
        "invalid_json": base.get("invalid_json", 0) + t.skipped_invalid_json,
        "other": base.get("other", 0) + t.skipped_other,
    }
    too_long = base.get("too_long", 0) + t.skipped_too_long
    return {**out, "too_long": too_long} if too_long else out


def problem_of(extra: dict[str, Any]) -> str | None:
    """The status line for a transcript with malformed lines (None when clean)."""
    skipped = extra.get("skipped") or {}
    bad, long = skipped.get("invalid_json", 0), skipped.get("too_long", 0)
    said = ([f"{bad} malformed JSONL line(s) skipped (invalid JSON)"] if bad else []) + (
        [f"{long} line(s) over {_read_cap()} skipped (not indexed)"] if long else [])
    return "; ".join(said) or None


def _read_cap() -> str:
    mib = MAX_READ_BYTES / (1024 * 1024)
    return f"{mib:g} MiB" if mib >= 1 else f"{MAX_READ_BYTES} bytes"


def _skip_long_line(fh: Any, data: bytes, start: int, start_line: int, path: str) -> tuple[Transcript, bytes] | None:
    """``data``, read from ``start``, is a whole read with no line end: the line is longer than any
    read (a tool result carrying a base64 image). Skipped whole, so the lines after it are indexed -
    read after read stopped inside it, and nothing after it was ever indexed while `index` said done.
    Returns (a transcript of that one skipped line, its last HEAD_BYTES bytes); None for any other
    read, and while the line has no end yet (still being written: the next read looks again)."""
    if len(data) < MAX_READ_BYTES or b"\n" in data:
        return None
    fh.seek(start + MAX_READ_BYTES)
    pos = start + MAX_READ_BYTES
    while True:
        block = fh.read(1 << 20)
        if not block:
            return None
        nl = block.find(b"\n")
        if nl >= 0:
            end = pos + nl + 1
            break
        pos += len(block)
    fh.seek(max(start, end - HEAD_BYTES))
    tail = fh.read(end - max(start, end - HEAD_BYTES))
    t = Transcript(lines_total=1, bytes_total=end - start, skipped_too_long=1, consumed_bytes=end - start,
                   next_start_line=start_line + 1)
    log.warning("%s: line %d is longer than %s; skipped (not indexed)", path, start_line, _read_cap())
    return t, tail


# --- what a sync or the detector should do with one transcript ---------------------

def thresholds(settings: AgentSettings) -> tuple[int, int]:
    s = settings.memory_search.sync.sessions
    return int(s.delta_bytes), int(s.delta_messages)


def next_step(settings: AgentSettings, f: MemoryFile, prev: IndexedFile | None, *, flush: bool = False) -> Step:
    """Shared by ``plan_sync`` and the delta detector so they never disagree.

    Never indexed -> "full". Same size and mtime -> "unchanged" (no I/O).
    Grown below both thresholds -> "pending": small appends accumulate until
    a threshold is reached (nothing to do yet, but `index` says why it was not indexed). Grown past one -> a :class:`SessionDelta`.
    Truncated, replaced or rewritten -> "full". ``flush`` treats any growth as
    past the threshold (a final catch-up).
    """
    if prev is None:
        return "full"
    extra = parse_extra(prev.extra)
    if stale_text(extra):
        log.info("%s: indexed under older transcript text rules; reindexing it whole", f.path)
        return "full"
    if prev.size == f.size and prev.mtime_ns == f.mtime_ns:
        return "unchanged"
    state = state_from_extra(f.path, extra)
    if state is None:
        return "full"
    # A transcript whose last read stopped at MAX_READ_BYTES is unfinished, not grown: its
    # rest is read whatever its size (else a tail under the thresholds waited for more growth).
    delta_bytes, delta_messages = (0, 0) if flush or (extra or {}).get("continues") else thresholds(settings)
    try:
        # Lines are only needed when bytes alone may stay under their threshold.
        grown = f.size - state.indexed_bytes
        count = delta_messages > 0 and not (delta_bytes > 0 and grown >= delta_bytes)
        probe = probe_file(Path(f.abs_path), state, count_lines=count)
    except OSError:
        return "full"  # gone or unreadable: preparing it reports that properly
    d = delta_decision(state, probe.size, probe.new_lines, inode=probe.inode, head_digest=probe.head_digest,
                       tail_digest=probe.tail_digest, mtime_ns=probe.mtime_ns,
                       delta_bytes=delta_bytes, delta_messages=delta_messages)
    if d.action == "rebuild":
        log.info("%s: %s; reindexing from scratch", f.path, d.reason)
        return "full"
    if d.action == "none":
        return "pending" if d.reason == "below-threshold" else "unchanged"
    return SessionDelta(f.source, f.path, str(f.abs_path), d.start_byte, d.start_line, prev.hash, extra or {})


def stale_text(extra: dict[str, Any] | None) -> bool:
    """Was this row's text cleaned under other rules than ``session_text`` applies now? Then its
    chunks may hold what is no longer indexed (a key pasted into a chat, verbatim), and the file
    is indexed again whole; its bytes are unchanged, so size and mtime alone never said so. A row
    with no transcript state (a problem row: nothing read) holds no text."""
    return extra is not None and "session" in extra and extra.get("text") != TEXT_VERSION


# --- preparing records ----------------------------------------------------------------

def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def prepare_session(settings: AgentSettings, job: FileJob, embedder: ChunkEmbedder | None = None) -> Prepared:
    """Read a whole transcript (up to MAX_READ_BYTES) into a replace-all record."""
    path = Path(job.abs_path)
    if not _regular(path):
        return Prepared(None, vanished=True)
    bad_name = name_problem(job.abs_path)
    if bad_name:  # skipped with a problem row, as a Markdown file (not retried by every sync)
        log.warning("%s: %s", job.path, bad_name)
        st = os.lstat(path)
        return Prepared(build_record(replace(job, kind=KIND), st, f"size:{st.st_size}:{st.st_mtime_ns}", [], None,
                                     bad_name))
    long: tuple[Transcript, bytes] | None = None
    try:
        with open(path, "rb") as fh:
            ino = os.fstat(fh.fileno()).st_ino
            data = fh.read(MAX_READ_BYTES)
            long = _skip_long_line(fh, data, 0, 1, job.path)
            after = os.fstat(fh.fileno())
            mtime_ns = after.st_mtime_ns  # after the read: no append goes unseen
    except FileNotFoundError:
        return Prepared(None, vanished=True)
    except OSError as exc:
        log.warning("cannot read %s: %s", job.path, exc)
        return Prepared(None)  # left as is; the next sync or check retries
    if long is not None:
        t, tail = long
        digest = hashlib.sha256(data + tail + str(t.consumed_bytes).encode()).hexdigest()
    else:
        t = read_transcript(data)
        end = t.consumed_bytes
        tail = data[max(0, end - HEAD_BYTES):end]
        digest = hashlib.sha256(data[: t.consumed_bytes]).hexdigest()
    state = indexed_state(job.path, t, head=data[:HEAD_BYTES], tail=tail, inode=ino, mtime_ns=mtime_ns)
    extra = {"session": _state_dict(state), "turns": len(t.turns), "skipped": _skipped(t), "text": TEXT_VERSION}
    rec = _session_record(settings, job, t, state, digest, extra, embedder)
    rec.continues = _continues(data, t, after.st_size, 0, skipped_line=long is not None)
    if rec.continues:
        extra["continues"] = True  # (the files row: the next plan reads the rest at once)
    return Prepared(rec)


def _continues(data: bytes, t: Transcript, size: int, start: int, *, skipped_line: bool = False) -> bool:
    """Was the read cut at MAX_READ_BYTES with whole lines read (so the next delta moves on)?
    A skipped over-long line continues whenever anything follows it."""
    if skipped_line:
        return size > start + t.consumed_bytes
    return len(data) >= MAX_READ_BYTES and t.consumed_bytes > 0 and size > start + t.consumed_bytes


def prepare_session_delta(settings: AgentSettings, delta: SessionDelta,
                          embedder: ChunkEmbedder | None = None) -> Prepared:
    """Chunk only the turns after ``delta.start_byte`` into an append record.

    Falls back to a full record when the file no longer extends what was
    indexed (replaced, truncated or rewritten since the delta was planned).
    """
    path = Path(delta.abs_path)
    job = FileJob(delta.source, delta.path, delta.abs_path, 0, 0, KIND)
    prev = state_from_extra(delta.path, delta.prev)
    if not _regular(path):
        return Prepared(None, vanished=True)
    if prev is None or prev.indexed_bytes != delta.start_byte or stale_text(delta.prev):
        return prepare_session(settings, job, embedder)
    data: bytes | None = None
    long: tuple[Transcript, bytes] | None = None
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            head = fh.read(HEAD_BYTES)
            fh.seek(max(0, delta.start_byte - HEAD_BYTES))
            before = fh.read(min(HEAD_BYTES, delta.start_byte))  # the bytes that end the indexed prefix
            if _extends(prev, st, head, before):
                data = fh.read(MAX_READ_BYTES)
                long = _skip_long_line(fh, data, delta.start_byte, delta.start_line, delta.path)
                after = os.fstat(fh.fileno())
                mtime_ns = after.st_mtime_ns
    except FileNotFoundError:
        return Prepared(None, vanished=True)
    except OSError as exc:
        log.warning("cannot read %s: %s", delta.path, exc)
        return Prepared(None)
    if data is None:
        return prepare_session(settings, job, embedder)
    if long is not None:
        t, tail = long
        new_digest = hashlib.sha256(tail + str(t.consumed_bytes).encode()).hexdigest()
    else:
        t = read_transcript(data, start_line=delta.start_line)
        if t.consumed_bytes == 0:
            return Prepared(None)  # only a partial last line so far: nothing to add
        tail = (before + data[: t.consumed_bytes])[-HEAD_BYTES:]
        new_digest = hashlib.sha256(data[: t.consumed_bytes]).hexdigest()
    state = indexed_state(delta.path, t, head=head, tail=tail, start_byte=delta.start_byte, inode=st.st_ino,
                          mtime_ns=mtime_ns)
    # A state token, not a content hash: chains the indexed prefix's digest with the new bytes.
    digest = hashlib.sha256((delta.base_hash + new_digest).encode()).hexdigest()
    extra = {"session": _state_dict(state), "turns": (delta.prev.get("turns") or 0) + len(t.turns),
             "skipped": _skipped(t, delta.prev.get("skipped")), "text": TEXT_VERSION}
    rec = _session_record(settings, job, t, state, digest, extra, embedder)
    rec.base_hash = delta.base_hash
    rec.continues = _continues(data, t, after.st_size, delta.start_byte, skipped_line=long is not None)
    if rec.continues:
        extra["continues"] = True
    return Prepared(rec)


def _extends(prev: DeltaState, st: os.stat_result, head: bytes, before: bytes = b"") -> bool:
    """Is the open file still the one indexed, only grown? ``before``: the bytes that end the
    indexed prefix (a rewrite in place that kept the head changed or shifted them)."""
    if prev.inode is not None and st.st_ino != prev.inode:
        return False
    if st.st_size < prev.indexed_bytes or len(head) < prev.head_len:
        return False
    if prev.tail_len and (len(before) < prev.tail_len
                          or head_fingerprint(before[-prev.tail_len:]) != prev.tail_digest):
        return False
    return prev.head_len == 0 or head_fingerprint(head[: prev.head_len]) == prev.head_digest


def _state_dict(state: DeltaState) -> dict[str, Any]:
    d = asdict(state)
    d.pop("path")
    return d


def _session_record(settings: AgentSettings, job: FileJob, t: Transcript, state: DeltaState, digest: str,
                    extra: dict[str, Any], embedder: ChunkEmbedder | None) -> FileRecord:
    lines, line_map = transcript_lines(t)
    chunks = []
    if lines:
        for c in chunk_markdown("\n".join(lines), settings.chunk_tokens, settings.chunk_overlap):
            start, end = remap_lines(c.start_line, c.end_line, line_map)
            chunks.append(replace(c, start_line=start, end_line=end))
    sized = replace(job, size=state.size, mtime_ns=state.mtime_ns or job.mtime_ns, kind=KIND)
    problem = problem_of(extra)
    rec = embed_into_record(sized, None, digest, chunks, embedder, problem)
    rec.extra = extra
    return rec


# --- the writer's stale check -----------------------------------------------------------

def is_current_session(record: FileRecord) -> bool:
    """Does the file on disk still start with what the record indexed?

    Unlike Markdown, growth after the read is fine (the record covers a prefix
    and the rest is a later delta); a replaced, truncated or rewritten file is not.
    """
    state = state_from_extra(record.path, record.extra)
    path = Path(record.abs_path)
    if state is None and record.error and not record.chunks:
        # A problem row with nothing read (a name that is not valid UTF-8): current while the
        # file is the one it describes (else it was dropped as stale and re-planned forever).
        try:
            st = os.lstat(path)
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and (st.st_size, st.st_mtime_ns) == (record.size, record.mtime_ns)
    if state is None or not _regular(path):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(state.head_len)
            before = b""
            if state.tail_len:
                fh.seek(max(0, state.indexed_bytes - state.tail_len))
                before = fh.read(state.tail_len)
            return _extends(state, os.fstat(fh.fileno()), head, before)
    except OSError:
        return False
