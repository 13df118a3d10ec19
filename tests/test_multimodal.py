"""Multimodal memory (F17, issue 9): images and audio under extraPaths, embedded
by gemini-embedding-2-preview through the real google-genai client talking to
the local Gemini wire-protocol server (tests/provider_server.py)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from memindex.pipeline.config.settings import ConfigError, resolve_agent
from memindex.pipeline.embeddings.providers.gemini import GeminiProvider
from memindex.pipeline.index.indexer import collect_files
from memindex.pipeline.index.records import FileJob
from memindex.pipeline.search.get import MemoryGetError, memory_get
from memindex.pipeline.index.media import MEDIA_TYPES, content_problem, media_hash, prepare_media
from memindex.pipeline.status import index_status
from tests.conftest import module_server
from tests.provider_server import ProviderServer

MODEL = "gemini-embedding-2-preview"

# Smallest headers that the magic-byte check accepts, padded so files are not empty.
MAGIC = {
    ".jpg": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00",
    ".jpeg": b"\xff\xd8\xff\xdb",
    ".png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    ".webp": b"RIFF\x24\x00\x00\x00WEBPVP8 ",
    ".gif": b"GIF89a\x01\x00\x01\x00",
    ".heic": b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00",
    ".heif": b"\x00\x00\x00\x18ftypmif1\x00\x00\x00\x00",
    ".mp3": b"ID3\x04\x00\x00\x00\x00\x00\x00",
    ".wav": b"RIFF\x24\x00\x00\x00WAVEfmt ",
    ".ogg": b"OggS\x00\x02\x00\x00",
    ".opus": b"OggS\x00\x02\x00\x00",
    ".m4a": b"\x00\x00\x00\x20ftypM4A \x00\x00\x00\x00",
    ".aac": b"\xff\xf1\x50\x80\x02\x1f\xfc",
    ".flac": b"fLaC\x00\x00\x00\x22",
}


def media(ext: str, tag: str = "", size: int = 64) -> bytes:
    """Valid-looking bytes for an extension; ``tag`` makes distinct files distinct."""
    head = MAGIC[ext] + tag.encode()
    return head + b"\x00" * max(0, size - len(head))


server = module_server(ProviderServer)
pytestmark = pytest.mark.usefixtures("fresh_services")


def mm_cfg(server, *, dims: int | None = 768, extra=("extras",), **multimodal) -> dict:
    cfg = {"provider": "gemini", "model": MODEL, "extraPaths": list(extra),
           "multimodal": {"enabled": True, **multimodal},
           "remote": {"baseUrl": server.base("gemini"), "apiKey": "g-key"}}
    if dims:
        cfg["outputDimensionality"] = dims
    return cfg


# --- the wire: bytes and MIME type reach Gemini, dims honoured ------------------------------

@pytest.mark.parametrize("dims", [768, 1536, 3072])
def test_request_carries_base64_bytes_mime_and_dims(server, dims):
    p = GeminiProvider("g-key", MODEL, base_url=server.base("gemini"), output_dimensionality=dims)
    png, wav = media(".png", "a"), media(".wav", "b", 300)
    vecs = p.embed_media([(png, "image/png"), (wav, "audio/wav")])
    assert [len(v) for v in vecs] == [dims, dims]
    (req,) = server.log_for("gemini")
    assert req.path == f"/gemini/v1beta/models/{MODEL}:batchEmbedContents"
    parts = [r["content"]["parts"] for r in req.body["requests"]]
    assert [pp[0]["inline_data"]["mime_type"] for pp in parts] == ["image/png", "audio/wav"]
    assert [base64.b64decode(pp[0]["inline_data"]["data"]) for pp in parts] == [png, wav]
    assert {r["outputDimensionality"] for r in req.body["requests"]} == {dims}
    assert [(m["size"], m["mime_type"], m["outputDimensionality"]) for m in server.media] == [
        (len(png), "image/png", dims), (len(wav), "audio/wav", dims)]


def test_index_sends_each_media_file_once_with_its_mime(agent, server):
    agent.write("memory/notes.md", "# Notes\nplain text memory\n")
    files = {"extras/cat.png": media(".png", "cat"), "extras/voice.opus": media(".opus", "v", 200),
             "extras/deep/song.flac": media(".flac", "s", 500)}
    for rel, data in files.items():
        agent.write(rel, data)
    agent.memory_config(mm_cfg(server, dims=1536))
    agent.index()
    got = sorted((m["mime_type"], m["size"], m["outputDimensionality"]) for m in server.media)
    assert got == sorted([("image/png", 64, 1536), ("audio/ogg", 200, 1536), ("audio/flac", 500, 1536)])
    st = index_status(agent.settings())
    assert st["vector"]["dims"] == 1536 and st["problems"] == []
    rows = {r[1]: r for r in agent.store_rows()}
    assert rows["extras/cat.png"][2:4] == (1, 1)  # one chunk, lines 1-1
    assert rows["extras/cat.png"][5] == "[image] extras/cat.png"
    assert rows["extras/voice.opus"][5] == "[audio] extras/voice.opus"
    # Unchanged files are not re-sent; a full rebuild takes them from the cache (key: bytes + MIME).
    n = len(server.media)
    agent.index()
    agent.index(force=True)
    assert len(server.media) == n


# --- config validation ------------------------------------------------------------------

def _resolve(ms: dict, agent_ms: dict | None = None):
    cfg = {"agents": {"defaults": {"memorySearch": ms}}}
    if agent_ms is not None:
        cfg["agents"]["list"] = [{"id": "main", "memorySearch": agent_ms}]
    return resolve_agent(cfg, state_dir=Path("/tmp/memindex-mm-state"), env={})


GOOD = {"provider": "gemini", "model": MODEL, "multimodal": {"enabled": True}}


@pytest.mark.parametrize("override, message", [
    ({"provider": "openai"}, 'requires provider "gemini"'),
    ({"provider": "auto"}, 'requires provider "gemini"'),
    ({"model": "gemini-embedding-001"}, f'requires model "{MODEL}"'),
    ({"model": ""}, f'requires model "{MODEL}"'),
    ({"fallback": "openai"}, 'requires fallback "none"'),
    ({"fallback": "local"}, 'requires fallback "none"'),
])
def test_validation_names_the_key(override, message):
    with pytest.raises(ConfigError, match=message) as exc:
        _resolve({**GOOD, **override})
    assert exc.value.key == "agents.defaults.memorySearch.multimodal.enabled"
    assert str(exc.value).startswith("invalid config: agents.defaults.memorySearch.multimodal.enabled: ")


def test_validation_of_an_agent_override_names_the_agent_key():
    with pytest.raises(ConfigError) as exc:
        _resolve({"provider": "openai"}, {"multimodal": {"enabled": True}})
    assert exc.value.key == "agents.list[0].memorySearch.multimodal.enabled"


def test_validation_other_keys():
    with pytest.raises(ConfigError) as exc:
        _resolve({**GOOD, "outputDimensionality": 1000})
    assert exc.value.key == "agents.defaults.memorySearch.outputDimensionality"
    with pytest.raises(ConfigError) as exc:
        _resolve({**GOOD, "multimodal": {"enabled": True, "modalities": ["video"]}})
    assert exc.value.key == "agents.defaults.memorySearch.multimodal.modalities"
    with pytest.raises(ConfigError) as exc:
        _resolve({**GOOD, "multimodal": {"enabled": True, "modalities": []}})
    assert exc.value.key == "agents.defaults.memorySearch.multimodal.modalities"


@pytest.mark.parametrize("modalities", [["image"], ["audio"], ["all"], ["image", "audio"]])
def test_valid_configs_resolve(modalities):
    s = _resolve({**GOOD, "fallback": "none", "outputDimensionality": 3072,
                  "multimodal": {"enabled": True, "modalities": modalities}})
    assert s.memory_search.multimodal.to_dict() == {"enabled": True, "modalities": modalities,
                                             "maxFileBytes": 10 * 1024 * 1024}
    # Multimodal off: any provider is fine, the multimodal keys are inert.
    _resolve({"provider": "openai", "fallback": "gemini", "multimodal": {"enabled": False}})


# --- discovery ----------------------------------------------------------------------------

def _tree(agent) -> None:
    agent.write("MEMORY.md", "# Memory\n")
    agent.write("memory/notes.md", "notes\n")
    agent.write("memory/inline.png", media(".png", "default-root"))  # default root: never media
    agent.write("memory/clip.mp3", media(".mp3", "default-root"))
    agent.write("photo.jpg", media(".jpg", "ws-top"))  # in the workspace, not under extraPaths
    agent.write("extras/a.png", media(".png", "a"))
    agent.write("extras/B.JPG", media(".jpg", "b"))  # extensions compare case-insensitively
    agent.write("extras/sub/c.heic", media(".heic", "c"))
    agent.write("extras/sub/d.m4a", media(".m4a", "d"))
    agent.write("extras/sub/e.wav", media(".wav", "e"))
    agent.write("extras/notes.md", "extra notes\n")
    agent.write("extras/movie.mp4", b"\x00\x00\x00\x20ftypisom")  # not a supported modality
    agent.write("extras/readme.txt", "text")
    os.symlink(agent.workspace / "extras/a.png", agent.workspace / "extras/link.png")
    agent.write("single/voice.ogg", media(".ogg", "single"))


def _found(agent, server, **multimodal) -> dict[str, str]:
    agent.memory_config(mm_cfg(server, extra=("extras", "single/voice.ogg"), **multimodal))
    return {f.path: f.kind for f in collect_files(agent.settings())}


IMAGES = {"extras/a.png": "image", "extras/B.JPG": "image", "extras/sub/c.heic": "image"}
AUDIO = {"extras/sub/d.m4a": "audio", "extras/sub/e.wav": "audio", "single/voice.ogg": "audio"}
TEXT = {"MEMORY.md": "markdown", "memory/notes.md": "markdown", "extras/notes.md": "markdown"}


@pytest.mark.parametrize("modalities, expected", [
    (["all"], {**TEXT, **IMAGES, **AUDIO}),
    (["image"], {**TEXT, **IMAGES}),
    (["audio"], {**TEXT, **AUDIO}),
    (["image", "audio"], {**TEXT, **IMAGES, **AUDIO}),
])
def test_discovery_media_only_under_extra_paths(agent, server, modalities, expected):
    _tree(agent)
    assert _found(agent, server, modalities=modalities) == expected


def test_discovery_without_multimodal_is_markdown_only(agent, server):
    _tree(agent)
    cfg = mm_cfg(server, extra=("extras", "single/voice.ogg"))
    cfg["multimodal"]["enabled"] = False
    agent.memory_config(cfg)
    assert {f.path: f.kind for f in collect_files(agent.settings())} == TEXT


def test_every_supported_extension_accepts_its_magic_bytes():
    assert set(MAGIC) == set(MEDIA_TYPES)
    for ext in MEDIA_TYPES:
        assert content_problem(f"x{ext}", media(ext)) is None, ext


# --- skipped and reported: size limit, lying extension, unreadable --------------------------

def _problems(agent) -> dict[str, str]:
    return {p["path"]: p["error"] for p in index_status(agent.settings())["problems"]}


def test_size_limit_skips_and_reports(agent, server):
    agent.write("extras/small.png", media(".png", "small", 100))
    agent.write("extras/huge.wav", media(".wav", "huge", 5000))
    agent.memory_config(mm_cfg(server, maxFileBytes=1000))
    agent.index()
    assert [m["size"] for m in server.media] == [100]  # the big file never left the machine
    problems = _problems(agent)
    assert list(problems) == ["extras/huge.wav"]
    assert "file too large (5,000 bytes > multimodal.maxFileBytes 1,000)" in problems["extras/huge.wav"]
    st = index_status(agent.settings())
    assert st["pending"] == 0 and st["files"] == 2  # the sync completed, the skip is on record
    assert [r[1] for r in agent.store_rows()] == ["extras/small.png"]


@pytest.mark.parametrize("name, data, looks_like", [
    ("extras/photo.png", MAGIC[".jpg"] + b"\x00" * 40, "the bytes look like jpeg"),
    ("extras/photo.jpg", b"just some text pretending to be a photo", "match no known image/audio format"),
    ("extras/talk.mp3", MAGIC[".flac"] + b"\x00" * 40, "the bytes look like flac"),
    ("extras/talk.wav", MAGIC[".webp"] + b"\x00" * 40, "the bytes look like webp"),
    ("extras/pic.heic", MAGIC[".m4a"] + b"\x00" * 40, "the bytes look like mp4"),
])
def test_lying_extension_skips_and_reports(agent, server, name, data, looks_like):
    agent.write(name, data)
    agent.write("extras/ok.gif", media(".gif", "ok"))
    agent.memory_config(mm_cfg(server))
    agent.index()
    assert [m["mime_type"] for m in server.media] == ["image/gif"]
    err = _problems(agent)[name]
    assert err.startswith("content does not match its extension") and looks_like in err


def test_unreadable_file_is_reported_not_raised(agent, server, monkeypatch):
    p = agent.write("extras/locked.png", media(".png", "locked"))
    agent.memory_config(mm_cfg(server))
    settings = agent.settings()
    real_read = Path.read_bytes

    def read_bytes(self: Path) -> bytes:  # tests may run as root, where chmod 000 still reads
        if self == p:
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    st = p.stat()
    job = FileJob("memory", "extras/locked.png", str(p), st.st_size, st.st_mtime_ns, "image")
    rec = prepare_media(settings, job).record
    assert rec.error == "unreadable: Permission denied" and rec.chunks == [] and rec.kind == "image"
    assert server.media == []


def test_skipped_markdown_in_a_vector_index_does_not_block_the_sync(agent, server):
    # Skipped records used to carry no embedding identity, which the writer rejects in a
    # vector index: the file looped through re-syncs and the index never settled.
    agent.write("memory/ok.md", "fine\n")
    agent.write("memory/binary.md", b"\x00\x01\x00\x02\x00 not text")
    agent.memory_config(mm_cfg(server))
    agent.index()
    assert "binary file" in _problems(agent)["memory/binary.md"]
    assert index_status(agent.settings())["pending"] == 0


# --- results ----------------------------------------------------------------------------

def test_text_query_returns_an_image_result(agent, server):
    photo = media(".png", "harbour-photo")
    agent.write("extras/IMG_0042.png", photo)
    agent.write("extras/rec_0007.wav", media(".wav", "recording", 200))
    agent.write("memory/2026-03-01.md", "# Groceries\nBuy oat milk and coffee beans.\n")
    agent.write("MEMORY.md", "# Memory\nThe router password lives in the vault.\n")
    # The fake has no vision: its vectors are hashes. ``caption`` tells it what the photo
    # shows, and it embeds those bytes exactly where it embeds that text as a query, as a
    # real multimodal model would put the photo near the words. The bytes still travel
    # (checked below), and nothing in the file name or label shares a word with the query,
    # so only the vector arm can find it.
    server.caption(photo, "sunset over the harbour")
    agent.memory_config(mm_cfg(server))
    agent.index()
    res = agent.search("sunset over the harbour")
    assert res["provider"] == "gemini" and res["model"] == MODEL and res["mode"] == "hybrid"
    top = res["results"][0]
    assert (top["path"], top["kind"], top["startLine"], top["endLine"]) == ("extras/IMG_0042.png", "image", 1, 1)
    assert top["snippet"].startswith("[image] extras/IMG_0042.png")
    assert top["vectorScore"] > 0.99 and "textScore" not in top
    assert [r["path"] for r in res["results"]] == ["extras/IMG_0042.png"]
    assert any(m["size"] == len(photo) and m["mime_type"] == "image/png" for m in server.media)
    # Keyword search on a file name works through the label; Markdown results carry no kind.
    by_name = agent.search("rec_0007")["results"]
    assert by_name[0]["path"] == "extras/rec_0007.wav" and by_name[0]["kind"] == "audio"
    md = agent.search("oat milk coffee")["results"]
    assert md[0]["path"] == "memory/2026-03-01.md" and "kind" not in md[0]


def test_output_dimensionality_change_reindexes(agent, server):
    agent.write("extras/a.png", media(".png", "a"))
    agent.write("memory/n.md", "note\n")
    agent.memory_config(mm_cfg(server, dims=768))
    first = agent.index()
    fp1 = index_status(agent.settings())["fingerprint"]
    assert fp1["vectorDims"] == 768
    agent.memory_config(mm_cfg(server, dims=3072))
    second = agent.index()
    st = index_status(agent.settings())
    assert second["generation"] == first["generation"] + 1  # rebuilt, not updated in place
    assert st["fingerprint"]["vectorDims"] == 3072 and st["vector"]["dims"] == 3072
    assert st["fingerprint"]["providerKey"] != fp1["providerKey"]
    # The 768-dim cache entry is not reused: the image went out again at 3072.
    assert [m["outputDimensionality"] for m in server.media] == [768, 3072]


def test_media_hash_keys_on_bytes_and_mime():
    png = media(".png")
    assert media_hash(png, "image/png") != media_hash(png + b"\x01", "image/png")
    assert media_hash(png, "image/png") != media_hash(png, "image/webp")


# --- memory_get stays Markdown-only --------------------------------------------------------

@pytest.mark.parametrize("path, kind", [
    ("extras/photo.png", "image"), ("extras/Photo.JPEG", "image"),
    ("extras/voice.m4a", "audio"), ("../outside/clip.flac", "audio"),
])
def test_memory_get_refuses_media(agent, server, path, kind):
    agent.write("extras/photo.png", media(".png"))
    agent.memory_config(mm_cfg(server))
    with pytest.raises(MemoryGetError, match=f"memory_get reads Markdown only; .* is an {kind} file") as exc:
        memory_get(agent.settings(), path)
    assert path in str(exc.value)
    agent.write("extras/notes.md", "still readable\n")
    assert memory_get(agent.settings(), "extras/notes.md").text == "still readable\n"
