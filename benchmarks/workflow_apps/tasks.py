"""The workflow benchmark's steps for redis_components (autodiscovered by rc_worker).

A redelivery is a copy of the step's own message put back on its queue, as the
recovery of a worker that died after running it would.
"""

from __future__ import annotations

import dataclasses

from redis_components import current_task, redis_task
from redis_components.tasks.store import TaskStore

from . import work


def _deliver_again() -> None:
    running = current_task()
    assert running is not None
    copy = dataclasses.replace(running.message, crashes=1, enqueued_at=None)
    TaskStore().enqueue(copy, copy.encode())


@redis_task(name="wf.start", queue=work.QUEUE)
def start() -> None:
    """The fan-out's first step."""


@redis_task(name="wf.member", queue=work.QUEUE)
def member(number: int) -> int:
    if work.member(number):
        _deliver_again()
    return number


@redis_task(name="wf.reduce", queue=work.QUEUE)
def reduce(results: list[int]) -> None:
    work.reduce(results)


@redis_task(name="wf.independent", queue=work.QUEUE)
def independent(number: int) -> None:
    if work.independent(number):
        _deliver_again()
