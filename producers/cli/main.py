"""``memindex`` command line (the console script is this module's ``main``).

A search or get with ``--server`` is sent to that server by the client (producers/cli/remote.py):
such a call imports this module and the client, no more. Every other call runs in this process
(producers/cli/runner.py), which loads the command table and then the one command run.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from memindex.pipeline.errors import ConfigError
from memindex.producers.cli import remote


def main(argv: Sequence[str] | None = None) -> int:
    """The ``memindex`` console script. A search or get with ``--server`` (or ``$MEMINDEX_SERVER``)
    is answered by that server (producers/cli/remote.py); everything else runs here."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "_ARGCOMPLETE" not in os.environ:
        if remote.command_of(argv) in remote.REMOTE_COMMANDS:
            try:
                url, timeout, rest = remote.split_server(argv)
            except remote.RemoteError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            if url is not None:
                remote.lenient_streams()
                return remote.run(url, timeout, rest)
    try:
        # lazy: a --server call never loads the in-process CLI; and what it loads reads MEMINDEX_*
        # variables as it loads, whose bad value is the one line below, not a traceback
        from memindex.producers.cli.runner import run

        return run(argv)
    except ConfigError as exc:  # a variable the CLI's modules read as they load (MEMINDEX_POLL_MS=abc)
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
