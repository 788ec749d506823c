"""What every benchmarked queue's tasks do, so that only the queue differs.

Worker processes find the Redis server in BENCH_REDIS_URL.
"""

from __future__ import annotations

import os
import time
from functools import cache

import redis

QUEUE = "bench"


@cache
def client() -> redis.Redis:
    return redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])


def noop() -> None:
    """The task whose throughput is measured."""


def mark(name: str) -> None:
    """Record when the worker reached this task (the first and last of a throughput run)."""
    client().set(f"bench:{name}", repr(time.time()))


def started(sent_at: float) -> None:
    """Record enqueue-to-start latency (both clocks are this machine's)."""
    client().rpush("bench:latency", repr(time.time() - sent_at))


def late(due: float) -> None:
    """Record how long after its due time (epoch seconds) a delayed task started."""
    client().rpush("bench:late", repr(time.time() - due))


def record(label: str) -> None:
    """Count a start of ``label``, work for 1 ms, count a finish.

    A kill during the work leaves a start without a finish: a queue that does not run
    the task again has lost it; one that does runs it twice.
    """
    client().hincrby("bench:started", label, 1)
    time.sleep(0.001)
    client().hincrby("bench:finished", label, 1)
