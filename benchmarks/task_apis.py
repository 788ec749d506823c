"""What Django's proposed task APIs cost a task (issue 60): no-op tasks that set their
metadata once and report their progress 10 times (``bench.reporting``), against plain
no-op tasks (``bench.noop``), each run by one ``rc_worker -c 1`` process, taking turns
on one private redis-server; then what reading a task's progress from another process
costs the server.

    .venv/bin/python benchmarks/task_apis.py                  # 5,000 tasks, 3 rounds
    .venv/bin/python benchmarks/task_apis.py --tasks 20000 --rounds 5

Rates are first task's start to last task's end (``queues.py``'s throughput); CPU is
the worker's processes' plus redis-server's, per task; medians over the rounds. The
read is ``get_result(task_id).progress`` in this process, which did not run the task;
it is counted in round trips (sends on a connection: a pipeline's commands go in one)
and in commands, as MONITOR sees them (a script's own commands are not on the wire).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import in_turns, machine, start_redis, table
from queues import CONTENDERS, Throughput, throughput

MARK = "rc-bench-progress-read"


def read_cost(server_client: object, task_id: str) -> list[tuple[str, int, list[str]]]:
    """What reading a finished task's progress costs, each way: round trips (calls
    that send on a connection: a pipeline's commands go in one) and the commands
    MONITOR sees."""
    import redis.connection

    from redis_components import get_progress, get_result
    from redis_components.connection import get_client

    client = get_client()
    get_result(task_id)  # (connects, so that the handshake is not counted)
    sender = redis.connection.AbstractConnection
    send = sender.send_packed_command
    trips = 0

    def counted(self: object, *args: object, **kwargs: object) -> None:
        nonlocal trips
        trips += 1
        send(self, *args, **kwargs)  # type: ignore[arg-type]

    found = []
    for label, read in (
        ("get_result(task_id).progress", lambda: get_result(task_id).progress),
        ("get_progress(task_id)", lambda: get_progress(task_id)),
    ):
        with server_client.monitor() as monitor:  # type: ignore[attr-defined]
            client.echo(MARK)
            trips = 0
            sender.send_packed_command = counted  # type: ignore[method-assign]
            try:
                progress = read()
            finally:
                sender.send_packed_command = send  # type: ignore[method-assign]
            client.echo(MARK)
            seen, inside = [], False
            while True:
                command = monitor.next_command()
                if command["command"] == f"ECHO {MARK}":
                    if inside:
                        break
                    inside = True
                elif inside and command["client_type"] != "lua":
                    seen.append(command["command"].split(" ", 1)[0])
        if progress is None or progress.done != 10:
            raise RuntimeError(f"the task's progress reads {progress!r}, not 10 of 10")
        found.append((label, trips, seen))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=5000, help="tasks per run")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    ours = next(c for c in CONTENDERS if c.name == "ours")
    logs = Path(tempfile.mkdtemp(prefix="rc-bench-"))
    server = start_redis()
    runs: dict[str, list[Throughput]] = {"noop": [], "reporting": []}
    try:
        os.environ["BENCH_REDIS_URL"] = server.url
        r = server.client()
        info = machine(r)
        enqueue, _ = ours.setup()
        senders = {
            "noop": enqueue,
            "reporting": lambda name, *a: enqueue("reporting" if name == "noop" else name, *a),
        }
        for send in senders.values():  # connections, scripts, caches: warm for both
            for _ in range(2000):
                send("noop")
            r.flushall()
        for round_, kind in in_turns(list(senders), options.rounds):
            r.flushall()
            run = throughput(
                senders[kind], ours, r, server.url, logs / f"{kind}.log", options.tasks
            )
            runs[kind].append(run)
            print(
                f"round {round_ + 1} {kind}: {run.process_rate:,.0f}/s "
                f"({run.process_cpu:.0f} us CPU), load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        from benchmarks.queue_apps import tasks

        r.flushall()
        done = tasks.reporting.enqueue()
        throughput(enqueue, ours, r, server.url, logs / "read.log", 1)  # runs it too
        reads = read_cost(r, done.id)
    finally:
        server.stop()

    def rate(kind: str) -> float:
        return statistics.median(run.process_rate for run in runs[kind])

    def cpu(kind: str) -> float:
        return statistics.median(run.process_cpu for run in runs[kind])

    print(f"\nMachine: {info}")
    print(f"Python {sys.version.split()[0]}, {options.tasks:,} tasks, {options.rounds} rounds\n")
    print(
        table(
            ["tasks", "tasks/s (median)", "CPU per task (us)", "each round (tasks/s)"],
            [
                [
                    kind,
                    f"{rate(kind):,.0f}",
                    f"{cpu(kind):.0f}",
                    ", ".join(f"{run.process_rate:,.0f}" for run in runs[kind]),
                ]
                for kind in runs
            ],
        )
    )
    print(f"\nreporting / plain: {rate('reporting') / rate('noop'):.2f}x")
    print("\nReading the progress in another process than the worker's:\n")
    print(
        table(
            ["read", "round trips", "commands"],
            [[label, trips, " + ".join(seen)] for label, trips, seen in reads],
        )
    )


if __name__ == "__main__":
    main()
