"""Failures made visible: a middleware that records why work failed for good, and
log lines that name a message instead of printing it.

When a message is dead-lettered (an error its actor does not retry, or retries
used up) the ``FailureReporter`` records the reason beside the agent's store
(``pipeline.index.failures``: ``index`` and ``status`` read it), logs each
distinct reason once per process at ERROR with agent and provider, and puts the
error text on the dead letter itself.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterable, Iterator, cast

import dramatiq
from dramatiq.middleware import Middleware

from memindex.pipeline.config.agents import settings_for
from memindex.pipeline.config.settings import Context
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.hints import failure_hint
from memindex.pipeline.embeddings.secrets import redact
from memindex.pipeline.errors import MemindexError, UnknownAgent
from memindex.pipeline.index.failures import SKIPPED_NOTE, SUMMARISED, record_failure
from memindex.pipeline.store.schema import EMBED_PENDING, embedding_pending
from memindex.pipeline.search.reference import REFERENCE_SOURCE
from memindex.workers import leases
from memindex.workers.logs import REDIS_DOWN_ATTR, is_redis_down

log = logging.getLogger("memindex.failures")


def reason_of(exc: BaseException) -> str:
    """One line saying why: a memindex error's own message, else the type and message. Redacted:
    it goes into log lines (after the secret scrubber has seen them), dead letters and status."""
    text = redact(" ".join(str(exc).split()))
    return text if isinstance(exc, MemindexError) and text else f"{type(exc).__name__}: {text}"


def provider_of(reason: str, settings: Any) -> str | None:
    """Provider errors start with the provider id; anything else blames the configured one."""
    head = reason.split(":", 1)[0].split(" ", 1)[0]
    if registry.find(head) is not None:
        return head
    return settings.memory_search.provider if settings is not None else None


def message_keys(args: Any) -> Iterator[tuple[str, str]]:
    """The files a queue message is about, as (source, path): every record argument's, a
    record inside an item (``embed_chunks``), and (source, path) pairs (``write_deletes``). The
    search's reference texts travel as a record too, but are no file: left out."""
    for a in args:
        items = a if isinstance(a, list) else [a]
        for it in items:
            if isinstance(it, dict) and isinstance(it.get("record"), dict):
                it = it["record"]
            if isinstance(it, dict) and it.get("source") == REFERENCE_SOURCE:
                continue
            if isinstance(it, dict) and isinstance(it.get("path"), str):
                yield str(it.get("source", "memory")), it["path"]
            elif isinstance(it, list) and len(it) == 2 and all(isinstance(x, str) for x in it):
                yield it[0], it[1]


def describe(message: Any) -> str:
    """A message in a log line: actor, agent and id, never its (possibly huge) arguments."""
    args = getattr(message, "args", ()) or ()
    agent = args[0].get("agent_id") if args and isinstance(args[0], dict) else None
    return f"{message.actor_name}[{agent or '-'}] {message.message_id}"


def _parenthesised(text: str, start: int) -> str:
    """The text inside the parentheses opening at ``text[start]`` (nesting respected)."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1:i]
    return text[start + 1:]


def record_failure_reason(error: str | None) -> str | None:
    """Why a file record was written without its vectors (or skipped), from its problem text:
    the provider's own message, unwrapped from "embedding pending (...)" and from the
    circuit breaker's "<provider> is failing (...)"; None for problems that are not failures."""
    if not error:
        return None
    for prefix in (f"{EMBED_PENDING} (", "could not be indexed ("):
        if error.startswith(prefix):
            reason = _parenthesised(error, len(prefix) - 1)
            head, sep, _ = reason.partition(" is failing (")
            if sep and " " not in head:
                reason = _parenthesised(reason, len(head) + len(" is failing "))
            return reason
    return None


def note_record_failures(settings: Any, records: Iterable[Any]) -> None:
    """Note, grouped by reason, the files of one message that were written without vectors."""
    by_reason: dict[str, list[str]] = {}
    for r in records:
        reason = record_failure_reason(r.error)
        if reason:
            if not embedding_pending(r.error):  # its content: kept out of syncs until it changes
                reason += SKIPPED_NOTE
            by_reason.setdefault(reason, []).append(r.path)
    for reason, paths in by_reason.items():
        note_failure(settings, reason, paths, "indexed for keyword search only")


class FailureReporter(Middleware):
    """Must run after ``Retries``: it acts only on messages that failed for good."""

    def after_process_message(self, broker: dramatiq.Broker, message: dramatiq.MessageProxy, *,
                              result: object = None, exception: BaseException | None = None) -> None:
        if exception is None or not message.failed:
            return
        reason = reason_of(exception)
        message.options["error"] = reason
        try:
            self._record(broker, message, reason)
        except UnknownAgent as exc:
            # The agent was removed from the config while its work was queued: it has no settings,
            # so no store to record the failure beside, and nobody to tell but the log - once.
            log.warning("%s dropped: its agent is no longer configured (%s)", describe(message), exc.why)
        except Exception as exc:  # noqa: BLE001 - reporting must never turn one failure into two
            log.warning("could not record the failure of %s: %s", describe(message), exc)
        _keep_error_on_dead_letter(broker, message)

    def _record(self, broker: Any, message: Any, reason: str) -> None:
        ctx = message.args[0] if message.args and isinstance(message.args[0], dict) else None
        settings = settings_for(Context.from_dict(ctx)) if ctx else None
        keys = list(message_keys(message.args[1:]))
        try:
            note_failure(settings, reason, [p for _, p in keys], f"{describe(message)} failed for good")
        finally:
            # Released even when the failure cannot be recorded (a full disk: ENOSPC beside the
            # store): held, every later sync skipped the files as "already queued" for 6 h.
            if settings is not None:
                _release(broker, message, settings.store_path, keys)


def _release(broker: Any, message: Any, store_path: Any, keys: list[tuple[str, str]]) -> None:
    """Nothing will write these files now: the next plan queues them again (workers/leases.py)."""
    gen = message.args[1] if len(message.args) > 1 else None
    if keys and isinstance(gen, int) and not isinstance(gen, bool):
        leases.release(broker, store_path, gen, keys)


def release_leases(broker: Any, message: Any) -> None:
    """``_release`` for a message refused before its actor ran (another deployment's: the guard);
    best effort, its config may not be readable here."""
    try:
        ctx = message.args[0] if message.args and isinstance(message.args[0], dict) else None
        if ctx is not None:
            _release(broker, message, settings_for(Context.from_dict(ctx)).store_path,
                     list(message_keys(message.args[1:])))
    except Exception as exc:  # noqa: BLE001 - the leases then expire (LEASE_TTL_S)
        log.debug("could not release the leases of %s: %s", describe(message), exc)


_seen: set[tuple[str, str]] = set()
_seen_lock = threading.Lock()


def note_failure(settings: Any, reason: str, paths: list[str], what: str) -> None:
    """Log a failure (at ERROR the first time this process sees the reason for this agent)
    and record it beside the agent's store for ``index`` and ``status``."""
    provider = provider_of(reason, settings)
    hint = failure_hint(reason, provider, settings)
    agent = settings.agent_id if settings is not None else "-"
    with _seen_lock:
        first = (agent, reason) not in _seen
        _seen.add((agent, reason))
    log.log(logging.ERROR if first else logging.DEBUG, "agent %s (provider %s): %s: %s [%d file(s); %s]",
            agent, provider or "none", what, reason, len(paths), hint, extra={SUMMARISED: True})
    if settings is not None:
        record_failure(settings.store_path, reason=reason, provider=provider, hint=hint, paths=paths)


def _keep_error_on_dead_letter(broker: Any, message: Any) -> None:
    """On Redis a nack moves the message *as stored*: store it again with its error first.

    Reads dramatiq's private key layout (``<ns>:<queue>.msgs``); the layout test
    in tests/test_operations.py fails if a dramatiq upgrade changes it.
    """
    client = getattr(broker, "client", None)
    mid = message.options.get("redis_message_id")
    if client is None or mid is None:
        return  # the embedded broker keeps the message object itself, error included
    key = f"{broker.namespace}:{message.queue_name}.msgs"
    try:
        if client.hexists(key, mid):
            client.hset(key, mid, message.encode())  # options carry "error" (and any traceback)
    except Exception as exc:  # noqa: BLE001 - the error is also in the log and the failure record
        log.debug("could not annotate dead letter %s: %s", mid, exc)


def _short_records(make: Any) -> Any:
    """Wrap a log record factory so dramatiq's lines name a message instead of printing it
    (``%s`` of a Message is every argument: 6 kB for a group of files), its actors'
    "Received args=..." lines say only how many, and per-attempt failures stay out
    of ERROR: the reporter logs each reason once, when it is final."""
    from dramatiq.broker import MessageProxy
    from dramatiq.message import Message
    from dramatiq.middleware import Shutdown

    def factory(*a: Any, **kw: Any) -> logging.LogRecord:
        record: logging.LogRecord = make(*a, **kw)
        args = record.args
        if not isinstance(args, tuple) or not args:
            return record
        if record.msg == "Message %s was skipped." and getattr(args[0], "failed", False):
            # refused (workers/guard.py says why) and dead-lettered: "skipped" read as dropped
            record.msg = "Message %s was refused and dead-lettered, not retried."
        if record.msg == "Received args=%r kwargs=%r.":
            received, kwargs = cast("tuple[Any, ...]", args[0] or ()), cast("dict[str, Any]", args[1] or {})
            record.msg, record.args = "Received %d arg(s), kwargs %s.", (len(received), sorted(kwargs))
        elif any(isinstance(x, (Message, MessageProxy)) for x in args):
            record.args = tuple(describe(x) if isinstance(x, (Message, MessageProxy)) else x for x in args)
            exc = record.exc_info[1] if record.exc_info else None
            if record.levelno >= logging.ERROR and isinstance(exc, Shutdown):
                # a stopping worker hands the message back (workers/lifecycle.py): not a failure
                import dramatiq
                from dramatiq.brokers.stub import StubBroker  # (broker.is_embedded; that module imports this one)

                # In-process the queue ends with the process: nothing retries it, the next sync re-plans.
                in_process = isinstance(dramatiq.get_broker(), StubBroker)
                record.msg = ("%s: the worker is stopping; the next sync plans its files again" if in_process
                              else "%s: the worker is stopping; the message is retried later")
                record.args = record.args[:1]
                record.exc_info, record.exc_text = None, None  # (the secret scrubber may have formatted it)
                record.levelno, record.levelname = logging.INFO, "INFO"
            elif record.levelno >= logging.ERROR and exc is not None:
                record.msg = f"{record.msg} %s"
                record.args = (*record.args, reason_of(exc))
                if is_redis_down(exc):  # an outage line, once its exception is gone (workers/logs.py)
                    setattr(record, REDIS_DOWN_ATTR, True)
                if not logging.getLogger("memindex").isEnabledFor(logging.DEBUG):
                    record.exc_info = record.exc_text = None  # the traceback is kept for --log-level debug
                record.levelno, record.levelname = logging.WARNING, "WARNING"
        return record

    factory.memindex_short = True  # type: ignore[attr-defined]  # a mark on a function, read back with getattr
    return factory


def install_log_filters() -> None:
    make = logging.getLogRecordFactory()
    if not getattr(make, "memindex_short", False):
        logging.setLogRecordFactory(_short_records(make))
