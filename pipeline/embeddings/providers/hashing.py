"""A deterministic offline embedder for tests and benchmarks only.

Feature hashing of word unigrams and bigrams into ``dims`` buckets: texts that
share words get similar vectors, the same text always gets the same vector,
and nothing leaves the process. It is selected only by ``provider: "hash"``,
never automatically; it is not a real embedding model.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from typing import Any, Mapping, Self

from memindex.pipeline.config import environ
from memindex.pipeline.embeddings import registry
from memindex.pipeline.embeddings.base import EmbeddingProvider
from memindex.pipeline.embeddings.registry import ProviderArgs

_WORD = re.compile(r"[^\W_]+")


class HashProvider(EmbeddingProvider):
    id = "hash"
    max_batch_items = 256
    max_batch_tokens = 200_000

    DEFAULT_DIMS = 384
    dims: int  # known from the start (the base class's is None until learnt)
    dims_learnt = False  # its vectors are built at the configured size

    def __init__(self, model: str | None = None, dims: int = DEFAULT_DIMS, delay_s: float = 0.0) -> None:
        super().__init__()
        self.model = model or registry.get(self.id).default_model
        self.dims = dims
        self.delay_s = delay_s  # lets tests make a rebuild slow enough to observe

    @classmethod
    def from_args(cls, args: ProviderArgs) -> Self:
        """memorySearch.outputDimensionality sets dims; MEMINDEX_HASH_EMBED_DELAY (s) slows each request."""
        delay = environ.HASH_EMBED_DELAY.get(args.env)
        return cls(args.model, cls.configured_dims(args) or cls.DEFAULT_DIMS, delay)

    def fingerprint_extra(self) -> Mapping[str, Any]:
        return {"dims": self.dims}

    def _vec(self, text: str) -> list[float]:
        words = _WORD.findall(text.lower())
        feats = words + [f"{a} {b}" for a, b in zip(words, words[1:])]
        v = [0.0] * self.dims
        for f in feats or [text]:
            h = hashlib.blake2b(f.encode("utf-8", "surrogatepass"), digest_size=8).digest()
            n = int.from_bytes(h, "little")
            v[n % self.dims] += 1.0 if (n >> 32) & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        if not any(v):
            v[0] = 1.0
            norm = 1.0
        return [x / norm for x in v]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)
