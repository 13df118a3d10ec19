"""Compute-side embedding workers that never touch the filesystem (issue 18).

The compute workers (`memindex worker --queues embed batch`: embedding and the
batch-API jobs) run in their own mount namespace with a tmpfs over every agent's
workspace, state dir and config (keys from their environment); the file side
(`--queues sync`) and the writer run normally. Three agents index and search
exactly as with the embedded default, also with `remote.batch.enabled` against the
local batch server. A huge file travels in bounded parts and still indexes whole.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
import sys

import dramatiq
import pytest

from memindex.pipeline.search.reference import REFERENCE_TEXTS
from tests.batch_server import BatchServer, Plan
from tests.conftest import REPO, Agent, module_server, run_cli, wait_for
from tests.test_pipeline_redis import _kill, _spawn

REFERENCE = frozenset(REFERENCE_TEXTS)

server = module_server(BatchServer)

AGENTS, FILES = 3, 12
QUERIES = ("relay rack blue", "kumquat harvest", "note 7 about the heron")


def _populate(a: Agent) -> None:
    for i in range(FILES):
        a.write(f"memory/2026-02-{i + 1:02d}.md",
                f"# {a.root.name} day {i}\n\nThe relay in rack {i} is blue.\n\n## Garden\n"
                f"Note {i} about the heron and the kumquat harvest of {a.root.name}.\n")


KEY = "sk-compute-test"  # in the config for the file side; in the environment of the hidden compute hosts


def _config(a: Agent, srv: BatchServer, batch: bool) -> None:
    remote = {"baseUrl": srv.base("openai"), "apiKey": KEY}
    if batch:
        remote["batch"] = {"enabled": True, "pollIntervalMs": 100}
    a.memory_config({"provider": "openai", "fallback": "none", "remote": remote})


def _unshare_ok() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs none /mnt"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"unshare -m / mount not permitted here: {probe.stderr.strip()}"


def _hidden_compute(url: str, logdir, hide: list, name: str = "compute", key: str | None = KEY) -> subprocess.Popen:
    """Compute workers in a new mount namespace: a read-only, empty tmpfs over each hidden dir
    (``key``: the OPENAI_API_KEY in their environment, None for none)."""
    mounts = " && ".join(f"mount -t tmpfs -o ro none {shlex.quote(str(d))}" for d in hide)
    worker = " ".join(shlex.quote(x) for x in (sys.executable, "-m", "memindex", "worker", "--queues", "embed",
                                                 "batch", "--processes", "2", "--threads", "2"))
    log = open(logdir / f"{name}.log", "ab")
    return subprocess.Popen(["unshare", "-m", "sh", "-c", f"{mounts} && exec {worker}"], cwd=REPO,
                            env={**{k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"},
                                 "MEMINDEX_BROKER_URL": url, **({"OPENAI_API_KEY": key} if key else {})},
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _queues(url: str) -> dict:
    out = run_cli("queues", "--json", env={"MEMINDEX_BROKER_URL": url})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _idle(url: str) -> bool:
    return all(q["ready"] + q["delayed"] + q["running"] + q["prefetched"] == 0
               for q in _queues(url)["queues"].values())


def _complete(a: Agent) -> bool:
    from memindex.producers.dispatch import pending_files

    rows = a.store_rows()
    return len({r[1] for r in rows}) == FILES and pending_files(a.settings()) == 0


def _searches(a: Agent) -> list:
    return [[(r["path"], r["startLine"], r["endLine"], round(r["score"], 5)) for r in a.search(q)["results"]]
            for q in QUERIES]


def _vectors(a: Agent) -> dict:
    from tests.conftest import live_vectors

    return live_vectors(a)


@pytest.mark.redis
@pytest.mark.parametrize("batch", [False, True], ids=["sync", "batch"])
def test_hidden_compute_workers_index_like_the_embedded_default(tmp_path, redis_server, server, fresh_services,
                                                                batch):
    why = _unshare_ok()
    if why:
        pytest.skip(why)
    srv = server
    if batch:  # one chunk fails in the batch job: it comes back through the compute side
        srv.plan("openai", Plan(fail_texts=("rack 3 is blue",)))
    url = redis_server.url
    agents = [Agent(tmp_path / f"agent{i}") for i in range(AGENTS)]
    for a in agents:
        _config(a, srv, batch)
        _populate(a)
    hide = [a.root for a in agents]  # workspace, state dir and config: the compute host sees none of them
    procs = [_hidden_compute(url, tmp_path, hide),
             _spawn(url, tmp_path, "files", "worker", "--queues", "sync", "--processes", "1",
                    "--threads", "2"),
             _spawn(url, tmp_path, "writer", "worker", "--writer")]
    try:
        assert wait_for(lambda: {w["kind"] for w in _queues(url)["workers"]} == {"compute", "worker", "writer"},
                        30, step=0.3), _queues(url)["workers"]
        for a in agents:
            _request_sync(url, a)
        assert wait_for(lambda: all(_complete(a) for a in agents) and _idle(url), 120, step=0.5), \
            (tmp_path / "compute.log").read_text()[-3000:]
    finally:
        for p in procs:
            _kill(p)
    compute_log = (tmp_path / "compute.log").read_text()
    for bad in ("Traceback", "cannot read", "cache lookup failed", "no embedding provider"):
        assert bad not in compute_log, compute_log[-3000:]
    # (but the search's reference texts, which each store's first sync embeds directly, never batched)
    sync_texts = [t for r in srv.log_for("openai") if r.path.endswith("/embeddings")
                  for t in (r.body or {}).get("input", []) if t not in REFERENCE]
    # Only the compute side embeds text synchronously (the file side consumes no embed queue).
    if batch:
        assert srv.count_events("openai", "create") >= 1 and srv.submitted_texts("openai")
        # The batch jobs ran in the hidden namespace, their state in Redis (no file beside a store).
        assert "submitted openai batch" in compute_log, compute_log[-3000:]
        assert not [p for a in agents for p in a.state.rglob("*.batches.sqlite")]
        failed = [t for t in sync_texts if "rack 3 is blue" in t]
        assert failed and len(sync_texts) < AGENTS * FILES, sync_texts  # the rest came from batch jobs
    else:
        assert len(sync_texts) >= AGENTS * FILES
    for a in agents:
        clean = Agent(tmp_path / "clean" / a.root.name)
        _config(clean, srv, False)
        _populate(clean)
        clean.index()  # the embedded default: every step in this process
        assert a.store_rows() == clean.store_rows(), a.root.name
        vec, want = _vectors(a), _vectors(clean)
        assert vec.keys() == want.keys() and all(v is not None for v in vec.values())
        assert vec == want, a.root.name
        assert _searches(a) == _searches(clean), a.root.name


@pytest.mark.redis
def test_a_compute_host_without_the_key_leaves_the_files_embedding_pending(tmp_path, redis_server, server,
                                                                           fresh_services):
    """helper-52: a compute host that could not build the provider (no key in its environment or
    config copy) wrote the chunks without vectors as if keyword-only: `index` said "indexed 12
    file(s)", status showed no problem, and no later sync ever embedded them. They are "embedding
    pending" now: status says why, and the sync after the key is there embeds them."""
    why = _unshare_ok()
    if why:
        pytest.skip(why)
    url = redis_server.url
    a = Agent(tmp_path / "agent")
    _config(a, server, False)
    _populate(a)
    procs = _keyless_deployment(url, tmp_path, [a.root])
    try:
        _request_sync(url, a)
        assert wait_for(lambda: len({r[1] for r in a.store_rows()}) == FILES and _idle(url), 120, step=0.5)
        status = json.loads(run_cli(*_cli_args(a), "status", "--json", env={"MEMINDEX_BROKER_URL": url}).stdout)
        problems = status[0]["status"]["problems"]
        assert len(problems) == FILES and all("embedding pending (no openai embedding provider on this compute "
                                              "host" in p["error"] for p in problems), problems
        assert all(v is None for v in _vectors(a).values())
        _kill(procs[0])
        procs[0] = _hidden_compute(url, tmp_path, [a.root], name="compute-keyed")
        assert wait_for(lambda: any(w["kind"] == "compute" for w in _queues(url)["workers"]), 30, step=0.3)
        _request_sync(url, a)  # the next sync retries what waits for its vectors
        assert wait_for(lambda: _idle(url) and all(v is not None for v in _vectors(a).values()), 120, step=0.5), \
            (tmp_path / "compute-keyed.log").read_text()[-3000:]
    finally:
        for p in procs:
            _kill(p)


@pytest.mark.redis
def test_a_compute_host_without_the_model_file_writes_the_text_at_once(tmp_path, redis_server):
    """helper-52: provider local, the GGUF not on the compute host: "model file not found" was
    retried for two minutes, then dead-lettered with the text unwritten (search: "No matches."),
    on every sync. Now the text is written at once, keyword-searchable, embedding pending."""
    from tests.conftest import GGUF

    why = _unshare_ok()
    if why:
        pytest.skip(why)
    if not GGUF.is_file():
        pytest.skip("the shared GGUF is not here")
    url = redis_server.url
    a = Agent(tmp_path / "agent")
    models = tmp_path / "models"
    models.mkdir()
    os.symlink(GGUF, models / "model.gguf")
    a.memory_config({"provider": "local", "fallback": "none", "local": {"modelPath": str(models / "model.gguf")}})
    _populate(a)
    procs = _keyless_deployment(url, tmp_path, [a.root, models])
    try:
        _request_sync(url, a)
        # Written on the first attempt (the retries took two minutes), every file's text searchable.
        assert wait_for(lambda: len({r[1] for r in a.store_rows()}) == FILES and _idle(url), 45, step=0.5), \
            (tmp_path / "compute.log").read_text()[-3000:]
        assert [r["path"] for r in a.search("kumquat harvest", min_score=0)["results"]]
        status = json.loads(run_cli(*_cli_args(a), "status", "--json", env={"MEMINDEX_BROKER_URL": url}).stdout)
        problems = status[0]["status"]["problems"]
        assert len(problems) == FILES and all("this compute host cannot embed: local: model file not found"
                                              in p["error"] for p in problems), problems
    finally:
        for p in procs:
            _kill(p)


def _keyless_deployment(url: str, logdir, hide: list) -> list[subprocess.Popen]:
    """A hidden compute host without OPENAI_API_KEY, a file-side worker and a writer, all up."""
    procs = [_hidden_compute(url, logdir, hide, key=None),
             _spawn(url, logdir, "files", "worker", "--queues", "sync", "--processes", "1", "--threads", "2"),
             _spawn(url, logdir, "writer", "worker", "--writer")]
    try:
        assert wait_for(lambda: {w["kind"] for w in _queues(url)["workers"]} == {"compute", "worker", "writer"},
                        30, step=0.3), _queues(url)["workers"]
    except BaseException:
        for p in procs:
            _kill(p)
        raise
    return procs


def _cli_args(a: Agent) -> list[str]:
    return ["--config", str(a.config_path), "--state-dir", str(a.state), "--workspace", str(a.workspace)]


def _request_sync(url: str, a: Agent) -> None:
    """Plan one agent's sync (what the watcher does) from a separate process."""
    code = ("import sys\nfrom memindex.pipeline.config.settings import Context\n"
            "from memindex.workers.sync import run_sync\nrun_sync(Context(*sys.argv[1:]))\n")
    out = subprocess.run([sys.executable, "-c", code, a.agent_id, str(a.config_path), str(a.state),
                          str(a.workspace)], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, MEMINDEX_BROKER_URL=url), timeout=120)
    assert out.returncode == 0, out.stderr


class _Sent(dramatiq.Middleware):
    """Records every message enqueued on the embedded broker; optionally skips the first of an actor's."""

    def __init__(self, skip_first: str | None = None) -> None:
        self.messages: list = []
        self.skip_first = skip_first

    def after_enqueue(self, broker, message, delay):
        self.messages.append(message)

    def before_process_message(self, broker, message):
        if message.actor_name == self.skip_first:
            self.skip_first = None
            raise dramatiq.middleware.SkipMessage("dropped by the test: a lost part")

    def of(self, actor: str) -> list:
        return [m for m in self.messages if m.actor_name == actor]


@pytest.fixture
def sent(monkeypatch):
    """Small message bounds, and a recorder on the embedded broker for the duration of the test."""
    from memindex.workers import compute
    from memindex.workers.broker import broker

    monkeypatch.setattr(compute, "EMBED_MSG_CHUNKS", 8)
    monkeypatch.setattr(compute, "EMBED_MSG_BYTES", 48_000)  # ~5 chunks with their 1536-dim vectors
    rec = _Sent()
    broker.middleware.append(rec)
    yield rec
    broker.middleware.remove(rec)


def _huge(a: Agent) -> None:
    a.write("memory/huge.md", "# Huge\n\n" + "".join(
        f"## Part {i}\n\nParagraph {i} of the long log: the sensor in bay {i} read {i * 7} units "
        f"after the {i % 13}th calibration, and the spare {i} went to shelf {i % 5}.\n\n" for i in range(400)))
    a.write("memory/small.md", "# Small\n\nThe kumquat tree flowered.\n")


def _chunks(m) -> int:
    return sum(len(i["record"]["chunks"]) for i in m.args[3 if m.actor_name == "embed_chunks" else 2])


def test_a_huge_file_travels_in_bounded_messages_and_indexes_whole(tmp_path, server, fresh_services, sent):
    from memindex.workers import compute

    a = Agent(tmp_path / "a")
    _config(a, server, False)
    _huge(a)
    a.index()
    embeds, parts = sent.of("embed_chunks"), sent.of("write_parts")
    rows = a.store_rows()
    n = sum(1 for r in rows if r[1] == "memory/huge.md")
    assert n > 4 * compute.EMBED_MSG_CHUNKS  # big enough to need many parts
    assert len(embeds) >= math.ceil(n / compute.EMBED_MSG_CHUNKS) and len(parts) >= len(embeds) - 1
    assert max(_chunks(m) for m in embeds) > 1  # parts hold several chunks, not one each
    for m in (*embeds, *parts):
        assert _chunks(m) <= compute.EMBED_MSG_CHUNKS
        # The budget covers texts and vectors; the JSON adds a record header per message.
        assert len(m.encode()) <= compute.EMBED_MSG_BYTES + 4_000, len(m.encode())
        assert KEY.encode() not in m.encode()  # keys stay out of queue messages
    clean = Agent(tmp_path / "clean")
    _config(clean, server, False)
    _huge(clean)
    compute.EMBED_MSG_CHUNKS, compute.EMBED_MSG_BYTES = 10_000, 10**9  # (monkeypatch restores them)
    clean.index()
    assert rows == clean.store_rows()
    assert _vectors(a) == _vectors(clean)


def test_a_lost_part_leaves_the_file_pending_until_the_next_sync(tmp_path, server, fresh_services, sent):
    from memindex.producers.dispatch import pending_files

    a = Agent(tmp_path / "a")
    _config(a, server, False)
    _huge(a)
    sent.skip_first = "write_parts"
    a.index()  # the Markdown is the source of truth: the file was left pending, and the drained
    # index re-planned it at once (issue 44: it used to say "indexed" with the file pending)
    assert any(r[1] == "memory/huge.md" for r in a.store_rows())
    assert any(r[1] == "memory/small.md" for r in a.store_rows())
    assert pending_files(a.settings()) == 0


def test_the_compute_spec_carries_no_key_and_rebuilds_the_same_settings(tmp_path, server, fresh_services,
                                                                         monkeypatch):
    from memindex.pipeline.embeddings.embedder import chunk_embedder_for
    from memindex.workers.compute import compute_spec, settings_from_spec

    a = Agent(tmp_path / "a")
    _config(a, server, False)
    settings = a.settings()
    import msgspec

    spec = compute_spec(settings)
    text = msgspec.json.encode(spec).decode()  # as it travels in an embed_chunks message
    assert KEY not in text, text[max(0, text.find(KEY) - 300):][:400]
    assert spec.secrets >= 1
    # A compute host that can read the config gets the key from it: the very same settings
    # (so on the embedded broker indexing and search share one embedding service).
    assert settings_from_spec(spec, a.ctx).digest() == settings.digest()
    # One that cannot uses its own environment.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-compute-env")
    elsewhere = settings_from_spec(msgspec.structs.replace(spec, config=str(tmp_path / "not-on-this-host.json")), a.ctx)
    assert elsewhere.memory_search.remote.api_key is None
    embedder = chunk_embedder_for(elsewhere, cache=False)
    embedder.embed_chunks(["a text"], ["h1"])
    assert server.log_for("openai")[-1].headers["authorization"] == "Bearer sk-from-the-compute-env"
