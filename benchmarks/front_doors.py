"""What a no-op task costs its worker through each front door: our ``@redis_task`` against
Django's ``@redis_task`` on ``RedisTaskBackend``, in one process, one run, same settings.

    .venv/bin/python benchmarks/front_doors.py            # 5 rounds of 5,000 tasks each

Each round enqueues the tasks through one front door, then drains them with one
in-process burst ``Worker`` (what ``rc_worker`` runs in each of its processes) and
measures that worker's CPU time (``time.process_time``), the server's CPU time, and
the commands the server ran, per task; the front doors take turns. The settings are
those of the Tasks benchmark (benchmarks/django_tasks_apps/settings.py, with its
SQLite database), so Django's own per-task work (its signals and their log receivers,
the database connections closed around each task) is in; no log handler prints.
Medians of the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
from common import in_turns, machine, start_redis, table


def server_cpu(r: redis.Redis) -> float:
    cpu = r.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def drain(enqueue: Callable[[], object], tasks: int, r: redis.Redis) -> tuple[float, float, float]:
    """Worker CPU µs, server CPU µs and server commands per task, for ``tasks`` tasks."""
    from redis_components.tasks.worker import Worker

    for _ in range(tasks):
        enqueue()
    r.config_resetstat()
    before_server, before = server_cpu(r), time.process_time()
    ran = Worker(["default"], burst=True).run()
    worker = time.process_time() - before
    server = server_cpu(r) - before_server
    assert ran == tasks, f"ran {ran} of {tasks}"
    commands = sum(stat["calls"] for stat in r.info("commandstats").values())
    return worker * 1e6 / tasks, server * 1e6 / tasks, commands / tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=5_000)
    options = parser.parse_args()

    server = start_redis()
    with tempfile.TemporaryDirectory() as directory:
        os.environ.update(
            BENCH_REDIS_URL=server.url,
            BENCH_BACKEND="ours",
            BENCH_DB_NAME=str(Path(directory) / "bench.sqlite3"),
            DJANGO_SETTINGS_MODULE="benchmarks.django_tasks_apps.settings",
        )
        import django

        django.setup()
        from django.core.management import call_command

        from benchmarks.django_tasks_apps.tasks import noop as django_noop
        from redis_components import redis_task

        call_command("migrate", verbosity=0)
        ours_noop = redis_task(name="bench.front_doors.noop", queue="default")(lambda: None)
        doors: dict[str, Callable[[], object]] = {
            "our @redis_task": ours_noop.enqueue,
            "Django's @redis_task (RedisTaskBackend)": django_noop.enqueue,
        }
        r = redis.Redis.from_url(server.url)
        for enqueue in doors.values():  # warm up: scripts loaded, imports done
            drain(enqueue, 200, r)
        measured: dict[str, list[tuple[float, float, float]]] = {name: [] for name in doors}
        for round_, name in in_turns(list(doors), options.rounds):
            measured[name].append(drain(doors[name], options.tasks, r))
            print(f"round {round_ + 1} {name}: {measured[name][-1][0]:.0f} us worker CPU")
        print()
        print(machine(r))
        rows = []
        for name, samples in measured.items():
            worker, server_us, commands = (
                statistics.median(s[i] for s in samples) for i in range(3)
            )
            rows.append([name, f"{worker:.0f} us", f"{server_us:.0f} us", f"{commands:.1f}"])
        base = statistics.median(s[0] for s in measured["our @redis_task"])
        other = statistics.median(s[0] for s in measured["Django's @redis_task (RedisTaskBackend)"])
        print()
        print(
            table(
                ["front door", "worker CPU/task", "server CPU/task", "server commands/task"], rows
            )
        )
        print(f"\nDjango's front door / our @redis_task, worker CPU per task: {other / base:.2f}x")
    server.stop()


if __name__ == "__main__":
    main()
