"""The exceptions raised by redis_components.

Every exception derives from :class:`RedisComponentsError`, with one branch per
component. Errors about the caller's input are also ``ValueError`` and carry the
offending field in ``field``; configuration errors are also Django's
``ImproperlyConfigured``. Redis connection errors are not wrapped: they propagate
as ``redis.exceptions.ConnectionError``.
"""

from __future__ import annotations

from typing import Any

import redis.exceptions
from django.core.exceptions import ImproperlyConfigured


class RedisComponentsError(Exception):
    """Base class of every error raised by redis_components."""


class ConfigurationError(RedisComponentsError, ImproperlyConfigured):
    """The settings, the cache or the environment cannot work as configured."""


class InvalidInput(RedisComponentsError, ValueError):
    """An argument was refused before anything was sent to Redis.

    ``field`` names the argument; the message says what was wrong with it.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class LockError(RedisComponentsError, redis.exceptions.LockError):
    """Base class of lock errors; ``name`` is the lock's name when known.

    Also redis-py's ``LockError`` (so ``except redis.exceptions.LockError`` written for
    redis-py's locks keeps working), which makes it a ``ValueError`` too.
    """

    def __init__(self, message: str, name: str | None = None) -> None:
        self.name = name
        super().__init__(message, name)

    def __str__(self) -> str:
        # The message alone: redis-py before 7 keeps both arguments in ``args``.
        return str(self.args[0]) if self.args else ""


class LockNotAcquired(LockError):
    """The lock was held by someone else for longer than the caller would wait."""


class LockAlreadyHeld(LockError):
    """A blocking acquire of a lock this thread or asyncio task holds already: it would
    wait for its own lease to run out."""


class LockNotOwned(LockError, redis.exceptions.LockNotOwnedError):
    """The caller tried to renew, extend or release a lock it no longer holds (also
    redis-py's ``LockNotOwnedError``)."""


class LockLost(LockNotOwned):
    """The lease of a held lock expired (or was taken over) before the holder was done:
    raised by ``handle.check()`` and at the end of a ``redis_lock`` block or call."""


class SemaphoreError(RedisComponentsError):
    """Base class of semaphore errors; ``name`` is the semaphore's name when known."""

    def __init__(self, message: str, name: str | None = None) -> None:
        self.name = name
        super().__init__(message)


class SemaphoreNotAcquired(SemaphoreError):
    """Every permit of the semaphore was taken for longer than the caller would wait."""


class SemaphoreNotOwned(SemaphoreError):
    """The permit had expired (or was released) before it was renewed or released."""


class SemaphoreLost(SemaphoreNotOwned):
    """The permit expired before the holder was done: raised at the end of a
    ``redis_semaphore`` block or call."""


class TaskError(RedisComponentsError):
    """Base class of task queue errors."""


class TaskNotRegistered(TaskError):
    """No task is registered under the given name."""


class TaskSerializationError(TaskError, TypeError, ValueError):
    """A task's arguments (or return value) cannot be JSON: a ``TypeError``, as Django's
    Tasks framework raises for them, and a ``ValueError``, as earlier releases did."""


class InvalidTaskArguments(InvalidInput, TaskError, TypeError):
    """A task's arguments do not fit its function's signature (too many or too few, an
    unknown keyword, a value given twice): refused at enqueue, before anything is written.

    Also a ``TypeError``, as calling the function with them would raise, and an
    :class:`InvalidInput` whose ``field`` is ``"args"``; ``task`` names the task.
    """

    def __init__(self, task: str, problem: str) -> None:
        self.task = task
        super().__init__("args", f"task {task!r} cannot take these arguments: {problem}")


class TaskArgumentsMismatch(InvalidTaskArguments):
    """Recorded in the result of a queued task whose arguments do not fit its function
    (queued by an older release, or by hand): its worker dead-letters it at once,
    without retries, and never calls the function."""


class TaskNotDurable(TaskError):
    """The task was enqueued, but fewer replicas than QUEUE_WAIT_REPLICAS acknowledged it.

    It will most likely run; only a failover in the next moments could lose it.
    ``task_id`` names it, so the caller may check or enqueue it again.
    """

    def __init__(self, message: str, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(message)


class QueueFull(TaskError):
    """The queue holds its maximum number of waiting tasks: nothing was enqueued (by
    ``enqueue_many``: nothing more).

    ``queue`` names the queue and ``limit`` is its maximum length; ``partitions``: how
    many partitions share it (the one the task went to held its share). ``enqueued``:
    for ``enqueue_many``, how many of its batch were enqueued, by its earlier script
    calls (0 for ``enqueue``), and ``results`` their results (they stay enqueued).
    """

    def __init__(self, queue: str, limit: int, partitions: int = 1, *, enqueued: int = 0) -> None:
        self.queue = queue
        self.limit = limit
        self.enqueued = enqueued
        self.written: dict[int, Any] = {}  # (enqueue_many: each written, by its place)
        self.results: list[Any] = []
        held = f"{limit} waiting tasks"
        if partitions > 1:
            held = f"the task's partition holds {-(-limit // partitions)}, its share of {held}"
        added = "nothing was enqueued"
        if enqueued:
            added = f"{enqueued} tasks of the batch were enqueued before it, none since"
        super().__init__(f"queue {queue!r} is full ({held}); {added}")


class TaskResultDoesNotExist(TaskError, LookupError):
    """No result is kept under this task id (unknown, or expired after TASK_RESULT_TTL)."""


class WorkerCrashed(TaskError):
    """Recorded in a task's result when the worker running it died (never raised)."""


class TaskNotCancellable(TaskError):
    """The task cannot be cancelled; ``task_id`` names it and the message says why."""

    def __init__(self, task_id: str, reason: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {task_id} cannot be cancelled: {reason}")


class TaskCancelled(TaskError):
    """Recorded in a Django result of a cancelled task, shown as FAILED (never raised)."""


class SoftTimeLimitExceeded(TaskError):
    """Raised inside a task that ran past its ``soft_time_limit``; it may catch it."""


class TimeLimitExceeded(TaskError):
    """Recorded in a task's result when it ran past its ``time_limit`` and its worker
    process was stopped (never raised)."""


class WorkflowDoesNotExist(TaskError, LookupError):
    """No workflow is kept under this id (unknown, or expired after TASK_RESULT_TTL)."""


class WorkflowNotSuccessful(TaskError):
    """A workflow's results were asked for before it succeeded. ``workflow_id`` and
    ``status`` (RUNNING, FAILED or CANCELLED) say which, ``failed_step`` names the task
    id of the step whose failure failed it (``None`` otherwise)."""

    def __init__(self, workflow_id: str, status: str, failed_step: str | None) -> None:
        self.workflow_id = workflow_id
        self.status = status
        self.failed_step = failed_step
        why = {"RUNNING": "it is still running", "CANCELLED": "it was cancelled"}.get(
            status, f"step {failed_step} failed"
        )
        super().__init__(f"workflow {workflow_id} has no results: {why}")


class MessagingError(RedisComponentsError):
    """Base class of messaging errors."""


class NotAMember(MessagingError):
    """The user is not a member of the chat."""


class ChatNotFound(MessagingError):
    """No chat exists with the given id."""


class ChatLimitReached(MessagingError):
    """The user created as many chats as ``CHAT_CREATES_PER_MINUTE`` allows; another may
    be created in ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class FilesError(RedisComponentsError):
    """Base class of file distribution errors; ``channel`` names the channel."""

    def __init__(self, message: str, channel: str) -> None:
        self.channel = channel
        super().__init__(message)


class ChannelBusy(FilesError):
    """Another sender holds the channel, or its readers are still finishing a run."""


class ReaderDropped(FilesError):
    """The sender went on without this reader after it stalled; its files are gone."""
