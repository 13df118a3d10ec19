"""The queue's message encoder: JSON, as with dramatiq's default, written and read by msgspec.

The wire format does not change (messages queued by any version decode alike); only the speed
does. A cold index sends every chunk's text through the writer's queue, and the json module's
round trip of those messages was ~0.3 s of a 1,000-file index's ~3.3 s of CPU; msgspec does it
in about a quarter of that. What msgspec will not write (a str holding a lone surrogate, which the
json module escapes) or read goes through the json module instead, so nothing that encoded
before fails now. A non-finite float would be written as null: no message of ours carries one
(vectors travel as base64 float32, pipeline/index/records.py).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from dramatiq.encoder import Encoder
from dramatiq.errors import DecodeError


class MessageEncoder(Encoder):
    def encode(self, data: Any) -> bytes:
        try:
            return msgspec.json.encode(data)
        except (msgspec.EncodeError, UnicodeEncodeError, TypeError, OverflowError):
            return json.dumps(data, separators=(",", ":")).encode("utf-8")

    def decode(self, data: bytes) -> Any:
        try:
            return msgspec.json.decode(data)
        except msgspec.DecodeError:
            pass
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise DecodeError(f"failed to decode message {data[:200]!r}", data, exc) from None  # type: ignore[no-untyped-call]  # dramatiq's errors are untyped
