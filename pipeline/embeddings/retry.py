"""Retrying provider calls, packing inputs into requests, and splitting refused batches.

The reference retried 429s four times within ~3 s and ignored Retry-After, so a
per-minute quota window (Gemini free tier, OpenAI-compatible hosts) failed the
whole sync (bug 7). Here a rate-limited call waits as long as the server asks
and keeps trying for a total budget (default 3 minutes) that spans such
windows; 5xx/timeouts get exponential backoff with jitter; auth errors and
invalid vectors fail at once.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence, TypeVar

import tenacity

from memindex.pipeline.embeddings.base import (ProviderError, ProviderRateLimited, ProviderTimedOut,
                                              ProviderTooManyItems, ProviderTransientError, ProviderUnreachable)

__all__ = [
    "RetryPolicy",
    "call_with_retry",
    "pack_batches",
    "embed_with_splitting",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class RetryPolicy:
    """How long and how often to retry. ``sleep``/``clock`` are hooks for tests."""

    budget_s: float = 180.0  # total time (waits + calls) before giving up
    transient_attempts: int = 6  # attempts for 5xx/timeouts (rate limits are bounded by the budget)
    unreachable_attempts: int = 3  # nothing listening / no such host: OpenClaw's HTTP layer tries 3 times
    # A request that timed out: one more try, only if it can end within the budget (a hung endpoint
    # costs at most two deadlines, and one at the defaults: 2 x 120 s overruns the 180 s budget).
    timeout_attempts: int = 2
    max_attempts: int = 50  # hard stop for anything
    base_delay_s: float = 0.5  # first 5xx backoff
    max_delay_s: float = 30.0  # 5xx backoff cap
    rate_limit_delay_s: float = 2.0  # first 429 wait when the server gives no hint
    rate_limit_max_delay_s: float = 60.0  # 429 backoff cap without a hint: one quota window
    jitter: float = 0.2  # +0..20 %
    sleep: Callable[[float], None] = field(default=time.sleep)
    clock: Callable[[], float] = field(default=time.monotonic)

    def with_budget(self, budget_s: float) -> "RetryPolicy":
        return replace(self, budget_s=budget_s)


def _next_wait(policy: RetryPolicy, exc: BaseException | None, attempt: int) -> float:
    jitter = 1.0 + random.uniform(0.0, policy.jitter)
    if isinstance(exc, ProviderRateLimited):
        if exc.retry_after is not None:
            # Honour the server; jitter only adds, so we never come back early.
            return max(exc.retry_after, 0.05) * jitter
        return min(policy.rate_limit_delay_s * 2.0 ** (attempt - 1), policy.rate_limit_max_delay_s) * jitter
    return min(policy.base_delay_s * 2.0 ** (attempt - 1), policy.max_delay_s) * jitter


def call_with_retry(fn: Callable[[], T], policy: RetryPolicy | None = None, *, label: str = "embeddings") -> T:
    """Run fn, retrying ProviderRateLimited / ProviderTransientError per policy.

    Gives up (re-raising the last error) when the next wait would overrun the
    budget, so a long Retry-After (e.g. a daily quota) fails fast instead of
    sleeping for nothing.
    """
    policy = policy or RetryPolicy()
    started = policy.clock()
    last_s = [0.0]  # how long the last attempt took: a timed-out one's retry takes as long

    def timed() -> T:
        t0 = policy.clock()
        try:
            return fn()
        finally:
            last_s[0] = policy.clock() - t0

    def wait(rs: tenacity.RetryCallState) -> float:
        return _next_wait(policy, rs.outcome.exception() if rs.outcome else None, rs.attempt_number)

    def stop(rs: tenacity.RetryCallState) -> bool:
        exc = rs.outcome.exception() if rs.outcome else None
        if rs.attempt_number >= policy.max_attempts:
            return True
        if isinstance(exc, ProviderTransientError) and rs.attempt_number >= policy.transient_attempts:
            return True
        if isinstance(exc, ProviderUnreachable) and rs.attempt_number >= policy.unreachable_attempts:
            return True
        spent = max(rs.idle_for, policy.clock() - started)
        if isinstance(exc, ProviderTimedOut):
            return (rs.attempt_number >= policy.timeout_attempts
                    or spent + rs.upcoming_sleep + last_s[0] > policy.budget_s)
        return spent + rs.upcoming_sleep > policy.budget_s

    def before_sleep(rs: tenacity.RetryCallState) -> None:
        exc = rs.outcome.exception() if rs.outcome else None
        what = "rate limited" if isinstance(exc, ProviderRateLimited) else "failed"
        log.warning("memory %s %s; retrying in %dms (attempt %d): %s",
                    label, what, int(rs.upcoming_sleep * 1000), rs.attempt_number, exc)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda e: isinstance(e, ProviderError) and e.retryable),
        wait=wait,
        stop=stop,
        sleep=policy.sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(timed)


def pack_batches(
    texts: Sequence[str],
    max_items: int,
    max_tokens: int,
    token_estimate: Callable[[str], int],
) -> list[list[str]]:
    """Contiguous, order-preserving groups within both caps.

    A single text above ``max_tokens`` travels alone (the caller has already
    made sure it fits the per-input limit).
    """
    max_items = max(1, int(max_items))
    batches: list[list[str]] = []
    cur: list[str] = []
    cur_tokens = 0
    for text in texts:
        t = max(0, int(token_estimate(text)))
        if cur and (len(cur) >= max_items or cur_tokens + t > max_tokens):
            batches.append(cur)
            cur, cur_tokens = [], 0
        cur.append(text)
        cur_tokens += t
    if cur:
        batches.append(cur)
    return batches


def embed_with_splitting(
    provider_call: Callable[[list[str]], list[list[float]]],
    texts: list[str],
    *,
    on_refused: Callable[[int, int | None], None] | None = None,
) -> list[list[float]]:
    """Call provider_call(texts); when it refuses the batch size, split and recurse.

    Splits into the server's stated cap when the message gives one, otherwise
    in halves, down to single inputs. ``on_refused(batch_len, cap_hint)`` lets
    the caller remember a smaller cap for later batches.
    """
    try:
        return provider_call(texts)
    except ProviderTooManyItems as exc:
        if len(texts) <= 1:
            raise
        if on_refused is not None:
            on_refused(len(texts), exc.max_items)
        size = exc.max_items if exc.max_items and exc.max_items < len(texts) else (len(texts) + 1) // 2
        out: list[list[float]] = []
        for i in range(0, len(texts), size):
            out.extend(embed_with_splitting(provider_call, texts[i:i + size], on_refused=on_refused))
        return out
