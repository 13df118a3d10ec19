"""``MEMINDEX_*`` environment variables set to a value they cannot take: every command says so in
its one ``error:`` line naming the variable (a ConfigError, exit 2), never a traceback, and the
library raises ConfigError. A user trial set each documented number to ``abc``: each command died
with ``ValueError: invalid literal for int()`` from an import, and a bad log level or log
format was ignored without a word while ``--log-level verbose`` was refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import Agent, free_port, run_cli

# (variable, command, needs Redis): at least one per command family, and the variables read by
# modules every command imports before its error handling starts (store, logs).
NUMBERS = [
    ("MEMINDEX_WATCH_MAX_DIRS", ["watch"], False),
    ("MEMINDEX_WRITE_SUMMARY_S", ["watch"], False),
    ("MEMINDEX_ASYNC_THREADS", ["serve", "--port", "{port}"], False),
    ("MEMINDEX_WRITER_WAIT_S", ["index", "--force"], False),
    ("MEMINDEX_EMBED_MSG_CHUNKS", ["index", "--force"], False),
    ("MEMINDEX_WRITE_SHARDS", ["index", "--force"], True),
    ("MEMINDEX_OUTAGE_REPORT_S", ["index", "--force"], True),
    ("MEMINDEX_HEALTH_STALL_S", ["health"], True),
    ("MEMINDEX_POLL_MS", ["worker", "--queues", "sync", "--processes", "1", "--threads", "1"], True),
    # read only by the worker processes `memindex worker` starts
    ("MEMINDEX_BATCH_LEASE_S", ["worker", "--queues", "batch", "--processes", "1", "--threads", "1"], True),
    ("MEMINDEX_PROC_TTL_S", ["queues"], True),
    ("MEMINDEX_SUPERVISOR_POLL_S", ["watch"], False),
    ("MEMINDEX_METRICS_ADDRESS", ["watch"], False),
    # read when a local model loads; `memindex worker` checks it at start
    ("MEMINDEX_LOCAL_THREADS", ["worker", "--queues", "embed", "--processes", "1", "--threads", "1"], True),
]


def _env(agent: Agent, request: pytest.FixtureRequest | None, redis: bool, **extra: str) -> dict:
    """The agent's environment (on a Redis of its own when ``redis``), with a workspace to index."""
    env = agent.env(request.getfixturevalue("redis_server").url if redis else None)
    agent.write_config({"agents": {"defaults": {"workspace": str(agent.workspace), "memorySearch": {"provider": "hash"}}}})
    agent.write("memory/note.md", "# Note\n\nThe kumquat tree flowers in March.\n")
    return {**env, **extra}


def _one_line(out: subprocess.CompletedProcess, var: str, value: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: {var} must be ") and lines[0].endswith(f"not {value!r}"), out.stderr


@pytest.mark.parametrize("var, command, redis", NUMBERS, ids=[f"{v}-{c[0]}" for v, c, _ in NUMBERS])
def test_a_number_variable_that_is_not_one_is_one_error_line(agent, request, var, command, redis):
    command = [a.format(port=free_port()) for a in command]
    # timeout: before the fix `worker` went on to start dramatiq and `watch`/`serve` may have run
    out = run_cli(*command, env=_env(agent, request, redis, **{var: "abc"}), timeout=120)
    _one_line(out, var, "abc")


def test_a_number_out_of_its_bounds_is_refused_too(agent, request):
    out = run_cli("index", "--force", env=_env(agent, request, False, MEMINDEX_EMBED_MSG_CHUNKS="0"))
    _one_line(out, "MEMINDEX_EMBED_MSG_CHUNKS", "0")
    assert "at least 1" in out.stderr


def test_async_search_raises_config_error_for_a_bad_pool_size(agent):
    """The library: `asearch` raised a plain ValueError ("every error derives from MemindexError")."""
    _env(agent, None, False)
    code = ("import asyncio, memindex\n"
            f"s = memindex.load_settings(memindex.Context('main', {str(agent.config_path)!r}, {str(agent.state)!r}))\n"
            "e = memindex.open_search(s)\n"
            "try:\n"
            "    asyncio.run(e.asearch('anything'))\n"
            "except memindex.ConfigError as exc:\n"
            "    print('ConfigError:', exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**agent.env(), "MEMINDEX_ASYNC_THREADS": "abc"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ConfigError: MEMINDEX_ASYNC_THREADS must be a whole number of at least 1, not 'abc'"


@pytest.mark.parametrize("var, value, choices", [
    ("MEMINDEX_LOG_LEVEL", "verbose", "debug, info, warning, error"),
    ("MEMINDEX_LOG_FORMAT", "xml", "text, json"),
])
def test_a_mode_variable_outside_its_choices_is_refused_as_the_flag_is(agent, var, value, choices):
    """They were ignored without a word (the default level, text)."""
    out = run_cli("status", env=_env(agent, None, False, **{var: value}))
    _one_line(out, var, value)
    assert f"must be one of {choices}, not" in out.stderr, out.stderr
    if var == "MEMINDEX_LOG_LEVEL":  # what the flag says: the same choices
        flag = run_cli("status", "--log-level", value, env=_env(agent, None, False))
        assert flag.returncode == 2 and "invalid choice: 'verbose'" in flag.stderr, flag.stderr
    ok = run_cli("status", env=_env(agent, None, False, **{var: f" {choices.split(', ')[1].upper()} "}))
    assert ok.returncode == 0, ok.stderr  # any case, blanks around it
