"""The providers' batch APIs, faked on top of ``ProviderServer`` (which keeps serving
the synchronous embeddings the fallback path needs).

  openai  POST /openai/v1/files (multipart, purpose=batch)   GET /openai/v1/files/{id}/content
          POST /openai/v1/batches   GET /openai/v1/batches/{id}   POST /openai/v1/batches/{id}/cancel
  voyage  the same under /voyage/v1 (completion_window 12h, model in request_params)
  gemini  POST /gemini/upload/v1beta/files (resumable: start, then "upload, finalize")
          POST /gemini/v1beta/models/{m}:asyncBatchEmbedContent
          GET  /gemini/v1beta/batches/{id}   POST /gemini/v1beta/batches/{id}:cancel
          GET  /gemini/v1beta/files/{id}:download?alt=media

Every batch walks validating -> in_progress -> finalizing -> its outcome on a
clock (seconds since creation), so any number of pollers, processes or a
restarted worker see the same lifecycle. Outcomes are scripted per flavor
with ``plan(flavor, Plan(...), ...)`` (consumed one per created batch; the
default is a quick success): completed (``fail_texts`` items go to the error
file), failed (validation error, no output), expired / cancelled (the first
``done_fraction`` of requests finished, the rest are errors), ``hold`` (stays
in progress until ``release()`` or a cancel), ``state_word`` (reports a state
no client knows while running). Vectors equal the synchronous endpoint's for
the same text, so batch-built and sync-built stores compare equal.
"""

from __future__ import annotations

import base64
import itertools
import json
import struct
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from tests.provider_server import _OPENAI_DIMS, _DEFAULT_DIMS, ProviderServer, _Handler, fake_vector

TERMINAL = ("completed", "failed", "expired", "cancelled")


@dataclass
class Plan:
    outcome: str = "completed"  # completed | failed | expired | cancelled
    validate_s: float = 0.05
    run_s: float = 0.15
    finalize_s: float = 0.05
    fail_texts: tuple[str, ...] = ()  # requests whose text contains one of these fail (completed outcome)
    done_fraction: float = 0.5  # expired / cancelled: share of requests that finished first
    hold: bool = False  # in progress until release() or cancel
    state_word: str | None = None  # reported instead of in_progress (an unknown state)


@dataclass
class Batch:
    id: str
    flavor: str
    plan: Plan
    created: float
    input_file: str
    requests: list[tuple[str, str, dict]]  # (custom_id, text, extra request fields)
    model: str
    invalid: str | None = None
    cancel_at: float | None = None
    release_at: float | None = None
    ended: float | None = None
    output_file: str | None = None
    error_file: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    polls: int = 0


class BatchServer(ProviderServer):
    def __init__(self) -> None:
        super().__init__()
        # Re-bind with a handler that knows the batch routes (the base one stays untouched).
        self._httpd.server_close()
        handler = type("BatchHandler", (_BatchHandler,), {"owner": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._ids = itertools.count(1)
        self.reset_batches()

    # --- scripting and inspection -------------------------------------------------
    def reset_batches(self) -> None:
        with self._lock:
            self.files: dict[str, bytes] = {}
            self.batches: dict[str, Batch] = {}
            self.plans: dict[str, list[Plan]] = {}
            self.default_plan: dict[str, Plan] = {}
            self.events: list[tuple[str, str, str]] = []  # (flavor, what, id)
            self.failures: dict[tuple[str, str], list[int]] = {}  # (flavor, call) -> HTTP statuses to answer

    def reset(self) -> None:
        super().reset()
        self.reset_batches()

    def plan(self, flavor: str, *plans: Plan) -> None:
        with self._lock:
            self.plans.setdefault(flavor, []).extend(plans)

    def set_default(self, flavor: str, plan: Plan) -> None:
        with self._lock:
            self.default_plan[flavor] = plan

    def fail(self, flavor: str, call: str, *statuses: int) -> None:
        """Answer the next control-plane call(s) (upload|create|status|download|cancel) with these statuses."""
        with self._lock:
            self.failures.setdefault((flavor, call), []).extend(statuses)

    def release(self, batch_id: str | None = None) -> None:
        """Let held batches (all, or one) run to their outcome."""
        with self._lock:
            for b in self.batches.values():
                if b.plan.hold and b.release_at is None and (batch_id is None or b.id == batch_id):
                    b.release_at = time.monotonic()

    def created(self, flavor: str) -> list[Batch]:
        with self._lock:
            return [b for b in self.batches.values() if b.flavor == flavor]

    def submitted_texts(self, flavor: str) -> list[str]:
        return [t for b in self.created(flavor) for _, t, _ in b.requests]

    def count_events(self, flavor: str, what: str) -> int:
        with self._lock:
            return sum(1 for f, w, _ in self.events if f == flavor and w == what)

    def state_of(self, batch_id: str) -> str:
        with self._lock:
            return self._status(self.batches[batch_id])

    def max_concurrent(self, flavor: str | None = None) -> int:
        """Most batches that were created but not yet terminal at the same moment."""
        with self._lock:
            now = time.monotonic()
            for b in self.batches.values():  # settle end times of batches nobody polled lately
                self._status(b)
            spans = [(b.created, b.ended if b.ended is not None else now)
                     for b in self.batches.values() if flavor in (None, b.flavor)]
        points = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda p: (p[0], p[1]))
        cur = best = 0
        for _, d in points:
            cur += d
            best = max(best, cur)
        return best

    # --- lifecycle (call with the lock held) -------------------------------------------
    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):05d}"

    def _next_plan(self, flavor: str) -> Plan:
        q = self.plans.get(flavor)
        if q:
            return q.pop(0)
        return self.default_plan.get(flavor) or Plan()

    def _status(self, b: Batch) -> str:
        now = time.monotonic()
        p = b.plan
        if b.ended is not None:
            return b.counts["_status"]  # type: ignore[return-value]
        if b.invalid is not None:
            return self._finish(b, "failed", b.created + p.validate_s) if now >= b.created + p.validate_s \
                else "validating"
        if b.cancel_at is not None:
            if now < b.cancel_at + 0.05:
                return "cancelling"
            return self._finish(b, "cancelled", b.cancel_at + 0.05)
        if now < b.created + p.validate_s:
            return "validating"
        if p.hold and b.release_at is None:
            return p.state_word or "in_progress"
        run_end = (b.release_at + 0.01) if p.hold else b.created + p.validate_s + p.run_s
        if now < run_end:
            return p.state_word or "in_progress"
        if now < run_end + p.finalize_s:
            return "finalizing"
        return self._finish(b, p.outcome, run_end + p.finalize_s)

    def _finish(self, b: Batch, outcome: str, at: float) -> str:
        """Write the output / error files once, when the batch first turns terminal."""
        b.ended = at
        ok: list[tuple[str, str, dict]] = []
        bad: list[tuple[str, str, str]] = []  # (custom_id, code, message)
        reqs = [] if b.invalid is not None else b.requests
        if outcome == "completed":
            for r in reqs:
                if any(s in r[1] for s in b.plan.fail_texts):
                    bad.append((r[0], "server_error", "The server had an error processing this request"))
                else:
                    ok.append(r)
        elif outcome in ("expired", "cancelled"):
            n = int(len(reqs) * b.plan.done_fraction)
            ok = reqs[:n]
            code = "batch_expired" if outcome == "expired" else "batch_cancelled"
            bad = [(r[0], code, f"This request was not executed: the batch {outcome}.") for r in reqs[n:]]
        if outcome == "failed" and b.invalid is None:
            b.invalid = "The batch failed"
        b.counts = {"total": len(b.requests), "completed": len(ok), "failed": len(bad) or (
            len(b.requests) if outcome == "failed" else 0), "_status": outcome}  # type: ignore[dict-item]
        writer = self._gemini_files if b.flavor == "gemini" else self._openai_files
        writer(b, ok, bad)
        return outcome

    def _vector(self, b: Batch, text: str, extra: dict) -> list[float]:
        if b.flavor == "gemini":
            dims = self.state.dims.get("gemini") or int(extra.get("output_dimensionality")
                                                        or extra.get("outputDimensionality") or 3072)
            task = extra.get("task_type") or extra.get("taskType") or ""
            return fake_vector(f"{task}|{text}", dims, "gemini")
        dims = self.state.dims.get(b.flavor) or (
            _OPENAI_DIMS.get(b.model) if b.flavor == "openai" else None) or _DEFAULT_DIMS[b.flavor]
        return fake_vector(text, int(dims), b.flavor)

    def _openai_files(self, b: Batch, ok: list, bad: list) -> None:
        if ok:
            lines = [{"id": f"batch_req_{i}", "custom_id": cid, "error": None, "response": {
                "status_code": 200, "request_id": f"req_{i}",
                "body": {"object": "list", "model": b.model, "usage": {"prompt_tokens": len(t), "total_tokens": len(t)},
                         "data": [{"object": "embedding", "index": 0, "embedding": _encode(self._vector(b, t, extra),
                                                                                       extra)}]}}}
                for i, (cid, t, extra) in enumerate(ok)]
            b.output_file = self._store_file(lines)
        if bad:
            lines = []
            for i, (cid, code, msg) in enumerate(bad):
                if code == "server_error":  # a request that ran and failed: HTTP error inside the response
                    lines.append({"id": f"batch_req_e{i}", "custom_id": cid, "error": None, "response": {
                        "status_code": 500, "request_id": f"req_e{i}",
                        "body": {"error": {"message": msg, "type": "server_error"}}}})
                else:  # never ran (expired / cancelled)
                    lines.append({"id": f"batch_req_e{i}", "custom_id": cid, "response": None,
                                  "error": {"code": code, "message": msg}})
            b.error_file = self._store_file(lines)

    def _gemini_files(self, b: Batch, ok: list, bad: list) -> None:
        if not ok and not bad:
            return
        lines = [{"key": cid, "response": {"embedding": {"values": self._vector(b, t, extra)}}} for cid, t, extra in ok]
        lines += [{"key": cid, "error": {"code": 13, "message": msg, "status": "INTERNAL"}} for cid, _, msg in bad]
        b.output_file = self._store_file(lines)

    def _store_file(self, lines: list[dict]) -> str:
        fid = self._new_id("file-out")
        self.files[fid] = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
        return fid


def _encode(vec: list[float], extra: dict) -> Any:
    """The vector as the request asked for it: floats, or base64 little-endian float32."""
    if extra.get("encoding_format") == "base64":
        return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
    return vec


def _parse_multipart(body: bytes, content_type: str) -> dict[str, tuple[str | None, bytes]]:
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        return {}
    out: dict[str, tuple[str | None, bytes]] = {}
    for part in body.split(b"--" + m.group(1).encode())[1:]:
        if part.startswith(b"--"):
            break
        head, _, data = part.partition(b"\r\n\r\n")
        if data.endswith(b"\r\n"):
            data = data[:-2]
        name = re.search(rb'name="([^"]+)"', head)
        fname = re.search(rb'filename="([^"]*)"', head)
        if name:
            out[name.group(1).decode()] = (fname.group(1).decode() if fname else None, data)
    return out


class _BatchHandler(_Handler):
    owner: BatchServer

    def _auth(self, flavor: str) -> bool:
        if self._key_ok(flavor):
            return True
        self._send(401, self._error_body(flavor, 401, "Incorrect API key provided", {}))
        return False

    def _scripted(self, flavor: str, call: str) -> bool:
        """Answer with a scripted failure for this call, if one is queued."""
        with self.owner._lock:
            q = self.owner.failures.get((flavor, call))
            status = q.pop(0) if q else None
        if status is None:
            return False
        self._log_batch(flavor, f"{call}-failed", str(status))
        body = ({"error": {"code": status, "message": "scripted failure", "status": "INTERNAL"}} if flavor == "gemini"
                else self._error_body(flavor, status, "scripted failure", {}))
        self._send(status, body)
        return True

    def _log_batch(self, flavor: str, what: str, ident: str) -> None:
        self._log(flavor, {"batch_api": what, "id": ident}, 0)
        with self.owner._lock:
            self.owner.events.append((flavor, what, ident))

    # --- routing --------------------------------------------------------------------
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        m = re.match(r"^/(openai|voyage)/v1/batches/([^/]+)$", path)
        if m:
            return self._get_batch(m.group(1), m.group(2))
        m = re.match(r"^/(openai|voyage)/v1/files/([^/]+)/content$", path)
        if m:
            return self._file_content(m.group(1), m.group(2))
        m = re.match(r"^/gemini/(?:download/)?v1beta/batches/([^/:]+)$", path)
        if m:
            return self._gemini_get(m.group(1))
        m = re.match(r"^/gemini/(?:download/)?v1beta/files/([^/:]+):download$", path)
        if m:
            return self._file_content("gemini", m.group(1))
        super().do_GET()

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if re.match(r"^/(openai|voyage)/v1/(files|batches)(/[^/]+/cancel)?$", path) or path.startswith(
                "/gemini/upload/") or re.match(r"^/gemini/v1beta/(batches/[^/]+:cancel|models/[^/]+:asyncBatch)", path):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            return self._batch_post(path, raw)
        super().do_POST()

    def _batch_post(self, path: str, raw: bytes) -> None:
        m = re.match(r"^/(openai|voyage)/v1/files$", path)
        if m:
            return self._upload(m.group(1), raw)
        m = re.match(r"^/(openai|voyage)/v1/batches$", path)
        if m:
            return self._create(m.group(1), json.loads(raw or b"{}"))
        m = re.match(r"^/(openai|voyage)/v1/batches/([^/]+)/cancel$", path)
        if m:
            return self._cancel(m.group(1), m.group(2))
        if path.startswith("/gemini/upload/"):
            return self._gemini_upload(raw)
        m = re.match(r"^/gemini/v1beta/models/([^/:]+):asyncBatchEmbedContent$", path)
        if m:
            return self._gemini_create(m.group(1), json.loads(raw or b"{}"))
        m = re.match(r"^/gemini/v1beta/batches/([^/:]+):cancel$", path)
        if m:
            return self._cancel("gemini", f"batches/{m.group(1)}")
        self._send(404, {"error": f"no route {path}"})

    # --- OpenAI-style files + batches ------------------------------------------------------
    def _upload(self, flavor: str, raw: bytes) -> None:
        if not self._auth(flavor):
            return
        if self._scripted(flavor, "upload"):
            return
        parts = _parse_multipart(raw, self.headers.get("Content-Type", ""))
        purpose = parts.get("purpose", (None, b""))[1].decode()
        fname, data = parts.get("file", (None, b""))
        if purpose != "batch" or not data:
            return self._send(400, self._error_body(flavor, 400, "purpose must be 'batch' and a file is required", {}))
        with self.owner._lock:
            fid = self.owner._new_id("file-in")
            self.owner.files[fid] = data
        self._log_batch(flavor, "upload", fid)
        self._send(200, {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                         "filename": fname or "upload.jsonl", "purpose": "batch", "status": "processed"})

    def _create(self, flavor: str, body: dict) -> None:
        if not self._auth(flavor):
            return
        if self._scripted(flavor, "create"):
            return
        window = "12h" if flavor == "voyage" else "24h"
        fid = body.get("input_file_id")
        if body.get("endpoint") != "/v1/embeddings" or body.get("completion_window") != window:
            return self._send(400, self._error_body(flavor, 400, "endpoint must be /v1/embeddings, "
                                                    f"completion_window {window}", {}))
        with self.owner._lock:
            data = self.owner.files.get(fid or "")
        if data is None:
            return self._send(404, self._error_body(flavor, 404, f"No such File object: {fid}", {}))
        reqs, model, invalid = [], (body.get("request_params") or {}).get("model", ""), None
        for n, line in enumerate(data.decode().splitlines(), 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            text = (obj.get("body") or {}).get("input")
            if flavor == "openai":
                model = (obj.get("body") or {}).get("model", model)
                if obj.get("method") != "POST" or obj.get("url") != "/v1/embeddings" or not model:
                    invalid = f"line {n}: method/url/model invalid"
            if not isinstance(obj.get("custom_id"), str) or not isinstance(text, str):
                invalid = f"line {n}: custom_id and body.input are required"
            reqs.append((obj.get("custom_id"), text, {k: v for k, v in (obj.get("body") or {}).items()
                                                       if k == "encoding_format"}))
        if len({r[0] for r in reqs}) != len(reqs):
            invalid = "custom_id values must be unique"
        if flavor == "voyage" and not model:
            invalid = "request_params.model is required"
        with self.owner._lock:
            plan = self.owner._next_plan(flavor)
            b = Batch(self.owner._new_id("batch_"), flavor, plan, time.monotonic(), fid, reqs, model, invalid)
            self.owner.batches[b.id] = b
        self._log_batch(flavor, "create", b.id)
        self._send(200, self._batch_json(b, body.get("metadata")))

    def _batch_json(self, b: Batch, metadata: Any = None) -> dict:
        with self.owner._lock:
            status = self.owner._status(b)
            errors = None
            if status == "failed":
                errors = {"object": "list", "data": [{"code": "invalid_request", "line": 1,
                                                       "message": b.invalid or "failed"}]}
            counts = {k: v for k, v in b.counts.items() if not k.startswith("_")} or {
                "total": len(b.requests), "completed": 0, "failed": 0}
            return {"id": b.id, "object": "batch", "endpoint": "/v1/embeddings", "errors": errors,
                    "input_file_id": b.input_file, "completion_window": "12h" if b.flavor == "voyage" else "24h",
                    "status": status, "output_file_id": b.output_file, "error_file_id": b.error_file,
                    "created_at": int(time.time()), "request_counts": counts, "metadata": metadata or {}}

    def _get_batch(self, flavor: str, batch_id: str) -> None:
        if not self._auth(flavor):
            return
        if self._scripted(flavor, "status"):
            return
        with self.owner._lock:
            b = self.owner.batches.get(batch_id)
            if b is not None:
                b.polls += 1
        if b is None or b.flavor != flavor:
            return self._send(404, self._error_body(flavor, 404, f"No batch {batch_id}", {}))
        self._log_batch(flavor, "status", batch_id)
        self._send(200, self._batch_json(b))

    def _cancel(self, flavor: str, batch_id: str) -> None:
        if not self._auth(flavor):
            return
        if self._scripted(flavor, "cancel"):
            return
        with self.owner._lock:
            b = self.owner.batches.get(batch_id)
            if b is not None and self.owner._status(b) not in TERMINAL and b.cancel_at is None:
                b.cancel_at = time.monotonic()
        if b is None:
            return self._send(404, self._error_body(flavor, 404, f"No batch {batch_id}", {}))
        self._log_batch(flavor, "cancel", batch_id)
        if flavor == "gemini":
            return self._send(200, {})
        self._send(200, self._batch_json(b))

    def _file_content(self, flavor: str, file_id: str) -> None:
        if not self._auth(flavor):
            return
        if self._scripted(flavor, "download"):
            return
        with self.owner._lock:
            data = self.owner.files.get(file_id)
        if data is None:
            return self._send(404, self._error_body(flavor, 404, f"No such file {file_id}", {}))
        self._log_batch(flavor, "download", file_id)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # --- Gemini ----------------------------------------------------------------------------
    def _gemini_upload(self, raw: bytes) -> None:
        if not self._auth("gemini"):
            return
        command = self.headers.get("X-Goog-Upload-Command", "")
        if command == "start" and self._scripted("gemini", "upload"):
            return
        if command == "start":
            with self.owner._lock:
                uid = self.owner._new_id("up")
            host, port = self.server.server_address[:2]
            url = f"http://{host}:{port}/gemini/upload/v1beta/files?upload_id={uid}"
            return self._send(200, {}, {"X-Goog-Upload-URL": url, "X-Goog-Upload-Status": "active"})
        if "finalize" in command:
            with self.owner._lock:
                fid = self.owner._new_id("in")
                self.owner.files[fid] = raw
            self._log_batch("gemini", "upload", fid)
            return self._send(200, {"file": {"name": f"files/{fid}", "mimeType": "application/jsonl",
                                             "sizeBytes": str(len(raw)), "state": "ACTIVE"}},
                              {"X-Goog-Upload-Status": "final"})
        self._send(400, {"error": {"code": 400, "message": "bad upload command", "status": "INVALID_ARGUMENT"}})

    def _gemini_create(self, model: str, body: dict) -> None:
        if not self._auth("gemini"):
            return
        if self._scripted("gemini", "create"):
            return
        batch = body.get("batch") or {}
        cfg = batch.get("inputConfig") or batch.get("input_config") or {}
        fname = cfg.get("file_name") or cfg.get("fileName") or ""
        with self.owner._lock:
            data = self.owner.files.get(fname.removeprefix("files/"))
        if data is None:
            return self._send(400, {"error": {"code": 400, "message": f"file {fname} not found",
                                              "status": "INVALID_ARGUMENT"}})
        reqs, invalid = [], None
        for n, line in enumerate(data.decode().splitlines(), 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            req = obj.get("request") or {}
            parts = (req.get("content") or {}).get("parts") or []
            text = "".join(p.get("text", "") for p in parts)
            if not isinstance(obj.get("key"), str) or not parts:
                invalid = f"line {n}: key and request.content are required"
            reqs.append((obj.get("key"), text, {k: v for k, v in req.items() if k != "content"}))
        with self.owner._lock:
            plan = self.owner._next_plan("gemini")
            b = Batch(f"batches/{self.owner._new_id('gb')}", "gemini", plan, time.monotonic(), fname, reqs, model,
                      invalid)
            self.owner.batches[b.id] = b
        self._log_batch("gemini", "create", b.id)
        self._send(200, self._gemini_json(b, batch.get("displayName")))

    _GEMINI_STATES = {"validating": "BATCH_STATE_PENDING", "in_progress": "BATCH_STATE_RUNNING",
                      "finalizing": "BATCH_STATE_RUNNING", "cancelling": "BATCH_STATE_RUNNING",
                      "completed": "BATCH_STATE_SUCCEEDED", "failed": "BATCH_STATE_FAILED",
                      "expired": "BATCH_STATE_EXPIRED", "cancelled": "BATCH_STATE_CANCELLED"}

    def _gemini_json(self, b: Batch, display: str | None = None) -> dict:
        with self.owner._lock:
            status = self.owner._status(b)
            meta: dict[str, Any] = {
                "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.EmbedContentBatch",
                "model": f"models/{b.model}", "displayName": display or "batch",
                "state": self._GEMINI_STATES.get(status, f"BATCH_STATE_{status.upper()}"),
                "createTime": "2026-01-01T00:00:00Z",
                "batchStats": {"requestCount": str(len(b.requests))},
            }
            if b.output_file:
                meta["output"] = {"responsesFile": f"files/{b.output_file}"}
            out: dict[str, Any] = {"name": b.id, "metadata": meta, "done": status in TERMINAL}
            if status == "failed":
                out["error"] = {"code": 3, "message": b.invalid or "failed"}
            return out

    def _gemini_get(self, short: str) -> None:
        if not self._auth("gemini"):
            return
        if self._scripted("gemini", "status"):
            return
        with self.owner._lock:
            b = self.owner.batches.get(f"batches/{short}")
            if b is not None:
                b.polls += 1
        if b is None:
            return self._send(404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}})
        self._log_batch("gemini", "status", b.id)
        self._send(200, self._gemini_json(b))
