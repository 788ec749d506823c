"""Our backend with the two faces Django's tests expect of its test-only backends.

Django's tests drive its ``DummyBackend`` (enqueue, nothing runs, the results are
remembered in ``.results``) and its ``ImmediateBackend`` (the task has run when
``enqueue`` returns). These are :class:`RedisTaskBackend` doing exactly that through
Redis: the tasks are enqueued by our engine, run by our worker, and their results read
back from Redis.
"""

from __future__ import annotations

import copy
from typing import Any

from django.tasks import Task, TaskResult  # only Django 6 ships these tests

from redis_components.tasks.backend import RedisTaskBackend
from redis_components.tasks.definition import P, R
from redis_components.tasks.store import TaskStore
from redis_components.tasks.store.layout import result_key, task_home, tasks_client
from redis_components.tasks.worker import Worker


class EnqueueOnly(RedisTaskBackend):
    """Enqueues into Redis; nothing runs the tasks. ``results`` lists what it returned."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.results: list[TaskResult[Any, Any]] = []

    def enqueue(
        self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[P, R]:
        result = super().enqueue(task, args, kwargs)
        self.results.append(result)
        return copy.deepcopy(result)  # as Django's DummyBackend: its record stays its own

    def clear(self) -> None:
        """Forget every task it enqueued: out of their queues, their results deleted."""
        for queue in {result.task.queue_name for result in self.results}:
            TaskStore().purge(queue)
        for result in self.results:  # (each in its queue's home: on a cluster, its node)
            tasks_client(task_home(result.id)).delete(result_key(result.id))
        self.results.clear()


class RunAtOnce(RedisTaskBackend):
    """Enqueues into Redis, runs a worker here until the task's queue is empty, and
    returns the task's result as Redis then holds it."""

    def enqueue(
        self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[P, R]:
        result = super().enqueue(task, args, kwargs)
        Worker([task.queue_name], burst=True).run()
        result.refresh()
        return result
