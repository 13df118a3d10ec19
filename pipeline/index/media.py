"""Multimodal memory (F17): images and audio under extraPaths, embedded by gemini-embedding-2-preview.

Off unless ``memorySearch.multimodal.enabled``. Then:

- config: the provider must be ``gemini`` with ``gemini-embedding-2-preview``
  and ``fallback`` must be ``none`` (a fallback model could not embed the
  bytes, and one index must never mix vector spaces) - checked at load by
  ``config.settings.validate_multimodal``;
- discovery: media files are accepted under extraPaths only, never in the
  default memory roots, filtered by ``modalities`` - ``extra_kind_for``;
- indexing: a media file becomes ONE chunk (lines 1-1) whose text is a label
  such as ``[image] assets/cat.png`` (so keyword search finds the file name)
  and whose vector is the embedding of its bytes - ``prepare_media``. Files over
  ``maxFileBytes``, unreadable, or whose bytes contradict their extension are
  skipped and reported in the files row (``status`` problems), never raised.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import PurePosixPath
from typing import Any, Callable

from memindex.pipeline.config.settings import AgentSettings
from memindex.pipeline.index.prepare import Prepared, build_record, read_for_index
from memindex.pipeline.index.records import ChunkRecord, FileJob

log = logging.getLogger("memindex.multimodal")

MEDIA_KINDS = ("image", "audio")

# extension -> (kind, MIME type sent to Gemini, container formats the magic bytes may show).
# Audio MIME names follow the Gemini API docs (audio/mp3, audio/wav, ...). Opus files
# are Opus-in-Ogg, so their container MIME is audio/ogg.
MEDIA_TYPES: dict[str, tuple[str, str, frozenset[str]]] = {
    ".jpg": ("image", "image/jpeg", frozenset({"jpeg"})),
    ".jpeg": ("image", "image/jpeg", frozenset({"jpeg"})),
    ".png": ("image", "image/png", frozenset({"png"})),
    ".webp": ("image", "image/webp", frozenset({"webp"})),
    ".gif": ("image", "image/gif", frozenset({"gif"})),
    ".heic": ("image", "image/heic", frozenset({"heif"})),
    ".heif": ("image", "image/heif", frozenset({"heif"})),
    ".mp3": ("audio", "audio/mp3", frozenset({"mp3", "id3"})),
    ".wav": ("audio", "audio/wav", frozenset({"wav"})),
    ".ogg": ("audio", "audio/ogg", frozenset({"ogg"})),
    ".opus": ("audio", "audio/ogg", frozenset({"ogg"})),
    ".m4a": ("audio", "audio/mp4", frozenset({"mp4"})),  # RFC 4337; Gemini's audio list names no M4A type
    ".aac": ("audio", "audio/aac", frozenset({"aac", "id3"})),
    ".flac": ("audio", "audio/flac", frozenset({"flac"})),
}

# ISO-BMFF brands of HEIF/HEIC images (anything else after "ftyp" is treated as MP4 audio/video).
_HEIF_BRANDS = frozenset({b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"hevm", b"hevs",
                          b"mif1", b"msf1"})
SNIFF_BYTES = 16


def enabled(settings: AgentSettings) -> bool:
    return bool(settings.memory_search.multimodal.enabled)


def allowed_kinds(modalities: list[str]) -> frozenset[str]:
    return frozenset(MEDIA_KINDS) if "all" in modalities else frozenset(modalities) & set(MEDIA_KINDS)


# --- discovery ---------------------------------------------------------------------

def media_type(name: str) -> tuple[str, str, frozenset[str]] | None:
    """(kind, MIME, accepted containers) for a supported media file name, else None."""
    return MEDIA_TYPES.get(PurePosixPath(name).suffix.lower())


def media_kind_of(name: str) -> str | None:
    """"image" / "audio" for a supported media extension, whatever the config says."""
    t = media_type(name)
    return t[0] if t else None


def extra_kind_for(settings: AgentSettings) -> Callable[[str], str | None] | None:
    """The ``discover(extra_kind=...)`` filter for extraPaths, or None when multimodal is off."""
    if not enabled(settings):
        return None
    kinds = allowed_kinds(settings.memory_search.multimodal.modalities)

    def keep(name: str) -> str | None:
        if name.lower().endswith(".md"):  # is_markdown_name (index layer above media)
            return "markdown"
        t = media_type(name)
        return t[0] if t and t[0] in kinds else None

    return keep


# --- content checks ------------------------------------------------------------------

def sniff(head: bytes) -> str | None:
    """The container format the first bytes show (jpeg, png, ..., mp4), or None."""
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[4:8] == b"ftyp":
        return "heif" if head[8:12] in _HEIF_BRANDS else "mp4"
    if head.startswith(b"OggS"):
        return "ogg"
    if head.startswith(b"fLaC"):
        return "flac"
    if head.startswith(b"ID3"):
        return "id3"  # an ID3 tag can precede MP3 or ADTS AAC frames
    if head.startswith(b"ADIF"):
        return "aac"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        layer = (head[1] >> 1) & 0b11
        return "aac" if layer == 0 else "mp3"  # ADTS frames carry layer 00, MPEG audio 01-11
    return None


def content_problem(name: str, data: bytes) -> str | None:
    """Why these bytes are not what the extension claims (a "lying extension"), or None."""
    t = media_type(name)
    if t is None:
        return f"unsupported media extension {PurePosixPath(name).suffix!r}"
    found = sniff(data[:SNIFF_BYTES])
    if found in t[2]:
        return None
    ext = PurePosixPath(name).suffix.lower()
    seen = f"the bytes look like {found}" if found else "the bytes match no known image/audio format"
    return f"content does not match its extension ({ext} declares {t[1]}; {seen}); skipped"


def media_hash(data: bytes, mime: str) -> str:
    """Chunk hash and embedding-cache key of a media file: its bytes and MIME type, not its label."""
    doc = {"mimeType": mime, "dataHash": hashlib.sha256(data).hexdigest()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def label_for(kind: str, path: str) -> str:
    return f"[{kind}] {path}"


# --- indexing ------------------------------------------------------------------------

def prepare_media(settings: AgentSettings, job: FileJob, embedder: Any | None = None) -> Prepared:
    """One media file -> a writer record holding one labelled chunk with the bytes' vector."""
    limit = int(settings.memory_search.multimodal.max_file_bytes)
    # Every record, skipped ones included, carries the index's identity: the writer
    # rejects identity-less records in a vector index, and the file would loop through syncs.
    ident = None if embedder is None else embedder.identity
    read = read_for_index(job, limit, ident, "multimodal.maxFileBytes")
    if isinstance(read, Prepared):
        return read
    st, data, digest = read
    problem = content_problem(job.path, data)
    if problem:
        log.warning("%s: %s", job.path, problem)
        return Prepared(build_record(job, st, digest, [], ident, problem))
    kind, mime, _ = media_type(job.path)  # type: ignore[misc]  # content_problem checked it
    chash = media_hash(data, mime)
    vector, hits = None, set()
    embed = getattr(embedder, "embed_media", None)
    if embedder is not None and embed is not None:
        vectors, hits = embed([(data, mime)], [chash])
        vector, ident = vectors[0], embedder.identity  # identity may have learnt its dims just now

    chunk = ChunkRecord(1, 1, chash, label_for(kind, job.path), vector or None, chash not in hits)
    rec = build_record(job, st, digest, [chunk], ident, None)
    rec.cache_hits = sorted(hits)
    return Prepared(rec)
