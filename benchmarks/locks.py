"""Locks: redis_components' RedisLock against redis-py's Lock and python-redis-lock.

    .venv/bin/pip install -e '.[embedded,hiredis]' --group bench
    .venv/bin/python benchmarks/locks.py [--duration 10] [--processes 8]

Everything runs in one go against one private redis-server with Redis's default
settings (hz 10), each library with its own defaults (redis-py's Lock polls every
100 ms; python-redis-lock waits with BLPOP on a signal list):

1. uncontended: acquire + release cycles per second from one process, the libraries
   taking turns in rounds (median, slowest and fastest round);
2. contended: N processes on one lock name, holding it 0 ms and then 1 ms, for
   ``--duration`` seconds each: acquisitions per second, wait p50 / p99, commands per
   acquisition (those the clients send, and every command Redis runs, those its Lua
   scripts call included: INFO commandstats), Redis's CPU time per acquisition (INFO
   cpu), and fairness (fewest / most acquisitions of one process);
3. dead holder: a holder with a 1 s lease is SIGKILLed; how long after the lease
   expired does a waiter get the lock (median and worst of several trials).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
from common import machine, median, percentile, setup_django, start_redis, table
from queues import server_cpu

FORK = multiprocessing.get_context("fork")
NAME = "bench"

# The commands each library sends itself; everything else in INFO commandstats was run
# by a Lua script on its behalf (ours: SET, GET, INCR, ...; redis-py: GET, DEL; ...).
CLIENT_COMMANDS = {
    "redis_components": {"evalsha", "eval", "blpop", "client|id", "client|unblock", "client"},
    "redis-py Lock": {"set", "evalsha", "eval"},
    "python-redis-lock": {"set", "blpop", "evalsha", "eval"},
}


class Ours:
    title = "redis_components"

    def __init__(self, url: str, lease: float) -> None:
        from redis_components import RedisLock

        self.lock = RedisLock(NAME, timeout=lease)

    def acquire(self) -> Callable[[], None]:
        handle = self.lock.acquire(blocking_timeout=60)
        assert handle is not None
        return handle.release


class RedisPy:
    title = "redis-py Lock"

    def __init__(self, url: str, lease: float) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=None)
        self.lease = lease

    def acquire(self) -> Callable[[], None]:
        lock = self.client.lock(NAME, timeout=self.lease)
        assert lock.acquire(blocking=True, blocking_timeout=60)
        return lock.release


class PythonRedisLock:
    title = "python-redis-lock"

    def __init__(self, url: str, lease: float) -> None:
        import redis_lock

        self.module = redis_lock
        self.client = redis.Redis.from_url(url, socket_timeout=None)
        self.lease = max(1, round(lease))  # it takes whole seconds

    def acquire(self) -> Callable[[], None]:
        lock = self.module.Lock(self.client, NAME, expire=self.lease)
        assert lock.acquire(blocking=True)
        return lock.release


IMPLEMENTATIONS = [Ours, RedisPy, PythonRedisLock]


def uncontended(url: str, rounds: int, seconds: float) -> list[list[str]]:
    """Cycles per second of each library, in rounds that take turns (so that all meet the
    same machine): the median round, and the slowest and fastest."""
    locks = [kind(url, 30) for kind in IMPLEMENTATIONS]
    for lock in locks:
        for _ in range(200):  # warm up: scripts loaded, connection open
            lock.acquire()()
    rates: list[list[float]] = [[] for _ in locks]
    for _ in range(rounds):
        for lock, measured in zip(locks, rates, strict=True):
            cycles = 0
            started = time.perf_counter()
            while time.perf_counter() - started < seconds:
                lock.acquire()()
                cycles += 1
            measured.append(cycles / (time.perf_counter() - started))
    return [
        [kind.title, f"{median(measured):,.0f}", f"{min(measured):,.0f} - {max(measured):,.0f}"]
        for kind, measured in zip(IMPLEMENTATIONS, rates, strict=True)
    ]


def contender(kind: Any, url: str, hold: float, start: Any, stop_at: Any, results: Any) -> None:
    lock = kind(url, 30)
    waits = []
    start.wait()
    deadline = stop_at.value
    while time.monotonic() < deadline:
        began = time.perf_counter()
        release = lock.acquire()
        waits.append(time.perf_counter() - began)
        if hold:
            time.sleep(hold)
        release()
    results.put(waits)


def contended(
    kind: Any, url: str, admin: redis.Redis, processes: int, hold: float, seconds: float
) -> list[Any]:
    start, stop_at, results = FORK.Event(), FORK.Value("d", 0.0), FORK.Queue()
    workers = [
        FORK.Process(target=contender, args=(kind, url, hold, start, stop_at, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(1)  # let every process import and connect before the clock starts
    admin.config_resetstat()
    cpu_before = server_cpu(admin)
    stop_at.value = time.monotonic() + seconds
    start.set()
    per_process = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    cpu = server_cpu(admin) - cpu_before
    stats = admin.info("commandstats")
    sent = sum(
        int(value["calls"])
        for name, value in stats.items()
        if name.removeprefix("cmdstat_") in CLIENT_COMMANDS[kind.title]
    )
    # Every command Redis ran, those of Lua scripts included (not the admin's INFO calls).
    run = sum(
        int(value["calls"])
        for name, value in stats.items()
        if not name.startswith(("cmdstat_info", "cmdstat_config"))
    )
    counts = [len(waits) for waits in per_process]
    waits = [wait for waits in per_process for wait in waits]
    total = sum(counts)
    return [
        kind.title,
        f"{hold * 1000:g} ms",
        f"{total / seconds:,.0f}",
        f"{percentile(waits, 0.5) * 1000:.2f} ms",
        f"{percentile(waits, 0.99) * 1000:.1f} ms",
        f"{sent / max(total, 1):.1f}",
        f"{run / max(total, 1):.1f}",
        f"{cpu / max(total, 1) * 1e6:.0f} µs",
        f"{min(counts) / max(max(counts), 1):.2f} ({min(counts)} / {max(counts)})",
    ]


def dead_holder(kind: Any, url: str, conn: Any) -> None:
    kind(url, 1.0).acquire()
    conn.send(time.monotonic())
    time.sleep(60)


def after_expiry(kind: Any, url: str, trials: int) -> list[float]:
    lates = []
    for _ in range(trials):
        parent, child = FORK.Pipe()
        holder = FORK.Process(target=dead_holder, args=(kind, url, child))
        holder.start()
        acquired_at = parent.recv()
        os.kill(holder.pid or 0, signal.SIGKILL)
        holder.join()
        release = kind(url, 30).acquire()
        lates.append(time.monotonic() - (acquired_at + 1.0))
        release()
    return lates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per contended run")
    parser.add_argument("--processes", type=int, default=8, help="contending processes")
    parser.add_argument(
        "--uncontended-rounds", type=int, default=5, help="uncontended rounds per library"
    )
    parser.add_argument(
        "--uncontended-seconds", type=float, default=1, help="seconds per uncontended round"
    )
    parser.add_argument("--trials", type=int, default=5, help="dead-holder trials")
    args = parser.parse_args()

    server = start_redis()
    admin = server.client()
    setup_django(server.url)
    print(f"Machine: {machine(admin)}\n")

    rows = uncontended(server.url, args.uncontended_rounds, args.uncontended_seconds)
    print(
        f"Uncontended acquire + release, one process, {args.uncontended_rounds} rounds of "
        f"{args.uncontended_seconds:g} s taking turns:\n"
    )
    print(table(["library", "cycles / s (median)", "slowest - fastest round"], rows), "\n")

    rows = []
    for hold in (0.0, 0.001):
        for kind in IMPLEMENTATIONS:
            admin.flushall()
            rows.append(contended(kind, server.url, admin, args.processes, hold, args.duration))
    print(f"{args.processes} processes on one lock, {args.duration:g} s per run:\n")
    headers = [
        "library",
        "hold",
        "acquisitions / s",
        "wait p50",
        "wait p99",
        "client commands / acq.",
        "server commands / acq.",
        "Redis CPU / acq.",
        "fairness (min / max)",
    ]
    print(table(headers, rows), "\n")

    rows = []
    for kind in IMPLEMENTATIONS:
        admin.flushall()
        lates = after_expiry(kind, server.url, args.trials)
        rows.append([kind.title, f"{median(lates) * 1000:.0f} ms", f"{max(lates) * 1000:.0f} ms"])
    print(
        "A holder with a 1 s lease is killed; the waiter gets the lock this long after "
        f"the lease expired ({args.trials} trials):\n"
    )
    print(table(["library", "median", "worst"], rows))
    server.stop()


if __name__ == "__main__":
    main()
