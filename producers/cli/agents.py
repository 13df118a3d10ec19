"""Which agents a subcommand acts on: ``--agent ID`` or ``--all`` (shared by cli_ops and cli_batch)."""

from __future__ import annotations

import argparse

from memindex.pipeline.config.settings import Context


def add_agent_opts(s: argparse.ArgumentParser) -> None:
    g = s.add_mutually_exclusive_group()
    g.add_argument("--agent", dest="sub_agent", metavar="ID", help="this agent (default: the global --agent)")
    g.add_argument("--all", action="store_true", help="every configured agent")


def agent_contexts(args: argparse.Namespace) -> list[Context]:
    """The subcommand's --agent, every configured agent with --all, else the global --agent."""
    from memindex.pipeline.config.settings import list_agent_ids, load_raw

    base = Context(args.agent, args.config, args.state_dir, args.workspace)
    if getattr(args, "all", False):
        return [base.with_agent(a) for a in list_agent_ids(load_raw(base))]
    return [base.with_agent(getattr(args, "sub_agent", None) or args.agent)]
