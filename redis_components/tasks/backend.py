"""Django's Tasks framework on our queue: a backend for ``settings.TASKS``.

::

    TASKS = {
        "default": {
            "BACKEND": "redis_components.tasks.backend.RedisTaskBackend",
            "QUEUES": ["default", "email"],
            "OPTIONS": {"MAX_RETRIES": 0, "RETRY_BACKOFF": 2.0},
        }
    }

A thin adapter: ``enqueue`` sends Django's task to the same store as our ``@task``
(the message carries the task's module path and this backend's alias), workers run it
(``manage.py rc_worker``), and ``get_result`` reads the same result records. Every
guarantee of the queue holds: at-least-once delivery, recovery after a crash, dead
letters, ``QueueFull``, ``QUEUE_WAIT_REPLICAS``. A failing task is retried only when
``MAX_RETRIES`` (default 0) or a raised :class:`~redis_components.Retry` asks for it.

It runs on Django 6's ``django.tasks``, and on Django 5.2 with the ``django-tasks``
backport (the ``tasks-backport`` extra; add ``"django_tasks"`` to ``INSTALLED_APPS``).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeAlias, TypeVar, cast

import django
from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error
from django.core.signals import setting_changed
from django.utils import timezone
from django.utils.module_loading import import_string

from .. import keys
from ..exceptions import InvalidInput, TaskResultDoesNotExist, TaskSerializationError
from . import results
from .jobs import Job
from .messages import TaskMessage, new_task_id, to_json, validate_priority, validate_queue
from .registry import due_at, time_limits, validate_retries
from .results import TaskStatus
from .store import NOW, TaskStore

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend
    from django.tasks.exceptions import TaskResultDoesNotExist as DjangoResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
else:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist as DjangoResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

CANCELLED = "redis_components.exceptions.TaskCancelled"
P = ParamSpec("P")
R = TypeVar("R")

OPTIONS = {
    # How many times a task that raised is run again (after the backoff); 0: never.
    "MAX_RETRIES": 0,
    # Seconds before the first retry (doubling, jittered); None: TASK_RETRY_BACKOFF.
    "RETRY_BACKOFF": None,
    # Seconds a task may run: past SOFT_TIME_LIMIT it gets SoftTimeLimitExceeded; past
    # TIME_LIMIT its worker process is stopped and the run counts as a failed attempt.
    "TIME_LIMIT": None,
    "SOFT_TIME_LIMIT": None,
}


if TYPE_CHECKING:
    _DjangoTask: TypeAlias = Task[..., Any]
else:
    _DjangoTask = Task  # not generic at run time on Django 6


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RedisTask(_DjangoTask):
    """Django's ``Task`` with this backend's options for one task (the backend's
    ``task_class``, so Django's ``@task`` makes it)::

        @task(queue_name="email", max_retries=3, retry_backoff=2.0, unique_for=60)
        def send_sold_email(seller_id, item_id, price, buyer_id): ...

    ``None`` (the default) takes the backend's ``OPTIONS`` (``MAX_RETRIES`` and so
    on); ``unique_for`` (seconds) has no backend-wide setting: an enqueue equal to one
    made within that time (same task, same arguments) enqueues nothing and returns the
    first one's result. Bad values raise ``InvalidTask`` when the task is made. They
    belong to the task's definition: a worker looks the task up by its module path,
    so ``using()`` keeps them and does not change them.
    """

    max_retries: int | None = None
    retry_backoff: float | None = None
    unique_for: float | None = None
    time_limit: float | None = None
    soft_time_limit: float | None = None


class RedisTaskBackend(BaseTaskBackend):
    """Django's Tasks backend on redis_components' queues and workers.

    Every feature Django defines is supported: ``run_after`` (the delayed set, moved by
    the workers on the Redis server's clock), priorities from -100 to 100 (higher
    first, FIFO among equals, in one atomic fetch), results from any process, and
    ``async def`` tasks (run on an event loop in the worker).
    """

    task_class = RedisTask
    # The tasks declared at start-up with a queue not in QUEUES: module path -> queue.
    _misqueued: dict[str, str]

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self._misqueued = {}

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    @property
    def max_retries(self) -> int:
        return int(self.options.get("MAX_RETRIES") or 0)

    @property
    def retry_backoff(self) -> float | None:
        value = self.options.get("RETRY_BACKOFF")
        return None if value is None else float(value)

    @property
    def time_limits(self) -> tuple[float | None, float | None]:
        """``(TIME_LIMIT, SOFT_TIME_LIMIT)`` from the options."""
        return time_limits(self.options.get("TIME_LIMIT"), self.options.get("SOFT_TIME_LIMIT"))

    def validate_task(self, task: Task[..., Any]) -> None:
        """Django's checks, then ours: a priority that is a whole number but not a bool,
        a valid queue name, ``run_after`` at most ten years from now (``InvalidTask``).

        A task declared at start-up (its module imported while the apps load) with a
        queue that is not in ``QUEUES`` is not refused then, which would stop the
        project with a traceback: the system checks report it (``redis_components.E016``),
        and enqueuing it raises ``InvalidTask``."""
        if self.queues and task.queue_name not in self.queues and not apps.ready:
            self._misqueued[task.module_path] = task.queue_name
            task = dataclasses.replace(task, queue_name=sorted(self.queues)[0])
        super().validate_task(task)
        try:
            _priority(task)
            validate_queue(task.queue_name, "queue_name")
            if task.run_after is not None:
                due_at(_aware(task.run_after), "run_after")
            if isinstance(task, RedisTask):
                _checked_options(task)
        except InvalidInput as error:
            raise InvalidTask(str(error)) from None

    def enqueue(
        self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[P, R]:
        """Send the task to its queue; its result is READY (``TypeError`` for arguments
        that JSON cannot carry, as with Django's own backends for the types they refuse:
        NaN and infinities, lone surrogates too; nothing is written then)."""
        self.validate_task(task)
        result: TaskResult[P, R] = TaskResult(
            task=task,
            id=new_task_id(),
            status=TaskResultStatus("READY"),
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,  # made JSON here: what JSON cannot carry raises TypeError
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        message = TaskMessage(
            result.id,
            task.module_path,
            task.queue_name,
            list(result.args),
            dict(result.kwargs),
            _priority(task),
            self.alias,
        )
        try:
            payload = message.encode()
        except TaskSerializationError as error:
            raise TypeError(str(error)) from None
        due = NOW if task.run_after is None else due_at(_aware(task.run_after), "run_after")
        unique_for = task.unique_for if isinstance(task, RedisTask) else None
        try:
            enqueued = TaskStore().enqueue(message, payload, due, unique_for=unique_for)
        except InvalidInput as error:  # a unique task's arguments that cannot be compared
            raise TypeError(str(error)) from None
        if enqueued.duplicate_of is not None:
            return self._duplicate(result, enqueued.duplicate_of)
        object.__setattr__(result, "enqueued_at", _django_time(enqueued.at_ms))
        task_enqueued.send(type(self), task_result=result)
        return result

    def _duplicate(self, result: TaskResult[P, R], task_id: str) -> TaskResult[P, R]:
        """The result of the equal task that made this enqueue of a unique task a duplicate
        (a READY one with its id, if its result expired before its unique window ended)."""
        try:
            found = cast("TaskResult[P, R]", self.get_result(task_id))  # of the same task
        except DjangoResultDoesNotExist:
            object.__setattr__(result, "id", task_id)
            return result
        object.__setattr__(found, "task", result.task)  # as given: using() may change it
        return found

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The result of a task this backend enqueued (``TaskResultDoesNotExist`` if the id
        is unknown, expired, or names one of our own ``@task``\\ s)."""
        try:
            record = results.get_result(result_id)
        except (TaskResultDoesNotExist, InvalidInput) as error:
            raise DjangoResultDoesNotExist(str(error)) from None
        if record.backend is None:
            raise DjangoResultDoesNotExist(
                f"task {result_id!r} was enqueued with redis_components' own @task; "
                "use redis_components.tasks.get_result()"
            )
        try:
            task = _find_task(record.task).using(
                priority=record.priority,
                queue_name=record.queue,
                run_after=_django_datetime(record.run_after),
                backend=record.backend,
            )
        except (ImportError, TypeError, InvalidTask, InvalidTaskBackend) as error:
            raise DjangoResultDoesNotExist(
                f"the task of result {result_id!r} cannot be found: {error}"
            ) from None
        return to_django(task, record)

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        return list(self._problems())

    def _problems(self) -> Iterable[CheckMessage]:
        where = f"TASKS[{self.alias!r}]"
        for path, queue in sorted(self._misqueued.items()):
            yield Error(
                f"Task {path} uses queue {queue!r}, which is not in {where}['QUEUES'] "
                f"({', '.join(sorted(self.queues))}).",
                hint="Add the queue to QUEUES, or give the task one of them (queue_name=).",
                obj=path,
                id="redis_components.E016",
            )
        for name in self.queues:
            try:
                validate_queue(name)
            except InvalidInput as error:
                yield Error(
                    f"{where}['QUEUES'] has an invalid queue name {str(name)[:100]!r}: {error}",
                    id="redis_components.E011",
                )
        if not isinstance(self.options, dict):
            yield Error(f"{where}['OPTIONS'] must be a dict.", id="redis_components.E012")
            return
        for name in self.options:
            if name not in OPTIONS:
                yield Error(
                    f"{where}['OPTIONS'] has an unknown key {name!r}.",
                    hint=f"Valid keys: {', '.join(OPTIONS)}.",
                    id="redis_components.E012",
                )
        retries = self.options.get("MAX_RETRIES", 0)
        try:
            validate_retries(retries)
        except InvalidInput:
            yield Error(
                f"{where}['OPTIONS']['MAX_RETRIES'] must be a non-negative integer, "
                f"not {retries!r}.",
                id="redis_components.E012",
            )
        backoff = self.options.get("RETRY_BACKOFF")
        try:
            if backoff is not None:
                keys.seconds(backoff, "RETRY_BACKOFF", positive=True)
            self.time_limits  # noqa: B018 - checks them
        except InvalidInput as error:
            yield Error(f"{where}['OPTIONS']: {error}", id="redis_components.E012")


def _checked_options(task: RedisTask) -> None:
    """:class:`InvalidInput` for a task's option that is not what it must be."""
    if task.max_retries is not None:
        validate_retries(task.max_retries)
    for name in ("retry_backoff", "unique_for"):
        value = getattr(task, name)
        if value is not None:
            keys.seconds(value, name, positive=True)
    time_limits(task.time_limit, task.soft_time_limit)


def _priority(task: Task[..., Any]) -> int:
    """The task's priority as the int it equals: Django allows any whole number (``5.0``,
    ``Decimal("5")``), our payload and workers take an int; a bool is refused."""
    priority = task.priority
    return validate_priority(priority if isinstance(priority, bool) else int(priority))


def _aware(when: datetime.datetime) -> datetime.datetime:
    """``run_after`` as an aware datetime (Django allows naive ones when ``USE_TZ`` is False)."""
    return timezone.make_aware(when) if timezone.is_naive(when) else when


def _find_task(path: str) -> Task[..., Any]:
    found = import_string(path)
    if not isinstance(found, Task):
        raise TypeError(f"{path!r} is not a Django task")
    return found


def _django_time(ms: int | None) -> datetime.datetime | None:
    return _django_datetime(keys.utc_from_ms(ms))


def _django_datetime(value: datetime.datetime | None) -> datetime.datetime | None:
    """An aware UTC time as Django's own backends give it: aware, or naive local time
    when ``USE_TZ`` is False."""
    if value is None or settings.USE_TZ:
        return value
    return timezone.make_naive(value)


def to_django(task: Task[..., Any], record: results.TaskResult) -> TaskResult[..., Any]:
    """Our result record as Django's ``TaskResult`` of ``task`` (Django has no CANCELLED:
    a cancelled task is FAILED, its last error a ``TaskCancelled``)."""
    errors = [
        TaskError(exception_class_path=error.exception_class_path, traceback=error.traceback)
        for error in record.errors
    ]
    status = record.status.value
    if record.status is TaskStatus.CANCELLED:
        status = "FAILED"
        errors.append(TaskError(exception_class_path=CANCELLED, traceback="it was cancelled"))
    result: TaskResult[..., Any] = TaskResult(
        task=task,
        id=record.id,
        status=TaskResultStatus(status),
        enqueued_at=_django_datetime(record.enqueued_at),
        started_at=_django_datetime(record.started_at),
        finished_at=_django_datetime(record.finished_at),
        last_attempted_at=_django_datetime(record.last_attempted_at),
        args=record.args,
        kwargs=record.kwargs,
        backend=task.backend,
        errors=errors,
        worker_ids=record.worker_ids,
    )
    if record.status is TaskStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", record._return_value)
    return result


# -- in the worker ------------------------------------------------------------------


def django_job(message: TaskMessage, worker_id: str, now_ms: int) -> Job | str:
    """What runs a message enqueued through Django's Tasks framework, or why nothing can."""
    try:
        runnable = _runnable(message.task, message.priority, message.queue, message.backend or "")
    except _CannotRun as reason:
        return str(reason)
    return DjangoJob(runnable, message, worker_id, now_ms)


class _CannotRun(Exception):
    """Why a message's Django task cannot run here."""


@dataclasses.dataclass(frozen=True)
class _Runnable:
    """A Django task as a worker runs it: the task, its backend's class (the signals'
    sender) and its options, those of the task first, then the backend's."""

    task: Task[..., Any]
    sender: type[RedisTaskBackend]
    max_retries: int
    retry_backoff: float | None
    time_limit: float | None
    soft_time_limit: float | None


@functools.lru_cache(maxsize=1024)
def _runnable(path: str, priority: int, queue: str, alias: str) -> _Runnable:
    """The task at ``path`` as enqueued, with its options, found and validated once (a
    task is immutable; the cache is emptied when ``TASKS`` changes), or
    :class:`_CannotRun` (not cached)."""
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend:
        raise _CannotRun(
            f"no Tasks backend is configured as {alias!r} in settings.TASKS here"
        ) from None
    if not isinstance(backend, RedisTaskBackend):
        raise _CannotRun(f"the Tasks backend {alias!r} is not a RedisTaskBackend here")
    try:
        task = _find_task(path).using(priority=priority, queue_name=queue, backend=alias)
    except (ImportError, TypeError, InvalidTask) as error:
        raise _CannotRun(f"no Django task {path!r} can run here: {error}") from None

    def option(name: str, default: Any) -> Any:
        value = getattr(task, name, None)  # a plain Django Task has none of ours
        return default if value is None else value

    hard, soft = backend.time_limits
    return _Runnable(
        task,
        type(backend),
        max_retries=option("max_retries", backend.max_retries),
        retry_backoff=option("retry_backoff", backend.retry_backoff),
        time_limit=option("time_limit", hard),
        soft_time_limit=option("soft_time_limit", soft),
    )


def _forget_tasks(*, setting: str, **kwargs: Any) -> None:
    if setting == "TASKS":
        _runnable.cache_clear()


setting_changed.connect(_forget_tasks)


class DjangoJob(Job):
    """One run of a Django task: its context, Django's signals, Django's JSON rules."""

    def __init__(
        self, runnable: _Runnable, message: TaskMessage, worker_id: str, now_ms: int
    ) -> None:
        super().__init__(
            runnable.task.func,
            message,
            max_retries=runnable.max_retries,
            retry_backoff=runnable.retry_backoff,
            time_limit=runnable.time_limit,
            soft_time_limit=runnable.soft_time_limit,
        )
        self.task = runnable.task
        self.sender = runnable.sender
        self.result = self._running(worker_id, now_ms)

    def _running(self, worker_id: str, now_ms: int) -> TaskResult[..., Any]:
        message = self.message
        if not message.first_attempt:
            # Not known to be a first attempt: the attempts so far, and this one (written
            # when it was taken), in one round trip.
            record = results.read_results([message.id])[0]
            if record is not None:
                return to_django(self.task, record)
        # A first attempt: its result is what the payload and the take say, as Redis
        # holds it now (enqueued, started and last attempted at the take, by this worker).
        started = _django_time(now_ms)
        return TaskResult(
            task=self.task,
            id=message.id,
            status=TaskResultStatus("RUNNING"),
            enqueued_at=_django_time(message.enqueued_at),
            started_at=started,
            finished_at=None,
            last_attempted_at=started,
            args=self.message.args,
            kwargs=self.message.kwargs,
            backend=self.task.backend,
            errors=[],
            worker_ids=[worker_id],
        )

    def call(self) -> Any:
        task_started.send(sender=self.sender, task_result=self.result)
        args, kwargs = self.message.args, self.message.kwargs
        if self.task.takes_context:
            return self.task.call(TaskContext(task_result=self.result), *args, **kwargs)
        return self.task.call(*args, **kwargs)

    def encode(self, value: Any) -> str:
        value = normalize_json(value)  # TypeError for what JSON cannot carry, as in Django
        object.__setattr__(self.result, "_return_value", value)
        return to_json(value, f"the return value of task {self.message.task!r}")

    def finished(self, status: TaskStatus, error: BaseException | None) -> None:
        object.__setattr__(self.result, "status", TaskResultStatus(status.value))
        object.__setattr__(self.result, "finished_at", timezone.now())
        if error is not None:
            class_path, trace = results.describe(error)
            self.result.errors.append(TaskError(exception_class_path=class_path, traceback=trace))
        task_finished.send(sender=self.sender, task_result=self.result)
