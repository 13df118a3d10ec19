"""Export session transcripts as Markdown for qmd's sessions collection.

qmd indexes Markdown only, so each ``sessions/*.jsonl`` becomes
``<export dir>/<name>.md`` holding just the sanitized ``User:`` /
``Assistant:`` lines (no tool traffic, no metadata). Exports of transcripts
that are gone or past ``retentionDays`` are deleted so qmd forgets them too.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.sessions import discover_sessions
from memindex.pipeline.index.transcripts import read_transcript_file, sanitize_for_export
from memindex.pipeline.search.qmd.collections import sessions_export_dir

log = logging.getLogger("memindex.qmd")

_DAY_S = 86_400


@dataclass
class ExportReport:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped_old: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def _write_if_changed(path: Path, text: str) -> bool:
    data = text.encode("utf-8")
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    # Atomic replace: qmd may be indexing the directory at the same moment.
    fd, tmp = tempfile.mkstemp(prefix=".export-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return True


def export_sessions(settings: AgentSettings, *, now: float | None = None) -> ExportReport:
    """Bring the export dir in line with the agent's transcripts; safe to run repeatedly."""
    cfg = settings.memory.qmd.sessions
    out_dir = sessions_export_dir(settings)
    out_dir.mkdir(parents=True, exist_ok=True)
    now = time.time() if now is None else now
    retention = cfg.retention_days
    cutoff = None if retention is None else now - float(retention) * _DAY_S
    report = ExportReport()
    keep: set[str] = set()
    # The builtin index's own listing: top-level regular *.jsonl, nothing through a symlink (a
    # symlinked sessions directory could hold another agent's transcripts, and this export is
    # that agent's qmd collection).
    for f in discover_sessions(settings):
        jsonl = Path(f.abs_path)
        name = jsonl.stem
        if cutoff is not None and f.mtime_ns / 1e9 < cutoff:
            report.skipped_old.append(name)
            continue
        try:
            text = sanitize_for_export(read_transcript_file(jsonl), name)
        except OSError as exc:
            log.warning("session export skipped %s: %s", jsonl, exc)
            continue
        target = f"{name}.md"
        keep.add(target)
        (report.written if _write_if_changed(out_dir / target, text) else report.unchanged).append(name)
    for md in out_dir.iterdir():
        if md.suffix == ".md" and md.name not in keep and not md.is_dir():
            md.unlink(missing_ok=True)
            report.deleted.append(md.stem)
    return report
