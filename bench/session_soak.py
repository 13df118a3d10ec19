"""Soak: a session transcript growing while the delta detector and workers run.

A writer thread appends user/assistant messages (each with a unique marker
word) at ``--rate`` per second for ``--duration`` seconds. The session-delta
detector polls every ``--poll`` seconds and the embedded workers index the
deltas, while the main thread searches every ``--search-every`` seconds for
the oldest marker not yet seen. At the end one flushing check indexes what is
left below the thresholds. Prints the lag from a message being appended to
being searchable, search latency, and whether the transcript ended fully
indexed.

    python bench/session_soak.py                 # the full 60 s run
    python bench/session_soak.py --duration 10   # quick
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # after site-packages: the repo's memindex/ alone is not the package

from memindex.pipeline.config.settings import Context  # noqa: E402

FILLER = ("we talked about the deploy window, the flaky integration test, "
          "the backup rotation and which dashboards still need an owner")
TRANSCRIPT = "soak.jsonl"


@dataclass
class SoakReport:
    messages: int
    rate: float
    poll: float
    delta_bytes: int
    delta_messages: int
    provider: str
    lags: list[float] = field(default_factory=list)
    search_latencies: list[float] = field(default_factory=list)
    search_errors: list[str] = field(default_factory=list)
    confirmed: int = 0
    fully_indexed: bool = False
    jsonl_lines: int = 0
    chunks: int = 0
    detector_checks: int = 0
    enqueued: int = 0
    catchup_s: float = 0.0
    total_s: float = 0.0

    @property
    def slow_searches(self) -> int:
        return sum(1 for x in self.search_latencies if x > 0.2)

    def summary(self) -> str:
        def q(xs: list[float], p: float) -> float:
            return statistics.quantiles(xs, n=100, method="inclusive")[p - 1] if len(xs) > 1 else (xs or [0.0])[0]

        lat_ms = [x * 1000 for x in self.search_latencies]
        return "\n".join([
            f"session soak: {self.messages} messages at {self.rate:g}/s, detector every {self.poll:g} s, "
            f"deltaBytes={self.delta_bytes} deltaMessages={self.delta_messages}, embeddings {self.provider}",
            f"lag append->searchable: p50 {q(self.lags, 50):.2f} s  p95 {q(self.lags, 95):.2f} s  "
            f"max {max(self.lags, default=0):.2f} s  ({len(self.lags)} messages)",
            f"search: {len(lat_ms)} queries, latency p50 {q(lat_ms, 50):.1f} ms  p95 {q(lat_ms, 95):.1f} ms  "
            f"max {max(lat_ms, default=0):.1f} ms, {self.slow_searches} over 200 ms, "
            f"{len(self.search_errors)} errors",
            f"detector: {self.detector_checks} checks, {self.enqueued} transcripts enqueued",
            f"final: {'fully indexed' if self.fully_indexed else 'NOT fully indexed'} "
            f"({self.confirmed}/{self.messages} searchable, {self.jsonl_lines} JSONL lines, {self.chunks} chunks), "
            f"catch-up after the last append {self.catchup_s:.2f} s",
            f"total: {self.total_s:.1f} s",
        ])


def _record(i: int) -> bytes:
    role = "user" if i % 2 == 0 else "assistant"
    text = f"message soak{i:05d}: {FILLER} ({i})"
    return (json.dumps({"type": "message", "message": {"role": role, "content": [{"type": "text", "text": text}]}})
            + "\n").encode()


def _setup(root: Path, delta_bytes: int | None, delta_messages: int | None, provider: str | None) -> Context:
    sync: dict = {"sessions": {}}
    if delta_bytes is not None:
        sync["sessions"]["deltaBytes"] = delta_bytes
    if delta_messages is not None:
        sync["sessions"]["deltaMessages"] = delta_messages
    cfg = {"agents": {"defaults": {"memorySearch": {
        "sources": ["memory", "sessions"], "experimental": {"sessionMemory": True}, "sync": sync}}}}
    if provider:
        cfg["agents"]["defaults"]["memorySearch"]["provider"] = provider
    (root / "workspace" / "memory").mkdir(parents=True, exist_ok=True)
    (root / "workspace" / "MEMORY.md").write_text("# Memory\n\nThe soak test agent.\n", encoding="utf-8")
    sessions = root / "state" / "agents" / "main" / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / TRANSCRIPT).write_text(json.dumps({"type": "session", "id": "soak"}) + "\n", encoding="utf-8")
    (root / "openclaw.json").write_text(json.dumps(cfg), encoding="utf-8")
    return Context("main", str(root / "openclaw.json"), str(root / "state"), str(root / "workspace"))


def run_soak(root: Path, *, duration: float = 60.0, rate: float = 10.0, poll: float = 0.5,
             search_every: float = 0.2, delta_bytes: int | None = None,
             delta_messages: int | None = None, provider: str | None = None) -> SoakReport:
    from memindex.pipeline.config.agents import settings_for
    from memindex.pipeline.search.engine import MemorySearch
    from memindex.pipeline.index.sessions import thresholds
    from memindex.producers.session_delta import DetectorLoop, check_sessions
    from memindex.producers.enqueue import sync_and_wait
    from memindex.workers import embedded

    started = time.monotonic()
    ctx = _setup(root, delta_bytes, delta_messages, provider)
    settings = settings_for(ctx)
    path = settings.sessions_dir / TRANSCRIPT
    rel = f"sessions/{TRANSCRIPT}"
    n = int(duration * rate)
    db, dm = thresholds(settings)
    report = SoakReport(n, rate, poll, db, dm, provider or "none (keyword only)")
    sync_and_wait(ctx, timeout=60)  # the first sync indexes the (tiny) transcript in full

    appended_at: list[float] = []
    line_of: list[int] = []

    def write() -> None:
        t0 = time.monotonic()
        line = 1  # the header record
        with open(path, "ab") as fh:
            for i in range(n):
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                fh.write(_record(i))
                fh.flush()
                line += 1
                line_of.append(line)
                appended_at.append(time.monotonic())

    engine = MemorySearch(settings)
    confirmed_at: list[float] = []

    def search_round(budget: float) -> None:
        """Search for the oldest unconfirmed marker; advance while found (in append order)."""
        end = time.monotonic() + budget
        while True:
            i = len(confirmed_at)
            if i >= len(appended_at):
                marker = f"soak{min(i, n - 1):05d}"
                line = None
            else:
                marker, line = f"soak{i:05d}", line_of[i]
            t = time.perf_counter()
            try:
                res = engine.search(marker, min_score=0.0)
            except Exception as exc:  # noqa: BLE001 - counted and reported, never fatal
                report.search_errors.append(repr(exc))
                return
            finally:
                report.search_latencies.append(time.perf_counter() - t)
            hit = line is not None and any(
                r.path == rel and r.source == "sessions" and r.startLine <= line <= r.endLine for r in res.results)
            if not hit:
                return
            confirmed_at.append(time.monotonic())
            if time.monotonic() > end:
                return

    writer = threading.Thread(target=write, name="soak-writer", daemon=True)
    detector = DetectorLoop([ctx], interval=poll).start()
    writer.start()
    while writer.is_alive():
        tick = time.monotonic()
        search_round(budget=search_every / 2)
        time.sleep(max(0.0, search_every - (time.monotonic() - tick)))
    writer.join()
    last_append = appended_at[-1] if appended_at else time.monotonic()

    # Final catch-up: stop polling, index whatever is still below the thresholds.
    detector.stop()
    report.detector_checks, report.enqueued = detector.checks, detector.enqueued
    report.enqueued += check_sessions(ctx, flush=True)
    deadline = time.monotonic() + 60
    while len(confirmed_at) < n and time.monotonic() < deadline:
        embedded.wait_idle(timeout=5)
        search_round(budget=5.0)
    report.catchup_s = (confirmed_at[-1] if len(confirmed_at) == n else time.monotonic()) - last_append
    engine.close()

    report.confirmed = len(confirmed_at)
    report.lags = [c - a for c, a in zip(confirmed_at, appended_at)]
    report.jsonl_lines = len(line_of) + 1
    report.fully_indexed, report.chunks = _fully_indexed(settings, rel, path)
    report.fully_indexed = report.fully_indexed and report.confirmed == n
    report.total_s = time.monotonic() - started
    return report


def _fully_indexed(settings, rel: str, path: Path) -> tuple[bool, int]:
    """Stored delta state covers the whole file and the last JSONL line has a chunk."""
    from memindex.pipeline.index.sessions import parse_extra, state_from_extra
    from memindex.pipeline.store.reader import open_reader

    reader = open_reader(settings)
    try:
        gen = reader.state().live_generation
        row = reader.indexed_files(gen).get(("sessions", rel))
        max_line, chunks = reader.conn().execute(
            f"SELECT max(end_line), count(*) FROM chunks_g{gen} WHERE path = ?", (rel,)).fetchone()
    finally:
        reader.close()
    state = state_from_extra(rel, parse_extra(row.extra)) if row else None
    size = path.stat().st_size
    lines = path.read_bytes().count(b"\n")
    ok = state is not None and state.indexed_bytes == size and state.indexed_lines == lines and max_line == lines
    return ok, chunks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of growth (default 60)")
    ap.add_argument("--rate", type=float, default=10.0, help="messages per second (default 10)")
    ap.add_argument("--poll", type=float, default=0.5, help="detector poll interval, s (default 0.5)")
    ap.add_argument("--search-every", type=float, default=0.2, help="search interval, s (default 0.2)")
    ap.add_argument("--delta-bytes", type=int, default=None, help="override sync.sessions.deltaBytes")
    ap.add_argument("--delta-messages", type=int, default=None, help="override sync.sessions.deltaMessages")
    ap.add_argument("--provider", default=None, help="embedding provider (e.g. hash); default keyword-only")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memindex-soak-") as tmp:
        report = run_soak(Path(tmp), duration=args.duration, rate=args.rate, poll=args.poll,
                          search_every=args.search_every, delta_bytes=args.delta_bytes,
                          delta_messages=args.delta_messages, provider=args.provider)
        from memindex.workers import embedded

        embedded.stop()
    print(report.summary())
    ok = report.fully_indexed and not report.search_errors and report.slow_searches == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
