"""Redis Cluster against a single server: the same workloads, spread over many names.

    .venv/bin/python benchmarks/cluster.py [--processes 6] [--duration 10]

In one run, against a private single redis-server and a private 3-master Redis Cluster
(both with Redis's defaults): ``--processes`` client processes each run, for
``--duration`` seconds, one of these workloads, and the operations of all processes
are added up:

- locks: acquire + release of one of 1,000 lock names, at random;
- semaphores: acquire + release of one of 1,000 semaphores (limit 3), at random;
- queue: enqueue of a no-op task (the task system lives in one hash tag, so on a
  cluster it lives on one node: it is not meant to scale out);
- autocomplete: a 1-3 letter prefix query on one of 20 guilds of 5,000 names.

Reported: operations per second on each, the ratio, and how busy each redis-server
process was (CPU seconds per second of the run, from /proc), which shows where the
limit is.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import string
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, table

from redis_components.embedded import EmbeddedCluster, EmbeddedRedis

FORK = multiprocessing.get_context("fork")
NAMES = 1000
GUILDS = 20
GUILD_SIZE = 5000


def configure(url: str, cluster: bool) -> None:
    import django
    from django.conf import settings

    options = {"CLIENT_CLASS": "redis_components.connection.ClusterClient"} if cluster else {}
    cache = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url, "OPTIONS": options}
    settings.configure(INSTALLED_APPS=["redis_components"], CACHES={"default": cache}, USE_TZ=True)
    django.setup()


def lock_op(rng: random.Random) -> None:
    from redis_components import RedisLock

    handle = RedisLock(f"bench:{rng.randrange(NAMES)}", timeout=10).acquire(blocking_timeout=10)
    assert handle is not None
    handle.release()


def semaphore_op(rng: random.Random) -> None:
    from redis_components import RedisSemaphore

    semaphore = RedisSemaphore(f"bench:{rng.randrange(NAMES)}", limit=3, timeout=10)
    permit = semaphore.acquire(blocking=True, blocking_timeout=10)
    assert permit is not None
    permit.release()


def queue_op(rng: random.Random) -> None:
    from redis_components import redis_task

    global _noop
    if _noop is None:
        _noop = redis_task(name="bench.noop", queue="bench")(noop)
    _noop.enqueue()


def noop() -> None:
    pass


_noop: Any = None


def guild_op(rng: random.Random) -> None:
    from redis_components import Guild

    prefix = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 3)))
    Guild(f"bench-{rng.randrange(GUILDS)}").suggest(prefix)


WORKLOADS: dict[str, Callable[[random.Random], None]] = {
    "locks": lock_op,
    "semaphores": semaphore_op,
    "queue": queue_op,
    "autocomplete": guild_op,
}


def client_process(
    url: str, cluster: bool, workload: str, seconds: float, start: Any, out: Any
) -> None:
    configure(url, cluster)
    operation = WORKLOADS[workload]
    rng = random.Random(os.getpid())
    for _ in range(50):  # warm up: connections, scripts, slot maps
        operation(rng)
    start.wait()
    done = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        operation(rng)
        done += 1
    out.put(done)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_and_total() -> tuple[int, int]:
    """The machine's idle and total CPU time so far (from /proc/stat, in clock ticks)."""
    ticks = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return ticks[3] + ticks[4], sum(ticks)


def run(
    url: str, pids: list[int], cluster: bool, workload: str, processes: int, seconds: float
) -> tuple[float, list[float], float]:
    start, out = FORK.Event(), FORK.Queue()
    workers = [
        FORK.Process(target=client_process, args=(url, cluster, workload, seconds, start, out))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(2)  # every process warmed up
    cpu_before = [cpu_seconds(pid) for pid in pids]
    idle_before, total_before = idle_and_total()
    began = time.monotonic()
    start.set()
    total = sum(out.get(timeout=seconds + 60) for _ in workers)
    elapsed = time.monotonic() - began
    for worker in workers:
        worker.join()
    busy = [
        (cpu_seconds(pid) - before) / elapsed for pid, before in zip(pids, cpu_before, strict=True)
    ]
    idle_after, total_after = idle_and_total()
    idle = (idle_after - idle_before) / max(total_after - total_before, 1)
    return total / seconds, busy, idle


def fill_guilds(client: Any) -> None:
    from redis_components import Guild

    rng = random.Random(7)
    for g in range(GUILDS):
        names = {
            "".join(rng.choice(string.ascii_lowercase) for _ in range(8)) for _ in range(GUILD_SIZE)
        }
        Guild(f"bench-{g}").join_many(sorted(names))


def prepare(url: str, cluster: bool) -> None:
    """Fill the guilds in a child process (it has its own Django settings)."""
    process = FORK.Process(target=lambda: (configure(url, cluster), fill_guilds(None)))
    process.start()
    process.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--duration", type=float, default=10)
    args = parser.parse_args()

    single = EmbeddedRedis().start()
    cluster = EmbeddedCluster(masters=3).start()
    try:
        print(f"Machine: {machine(single.client())}\n")
        prepare(single.url, False)
        prepare(cluster.url, True)
        single_pids = [single.process.pid] if single.process else []
        cluster_pids = [node.process.pid for node in cluster.nodes if node.process]
        rows = []
        for workload in WORKLOADS:
            one, one_busy, one_idle = run(
                single.url, single_pids, False, workload, args.processes, args.duration
            )
            many, many_busy, many_idle = run(
                cluster.url, cluster_pids, True, workload, args.processes, args.duration
            )
            rows.append(
                [
                    workload,
                    f"{one:,.0f}",
                    f"{many:,.0f}",
                    f"{many / one:.2f}x",
                    f"{one_busy[0]:.2f}",
                    " / ".join(f"{b:.2f}" for b in many_busy),
                    f"{one_idle:.0%} / {many_idle:.0%}",
                ]
            )
    finally:
        single.stop()
        cluster.stop()
    print(
        f"{args.processes} client processes, {args.duration:g} s per workload and setup; "
        "Redis CPU is CPU seconds per second of the run:\n"
    )
    headers = [
        "workload",
        "single ops/s",
        "cluster ops/s",
        "cluster / single",
        "single Redis CPU",
        "cluster nodes' CPU",
        "machine idle (single / cluster)",
    ]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
