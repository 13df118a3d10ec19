"""The provider batch clients (real openai / google-genai SDKs, httpx for Voyage)
against the local batch server: files API, lifecycle states, output and error
files, cancel, and failures mapped to one vocabulary."""

from __future__ import annotations

import time

import pytest

from memindex.pipeline.embeddings.base import ProviderError
from memindex.pipeline.embeddings.batch.base import BatchError, BatchRequest, BatchState, batch_client_for, custom_ids
from memindex.pipeline.embeddings.providers.gemini import GeminiProvider
from memindex.pipeline.embeddings.providers.openai import OpenAIProvider
from memindex.pipeline.embeddings.providers.voyage import VoyageProvider
from tests.batch_server import BatchServer, Plan
from tests.conftest import module_server
from tests.provider_server import fake_vector

KEYS = {"openai": "sk-batch-secret-1", "gemini": "g-batch-secret-1", "voyage": "pa-batch-secret-1"}


server = module_server(BatchServer)
pytestmark = pytest.mark.usefixtures("fresh_server")


def provider(server, flavor):
    cls = {"openai": OpenAIProvider, "gemini": GeminiProvider, "voyage": VoyageProvider}[flavor]
    return cls(KEYS[flavor], base_url=server.base(flavor))


def requests(texts):
    ids = custom_ids(f"{i:064d}" for i in range(len(texts)))
    return [BatchRequest(cid, t) for cid, t in zip(ids, texts)]


def wait_terminal(client, batch_id, timeout=10.0):
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = client.status(batch_id)
        if not seen or seen[-1] != st.state:
            seen.append(st.state)
        if st.state.terminal:
            return st, seen
        time.sleep(0.02)
    raise AssertionError(f"batch {batch_id} never finished: {seen}")


def expected(flavor, text, dims):
    salt_text = f"RETRIEVAL_DOCUMENT|{text}" if flavor == "gemini" else text
    return fake_vector(salt_text, dims, flavor)


@pytest.mark.parametrize("flavor", ["openai", "gemini", "voyage"])
def test_lifecycle_success_with_partial_error_file(server, flavor):
    # Held in progress until we have seen it running: no race with a slow first poll.
    server.plan(flavor, Plan(fail_texts=("broken",), hold=True))
    p = provider(server, flavor)
    client = batch_client_for(p)
    reqs = requests(["alpha note", "beta broken note", "gamma note"])
    sub = client.submit(reqs, label="t1")
    assert server.count_events(flavor, "upload") == 1 and server.count_events(flavor, "create") == 1
    first = client.status(sub.batch_id).state
    assert first in (BatchState.PENDING, BatchState.RUNNING)
    deadline = time.monotonic() + 10
    while client.status(sub.batch_id).state is not BatchState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.status(sub.batch_id).state is BatchState.RUNNING
    server.release(sub.batch_id)
    st, seen = wait_terminal(client, sub.batch_id)
    assert st.state is BatchState.COMPLETED and st.output_file
    res = client.results(st)
    ok = {r.custom_id: r.text for r in reqs if "broken" not in r.text}
    assert set(res.vectors) == set(ok)
    assert set(res.errors) == {reqs[1].custom_id}
    dims = {"openai": 1536, "gemini": 768, "voyage": 1024}[flavor]
    for cid, text in ok.items():
        assert res.vectors[cid] == pytest.approx(expected(flavor, text, dims), abs=1e-6)
    # The request file carried the provider's own line format.
    batch = server.created(flavor)[0]
    assert [t for _, t, _ in batch.requests] == [r.text for r in reqs]
    if flavor == "openai":
        assert batch.model == "text-embedding-3-small"
    if flavor == "voyage":
        assert batch.model == "voyage-4-large"
    if flavor == "gemini":
        assert batch.requests[0][2].get("task_type") == "RETRIEVAL_DOCUMENT"
        assert batch.requests[0][2].get("output_dimensionality") == 768


@pytest.mark.parametrize("flavor", ["openai", "gemini", "voyage"])
def test_cancel_keeps_what_finished(server, flavor):
    server.plan(flavor, Plan(hold=True, done_fraction=0.5))
    client = batch_client_for(provider(server, flavor))
    reqs = requests([f"text {i}" for i in range(4)])
    sub = client.submit(reqs, label="t2")
    time.sleep(0.1)
    assert client.status(sub.batch_id).state is BatchState.RUNNING
    client.cancel(sub.batch_id)
    st, _ = wait_terminal(client, sub.batch_id)
    assert st.state is BatchState.CANCELLED
    res = client.results(st)
    assert set(res.vectors) == {r.custom_id for r in reqs[:2]}
    assert set(res.errors) == {r.custom_id for r in reqs[2:]}


@pytest.mark.parametrize("flavor,outcome,state", [
    ("openai", "expired", BatchState.EXPIRED), ("openai", "failed", BatchState.FAILED),
    ("voyage", "expired", BatchState.EXPIRED), ("gemini", "failed", BatchState.FAILED),
    ("gemini", "expired", BatchState.EXPIRED),
])
def test_terminal_failures_map_to_common_states(server, flavor, outcome, state):
    server.plan(flavor, Plan(outcome=outcome, done_fraction=0.25))
    client = batch_client_for(provider(server, flavor))
    reqs = requests([f"x{i}" for i in range(4)])
    st, _ = wait_terminal(client, client.submit(reqs, label="t3").batch_id)
    assert st.state is state
    res = client.results(st)
    if outcome == "expired":
        assert len(res.vectors) == 1 and len(res.errors) == 3
    else:
        assert not res.vectors


def test_unknown_state_word_is_unknown(server):
    server.plan("openai", Plan(hold=True, state_word="paused_for_maintenance"))
    client = batch_client_for(provider(server, "openai"))
    sub = client.submit(requests(["a"]), label="t4")
    time.sleep(0.1)
    st = client.status(sub.batch_id)
    assert st.state is BatchState.UNKNOWN and not st.state.terminal and st.raw == "paused_for_maintenance"


@pytest.mark.parametrize("flavor", ["openai", "gemini", "voyage"])
def test_control_plane_errors_are_typed_and_never_leak_the_key(server, flavor):
    client = batch_client_for(provider(server, flavor))
    server.fail(flavor, "upload", 500, 500, 500)
    with pytest.raises(BatchError) as err:
        client.submit(requests(["a"]), label="t5")
    assert err.value.retryable and KEYS[flavor] not in str(err.value)
    server.failures.clear()  # clients retry a different number of times
    server.fail(flavor, "status", 401)
    sub = client.submit(requests(["a"]), label="t6")
    with pytest.raises(ProviderError) as err:
        client.status(sub.batch_id)
    assert not err.value.retryable and KEYS[flavor] not in str(err.value)
    # Authorization really was sent (but nothing above printed it).
    headers = server.log_for(flavor)[-1].headers
    assert KEYS[flavor] in (headers.get("authorization", "") + headers.get("x-goog-api-key", ""))


def test_custom_ids_are_short_unique_and_map_back():
    hashes = [f"{i:064x}" for i in range(1000)] + ["a" * 32 + "b" * 32, "a" * 32 + "c" * 32]  # a prefix clash
    ids = custom_ids(hashes)
    assert len(ids) == len(hashes) and set(ids.values()) == set(hashes)
    assert all(len(c) <= 64 for c in ids)
