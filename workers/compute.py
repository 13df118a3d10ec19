"""The compute side (issue 18): embed chunk texts that arrive in the message, never touch a file or a store.

The file side (``workers.index``, on the ``sync`` queue) reads, chunks and looks
each chunk up in the store's embedding cache; ``route_records`` then sends the
records that still miss vectors here, on the ``embed`` queue, and the rest
straight to the writer. ``embed_chunks`` embeds the misses and hands the
finished records to the write queue (shard) that owns the store.

What a message carries, so a compute worker needs only Redis and the provider:

- the pinned ``Context`` (first argument, as in every message: logs, the guard);
- ``spec``: the agent's resolved ``memorySearch`` and ``models.providers`` with
  every ``apiKey`` and ``headers`` value removed, the store path (to pick the
  write shard) and the other paths as plain strings (never opened here).
  Secrets come from the compute host: its environment (``OPENAI_API_KEY``, ...)
  or, when the config file the Context names is readable there, from that file;
- the records: chunk texts, hashes, line ranges and the cache hits' vectors
  (so the writer needs no second cache lookup). A message holds at most
  ``EMBED_MSG_CHUNKS`` chunks and about ``EMBED_MSG_BYTES`` bytes: a bigger file
  travels in parts (``part = [set id, index, count]``) that the writer puts
  back together (``writer.write_parts``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Sequence

from memindex.pipeline.config import environ
from memindex.pipeline.config.agents import current_settings, settings_for
from memindex.pipeline.config.openclaw_schema import SettingKeys
from memindex.pipeline.config.records import MemorySettings, MemorySearchSettings
from memindex.pipeline.config.settings import AgentSettings, Context, default_memory
from memindex.pipeline.embeddings.embedder import chunk_embedder_for
from memindex.pipeline.embeddings.base import (InvalidVectorError, ProviderAuthError, ProviderRateLimited,
                                              ProviderTransientError)
from memindex.pipeline.errors import FallbackSwitched, ProviderError, UnknownAgent
from memindex.pipeline.index.prepare import embed_missing
from memindex.pipeline.index.preparers import needs_embedding
from memindex.pipeline.index.fingerprint import EmbeddingIdentity
from memindex.pipeline.index.records import FileRecord
from memindex.pipeline.store.schema import EMBED_PENDING
from memindex.workers import queues
from memindex.workers.broker import EMBED_QUEUE, is_embedded, write_queue_for
from memindex.workers.messages import GROUP_FILES, RETRY, request_resync
from memindex.workers.wire import (ComputeSpec, EmbedChunks, Item, Part, WriteFiles, WriteMode, WriteParts,
                                   WriteReference, WriteSessionAppend, WriteTextFirst, actor, send)
from memindex.workers.writer import wait_for_writer

log = logging.getLogger("memindex.compute")

# A rejected key, a malformed vector or an agent no longer in the config (its work was queued
# before it was removed: 9 attempts over minutes, each "unknown agent") will not get better by
# retrying the message.
NOT_RETRIED = (ProviderAuthError, InvalidVectorError, UnknownAgent)

# Message bounds: one embed (or write) message holds at most this many chunks and about this many
# bytes (texts + vectors, base64, counting the vectors the compute side will add). 256 chunks of
# ~1.6 KB text are ~0.4 MB, plus 2 KB (384 dims) to 8 KB (1536) of vector each: a few provider
# requests, and a Redis value far below its limits. Env vars shrink them (tests).
EMBED_MSG_CHUNKS = environ.EMBED_MSG_CHUNKS.get()
EMBED_MSG_BYTES = environ.EMBED_MSG_BYTES.get()

# The file side waits (bounded) while this many embed messages are ready: without it a backfill
# would put every chunk text of a workspace into Redis before the compute side caught up.
EMBED_BACKLOG_MAX = 64
EMBED_BACKLOG_WAIT_S = 120.0
EMBED_BACKLOG_STUCK_S = 5.0  # the backlog did not shrink for this long: no compute worker runs; send anyway

SECRET_FIELDS = ("apiKey", "headers")
# A write mode's payload. In this order to the writer (one FIFO queue): the reference texts'
# vectors first, so the ranking's background is in before the files it serves.
MODES: dict[WriteMode, type[WriteReference] | type[WriteFiles] | type[WriteSessionAppend]] = {
    "reference": WriteReference, "files": WriteFiles, "append": WriteSessionAppend}


# --- the spec: what the compute side needs instead of the config --------------------------------

# Settings object (by identity, held so its id is not reused) -> its spec: the file side sends one
# with every embed message, and a settings object never changes (a config change makes a new one).
_specs: dict[int, tuple[AgentSettings, ComputeSpec]] = {}
_SPECS_KEPT = 64


def compute_spec(settings: AgentSettings) -> ComputeSpec:
    """The agent's embedding settings as a message part, without secrets."""
    hit = _specs.get(id(settings))
    if hit is not None and hit[0] is settings:
        return hit[1]
    spec = _spec_of(settings)
    if len(_specs) >= _SPECS_KEPT:
        _specs.clear()
    _specs[id(settings)] = (settings, spec)
    return spec


def _spec_of(settings: AgentSettings) -> ComputeSpec:
    ms = settings.memory_search.to_dict()
    providers = copy.deepcopy(settings.providers)
    stripped = 0
    for section in (ms["remote"], *providers.values()):
        if isinstance(section, dict):
            for f in SECRET_FIELDS:
                if section.pop(f, None) is not None:
                    stripped += 1
    ms["remote"].update(apiKey=None, headers={})  # the record's "none set", its fields being required
    return ComputeSpec(agent_id=settings.agent_id, workspace=str(settings.workspace),
                       state_dir=str(settings.state_dir), store=str(settings.store_path),
                       config=str(settings.config_path) if settings.config_path else None,
                       memory_search=ms, providers=providers, memory=settings.memory.to_dict(), secrets=stripped,
                       config_schema=settings.config_schema,
                       keys=(settings.keys.base, settings.keys.agent, tuple(sorted(settings.keys.agent_set))))


def settings_from_spec(spec: ComputeSpec, ctx: Context, *, planned: bool = False) -> AgentSettings:
    """``AgentSettings`` for embedding (and batch jobs), built from a spec: no path in it is opened
    here but the config file's.

    A host that can read the config file the Context names (the embedded broker, a compute host
    with a copy of the config) uses that file's settings, keys included: the same settings the
    file side has. Batch jobs (their state outlives any message) take them as the file is now, so a
    config change reaches work already queued (a batch switched off mid-backfill stops taking new
    work); an embed message (``planned``) those its sync planned with while this process holds
    them (``Context.stamp``), as the file side's messages do. Elsewhere the spec holds, and the
    removed keys come from this host's environment, as ``keys.resolve_api_key`` looks them up after
    the config.
    """
    if spec.config and os.path.isfile(spec.config):
        try:
            return settings_for(ctx) if planned else current_settings(ctx)
        except Exception as exc:  # noqa: BLE001 - then the spec and this host's environment serve
            log.warning("could not read %s (%s); using the message's settings and this host's environment",
                        spec.config, exc)
    return AgentSettings(spec.agent_id, Path(spec.workspace), Path(spec.state_dir), Path(spec.store),
                         True, MemorySearchSettings.from_dict(spec.memory_search),
                         MemorySettings.from_dict(spec.memory) if spec.memory else default_memory(),
                         copy.deepcopy(spec.providers),
                         config_path=Path(spec.config) if spec.config else None, config_schema=spec.config_schema,
                         keys=SettingKeys(spec.keys[0], spec.keys[1], frozenset(spec.keys[2])) if spec.keys
                         else SettingKeys())


# --- bounded messages -------------------------------------------------------------------------

def _chunk_bytes(c: Any, dims: int) -> int:
    """A chunk's share of a message after embedding: its texts and its vector (base64 float32)."""
    vec = c.embedding
    n = (len(vec) if isinstance(vec, bytes) else 4 * len(vec)) if vec else 4 * dims
    return 120 + len(c.text.encode()) + len(c.context.encode()) + (n * 4) // 3


# The vector size a chunk still to be embedded is budgeted at when the index has not learnt its dims
# yet (OpenAI's text-embedding-3-small; a 3072-dim model's messages come out up to twice the budget).
DIMS_GUESS = 1536


def pack(records: list[FileRecord], mode: WriteMode, generation: int,
         lead: Sequence[tuple[WriteMode, FileRecord]] = ()) -> Iterator[list[Item]]:
    """Records as message item lists, each within the chunk and byte bounds (and GROUP_FILES files).

    ``lead``: records of other modes that go first (the reference texts, ``route_records``).
    A record over a bound is cut into parts of consecutive chunks, one message each; every
    part repeats the record's header and names its set, index and count.
    """
    group: list[Item] = []
    chunks = size = 0
    for m, rec in [*lead, *((mode, r) for r in records)]:
        dims = 0 if rec.embedding is None else (rec.embedding.dims or DIMS_GUESS)
        sizes = [_chunk_bytes(c, dims) for c in rec.chunks]
        n, b = len(sizes), sum(sizes)
        if n > EMBED_MSG_CHUNKS or b > EMBED_MSG_BYTES:
            yield from _parts(rec, m, generation, sizes)
            continue
        if group and (len(group) >= GROUP_FILES or chunks + n > EMBED_MSG_CHUNKS or size + b > EMBED_MSG_BYTES):
            yield group
            group, chunks, size = [], 0, 0
        group.append(Item(m, rec))
        chunks += n
        size += b
    if group:
        yield group


def _parts(rec: FileRecord, mode: WriteMode, generation: int, sizes: list[int]) -> Iterator[list[Item]]:
    slices: list[tuple[int, int]] = []
    start = size = 0
    for i, s in enumerate(sizes):
        if i > start and (i - start >= EMBED_MSG_CHUNKS or size + s > EMBED_MSG_BYTES):
            slices.append((start, i))
            start, size = i, 0
        size += s
    slices.append((start, len(sizes)))
    set_id = hashlib.sha256(json.dumps([rec.source, rec.path, rec.hash, rec.base_hash, generation,
                                        len(slices)]).encode()).hexdigest()[:24]
    for k, (a, b) in enumerate(slices):
        part = replace(rec, chunks=rec.chunks[a:b])
        yield [Item(mode, part, Part(set_id, k, len(slices)))]


# --- the file side's send ---------------------------------------------------------------------

def wait_for_compute() -> None:
    """Bounded wait while the embed queue's backlog is over EMBED_BACKLOG_MAX and shrinking."""
    if is_embedded():
        return  # in-process: the sender's own threads consume it, so waiting here could only stall them
    # compute messages take ~100 ms to seconds: polling finer than 0.25 s only burns CPU
    queues.wait_below(EMBED_QUEUE, EMBED_BACKLOG_MAX, EMBED_BACKLOG_WAIT_S, poll_s=0.25,
                      stuck_s=EMBED_BACKLOG_STUCK_S)


def route_records(ctx: Context, settings: AgentSettings, generation: int, records: list[FileRecord],
                  mode: WriteMode = "files", reference: FileRecord | None = None) -> int:
    """Send prepared records on: those still missing text vectors to the compute side, the rest
    to the store's writer; returns how many went to compute. ``reference``: the search's reference
    texts to embed (``reference.reference_record``), in the first compute message, ahead of the
    records that also need vectors (one provider request for both, and the writer takes their
    ``WriteReference`` before the files' write)."""
    todo = [r for r in records if needs_embedding(r)]
    ready = [r for r in records if not needs_embedding(r)]
    queue = write_queue_for(str(settings.store_path))
    for items in pack(ready, mode, generation):
        forward(ctx, queue, generation, items)
    lead: list[tuple[WriteMode, FileRecord]] = [("reference", reference)] if reference is not None else []
    if todo or lead:
        spec = compute_spec(settings)
        for items in pack(todo, mode, generation, lead):
            wait_for_compute()
            send(EmbedChunks(ctx, generation, spec, items))
    return len(todo)


def send_text_first(ctx: Context, settings: AgentSettings, generation: int, records: list[FileRecord]) -> None:
    """Before their vectors are asked for: the text of every record still missing some, to the
    writer, so the files are keyword-searchable whatever the provider does (it may hang for its
    whole deadline and retries). Text only, without a vector space: the write that follows brings
    the vectors and is checked against the index's. A file too big for one message waits for that
    write (its parts are put back together there)."""
    todo = [replace(r, chunks=[replace(c, embedding=None) for c in r.chunks], cache_hits=[], embedding=None)
            for r in records if needs_embedding(r)]
    if not todo:
        return
    queue = write_queue_for(str(settings.store_path))
    for items in pack(todo, "files", generation):
        whole = [i.record for i in items if i.part is None]
        if whole:
            wait_for_writer(queue)
            send(WriteTextFirst(ctx, generation, whole), queue=queue)


def forward(ctx: Context, queue: str, generation: int, items: list[Item]) -> None:
    """Items to the writer: whole records by mode (``write_files`` / ``write_session_append``), parts
    to ``write_parts``; waits (bounded) for the shard's backlog first."""
    wait_for_writer(queue)
    parts = [i for i in items if i.part is not None]
    if parts:
        send(WriteParts(ctx, generation, parts), queue=queue)
    for mode, kind in MODES.items():
        whole = [i.record for i in items if i.part is None and i.mode == mode]
        if whole:
            send(kind(ctx, generation, whole), queue=queue)


# --- the compute actor ------------------------------------------------------------------------

_mismatch_said: set[tuple[Any, ...]] = set()


def _say_mismatch(agent: str | None, embedder: Any, planned: list[EmbeddingIdentity | None], paths: list[str]) -> None:
    """Files planned for one provider, embedded here with another: the writer re-plans them. Said
    once per agent and pair of providers (it was one warning per file: 72 lines for one switch),
    and after a switch to the fallback in this process, as that rather than "different config?"."""
    want = next(p for p in planned if p is not None and p.provider_key != embedder.identity.provider_key)
    key = (agent, want.provider_key, embedder.identity.provider_key)
    first = key not in _mismatch_said
    _mismatch_said.add(key)
    service = getattr(embedder, "service", None)
    if service is not None and getattr(service, "fallback_active", False):
        why = f"planned for {want.provider} before this process switched to its fallback {embedder.identity.provider}"
    else:
        why = (f"planned for {want.provider} but this compute host embeds with {embedder.identity.provider} "
               "(different config?)")
    (log.warning if first else log.debug)("%s: %d file(s) (%s%s) %s; the writer re-plans them", agent, len(paths),
                                          paths[0], ", ..." if len(paths) > 1 else "", why)


@actor(EmbedChunks, time_limit=30 * 60_000, throws=NOT_RETRIED, **RETRY)
def embed_chunks(msg: EmbedChunks) -> None:
    """Embed the chunks without a vector in ``items`` and hand them to the store's writer."""
    ctx, spec = msg.ctx, msg.spec
    settings = settings_from_spec(spec, ctx, planned=True)
    records = [item.record for item in msg.items]
    planned = [r.embedding for r in records]
    provider = spec.memory_search.get("provider")
    why = f"no {provider} embedding provider on this compute host (no API key in its config copy or environment?)"
    try:
        embedder = chunk_embedder_for(settings, cache=False,
                                      planned_dims=next((p.dims for p in planned if p is not None and p.dims), None))
    except (ProviderTransientError, ProviderRateLimited):
        raise  # retried: it may pass
    except ProviderError as exc:
        # The provider cannot be built here (a local model file this host does not have, an SDK
        # it lacks): no retry fixes that. The message was retried for two minutes, then
        # dead-lettered with its text unwritten - not even keyword-searchable - on every sync.
        embedder, why = None, f"this compute host cannot embed: {exc}"
    if embedder is None:
        log.warning("%s: %s; writing the chunks without vectors, embedding pending", ctx.agent_id, why)
        for rec, want in zip(records, planned):
            # Planned with vectors: written keyword-searchable and "embedding pending", so `index`
            # fails, status says why and the next sync retries. Written as if keyword-only, the
            # files counted as indexed and no sync ever embedded them.
            if want is not None and any(not c.embedding for c in rec.chunks):
                rec.error = f"{EMBED_PENDING} ({why}); keyword-searchable until a later sync embeds it" + (
                    f"; {rec.error}" if rec.error else "")
    else:
        try:
            embed_missing(records, embedder)
        except FallbackSwitched as exc:
            # The primary provider failed over: these vectors belong to a new index.
            log.warning("%s: %s", ctx.agent_id, exc)
            request_resync(ctx, "fallback")
            return
        # (The reference texts are cached under whichever identity embedded them: no file to re-plan.)
        mismatched = [rec.path for item, rec, want in zip(msg.items, records, planned) if want is not None
                      and item.mode != "reference" and rec.embedding is not None
                      and want.provider_key != rec.embedding.provider_key]
        if mismatched:
            _say_mismatch(ctx.agent_id, embedder, planned, mismatched)
    forward(ctx, write_queue_for(spec.store), msg.generation, msg.items)  # (the items hold the records)
