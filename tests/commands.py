"""Counting the commands a piece of work costs the server."""

from __future__ import annotations

from collections.abc import Callable

import redis


def commands_per_task(
    r: redis.Redis, enqueue: Callable[[int], None], work: Callable[[], int]
) -> float:
    """The commands one more finished task costs: the difference between 40 tasks and 20.

    The difference leaves out what does not depend on the number of tasks (registering,
    leaving, the last empty take, the INFO itself). Another client of the server (a
    lease renewal of a worker thread that is still ending) can only add commands, never
    take one away, so the least of up to three measurements is the task's own cost.
    """

    def commands_for(count: int) -> int:
        enqueue(count)
        r.config_resetstat()
        assert work() == count
        return sum(stat["calls"] for stat in r.info("commandstats").values())

    commands_for(1)  # loads the scripts
    measured = []
    for _ in range(3):
        measured.append((commands_for(40) - commands_for(20)) / 20)
        if measured[-1] == int(measured[-1]):
            break
    return min(measured)
