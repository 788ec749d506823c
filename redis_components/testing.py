"""Helpers for testing a project's tasks: a worker that dies mid-task, a registry
emptied for a test.

::

    from redis_components.testing import crashed_worker

    def test_a_report_survives_its_worker(settings):
        result = send_report.enqueue(7)
        crashed = crashed_worker(["default"])  # took the task, then was killed
        assert crashed.task_ids == [result.id]
        # Once its lease runs out, a live worker puts the task back and runs it:
        Worker(["default"], burst=True).run()  # after 1.5 x TASK_HEARTBEAT_INTERVAL

They work on the task system's Redis, as the project's own code does; nothing in them
reads or writes a key of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence

from .keys import integer
from .tasks.messages import TaskMessage
from .tasks.registry import task_registry
from .tasks.schedules import schedule_registry
from .tasks.worker import Worker

__all__ = ["CrashedWorker", "crashed_worker", "no_registered_tasks"]


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
    worker = Worker(queues, worker_id=worker_id, scheduler=False)
    try:
        worker._lease.beat()
        taken = []
        for _ in range(take):
            fetched = worker._fetch(take=True)
            if fetched.payload is None:
                break
            taken.append(TaskMessage.decode(fetched.payload).id)
    finally:
        worker.close()
    return CrashedWorker(worker.id, taken)


@contextlib.contextmanager
def no_registered_tasks() -> Iterator[None]:
    """Within the block, no ``@redis_task`` and no ``@periodic`` schedule is registered; those
    the block registers are forgotten after it, and the project's are back."""
    with task_registry.isolated(), schedule_registry.isolated():
        yield
