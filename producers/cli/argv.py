"""What a ``memindex`` command line names, read without building a parser (a parser costs
~10 ms, and the resident-process check runs before any is built)."""

from __future__ import annotations

# Global options that take a value (the token after them is not the command).
VALUE_OPTIONS = frozenset(("--config", "--state-dir", "--workspace", "--agent", "--log-level", "--log-format"))


def command_of(argv: list[str] | tuple[str, ...]) -> str | None:
    """The first token of ``argv`` that names a command (None: none, or ``--``/``--help`` first)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in VALUE_OPTIONS:
            skip = True
        elif arg == "--" or arg in ("-h", "--help"):
            return None
        elif not arg.startswith("-"):
            return arg
    return None
