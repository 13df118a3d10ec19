"""The queue boundary, defined once: every message an actor takes, where it goes, and how it travels.

Each actor takes exactly one typed payload, a msgspec ``Struct`` below; ``send(payload)`` finds the
payload type's actor and queue in ``_ROUTES`` (nobody else names an actor), and the actor's edge
decodes the payload from the message with the very type the sender encoded, so what a sender can
send is what its actor can decode.

On the queue a payload is dramatiq's positional ``args``: the Structs are ``array_like``, so the
message keeps the layout operators and the failure machinery read (``args[0]`` the pinned Context as
a JSON object, ``args[1]`` the generation, then the records, each a JSON object with its ``path``;
``workers/failures.py`` and ``workers/guard.py``). A sync's Context also carries ``stamp``, the
config's stamp its plan was made under (``Context.stamp``): an older version's decoder ignores the
key, and a Context without it (an older sender's) resolves the config as it is now. The records inside (``FileJob``, ``FileRecord``...)
are the pipeline's own dataclasses, which msgspec encodes and decodes as they are; a vector travels
as base64 float32 (``bytes``).

A message that does not decode as its actor's payload (queued by another version of memindex) is not
retried: it fails with ``UndecodableMessage``, which the failure reporter puts on its dead letter
(``memindex dead-letters``, ``status``), and its files, still pending in the store, are planned
again by the next sync (the Markdown is the source of truth).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Generic, Literal, TypeVar

import dramatiq
import msgspec

from memindex.pipeline.config.settings import Context
from memindex.pipeline.errors import MemindexError
from memindex.pipeline.index.records import FileJob, FileRecord, SessionDelta, TouchRecord
from memindex.pipeline.store.schema import FileKey
from memindex.pipeline.store.vectors import pack
from memindex.workers.broker import (BATCH_QUEUE, EMBED_QUEUE, SYNC_QUEUE, WRITE_QUEUE, get_broker, installed, on_install,
                                     write_queue_for)


class UndecodableMessage(MemindexError):
    """A queue message that is not its actor's payload (another version's): dead-lettered, not retried."""


# --- the payloads -------------------------------------------------------------------------------

class Payload(msgspec.Struct, array_like=True):
    """Base of every actor's payload: its fields are the message's positional args, in order."""


class ComputeSpec(msgspec.Struct):
    """An agent's embedding settings without secrets: what the compute side needs instead of the
    config file (``compute.compute_spec``; ``compute.settings_from_spec`` reads it back)."""

    agent_id: str
    workspace: str
    state_dir: str
    store: str
    config: str | None
    memory_search: dict[str, Any]
    providers: dict[str, Any]
    memory: dict[str, Any]
    secrets: int = 0  # how many secret fields were left out
    # The OpenClaw schema the config was read as (``AgentSettings.config_schema``: 2026.9 sends provider
    # keys only to the provider's own endpoint) and how it spells the settings' keys (``AgentSettings.keys``
    # as base, agent, agent-set keys), for a compute host that cannot read the config. Absent (a message
    # of an older sender): 2026.3's.
    config_schema: str = ""
    keys: tuple[str, str | None, tuple[str, ...]] | None = None


class Part(msgspec.Struct, array_like=True):
    """Where a record cut into parts (``compute.pack``) belongs: its set, its index, how many."""

    set_id: str
    index: int
    count: int


WriteMode = Literal["files", "append", "reference"]


class Item(msgspec.Struct, omit_defaults=True):
    """A record on its way to the writer: replace the file's chunks (``files``), append (``append``),
    or only cache its vectors (``reference``: the search's reference texts, ``WriteReference``)."""

    mode: WriteMode
    record: FileRecord
    part: Part | None = None


class SyncAgent(Payload):
    ctx: Context
    force: bool = False
    reason: str = "manual"


class IndexFiles(Payload):
    ctx: Context
    generation: int
    jobs: list[FileJob]
    dims: int | None = None  # the vector size the plan was made at (None: unknown, or keyword-only)
    # The plan's first group (or, with no jobs, a plan with nothing else to send: offer_reference):
    # also embeds the search's reference texts if the cache lacks them (pipeline/search/reference.py).
    # An older sender's message has no such field: False.
    reference: bool = False


class IndexSessionDelta(Payload):
    ctx: Context
    generation: int
    delta: SessionDelta
    dims: int | None = None


class EmbedChunks(Payload):
    ctx: Context
    generation: int
    spec: ComputeSpec
    items: list[Item]


class WritePlan(Payload):
    ctx: Context
    generation: int
    fingerprint: dict[str, Any]
    pending: list[FileKey]
    deletes: list[FileKey]
    planned_at: int | None = None
    keep: list[FileKey] = []


class WriteFiles(Payload):
    ctx: Context
    generation: int
    records: list[FileRecord]


class WriteReference(Payload):
    """The search's reference texts with their vectors: embedding-cache rows only (no file, chunk,
    FTS or vector rows, nothing pending), for the ranking's background in a tiny workspace."""

    ctx: Context
    generation: int
    records: list[FileRecord]


class WriteTextFirst(Payload):
    ctx: Context
    generation: int
    records: list[FileRecord]


class WriteSessionAppend(Payload):
    ctx: Context
    generation: int
    records: list[FileRecord]


class WriteParts(Payload):
    ctx: Context
    generation: int
    items: list[Item]


class WriteTouch(Payload):
    ctx: Context
    generation: int
    records: list[TouchRecord]


class WriteDeletes(Payload):
    ctx: Context
    generation: int
    keys: list[FileKey]


class BatchSubmit(Payload):
    ctx: Context
    spec: ComputeSpec
    token: str | None = None


class BatchPoll(Payload):
    ctx: Context
    spec: ComputeSpec
    job_key: str
    token: str


class BatchFinish(Payload):
    ctx: Context
    spec: ComputeSpec
    job_key: str
    token: str


# --- where each payload goes ----------------------------------------------------------------------

@dataclass(frozen=True)
class Route:
    actor_name: str  # also what dead letters, logs and `queues` name the message by
    queue: str  # its queue (a write payload goes to its store's shard instead: ``send(store=)``)


_ROUTES: dict[type[Payload], Route] = {
    SyncAgent: Route("sync_agent", SYNC_QUEUE),
    IndexFiles: Route("index_files", SYNC_QUEUE),
    IndexSessionDelta: Route("index_session_delta", SYNC_QUEUE),
    EmbedChunks: Route("embed_chunks", EMBED_QUEUE),
    WritePlan: Route("write_plan", WRITE_QUEUE),
    WriteFiles: Route("write_files", WRITE_QUEUE),
    WriteReference: Route("write_reference", WRITE_QUEUE),
    WriteTextFirst: Route("write_text_first", WRITE_QUEUE),
    WriteSessionAppend: Route("write_session_append", WRITE_QUEUE),
    WriteParts: Route("write_parts", WRITE_QUEUE),
    WriteTouch: Route("write_touch", WRITE_QUEUE),
    WriteDeletes: Route("write_deletes", WRITE_QUEUE),
    BatchSubmit: Route("batch_submit", BATCH_QUEUE),
    BatchPoll: Route("batch_poll", BATCH_QUEUE),
    BatchFinish: Route("batch_finish", BATCH_QUEUE),
}

WRITE_PAYLOADS: tuple[type[Payload], ...] = tuple(t for t, r in _ROUTES.items() if r.queue == WRITE_QUEUE)


def route_of(kind: type[Payload]) -> Route:
    return _ROUTES[kind]


def payload_type(actor_name: str) -> type[Payload] | None:
    """The payload type an actor of this name takes (None: not one of ours)."""
    return next((t for t, r in _ROUTES.items() if r.actor_name == actor_name), None)


# --- encoding and decoding ------------------------------------------------------------------------

def _packed_record(rec: FileRecord) -> FileRecord:
    """Vectors travel as packed float32 (base64 in JSON), never as a JSON list of floats: a quarter
    of the size, and what the store keeps anyway. A copy when a vector needs packing (the sender's
    record is left as it is)."""
    if not any(isinstance(c.embedding, list) for c in rec.chunks):
        return rec
    return replace(rec, chunks=[replace(c, embedding=pack(c.embedding) if c.embedding else None)
                                if isinstance(c.embedding, list) else c for c in rec.chunks])


def _packed(payload: Payload) -> Payload:
    if isinstance(payload, (WriteFiles, WriteTextFirst, WriteSessionAppend, WriteReference)):
        return msgspec.structs.replace(payload, records=[_packed_record(r) for r in payload.records])
    if isinstance(payload, (EmbedChunks, WriteParts)):
        return msgspec.structs.replace(payload, items=[msgspec.structs.replace(i, record=_packed_record(i.record))
                                                       for i in payload.items])
    return payload


def record_json(record: FileRecord) -> str:
    """A record as JSON, the form it has in a message: for batch state that outlives this process."""
    return msgspec.json.encode(_packed_record(record)).decode()


def record_from_json(raw: bytes | str) -> FileRecord:
    """``record_json``'s record back (and a record stored by an older version, whose form is the same)."""
    return msgspec.json.decode(raw, type=FileRecord)


def encode(payload: Payload) -> tuple[Any, ...]:
    """The message args of ``payload`` (JSON-safe builtins)."""
    args = msgspec.to_builtins(_packed(payload))
    assert isinstance(args, list)  # (array_like: always a list)
    return tuple(args)


P = TypeVar("P", bound=Payload)


def decode(kind: type[P], args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any] | None = None) -> P:
    """``kind`` from a message's args; ``UndecodableMessage`` saying why when they are not one."""
    if kwargs:  # this version's messages carry no keyword args: an older sender's
        raise UndecodableMessage(f"a {route_of(kind).actor_name} message with keyword arguments "
                                 f"({', '.join(sorted(kwargs))}): sent by another version of memindex; "
                                 "the next sync plans its files again")
    try:
        return msgspec.convert(list(args), kind)
    except (msgspec.ValidationError, MemindexError, TypeError, ValueError) as exc:
        raise UndecodableMessage(f"a {route_of(kind).actor_name} message that is not one ({exc}): sent by another "
                                 "version of memindex; the next sync plans its files again") from None


def send(payload: Payload, *, store: Path | str | None = None, queue: str | None = None,
         delay_ms: int | None = None) -> dramatiq.Message[Any]:
    """Enqueue ``payload`` for its actor, ``delay_ms`` later when given.

    A write payload names its ``store``: it goes to the write queue (shard) that owns that store,
    so one store's plan and writes stay in one FIFO queue (``broker.write_queue_for``). ``queue``
    instead: a shard the sender already looked up (to wait for its backlog first)."""
    route = _ROUTES[type(payload)]
    if store is not None:
        if route.queue != WRITE_QUEUE:
            raise ValueError(f"{type(payload).__name__} is no write payload: it has no store's queue")
        queue = write_queue_for(str(store))
    message: dramatiq.Message[Any] = dramatiq.Message(queue_name=queue or route.queue, actor_name=route.actor_name,
                                                      args=encode(payload), kwargs={}, options={})
    return get_broker().enqueue(message, delay=delay_ms)


# --- the actors -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Handler(Generic[P]):
    kind: type[P]
    fn: Callable[[P], None]
    options: dict[str, Any]

    def edge(self, *args: Any, **kwargs: Any) -> None:
        """What dramatiq calls: decode the payload, then the actor's function."""
        self.fn(decode(self.kind, args, kwargs))


_HANDLERS: dict[type[Payload], Handler[Any]] = {}


def actor(kind: type[P], **options: Any) -> Callable[[Callable[[P], None]], Callable[[P], None]]:
    """Make ``fn(payload: kind)`` the actor for ``kind``'s messages, with dramatiq's actor
    ``options`` (retries, time limit, ``throws``...). It is declared on the broker when one is
    built (``broker.get_broker``), or at once if one is; the function itself stays a plain function."""
    def register(fn: Callable[[P], None]) -> Callable[[P], None]:
        throws = options.get("throws", ())
        throws = throws if isinstance(throws, tuple) else (throws,)
        # retrying cannot make another version's message decode
        _HANDLERS[kind] = Handler(kind, fn, {**options, "throws": (*throws, UndecodableMessage)})
        broker = installed()
        if broker is not None:  # imported after the broker was built: declared now
            _declare_one(broker, kind)
        return fn

    return register


def _declare(broker: dramatiq.Broker) -> None:
    for kind in list(_HANDLERS):
        _declare_one(broker, kind)


def _declare_one(broker: dramatiq.Broker, kind: type[Payload]) -> None:
    route, handler = _ROUTES[kind], _HANDLERS[kind]
    declare = dramatiq.actor(broker=broker, actor_name=route.actor_name, queue_name=route.queue, **handler.options)
    declare(handler.edge)


def handled() -> set[type[Payload]]:
    """The payload types that have an actor (every one, once ``workers.actors`` is imported)."""
    return set(_HANDLERS)


on_install(_declare)
