"""The simplest queue benchmark, as a user comparing libraries runs it: N no-op tasks
enqueued first, then one worker process, timed from the first task's start to the
last task's end; ours against Huey, in the same run, on one private redis-server.

    .venv/bin/pip install -e '.[embedded,hiredis]' --group bench
    .venv/bin/python benchmarks/first_to_last.py                      # 5,000 tasks, 3 rounds
    .venv/bin/python benchmarks/first_to_last.py --tasks 20000 --rounds 5

Ours runs ``rc_worker -c 1`` twice: in the benchmark's minimal settings
(``benchmarks/queue_apps/settings.py``, what ``queues.py`` uses) and in a project as
``startproject`` makes it (``project_settings.py``: DEBUG on, the contrib apps,
SQLite, our Tasks backend); Huey runs ``huey_consumer -w 1 -k thread``. Each worker
writes its log to a file. The reply parser is the environment's (hiredis when it is
installed): run it from an environment without hiredis for redis-py's pure-Python
parser. Rates and CPU times are medians over the rounds; the CPU is the worker's
processes' plus redis-server's, per task. ``queues.py`` does the same with 20,000
tasks and more measurements (latency, delays, kills).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import in_turns, machine, start_redis, table
from queues import CONTENDERS, Contender, Throughput, throughput, versions


def alternate(
    contenders: list[Contender], tasks: int, rounds: int
) -> tuple[str, dict[str, list[Throughput]], Path]:
    """Run each contender's first-to-last ``rounds`` times on one private redis-server,
    taking turns (each round starts one later in the list): the machine's line, each
    contender's runs by name, and the folder of the workers' logs."""
    logs = Path(tempfile.mkdtemp(prefix="rc-bench-"))
    server = start_redis()
    runs: dict[str, list[Throughput]] = {c.name: [] for c in contenders}
    try:
        os.environ["BENCH_REDIS_URL"] = server.url
        r = server.client()
        info = machine(r)
        senders = {c.name: c.setup()[0] for c in contenders}
        for enqueue in senders.values():  # connections, scripts, caches: warm for all
            for _ in range(2000):
                enqueue("noop")
            r.flushall()
        for round_, contender in in_turns(contenders, rounds):
            r.flushall()
            log = logs / f"{contender.name}.log"
            run = throughput(senders[contender.name], contender, r, server.url, log, tasks)
            runs[contender.name].append(run)
            print(
                f"round {round_ + 1} {contender.name}: {run.process_rate:,.0f}/s "
                f"({run.process_cpu:.0f} us CPU), enqueue {run.enqueue_rate:,.0f}/s, "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        server.stop()
    return info, runs, logs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=5000, help="no-op tasks per run")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    by_name = {c.name: c for c in CONTENDERS}
    project = dataclasses.replace(
        by_name["ours"],
        name="ours-project",
        label="redis_components (rc_worker), startproject settings",
        env={"DJANGO_SETTINGS_MODULE": "benchmarks.queue_apps.project_settings"},
    )
    contenders = [by_name["ours"], project, by_name["huey"]]
    load_before = os.getloadavg()
    info, runs, logs = alternate(contenders, options.tasks, options.rounds)
    huey = statistics.median(run.process_rate for run in runs["huey"])
    rows = []
    for contender in contenders:
        rates = [run.process_rate for run in runs[contender.name]]
        rate = statistics.median(rates)
        rows.append(
            [
                contender.label,
                f"{rate:,.0f}",
                " / ".join(f"{value:,.0f}" for value in rates),
                f"{statistics.median(run.process_cpu for run in runs[contender.name]):.0f} us",
                f"{rate / huey:.2f}x",
            ]
        )
    print()
    print(f"Machine: {info}; {versions()}")
    print(f"Load average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
    print(f"{options.tasks:,} tasks per run; worker logs: {logs}")
    print()
    print(
        table(
            ["worker", "processed (tasks/s)", "rounds", "CPU/task", "vs Huey"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
