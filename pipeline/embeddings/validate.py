"""Checks on provider output, and vector normalisation helpers.

A bad vector written to the index poisons search silently (NaN cosine, mixed
dims), so every response is checked before anything is cached or stored.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from memindex.pipeline.embeddings.base import InvalidVectorError

_MIN_NORM = 1e-10


def validate_vectors(
    vectors: Sequence[Sequence[float]],
    *,
    expected_count: int,
    expected_dims: int | None = None,
    allow_zero: bool = False,
    provider_id: str = "provider",
) -> int:
    """Raise InvalidVectorError unless the batch is usable; return its dims.

    Usable: one vector per input, all the same non-zero length (== expected_dims
    when known), every value finite, and (for documents) no all-zero vector.
    """
    if len(vectors) != expected_count:
        raise InvalidVectorError(f"{provider_id}: expected {expected_count} vectors, got {len(vectors)}")
    if not vectors:
        return expected_dims or 0
    try:
        arr = np.asarray(vectors, dtype=np.float64)
    except (ValueError, TypeError) as exc:  # ragged lists or non-numbers
        lens = sorted({len(v) for v in vectors if hasattr(v, "__len__")})
        raise InvalidVectorError(f"{provider_id}: inconsistent vector dims {lens}") from exc
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise InvalidVectorError(f"{provider_id}: malformed vectors (shape {arr.shape})")
    dims = int(arr.shape[1])
    if expected_dims is not None and dims != expected_dims:
        raise InvalidVectorError(f"{provider_id}: expected {expected_dims}-dim vectors, got {dims}")
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = int(np.argmin(finite))
        raise InvalidVectorError(f"{provider_id}: vector {bad} has NaN/inf values")
    if not allow_zero:
        zero = ~np.any(arr != 0.0, axis=1)
        if zero.any():
            raise InvalidVectorError(f"{provider_id}: vector {int(np.argmax(zero))} is all zeros")
    return dims


def l2_normalize(vec: Sequence[float]) -> list[float]:
    """Unit-length copy of vec; a (near-)zero vector is returned unchanged."""
    arr = np.asarray(vec, dtype=np.float64)
    norm = float(np.linalg.norm(arr))
    if norm < _MIN_NORM:
        return [float(x) for x in arr]
    unit: list[float] = (arr / norm).tolist()  # numpy's tolist() is untyped: floats, as arr is float64
    return unit


def sanitize_and_normalize(vec: Sequence[float]) -> list[float]:
    """Local/Ollama output as the reference treats it: non-finite -> 0, then L2-normalise."""
    return l2_normalize([x if math.isfinite(x) else 0.0 for x in vec])


def weighted_mean(vectors: Sequence[Sequence[float]], weights: Sequence[float]) -> list[float]:
    """Weighted average of same-dim vectors, renormalised to unit length."""
    arr = np.asarray(vectors, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if w.sum() <= 0:
        w = np.ones_like(w)
    return l2_normalize((arr * w[:, None]).sum(axis=0) / w.sum())
