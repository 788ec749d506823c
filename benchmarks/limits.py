"""What a limit costs: no-op tasks with and without a concurrency limit that never
binds, on one worker process (``rc_worker -c 1``), in the same run on one private
redis-server, alternating.

    .venv/bin/python benchmarks/limits.py               # 5,000 tasks, 3 rounds
    .venv/bin/python benchmarks/limits.py --tasks 20000 --rounds 5

The limited task is ``bench.limited`` (``concurrency_limit(1000, key="bench")``,
``benchmarks/queue_apps/tasks.py``): each take reads its limits from the payload and
adds its id to the limit's SET, and each outcome removes it. Rates are timed from the
first task's start to the last one's end (as ``first_to_last.py`` does); CPU is the
worker's processes' plus redis-server's, per task; medians over the rounds. The reply
parser is the environment's (hiredis when it is installed).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import table
from first_to_last import alternate
from queues import CONTENDERS, Senders, ours


def limited() -> Senders:
    """Our senders, with the measured no-op replaced by the limited one."""
    send, send_in = ours()
    return (lambda name, *args: send("limited" if name == "noop" else name, *args), send_in)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=5000, help="no-op tasks per run")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    plain = next(c for c in CONTENDERS if c.name == "ours")
    contenders = [
        plain,
        dataclasses.replace(
            plain,
            name="ours-limited",
            label="redis_components, concurrency_limit(1000) on every task",
            setup=limited,
        ),
    ]
    load_before = os.getloadavg()
    info, runs, logs = alternate(contenders, options.tasks, options.rounds)
    base = statistics.median(run.process_rate for run in runs["ours"])
    rows = []
    for contender in contenders:
        done = runs[contender.name]
        rates = [run.process_rate for run in done]
        rate = statistics.median(rates)
        rows.append(
            [
                contender.label,
                f"{statistics.median(run.enqueue_rate for run in done):,.0f}",
                f"{rate:,.0f}",
                " / ".join(f"{value:,.0f}" for value in rates),
                f"{statistics.median(run.process_cpu for run in done):.0f} us",
                f"{rate / base:.2f}",
            ]
        )
    print()
    print(f"Machine: {info}")
    print(f"Load average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
    print(f"{options.tasks:,} tasks per run; worker logs: {logs}")
    print()
    print(
        table(
            [
                "worker",
                "enqueue (tasks/s)",
                "processed (tasks/s)",
                "rounds",
                "CPU/task",
                "vs no limit",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
