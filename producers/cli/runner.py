"""The ``memindex`` command line run in this process (``main.py`` hands every call but a
``--server`` one to ``run``), and inside ``memindex serve`` for a ``--server`` caller
(``run_for_server``).

The commands are a table (``commands.py``): the parser is built from light specs, and the code of
the one command run is imported when it runs, so a ``memindex search`` loads the search module
and none of the queue, vector, SDK or web code of the other commands; ``--help`` and
``--version`` load no command code. Nothing outlives a command but what the user asked to run
(``serve``, ``mcp``, ``watch``, ``worker``).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from memindex.pipeline.config import environ
from memindex.pipeline.errors import ConfigError, MemindexError
from memindex.pipeline.store.locks import set_process_label
from memindex.producers.cli import capture, remote
from memindex.producers.cli.commands import BY_NAME, COMMANDS, command_named
from memindex.producers.cli.options import (
    add_global_options, command_parsers, examples, has_option, one_line_error, say_error, share_global_options,
)
from memindex.workers.endpoint import broker_url
from memindex.workers.logs import FORMAT_ENV, FORMATS, HTTP_LOGGERS, LEVEL_ENV, LEVELS, configure

if TYPE_CHECKING:
    from memindex.producers.cli.agents import Serving


class _Version(argparse.Action):
    """``--version``, reading the installed version only when asked (start-up time)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the memindex version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import version

        print(f"memindex {version('memindex')}")
        parser.exit(0)


@functools.lru_cache(maxsize=None)  # built once per process (`memindex serve` runs --server calls with it)
def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser: every command, or just the command ``only`` (a `memindex search` needs no
    other sub-parser: the ~20 of them were a fifth of its start-up, issue 19). Help and completion
    get every command."""
    p = argparse.ArgumentParser(
        prog="memindex",
        description="Index and search an agent's Markdown memory; reads OpenClaw's openclaw.json "
                    "and mirrors `openclaw memory status|index|search`.",
        **{k: v for k, v in examples(
            ('memindex index', "sync every configured agent now"),
            ('memindex search "deployment notes"', "search the default agent's memory"),
            ('memindex status --json', "status in OpenClaw's JSON shape"),
            ('memindex --agent ops get MEMORY.md', "read a memory file of agent ops"),
        ).items() if k != "description"},
    )
    p.add_argument("--version", action=_Version)
    add_global_options(p)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS if only is None else (BY_NAME[only],):
        command.add_to(sub)
    share_global_options(sub)
    # No prefixes of long options: `--max-result` (a typo) was taken silently as --max-results,
    # and a prefix a later option would make ambiguous breaks scripts.
    for parser in (p, *sub.choices.values()):
        parser.allow_abbrev = False
    return p


def cmd_completion(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode  # (only here: its import is not free)

    sys.stdout.write(shellcode(["memindex"], shell=args.shell))
    return 0


def _unrecognized(command: argparse.ArgumentParser, extra: list[str]) -> None:
    import difflib  # (not for every run: only a mistyped option needs it)

    flags = sorted({f for f in command._option_string_actions if f.startswith("--")})
    hints = [f"{x} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(x.split("=")[0], flags, 1, 0.7))
             else x for x in extra]
    plain = [x for x, h in zip(extra, hints) if x.startswith("-") and x == h]  # no option it resembles
    if command.prog.endswith(" search") and plain:
        # A query that starts with "-" (an agent passing its text through) reads as an option.
        hints.append(f"(to search for text starting with '-', put -- before it: {command.prog} -- {plain[0]})")
    command.error(f"unrecognized arguments: {' '.join(hints)}")


def _check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What argparse cannot express: a --json or --all that the command does not take, an option
    that means something only with another (said with the command's own usage)."""
    command = dict(command_parsers(parser))[args.command]
    if args.json and not has_option(command, "--json"):
        command.error(f"--json does not apply to {args.command}")
    if getattr(args, "all", False) and args.agent:
        command.error("give --agent ID or --all, not both")
    if args.command == "status" and args.force and not args.index:
        # It was ignored: a user asking for a rebuild got the status of the old index, exit 0.
        command.error("status --force goes with --index (re-index every file, then show the status)")
    # Options that mean something only with another were taken and ignored, without a word.
    if args.command == "backfill" and args.timeout is not None and not args.wait:
        command.error("backfill --timeout goes with --wait (it bounds the wait; without --wait nothing waits)")
    if args.command == "queues" and args.interval is not None and not args.watch:
        command.error("queues --interval goes with --watch (seconds between refreshes)")


def _blank_path(args: argparse.Namespace) -> str | None:
    """The one-line usage error for an empty --config/--state-dir/--workspace (None: none is). An
    empty --config read as "no config file" and ran on defaults, silently (the shell's unset
    variable in `--config "$CFG"`); the others failed with the library's Context wording."""
    for dest in ("config", "state_dir", "workspace"):
        value = getattr(args, dest, None)
        if value is not None and not value.strip():
            return f"--{dest.replace('_', '-')} must name a path, not an empty string"
    return None


# Processes an operator runs for hours log what they do (a sync enqueued, an agent added) at INFO,
# as the dramatiq workers beside them do; one-shot commands stay quiet unless -v.
LONG_RUNNING = frozenset(("watch", "worker", "serve", "mcp"))


def _log_choice(args: argparse.Namespace) -> int:
    """Level: --log-level, else $MEMINDEX_LOG_LEVEL (the Procfile's .env), else INFO for the
    long-running commands and WARNING for the rest (-v INFO, -vv DEBUG). Format likewise:
    --log-format, else $MEMINDEX_LOG_FORMAT, else text (set on ``args``). A variable is held to
    the flag's choices (``EnvError``): ``verbose`` was ignored without a word."""
    args.log_level = args.log_level or environ.LOG_LEVEL.get()
    args.log_format = args.log_format or environ.LOG_FORMAT.get()
    quiet = logging.INFO if args.command in LONG_RUNNING else logging.WARNING
    level = quiet if args.verbose == 0 else min(quiet, logging.INFO) if args.verbose == 1 else logging.DEBUG
    if args.log_level:
        level = logging.getLevelName(args.log_level.upper())
    return level


def _setup_logging(args: argparse.Namespace) -> None:
    """This process's logging as ``_log_choice`` reads it, resolved once here so the worker
    processes ``memindex worker`` starts receive exactly what this process uses."""
    level = _log_choice(args)
    configure(level, args.log_format)
    if level > logging.DEBUG:
        for noisy in ("dramatiq", "watchdog", *HTTP_LOGGERS):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.command not in LONG_RUNNING and level >= logging.WARNING:
        # A one-shot command says "qmd unavailable" itself (search's note:, status' fallback:,
        # index's warning:); the backend's log line for long-running processes repeated it.
        logging.getLogger("memindex.backend").setLevel(logging.ERROR)


def run_for_server(argv: list[str], serving: Serving) -> tuple[int, str, str]:
    """``memindex <argv>`` run inside ``memindex serve`` for a ``--server`` caller: (exit code,
    stdout, stderr) exactly as an in-process run prints them, from the server's warm engines.
    ``serving``: the server's config, agents and engines (producers/cli/serve.py ``CliServing``)."""
    capture.install()
    with capture.captured(logging.WARNING, "text") as cap:
        try:
            code = run(argv, serving)
        except SystemExit as exc:  # argparse: usage errors (2), --help (0)
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        except Exception as exc:  # noqa: BLE001 - a bug: the caller gets its one line, the server the traceback
            logging.getLogger("memindex.serve").exception("--server call %r failed", argv)
            print(f"error: memindex serve failed on this call: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = 1
        return code, cap.out.getvalue(), cap.err.getvalue()


def _serving_problem(args: argparse.Namespace, serving: Serving) -> str | None:
    """Why a server will not run this command line (None: it will), and otherwise points ``args``
    at the server's own config: it serves the agents it was started with, not the caller's files."""
    if args.command not in remote.REMOTE_COMMANDS:
        return f"memindex serve answers only {' and '.join(remote.REMOTE_COMMANDS)} (run `memindex {args.command}` here)"
    given = [f"--{d.replace('_', '-')}" for d in ("config", "state_dir", "workspace") if getattr(args, d, None)]
    if given:
        return (f"{', '.join(given)} cannot go to a server: it serves the config it was started with "
                "(give them to `memindex serve`, or leave out --server)")
    if getattr(args, "queries", None):
        return "--queries is not sent to a server (run it without --server, or POST /v1/search per query)"
    args.config, args.state_dir = serving.base.config, serving.base.state_dir
    if serving.only is not None and args.agent and args.agent.strip().lower() != serving.only:
        return f"this server serves only agent {serving.only!r} (started with --agent)"
    args.agent = args.agent or serving.only
    args.serving = serving
    return None


def run(argv: list[str], serving: Serving | None = None) -> int:
    completing = "_ARGCOMPLETE" in os.environ
    parser = build_parser(None if completing else command_named(argv))
    if completing:  # the shell asks for completions (see `memindex completion`)
        import argcomplete  # (only when the shell asks: its import is not free)

        argcomplete.autocomplete(parser)
    args, extra = parser.parse_known_args(argv)
    if not args.command:
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        parser.print_help()
        return 2
    if extra:  # said with the command's usage (it printed the top-level one), and a likely flag
        _unrecognized(dict(command_parsers(parser))[args.command], extra)
    _check_usage(parser, args)
    blank = _blank_path(args)
    if blank:
        say_error(blank)
        return 2
    if serving is not None:
        why = _serving_problem(args, serving)
        if why:
            say_error(why)
            return 2
    else:
        remote.lenient_streams()
    try:
        if serving is None:
            _setup_logging(args)  # (a bad $MEMINDEX_LOG_LEVEL is a ConfigError, said below)
            set_process_label(f"memindex {args.command}")  # who holds a store, in another writer's wait line
        else:  # the server's logging stays; the caller's level and format shape its own lines
            cap = capture.current()
            assert cap is not None  # (run_for_server captures every call it runs)
            cap.level, cap.fmt = _log_choice(args), args.log_format
        return int(args.func(args) or 0)
    except ConfigError as exc:
        say_error(str(exc))
        return 2
    except MemindexError as exc:  # e.g. no API key for the configured provider: one line, no traceback
        say_error(str(exc))
        return 1
    except BrokenPipeError:  # `memindex status --json | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - the failures a user causes or can fix get one line
        line = one_line_error(exc)
        if line is None:
            raise
        say_error(line)
        return 1
    except KeyboardInterrupt:
        if args.command in ("index", "backfill") or getattr(args, "index", False):  # say what it left
            if broker_url():  # the work is on the broker: its workers go on without this process
                print("interrupted: the work already queued is still done by the workers; "
                      "`memindex status` shows what is pending", file=sys.stderr)
            else:
                print("interrupted: what was written is kept; `memindex index` finishes the rest", file=sys.stderr)
        # That line is the whole story: the stopping in-process workers would add an INFO line
        # per message they hand back ("retried later"), which this exiting process never does.
        for handler in logging.getLogger().handlers:
            handler.setLevel(max(handler.level, logging.WARNING))
        return 130
    finally:
        if serving is None and "memindex.workers.embedded" in sys.modules:
            try:
                sys.modules["memindex.workers.embedded"].stop(idle=True)
            except KeyboardInterrupt:
                # A second Ctrl-C while the workers stop (impatient users press it twice): the
                # "interrupted" line is said; a traceback from dramatiq's join adds nothing. (What
                # the writer committed is kept; an uncommitted transaction rolls back.)
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:  # noqa: BLE001 - exiting anyway
                        pass
                os._exit(130)
