"""Helpers for testing a project's tasks: what is queued run in the test's process
(:func:`drain`), a worker a test drives step by step (:class:`ScriptedWorker`), a
worker that dies mid-task, a registry emptied for a test.

::

    from redis_components.testing import crashed_worker

    def test_a_report_survives_its_worker(settings):
        result = send_report.enqueue(7)
        crashed = crashed_worker(["default"])  # took the task, then was killed
        assert crashed.task_ids == [result.id]
        # Once its lease runs out, a live worker puts the task back and runs it:
        Worker(["default"], burst=True).run()  # after 1.5 x TASK_HEARTBEAT_INTERVAL

A :class:`ScriptedWorker` takes tasks and ends each as the test says, without running
them: a test of what happens around a task (its workflow, its retries, a crash, a
second delivery) sets the order of events itself::

    worker = ScriptedWorker(["default"])
    first = worker.take()          # a TaskMessage: its id, task, args...
    worker.retry(first.id)         # failed; runs again after its backoff (here: none)
    worker.succeed(worker.take().id, 42)
    worker.crash()                 # died holding what it still holds

They work on the task system's Redis, as the project's own code does, through the
calls a worker makes (:class:`~redis_components.tasks.store.WorkerStore`); nothing in
them reads or writes a key of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from .conf import conf
from .keys import integer
from .tasks.backend import declared_tasks, queues_in_use
from .tasks.definition import task_registry
from .tasks.execution import DEAD_LETTERED, bury
from .tasks.lease import description, lease_ms, new_worker_id, validate_worker_id
from .tasks.messages import TaskMessage, to_json
from .tasks.results import error_json
from .tasks.schedules import schedule_registry
from .tasks.status import waiting_tasks
from .tasks.store import Delivery, Outcome, TaskStore, WorkerStore
from .tasks.worker import Worker, validate_queues

__all__ = ["CrashedWorker", "ScriptedWorker", "crashed_worker", "drain", "no_registered_tasks"]


class ScriptedWorker:
    """A worker that a test drives one step at a time, and that runs no task code.

    It registers on ``queues`` as a worker does (its lease lasts 1.5 x
    ``TASK_HEARTBEAT_INTERVAL``; :meth:`register` renews it), and each of its calls is
    the one a worker makes, so the queues, results, workflows and recovery do what they
    do for any worker: :meth:`take` the next task (highest priority first; due delayed
    tasks are moved first unless ``move_delayed`` is False), then end each task taken
    with :meth:`succeed`, :meth:`fail` or :meth:`retry`, die holding them
    (:meth:`crash`), or leave (:meth:`stop`). :meth:`deliver_again` puts a copy of a
    task back in its queue, as a worker's crash after it took the task would.
    """

    def __init__(
        self, queues: Sequence[str], *, worker_id: str | None = None, move_delayed: bool = True
    ) -> None:
        self.queues = validate_queues(queues)
        self.id = validate_worker_id(new_worker_id() if worker_id is None else worker_id)
        self._tasks = WorkerStore(self.id, self.queues, move_delayed=move_delayed)
        # What it holds, by task id: (its queue's position, payload, message, take ms).
        self._held: dict[str, tuple[Delivery, TaskMessage]] = {}
        self.register()

    @property
    def held(self) -> list[str]:
        """The ids of the tasks it holds, in the order it took them."""
        return list(self._held)

    def register(self) -> None:
        """Register, or renew its lease."""
        self._tasks.beat(lease_ms(conf.TASK_HEARTBEAT_INTERVAL), description(self.queues))

    def take(self) -> TaskMessage | None:
        """Take the next task of its queues (``None`` if there is none); after
        :meth:`crash` or :meth:`stop`, it registers again first, as a worker that finds
        itself unregistered does."""
        fetched = self._tasks.take()
        if fetched.position == -1:
            self.register()
            fetched = self._tasks.take()
        if fetched.payload is None:
            return None
        message = TaskMessage.decode(fetched.payload)
        self._held[message.id] = (self._tasks.delivery(fetched), message)
        return message

    def succeed(self, task_id: str, value: Any = None) -> bool:
        """End task ``task_id`` as if it returned ``value`` (JSON). False if it was no
        longer its to end: its lease ran out and the task was put back meanwhile."""
        delivery, message = self._held[task_id]
        return self._end(
            task_id,
            Outcome(
                delivery=delivery,
                task_id=task_id,
                kind="ok",
                data=to_json(value, f"the value of task {message.task!r}"),
                first=message.first_attempt,
            ),
        )

    def fail(self, task_id: str, error: BaseException | None = None) -> bool:
        """End task ``task_id`` as failed for good: it is dead-lettered with ``error``
        (by default a ``RuntimeError``), whatever retries it has left."""
        delivery, message = self._held[task_id]
        error = RuntimeError("failed on purpose") if error is None else error
        problem = f"{type(error).__name__}: {error}"
        outcome = bury(delivery, task_id, "failed", problem, error, first=message.first_attempt)
        return self._end(task_id, outcome)

    def retry(self, task_id: str, delay: float = 0.0, error: str = "failed on purpose") -> bool:
        """End task ``task_id`` as a failed attempt to run again in ``delay`` seconds."""
        delivery, message = self._held[task_id]
        again = dataclasses.replace(message, retries=message.retries + 1).encode()
        outcome = Outcome(
            delivery=delivery,
            task_id=task_id,
            kind="retry",
            data=error_json("builtins.RuntimeError", error),
            again=again,
            delay_ms=round(delay * 1000),
            first=message.first_attempt,
        )
        return self._end(task_id, outcome)

    def _end(self, task_id: str, outcome: Outcome) -> bool:
        del self._held[task_id]
        return self._tasks.record(outcome).recorded

    def crash(self, max_crashes: int | None = None) -> tuple[int, int]:
        """Die holding what it holds, found dead at once: each task goes back on its
        queue with a crash counted, and is dead-lettered at ``max_crashes`` (by default
        ``TASK_MAX_CRASHES``). Returns ``(requeued, dead-lettered)``."""
        limit = conf.TASK_MAX_CRASHES if max_crashes is None else max_crashes
        self._held.clear()
        result = self._tasks.put_back(max_crashes=limit)
        return result or (0, 0)

    def stop(self) -> None:
        """Leave, as a worker that stops does: what it still holds goes back on its
        queue (no crash counted), and it is no longer registered."""
        self._held.clear()
        self._tasks.put_back()

    def deliver_again(self, message: TaskMessage) -> None:
        """Put a copy of ``message`` (a task this or any worker took) back in its queue,
        marked with one more crash, as a worker's death after taking it would: the task
        then runs, and ends, twice (a copy equal to a payload in the queue already is
        one entry, as in a Redis set)."""
        copy = dataclasses.replace(message, crashes=message.crashes + 1)
        TaskStore().enqueue(copy, copy.encode())


@dataclasses.dataclass(frozen=True)
class CrashedWorker:
    """A worker that died holding tasks: its id and the ids of the tasks it took."""

    id: str
    task_ids: list[str]


def crashed_worker(
    queues: Sequence[str], *, take: int = 1, worker_id: str | None = None
) -> CrashedWorker:
    """A worker that registered on ``queues``, took up to ``take`` ready tasks (highest
    priority first, as a worker does) and died holding them, as a process killed with
    ``kill -9`` would.

    Its tasks stay in progress (``running_tasks()`` lists them) until its lease runs out,
    1.5 x ``TASK_HEARTBEAT_INTERVAL`` after it registered; then a live worker's
    heartbeat puts them back on their queues and counts a crash against each (at
    ``TASK_MAX_CRASHES`` a task is dead-lettered, by a crash with no other task held).
    With ``take=0`` it holds nothing: a worker that is registered but never heard of
    again.
    """
    integer(take, "take", minimum=0)
    worker = ScriptedWorker(queues, worker_id=worker_id, move_delayed=False)
    taken = []
    for _ in range(take):
        message = worker.take()
        if message is None:
            break
        taken.append(message.id)
    return CrashedWorker(worker.id, taken)


@contextlib.contextmanager
def no_registered_tasks() -> Iterator[None]:
    """Within the block, no ``@redis_task`` and no ``@periodic`` schedule is registered; those
    the block registers are forgotten after it, and the project's are back."""
    with task_registry.isolated(), schedule_registry.isolated():
        yield


def drain(
    queues: Sequence[str] | None = None, *, fail_fast: bool = True, wait: float = 10.0
) -> int:
    """Run what is queued in ``queues`` in this process, as a burst worker does, and what
    those runs queue (retries, a workflow's next steps), until no task is ready and none
    is due within ``wait`` seconds; return how many ran.

    ``queues``: by default every queue a known task uses (the tasks of our
    ``@redis_task``, and of Django's ``@task`` on our backend). ``fail_fast``: the first
    task that fails for good (dead-lettered, its retries spent) raises its exception
    here once the worker's run it was in has ended, as Dramatiq's
    ``StubBroker.join(fail_fast=True)`` does; without it, a failure stays in its result
    and dead letter, as a worker leaves it.
    """
    known = queues_in_use() | {task.queue_name for task in declared_tasks().values()}
    names = validate_queues(list(queues) if queues is not None else sorted(known))
    failures = _Failures()
    worker_log = logging.getLogger("redis_components.worker")
    worker_log.addHandler(failures)
    ran = 0
    try:
        while True:
            ran += Worker(names, burst=True).run()
            if fail_fast and failures.first is not None:
                raise failures.first
            due = _seconds_to_next_due(names)
            if due is None or due > wait:
                return ran
            time.sleep(due)
    finally:
        worker_log.removeHandler(failures)


class _Failures(logging.Handler):
    """The exception of the first task a worker dead-letters for failing (its log line)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.first: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == DEAD_LETTERED and self.first is None:
            error = record.exc_info[1] if record.exc_info else None
            self.first = error or AssertionError(record.getMessage())


def _seconds_to_next_due(queues: Sequence[str]) -> float | None:
    """How long until the first delayed task of ``queues`` is due (None: none is)."""
    due = [
        waiting[0].due_ms
        for queue in queues
        if (waiting := waiting_tasks(queue, "delayed", 0, 1)[1]) and waiting[0].due_ms is not None
    ]
    return max(min(due) / 1000 - time.time(), 0.0) if due else None
