"""What reading queue health costs: the age of the oldest ready task of 100 queues, each
holding tasks at 3 priorities, counted in commands (MONITOR: those sent; INFO
commandstats: those run, the scripts' included) and timed, beside the queues' counts
(``queue_stats``), on a private redis-server.

    .venv/bin/python benchmarks/queue_health.py                  # a few seconds
    .venv/bin/python benchmarks/queue_health.py --queues 100 --tasks 100 --rounds 50

``--layout one``: every queue in the one home of a single server (``{tasks}``);
``split``: a home per queue (as on a Redis Cluster), on the same server.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import redis
from common import machine, median, percentile, setup_django, start_redis, table

PRIORITIES = (5, 0, -5)
END = "rc-bench-queue-health-end"


def sent_and_run(url: str, work: Callable[[], Any]) -> tuple[int, int]:
    """The commands ``work`` sends (MONITOR, the scripts' left out) and those the server
    runs for it (INFO commandstats, the scripts' included)."""
    admin = redis.Redis.from_url(url)
    admin.ping()  # (connected before MONITOR starts: its handshake is not counted)
    watcher = redis.Redis.from_url(url)
    with watcher.monitor() as monitor:
        admin.config_resetstat()
        work()
        stats = admin.info("commandstats")
        admin.echo(END)
        sent = 0
        while True:
            command = monitor.next_command()
            if command["command"] == f"ECHO {END}":
                break
            if command["client_type"] != "lua" and not command["command"].startswith(
                ("INFO", "CONFIG")
            ):
                sent += 1
    run = sum(
        s["calls"] for name, s in stats.items() if name not in ("cmdstat_config", "cmdstat_info")
    )
    admin.close()
    watcher.close()
    return sent, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=30, help="tasks per queue")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--layout", choices=("one", "split"), default="one")
    options = parser.parse_args()
    server = start_redis()
    setup_django(server.url)
    from redis_components import redis_task
    from redis_components.connection import get_client
    from redis_components.tasks.status import oldest_ready, queue_stats
    from redis_components.tasks.store.layout import split_homes

    @redis_task(queue="q0")
    def noop() -> None:
        """Never runs: the benchmark only reads the queues."""

    with split_homes(options.layout == "split"):
        names = [f"q{i}" for i in range(options.queues)]
        for name in names:
            for i in range(options.tasks):
                priority = PRIORITIES[i % len(PRIORITIES)]
                noop.using(queue_name=name, priority=priority).enqueue()
        ages = oldest_ready(names)  # (loads the script)
        assert None not in ages.values()
        sent, run = sent_and_run(server.url, lambda: oldest_ready(names))
        counts_sent, counts_run = sent_and_run(server.url, lambda: queue_stats(names))
        timings: dict[str, list[float]] = {"ages": [], "counts": []}
        for _ in range(options.rounds):
            for kind, read in (("ages", oldest_ready), ("counts", queue_stats)):
                started = time.perf_counter()
                read(names)
                timings[kind].append((time.perf_counter() - started) * 1000)
    print(machine(get_client()))
    print(
        f"{options.queues} queues of {options.tasks} ready tasks each (priorities "
        f"{', '.join(map(str, PRIORITIES))} in turn), layout {options.layout!r}, "
        f"{options.rounds} rounds\n"
    )
    rows = [
        (
            "`oldest_ready(queues)`: the age of each oldest ready task",
            sent,
            run,
            f"{median(timings['ages']):.2f}",
            f"{percentile(timings['ages'], 0.99):.2f}",
        ),
        (
            "`queue_stats(queues)`: the counts by state (for comparison)",
            counts_sent,
            counts_run,
            f"{median(timings['counts']):.2f}",
            f"{percentile(timings['counts'], 0.99):.2f}",
        ),
    ]
    headers = ("read", "commands sent", "commands run (scripts' too)", "ms p50", "ms p99")
    print(table(headers, rows))
    server.stop()


if __name__ == "__main__":
    main()
