"""Writer logs (issue 15): one DEBUG line per transaction naming the agent, files, chunks,
time and a file; an INFO summary per agent and period. Real parts: ``memindex index`` on
the embedded broker (its writer thread), JSON log lines parsed from stderr.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
from typing import Iterator

from tests.conftest import Agent, run_cli


def test_writer_logs_each_transaction_at_debug_and_a_summary_at_info(tmp_path):
    a = Agent(tmp_path / "a", agent_id="main")
    for i in range(3):
        a.write(f"memory/2026-03-0{i + 1}.md", f"# Day {i}\nThe sloe gin batch {i} was bottled.\n")
    env = {"OPENCLAW_STATE_DIR": str(a.state), "OPENCLAW_CONFIG_PATH": str(a.config_path),
           "MEMINDEX_WRITE_SUMMARY_S": "0"}  # a summary after every transaction, for the test
    out = run_cli("--workspace", str(a.workspace), "--log-level", "debug", "--log-format", "json", "index",
                  env=env)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(ln) for ln in out.stderr.splitlines() if ln.startswith("{")]
    writer = [r for r in lines if r["logger"] == "memindex.writer"]
    per_tx = [r for r in writer if r["level"] == "DEBUG" and r["message"].startswith("writer main: wrote")]
    summary = [r for r in writer if r["level"] == "INFO" and "transaction(s)" in r["message"]]
    assert per_tx and summary, writer
    files = sum(int(re.search(r"wrote (\d+) file", r["message"]).group(1)) for r in per_tx)
    assert files == 3, per_tx  # every file written once, and counted
    assert all("memory/2026-03-0" in r["message"] and " ms " in r["message"] for r in per_tx), per_tx
    assert sum(int(re.search(r": (\d+) file", r["message"]).group(1)) for r in summary) == 3, summary
    quiet = run_cli("--workspace", str(a.workspace), "--log-level", "info", "--log-format", "json", "index",
                    "--force", env=env)
    assert quiet.returncode == 0 and "writer main: wrote" not in quiet.stderr  # per-transaction lines: DEBUG only


def test_lines_about_a_message_name_its_agent_and_message_id(tmp_path):
    """Every line logged while a queue message is processed carries the agent and the message id
    (JSON fields; a ``[agent=… message=…]`` suffix in text), and lines outside a message do not."""
    a = Agent(tmp_path / "a", agent_id="main")
    a.write("memory/2026-03-01.md", "# Day\nThe damson jam was jarred.\n")
    env = {"OPENCLAW_STATE_DIR": str(a.state), "OPENCLAW_CONFIG_PATH": str(a.config_path)}
    out = run_cli("--workspace", str(a.workspace), "--log-level", "debug", "--log-format", "json", "index",
                  env=env)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(ln) for ln in out.stderr.splitlines() if ln.startswith("{")]
    writes = [r for r in lines if r["message"].startswith("writer main: wrote")]
    assert writes and all(r["agent"] == "main" and re.fullmatch(r"[0-9a-f-]{36}", r["message_id"])
                          for r in writes), writes
    plans = [r for r in lines if r["message"].startswith("sync main: generation")]
    assert plans and all("message_id" not in r for r in plans), plans  # `index` plans in the CLI: no message

    text = run_cli("--workspace", str(a.workspace), "--log-level", "debug", "index", "--force", env=env)
    assert text.returncode == 0, text.stderr
    wrote = [ln for ln in text.stderr.splitlines() if "writer main: wrote" in ln]
    assert wrote and all(re.search(r" \[agent=main message=[0-9a-f-]{36}\]$", ln) for ln in wrote), wrote


def test_log_settings_from_the_environment_and_iso_times(agent):
    """MEMINDEX_LOG_FORMAT / MEMINDEX_LOG_LEVEL in the Procfile's .env reach every command (they
    were overwritten by the CLI's own default), and a JSON line's time is ISO 8601 in UTC."""
    import os
    import subprocess
    import sys

    agent.write("memory/nul.md", b"\x00\x01\x00binary")  # one WARNING while indexing
    base = [sys.executable, "-m", "memindex", "--config", str(agent.config_path), "--state-dir", str(agent.state),
            "--workspace", str(agent.workspace)]
    env = dict(os.environ, MEMINDEX_LOG_FORMAT="json")
    out = subprocess.run([*base, "index"], capture_output=True, text=True, env=env, timeout=120)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 0 and lines, out
    records = [json.loads(ln) for ln in lines]
    assert any("binary" in r["message"] for r in records)
    assert all(r["time"].endswith("+00:00") and "T" in r["time"] for r in records)
    # The level too: error hides the warning.
    env["MEMINDEX_LOG_LEVEL"] = "error"
    out = subprocess.run([*base, "index", "--force"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and "binary" not in out.stderr, out.stderr


def test_the_error_line_of_a_failing_command_is_json_under_the_json_format(tmp_path):
    """A worker or watcher whose stderr feeds a log pipeline: the line saying why it stopped is a
    record like the others, with the exit code unchanged; the text format keeps `error: ...`."""
    bad = tmp_path / "openclaw.json"
    bad.write_text('{"agents": {"defaults": {"memorySearch": {"chunking": {"tokens": "x"}}}}}')
    common = ["--config", str(bad), "--state-dir", str(tmp_path / "state"), "--workspace", str(tmp_path)]
    for args, env, code in ((["--log-format", "json", *common, "status"], {}, 2),
                            ([*common, "worker"], {"MEMINDEX_LOG_FORMAT": "json", "MEMINDEX_BROKER_URL": ""}, 2)):
        out = run_cli(*args, env=env)
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert out.returncode == code and len(lines) == 1, out
        record = json.loads(lines[0])
        assert record["level"] == "ERROR" and record["logger"] == "memindex.cli", record
        assert "chunking.tokens" in record["message"] or "MEMINDEX_BROKER_URL" in record["message"], record
    out = run_cli(*common, "status")
    assert out.returncode == 2 and out.stderr.startswith("error: invalid config:"), out.stderr


def test_note_lines_are_json_under_the_json_format_too(agent):
    """helper-53: under --log-format json, `error:` lines were records but `note:` lines (a missing
    file for `get`, a warning of `search`) and `-v search`'s count line were plain text."""
    agent.write("memory/a.md", "# A\nkumquat\n")
    agent.memory_config({"provider": "none"})
    agent.index()
    common = ["--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace",
              str(agent.workspace)]
    for args, needle in ((["get", "memory/nope.md"], "does not exist"), (["-v", "search", "kumquat"], "1 result(s)")):
        out = run_cli("--log-format", "json", *common, *args)
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert out.returncode == 0 and lines, out
        records = [json.loads(ln) for ln in lines]  # every line a record
        assert any(needle in r["message"] for r in records), records
        plain = run_cli(*common, *args)  # the text format as before
        assert needle in plain.stderr and not plain.stderr.lstrip().startswith("{"), plain.stderr


def test_a_malformed_log_call_never_raises_into_its_caller():
    """The control-character filter formats each record; a record whose arguments do not fit its
    format must stay the handler's problem (logging's handleError), as without the filter. In a
    subprocess: pytest's own log handler makes every logging error raise."""
    import subprocess
    import sys

    code = ("import logging\n"
            "from memindex.workers.logs import configure\n"
            "configure(logging.INFO)\n"
            "log = logging.getLogger('memindex.test-malformed')\n"
            "log.warning('bad %d format', 'not a number')\n"
            "log.warning('fine %s', 'x')\n"
            "print('survived')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "survived", out
    assert "--- Logging error ---" in out.stderr and "fine x" in out.stderr


def test_a_handed_back_or_retried_message_logs_no_traceback_when_a_secret_is_registered():
    """The secret scrubber formats a record's traceback when it is made (so the text it prints is
    redacted); the line shortener then dropped only ``exc_info``, and the scrubbed traceback was
    printed anyway under the "the worker is stopping" INFO line and every retried WARNING."""
    import io
    import logging

    from dramatiq.message import Message
    from dramatiq.middleware import Shutdown

    from memindex.pipeline.embeddings import secrets
    from memindex.workers.failures import install_log_filters

    original = logging.getLogRecordFactory()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    log = logging.getLogger("dramatiq.worker.WorkerThread.test")
    log.addHandler(handler)
    log.propagate = False
    try:
        logging.setLogRecordFactory(logging.LogRecord)  # this order whatever earlier tests installed
        secrets.register("sk-test-secret-123")  # installs the scrubber (inside the shortener below)
        install_log_filters()
        message = Message(queue_name="embed", actor_name="embed_chunks", args=(), kwargs={}, options={})
        for exc in (Shutdown("stopping"), RuntimeError("provider said no to sk-test-secret-123")):
            try:
                raise exc
            except BaseException:
                log.error("Failed to process message %s with unhandled exception.", message, exc_info=True)
    finally:
        logging.setLogRecordFactory(original)
        log.removeHandler(handler)
    text = stream.getvalue()
    assert "the worker is stopping" in text and "provider said no to ***" in text, text
    assert "Traceback" not in text and "sk-test-secret-123" not in text, text


@contextlib.contextmanager
def _outage_filtered(monkeypatch, logger: str) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """``logger`` writing to a string through a fresh outage filter (its class state reset)."""
    from memindex.workers import logs

    for name, value in (("since", None), ("reported", 0.0), ("held", 0)):
        monkeypatch.setattr(logs._RedisOutage, name, value)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs._RedisOutage())
    lg = logging.getLogger(logger)
    lg.addHandler(handler)
    monkeypatch.setattr(lg, "propagate", False)
    try:
        yield lg, stream
    finally:
        lg.removeHandler(handler)


def test_a_message_finishing_during_a_redis_outage_logs_one_line_and_no_traceback(monkeypatch):
    """Work in flight when Redis went away: dramatiq's ack, retry and post-processing of each
    message logged a CRITICAL with a ~120-line redis traceback. They are outage lines now: the
    first is said once, without its traceback, the rest held back and counted."""
    import redis

    from memindex.workers import logs

    with _outage_filtered(monkeypatch, "dramatiq.test-outage") as (lg, stream):
        lg.handlers[-1].setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        for i in range(20):
            try:
                raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6391. Connection refused.")
            except redis.exceptions.ConnectionError:
                lg.critical("Unexpected failure in after_process_message of %r.", f"<Retries {i}>", exc_info=True)
        lg.warning("an unrelated line with no exception")
        try:
            raise ValueError("not redis")
        except ValueError:
            lg.error("a real failure", exc_info=True)
    out = stream.getvalue()
    assert out.count("Unexpected failure") == 1 and "redis unreachable" in out, out
    assert "WARNING Unexpected failure" in out and "CRITICAL" not in out  # a process that waits: a warning
    assert "redis.exceptions" not in out and out.count("Traceback") == 1  # only the unrelated error's
    assert "an unrelated line" in out and "ValueError: not redis" in out
    assert logs._RedisOutage.held == 19


def test_dramatiqs_post_process_retry_lines_are_outage_lines(monkeypatch):
    """Each message that finished during an outage logged this every 5 s until its ack got through."""
    from memindex.workers import logs

    with _outage_filtered(monkeypatch, "dramatiq.worker.ConsumerThread(embed)") as (lg, stream):
        for i in range(12):
            lg.warning("Failed to post_process_message(%s) due to a connection error: %s\n"
                       "The operation will be retried in %s seconds until the connection recovers.\n",
                       f"embed_chunks[main] {i}", "Connection refused", 5)
    out = stream.getvalue()
    assert out.count("Failed to post_process_message") == 1 and "redis unreachable" in out, out
    assert logs._RedisOutage.held == 11
    # The watcher's retry of a sync it could not enqueue (every 2 s per changed agent) likewise.
    import redis

    from memindex.pipeline.errors import ConfigError
    from memindex.producers.watcher import Watcher

    w = Watcher([], enqueue=lambda *a: None, lost=None)
    with _outage_filtered(monkeypatch, "memindex.watcher") as (lg, stream):
        for _ in range(10):
            w._say_enqueue_failed("main", redis.ConnectionError("Error 111 connecting to localhost:6379"))
    assert stream.getvalue().count("could not enqueue") == 1 and "redis unreachable" in stream.getvalue()
    # Not Redis (openclaw.json broken while the user edits it, embedded broker): no "redis
    # unreachable" in it, said once until the reason changes, not every 2 s.
    with _outage_filtered(monkeypatch, "memindex.watcher") as (lg, stream):
        for _ in range(10):
            w._say_enqueue_failed("main", ConfigError("openclaw.json", "not valid JSON5"))
        w._say_enqueue_failed("main", ConfigError("openclaw.json", "agents.list[0].id: missing"))
    out = stream.getvalue()
    assert out.count("could not enqueue") == 2 and "redis" not in out, out


def test_the_writer_summary_reports_the_last_burst_when_its_period_ends():
    """It was logged only when a later write came: a backfill's last burst was never summarised."""
    import time

    from memindex.workers.logs import WriteSummary

    stream = io.StringIO()
    lg = logging.getLogger("memindex.test-write-summary")
    handler = logging.StreamHandler(stream)
    lg.addHandler(handler)
    lg.setLevel(logging.INFO)
    lg.propagate = False
    try:
        summary = WriteSummary(lg, every_s=0.3)
        summary.record("main", 2, 5, 0.01, "memory/a.md")
        summary.record("main", 1, 3, 0.01, "memory/b.md")
        assert stream.getvalue() == ""  # within the period: held
        deadline = time.monotonic() + 10
        while "transaction(s)" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        out = stream.getvalue()
        assert out.count("writer main: 3 file(s), 8 chunk(s) in 2 transaction(s)") == 1, out
    finally:
        lg.removeHandler(handler)


def test_outage_lines_are_held_back_through_the_configured_handlers():
    """The real chain of a worker process (configure() + the record factory): the post_process
    line holds a newline, which the work-fields filter escaped before the outage filter could
    recognise its format, and a failed message's line loses its exception to the factory."""
    import subprocess
    import sys

    code = r'''
import logging, dramatiq, redis
from memindex.workers.logs import configure
from memindex.workers.failures import install_log_filters
configure("info")
install_log_filters()
msg = dramatiq.Message(queue_name="embed", actor_name="embed_chunks", args=({"agent_id": "main"},),
                       kwargs={}, options={})
consumer = logging.getLogger("dramatiq.worker.ConsumerThread(embed)")
worker = logging.getLogger("dramatiq.worker.WorkerThread")
for i in range(5):
    consumer.warning("Failed to post_process_message(%s) due to a connection error: %s\n"
                     "The operation will be retried in %s seconds until the connection recovers.\n",
                     msg, "Connection refused", 5)
    try:
        raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6391. Connection refused.")
    except redis.exceptions.ConnectionError:
        worker.error("Failed to process message %s with unhandled exception.", msg, exc_info=True)
'''
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert sum("Failed to post_process_message" in ln for ln in lines) <= 1, out.stderr
    assert sum("Failed to process message" in ln for ln in lines) <= 1, out.stderr
    assert sum("redis unreachable" in ln for ln in lines) == 1 and "Traceback" not in out.stderr, out.stderr
