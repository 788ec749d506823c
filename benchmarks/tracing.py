"""What tracing costs a task (issue 61): processing no-op tasks with ``TRACING`` off,
against the code before tracing existed, and with it on (OpenTelemetry's API alone, so
every span is a no-op: the package's own cost; then its SDK, a batch span processor and
an exporter that drops the spans; every trace sampled, or 1 in 10 as a busy project
would), each contender's ``rc_worker -c
1`` taking turns on one private redis-server (``first_to_last.py``'s harness).

    git worktree add /tmp/rc-before <commit before tracing>
    .venv/bin/python benchmarks/tracing.py --before /tmp/rc-before --rounds 5

The code before runs from that worktree (``python -P``, its folder first on the path),
in the same environment. Tasks are enqueued by this process, with tracing off: what is
measured is the worker's side, which runs every attempt (the enqueue's ``send`` span
costs the web process the same as a ``process`` span costs the worker, about).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import start_redis, table
from first_to_last import alternate
from queues import CONTENDERS, ours

# The enqueue's side: a process that enqueues no-op tasks with BENCH_TRACING set as
# named (off, the API alone, the SDK), each in a process of its own (an SDK is set once).
SENDERS = {"off": "", "api": "api", "on": "1"}


def send(tasks: int) -> None:
    """(In a sender process.) Enqueue ``tasks`` no-op tasks, after as many to warm up;
    print the seconds each took, by the clock: with every process on one CPU, what one
    costs this process and the server together."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # (the project's root)
    enqueue = ours()[0]
    for _ in range(tasks):
        enqueue("noop")
    started = time.perf_counter()
    for _ in range(tasks):
        enqueue("noop")
    print((time.perf_counter() - started) / tasks)


def enqueue_costs(tasks: int, rounds: int) -> dict[str, list[float]]:
    """Each sender's µs per enqueue, ``rounds`` times, taking turns on one server."""
    server = start_redis()
    found: dict[str, list[float]] = {name: [] for name in SENDERS}
    try:
        for _ in range(rounds):
            for name, value in SENDERS.items():
                server.client().flushall()
                env = {**os.environ, "BENCH_REDIS_URL": server.url, "BENCH_TRACING": value}
                command = [sys.executable, __file__, "--send", str(tasks)]
                done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
                found[name].append(float(done.stdout.split()[-1]) * 1e6)
    finally:
        server.stop()
    return found


def main() -> None:
    if sys.argv[1:2] == ["--send"]:  # (a sender process: see enqueue_costs)
        send(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True, help="a worktree before tracing")
    parser.add_argument("--tasks", type=int, default=5000, help="no-op tasks per run")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    costs = enqueue_costs(options.tasks, options.rounds)
    ours = next(c for c in CONTENDERS if c.name == "ours")
    before = dataclasses.replace(
        ours,
        name="before",
        label=f"before tracing ({options.before.name})",
        command=[sys.executable, "-P", "-m", "django", "rc_worker", "bench"],
        env={"PYTHONPATH": str(options.before.resolve())},
    )
    off = dataclasses.replace(ours, name="off", label="TRACING off (the default)")
    on = dataclasses.replace(
        ours, name="on", label="TRACING on, SDK, spans dropped", env={"BENCH_TRACING": "1"}
    )
    sampled = dataclasses.replace(
        ours,
        name="sampled",
        label="TRACING on, 1 trace in 10 sampled",
        env={"BENCH_TRACING": "0.1"},
    )
    api = dataclasses.replace(
        ours,
        name="api",
        label="TRACING on, API without an SDK",
        env={"BENCH_TRACING": "api"},
    )
    contenders = [before, off, api, on, sampled]
    info, runs, logs = alternate(contenders, options.tasks, options.rounds)

    def rate(name: str) -> float:
        return statistics.median(run.process_rate for run in runs[name])

    rows = [
        [
            contender.label,
            f"{rate(contender.name):,.0f}",
            " / ".join(f"{run.process_rate:,.0f}" for run in runs[contender.name]),
            f"{statistics.median(run.process_cpu for run in runs[contender.name]):.0f} us",
            f"{rate(contender.name) / rate('before'):.2f}x",
        ]
        for contender in contenders
    ]
    print(f"\nMachine: {info}")
    print(f"{options.tasks:,} tasks per run, {options.rounds} rounds; worker logs: {logs}\n")
    print(table(["worker", "processed (tasks/s)", "rounds", "CPU/task", "vs before"], rows))
    off = statistics.median(costs["off"])
    sent = [
        [
            name,
            f"{statistics.median(costs[name]):.0f} us",
            " / ".join(f"{cost:.0f}" for cost in costs[name]),
            f"{off / statistics.median(costs[name]):.2f}x",
        ]
        for name in SENDERS
    ]
    print(f"\nEnqueue ({options.tasks:,} a run, with every process on one CPU: the sender's")
    print("and the server's CPU together), a send span each with tracing on:\n")
    print(table(["TRACING (sender)", "per enqueue", "rounds", "rate vs off"], sent))


if __name__ == "__main__":
    main()
