"""Session transcript reader and delta tracking (F9).

OpenClaw appends one JSON record per line to
``<state>/agents/<agentId>/sessions/*.jsonl``. Only user/assistant *text* is
memory-worthy; everything else (tool traffic, system turns, metadata records)
is counted and dropped. Each kept message's text is cleaned as OpenClaw cleans it
(``session_text``: inbound metadata, directive tags and secrets removed) and flattens to one line
(``User: …`` / ``Assistant: …``) so a line-based chunker can work on it, and a
line map points every flattened line back at its JSONL line for citations.

Delta tracking decides, without I/O, whether a transcript that grew should be
left alone, have only its new tail indexed, or be rebuilt from scratch.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeGuard

from memindex.pipeline.config.settings import DEFAULT_DELTA_BYTES, DEFAULT_DELTA_MESSAGES
from memindex.pipeline.index.session_text import message_text

Role = Literal["user", "assistant"]
DeltaAction = Literal["none", "append", "rebuild"]

# Enough to tell "same transcript, appended" from "replaced/rewritten" cheaply.
HEAD_BYTES = 4096
_READ_CHUNK = 64 * 1024

_ROLE_LABEL: dict[Role, str] = {"user": "User", "assistant": "Assistant"}


def _is_role(value: object) -> TypeGuard[Role]:
    return isinstance(value, str) and value in _ROLE_LABEL  # (a list or object: not hashable)


# --- parsing ------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    role: Role
    text: str
    jsonl_line: int  # 1-based line in the JSONL file


@dataclass
class Transcript:
    turns: list[Turn] = field(default_factory=list)
    lines_total: int = 0
    bytes_total: int = 0
    skipped_blank: int = 0
    skipped_invalid_json: int = 0
    skipped_truncated_last_line: int = 0
    skipped_other: int = 0
    skipped_too_long: int = 0  # lines longer than one read (sessions.MAX_READ_BYTES): never parsed
    # Offset (relative to the data passed in) just past the last complete
    # record; a delta reader resumes here.
    consumed_bytes: int = 0
    # ``start_line`` to pass when resuming at ``consumed_bytes``.
    next_start_line: int = 1


def _message_of(record: dict[str, Any]) -> dict[str, Any] | None:
    # Only OpenClaw's message records, as its buildSessionEntry keeps them: a line without
    # "type": "message" (a bare {"role", "content"}) is no turn of the session, whatever it holds.
    msg = record.get("message")
    if record.get("type") == "message" and isinstance(msg, dict):
        return msg
    return None


def _turn_from_record(record: Any, line_no: int) -> Turn | None:
    if not isinstance(record, dict):
        return None
    msg = _message_of(record)
    if msg is None:
        return None
    role = msg.get("role")
    if not _is_role(role):
        return None
    text = message_text(msg.get("content"))
    if not text:  # e.g. an assistant turn made only of tool calls
        return None
    return Turn(role=role, text=text, jsonl_line=line_no)


def read_transcript(data: bytes, start_line: int = 1) -> Transcript:
    """Parse JSONL bytes; ``start_line`` is the file line number of ``data``'s first line.

    To resume after a previous read of the same file, pass the bytes from
    that read's ``consumed_bytes`` on and its ``next_start_line``, so turns
    keep absolute JSONL line numbers.
    """
    t = Transcript(bytes_total=len(data))
    segments = data.split(b"\n")
    # A trailing newline leaves an empty last segment that is not a line.
    tail = segments.pop()
    has_tail = tail != b""
    t.lines_total = len(segments) + (1 if has_tail else 0)

    for i, raw in enumerate(segments):
        _classify(t, raw, start_line + i)
    t.consumed_bytes = len(data) - len(tail)

    if has_tail:
        record = _parse(tail)
        if isinstance(record, dict):
            # A whole record that merely lacks its newline is complete.
            _classify(t, tail, start_line + len(segments), record)
            t.consumed_bytes = len(data)
        elif not tail.strip():
            t.skipped_blank += 1
        else:
            # Probably a record still being written: leave it for the next read.
            t.skipped_truncated_last_line += 1

    t.next_start_line = start_line + data.count(b"\n", 0, t.consumed_bytes)
    return t


_INVALID = object()  # json did not parse
_UNPARSED = object()  # not parsed yet


def _parse(raw: bytes) -> Any:
    try:
        # A stray BOM (editor-saved file) would otherwise fail the first line.
        return json.loads(raw.decode("utf-8", errors="replace").lstrip("\ufeff"))
    except ValueError:
        return _INVALID


def _classify(t: Transcript, raw: bytes, line_no: int, record: Any = _UNPARSED) -> None:
    if not raw.strip():
        t.skipped_blank += 1
        return
    if record is _UNPARSED:
        record = _parse(raw)
    if record is _INVALID:
        t.skipped_invalid_json += 1
        return
    turn = _turn_from_record(record, line_no)
    if turn is None:
        t.skipped_other += 1
    else:
        t.turns.append(turn)


def read_transcript_file(path: Path, start_byte: int = 0, start_line: int = 1) -> Transcript:
    """Read a transcript file (or its tail from ``start_byte``)."""
    with open(path, "rb") as fh:
        fh.seek(start_byte)
        return read_transcript(fh.read(), start_line=start_line)


# --- flattening ---------------------------------------------------------------


def transcript_lines(t: Transcript) -> tuple[list[str], list[int]]:
    """Flattened ``User: …``/``Assistant: …`` lines and their JSONL line numbers."""
    lines = [f"{_ROLE_LABEL[turn.role]}: {turn.text}" for turn in t.turns]
    return lines, [turn.jsonl_line for turn in t.turns]


def remap_lines(start: int, end: int, line_map: list[int]) -> tuple[int, int]:
    """Map a chunk's 1-based content line range onto JSONL line numbers."""
    if not (1 <= start <= end <= len(line_map)):
        raise ValueError(f"content lines {start}..{end} outside 1..{len(line_map)}")
    return line_map[start - 1], line_map[end - 1]


def sanitize_for_export(t: Transcript, name: str = "") -> str:
    """Markdown for a QMD sessions export: a heading, then one line per turn."""
    lines, _ = transcript_lines(t)
    heading = f"# Session {name}".rstrip()
    body = "\n".join(lines) if lines else "(empty)"
    return f"{heading}\n\n{body}\n"


# --- delta tracking -----------------------------------------------------------


@dataclass(frozen=True)
class DeltaState:
    """What we last saw of a transcript and how much of it is indexed.

    ``indexed_lines`` counts newlines in the indexed prefix, so the next read
    resumes at ``indexed_bytes`` with ``start_line = indexed_lines + 1``.
    """

    path: str
    size: int  # size at last observation
    lines: int  # newline count at last observation
    indexed_bytes: int
    indexed_lines: int
    inode: int | None = None
    mtime_ns: int | None = None
    head_len: int = 0
    head_digest: str = ""
    # The last bytes of the indexed prefix (up to HEAD_BYTES before ``indexed_bytes``): a rewrite in
    # place (same inode, same head) that changed or shifted them is a rewrite, not growth.
    tail_len: int = 0
    tail_digest: str = ""

    def observed(self, size: int, lines: int, mtime_ns: int | None = None) -> "DeltaState":
        """Record a new observation without changing what is indexed."""
        return replace(self, size=size, lines=lines, mtime_ns=self.mtime_ns if mtime_ns is None else mtime_ns)


@dataclass(frozen=True)
class Decision:
    action: DeltaAction
    reason: str
    start_byte: int = 0
    start_line: int = 1
    pending_bytes: int = 0
    pending_lines: int | None = None


def head_fingerprint(head: bytes) -> str:
    """Digest of a file's first bytes; appends never change it, rewrites do."""
    return hashlib.sha256(head).hexdigest()


def count_new_lines(data: bytes, start: int = 0) -> int:
    """Newlines after ``start``: the number of complete JSONL lines appended."""
    return data.count(b"\n", start)


def _hit(pending: int, threshold: int) -> bool:
    # Threshold semantics: reaching it counts (>=); 0 means any growth.
    return pending > 0 if threshold <= 0 else pending >= threshold


def delta_decision(
    prev: DeltaState | None,
    size: int,
    new_lines: int | None = None,
    *,
    inode: int | None = None,
    head_digest: str | None = None,
    tail_digest: str | None = None,
    mtime_ns: int | None = None,
    delta_bytes: int = DEFAULT_DELTA_BYTES,
    delta_messages: int = DEFAULT_DELTA_MESSAGES,
) -> Decision:
    """Decide what to do with a transcript now ``size`` bytes long.

    ``new_lines`` is the newline count in ``[prev.indexed_bytes, size)``
    (``None`` when not counted, e.g. the byte threshold already decided).
    ``head_digest`` is ``head_fingerprint`` of the file's first
    ``prev.head_len`` bytes, ``tail_digest`` of the ``prev.tail_len`` bytes before
    ``prev.indexed_bytes``; a mismatch means the file was rewritten. So is a new ``mtime_ns`` at
    the same size: a transcript only grows (a secret masked in place kept its old text indexed).
    Growth is measured since the last *index*, not the last observation, so
    small appends accumulate until a threshold is reached.
    """
    if prev is None:
        if size <= 0:
            return Decision("none", "empty")
        return Decision("rebuild", "untracked", pending_bytes=size, pending_lines=new_lines)
    if prev.inode is not None and inode is not None and inode != prev.inode:
        return Decision("rebuild", "replaced", pending_bytes=size)
    if size < prev.indexed_bytes or size < prev.size:
        return Decision("rebuild", "shrank", pending_bytes=size)
    if head_digest is not None and prev.head_len > 0 and head_digest != prev.head_digest:
        return Decision("rebuild", "rewritten", pending_bytes=size)
    if tail_digest is not None and prev.tail_len > 0 and tail_digest != prev.tail_digest:
        return Decision("rebuild", "rewritten", pending_bytes=size)
    if (size == prev.size and mtime_ns is not None and prev.mtime_ns is not None
            and mtime_ns != prev.mtime_ns):
        return Decision("rebuild", "rewritten in place", pending_bytes=size)

    pending = size - prev.indexed_bytes
    common = dict(start_byte=prev.indexed_bytes, start_line=prev.indexed_lines + 1, pending_bytes=pending)
    if pending <= 0:
        return Decision("none", "unchanged", pending_lines=0, **common)
    if _hit(pending, delta_bytes):
        return Decision("append", "bytes", pending_lines=new_lines, **common)
    if delta_messages <= 0:
        return Decision("append", "messages", pending_lines=new_lines, **common)
    if new_lines is not None and _hit(new_lines, delta_messages):
        return Decision("append", "messages", pending_lines=new_lines, **common)
    return Decision("none", "below-threshold", pending_lines=new_lines, **common)


# --- I/O helpers for producers ------------------------------------------------


@dataclass(frozen=True)
class FileProbe:
    size: int
    inode: int
    mtime_ns: int
    head_digest: str | None
    new_lines: int | None
    tail_digest: str | None = None


def _count_newlines_in_file(fh: Any, start: int, end: int) -> int:
    fh.seek(start)
    remaining, total = end - start, 0
    while remaining > 0:
        buf = fh.read(min(_READ_CHUNK, remaining))
        if not buf:
            break
        total += buf.count(b"\n")
        remaining -= len(buf)
    return total


def probe_file(path: Path, prev: DeltaState | None, *, count_lines: bool = True) -> FileProbe:
    """Stat a transcript and gather what ``delta_decision`` needs (chunked reads)."""
    st = os.stat(path)
    size = st.st_size
    head_digest: str | None = None
    new_lines: int | None = None
    tail_digest: str | None = None
    with open(path, "rb") as fh:
        if prev is not None and 0 < prev.head_len <= size:
            head_digest = head_fingerprint(fh.read(prev.head_len))
        if prev is not None and 0 < prev.tail_len <= prev.indexed_bytes <= size:
            fh.seek(prev.indexed_bytes - prev.tail_len)
            tail_digest = head_fingerprint(fh.read(prev.tail_len))
        start = prev.indexed_bytes if prev is not None and prev.indexed_bytes <= size else 0
        if count_lines:
            new_lines = _count_newlines_in_file(fh, start, size)
    return FileProbe(size, st.st_ino, st.st_mtime_ns, head_digest, new_lines, tail_digest)


def indexed_state(
    path: str | Path,
    t: Transcript,
    *,
    head: bytes,
    tail: bytes = b"",
    start_byte: int = 0,
    inode: int | None = None,
    mtime_ns: int | None = None,
) -> DeltaState:
    """DeltaState once ``t`` (read from file offset ``start_byte``) is indexed.

    ``head`` is the file's first bytes (at least ``HEAD_BYTES`` when the file
    is that long); it fingerprints the file so a replacement is noticed. ``tail``: the bytes that
    end the indexed prefix (its last ``HEAD_BYTES`` at most), for a rewrite in place.
    """
    size = start_byte + t.bytes_total
    head = head[: min(HEAD_BYTES, size)]
    indexed_lines = t.next_start_line - 1  # the unconsumed tail has no newline
    return DeltaState(
        path=str(path),
        size=size,
        lines=indexed_lines,
        indexed_bytes=start_byte + t.consumed_bytes,
        indexed_lines=indexed_lines,
        inode=inode,
        mtime_ns=mtime_ns,
        head_len=len(head),
        head_digest=head_fingerprint(head) if head else "",
        tail_len=len(tail),
        tail_digest=head_fingerprint(tail) if tail else "",
    )
