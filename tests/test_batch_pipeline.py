"""Batch indexing through the real pipeline on the embedded broker: the real SDK
clients talk to the local batch server; index_files routes cache misses to
batch jobs; submit/poll/collect/finish run as delayed queue messages."""

from __future__ import annotations

import time

import pytest

from tests.batch_server import BatchServer, Plan
from tests.conftest import Agent, live_vectors, module_server
from memindex.workers import embedded
from memindex.pipeline.search.reference import REFERENCE_TEXTS

REFERENCE = frozenset(REFERENCE_TEXTS)

KEYS = {"openai": "sk-test-batch-1", "gemini": "g-test-batch-1", "voyage": "pa-test-batch-1"}


server = module_server(BatchServer)


@pytest.fixture(autouse=True)
def _fresh(fresh_services):
    yield
    embedded.wait_idle(timeout=30)  # before fresh_services drops the embedding services


def cfg(server, flavor="openai", enabled=True, **batch):
    b = {"enabled": enabled, "pollIntervalMs": 50, **batch}
    return {"provider": flavor, "remote": {"baseUrl": server.base(flavor), "apiKey": KEYS[flavor], "batch": b}}


def notes(agent, n=6, start=0):
    for i in range(start, start + n):
        agent.write(f"memory/2026-01-{i + 1:02d}.md", f"# Day {i}\nThe Omada router VLAN {i} serves IoT device {i}.\n")


def chunk_texts(agent):
    return {r[5] for r in agent.store_rows()}


def sync_texts(server, flavor, *, reference: bool = False):
    """Texts sent to the synchronous embeddings endpoint; without the search's reference texts
    (search/reference.py: a store's first sync embeds them directly, never in a batch job)
    unless ``reference``."""
    out = []
    for req in server.log_for(flavor):
        body = req.body or {}
        if flavor == "gemini" and "requests" in body:
            out += ["".join(p.get("text", "") for p in r["content"]["parts"]) for r in body["requests"]]
        elif req.path.endswith("/embeddings") and "input" in body:
            inp = body["input"]
            out += [inp] if isinstance(inp, str) else list(inp)
    return out if reference else [t for t in out if t not in REFERENCE]


def jobs(agent):
    from memindex.workers.batch.state import open_state

    st = open_state(agent.settings().store_path, readonly=True)
    try:
        return [j.row for j in st.jobs()] if st else []
    finally:
        if st:
            st.close()


def _unobserved(res):
    return {**res, "results": [{**r, "provenance": {k: v for k, v in r.get("provenance", {}).items() if k != "observedAt"}}
                               for r in res["results"]]}


def all_embedded(agent):
    vecs = live_vectors(agent)
    return bool(vecs) and all(v is not None for v in vecs.values())


def test_backfill_through_batch_equals_a_synchronous_index(tmp_path, server):
    batch = Agent(tmp_path / "batch")
    notes(batch)
    batch.memory_config(cfg(server))
    counts = batch.index()
    assert counts["to_index"] == 6
    created = server.created("openai")
    assert len(created) == 1 and len(created[0].requests) == 6
    assert sync_texts(server, "openai") == []  # nothing went the synchronous way
    # but the reference texts, in one small direct request
    assert sync_texts(server, "openai", reference=True) == list(REFERENCE_TEXTS)
    assert all_embedded(batch)
    [job] = jobs(batch)
    assert (job["phase"], job["state"], job["outcome"]) == ("done", "completed", "collected")
    assert (job["requests"], job["completed"], job["failed"], job["redone"], job["files"]) == (6, 6, 0, 0, 6)

    sync = Agent(tmp_path / "sync")
    notes(sync)
    sync.memory_config(cfg(server, enabled=False))
    sync.index()
    assert sync.store_rows() == batch.store_rows()
    assert live_vectors(sync) == live_vectors(batch)  # byte-identical vectors
    res = batch.search("Omada router VLAN 3")
    # the same answer (but when each workspace's notes were written: provenance.observedAt is their mtime)
    assert res["mode"] == "hybrid" and _unobserved(res) == _unobserved(sync.search("Omada router VLAN 3"))
    # The note saying "VLAN 3" is among the top two: its keyword evidence is near-tied with
    # 2026-01-03's date context ("3 January"), and this fake embedder's cosine breaks the tie.
    assert "memory/2026-01-04.md" in [r["path"] for r in res["results"][:2]]


@pytest.mark.parametrize("flavor", ["gemini", "voyage"])
def test_gemini_and_voyage_batches(agent, server, flavor):
    notes(agent, 4)
    agent.memory_config(cfg(server, flavor))
    agent.index()
    assert len(server.created(flavor)) == 1
    assert sync_texts(server, flavor) == []
    assert all_embedded(agent)
    assert agent.search("Omada router VLAN 2")["provider"] == flavor


@pytest.mark.parametrize("flavor", ["openai", "gemini"])
def test_partial_failure_redoes_only_the_failed_items(agent, server, flavor):
    notes(agent, 6)
    server.plan(flavor, Plan(fail_texts=("VLAN 3 ",)))
    agent.memory_config(cfg(server, flavor))
    agent.index()
    failed = [t for t in server.submitted_texts(flavor) if "VLAN 3 " in t]
    assert len(failed) == 1
    assert sync_texts(server, flavor) == failed  # exactly the failed item, nothing else
    assert all_embedded(agent)
    [job] = jobs(agent)
    assert (job["outcome"], job["completed"], job["failed"], job["redone"]) == ("partial", 5, 1, 1)


def test_expired_batch_falls_back_to_synchronous_for_the_rest(agent, server):
    notes(agent, 6)
    server.plan("openai", Plan(outcome="expired", done_fraction=0.5))
    agent.memory_config(cfg(server))
    agent.index()
    submitted = server.submitted_texts("openai")
    assert sorted(sync_texts(server, "openai")) == sorted(submitted[3:])  # only what had not finished
    assert all_embedded(agent)
    [job] = jobs(agent)
    assert (job["state"], job["outcome"], job["completed"], job["redone"]) == ("expired", "expired", 3, 3)


def test_failed_job_does_not_disable_batching_for_the_next_backfill(agent, server):
    notes(agent, 3)
    server.plan("openai", Plan(outcome="failed"))
    agent.memory_config(cfg(server))
    agent.index()
    assert len(sync_texts(server, "openai")) == 3 and all_embedded(agent)
    notes(agent, 2, start=10)
    agent.index()
    assert len(server.created("openai")) == 2  # batching is still on
    assert len(sync_texts(server, "openai")) == 3  # the new files came from the batch
    assert all_embedded(agent)
    outcomes = sorted(j["outcome"] for j in jobs(agent))
    assert outcomes == ["collected", "failed"]


def test_submission_failure_embeds_synchronously(agent, server):
    notes(agent, 3)
    server.fail("openai", "upload", 500, 500, 500)
    agent.memory_config(cfg(server))
    agent.index()
    assert server.created("openai") == [] and len(sync_texts(server, "openai")) == 3
    assert all_embedded(agent)
    [job] = jobs(agent)
    assert job["outcome"] == "submit-failed" and "sk-test-batch-1" not in (job["error"] or "")


@pytest.mark.parametrize("state_word", [None, "paused_by_provider"])
def test_timeout_cancels_and_unknown_states_time_out(agent, server, state_word):
    notes(agent, 4)
    server.plan("openai", Plan(hold=True, done_fraction=0.5, state_word=state_word))
    agent.memory_config(cfg(server, timeoutMinutes=0.01))  # 0.6 s
    started = time.monotonic()
    agent.index()
    assert time.monotonic() - started < 30
    assert server.count_events("openai", "cancel") == 1
    [b] = server.created("openai")
    assert server.state_of(b.id) == "cancelled"
    assert sorted(sync_texts(server, "openai")) == sorted(t for _, t, _ in b.requests[2:])
    assert all_embedded(agent)
    [job] = jobs(agent)
    assert job["state"] == "cancelled" and "timed out" in job["error"]


def test_cache_hits_are_never_submitted(agent, server):
    notes(agent, 4)
    agent.memory_config(cfg(server))
    agent.index()
    assert len(server.created("openai")) == 1
    # A full rebuild: every chunk is in the cache, so no batch; the one request is the size probe
    # (a custom endpoint, whose vector size may have changed: see test_operations).
    counts = agent.index(force=True)
    assert counts["to_index"] == 4 and counts["generation"] == 2
    assert len(server.created("openai")) == 1 and sync_texts(server, "openai") == ["ping"]
    assert all_embedded(agent)
    # A copy of a known note plus one new note: only the new text is submitted.
    agent.write("memory/copy.md", (agent.workspace / "memory/2026-01-01.md").read_text())
    agent.write("memory/new.md", "# New\nKumquats ripen in winter.\n")
    agent.index()
    assert len(server.created("openai")) == 2
    assert [t for _, t, _ in server.created("openai")[1].requests] == ["# New\nKumquats ripen in winter.\n"]  # the chunk as OpenClaw embeds it
    assert all_embedded(agent)


def test_a_lost_poller_is_resumed_not_resubmitted(agent, server):
    """The poll chain of a job dies (its token is stale, as after a kill); the janitor
    takes the job over after its lease and collects the same batch."""
    from memindex.workers.batch import actors as batch_actors
    from memindex.workers.batch.state import open_state

    notes(agent, 3)
    server.plan("openai", Plan(hold=True))
    agent.memory_config(cfg(server))
    from memindex.producers.enqueue import request_sync

    request_sync(agent.ctx, reason="test")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(j["phase"] == "polling" for j in jobs(agent)):
        time.sleep(0.02)
    st = open_state(agent.settings().store_path)
    [job] = st.jobs()
    # Kill the poller: its messages now carry a token that no longer owns the job.
    st.update(job.key, lease_token="dead-worker", lease_until=time.time() - 1)
    time.sleep(0.2)
    assert st.job(job.key).phase == "polling"  # nobody polls it any more
    batch_actors.sweep()  # what every worker's janitor thread does every few seconds
    server.release()
    assert embedded.wait_idle(timeout=30)
    st.close()
    assert len(server.created("openai")) == 1 and server.count_events("openai", "create") == 1
    assert sync_texts(server, "openai") == []
    assert all_embedded(agent)
    assert jobs(agent)[0]["outcome"] == "collected"


def test_batches_cli_lists_jobs_with_state_and_counts(agent, server, capsys):
    import json

    from memindex.producers.cli.main import main

    notes(agent, 3)
    agent.memory_config(cfg(server))
    agent.index()
    base = ["--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(agent.workspace)]
    assert main([*base, "batches", "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["agent"] == "main" and report["queued_files"] == 0
    [job] = report["jobs"]
    assert (job["provider"], job["state"], job["requests"], job["completed"]) == ("openai", "completed", 3, 3)
    assert main([*base, "batches"]) == 0
    out = capsys.readouterr().out
    assert "openai" in out and "completed" in out and "3/3" in out


def test_backfill_batch_flag_waits_and_reports_progress(agent, server, capsys):
    from memindex.producers.cli.main import main

    notes(agent, 5)
    server.plan("openai", Plan(run_s=0.5))
    agent.memory_config(cfg(server))
    base = ["--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(agent.workspace)]
    assert main([*base, "backfill", "--batch"]) == 0
    out = capsys.readouterr().out
    assert "batch" in out and "searchable" in out
    assert all_embedded(agent) and len(server.created("openai")) == 1


def test_backfill_batch_flag_needs_batch_enabled(agent, server, capsys):
    from memindex.producers.cli.main import main

    notes(agent, 1)
    agent.memory_config(cfg(server, enabled=False))
    base = ["--config", str(agent.config_path), "--state-dir", str(agent.state), "--workspace", str(agent.workspace)]
    assert main([*base, "backfill", "--batch"]) == 2
    assert "remote.batch.enabled" in capsys.readouterr().err


def test_switching_batch_off_still_collects_the_submitted_job(agent, server):
    from memindex.producers.enqueue import request_sync
    from memindex.workers.batch.state import open_state

    notes(agent, 3)
    server.plan("openai", Plan(hold=True))
    agent.memory_config(cfg(server, concurrency=1))
    request_sync(agent.ctx, reason="test")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(j["phase"] == "polling" for j in jobs(agent)):
        time.sleep(0.02)
    notes(agent, 2, start=20)
    request_sync(agent.ctx, reason="test")  # these wait for the one slot
    st = open_state(agent.settings().store_path)
    while time.monotonic() < deadline and st.queued()[0] < 2:
        time.sleep(0.02)
    st.close()
    agent.memory_config(cfg(server, enabled=False, concurrency=1))
    server.release()
    assert embedded.wait_idle(timeout=30)
    assert len(server.created("openai")) == 1  # the submitted job was collected, not abandoned
    assert sorted(sync_texts(server, "openai")) == sorted(
        f"# Day {i}\nThe Omada router VLAN {i} serves IoT device {i}.\n" for i in (20, 21))
    assert all_embedded(agent) and len(live_vectors(agent)) == 5
