"""What every benchmarked queue's tasks do, so that only the queue differs.

Worker processes find the Redis server in BENCH_REDIS_URL.
"""

from __future__ import annotations

import os
import time
from functools import cache

import redis

QUEUE = "bench"
SPREAD_QUEUES = ("bench-a", "bench-b", "bench-c")


@cache
def client() -> redis.Redis:
    return redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])


def noop() -> None:
    """The task whose throughput is measured."""


def gather(results: list[object]) -> None:
    """A fan-in's callback: given its group's results, does nothing with them."""


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


# The limited API call of benchmarks/limit_peers.py: every library's task counts its
# attempts (before its limiter, for the peers whose limiter runs inside the task), its
# refused attempts and the thread time they took, and runs ``limited_work``.
LIMITED = "bench:lim:"


def limited_attempt(index: int) -> float:
    """Count an attempt at limited task ``index``; return when it began."""
    client().hincrby(LIMITED + "tries", str(index), 1)
    return time.time()


def limited_refused(entered: float, limit: str) -> None:
    """Count an attempt that its ``limit`` ("concurrency" or "rate") refused, and the
    thread time it took."""
    pipe = client().pipeline(transaction=False)
    pipe.incr(LIMITED + "refused")
    pipe.hincrby(LIMITED + "refused_by", limit, 1)
    pipe.incrbyfloat(LIMITED + "refused_s", time.time() - entered)
    pipe.execute()


def limited_work(index: int, seconds: float) -> None:
    """Record a start ("<index> <epoch s>"), count the tasks running now (and the most
    ever), sleep ``seconds``, record the end."""
    r = client()
    start = time.time()
    running = r.incr(LIMITED + "running")
    pipe = r.pipeline(transaction=False)
    pipe.zadd(LIMITED + "most", {"running": running}, gt=True)
    pipe.rpush(LIMITED + "starts", f"{index} {start!r}")
    pipe.hincrby(LIMITED + "runs", str(index), 1)
    pipe.execute()
    time.sleep(seconds)
    pipe.decr(LIMITED + "running")
    pipe.rpush(LIMITED + "ends", f"{index} {time.time()!r}")
    pipe.execute()


def limited_api(index: int, seconds: float) -> None:
    """redis_components' limited task: its limits are checked before it is taken, so
    every attempt runs."""
    limited_attempt(index)
    limited_work(index, seconds)
