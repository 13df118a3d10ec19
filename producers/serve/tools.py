"""The memory operations every server transport exposes: search, get, status.

One process serves every configured agent: ``MemoryTools`` keeps the base
``Context`` (config, state dir, workspace) and resolves an agent per call.
Engines come from ``engine_for``, one per agent settings, so store
connections and the query embedder stay loaded between calls; each engine
schedules syncs the way the in-process runtime hooks do (on search and on a
new session key), so the index stays fresh without a separate watcher.
Payloads are exactly the in-process API's (``SearchResponse.as_dict()``,
``MemoryGetResult.as_dict()``, the engine's ``status()``).
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import AgentSettings, Context, config_stamp, list_agent_ids, load_raw
from memindex.pipeline.config.paths import default_agent_id, validate_agent_id
from memindex.pipeline.errors import ConfigError, MemindexError, MemoryGetError, StoreError
from memindex.pipeline.search.aio import run_in_pool, run_waiting
from memindex.pipeline.search.backend import SearchEngine, engine_for
from memindex.pipeline.search.corpus import CORPORA
from memindex.pipeline.search.engine import min_score_problem, query_problem
from memindex.pipeline.search.get import amemory_get
from memindex.pipeline.search.scope import agent_from_key
from memindex.pipeline.embeddings.embedder import provider_info
from memindex.pipeline.status import index_status, source_scan, status_entry
from memindex.pipeline.store import db
from memindex.producers.enqueue import sync_and_wait
from memindex.producers.hooks import schedule_sync


@contextmanager
def refusals() -> Iterator[None]:
    """Our own errors as ``OperationError``s, so every transport answers with their message (an
    invalid config said only "Error executing tool" over MCP, and 500 "internal" over HTTP)."""
    try:
        yield
    except OperationError:
        raise
    except ConfigError as exc:
        raise OperationError("config_error", str(exc), 500) from None
    except StoreError as exc:
        raise OperationError("store_error", str(exc), 503) from None
    except (db.Error, OSError) as exc:  # the store file itself (unreadable, a directory, corrupt): the
        # store's driver's errors (sqlean's are not the stdlib's: a damaged store answered 500 "internal")
        raise OperationError("store_error", f"cannot read the memory index: {type(exc).__name__}: {exc}", 503) \
            from None
    except MemindexError as exc:
        raise OperationError("error", str(exc), 500) from None


class OperationError(MemindexError):
    """A request the server refuses: ``code`` is stable for programs, the message is for people
    (and models); ``status`` is the HTTP status the JSON API answers with."""

    def __init__(self, code: str, message: str, status: int = 400, payload: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        # payload: a failed search's answer in OpenClaw's failure shape (MCP keeps it beside the error)
        self.code, self.status, self.payload = code, status, payload

    def as_dict(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": str(self)}}


# Each operation's wire arguments -> MemoryTools keyword: one table for the JSON API and MCP,
# where an unknown argument (a misspelt ``maxresults``) is refused, never silently ignored.
SEARCH_FIELDS = {"query": "query", "maxResults": "max_results", "minScore": "min_score",
                 "agent": "agent", "sessionKey": "session_key", "corpus": "corpus"}
GET_FIELDS = {"path": "path", "from": "from_line", "lines": "lines", "agent": "agent"}
STATUS_FIELDS = {"agent": "agent"}
INDEX_FIELDS = {"agent": "agent", "force": "force"}


def escaped(name: str) -> str:
    """A client's name as a message can carry it: a lone surrogate (JSON's ``"\\ud800"``) as its
    escape. Echoed raw, no UTF-8 answer could encode it: 500 internal, with tracebacks."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def check_fields(data: dict[str, Any], fields: dict[str, str]) -> dict[str, Any]:
    """``data``'s arguments as MemoryTools keywords; an unknown one is an ``OperationError``."""
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise OperationError("bad_request", f"unknown field(s) {', '.join(map(escaped, unknown))}; "
                                            f"expected {', '.join(fields)}")
    return {fields[k]: v for k, v in data.items()}


# Each wire argument's type and least value: what both transports check before anything runs (the
# MCP SDK's own validation coerced `true` and "3" to a maxResults and answered in pydantic's words).
_WIRE_TYPES: dict[str, tuple[type | tuple[type, ...], float | None]] = {
    "query": (str, None), "path": (str, None), "agent": (str, None), "sessionKey": (str, None),
    "corpus": (str, None), "force": (bool, None),
    # from/lines 0 mean "not given" (from the first line; every line), as in-process and in OpenClaw.
    "maxResults": (int, 1), "minScore": ((int, float), None), "from": (int, 0), "lines": (int, 0)}


def check_arguments(data: dict[str, Any], fields: dict[str, str], required: str | None = None) -> dict[str, Any]:
    """``check_fields``, then ``required`` present and every value of its wire type (one
    ``OperationError`` naming the argument)."""
    kw = check_fields(data, fields)
    if required is not None and data.get(required) is None:
        raise OperationError("bad_request", f"{required} is required")
    for name, value in data.items():
        _wire(name, value)
    return kw


def _wire(name: str, value: Any) -> Any:
    """``value`` if None or of wire argument ``name``'s type and least value (``_WIRE_TYPES``), and
    one of ``_WIRE_VALUES[name]`` where the argument has a fixed set."""
    kind, minimum = _WIRE_TYPES[name]
    value = _optional(value, name, kind, minimum=minimum)
    allowed = _WIRE_VALUES.get(name)
    if value is not None and allowed is not None and value not in allowed:
        raise OperationError("bad_request", f"{name} must be one of: {', '.join(allowed)}")
    return value


# Wire arguments with a fixed set of values, checked with their type: over MCP the SDK's own check of
# the schema's enum answered "1 validation error for memory_searchArguments ..." in pydantic's words.
_WIRE_VALUES: dict[str, tuple[str, ...]] = {"corpus": CORPORA}


def _optional(value: Any, name: str, kind: type | tuple[type, ...], *, minimum: float | None = None) -> Any:
    """``value`` if None or of ``kind`` (bools are not numbers here), else a bad_request naming ``name``."""
    if value is None:
        return None
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        expected = ("an integer" if kind is int else "a number" if kind == (int, float)
                    else "true or false" if kind is bool else "a string")
        raise OperationError("bad_request", f"{name} must be {expected}")
    if isinstance(value, float) and not math.isfinite(value):  # JSON's Infinity / NaN, which Python reads
        raise OperationError("bad_request", f"{name} must be a finite number")
    if minimum is not None and isinstance(value, (int, float)) and value < minimum:
        raise OperationError("bad_request", f"{name} must be at least {minimum:g}")
    return value


# A search the engine answered with OpenClaw's failure shape, by its flag (first match: an unavailable
# search is flagged disabled too): the error code, HTTP status and message a server refuses it with. A
# disabled agent is 403 as for memory_get (its search answered 200 with no results).
_FAILED_SEARCH = (("unavailable", 503, "memory search is unavailable for agent {agent!r}: {error}"),
                  ("disabled", 403, "memory search is disabled for agent {agent!r}"))


class MemoryTools:
    """search / get / status for any configured agent, from one long-lived process; with ``only``,
    for that agent alone (``memindex mcp --agent ID``: a server per agent keeps their memories
    apart, whatever the client asks for)."""

    transport = "library"  # what the search metrics label its calls with: build_app/build_server set http/mcp

    def __init__(self, base: Context, *, only: str | None = None) -> None:
        self.base, self.only = base, only
        self._lock = threading.Lock()
        self._ids: tuple[object, list[str], str] | None = None  # (config stamp, agent ids, default)

    def agent_ids(self) -> list[str]:
        """Configured agent ids, re-read only when the config (or a file it includes) changes."""
        return self._agents()[0]

    def _agents(self) -> tuple[list[str], str]:
        """(configured ids, the config's default agent), as the config reads now."""
        stamp = config_stamp(self.base)
        with self._lock:
            if self._ids is not None and self._ids[0] == stamp:
                return self._ids[1], self._ids[2]
        cfg = load_raw(self.base)
        ids, default = list_agent_ids(cfg), default_agent_id(cfg)
        if self.only is not None:
            ids = [i for i in ids if i == self.only]
        with self._lock:
            self._ids = (stamp, ids, default)
        return ids, default

    def default_agent(self) -> str:
        """The server's ``--agent``, else the config's default agent as it reads now (OpenClaw's
        resolveDefaultAgentId: ``default: true``, else the first entry). Pinned at start, a server
        kept answering agent-less calls from the old default's memory after the config moved it."""
        ids, default = self._agents()
        if not ids:  # only with ``only``: the config no longer lists it
            raise OperationError("unknown_agent", f"agent {self.only!r} is no longer configured", 404)
        if self.only is not None:
            return self.only
        return default if default in ids else ids[0]

    def settings(self, agent: str | None) -> AgentSettings:
        agent = _wire("agent", agent)
        with refusals():
            ids = self.agent_ids()
            # An empty or blank id is refused as the CLI's --agent "" is (it quietly meant the default agent).
            if agent is not None:
                try:  # normalised as everywhere else ("Work" is "work"); a path-like id is refused
                    agent_id = validate_agent_id(agent, "agent")
                except ConfigError as exc:  # a request argument, not the config: say it as one
                    raise OperationError("bad_request", exc.detail) from None
            else:
                agent_id = self.default_agent()
            if agent_id not in ids:
                served = (f"this server serves only agent {self.only!r} (started with --agent)" if self.only
                          else f"configured agents: {', '.join(ids)}")
                raise OperationError("unknown_agent", f"unknown agent {agent.strip() if agent else agent_id!r}; "
                                     f"{served}", 404)
            return settings_for(self.context(agent_id))

    def context(self, agent_id: str) -> Context:
        """``agent_id``'s Context. The server's --workspace names its own agent's workspace; every
        other agent keeps the one its config gives it (applied to all, it poured one agent's
        files into the others' stores)."""
        if self.base.agent_id is None:  # started while the config could not be loaded: own is the default agent
            own = agent_id == self._agents()[1]  # (as the config reads now)
            return Context(agent_id, self.base.config, self.base.state_dir, self.base.workspace if own else None)
        if agent_id == self.base.agent_id:
            return self.base
        return Context(agent_id, self.base.config, self.base.state_dir, None)

    def engine(self, settings: AgentSettings) -> SearchEngine:
        # "auto": the query embedder is built on the first vector search and then kept.
        return engine_for(settings, query_embedder="auto", schedule_sync=schedule_sync)

    async def search(self, query: Any, *, max_results: Any = None, min_score: Any = None,
                     agent: Any = None, session_key: Any = None, corpus: Any = None) -> dict[str, Any]:
        if not isinstance(query, str):
            raise OperationError("bad_request", "query must be a string")
        opts = dict(max_results=_wire("maxResults", max_results), min_score=_wire("minScore", min_score),
                    session_key=_wire("sessionKey", session_key), corpus=_wire("corpus", corpus))
        # What `memindex search` refuses, refused here in its words (both answered 200, no results).
        if why := query_problem(query):
            raise OperationError("bad_request", why)
        if min_score is not None and (why := min_score_problem(min_score)):
            raise OperationError("bad_request", f"minScore {why}")
        settings = self.settings(self._session_agent(_wire("agent", agent), session_key))
        # lazy: workers.metrics loads dramatiq; the tools serve a library user without the queue's packages
        from memindex.workers.metrics import search_recorders

        started, ok = time.perf_counter(), False
        try:
            with refusals():
                result = (await self.engine(settings).asearch(query, **opts)).as_dict()
            for flag, status, why in _FAILED_SEARCH:  # the engine answers every failure; a server says it failed
                if result.get(flag):
                    raise OperationError(flag, why.format(agent=settings.agent_id, error=result.get("error")),
                                         status, payload=result)
            ok = True
            return result
        finally:
            search_recorders().observe(settings.agent_id, time.perf_counter() - started, ok, self.transport)

    def _session_agent(self, agent: str | None, session_key: str | None) -> str | None:
        """The agent a search is for, as OpenClaw picks a session's agent: the one named, else the
        one in an ``agent:<id>:...`` session key, else the default. A search naming one agent with
        another's session key is refused (it read the default agent's memory for any session)."""
        keyed = agent_from_key(session_key)
        if keyed is None or agent is None:
            return keyed if agent is None else agent  # (an empty agent is refused by ``settings``)
        try:
            same = validate_agent_id(agent, "agent") == validate_agent_id(keyed, "sessionKey")
        except ConfigError as exc:
            raise OperationError("bad_request", exc.detail) from None
        if not same:
            raise OperationError("bad_request", f"agent {agent.strip()!r} does not match the session key's "
                                 f"agent {keyed!r}; name one agent (or leave agent out)")
        return agent

    async def get(self, path: Any, *, from_line: Any = None, lines: Any = None,
                  agent: Any = None) -> dict[str, Any]:
        if not isinstance(path, str):
            raise OperationError("bad_request", "path must be a string, e.g. memory/2026-02-10.md")
        from_line, lines = _wire("from", from_line), _wire("lines", lines)
        settings = self.settings(agent)
        if not settings.enabled:
            raise OperationError("disabled", f"memory is disabled for agent {settings.agent_id!r}", 403)
        try:
            return (await amemory_get(settings, path, from_line, lines)).as_dict()
        except MemoryGetError as exc:
            raise OperationError("path_rejected", str(exc)) from None

    async def index(self, *, agent: Any = None, force: Any = None) -> dict[str, Any]:
        """Sync the agent's index now and wait for it (``memindex index``; ``openclaw memory index``
        through the OpenClaw plugin): the plan's counts, then the status it leaves."""
        force = _wire("force", force)
        settings = self.settings(agent)
        if not settings.enabled:
            raise OperationError("disabled", f"memory is disabled for agent {settings.agent_id!r}", 403)
        with refusals():
            counts = await run_waiting(sync_and_wait, self.context(settings.agent_id), force=bool(force))
        return {"agentId": settings.agent_id, **counts, "status": await self.status(agent=settings.agent_id)}

    async def status(self, *, agent: Any = None) -> dict[str, Any]:
        """The agent's status: ``status --json``'s ``status`` object (OpenClaw's keys, ours beside
        them) with ``agentId`` and ``scan`` beside it, flat, plus the configured ``agents``."""
        settings = self.settings(agent)
        with refusals():
            report = await run_in_pool(self.engine(settings).status, probe=True)
            if "workspace" not in report or "store" not in report:
                # The qmd backend says what serves (backend, fallback, its collections); the builtin
                # store's report goes beside it, as `memindex status` shows them: only those four
                # keys reached OpenClaw's status (files, chunks, provider and agentId missing).
                store = await run_in_pool(index_status, settings, provider_info(settings))
                report = {**store, **report}
            entry = status_entry(report, scan=await run_in_pool(source_scan, settings))
            report = {**entry["status"], "agentId": entry["agentId"], "scan": entry["scan"]}
        return {**report, "agents": self.agent_ids()}
