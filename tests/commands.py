"""Counting the commands a piece of work costs the server."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import redis


def commands_per_task(
    r: redis.Redis, enqueue: Callable[[int], None], work: Callable[[], int]
) -> float:
    """The commands one more finished task costs: the difference between 40 tasks and 20.

    The difference leaves out what does not depend on the number of tasks (registering,
    leaving, the last empty take, the INFO itself). Another client of the server (a
    lease renewal of a worker thread that is still ending) adds a stray command to
    either run, which moves the difference up or down by 1/20: the first of up to five
    measurements that is a whole number is the task's own cost (else their median).
    """

    def commands_for(count: int) -> int:
        enqueue(count)
        r.config_resetstat()
        assert work() == count
        return sum(stat["calls"] for stat in r.info("commandstats").values())

    commands_for(1)  # loads the scripts
    measured = []
    for _ in range(5):
        measured.append((commands_for(40) - commands_for(20)) / 20)
        if measured[-1] == int(measured[-1]):
            return measured[-1]
    return statistics.median(measured)
