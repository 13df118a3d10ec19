"""A local fake of the embedding providers' HTTP APIs, for driving the real SDK clients.

One ThreadingHTTPServer on 127.0.0.1 (port 0) serves, under a prefix per flavor:

  openai   POST /openai/v1/embeddings         (also /v1/embeddings) float or base64 (LE float32)
  voyage   POST /voyage/v1/embeddings         {input, model, input_type, encoding_format}
  mistral  POST /mistral/v1/embeddings
  gemini   POST /gemini/<ver>/models/<m>:batchEmbedContents | :embedContent
           (text parts, and inline_data {mime_type, data base64} parts: logged in ``media``)
  ollama   POST /ollama/api/embeddings        {model, prompt} -> {embedding}
  hf       GET  /hf/<owner>/<repo>/resolve/<rev>/<file>   (Range: bytes=N- supported)

Vectors are derived from sha256(flavor|text), so the same text gives the same
vector and different flavors give different ones. Failures are scripted per
flavor: ``script(flavor, reply, ...)`` queues replies consumed one per request,
``always(flavor, reply)`` answers every request; a reply is a dict such as
``{"status": 429, "message": "...", "headers": {"Retry-After": "1"}}`` (the
body is written in that provider's error format) or ``{"kind": k}`` with k in
wrong_dims | nan | short | zero | delay (+"seconds") | reset. ``max_items``
makes a flavor answer 400 "too many inputs" (in its own wording) above N
inputs; ``keys`` makes it answer 401 for any other API key. Every request is
logged (``requests``) with lower-cased headers and the parsed body.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

FLAVORS = ("openai", "voyage", "mistral", "gemini", "ollama")

_OPENAI_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
_DEFAULT_DIMS = {"openai": 64, "voyage": 1024, "mistral": 1024, "ollama": 768}
_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                  429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


def fake_vector(text: str, dims: int, salt: str = "") -> list[float]:
    """Deterministic unit vector for text (float32 precision)."""
    seed = int.from_bytes(hashlib.sha256(f"{salt}|{text}".encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dims)
    return (v / np.linalg.norm(v)).astype(np.float32).astype(float).tolist()


@dataclass
class LoggedRequest:
    flavor: str
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    n_items: int


@dataclass
class _State:
    scripts: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    sticky: dict[str, dict] = field(default_factory=dict)
    max_items: dict[str, int] = field(default_factory=dict)
    latency_s: dict[str, float] = field(default_factory=dict)  # a fixed wait before every answer (bench/scale.py)
    keys: dict[str, str] = field(default_factory=dict)
    dims: dict[str, int] = field(default_factory=dict)
    refuse_text: dict[str, str] = field(default_factory=dict)  # a request with an input holding it gets a 400
    files: dict[str, bytes] = field(default_factory=dict)
    captions: dict[str, str] = field(default_factory=dict)  # sha256(bytes) -> text the media "shows"
    hf_ignore_range: bool = False
    hf_cut_after: int | None = None  # send only this many body bytes once, then drop the connection


class ProviderServer:
    def __init__(self) -> None:
        self.state = _State()
        self.requests: list[LoggedRequest] = []
        self.media: list[dict[str, Any]] = []  # one entry per gemini inline_data part received
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"owner": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    # --- lifecycle ------------------------------------------------------------
    def start(self) -> "ProviderServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "ProviderServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def base(self, flavor: str) -> str:
        """The base URL to configure for a flavor (what the SDK appends its path to)."""
        return {
            "openai": f"{self.url}/openai/v1",
            "voyage": f"{self.url}/voyage/v1",
            "mistral": f"{self.url}/mistral/v1",
            "gemini": f"{self.url}/gemini/v1beta",
            "ollama": f"{self.url}/ollama",
            "hf": f"{self.url}/hf",
        }[flavor]

    # --- scripting --------------------------------------------------------------
    def reset(self) -> None:
        with self._lock:
            self.state = _State()
            self.requests.clear()
            self.media.clear()

    def caption(self, data: bytes, text: str) -> None:
        """Make gemini embed these media bytes where it embeds the *query* ``text``.

        A stand-in for a real multimodal model, which puts a photo of a sunset
        near the query "sunset": the fake has no vision, so the test says what
        the bytes show. Uncaptioned media get a vector from their bytes' hash.
        """
        with self._lock:
            self.state.captions[hashlib.sha256(data).hexdigest()] = text

    def script(self, flavor: str, *replies: dict) -> None:
        with self._lock:
            self.state.scripts[flavor].extend(replies)

    def always(self, flavor: str, reply: dict | None) -> None:
        with self._lock:
            if reply is None:
                self.state.sticky.pop(flavor, None)
            else:
                self.state.sticky[flavor] = reply

    def log_for(self, flavor: str) -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.requests if r.flavor == flavor]

    def count(self, flavor: str) -> int:
        return len(self.log_for(flavor))

    def _next_reply(self, flavor: str) -> dict | None:
        with self._lock:
            q = self.state.scripts.get(flavor)
            if q:
                return q.popleft()
            return self.state.sticky.get(flavor)

    def _log(self, req: LoggedRequest) -> None:
        with self._lock:
            self.requests.append(req)


class _Handler(BaseHTTPRequestHandler):
    owner: ProviderServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    # --- plumbing -------------------------------------------------------------
    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error_body(self, flavor: str, status: int, message: str, reply: dict) -> Any:
        if "body" in reply:
            return reply["body"]
        if flavor == "openai":
            return {"error": {"message": message, "type": "invalid_request_error", "code": reply.get("code")}}
        if flavor == "gemini":
            err: dict[str, Any] = {"code": status, "message": message, "status": _GOOGLE_STATUS.get(status, "UNKNOWN")}
            if reply.get("retry_delay"):
                err["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                   "retryDelay": reply["retry_delay"]}]
            return {"error": err}
        if flavor == "voyage":
            return {"detail": message}
        if flavor == "mistral":
            return {"object": "error", "message": message, "type": "invalid_request_error", "code": None}
        return {"error": message}

    def _too_many_message(self, flavor: str, n: int, cap: int) -> str:
        return {
            "openai": f"'input' : array too long. Expected an array with maximum length {cap}, but got an array with length {n} instead.",
            "gemini": f"* BatchEmbedContentsRequest.requests: at most {cap} requests can be in one batch",
            "voyage": f"The batch size limit is {cap}. Your batch size is {n}.",
            "mistral": "Too many inputs in request, split into more batches.",
        }.get(flavor, "too many inputs")

    # --- routing ----------------------------------------------------------------
    def do_GET(self) -> None:
        if self.path.startswith("/hf/"):
            self._serve_file()
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = self.path.split("?", 1)[0]
        m = re.match(r"^/(openai|voyage|mistral)?/?v1/embeddings$", path)
        if m:
            return self._embeddings(m.group(1) or "openai", body)
        m = re.match(r"^/gemini/(v[\w]+)/models/([^:/]+):(batchEmbedContents|embedContent)$", path)
        if m:
            return self._gemini(m.group(2), m.group(3), body)
        if path == "/ollama/api/embeddings":
            return self._ollama(body)
        self._send(404, {"error": f"no route {path}"})

    def _log(self, flavor: str, body: Any, n_items: int) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.owner._log(LoggedRequest(flavor, self.command, self.path, headers, body, n_items))

    def _key_ok(self, flavor: str) -> bool:
        want = self.owner.state.keys.get(flavor)
        if want is None:
            return True
        if flavor == "gemini":
            return self.headers.get("x-goog-api-key") == want
        return self.headers.get("Authorization") == f"Bearer {want}"

    def _gate(self, flavor: str, n_items: int) -> dict | None:
        """Failure handling common to all flavors. Returns the reply when it was sent."""
        if self.owner.state.latency_s.get(flavor):
            time.sleep(self.owner.state.latency_s[flavor])
        if not self._key_ok(flavor):
            reply = {"status": 401, "message": "Incorrect API key provided: sk-***."}
        else:
            reply = self.owner._next_reply(flavor) or {}
            cap = self.owner.state.max_items.get(flavor)
            if not reply and cap is not None and n_items > cap:
                reply = {"status": 400, "message": self._too_many_message(flavor, n_items, cap)}
        if reply.get("kind") == "reset":
            self.close_connection = True
            self.connection.shutdown(2)
            return reply
        if reply.get("kind") == "html":  # a captive portal or a wrong proxy path: 200, and a web page
            self._send(200, b"<html><body><h1>Please sign in</h1></body></html>", content_type="text/html")
            return reply
        if reply.get("kind") == "delay":
            time.sleep(float(reply.get("seconds", 1)))
            return None
        if "status" in reply:
            status = int(reply["status"])
            body = self._error_body(flavor, status, reply.get("message", "error"), reply)
            self._send(status, body, reply.get("headers"))
            return reply
        return reply or None

    def _vectors(self, flavor: str, texts: list[str], dims: int, reply: dict | None) -> list[list[float]]:
        vecs = [fake_vector(t, dims, flavor) for t in texts]
        kind = (reply or {}).get("kind")
        if kind == "wrong_dims":
            vecs = [fake_vector(t, dims + 3, flavor) for t in texts]
        elif kind == "nan":
            vecs[0][0] = float("nan")
        elif kind == "short":
            vecs = vecs[:-1]
        elif kind == "zero":
            vecs[0] = [0.0] * dims
        return vecs

    # --- flavors ----------------------------------------------------------------
    def _embeddings(self, flavor: str, body: Any) -> None:
        inp = (body or {}).get("input")
        texts = [inp] if isinstance(inp, str) else list(inp or [])
        self._log(flavor, body, len(texts))
        reply = self._gate(flavor, len(texts))
        if reply is not None and ("status" in reply or reply.get("kind") in ("reset", "html")):
            return
        poison = self.owner.state.refuse_text.get(flavor)
        if poison and any(poison in t for t in texts):  # a content filter: the whole request is refused
            self._send(400, self._error_body(flavor, 400, "input rejected by the content filter", {}))
            return
        model = body.get("model", "")
        dims = self.owner.state.dims.get(flavor) or (
            body.get("dimensions") or body.get("output_dimension")
            or (_OPENAI_DIMS.get(model) if flavor == "openai" else None) or _DEFAULT_DIMS[flavor])
        vecs = self._vectors(flavor, texts, int(dims), reply)
        b64 = body.get("encoding_format") == "base64"

        def enc(v: list[float]) -> Any:
            return base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() if b64 else v

        out = {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": enc(v)} for i, v in enumerate(vecs)],
            "model": model,
            "usage": {"prompt_tokens": sum(len(t) for t in texts), "total_tokens": sum(len(t) for t in texts)},
        }
        self._send(200, out)

    def _gemini(self, model: str, method: str, body: Any) -> None:
        body = body or {}
        reqs = body.get("requests") if method == "batchEmbedContents" else [body]
        reqs = reqs or []
        try:
            texts = [self._gemini_input(r) for r in reqs]
        except ValueError as exc:
            self._log("gemini", body, len(reqs))
            return self._send(400, self._error_body("gemini", 400, str(exc), {}))
        self._log("gemini", body, len(texts))
        reply = self._gate("gemini", len(texts))
        if reply is not None and ("status" in reply or reply.get("kind") == "reset"):
            return
        default = 768 if model == "text-embedding-004" else 3072
        dims_req = {r.get("outputDimensionality") for r in reqs} - {None}
        dims = self.owner.state.dims.get("gemini") or (dims_req.pop() if dims_req else default)
        # Task type changes the vector; a captioned medium lands exactly on its caption's query vector.
        salted = [t[len("caption|"):] if t.startswith("caption|") else f"{r.get('taskType', '')}|{t}"
                  for r, t in zip(reqs, texts)]
        vecs = self._vectors("gemini", salted, int(dims), reply)
        if method == "embedContent":
            self._send(200, {"embedding": {"values": vecs[0]}})
        else:
            self._send(200, {"embeddings": [{"values": v} for v in vecs]})

    def _gemini_input(self, req: dict) -> str:
        """What one request's content is embedded from: its text, or its inline media (logged)."""
        out = []
        for part in (req.get("content") or {}).get("parts", []):
            inline = part.get("inline_data") or part.get("inlineData")
            if inline is None:
                out.append(part.get("text", ""))
                continue
            mime = inline.get("mime_type") or inline.get("mimeType")
            try:
                data = base64.b64decode(inline.get("data") or "", validate=True)
            except ValueError:
                raise ValueError("Invalid value at 'requests[].content.parts[].inline_data.data' (TYPE_BYTES), "
                                 "Base64 decoding failed") from None
            if not mime or not data:
                raise ValueError("* EmbedContentRequest.content.parts[].inline_data: mime_type and data are required")
            digest = hashlib.sha256(data).hexdigest()
            with self.owner._lock:
                self.owner.media.append({"size": len(data), "mime_type": mime, "sha256": digest,
                                         "outputDimensionality": req.get("outputDimensionality")})
                caption = self.owner.state.captions.get(digest)
            out.append(f"caption|RETRIEVAL_QUERY|{caption}" if caption is not None else f"media:{mime}:{digest}")
        return "".join(out)

    def _ollama(self, body: Any) -> None:
        body = body or {}
        self._log("ollama", body, 1)
        reply = self._gate("ollama", 1)
        if reply is not None and ("status" in reply or reply.get("kind") == "reset"):
            return
        dims = self.owner.state.dims.get("ollama") or _DEFAULT_DIMS["ollama"]
        vec = self._vectors("ollama", [str(body.get("prompt", ""))], dims, reply)
        self._send(200, {"embedding": vec[0] if vec else []})

    def _serve_file(self) -> None:
        m = re.match(r"^/hf/([^/]+)/([^/]+)/resolve/([^/]+)/(.+)$", self.path)
        st = self.owner.state
        key = f"{m.group(1)}/{m.group(2)}/{m.group(4)}" if m else ""
        self._log("hf", None, 0)
        data = st.files.get(key)
        if data is None:
            return self._send(404, {"error": "Entry not found"})
        start = 0
        rng = re.match(r"bytes=(\d+)-$", self.headers.get("Range", ""))
        if rng and not st.hf_ignore_range:
            start = int(rng.group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        chunk = data[start:]
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(chunk)))
        cut = st.hf_cut_after
        if cut is not None:
            st.hf_cut_after = None
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(chunk[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.end_headers()
        self.wfile.write(chunk)
