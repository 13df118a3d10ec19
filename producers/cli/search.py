"""``memindex search``: one agent's memory searched in this process (or, inside ``memindex serve``,
on the server's warm engine), printed as ``openclaw memory search`` prints it."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from memindex.pipeline.config.paths import validate_agent_id
from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.search.backend import SearchEngine, open_search
from memindex.pipeline.search.engine import query_problem
from memindex.pipeline.search.scope import agent_from_key
from memindex.producers.cli.agents import Serving, command_settings, configured_agents
from memindex.producers.cli.openclaw_format import search_text, without_citations
from memindex.producers.cli.options import say, say_error


def _engine(args: argparse.Namespace, settings: AgentSettings) -> SearchEngine:
    serving: Serving | None = getattr(args, "serving", None)
    if serving is not None:  # the server's warm engine for this agent
        return serving.engine(settings)
    # "auto": the query embedder resolves lazily, so a keyword-only index never
    # imports a provider SDK (CLI start-up time).
    return open_search(settings, query_embedder="auto")


def run(args: argparse.Namespace) -> int:
    keyed = agent_from_key(args.session_key)
    if keyed is not None:  # the session's agent, as OpenClaw picks it (and MCP / HTTP do)
        keyed_id = validate_agent_id(keyed, "--session-key")
        if args.agent and validate_agent_id(args.agent, "--agent") != keyed_id:
            say_error(f"--agent {args.agent} does not match the session key's agent {keyed!r}")
            return 2
        configured = configured_agents(args)
        if keyed_id not in configured:
            say_error(f"invalid option: --session-key: unknown agent {keyed!r}; configured: {', '.join(configured)}")
            return 2
        args.agent = keyed_id
    settings = command_settings(args)
    engine = _engine(args, settings)
    opts = dict(max_results=args.max_results, min_score=args.min_score, session_key=args.session_key,
                corpus=args.corpus)
    if args.query_text is not None:  # `--query TEXT`, openclaw memory search's alternative to QUERY
        if args.query:
            say_error(f"give the query once: as QUERY or --query, not both ({' '.join(args.query)!r} was given too)")
            return 2
        args.query = [args.query_text]
    if args.queries:
        if args.query:  # they were ignored, with exit 0
            say_error(f"give either a QUERY or --queries FILE, not both ({' '.join(args.query)!r} was given too)")
            return 2
        bad = 0  # lines answered with an error: exit 1 once every line has had its answer
        src = sys.stdin if args.queries == "-" else open(args.queries, encoding="utf-8")
        with src:
            for n, line in enumerate(src, 1):
                line = line.strip()
                if not line:
                    continue
                # A bad line answers with the line's own id when it has one (else null) and its
                # line number: never a line number in the id field, where it could be a user's id.
                try:
                    item = json.loads(line)
                except ValueError as exc:
                    print(json.dumps({"id": None, "line": n, "error": f"line {n} is not JSON: {exc}"}))
                    bad += 1
                    continue
                if not isinstance(item, dict):
                    print(json.dumps({"id": None, "line": n, "error": f"line {n} is not a JSON object"}))
                    bad += 1
                    continue
                qid, query = item.get("id", n), item.get("query")
                unknown = sorted(set(item) - {"id", "query"})
                if unknown:  # `"agent"` or `"maxResults"` were silently dropped: another agent's answer
                    print(json.dumps({"id": item.get("id"), "line": n, "error": (
                        f"line {n} has field(s) {', '.join(map(repr, unknown))} that --queries does not take; a line "
                        "takes \"id\" and \"query\" (give --agent, --max-results, --min-score on the command)")},
                        ensure_ascii=False))
                    bad += 1
                    continue
                if not isinstance(query, str) or not query.strip():
                    what = ("has no \"query\"" if query is None else "has an empty query" if isinstance(query, str)
                            else f"has a {type(query).__name__} query, not a string")
                    print(json.dumps({"id": qid, "line": n, "error": f"line {n} {what}"}, ensure_ascii=False))
                    bad += 1
                    continue
                answer = engine.search(query, **opts).as_dict()
                print(json.dumps({"id": qid, **answer}, ensure_ascii=False))
                bad += bool(answer.get("unavailable"))  # answered, but the search failed
        if bad:
            say_error(f"{bad} line(s) of {args.queries} could not be searched (their answers say why)")
        return 1 if bad else 0
    if not args.query:
        say_error("give a QUERY or --queries FILE")
        return 2
    args.query = [_arg_text(q) for q in args.query]
    why = query_problem(" ".join(args.query))  # `search ""` answered "No matches." where no query is a usage error
    if why:
        say_error(why)
        return 2
    resp = engine.search(" ".join(args.query), **opts)
    if not args.session_key:  # OpenClaw's CLI prints no citations (they are the chat tool's)
        without_citations(resp.results)
    failed = bool(resp.extra.get("unavailable"))  # "No matches." said a failed search found nothing
    if args.json:
        print(json.dumps(resp.as_dict(), ensure_ascii=False, indent=2))
        return 1 if failed else 0
    if failed:
        say_error(f"memory search is unavailable: {resp.extra.get('error')}")
        return 1
    # stdout is OpenClaw's shape exactly; what it does not print goes to stderr.
    if resp.extra.get("disabled"):  # OpenClaw's CLI line when the agent has no memory manager
        print("Memory search disabled.")
        return 0
    if resp.warning:
        say(resp.warning)
    if resp.indexing:
        say("indexing is pending; results may be incomplete")
    if args.verbose and resp.results:
        say(f"{len(resp.results)} result(s) [{resp.mode}, provider {resp.provider}"
            + (" (fallback)" if resp.fallback else "") + "]", prefix=None, level=logging.INFO)
    print(search_text(resp.results))
    return 0


def _arg_text(text: str) -> str:
    """A command-line argument as the UTF-8 the user typed: Python without UTF-8 mode in the C
    locale hands non-ASCII bytes over as surrogates, and a query holding them failed to embed
    (and matched nothing)."""
    if not any("\udc80" <= ch <= "\udcff" for ch in text):
        return text
    return os.fsencode(text).decode("utf-8", "replace")
