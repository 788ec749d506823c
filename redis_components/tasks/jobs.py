"""What runs a task in a worker: a :class:`Job`, one run of one task message.

Our ``@task`` gives a plain :class:`Job`; Django's Tasks backend gives its own
subclass (``backend.DjangoJob``: the task's context, Django's signals, Django's JSON
rules). :func:`~redis_components.tasks.execution.execute` runs either.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync

from .messages import TaskMessage, to_json
from .registry import find_task
from .results import TaskStatus


class Job:
    """One run of a task in a worker: what to call, how to store its value, its retries.

    Django's Tasks backend gives its own (with the task context and Django's signals).
    """

    def __init__(
        self,
        func: Callable[..., Any],
        message: TaskMessage,
        *,
        max_retries: int,
        retry_backoff: float | None,
        time_limit: float | None = None,
        soft_time_limit: float | None = None,
    ) -> None:
        self.func = func
        self.message = message
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.time_limit = time_limit
        self.soft_time_limit = soft_time_limit

    @classmethod
    def of(cls, message: TaskMessage) -> Job | None:
        r"""The job of a message for one of our ``@task``\ s (``None``: no such task here)."""
        registered = find_task(message.task)
        if registered is None:
            return None
        return cls(
            registered.func,
            message,
            max_retries=registered.max_retries,
            retry_backoff=registered.retry_backoff,
            time_limit=registered.time_limit,
            soft_time_limit=registered.soft_time_limit,
        )

    def call(self) -> Any:
        """Run the task once; an ``async def`` task runs on an event loop."""
        func = self.func
        if inspect.iscoroutinefunction(func):
            func = async_to_sync(func)
        return func(*self.message.args, **self.message.kwargs)

    def encode(self, value: Any) -> str:
        """The return value as JSON (:class:`TaskSerializationError` if it is not JSON)."""
        return to_json(value, f"the return value of task {self.message.task!r}")

    def finished(self, status: TaskStatus, error: BaseException | None) -> None:
        """Called once the task has ended for good (not before a retry)."""
