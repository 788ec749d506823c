"""The no-op every contender runs: it only counts itself done (one INCR), so that the
benchmark knows when all are done. Worker processes find Redis in BENCH_REDIS_URL."""

from __future__ import annotations

import os
from functools import cache

import redis

QUEUE = "memory"  # ours; Celery's is "celery", django-rq's "default"
DONE = "memory:done"


@cache
def client() -> redis.Redis:
    return redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])


def noop() -> None:
    client().incr(DONE)
