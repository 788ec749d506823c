"""Counting the commands a piece of work costs the server."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from unittest import mock

import redis
from django.conf import settings
from django.test import override_settings

from redis_components.tasks import conveyor
from redis_components.tasks.store import TaskStore, layout


def commands_per_task(
    r: redis.Redis, enqueue: Callable[[int], None], work: Callable[[], int], held_ahead: int = 1
) -> float:
    """The commands one more finished task costs: the difference between 40 tasks and 20.

    A worker holds ``held_ahead`` tasks ahead at most (``TASK_TAKE_AHEAD``), and holds
    that many as soon as it can: how many it holds otherwise grows with the time it
    waits for replies, and with them the take calls of its first tasks.

    The difference leaves out what does not depend on the number of tasks (registering,
    leaving, the last empty take, the INFO itself). ``work`` runs with a heartbeat
    interval of 10 minutes: a renewal of the lease is due every half interval, so on a
    busy machine (the legs of make test run side by side) a run slow enough would count
    one, which depends on time, not on tasks. Another client of the server adds a stray
    command to either run, which moves the difference up or down by 1/20: the first of
    up to five measurements that is a whole number is the task's own cost (else their
    median).
    """
    slow_beats = {
        **settings.REDIS_COMPONENTS,
        "TASK_HEARTBEAT_INTERVAL": 600,
        "TASK_TAKE_AHEAD": held_ahead,
    }

    def commands_for(count: int) -> int:
        enqueue(count)
        r.config_resetstat()
        with (
            override_settings(REDIS_COMPONENTS=slow_beats),
            mock.patch.object(conveyor, "WAITED", -1.0),
        ):
            assert work() == count
        return sum(stat["calls"] for stat in r.info("commandstats").values())

    commands_for(1)  # loads the scripts
    measured = []
    for _ in range(5):
        measured.append((commands_for(40) - commands_for(20)) / 20)
        if measured[-1] == int(measured[-1]):
            return measured[-1]
    return statistics.median(measured)


def tasks_added(queue: str) -> int:
    """The metrics' count of the tasks added to ``queue``, where its enqueues keep it: in
    the totals of its home and of the registry's, which writes workflows and ticks
    (``TaskStore().totals()`` sums the homes of the queues known, and a queue no worker
    has served yet is not)."""
    store, name = TaskStore(), f"{queue}:added"
    heads = {layout.home(queue), layout.registry()}
    return sum(int(store.at(head).hget(layout.totals_key(head), name) or 0) for head in heads)
