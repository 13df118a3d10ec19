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
