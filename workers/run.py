"""What ``memindex worker`` execs: dramatiq's command line, with memindex's log format in every
process it starts and a watch on the supervisor.

dramatiq's parent process (and its fork processes, the Prometheus exposition server) configure
logging themselves with dramatiq's text format, and none of memindex's middleware runs there: with
``--log-format json`` its "booting up", "Sending signal" and "exited unexpectedly" lines were the
plain text a log pipeline cannot parse. Its three logging setups are wrapped here so that each
process applies ``MEMINDEX_LOG_FORMAT``/``MEMINDEX_LOG_LEVEL`` (``workers/logs.py``) right after
dramatiq's own. They are module functions that dramatiq's ``main`` and ``worker_process`` look up
at call time, and the worker processes are forked from this one, so they inherit the wrapping.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from memindex.pipeline.config import environ
from memindex.workers.logs import configure_from_env
from memindex.workers.supervisor import stop_with_supervisor



PARENT_ENV = environ.WORKER_PARENT.name  # the pid of dramatiq's parent process, for its children


def _then_ours(setup: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        logger = setup(*args, **kwargs)
        configure_from_env()  # the handler dramatiq just made gets our format (JSON or text + context)
        return logger

    return wrapped


def main() -> int:
    import dramatiq.cli as cli

    for name in ("setup_parent_logging", "setup_worker_logging", "setup_fork_logging"):
        setattr(cli, name, _then_ours(getattr(cli, name)))
    parser = cli.make_argument_parser()  # type: ignore[no-untyped-call]  # dramatiq's cli is untyped
    parser.prog = "memindex worker"  # its usage and error lines name the command that was run
    args = parser.parse_args(sys.argv[1:])
    stop_with_supervisor()  # before the fork: the worker processes inherit SUPERVISOR_ENV
    os.environ[PARENT_ENV] = str(os.getpid())  # (workers/lifecycle.py: a child outlives no parent)
    from memindex.pipeline.embeddings.providers.local import PROCESSES_ENV  # lazy: after the argument check (0.17 s)

    os.environ[PROCESSES_ENV] = str(args.processes)  # each loads its own local model: they share the CPUs
    # A SIGHUP makes dramatiq exec sys.argv again (its reload): this module, not `dramatiq`.
    sys.argv = [sys.executable, "-m", __spec__.name if __spec__ else "memindex.workers.run", *sys.argv[1:]]
    return int(cli.main(args))  # type: ignore[no-untyped-call]  # (the same)


if __name__ == "__main__":
    sys.exit(main())
