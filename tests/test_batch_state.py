"""The batch bookkeeping (the file beside the store, and its Redis twin) and the in-flight slots,
without any provider. Every state test runs on both backends: the actors use either one."""

from __future__ import annotations

import threading
import time

import pytest

from memindex.pipeline.index.records import ChunkRecord, FileRecord
from memindex.workers.batch.coord import _LocalSlots
from memindex.workers.batch.state import DONE, POLLING, BatchStateStore, new_token, state_path


@pytest.fixture(params=["file", "redis"])
def state(request, tmp_path):
    """A factory: each call is another worker's handle on the same agent's batch state."""
    if request.param == "file":
        return lambda: BatchStateStore(tmp_path / "s.sqlite")
    import redis

    from memindex.workers.batch.redis_state import RedisBatchState

    srv = request.getfixturevalue("redis_server")
    return lambda: RedisBatchState(redis.Redis.from_url(srv.url), tmp_path / "main.sqlite")


def rec(path, h="h1", chunks=("a", "b")):
    return FileRecord("memory", path, f"/ws/{path}", h, 1, 1,
                      chunks=[ChunkRecord(1, 1, c, c.upper()) for c in chunks])


def test_state_file_sits_beside_the_store(tmp_path):
    assert state_path(tmp_path / "memory" / "main.sqlite") == tmp_path / "memory" / "main.batches.sqlite"


def test_items_are_deduplicated_and_claimed_in_order_up_to_a_cap(state):
    st = state()
    assert st.add_items(1, "pk", [(rec("a.md"), ["a", "b"]), (rec("b.md"), ["b", "c"])]) == 2
    assert st.add_items(1, "pk", [(rec("a.md"), ["a", "b"])]) == 0  # a re-planned sync queues nothing twice
    assert st.add_items(1, "pk", [(rec("a.md", h="h2"), ["a"])]) == 1  # new content is new work
    n, hashes, oldest, newest = st.queued()
    assert (n, hashes) == (3, 5) and oldest <= newest
    items = st.claim("job1", "pk", max_hashes=3)  # a+b, then b+c -> {a,b,c}; the next would still fit
    assert [i.record.path for i in items] == ["a.md", "b.md", "a.md"]
    assert items[0].record == rec("a.md")  # stored in message form, read back typed
    assert st.queued()[0] == 0
    st.requeue("job1")
    assert [i.record.path for i in st.claim("job2", "pk", max_hashes=2)] == ["a.md"]  # at least one item
    assert st.claim("job3", "other-provider", 10) == []
    assert st.drop_queued_except("other-provider") == 2


def test_the_same_file_twice_in_one_call_is_queued_once_first_wins(state):
    st = state()
    assert st.add_items(1, "pk", [(rec("d.md"), ["x"]), (rec("d.md"), ["y"]), (rec("e.md"), ["z"])]) == 2
    assert [(i.record.path, i.missing) for i in st.claim("j", "pk", 10)] == [("d.md", ["x"]), ("e.md", ["z"])]


def test_take_over_needs_an_expired_lease_and_has_one_winner(state):
    st = state()
    tok = new_token()
    st.create_job(key="j", agent="main", provider="openai", model="m", provider_key="pk", phase=POLLING,
                  state="running", lease_token=tok, lease_until=time.time() + 60)
    now = time.time()
    assert not st.take_over("j", tok, "thief", now + 60, now)  # still leased
    assert st.orphans(now) == []
    st.update("j", tok, lease_until=now - 1)
    assert [j.key for j in st.orphans(now)] == ["j"]
    other = state()  # another worker process
    assert st.take_over("j", tok, "new1", now + 60, now)
    assert not other.take_over("j", tok, "new2", now + 60, now)
    assert not st.update("j", tok, phase=DONE)  # the old owner's messages can no longer act
    assert st.update("j", "new1", phase=DONE) and st.job("j").phase == DONE


def test_named_lease_is_exclusive_until_it_expires(state):
    st = state()
    now = time.time()
    assert st.lease("submitter", "a", now + 10, now)
    assert not st.lease("submitter", "b", now + 10, now)
    assert st.lease("submitter", "a", now + 20, now)  # renewal
    assert st.lease("submitter", "b", now + 30, now + 21)  # expired: taken over
    st.unlease("submitter", "a")  # not the holder: no effect
    assert st.lease_alive("submitter", now + 22)


def test_results_round_trip_as_float32(state):
    st = state()
    st.put_results("j", {"h1": [0.5, -0.25], "h2": [1.0, 0.0]})
    assert st.results("j", ["h1", "h3"]) == {"h1": [0.5, -0.25]}
    st.drop_results("j")
    assert st.results("j", ["h1"]) == {}


def test_jobs_list_count_prune_and_delete_items(state):
    st = state()
    for i in range(5):
        st.create_job(key=f"j{i}", agent="main", provider="openai", model="m", provider_key="pk",
                      phase=DONE if i < 4 else POLLING, state="completed" if i < 4 else "running",
                      created_at=1000.0 + i)
    assert [j.key for j in st.jobs(limit=3)] == ["j4", "j3", "j2"]  # newest first
    assert [j.key for j in st.jobs(active_only=True)] == ["j4"]
    assert st.job("j4").requests == 0 and st.job("j4").remote_id is None  # every column, defaults
    assert st.state_counts() == {"completed": 4, "running": 1}
    st.prune_done(keep=2)
    assert sorted(j.key for j in st.jobs()) == ["j2", "j3", "j4"]
    st.add_items(1, "pk", [(rec("a.md"), ["a"]), (rec("b.md"), ["b"])])
    [a, b] = st.claim("j4", "pk", 10)
    st.delete_items([a.id])
    assert st.pending_items() == 1 and [i.record.path for i in st.items_for("j4")] == ["b.md"]
    assert st.add_items(1, "pk", [(rec("a.md"), ["a"])]) == 1  # deleted: no longer a duplicate


def test_concurrent_claims_never_share_an_item(state):
    first = state()
    first.add_items(1, "pk", [(rec(f"n{i}.md"), [f"h{i}"]) for i in range(40)])
    got: dict[str, list[int]] = {}

    def claim(name):
        st = state()
        got[name] = [i.id for i in st.claim(name, "pk", max_hashes=7)]

    threads = [threading.Thread(target=claim, args=(f"job{k}",)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for v in got.values() for i in v]
    assert len(ids) == len(set(ids)) == 40 and first.queued()[0] == 0


def test_local_slots_limit_renew_release_and_expire():
    s = _LocalSlots()
    assert s.acquire("openai", "j1", 2, 60) and s.acquire("openai", "j2", 2, 60)
    assert not s.acquire("openai", "j3", 2, 60)
    assert s.acquire("openai", "j1", 2, 60)  # a holder re-acquiring keeps its slot
    assert s.acquire("gemini", "j3", 2, 60)  # per provider
    s.release("openai", "j1")
    assert s.acquire("openai", "j3", 2, 60)
    s.renew("openai", "j2", -1)  # expired (a dead job's slot)
    assert s.acquire("openai", "j4", 2, 60) and s.count("openai") == 2
