"""Where an agent's batch state lives: one entry point over the two backends.

``state.BatchStateStore`` (a SQLite file beside the store) on the embedded broker, where
every batch actor runs in the process that holds the stores; ``redis_state.RedisBatchState``
with the Redis broker, where the batch actors are compute-side (issue 18) and see no file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

from memindex.workers.batch.redis_state import RedisBatchState
from memindex.workers.broker import redis_broker
from memindex.workers.batch.state import BatchStateStore, open_state, state_path

StateBackend = Union[BatchStateStore, RedisBatchState]  # the same operations on either backend


def open_for(store_path: Path, *, readonly: bool = False) -> StateBackend | None:
    """The agent's batch state where this deployment keeps it: in Redis with the Redis broker (the
    batch actors are compute-side there, workers/batch/redis_state.py), else the file beside the
    store. None when read-only and there is none yet."""
    rb = redis_broker()
    if rb is None:
        return open_state(store_path, readonly=readonly)
    st = RedisBatchState(rb.client, store_path)
    return None if readonly and not st.exists() else st


def has_state(store_path: Path) -> bool:
    """Whether the agent has batch state where ``open_for`` keeps it (without creating any)."""
    rb = redis_broker()
    if rb is None:
        return state_path(store_path).exists()
    return RedisBatchState(rb.client, store_path).exists()


def location(store_path: Path) -> str:
    """Where ``open_for`` keeps the agent's batch state, for display."""
    rb = redis_broker()
    if rb is None:
        return str(state_path(store_path))
    return "redis " + RedisBatchState(rb.client, store_path).ns


def job_state_counts(store_path: Path) -> dict[str, int]:
    """The agent's batch jobs by state (no batch state yet: empty), for the metrics."""
    store = open_for(store_path, readonly=True)
    if store is None:
        return {}
    with store:
        return store.state_counts()
