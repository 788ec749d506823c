"""Task queues on a Redis Cluster: how the work of no-op tasks spreads over the shards.

    .venv/bin/python benchmarks/cluster_queues.py        # 3,000 tasks, 2 worker processes
    .venv/bin/python benchmarks/cluster_queues.py --tasks 9000 --workers 4
    .venv/bin/python benchmarks/cluster_queues.py --layout one     # every queue in {tasks}
    .venv/bin/python benchmarks/cluster_queues.py --layout split   # a home per queue, everywhere
    .venv/bin/python benchmarks/cluster_queues.py --partitions 3   # one queue, 3 partitions
    .venv/bin/python benchmarks/cluster_queues.py --workflows      # fan-ins over the 3 queues

In one run, for a private single redis-server and private clusters of 1, 2 and 3
masters (Redis's defaults): ``--tasks`` no-op tasks are enqueued over three queues
(``bench-a``, ``bench-b``, ``bench-c``, a third each), or with ``--partitions N`` over
one queue (``bench-a``) of N partitions (``QUEUE_PARTITIONS``; one home on the single
server), or with ``--workflows`` as workflows of 10 steps each (a group of 9 members
over the three queues, then a fan-in callback on ``bench-a``, given their results),
then ``--workers`` processes of ``rc_worker -c 1`` serving them drain them.
Measured while they drain, from the first take to the last task's end (the queues'
counts polled every 10 ms):

- the rate (tasks per second);
- on each node, the share of the commands it ran (``INFO commandstats``, which counts
  the commands run inside scripts) and the CPU it used per task (``INFO cpu``), and
  their sum over the nodes: the server's cost of a task, which must not grow by more
  than 10 % from the single server for a cluster to add capacity with its shards.

The nodes and the worker processes share this machine's CPUs: where the workers keep
them busy, the rate measures the clients, and the per-node CPU figures are what
predicts the scaling on a machine where the servers are the bottleneck.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, table
from queue_apps import work

from redis_components.embedded import EmbeddedCluster, EmbeddedRedis

ROOT = Path(__file__).resolve().parent.parent
FORK = multiprocessing.get_context("fork")
SETTINGS = "benchmarks.queue_apps.settings"
# --layout: "server" (each server's default: one home on a single server, a home per
# queue on a cluster), "one" (every queue in {tasks}) or "split" (a home per queue).
LAYOUT = "server"
# --partitions: 0 for three queues, else the partitions of one queue.
PARTITIONS = 0
# --workflows: the tasks are the steps of workflows of this many steps (0: plain tasks).
WORKFLOW_STEPS = 0


def served() -> list[str]:
    return [work.SPREAD_QUEUES[0]] if PARTITIONS else list(work.SPREAD_QUEUES)


def environment(url: str, cluster: bool) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    extra = {"BENCH_REDIS_URL": url, "DJANGO_SETTINGS_MODULE": SETTINGS, "PYTHONPATH": path}
    if cluster:
        extra["BENCH_CLUSTER"] = "1"
    if PARTITIONS:
        extra["BENCH_PARTITIONS"] = str(PARTITIONS)
    chosen = {"one": "0", "split": "1"}.get(LAYOUT)
    environment = {key: value for key, value in os.environ.items() if key != "RC_SPLIT_HOMES"}
    return {**environment, **extra, **({"RC_SPLIT_HOMES": chosen} if chosen else {})}


def enqueue(url: str, cluster: bool, tasks: int) -> None:
    """Enqueue ``tasks`` no-ops over the queues, in a child with its own settings."""

    def child() -> None:
        os.environ.update(environment(url, cluster))
        import django

        django.setup()
        from benchmarks.queue_apps.tasks import gather, spread
        from redis_components import group
        from redis_components.tasks.store.layout import split_homes

        chosen = {"one": False, "split": True}.get(LAYOUT)
        # (This process read RC_SPLIT_HOMES before it was set.)
        with contextlib.nullcontext() if chosen is None else split_homes(chosen):
            senders = [spread[queue] for queue in served()]
            if WORKFLOW_STEPS:
                members = [sender.s() for sender in senders] * ((WORKFLOW_STEPS - 1) // 3)
                for _ in range(tasks // WORKFLOW_STEPS):
                    group(members).then(gather.s()).enqueue()
                return
            for sender in itertools.islice(itertools.cycle(senders), tasks):
                sender.enqueue()

    process = FORK.Process(target=child)
    process.start()
    process.join()
    if process.exitcode != 0:
        raise RuntimeError(f"the enqueue failed (exit code {process.exitcode})")


def command_calls(node: redis.Redis) -> int:
    """The commands ``node`` ran so far, its INFO replies left out."""
    found = node.info("commandstats")
    return sum(int(stats["calls"]) for name, stats in found.items() if name != "cmdstat_info")


def cpu(node: redis.Redis) -> float:
    found = node.info("cpu")
    return float(found["used_cpu_user"]) + float(found["used_cpu_sys"])


class Watch:
    """Counts the unfinished tasks, and the commands it sent for that to each node (so
    that they are not counted as the workers')."""

    def __init__(self, nodes: list[redis.Redis]) -> None:
        self.nodes = nodes
        self.sent = [0] * len(nodes)
        self.ready = [self.keys(i, "*:ready:bench-*") for i in range(len(nodes))]

    def keys(self, i: int, pattern: str) -> list[bytes]:
        found, cursor = [], 0
        while True:
            cursor, page = self.nodes[i].scan(cursor, match=pattern, count=1000)
            self.sent[i] += 1
            found += page
            if cursor == 0:
                return found

    def count(self, i: int, keys: list[bytes]) -> int:
        self.sent[i] += len(keys)
        return sum(self.nodes[i].zcard(key) for key in keys)

    def ready_left(self) -> int:
        return sum(self.count(i, keys) for i, keys in enumerate(self.ready))

    def running_left(self) -> int:
        return sum(
            self.count(i, self.keys(i, "*:running:*:bench-*")) for i in range(len(self.nodes))
        )

    def workflows_left(self) -> int:
        """The workflows not finished (a fan-in's callback is released by the script
        that records its last member: between two reads of the queues it may be in
        neither)."""
        return sum(self.count(i, self.keys(i, "*flows:live")) for i in range(len(self.nodes)))


def drain(
    url: str, nodes: list[redis.Redis], cluster: bool, tasks: int, workers: int
) -> tuple[float, list[int], list[float]]:
    """Start the workers, wait until the queues are empty: the rate, and each node's
    commands and CPU seconds from the first take to the end."""
    command = [sys.executable, "manage.py", "rc_worker", "-c", "1", *served()]
    env = environment(url, cluster)
    watch = Watch(nodes)
    processes = [
        subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        for _ in range(workers)
    ]
    try:
        deadline = time.monotonic() + 120
        while True:  # until the first take
            calls = [command_calls(node) for node in nodes]
            used = [cpu(node) for node in nodes]
            sent = list(watch.sent)
            if watch.ready_left() < tasks:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("no worker took a task")
            time.sleep(0.01)
        began = time.monotonic()
        while watch.ready_left() or watch.running_left() or watch.workflows_left():
            if time.monotonic() > deadline + 600:
                raise TimeoutError("the queues were not drained")
            time.sleep(0.01)
        elapsed = time.monotonic() - began
        calls = [
            command_calls(node) - before - (now - then)
            for node, before, now, then in zip(nodes, calls, watch.sent, sent, strict=True)
        ]
        used = [cpu(node) - before for node, before in zip(nodes, used, strict=True)]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
    return tasks / elapsed, calls, used


def steps(tasks: int) -> int:
    """The tasks run: with --workflows, whole workflows only."""
    return tasks // WORKFLOW_STEPS * WORKFLOW_STEPS if WORKFLOW_STEPS else tasks


def run(name: str, masters: int, tasks: int, workers: int) -> list[str]:
    server = EmbeddedCluster(masters=masters).start() if masters else EmbeddedRedis().start()
    try:
        if isinstance(server, EmbeddedCluster):
            nodes = [node.client() for node in server.nodes]
        else:
            nodes = [server.client()]
        tasks = steps(tasks)
        enqueue(server.url, bool(masters), tasks)
        rate, calls, used = drain(server.url, nodes, bool(masters), tasks, workers)
    finally:
        server.stop()
    total = sum(calls) or 1
    return [
        name,
        f"{rate:,.0f}",
        " / ".join(f"{c / total:.0%}" for c in calls),
        " / ".join(f"{u * 1e6 / tasks:.0f}" for u in used),
        f"{sum(used) * 1e6 / tasks:.0f}",
        f"{sum(calls) / tasks:.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=3000, help="no-op tasks per setup")
    parser.add_argument("--workers", type=int, default=2, help="rc_worker -c 1 processes")
    parser.add_argument(
        "--layout",
        choices=["server", "one", "split"],
        default="server",
        help="where the queues' keys are: each server's default (one home on the single "
        "server, a home per queue on a cluster, placed by a hash of its name), one home "
        "everywhere (as before 0.2.0: RC_SPLIT_HOMES=0), or a home per queue everywhere "
        "(RC_SPLIT_HOMES=1)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="enqueue every task in one queue of this many partitions (QUEUE_PARTITIONS) "
        "instead of over three queues",
    )
    parser.add_argument(
        "--workflows",
        action="store_true",
        help="enqueue the tasks as workflows of 10 steps: a group of 9 members over the "
        "three queues, then a callback given their results",
    )
    options = parser.parse_args()
    global LAYOUT, PARTITIONS, WORKFLOW_STEPS
    LAYOUT, PARTITIONS = options.layout, options.partitions
    WORKFLOW_STEPS = 10 if options.workflows else 0
    if not 0 <= PARTITIONS <= 64:
        parser.error(f"--partitions must be from 0 to 64, not {PARTITIONS}")
    if PARTITIONS and WORKFLOW_STEPS:
        parser.error("--workflows spreads its steps over three queues: not with --partitions")
    for name in ("tasks", "workers"):
        if getattr(options, name) < 1:
            parser.error(f"--{name} must be at least 1, not {getattr(options, name)}")
    probe = EmbeddedRedis().start()
    try:
        print(f"Machine: {machine(probe.client())}")
    finally:
        probe.stop()
    load_before = os.getloadavg()
    rows = [
        run(name, masters, options.tasks, options.workers)
        for name, masters in (
            ("single server", 0),
            ("cluster, 1 master", 1),
            ("cluster, 2 masters", 2),
            ("cluster, 3 masters", 3),
        )
    ]
    print(f"Load average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
    over = f"one queue of {PARTITIONS} partitions" if PARTITIONS else "3 queues"
    if WORKFLOW_STEPS:
        over += f", as workflows of {WORKFLOW_STEPS} steps (9 members, then a fan-in)"
    print(
        f"{steps(options.tasks):,} no-op tasks over {over} (layout: {LAYOUT}), "
        f"{options.workers} rc_worker -c 1 processes\n"
    )
    headers = [
        "setup",
        "processed (tasks/s)",
        "commands per node",
        "CPU per task per node (us)",
        "server CPU per task, all nodes (us)",
        "commands per task, all nodes",
    ]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
