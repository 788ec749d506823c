"""Enqueue rates: our ``enqueue`` one task at a time, our ``enqueue_many`` of the whole
batch, and Huey's and Dramatiq's enqueue loops, in the same run, on one private
redis-server (issue 62: single enqueue >= 0.9x Huey; a bulk enqueue of 10,000 >= 3x
Huey's loop).

    .venv/bin/pip install -e '.[embedded,hiredis]' --group bench
    taskset -c 1 .venv/bin/python benchmarks/enqueue.py                 # server on CPU 0
    taskset -c 1 .venv/bin/python benchmarks/enqueue.py --server-cpu 1  # on the same CPU

Every contender enqueues the same no-op task from this process, ``--tasks`` at a time,
``--rounds`` times, taking turns (each round starts one later in the list), the server
flushed before each; a rate is tasks over the wall time of the batch; CPU per task is
this process's plus redis-server's (its ``INFO cpu``). Rates are medians over the
rounds. The reply parser is the environment's (hiredis when it is installed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import in_turns, machine, median, reply_parser, start_redis, table
from queues import server_cpu, versions


def senders(tasks: int) -> dict[str, Callable[[], None]]:
    """Each contender's enqueue of ``tasks`` no-op tasks."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.queue_apps.settings"
    import django

    django.setup()
    from benchmarks.queue_apps import dramatiq_tasks, huey_tasks
    from benchmarks.queue_apps import tasks as ours

    def one_at_a_time(send: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(tasks):
                send()

        return run

    def all_at_once() -> None:
        ours.noop.enqueue_many([()] * tasks)

    return {
        "ours enqueue": one_at_a_time(ours.noop.enqueue),
        "ours enqueue_many": all_at_once,
        "Huey (call)": one_at_a_time(huey_tasks.noop),
        "Dramatiq (send)": one_at_a_time(dramatiq_tasks.noop.send),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks per batch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--server-cpu", type=int, default=0, help="the CPU redis-server is pinned to (default 0)"
    )
    options = parser.parse_args()
    server = start_redis()
    assert server.process is not None
    os.sched_setaffinity(server.process.pid, {options.server_cpu})
    os.environ["BENCH_REDIS_URL"] = server.url
    try:
        r = server.client()
        runs = senders(options.tasks)
        for send in runs.values():  # connections, scripts, caches: warm for all
            send()
            r.flushall()
        rates: dict[str, list[float]] = {name: [] for name in runs}
        cpus: dict[str, list[float]] = {name: [] for name in runs}
        names = list(runs)
        for round_, name in in_turns(names, options.rounds):
            r.flushall()
            begin, cpu, redis_cpu = time.perf_counter(), time.process_time(), server_cpu(r)
            runs[name]()
            elapsed = time.perf_counter() - begin
            spent = time.process_time() - cpu + server_cpu(r) - redis_cpu
            rates[name].append(options.tasks / elapsed)
            cpus[name].append(spent * 1e6 / options.tasks)
            print(f"round {round_ + 1} {name}: {options.tasks / elapsed:,.0f}/s", flush=True)
        print(machine(r))
        print(f"parser: {reply_parser()}; {versions()}")
        client_cpus = sorted(os.sched_getaffinity(0))
        print(f"this process on CPUs {client_cpus}, redis-server on CPU {options.server_cpu}")
        huey = median(rates["Huey (call)"])
        rows = [
            [
                name,
                f"{median(rates[name]):,.0f}",
                f"{median(cpus[name]):.0f} us",
                f"{median(rates[name]) / huey:.2f}x",
                " ".join(f"{rate:,.0f}" for rate in rates[name]),
            ]
            for name in names
        ]
        print(table(["enqueue", "tasks/s", "CPU/task", "vs Huey", "rounds (tasks/s)"], rows))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
