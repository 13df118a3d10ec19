"""Which agents a command acts on, as ``openclaw memory`` picks them.

``--agent`` is a global option (accepted before or after the command). Without
it, ``status`` and ``index`` cover every configured agent (OpenClaw's
``resolveAgentIds``); the other commands act on the default agent, or on every
configured agent with ``--all``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Protocol

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.paths import list_agent_ids, resolve_agent_id
from memindex.pipeline.config.settings import DEFAULT_AGENT, AgentSettings, Context, load_raw
from memindex.pipeline.errors import ConfigError

if TYPE_CHECKING:
    from memindex.pipeline.search.backend import SearchEngine


class Serving(Protocol):
    """What a CLI command run inside ``memindex serve`` for a ``--server`` caller runs against
    (``serve.CliServing``): the server's config and agents, and its warm engines."""

    base: Context
    only: str | None

    def context(self, agent_id: str) -> Context: ...

    def engine(self, settings: AgentSettings) -> SearchEngine: ...


def context_for(args: argparse.Namespace, agent: str) -> Context:
    return Context(agent, args.config, args.state_dir, args.workspace)


def _config(args: argparse.Namespace) -> dict[str, Any]:
    return load_raw(context_for(args, DEFAULT_AGENT))


def configured_agents(args: argparse.Namespace) -> list[str]:
    """Every configured agent id, in ``agents.list`` order (``main`` when the list is empty)."""
    return list_agent_ids(_config(args))


def base_context(args: argparse.Namespace) -> Context:
    """The global options as a Context: ``--agent`` (normalised; an unknown id is an error naming
    the configured ones), else the config's default agent (OpenClaw's ``resolveDefaultAgentId``)."""
    return context_for(args, resolve_agent_id(_config(args), args.agent))


def agent_contexts(args: argparse.Namespace, *, all_by_default: bool = False) -> list[Context]:
    """``--agent``; every configured agent with ``--all`` (or, for status and index, without
    ``--agent``); else the default agent."""
    if args.agent or not (getattr(args, "all", False) or all_by_default):
        return [base_context(args)]
    agents = configured_agents(args)
    if args.workspace and len(agents) > 1:
        # One directory for every agent would pour it into each agent's store (and drop their own).
        raise ConfigError("--workspace", f"names one agent's workspace, and {len(agents)} agents are configured "
                                         f"({', '.join(agents)}); add --agent ID")
    return [context_for(args, a) for a in agents]


def command_context(args: argparse.Namespace, agent: str | None = None) -> Context:
    """The Context a one-shot command runs with: ``agent``'s, else the global options'; inside
    ``memindex serve`` (a --server call) the server's own for that agent."""
    ctx = context_for(args, agent) if agent else base_context(args)
    serving: Serving | None = getattr(args, "serving", None)  # run by `memindex serve` for a --server caller
    return ctx if serving is None else serving.context(_agent_id(ctx))


def command_settings(args: argparse.Namespace, agent: str | None = None) -> AgentSettings:
    return settings_for(command_context(args, agent))


def command_agents(args: argparse.Namespace) -> list[str]:
    """``--agent``, else every configured agent (``openclaw memory status|index``)."""
    return [_agent_id(c) for c in agent_contexts(args, all_by_default=True)]


def _agent_id(ctx: Context) -> str:
    # Every Context made here names its agent (None, "the default one", is resolved above).
    assert ctx.agent_id is not None
    return ctx.agent_id
