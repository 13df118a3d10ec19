"""What the shell's Tab offers beyond commands and options (``memindex completion``): the
configured agent ids for ``--agent``, and the agent's memory files for ``get PATH``.

argcomplete calls these with the options typed so far (``--config``, ``--state-dir``, ``--agent``
on the line are honoured). A config that cannot be read offers nothing: completion never prints
an error into the user's prompt.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

# A completer must never fail the shell: whatever goes wrong offers no completions.
_QUIET = (Exception,)


def agent_ids(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    from memindex.producers.cli.agents import configured_agents  # lazy: the parser is built light (arguments.py)

    try:
        ids = configured_agents(parsed_args)
    except _QUIET as exc:
        logging.getLogger("memindex.cli").debug("no agent completions: %s", exc)
        return []
    return [i for i in ids if i.startswith(prefix)]


def memory_paths(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """The agent's memory files as ``get`` takes them (workspace-relative, extraPaths included),
    never its transcripts (``get`` reads Markdown only)."""
    from memindex.pipeline.index.indexer import iter_collect_files  # lazy: only when Tab asks
    from memindex.producers.cli.agents import command_settings  # lazy: the parser is built light (arguments.py)

    try:
        settings = command_settings(parsed_args)
        return sorted(f.path for f in iter_collect_files(settings)
                      if f.source == "memory" and f.kind == "markdown" and f.path.startswith(prefix))
    except _QUIET as exc:
        logging.getLogger("memindex.cli").debug("no path completions: %s", exc)
        return []
