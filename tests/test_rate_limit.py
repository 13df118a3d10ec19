"""The Redis-backed limiter holds the per-provider cap across processes."""

import threading
import time

import pytest
import redis

from memindex.workers.limits import RedisConcurrencyLimiter


@pytest.mark.redis
def test_cap_holds_across_independent_limiters(redis_server):
    # Two limiter instances on separate clients stand for two worker processes.
    limiters = [RedisConcurrencyLimiter(redis.Redis.from_url(redis_server.url), default_cap=2) for _ in range(2)]
    active = 0
    peak = 0
    lock = threading.Lock()
    done = []

    def work(lim):
        nonlocal active, peak
        for _ in range(5):
            with lim.acquire("openai"):
                with lock:
                    active += 1
                    peak = max(peak, active)
                time.sleep(0.02)
                with lock:
                    active -= 1
        done.append(1)

    threads = [threading.Thread(target=work, args=(limiters[i % 2],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(done) == 6
    assert peak == 2  # the cap was reached and never exceeded


@pytest.mark.redis
def test_local_providers_default_to_one(redis_server):
    lim = RedisConcurrencyLimiter(redis.Redis.from_url(redis_server.url), default_cap=4)
    with lim.acquire("ollama"):
        other = RedisConcurrencyLimiter(redis.Redis.from_url(redis_server.url), default_cap=4)
        got = []

        def try_it():
            with other.acquire("ollama"):
                got.append(time.monotonic())

        t = threading.Thread(target=try_it)
        start = time.monotonic()
        t.start()
        time.sleep(0.3)
        assert got == []  # blocked while the only slot is held
    t.join(5)
    assert got and got[0] - start >= 0.3


_HOLD_FOREVER = """
import sys, time, redis
from memindex.workers.limits import RedisConcurrencyLimiter
lim = RedisConcurrencyLimiter(redis.Redis.from_url(sys.argv[1]), default_cap=1)
with lim.acquire("openai"):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.mark.redis
def test_a_killed_holders_slot_comes_back_within_one_lease_and_a_live_one_is_renewed(redis_server, caplog):
    import os
    import signal
    import subprocess
    import sys

    from memindex.workers import limits

    lease_s = 3.0
    env = dict(os.environ, MEMINDEX_SLOT_LEASE_MS=str(int(lease_s * 1000)))
    client = redis.Redis.from_url(redis_server.url)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_FOREVER, redis_server.url], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        time.sleep(2.5 * lease_s)  # a live holder renews its lease on the heartbeat: still held
        assert limits.slots_held(client, "openai") == 1
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        lim = limits.RedisConcurrencyLimiter(client, default_cap=1)
        with caplog.at_level("WARNING", logger="memindex.limits"):
            with lim.acquire("openai"):
                waited = time.monotonic() - killed
                assert limits.slots_held(client, "openai") == 1
        assert waited <= 3 * lease_s, waited  # one lease period, with room for a loaded machine
        assert any("reclaimed 1 embedding slot" in r.getMessage() for r in caplog.records)
        assert limits.slots_held(client, "openai") == 0  # released on exit
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(5)
