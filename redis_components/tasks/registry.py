"""Things by name (:class:`Registry`), and what a running task uses: :class:`Retry`,
:func:`current_task`, :func:`defer`. It needs no task type (the tasks by name are
``definition.task_registry``)."""

from __future__ import annotations

import contextlib
import contextvars
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from .. import keys
from ..conf import conf
from ..exceptions import LockNotAcquired
from ..guard import Busy
from .messages import TaskMessage


class Retry(Exception):
    """Raise from a task to run it again after ``delay`` seconds (default: what its
    backoff says). It counts as an attempt; with none left, the task is dead-lettered
    with ``reason`` as its error."""

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        self.delay = None if delay is None else keys.seconds(delay, "delay")
        self.reason = reason
        super().__init__(reason or "retry requested")


T = TypeVar("T")


class Registry(Generic[T]):
    """Things registered by name as their modules are imported (tasks, schedules)."""

    def __init__(self) -> None:
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> None:
        self._items[name] = item

    def find(self, name: str) -> T | None:
        return self._items.get(name)

    def all(self) -> dict[str, T]:
        """Every item by name (a copy)."""
        return dict(self._items)

    @contextlib.contextmanager
    def isolated(self) -> Iterator[None]:
        """Start empty; on leaving, forget what was added and have the old items back."""
        saved, self._items = self._items, {}
        try:
            yield
        finally:
            self._items = saved


def backoff(retries: int, base: float | None = None) -> float:
    """Seconds to wait before retry number ``retries + 1``: exponential, capped, jittered
    (x 0.5 to 1.5, to spread the retries of tasks that failed together)."""
    base = conf.TASK_RETRY_BACKOFF if base is None else base
    delay = min(conf.TASK_RETRY_BACKOFF_MAX, base * 2.0**retries)
    return min(conf.TASK_RETRY_BACKOFF_MAX, delay * random.uniform(0.5, 1.5))


@dataclass(eq=False)
class RunningTask:
    """The task a worker is running now; :func:`current_task` returns it inside a task."""

    message: TaskMessage
    deferred_for: float | None = None

    @property
    def id(self) -> str:
        return self.message.id

    def defer(self, seconds: float) -> None:
        """Ask the worker to run this task again in ``seconds`` instead of finishing it
        (atomically, when the task returns); a deferral does not count as a retry."""
        self.deferred_for = keys.seconds(seconds, "seconds")


_current: contextvars.ContextVar[RunningTask | None] = contextvars.ContextVar(
    "redis_components_current_task", default=None
)


def current_task() -> RunningTask | None:
    """The task the worker is running in this context, or ``None`` outside a worker."""
    return _current.get()


def running(message: TaskMessage) -> tuple[RunningTask, contextvars.Token[RunningTask | None]]:
    """Make ``message`` the current task (the worker's side of :func:`current_task`)."""
    running_task = RunningTask(message)
    return running_task, _current.set(running_task)


def stop_running(token: contextvars.Token[RunningTask | None]) -> None:
    _current.reset(token)


def defer(seconds: float | None = None) -> Callable[[Busy], None]:
    """A lock conflict strategy: run the current task again later instead of waiting.

    ::

        @redis_task()
        @redis_lock("item:{item_id}", on_busy=defer(5))
        def sell(item_id): ...

    When the lock is busy inside a worker, the task being run is moved to its delayed
    queue, due in ``seconds`` (default: the lock's ``retry_after``), and the call
    returns ``None``; a deferral does not count as a retry. Outside a worker (a plain
    call) there is no queued task to defer, so :class:`LockNotAcquired` is raised.
    """
    if seconds is not None:
        keys.seconds(seconds, "seconds")

    def on_busy(busy: Busy) -> None:
        running_task = current_task()
        if running_task is None:
            raise LockNotAcquired(
                f"{', '.join(busy.names)} is busy and no worker task is running to defer",
                name=busy.name if busy.names else None,
            )
        running_task.defer(busy.retry_after if seconds is None else seconds)

    return on_busy
