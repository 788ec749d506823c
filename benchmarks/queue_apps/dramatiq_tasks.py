"""The benchmark's actors for Dramatiq (dramatiq benchmarks.queue_apps.dramatiq_tasks)."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.rate_limits import BucketRateLimiter, ConcurrentRateLimiter
from dramatiq.rate_limits.backends import RedisBackend

from . import work

dramatiq.set_broker(RedisBroker(url=os.environ["BENCH_REDIS_URL"]))

noop = dramatiq.actor(queue_name=work.QUEUE, max_retries=0)(work.noop)
mark = dramatiq.actor(queue_name=work.QUEUE, max_retries=0)(work.mark)
started = dramatiq.actor(queue_name=work.QUEUE, max_retries=0)(work.started)
record = dramatiq.actor(queue_name=work.QUEUE, max_retries=0)(work.record)
late = dramatiq.actor(queue_name=work.QUEUE, max_retries=0)(work.late)

# The API call under 3 at once and 20 a second (benchmarks/limit_peers.py), with
# Dramatiq's limiters used as its documentation shows: inside the actor, a refusal
# raising RateLimitExceeded, which the Retries middleware retries with its backoff
# (its defaults: 15 s doubling, up to 7 days). max_retries: enough that none is
# dead-lettered (its default is 20). ConcurrentRateLimiter's ttl is its default (15 min).
LIMITED_MAX_RETRIES = 1000
limiter_backend = RedisBackend(url=os.environ["BENCH_REDIS_URL"])
api_concurrency = ConcurrentRateLimiter(limiter_backend, "bench-api-c", limit=3)
api_rate = BucketRateLimiter(limiter_backend, "bench-api-r", limit=20, bucket=1000)


@dramatiq.actor(queue_name=work.QUEUE, max_retries=LIMITED_MAX_RETRIES)
def limited_api(index: int, seconds: float) -> None:
    entered = work.limited_attempt(index)
    try:
        # The concurrency permit first: a refused rate then gives it straight back,
        # where the other order would spend a start on an attempt refused for concurrency.
        with api_concurrency.acquire(), api_rate.acquire():
            work.limited_work(index, seconds)
    except dramatiq.RateLimitExceeded as refusal:
        limit = "concurrency" if api_concurrency.key in str(refusal) else "rate"
        work.limited_refused(entered, limit)
        raise
