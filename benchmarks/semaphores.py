"""Semaphores: redis_components' RedisSemaphore against the book's three versions.

    .venv/bin/python benchmarks/semaphores.py [--duration 10] [--processes 8] [--limit 3]

In one run against one private redis-server (Redis's defaults, hz 10): N processes
share a semaphore of the given limit and, for ``--duration`` seconds each, acquire a
permit, hold it 1 ms, and release it. The book's semaphores fail at once when full, so
their processes try again every millisecond (the book's own retry interval for locks);
ours block until a permit is free. Reported per version: acquisitions per second, and
as a fraction of the bound (limit / the mean time a permit was held, sleep and watcher
included: no version can do better), the wait p50 / p99 (from the first try to the
permit), round trips per acquisition
(counted on each client's socket), and acquisitions that found more than ``limit``
holders inside (an independent counter, INCR / DECR around the hold).

The book's code is as the seeds print it (section 6.3), changed only to run on
redis-py 5+: ``zadd`` takes a mapping, and the clients decode responses so that the
lock's ``get(...) == identifier`` compares strings.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
import redis.connection
from book_lock import acquire_lock, release_lock
from common import machine, percentile, setup_django, start_redis, table

FORK = multiprocessing.get_context("fork")
NAME = "semaphore:bench"
# How long each acquisition sleeps holding its permit.
HOLD = 0.001

# -- the book's code (Redis in Action, 6.2-6.3), ported to redis-py 5+ ----------------


def acquire_semaphore(
    conn: redis.Redis, semname: str, limit: int, timeout: float = 10
) -> str | None:
    identifier = str(uuid.uuid4())
    now = time.time()
    pipeline = conn.pipeline(True)
    pipeline.zremrangebyscore(semname, "-inf", now - timeout)
    pipeline.zadd(semname, {identifier: now})
    pipeline.zrank(semname, identifier)
    if pipeline.execute()[-1] < limit:
        return identifier
    conn.zrem(semname, identifier)
    return None


def release_semaphore(conn: redis.Redis, semname: str, identifier: str) -> Any:
    return conn.zrem(semname, identifier)


def acquire_fair_semaphore(
    conn: redis.Redis, semname: str, limit: int, timeout: float = 10
) -> str | None:
    identifier = str(uuid.uuid4())
    czset = semname + ":owner"
    ctr = semname + ":counter"
    now = time.time()
    pipeline = conn.pipeline(True)
    pipeline.zremrangebyscore(semname, "-inf", now - timeout)
    pipeline.zinterstore(czset, {czset: 1, semname: 0})
    pipeline.incr(ctr)
    counter = pipeline.execute()[-1]
    pipeline.zadd(semname, {identifier: now})
    pipeline.zadd(czset, {identifier: counter})
    pipeline.zrank(czset, identifier)
    if pipeline.execute()[-1] < limit:
        return identifier
    pipeline.zrem(semname, identifier)
    pipeline.zrem(czset, identifier)
    pipeline.execute()
    return None


def release_fair_semaphore(conn: redis.Redis, semname: str, identifier: str) -> Any:
    pipeline = conn.pipeline(True)
    pipeline.zrem(semname, identifier)
    pipeline.zrem(semname + ":owner", identifier)
    return pipeline.execute()[0]


def acquire_semaphore_with_lock(
    conn: redis.Redis, semname: str, limit: int, timeout: float = 10
) -> str | None:
    identifier = acquire_lock(conn, semname, acquire_timeout=0.01)
    if identifier:
        try:
            return acquire_fair_semaphore(conn, semname, limit, timeout)
        finally:
            release_lock(conn, semname, str(identifier))
    return None


# -- the contenders --------------------------------------------------------------------


class Book:
    """One of the book's semaphores, retried every millisecond until it admits us."""

    def __init__(
        self,
        url: str,
        limit: int,
        title: str,
        acquire: Callable[..., Any],
        release: Callable[..., Any],
    ) -> None:
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.limit = limit
        self.title = title
        self._acquire = acquire
        self._release = release

    def acquire(self) -> Callable[[], None]:
        while True:
            identifier = self._acquire(self.client, NAME, self.limit)
            if identifier:
                return lambda: self._release(self.client, NAME, identifier)
            time.sleep(0.001)


class Ours:
    def __init__(self, url: str, limit: int, fair: bool) -> None:
        from redis_components import RedisSemaphore

        self.title = f"redis_components, fair={fair}"
        self.semaphore = RedisSemaphore(NAME, limit=limit, timeout=10, fair=fair)

    def acquire(self) -> Callable[[], None]:
        permit = self.semaphore.acquire(blocking=True, blocking_timeout=60)
        assert permit is not None
        return permit.release


CONTENDERS: list[tuple[str, Callable[[str, int], Any]]] = [
    (
        "book: basic",
        lambda url, limit: Book(url, limit, "book: basic", acquire_semaphore, release_semaphore),
    ),
    (
        "book: fair",
        lambda url, limit: Book(
            url, limit, "book: fair", acquire_fair_semaphore, release_fair_semaphore
        ),
    ),
    (
        "book: fair, with a lock",
        lambda url, limit: Book(
            url,
            limit,
            "book: fair, with a lock",
            acquire_semaphore_with_lock,
            release_fair_semaphore,
        ),
    ),
    ("redis_components, basic", lambda url, limit: Ours(url, limit, fair=False)),
    ("redis_components, fair", lambda url, limit: Ours(url, limit, fair=True)),
]


def count_round_trips() -> list[int]:
    """Count every send on every connection of this process (one send, one round trip)."""
    sent = [0]
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        original(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
    return sent


def contender(
    make: Callable[[str, int], Any], url: str, limit: int, start: Any, stop_at: Any, results: Any
) -> None:
    semaphore = make(url, limit)
    watcher = redis.Redis.from_url(url)
    start.wait()
    sent = count_round_trips()
    waits, holds, over = [], [], 0
    deadline = stop_at.value
    while time.monotonic() < deadline:
        began = time.perf_counter()
        release = semaphore.acquire()
        granted = time.perf_counter()
        waits.append(granted - began)
        # The watcher's own two round trips are subtracted below.
        if watcher.incr("inside") > limit:
            over += 1
        time.sleep(HOLD)
        watcher.decr("inside")
        holds.append(time.perf_counter() - granted)
        release()
    results.put((waits, holds, over, sent[0] - 2 * len(waits)))


def run(
    title: str,
    make: Callable[[str, int], Any],
    url: str,
    processes: int,
    limit: int,
    seconds: float,
) -> list[Any]:
    start, stop_at, results = FORK.Event(), FORK.Value("d", 0.0), FORK.Queue()
    workers = [
        FORK.Process(target=contender, args=(make, url, limit, start, stop_at, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(1)
    stop_at.value = time.monotonic() + seconds
    start.set()
    outcomes = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    waits = [wait for waits, _, _, _ in outcomes for wait in waits]
    holds = [hold for _, holds, _, _ in outcomes for hold in holds]
    over = sum(over for _, _, over, _ in outcomes)
    trips = sum(trips for _, _, _, trips in outcomes)
    count = len(waits)
    # No version can do better than `limit` permits each busy for the mean hold.
    bound = limit / (sum(holds) / max(len(holds), 1))
    return [
        title,
        f"{count / seconds:,.0f}",
        f"{bound:,.0f}",
        f"{count / seconds / bound:.2f}",
        f"{percentile(waits, 0.5) * 1000:.2f} ms",
        f"{percentile(waits, 0.99) * 1000:.1f} ms",
        f"{trips / max(count, 1):.1f}",
        f"{over} ({100 * over / max(count, 1):.1f} %)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per version")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--limit", type=int, default=3)
    args = parser.parse_args()

    server = start_redis()
    admin = server.client()
    setup_django(server.url)
    print(f"Machine: {machine(admin)}\n")
    rows = []
    for title, make in CONTENDERS:
        admin.flushall()
        rows.append(run(title, make, server.url, args.processes, args.limit, args.duration))
    print(f"{args.processes} processes, limit {args.limit}, hold 1 ms, {args.duration:g} s each:\n")
    headers = [
        "version",
        "acquisitions / s",
        "bound",
        "of the bound",
        "wait p50",
        "wait p99",
        "round trips / acquisition",
        "over the limit",
    ]
    print(table(headers, rows))
    server.stop()


if __name__ == "__main__":
    main()
