"""How long a group's ``enqueue()`` takes on a Redis Cluster, by the group's size.

    .venv/bin/python benchmarks/group_creation.py
    .venv/bin/python benchmarks/group_creation.py --masters 3 --sizes 9 1000 --rounds 3

On a private cluster (``--masters``, Redis's defaults), this process creates groups of
no-op members over the three queues of ``benchmarks/cluster_queues.py`` (a third
each: a home each, placed by their names' hash) and prints the time per group.
Creating a workflow writes it in the shared home (``{tasks}``), then releases its
first steps to their queues' homes (the workflows' outbox, then
``lua/flow_release.lua`` in each step's home): this measures that release.
No worker runs: the members stay queued.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import machine, table

from redis_components.embedded import EmbeddedCluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--masters", type=int, default=3, help="the cluster's masters")
    parser.add_argument("--sizes", type=int, nargs="+", default=[9, 1000], help="members per group")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per size")
    options = parser.parse_args()
    with EmbeddedCluster(masters=options.masters) as server:
        os.environ["BENCH_REDIS_URL"] = server.url
        os.environ["BENCH_CLUSTER"] = "1"
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.queue_apps.settings"
        import django

        django.setup()
        from benchmarks.queue_apps import tasks, work
        from redis_components import group

        def create(size: int) -> float:
            members = [tasks.spread[work.SPREAD_QUEUES[i % 3]].s() for i in range(size)]
            begin = time.perf_counter()
            group(members).enqueue()
            return time.perf_counter() - begin

        create(9)  # connections and scripts: warm
        rows = []
        for size in options.sizes:
            groups = max(1, 2000 // size)  # about 2,000 members per round
            rounds = [
                statistics.mean(create(size) for _ in range(groups)) * 1000
                for _ in range(options.rounds)
            ]
            rows.append(
                [
                    f"a group of {size:,}",
                    f"{statistics.median(rounds):.1f} ms",
                    " / ".join(f"{r:.1f}" for r in rounds),
                ]
            )
        print(machine(server.client()))
        print(f"cluster of {options.masters} masters; groups over 3 queues, a third each\n")
        print(table(["workflow", "enqueue() (median)", "rounds (ms)"], rows))


if __name__ == "__main__":
    main()
