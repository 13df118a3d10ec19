"""Query and document prefixes that some embedding model families were trained with.

An e5 model embeds ``"query: how do I ..."`` and ``"passage: ..."``; without the markers its
vectors of a question and of the note answering it sit closer to everything else (on the
meaning dev set, ``bench/README.md``). The table below is the one place that knows which
family asks for what; it is keyed by the model's name as configured (a GGUF path's file name,
an Ollama tag, a Hugging Face repo), lower-cased, without directory, ``:tag``, quantisation or
extension. ``memorySearch.queryPrefix`` / ``documentPrefix`` override it (``""``: none).

Hosted APIs that take a task or input type (Gemini, Voyage) get none from here: their API
says it. The prefixes are part of the provider's fingerprint (``EmbeddingProvider.fingerprint``)
when they are not empty, so changing them re-embeds the index instead of mixing vectors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Prefixes:
    query: str = ""
    document: str = ""

    def __bool__(self) -> bool:
        return bool(self.query or self.document)


NONE = Prefixes()

_BGE_QUERY = "Represent this sentence for searching relevant passages: "

# (pattern on the normalised model name, prefixes): the first match wins, so narrower rows first.
FAMILIES: tuple[tuple[re.Pattern[str], Prefixes], ...] = (
    # e5-mistral and multilingual-e5-large-instruct want a task instruction, not the two markers.
    (re.compile(r"e5-mistral|e5-.*instruct"), NONE),
    (re.compile(r"(^|[-_/])e5([-_]|$)"), Prefixes("query: ", "passage: ")),
    (re.compile(r"nomic-embed-text"), Prefixes("search_query: ", "search_document: ")),
    (re.compile(r"embeddinggemma"), Prefixes("task: search result | query: ", "title: none | text: ")),
    # bge v1.5 English and its relatives: an instruction on queries only (bge-m3 wants none).
    (re.compile(r"bge-m3"), NONE),
    (re.compile(r"bge-(small|base|large)-en|mxbai-embed-large|snowflake-arctic-embed"), Prefixes(_BGE_QUERY, "")),
)

_QUANT = re.compile(r"[-_.](?:f16|f32|bf16|q\d\w*|iq\d\w*|gguf)$")


def model_key(model: str) -> str:
    """``/models/multilingual-e5-small.Q4_0.gguf`` -> ``multilingual-e5-small``;
    ``nomic-embed-text:v1.5`` -> ``nomic-embed-text``; ``hf:org/repo/file.gguf`` -> ``file``."""
    name = model.strip().replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
    name = name.split(":", 1)[0]
    if name.endswith(".gguf"):
        name = name[: -len(".gguf")]
    while (m := _QUANT.search(name)) is not None:
        name = name[: m.start()]
    return name


def family_prefixes(model: str) -> Prefixes:
    """The table's prefixes for a model name (none when its family is not in the table)."""
    key = model_key(model)
    for pattern, prefixes in FAMILIES:
        if pattern.search(key):
            return prefixes
    return NONE


def prefixes_for(model: str, memory_search: Mapping[str, Any]) -> Prefixes:
    """The prefixes an agent's provider uses: the table's, each overridden by
    ``memorySearch.queryPrefix`` / ``documentPrefix`` when set (``""`` turns it off)."""
    table = family_prefixes(model)
    query, document = memory_search.get("queryPrefix"), memory_search.get("documentPrefix")
    return Prefixes(table.query if query is None else str(query),
                    table.document if document is None else str(document))
