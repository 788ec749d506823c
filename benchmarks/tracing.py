"""What tracing costs a task (issue 61): processing no-op tasks with ``TRACING`` off,
against the code before tracing existed, and with it on (OpenTelemetry's SDK, a batch
span processor and an exporter that drops the spans; every trace sampled, or 1 in 10 as
a busy project would), each contender's ``rc_worker -c
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
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import table
from first_to_last import alternate
from queues import CONTENDERS


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True, help="a worktree before tracing")
    parser.add_argument("--tasks", type=int, default=5000, help="no-op tasks per run")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
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
    contenders = [before, off, on, sampled]
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


if __name__ == "__main__":
    main()
