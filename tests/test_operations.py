"""Operating the pipeline (issue 15): failures are visible where a user looks, custom
endpoints' dims are learnt, and the Redis layout we read is the one installed.

Real parts: the CLI in a subprocess run from outside the repo, the real OpenAI SDK
against tests/provider_server.py, a real redis-server and real worker processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, Agent, module_server, run_cli
from tests.provider_server import ProviderServer

server = module_server(ProviderServer)

WRONG_PATH = "check memorySearch.model and memorySearch.remote.baseUrl"


def _notes(agent: Agent, n: int = 3) -> None:
    for i in range(n):
        agent.write(f"memory/2026-01-{i + 1:02d}.md", f"# Day {i}\nThe Omada router VLAN {i} serves IoT device {i}.\n")


def _cli(agent: Agent, *args: str, env: dict | None = None, timeout: float = 90):
    return run_cli("--config", str(agent.config_path), "--state-dir", str(agent.state),
                   "--workspace", str(agent.workspace), *args, env=env, timeout=timeout, cwd=agent.root)


def _openai_serving(agent: Agent, server: ProviderServer, dims: int, notes: int = 3) -> None:
    """``notes`` notes; the config's OpenAI model served by an endpoint that answers ``dims``."""
    server.reset()
    server.state.dims["openai"] = dims
    _notes(agent, notes)
    agent.memory_config({"provider": "openai", "model": "text-embedding-3-small", "fallback": "none",
                         "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-test-123"}})


def _wrong_path_config(agent: Agent, server: ProviderServer) -> None:
    agent.memory_config({"provider": "openai", "fallback": "none",
                         "remote": {"baseUrl": f"{server.url}/wrong/v1", "apiKey": "sk-test-123"}})


def _assert_visible_404(agent: Agent, out: subprocess.CompletedProcess, env: dict | None = None) -> None:
    assert out.returncode != 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert "main: indexed 3 file(s) (3 not fully: see below)" in out.stdout, out.stdout
    summary = [ln for ln in out.stderr.splitlines() if ln.startswith("error: main:")]
    assert len(summary) == 1 and "3 file(s) failed" in summary[0] and "model not found" in summary[0], out.stderr
    assert WRONG_PATH in summary[0]
    st = json.loads(_cli(agent, "status", "--json", env=env).stdout)
    st = st[0] if isinstance(st, list) else st
    st = st.get("status", st)  # OpenClaw's {agentId, status: {...}} shape, our fields inside
    assert "model not found" in st["lastError"]["reason"] and st["lastError"]["provider"] == "openai"
    failing = {p["path"] for p in st["problems"] if "model not found" in p["error"]}
    assert failing == {f"memory/2026-01-0{i}.md" for i in (1, 2, 3)}
    text = _cli(agent, "status", env=env).stdout
    assert "last error:" in text and "model not found" in text
    # One line for the three files that share the error (it was one line per file, up to 50).
    grouped = [ln for ln in text.splitlines() if ln.startswith("problem:") and "model not found" in ln]
    assert len(grouped) == 1 and grouped[0].startswith("problem:      3 file(s) (memory/2026-01-0"), text
    # Total failure of the vectors does not look healthy: keyword-only files, dirty, one count per file.
    assert st["vectorsPending"] == 3 and st["dirty"] is True
    assert "diskChanges" not in st, st  # re-planned for their vectors, not changed on disk
    assert "3 keyword-only (vectors failed" in text
    assert st["lastError"]["count"] == 3


def test_a_404_endpoint_fails_index_visibly_on_the_embedded_broker(agent, server):
    _notes(agent)
    _wrong_path_config(agent, server)
    out = _cli(agent, "index")
    _assert_visible_404(agent, out)
    # Said once, in the summary: the in-process workers' log lines of the same failure need -v.
    assert sum("model not found" in ln for ln in out.stderr.splitlines()) == 1, out.stderr
    # Each distinct reason is logged once, and no line carries a whole queue message.
    out = _cli(agent, "-v", "index", "--force")
    errors = [ln for ln in out.stderr.splitlines() if " ERROR " in ln]
    assert len(errors) == 1 and "agent main (provider openai)" in errors[0], out.stderr
    assert max(len(ln) for ln in out.stderr.splitlines()) < 600


def test_the_last_error_is_history_once_a_sync_writes_everything(agent, server):
    from memindex.pipeline.embeddings.embedder import reset_services

    _notes(agent)
    _wrong_path_config(agent, server)
    _assert_visible_404(agent, _cli(agent, "index"))
    agent.memory_config({"provider": "openai", "fallback": "none",
                         "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-test-123"}})
    reset_services()
    out = _cli(agent, "index")
    assert out.returncode == 0, out.stderr
    st = json.loads(_cli(agent, "status", "--json").stdout)[0]["status"]
    assert st["lastError"] is None and st["vectorsPending"] == 0 and not st["problems"], st
    assert "last error:" not in _cli(agent, "status").stdout


def test_no_key_at_all_is_one_clear_line_and_keyword_search(agent):
    # OpenClaw's rule (reference 4.4): an explicit provider without a key is keyword-only search.
    _notes(agent)
    agent.memory_config({"provider": "openai", "fallback": "none"})
    env = {"OPENAI_API_KEY": ""}
    out = _cli(agent, "index", env=env)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no API key" in lines[0] and "OPENAI_API_KEY" in lines[0], out.stderr
    assert "indexed 3 file(s)" in out.stdout
    found = json.loads(_cli(agent, "search", "--json", "Omada router", env=env).stdout)
    assert found["results"] and found["mode"] == "fts-only"
    text = _cli(agent, "status", env=env).stdout
    assert "indexed:      3/3 files" in text and "no API key" in text, text
    # Said by `index` (even with -q), not by every search an agent runs.
    quiet = _cli(agent, "index", "-q", env=env)
    assert quiet.returncode == 0 and quiet.stderr.startswith("warning: main: openai: no API key"), quiet.stderr
    assert _cli(agent, "search", "Omada", env=env).stderr == ""


def test_a_custom_endpoint_serving_256_dims_under_an_openai_model_name(agent, server):
    from memindex.pipeline.embeddings.embedder import reset_services
    from memindex.pipeline.status import index_status

    _openai_serving(agent, server, 256)
    reset_services()
    try:
        agent.index()
        st = index_status(agent.settings())
        assert st["files"] == 3 and st["pending"] == 0 and st["vector"]["dims"] == 256, st
        res = agent.search("Omada router VLAN 1")
        assert res["results"] and res["mode"] != "fts-only", res
        gen = st["generation"]
        # The endpoint now serves other dims (a new process learns them): the index is rebuilt.
        server.state.dims["openai"] = 128
        reset_services()
        agent.write("memory/2026-01-09.md", "# Later\nA note about kumquats.\n")
        agent.index()
        from memindex.workers import embedded

        embedded.wait_idle(timeout=60)
        agent.index()
        st = index_status(agent.settings())
        assert st["generation"] > gen and st["vector"]["dims"] == 128 and st["pending"] == 0, st
    finally:
        server.reset()
        reset_services()


def test_an_endpoint_that_changes_size_with_no_file_changed_is_seen_and_rebuilt_by_force(agent, server):
    """Nothing to embed means nothing asked: the size change shows in `status --deep` and
    `index --force` rebuilds at the new size (its chunks were all in the cache, at the old one)."""
    _openai_serving(agent, server, 256)
    try:
        assert _cli(agent, "index").returncode == 0
        server.state.dims["openai"] = 128
        found = json.loads(_cli(agent, "search", "--json", "Omada router VLAN 1").stdout)
        assert found["mode"] == "fts-only" and "memindex index --force" in found["warning"], found
        deep = _cli(agent, "status", "--deep")
        assert "answers 128-dim vectors and the index holds 256" in deep.stdout, deep.stdout
        st = json.loads(_cli(agent, "status", "--deep", "--json").stdout)[0]["status"]
        assert st["dirty"] is True and "index --force" in st["configChanged"], st
        out = _cli(agent, "index", "--force")
        assert out.returncode == 0, out.stdout + out.stderr
        st = json.loads(_cli(agent, "status", "--json").stdout)[0]["status"]
        assert st["vector"]["dims"] == 128 and st["files"] == 3 and not st.get("vectorsPending"), st
        found = json.loads(_cli(agent, "search", "--json", "Omada router VLAN 1").stdout)
        assert found["results"] and found["mode"] == "hybrid" and "warning" not in found, found
        assert "configChanged" not in json.loads(_cli(agent, "status", "--deep", "--json").stdout)[0]["status"]
    finally:
        server.reset()


def test_a_long_lived_process_plans_at_the_size_another_process_found(agent, server):
    """`watch` (or a worker) learnt 256 dims; the endpoint moved to 128 and `index --force` in
    another process rebuilt at 128. The long-lived process's next plan rebuilt the index at 256
    again, from the old vectors in its cache (and searches, embedding at 128, went keyword-only)."""
    from memindex.pipeline.embeddings.embedder import identity_for, reset_services
    from memindex.producers.enqueue import plan_now

    _openai_serving(agent, server, 256)
    reset_services()
    try:
        agent.index()
        assert identity_for(agent.settings()).dims == 256
        server.state.dims["openai"] = 128
        out = _cli(agent, "index", "--force")
        assert out.returncode == 0, out.stdout + out.stderr
        plan, noop = plan_now(agent.ctx)
        assert noop and plan.fingerprint["vectorDims"] == 128, plan.fingerprint
        assert identity_for(agent.settings()).dims == 128
    finally:
        server.reset()
        reset_services()


# --- Redis --------------------------------------------------------------------------------

@contextlib.contextmanager
def _redis_workers(url: str, logdir: Path, split: bool = False):
    """A worker for every queue and a writer; ``split``: the Procfile's file side (sync), compute
    (embed, two processes) and writer, each process with its own learnt provider state."""
    roles = ((("sync", ("--queues", "sync", "--processes", "1", "--threads", "2")),
              ("compute", ("--queues", "embed", "--processes", "2", "--threads", "2"))) if split else
             (("worker", ("--processes", "1", "--threads", "2")),))
    procs = []
    for name, args in (*roles, ("writer", ("--writer",))):
        log = open(logdir / f"{name}.log", "ab")
        procs.append(subprocess.Popen([sys.executable, "-m", "memindex", "worker", *args], cwd=REPO,
                                      env=dict(os.environ, MEMINDEX_BROKER_URL=url), stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    try:
        yield procs
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)


@pytest.mark.redis
def test_a_404_endpoint_fails_index_visibly_on_redis(agent, server, redis_server, tmp_path):
    _notes(agent)
    _wrong_path_config(agent, server)
    env = {"MEMINDEX_BROKER_URL": redis_server.url}
    with _redis_workers(redis_server.url, tmp_path):
        out = _cli(agent, "index", env=env)
        _assert_visible_404(agent, out, env)
        logs = "\n".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))
        errors = [ln for ln in logs.splitlines() if "[ERROR]" in ln]
        assert len(errors) == 1 and "model not found" in errors[0], logs  # once per reason
        assert "agent main (provider openai)" in errors[0] and "remote.baseUrl" in errors[0]
        # A message that fails for good (a provider that cannot be built as configured: not
        # retried) keeps its error on Redis.
        agent.memory_config({"provider": "gemini", "model": "gemini-embedding-2-preview", "fallback": "none",
                             "outputDimensionality": 5, "remote": {"apiKey": "g-test-key"}})
        send = ("from memindex.pipeline.config.settings import Context; from memindex.workers.wire import IndexFiles, send; "
                f"send(IndexFiles(Context(**{agent.ctx.as_dict()!r}), 1, []))")
        subprocess.run([sys.executable, "-c", send], cwd=REPO, check=True, timeout=60,
                       env=dict(os.environ, MEMINDEX_BROKER_URL=redis_server.url))
        dead: list = []
        deadline = time.monotonic() + 60
        while not dead and time.monotonic() < deadline:
            dead = json.loads(_cli(agent, "dead-letters", "--json", env=env).stdout)
    assert len(dead) == 1 and "outputDimensionality" in (dead[0]["error"] or ""), dead


@pytest.mark.redis
def test_a_running_compute_worker_follows_an_endpoint_that_changed_size(agent, server, redis_server, tmp_path,
                                                                         monkeypatch):
    """The Procfile's workers learnt 256 dims; the endpoint then served 128 and `index --force`
    (which asks the endpoint) re-planned at 128. The file side (which never embeds, so knew no
    size) took the old vectors from the cache, the writer dropped them and the cache, and the
    compute side, still at 256, refused every vector: all files keyword-only until a restart.
    Then 128 -> 64 at once: compute threads racing one size probe failed their messages."""
    monkeypatch.setenv("MEMINDEX_EMBED_MSG_CHUNKS", "2")  # many compute messages: threads in parallel
    _openai_serving(agent, server, 256, notes=24)
    env = {"MEMINDEX_BROKER_URL": redis_server.url}
    try:
        with _redis_workers(redis_server.url, tmp_path, split=True):
            out = _cli(agent, "index", env=env)
            assert out.returncode == 0, out.stdout + out.stderr
            st = json.loads(_cli(agent, "status", "--json", env=env).stdout)[0]["status"]
            assert st["vector"]["dims"] == 256 and not st.get("vectorsPending"), st
            for dims in (128, 64):
                server.state.dims["openai"] = dims
                out = _cli(agent, "index", "--force", env=env)
                assert out.returncode == 0, out.stdout + out.stderr
                st = json.loads(_cli(agent, "status", "--json", env=env).stdout)[0]["status"]
                assert st["vector"]["dims"] == dims and st["files"] == 24 and not st.get("vectorsPending"), st
                assert not [p for p in st["problems"] if "dim" in p["error"]], st["problems"]
                found = json.loads(_cli(agent, "search", "--json", "Omada router VLAN 1", env=env).stdout)
                assert found["results"] and found["mode"] == "hybrid", found
        logs = "\n".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))
        assert "now answers 128-dim vectors (was 256)" in logs and "now answers 64-dim vectors (was 128)" in logs, logs
    finally:
        server.reset()


@pytest.mark.redis
def test_the_private_redis_layout_we_read_is_the_installed_dramatiqs(redis_server, tmp_path):
    """workers/queues.py and workers/failures.py read dramatiq's Redis keys directly:
    this fails when a dramatiq upgrade moves them (the pin in pyproject says which)."""
    code = """
import json
from memindex.workers.broker import broker
from memindex.workers import actors
import dramatiq
m = dramatiq.Message(queue_name="sync", actor_name="sync_agent", args=({"agent_id": "x"},), kwargs={}, options={})
broker.enqueue(m)
broker.enqueue(m.copy(message_id="delayed-1"), delay=60_000)
c, ns = broker.client, broker.namespace
print(json.dumps({"ready": c.llen(f"{ns}:sync"), "msgs": c.hlen(f"{ns}:sync.msgs"),
                  "delayed": c.llen(f"{ns}:sync.DQ"), "dq_msgs": c.hlen(f"{ns}:sync.DQ.msgs")}))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, MEMINDEX_BROKER_URL=redis_server.url))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"ready": 1, "msgs": 1, "delayed": 1, "dq_msgs": 1}


def test_openclaw_dimensions_key_is_sent_to_the_openai_api(agent, server):
    """`memorySearch.dimensions` (OpenClaw's key) asks the API for that size and fixes the index's dims."""
    from memindex.pipeline.embeddings.embedder import reset_services
    from memindex.pipeline.status import index_status

    server.reset()
    _notes(agent)
    agent.memory_config({"provider": "openai", "model": "text-embedding-3-small", "fallback": "none",
                         "dimensions": 512, "remote": {"apiKey": "sk-test-123", "baseUrl": server.base("openai")}})
    reset_services()
    try:
        agent.index()
        st = index_status(agent.settings())
        assert st["vector"]["dims"] == 512 and st["pending"] == 0, st
        sent = [r.body for r in server.requests if r.flavor == "openai" and isinstance(r.body, dict)]
        assert sent and all(b.get("dimensions") == 512 for b in sent), sent[:2]
        assert agent.search("Omada router VLAN 1")["results"]
    finally:
        server.reset()
        reset_services()


def _indexed_at_64_dims(agent, server, notes: int) -> None:
    """``notes`` notes indexed through the openai flavour answering 64-dim vectors."""
    from memindex.pipeline.embeddings.embedder import reset_services

    server.reset()
    server.state.dims["openai"] = 64
    for i in range(1, notes + 1):
        agent.write(f"memory/n{i}.md", f"# Note {i}\nalpha{i} beta gamma\n")
    agent.memory_config({"provider": "openai", "fallback": "none",
                         "remote": {"baseUrl": server.base("openai"), "apiKey": "sk-test-123"}})
    reset_services()
    agent.index()


def test_an_endpoint_that_changes_its_vector_size_is_rebuilt_and_no_file_leaves_search(agent, server):
    """Same config, the endpoint starts answering vectors of another size: the file that met it
    stays keyword-searchable, and the rebuild (the cache keyed by size: no old-size vector is
    taken for the new size) ends with every file in one size (it used to leave files out, even of keyword search)."""
    from memindex.pipeline.embeddings.embedder import reset_services
    from memindex.pipeline.status import index_status
    from memindex.workers import embedded

    _indexed_at_64_dims(agent, server, 4)
    try:
        assert index_status(agent.settings())["vector"]["dims"] == 64
        server.state.dims["openai"] = 32
        reset_services()  # as a new `memindex index` process: its provider has not seen a size yet
        agent.write("memory/n1.md", "# Note 1\nalpha1 beta gamma\nappended delta\n")
        agent.index()
        embedded.wait_idle(timeout=60)
        for _ in range(2):  # then a forced rebuild by hand: the same end state
            st = index_status(agent.settings())
            assert st["files"] == 4 and st["vector"]["dims"] == 32, st
            assert st["vectorsPending"] == 0 and not st["problems"], st["problems"]
            for i in range(1, 5):
                assert agent.search(f"alpha{i}")["results"][0]["path"] == f"memory/n{i}.md"
            out = _cli(agent, "index", "--force")
            assert out.returncode == 0 and "skipped" not in out.stdout, out.stdout + out.stderr
    finally:
        server.state.dims.pop("openai", None)


def test_one_off_size_answer_does_not_cost_the_cached_vectors(agent, server):
    """A proxy answered one request with vectors of another size: the writer dropped every cached
    vector but that size ("dropped 72 cached vector(s)"), and the rebuild back at the endpoint's
    real size re-embedded the whole corpus (and again when the proxy switched back and forth).
    Vectors of each size stay cached: the rebuild embeds only what it never saw at that size."""
    from memindex.pipeline.embeddings.embedder import reset_services
    from memindex.pipeline.status import index_status
    from memindex.workers import embedded

    _indexed_at_64_dims(agent, server, 8)
    try:
        reset_services()
        server.script("openai", {"kind": "wrong_dims"})  # the next answer only: 67 dims
        agent.write("memory/n1.md", "# Note 1\nalpha1 beta gamma\nappended delta\n")
        before = len(server.requests)
        agent.index()
        embedded.wait_idle(timeout=60)
        st = index_status(agent.settings())
        assert st["files"] == 8 and st["vector"]["dims"] == 64 and st["vectorsPending"] == 0, st
        inputs = sum(len(r.body["input"]) if isinstance(r.body.get("input"), list) else 1
                     for r in server.requests[before:] if r.flavor == "openai" and isinstance(r.body, dict))
        assert inputs <= 4, inputs  # the edited note's chunk (twice) and a probe
        # A rebuild (`index --force`) at the endpoint's size finds every vector in the cache.
        before = len(server.requests)
        assert _cli(agent, "index", "--force").returncode == 0
        inputs = [r.body.get("input") for r in server.requests[before:] if r.flavor == "openai"
                  and isinstance(r.body, dict)]
        assert sum(len(i) if isinstance(i, list) else 1 for i in inputs) <= 1, inputs  # the probe ("ping")
        for i in range(1, 9):
            assert agent.search(f"alpha{i}")["results"][0]["path"] == f"memory/n{i}.md"
    finally:
        server.state.dims.pop("openai", None)


def test_status_says_when_the_config_selects_another_model_than_the_index_holds(agent, server):
    from memindex.pipeline.embeddings.embedder import reset_services

    _notes(agent)
    remote = {"baseUrl": server.base("openai"), "apiKey": "sk-test-123"}
    agent.memory_config({"provider": "openai", "model": "text-embedding-3-small", "fallback": "none", "remote": remote})
    reset_services()
    assert _cli(agent, "index").returncode == 0
    st = json.loads(_cli(agent, "status", "--json").stdout)[0]["status"]
    assert "configChanged" not in st and st["dirty"] is False, st
    agent.memory_config({"provider": "openai", "model": "text-embedding-3-large", "fallback": "none", "remote": remote})
    st = json.loads(_cli(agent, "status", "--json").stdout)[0]["status"]
    assert st["dirty"] is True and "text-embedding-3-small" in st["configChanged"], st
    assert "text-embedding-3-large" in st["configChanged"] and "memindex index" in st["configChanged"]
    assert "stale:" in _cli(agent, "status").stdout
    assert _cli(agent, "index").returncode == 0  # the rebuild
    st = json.loads(_cli(agent, "status", "--json").stdout)[0]["status"]
    assert "configChanged" not in st and st["model"] == "text-embedding-3-large", st
    # The same provider and model from another endpoint or at another size: status said nothing
    # (search already answered keyword-only, "reindex needed").
    for change in ({"outputDimensionality": 256}, {"remote": {**remote, "baseUrl": server.base("openai").replace("/openai/v1", "/v1")}},
                   {"remote": {**remote, "headers": {"X-Route": "eu"}}}):
        agent.memory_config({"provider": "openai", "model": "text-embedding-3-large", "fallback": "none",
                             "remote": remote, **change})
        st = json.loads(_cli(agent, "status", "--json").stdout)[0]["status"]
        assert st["dirty"] is True and "another endpoint or size" in st.get("configChanged", ""), (change, st)
    agent.memory_config({"provider": "openai", "model": "text-embedding-3-large", "fallback": "none",
                         "remote": {**remote, "headers": {"X-Proxy-Token": "rotated"}}})  # a credential: same space
    st = json.loads(_cli(agent, "status", "--json").stdout)[0]["status"]
    assert "configChanged" not in st, st
    # helper-58: a provider that cannot be built (here a header no request can carry; there a local
    # model file gone) read "the config now selects none / fts-only: `memindex index` rebuilds it",
    # while `index` fails on it and rebuilds nothing.
    agent.memory_config({"provider": "openai", "model": "text-embedding-3-large", "fallback": "none",
                         "remote": {**remote, "headers": {"X-Team": "caf\u00e9"}}})
    st = json.loads(_cli(agent, "status", "--json").stdout)[0]["status"]
    assert "the configured provider cannot be used" in st["configChanged"], st
    assert "rebuilds" not in st["configChanged"] and "none / fts-only" not in st["configChanged"], st
    assert _cli(agent, "index").returncode != 0


@pytest.mark.redis
def test_a_file_side_worker_held_by_backpressure_stops_within_the_grace_period(agent, server, redis_server,
                                                                              tmp_path, monkeypatch):
    """Ctrl-C mid-backfill: the file-side worker sat in the embed queue's backpressure wait (up to
    120 s per message while the compute side drains slowly; 5 s per send with no consumer) and
    honcho SIGKILLed it after its 5 s grace ("Shutting down..." never finished)."""
    monkeypatch.setenv("MEMINDEX_EMBED_MSG_CHUNKS", "1")  # one embed message per file: many waits
    _openai_serving(agent, server, 64, notes=12)
    url = redis_server.url
    # A backlog over the limit that nobody consumes: every send waits until "stuck" (5 s).
    filler = ("from memindex.pipeline.config.settings import Context\n"
              "from memindex.workers.wire import ComputeSpec, EmbedChunks, send\n"
              "spec = ComputeSpec('main', '/w', '/s', '/s/main.sqlite', None, {}, {}, {})\n"
              "for i in range(70): send(EmbedChunks(Context(), 0, spec, []))\n")
    subprocess.run([sys.executable, "-c", filler], cwd=REPO, check=True, timeout=60,
                   env=dict(os.environ, MEMINDEX_BROKER_URL=url))
    log = open(tmp_path / "sync.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "memindex", "worker", "--queues", "sync", "--processes", "1",
                             "--threads", "2"], cwd=REPO, env=dict(os.environ, MEMINDEX_BROKER_URL=url),
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        send = ("from memindex.pipeline.config.settings import Context; from memindex.workers.wire import SyncAgent, send; "
                f"send(SyncAgent(Context(**{agent.ctx.as_dict()!r})))")
        subprocess.run([sys.executable, "-c", send], cwd=REPO, check=True, timeout=60,
                       env=dict(os.environ, MEMINDEX_BROKER_URL=url))
        deadline = time.monotonic() + 60
        while "sync main: generation" not in (tmp_path / "sync.log").read_text(errors="replace"):
            assert time.monotonic() < deadline, (tmp_path / "sync.log").read_text(errors="replace")
            time.sleep(0.2)
        time.sleep(3)  # its index_files message is now waiting on the embed backlog
        os.killpg(proc.pid, signal.SIGTERM)
        t0 = time.monotonic()
        proc.wait(30)
        took = time.monotonic() - t0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        server.reset()
    assert took < 5, (took, (tmp_path / "sync.log").read_text(errors="replace")[-3000:])


def test_status_never_shows_more_indexed_than_on_disk_as_a_bare_ratio(agent):
    """helper-18/19: "indexed: 2/1 files" (a note deleted since the last sync, files kept from a
    directory that cannot be read now, `--workspace` of another one) read as a miscount."""
    _notes(agent)
    assert _cli(agent, "index").returncode == 0
    (agent.workspace / "memory" / "2026-01-02.md").unlink()
    text = _cli(agent, "status").stdout
    assert "indexed:      3 files (2 listed on disk now; the lines below say why)" in text, text
    assert "1 deleted since the last sync" in text, text
    assert _cli(agent, "index").returncode == 0
    assert "indexed:      2/2 files" in _cli(agent, "status").stdout
