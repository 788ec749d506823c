"""What every benchmarked worker's tasks do: wait, then record the wait.

Worker processes find the Redis server in BENCH_REDIS_URL. Each task ends with one
``RPUSH`` of ``"<pid> <started> <ended>"`` (epoch seconds) to ``DONE``: the benchmark
reads the rate from the first start to the last end, and which processes ran tasks.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from functools import cache

import redis
import redis.asyncio

QUEUE = "conc"
DONE = "conc:done"


@cache
def client() -> redis.Redis:
    """One client per process; redis-py's connection pool serves every thread."""
    return redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])


def record(started: float) -> None:
    client().rpush(DONE, f"{os.getpid()} {started!r} {time.time()!r}")


def sleep(seconds: float) -> None:
    """An I/O-bound sync task: it holds a slot for ``seconds`` and uses no CPU."""
    started = time.time()
    time.sleep(seconds)
    record(started)


# The asyncio client of the event loop it was made on: one per process for arq and saq,
# whose loop lives as long as the worker; a new one per task where each task gets an
# event loop of its own (asgiref's async_to_sync).
_async_client: tuple[asyncio.AbstractEventLoop, redis.asyncio.Redis] | None = None
_async_lock = threading.Lock()


def async_client() -> redis.asyncio.Redis:
    global _async_client
    loop = asyncio.get_running_loop()
    with _async_lock:
        if _async_client is None or _async_client[0] is not loop:
            _async_client = (loop, redis.asyncio.Redis.from_url(os.environ["BENCH_REDIS_URL"]))
        return _async_client[1]


async def async_sleep(seconds: float) -> None:
    """An I/O-bound ``async def`` task: it awaits ``seconds`` without blocking its loop."""
    started = time.time()
    await asyncio.sleep(seconds)
    await async_client().rpush(DONE, f"{os.getpid()} {started!r} {time.time()!r}")
