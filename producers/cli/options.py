"""Options every ``memindex`` command shares, accepted before or after the command
(``memindex --agent ops status`` and ``memindex status --agent ops`` alike), and
the help-text helpers every command module uses.

argparse copies a subcommand's defaults over the values parsed before it, so the
shared options default to ``SUPPRESS`` inside subcommands: only a value actually
given after the command overrides one given before it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
from typing import Any, Iterable

from memindex.producers.cli import complete
from memindex.producers.cli.capture import current
from memindex.producers.serve import DEFAULT_HOST
from memindex.workers.endpoint import broker_error_line
from memindex.workers.logs import FORMATS, LEVELS, JsonFormatter, is_redis_error

GLOBAL_TITLE = "global options (before or after the command)"


def _global_specs() -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    return [
        (("--config",), dict(metavar="FILE", default=None,
                             help="openclaw.json (default: $OPENCLAW_CONFIG_PATH, else <state-dir>/openclaw.json)")),
        (("--state-dir",), dict(metavar="DIR", default=None,
                                help="OpenClaw state directory (default: $OPENCLAW_STATE_DIR, else ~/.openclaw)")),
        (("--workspace",), dict(metavar="DIR", default=None, help="use this workspace instead of the agent's")),
        (("--agent",), dict(metavar="ID", default=None,
                            help="agent id (default: status and index cover every configured agent; "
                                 "other commands use the default agent)")),
        (("-v", "--verbose"), dict(action="count", default=0, help="more output and logging (-vv: debug)")),
        (("--log-level",), dict(choices=LEVELS, default=None,
                                help="log level (default $MEMINDEX_LOG_LEVEL, else info for watch, worker, serve "
                                     "and mcp, warning for the rest; -v info, -vv debug); worker processes too")),
        (("--log-format",), dict(choices=FORMATS, default=None,
                                 help="log lines as text or one JSON object each (default $MEMINDEX_LOG_FORMAT, "
                                      "else text)")),
    ]


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """The shared options on the top-level parser, with their real defaults."""
    group = parser.add_argument_group(GLOBAL_TITLE)
    for flags, kw in _global_specs():
        _completes(group.add_argument(*flags, **kw))
    group.add_argument("--json", action="store_true", help="machine-readable output (commands that have it)")


def share_global_options(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Accept the shared options after every registered command too (call once all are registered)."""
    for parser in dict.fromkeys(sub.choices.values()):  # aliases map to the same parser
        group = parser.add_argument_group(GLOBAL_TITLE)
        for flags, kw in _global_specs():
            if not any(f in parser._option_string_actions for f in flags):
                _completes(group.add_argument(*flags, **{**kw, "default": argparse.SUPPRESS}))
        json_opt = parser._option_string_actions.get("--json")
        if json_opt is not None:
            json_opt.default = argparse.SUPPRESS


def _completes(action: argparse.Action) -> None:
    """Tab offers the configured agent ids after ``--agent`` (argcomplete reads ``completer``)."""
    if "--agent" in action.option_strings:
        action.completer = complete.agent_ids  # type: ignore[attr-defined]  # argcomplete's hook, unknown to argparse


def has_option(parser: argparse.ArgumentParser, flag: str) -> bool:
    return flag in parser._option_string_actions


def examples(*pairs: tuple[str, str], description: str | None = None) -> dict[str, Any]:
    """``add_parser`` keywords for a command's help: its description and an Examples epilog."""
    # Raw formatting keeps the examples' columns; the description is wrapped here instead.
    return {"description": textwrap.fill(description, 88) if description else None,
            "formatter_class": argparse.RawDescriptionHelpFormatter,
            "epilog": "examples:\n" + "\n".join(_example(cmd, what) for cmd, what in pairs)}


def _example(cmd: str, what: str, width: int = 46) -> str:
    """One example line; a command too long for its column puts its description on the next
    line (it ran into it: `... --lines 5 five lines from line 3`)."""
    if len(cmd) < width:
        return f"  {cmd:<{width}} {what}"
    return f"  {cmd}\n  {'':<{width}} {what}"


def command_parsers(parser: argparse.ArgumentParser) -> Iterable[tuple[str, argparse.ArgumentParser]]:
    """(name, parser) of every command (for help checks and completion)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _json_logging() -> bool:
    cap = current()  # a --server call run by `memindex serve`: the caller's --log-format
    if cap is not None:
        return cap.fmt == "json"
    handlers = logging.getLogger().handlers
    return bool(handlers) and all(isinstance(h.formatter, JsonFormatter) for h in handlers)


def _shown(log: logging.Logger, level: int) -> bool:
    cap = current()
    return level >= cap.level if cap is not None else log.isEnabledFor(level)


def say(line: str, *, prefix: str | None = "note", level: int = logging.WARNING) -> None:
    """A line for the person at the terminal (``note: ...`` on stderr), a JSON record like every
    other line under ``--log-format json`` (they were plain text there)."""
    log = logging.getLogger("memindex.cli")
    if _json_logging():
        if _shown(log, level):
            log.log(level, "%s", line)
    else:
        print(f"{prefix}: {line}" if prefix else line, file=sys.stderr)


def say_error(line: str) -> None:
    """The one line that says why a command failed (``error: ...`` on stderr). Under
    ``--log-format json`` it is a JSON record like every other line there: a worker or watcher
    feeding a log pipeline must not emit the one line the pipeline cannot parse."""
    log = logging.getLogger("memindex.cli")
    if _json_logging() and _shown(log, logging.ERROR):
        log.error("%s", line)
    else:
        print(f"error: {line}", file=sys.stderr)


def one_line_error(exc: BaseException) -> str | None:
    """The one line for an error the user can act on (a file they named, the broker); None: a bug."""
    if is_redis_error(exc):  # broker unreachable, hung or refusing
        return broker_error_line(exc)
    if isinstance(exc, UnicodeDecodeError):
        return f"input is not valid UTF-8 ({exc.reason} at byte {exc.start})"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return None


def metrics_address(text: str) -> tuple[str, int]:
    """``--metrics-port [HOST:]PORT``: the series name agents, so a bare PORT is loopback only
    (it listened on every interface, no token asked, while ``serve`` refuses that for memory);
    ``0.0.0.0:PORT`` is for a scraper on another machine or container."""
    host, sep, port = text.strip().rpartition(":")
    try:
        n = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected [HOST:]PORT, e.g. 9191 or 0.0.0.0:9191, not {text!r}") from None
    if not 0 < n < 65536:
        raise argparse.ArgumentTypeError(f"bad port {n}: expected 1-65535")
    return (host.strip("[]") if sep and host.strip("[]") else DEFAULT_HOST), n


def whole_number(text: str) -> int:
    # argparse names a type's function when it raises ValueError ("invalid at_least_one value").
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def at_least_one(text: str) -> int:
    """``--max-results`` (what the MCP and HTTP tools accept: 0 would answer "No matches."),
    ``--max-watch-dirs`` (as its variable, MEMINDEX_WATCH_MAX_DIRS)."""
    n = whole_number(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def non_negative(text: str) -> int:
    """``get --from/--lines``: a usage error like the other numbers (memory_get refuses it anyway)."""
    n = whole_number(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n
