"""Fetching a GGUF for the local provider: ``hf:<owner>/<repo>/<file>`` (or an http(s) URL)
into the model cache, resuming an interrupted download from its ``.part`` file.

The download happens on first use, never while providers are being selected.
A file lock keeps two worker processes from writing the same ``.part``.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlparse

from memindex.pipeline.embeddings.base import ProviderError, ProviderTransientError, ProviderUnreachable
from memindex.pipeline.store.locks import file_lock

if TYPE_CHECKING:  # httpx is imported where a download happens, not at CLI start-up
    import httpx

log = logging.getLogger(__name__)

HF_BASE_URL = "https://huggingface.co"


@dataclass(frozen=True)
class HfRef:
    owner: str
    repo: str
    file: str
    revision: str = "main"


def parse_hf_uri(uri: str) -> HfRef:
    """'hf:owner/repo/dir/file.gguf' (optionally '#revision') -> HfRef."""
    m = re.fullmatch(r"hf:([^/\s]+)/([^/\s]+)/(.+?)(?:#([\w.\-/]+))?", uri.strip())
    if not m or ".." in m.group(3).split("/"):
        raise ProviderError(f"local: bad hf: model URI {uri!r} (expected hf:<owner>/<repo>/<file>)")
    return HfRef(m.group(1), m.group(2), m.group(3), m.group(4) or "main")


def is_remote_model(path: str) -> bool:
    return path.startswith(("hf:", "http://", "https://"))


def cache_path(model: str, cache_dir: str | os.PathLike[str]) -> Path:
    """Where a remote model lives once downloaded."""
    root = Path(cache_dir).expanduser()
    if model.startswith("hf:"):
        ref = parse_hf_uri(model)
        return root / "hf" / ref.owner / ref.repo / ref.file
    u = urlparse(model)
    name = Path(u.path).name or "model.gguf"
    return root / "url" / (u.hostname or "host") / name


def source_url(model: str, hf_base_url: str = HF_BASE_URL) -> str:
    if not model.startswith("hf:"):
        return model
    ref = parse_hf_uri(model)
    return (f"{hf_base_url.rstrip('/')}/{quote(ref.owner)}/{quote(ref.repo)}/resolve/"
            f"{quote(ref.revision, safe='')}/{quote(ref.file)}")


def ensure_model_file(
    model: str,
    cache_dir: str | os.PathLike[str],
    *,
    hf_base_url: str = HF_BASE_URL,
    token: str | None = None,
    attempts: int = 3,
    timeout: float = 60.0,
) -> Path:
    """The local path of ``model``, downloading it into cache_dir if needed."""
    dest = cache_path(model, cache_dir)
    if dest.is_file():
        return dest
    url = source_url(model, hf_base_url)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with file_lock(dest.with_name(dest.name + ".lock")):
        if dest.is_file():  # another process finished it while we waited
            return dest
        last: ProviderError | None = None
        for _ in range(max(1, attempts)):
            try:
                return download_with_resume(url, dest, headers=headers, timeout=timeout)
            except ProviderUnreachable:
                raise  # nothing was downloaded, so nothing resumes (offline: no host); the caller's retry decides
            except ProviderTransientError as exc:  # keep the .part and resume
                last = exc
                log.warning("local: model download interrupted, resuming: %s", exc)
        assert last is not None
        raise last


def download_with_resume(
    url: str,
    dest: Path,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
    client: httpx.Client | None = None,
) -> Path:
    """Download url to dest via dest.part, continuing a partial .part with a Range request."""
    import httpx

    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    req_headers = dict(headers or {})
    if have:
        req_headers["Range"] = f"bytes={have}-"
    own = client is None
    http = client or httpx.Client(follow_redirects=True, timeout=timeout)
    try:
        log.info("local: downloading %s -> %s%s", url, dest, f" (resuming at {have} bytes)" if have else "")
        with http.stream("GET", url, headers=req_headers) as resp:
            total = _expected_total(resp, have)
            if resp.status_code == 416 and have and total == have:
                pass  # the .part was already complete
            elif resp.status_code == 416:
                part.unlink(missing_ok=True)
                raise ProviderTransientError(f"local: stale partial download of {url}; restarting")
            elif resp.status_code >= 400:
                raise ProviderError(f"local: download of {url} failed: HTTP {resp.status_code}")
            elif resp.status_code == 206 and _range_start(resp) != have:
                part.unlink(missing_ok=True)
                raise ProviderTransientError(f"local: server resumed {url} at the wrong offset; restarting")
            else:
                mode = "ab" if resp.status_code == 206 else "wb"  # 200: the server ignored Range, start over
                with open(part, mode) as fh:
                    # Unbuffered iteration: whatever arrived before a drop is on disk for the resume.
                    for chunk in resp.iter_bytes():
                        fh.write(chunk)
    except httpx.ConnectError as exc:  # no such host, refused: not an interrupted download
        raise ProviderUnreachable(f"local: cannot reach {urlparse(url).netloc} to download the model "
                                  f"({type(exc).__name__}: {exc})") from None
    except httpx.TransportError as exc:
        raise ProviderTransientError(f"local: download of {url} interrupted: {type(exc).__name__}: {exc}") from None
    finally:
        if own:
            http.close()
    size = part.stat().st_size
    if total is not None and size != total:
        raise ProviderTransientError(f"local: download of {url} incomplete ({size}/{total} bytes)")
    os.replace(part, dest)
    log.info("local: model ready at %s (%d bytes)", dest, size)
    return dest


def _range_start(resp: httpx.Response) -> int | None:
    m = re.match(r"bytes (\d+)-\d+/(\d+|\*)", resp.headers.get("content-range", ""))
    return int(m.group(1)) if m else None


def _expected_total(resp: httpx.Response, have: int) -> int | None:
    """Full file size from Content-Range ('bytes a-b/N' or 'bytes */N') or Content-Length."""
    m = re.search(r"/(\d+)\s*$", resp.headers.get("content-range", ""))
    if m:
        return int(m.group(1))
    if resp.status_code == 200 and resp.headers.get("content-length", "").isdigit():
        return int(resp.headers["content-length"])
    return None
