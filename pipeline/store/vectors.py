"""Vector encoding: little-endian float32 blobs in SQLite (queue messages base64 them: index.records)."""

from __future__ import annotations

import math
import struct
from typing import Sequence


def pack(vec: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(vec)}f", *vec)


def unpack(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


def is_valid(vec: Sequence[float], dims: int | None = None) -> bool:
    """Finite, non-empty, not all zero and (if given) of the expected length."""
    if not vec or (dims is not None and len(vec) != dims):
        return False
    return all(math.isfinite(x) for x in vec) and any(x != 0.0 for x in vec)


def is_zero(vec: Sequence[float] | None) -> bool:
    return not vec or all(x == 0.0 for x in vec)
