"""Django's Tasks backend on our queues (:class:`RedisTaskBackend`), and our
:func:`redis_task` decorator: both make a :class:`RedisTask` that the same workers run.

A ``@redis_task`` is found by its ``name=``, which travels in the queue; Django's ``@task``
on this backend by its module path. Django has no CANCELLED status: a cancelled task's
result is FAILED, its last error a :class:`~redis_components.exceptions.TaskCancelled`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import inspect
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Literal, Protocol, TypedDict, cast, overload

import redis
from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error
from django.utils import timezone
from django.utils.module_loading import import_string

from .. import keys, tracing
from ..exceptions import (
    InvalidInput,
    QueueFull,
    TaskError,
    TaskResultDoesNotExist,
    TaskSerializationError,
)
from ..keys import django_datetime, django_time
from ..tracing import meters
from . import results
from .definition import (
    OWN_BACKEND,
    TASK_OPTIONS,
    Backoff,
    P,
    Prepared,
    QueueBackend,
    R,
    RedisTask,
    as_enqueued,
    bind_arguments,
    check_retries,
    checked_options,
    find_django_task,
    optional_seconds,
    own_backend,
    task_registry,
)
from .framework import (
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultStatus,
    task_enqueued,
)
from .framework import TaskResultDoesNotExist as DjangoResultDoesNotExist
from .limits import Limit
from .limits import fill as fill_limits
from .messages import (
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    MAX_TASK_NAME,
    Barrier,
    PlannedStep,
    TaskMessage,
    metadata_json,
    random_id,
    validate_priority,
    validate_queue,
)
from .results import RedisTaskContext, RedisTaskResult, to_django
from .store import NOW, Due, TaskStore, due_at, new_task_id, partition_id, partitions
from .workflow_records import Workflow

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "InvalidTask",
    "RedisTask",
    "RedisTaskBackend",
    "ResultDoesNotExist",
    "Task",
    "TaskResult",
    "TaskResultStatus",
    "get_result",
    "redis_task",
]

logger = logging.getLogger("redis_components.tasks")

# The OPTIONS of a RedisTaskBackend and their defaults (see the Task queues page).
OPTIONS = {
    "MAX_RETRIES": 0,
    "RETRY_BACKOFF": None,
    "MAX_ATTEMPTS": None,
    "BACKOFF": None,
    "TIME_LIMIT": None,
    "SOFT_TIME_LIMIT": None,
}
# The options Django's proposal (django/new-features#142) sets beside BACKEND, not in
# OPTIONS: read from either place.
TOP_LEVEL = ("MAX_ATTEMPTS", "BACKOFF")


class ResultDoesNotExist(TaskResultDoesNotExist, DjangoResultDoesNotExist):
    """No result is kept under this id: ours and Django's ``TaskResultDoesNotExist``."""


class RedisTaskBackend(QueueBackend):
    """Django's Tasks backend on redis_components' queues and workers: every feature
    Django defines (``run_after`` by the Redis server's clock, priorities, results from
    any process, ``async def`` tasks)."""

    # What Django's @task makes with this backend (django-stubs types that @task's task
    # as Task[P, R] whatever the backend: it cannot know which one the alias names).
    task_class: type[RedisTask[..., Any]] = RedisTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True
    # Django's proposed task metadata (django/new-features#141): using(metadata=...),
    # context.metadata, context.save_metadata(), result.metadata.
    supports_metadata = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # (Set in both places, they are reported by the checks; OPTIONS' value holds.)
        self._twice: list[str] = []
        if isinstance(self.options, dict):
            self._twice = [name for name in TOP_LEVEL if name in params and name in self.options]
            self.options = {
                **{name: params[name] for name in TOP_LEVEL if name in params},
                **self.options,
            }
        # The tasks declared at start-up with a queue not in QUEUES: module path -> queue.
        self._misqueued: dict[str, str] = {}

    def validate_task(self, task: Task[..., Any]) -> None:
        """Django's checks, then ours (``InvalidTask``). A task declared at start-up with a
        queue not in ``QUEUES`` is not refused then (the project would not start): the
        system checks report it (``redis_components.E016``), and its enqueue raises."""
        if self.queues and task.queue_name not in self.queues and not apps.ready:
            self._misqueued[task.module_path] = task.queue_name
            task = dataclasses.replace(task, queue_name=sorted(self.queues)[0])
        try:
            self.due(task)  # (first: Django's check fails on a timedelta run_after)
            if isinstance(task, RedisTask) and task.registered_name is not None:
                # Found by its name: it may be defined anywhere (Django's checks want a
                # module-level function).
                first = [*inspect.signature(task.func).parameters][:1] if task.takes_context else []
                if task.takes_context and first != ["context"]:
                    raise InvalidTask(
                        "Task takes context but does not have a first argument of 'context'."
                    )
            else:
                super().validate_task(task)
                if isinstance(task, RedisTask):
                    _declared[task.module_path] = task
            _priority(task)
            validate_queue(task.queue_name, "queue_name")
            if isinstance(task, RedisTask):
                checked_options(task.func, task.name, **{o: getattr(task, o) for o in TASK_OPTIONS})
        except InvalidInput as error:
            raise InvalidTask(str(error)) from None

    def enqueue(
        self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[P, R]:
        """Send the task to its queue; its READY result (:class:`TaskSerializationError`, a
        ``TypeError``, for arguments JSON cannot carry; nothing is written then)."""
        self.validate_task(task)
        return cast("TaskResult[P, R]", self.send(self.prepare(task, args, kwargs), self.due(task)))

    def prepare(
        self,
        task: Task[..., Any],
        args: Iterable[Any],
        kwargs: dict[str, Any],
        *,
        piped: bool = False,
        step: bool = False,
    ) -> Prepared:
        """The READY result, message and payload of an enqueue of ``task`` (validated):
        :class:`InvalidTaskArguments` for arguments its function cannot take (``piped``:
        after a step's input), :class:`TaskSerializationError` for what JSON cannot carry.
        With tracing on, its ``send`` span starts here, its context in the message's
        metadata (a workflow's ``step`` carries the context current here instead)."""
        registered = task.registered_name if isinstance(task, RedisTask) else None
        name = registered or task.module_path
        args = list(args)
        bind_arguments(task, args, kwargs, piped=piped)
        metadata = getattr(task, "metadata", None) or {}
        if metadata:  # InvalidInput (TASK_METADATA_MAX_BYTES may be lower now)
            metadata_json(metadata)
        try:
            result = RedisTaskResult(
                task=task,
                id=new_task_id(task.queue_name),
                status=TaskResultStatus("READY"),
                enqueued_at=None,
                started_at=None,
                finished_at=None,
                last_attempted_at=None,
                args=args,  # made JSON here: what JSON cannot carry raises TypeError
                kwargs=kwargs,
                backend=task.backend,
                errors=[],
                worker_ids=[],
                metadata=dict(metadata),
            )
        except RecursionError:
            raise TaskSerializationError(
                f"the arguments of task {name!r} are nested too deeply for JSON"
            ) from None
        except (TypeError, ValueError) as error:  # Django's rules, as its backends apply them
            raise TaskSerializationError(
                f"the arguments of task {name!r} cannot be JSON: {error}"
            ) from None
        message = TaskMessage(
            id=result.id,
            task=name,
            queue=task.queue_name,
            args=list(result.args),
            kwargs=dict(result.kwargs),
            priority=_priority(task),
            backend=None if registered else task.backend,
            metadata=metadata or None,
            limits=fill_limits(
                task.limits, name, task.func, args, kwargs, task.takes_context + piped
            )
            if isinstance(task, RedisTask)
            else None,
        )
        # (A step's piped input is not known here: it goes to a random partition.)
        if not piped and isinstance(task, RedisTask) and partitions(message.queue) > 1:
            by = task.partition_by(message.limits, args, kwargs)
            if by is not None or task.unique_for:  # (else its random id picks)
                try:
                    object.__setattr__(result, "id", partition_id(message, by))
                except InvalidInput as error:  # as send() says it
                    raise TaskSerializationError(str(error)) from None
                message = dataclasses.replace(message, id=result.id)
        # (Last: nothing after it raises, so that a send span it starts is always sent.)
        traced, sending = tracing.carried(metadata, message, step=step)
        if traced is not metadata:  # tracing is on: its context joins the metadata
            object.__setattr__(result, "metadata", dict(traced))
            message = dataclasses.replace(message, metadata=traced)
        return Prepared(result, message, message.encode(), sending)

    def due(self, task: Task[..., Any]) -> Due:
        return NOW if task.run_after is None else due_at(_aware(task.run_after), "run_after")

    def send(self, prepared: Prepared, due: Due) -> TaskResult[..., Any]:
        """Write a prepared task to its queue; its result (a unique task's first one's)."""
        sending = prepared.sending
        try:
            with (
                meters.sending(prepared.message.queue),
                sending.sent() if sending else contextlib.nullcontext(),
            ):
                enqueued = TaskStore().enqueue(
                    prepared.message, prepared.payload, due, unique_for=_unique_for(prepared)
                )
        except InvalidInput as error:  # a unique task's arguments that cannot be compared
            raise TaskSerializationError(str(error)) from None
        return self._sent(prepared, due, enqueued)

    def send_many(self, batch: Sequence[tuple[Prepared, Due]]) -> list[TaskResult[..., Any]]:
        """:meth:`send` each of ``batch``, in one script call per home (and per
        ``ENQUEUE_BATCH`` tasks: see ``TaskStore.enqueue_many``), each measured
        (``OTEL_METRICS``) and traced as sent by the call that wrote it."""
        items = [(p.message, p.payload, due, _unique_for(p)) for p, due in batch]
        queues = collections.Counter(p.message.queue for p, _ in batch)
        try:
            with contextlib.ExitStack() as sends:
                for queue, count in queues.items():  # (one operation per queue, of count)
                    sends.enter_context(meters.sending(queue, count))
                for prepared, _ in batch:
                    if prepared.sending:
                        sends.enter_context(prepared.sending.sent())
                written = TaskStore().enqueue_many(items)
        except InvalidInput as error:
            raise TaskSerializationError(str(error)) from None
        except QueueFull as full:  # (what earlier calls wrote stays: their results)
            full.results = [self._sent(*batch[n], done) for n, done in sorted(full.written.items())]
            raise
        return [self._sent(p, due, done) for (p, due), done in zip(batch, written, strict=True)]

    def _sent(self, prepared: Prepared, due: Due, enqueued: Any) -> TaskResult[..., Any]:
        """The result of a task written: a unique task's first one's, for a duplicate."""
        result = prepared.result
        task = result.task
        if enqueued.duplicate_of is not None:
            return self._duplicate(result, enqueued.duplicate_of)
        object.__setattr__(result, "enqueued_at", django_time(enqueued.at_ms))
        if due.after_ms is not None:  # by the server's clock: its run_after is known now
            run_after = django_time(due.run_after_ms(enqueued.at_ms))
            object.__setattr__(result, "task", dataclasses.replace(task, run_after=run_after))
        task_enqueued.send(type(self), task_result=result)
        return result

    def write_workflow(
        self, steps: list[PlannedStep], barriers: list[Barrier], result: str
    ) -> Workflow:
        workflow_id = random_id()
        tracing.fan_ins(steps)  # (with tracing on, a fan-in's span links to its parents)
        tasks = TaskStore()
        try:
            created = tasks.create_workflow(workflow_id, steps, barriers, result)
        except (redis.ConnectionError, redis.TimeoutError):
            # The reply was lost: the script may have run. Its id is ours (chosen before),
            # and a read on the server comes after the script: the workflow if it exists.
            if tasks.workflow_summaries([workflow_id]) != [None]:
                return Workflow(workflow_id)
            raise
        if created is None:  # pragma: no cover
            raise RuntimeError(f"workflow id {workflow_id} is taken: 128 random bits collided")
        return Workflow(workflow_id)

    def _duplicate(self, result: TaskResult[P, R], task_id: str) -> TaskResult[P, R]:
        """The result of the equal task that made this enqueue of a unique task a duplicate
        (a READY one with its id, if that result expired)."""
        try:
            found = cast("TaskResult[P, R]", self.get_result(task_id))  # of the same task
        except DjangoResultDoesNotExist:
            object.__setattr__(result, "id", task_id)
            return result
        object.__setattr__(found, "task", result.task)  # as given: using() may change it
        return found

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The result of any task of ours (:class:`ResultDoesNotExist` if the id is unknown
        or expired, or its task cannot be found in this process)."""
        try:
            record = results.get_record(result_id)
        except (TaskResultDoesNotExist, InvalidInput) as error:
            raise ResultDoesNotExist(str(error)) from None
        return to_django(task_of(record), record)

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
        for name in self._twice:
            yield Error(
                f"{where} sets {name} twice, beside BACKEND and in OPTIONS: keep one.",
                id="redis_components.E012",
            )
        for name, least in (("MAX_RETRIES", 0), ("MAX_ATTEMPTS", 1)):
            value = self.options.get(name)
            try:
                if value is not None:
                    keys.integer(value, name, minimum=least)
            except InvalidInput:
                yield Error(
                    f"{where}['OPTIONS']['{name}'] must be an integer of at least {least}, "
                    f"not {value!r}.",
                    id="redis_components.E012",
                )
        try:
            check_retries(self.options, upper=True)
            if isinstance(self.backoff, str) and not callable(import_string(self.backoff)):
                raise ImportError(f"{self.backoff} is not callable")
        except ImportError as error:
            yield Error(
                f"{where}: BACKOFF {self.backoff!r} cannot be imported: {error}",
                id="redis_components.E012",
            )
        except InvalidInput as error:
            yield Error(f"{where}['OPTIONS']: {error}", id="redis_components.E012")
        try:
            optional_seconds(self.options.get("RETRY_BACKOFF"), "RETRY_BACKOFF")
            self.time_limits  # noqa: B018 - checks them
        except InvalidInput as error:
            yield Error(f"{where}['OPTIONS']: {error}", id="redis_components.E012")


def get_result(task_id: str) -> TaskResult[..., Any]:
    """Django's ``TaskResult`` of any task of ours (:class:`ResultDoesNotExist` if none)."""
    return own_backend().get_result(task_id)


def task_of(record: results.TaskRecord) -> Task[..., Any]:
    """The task of a result record, as enqueued (:class:`ResultDoesNotExist` if not here)."""
    if record.backend is None:
        found = task_registry.find(record.task)
        if found is None:
            raise ResultDoesNotExist(
                f"the task {record.task!r} of result {record.id!r} is not registered here"
            )
        return as_enqueued(found, record.priority, record.queue, django_datetime(record.run_after))
    try:
        return find_django_task(record.task).using(
            priority=record.priority,
            queue_name=record.queue,
            run_after=django_datetime(record.run_after),
            backend=record.backend,
        )
    except (ImportError, TypeError, InvalidTask, InvalidTaskBackend) as error:
        raise ResultDoesNotExist(
            f"the task of result {record.id!r} cannot be found: {error}"
        ) from None


class TaskDecorator(Protocol):
    """What ``@redis_task(...)`` gives: a :class:`RedisTask` typed by its function."""

    @overload
    def __call__(self, func: Callable[P, Coroutine[Any, Any, R]], /) -> RedisTask[P, R]: ...
    @overload
    def __call__(self, func: Callable[P, R], /) -> RedisTask[P, R]: ...


class ContextTaskDecorator(Protocol):
    """What ``@redis_task(..., takes_context=True)`` gives: past the ``TaskContext``."""

    @overload
    def __call__(
        self, func: Callable[Concatenate[RedisTaskContext, P], Coroutine[Any, Any, R]], /
    ) -> RedisTask[P, R]: ...
    @overload
    def __call__(
        self, func: Callable[Concatenate[RedisTaskContext, P], R], /
    ) -> RedisTask[P, R]: ...


class TaskOptions(TypedDict, total=False):
    """The options of :func:`redis_task` (but ``takes_context``), as its overloads type them."""

    name: str | None
    queue: str
    priority: int
    max_retries: int | None
    retry_backoff: float | None
    max_attempts: int | None
    backoff: Backoff | str | None
    unique_for: float | None
    time_limit: float | None
    soft_time_limit: float | None
    limits: Sequence[Limit]
    partition_key: str | None


@overload
def redis_task(func: Callable[P, Coroutine[Any, Any, R]], /) -> RedisTask[P, R]: ...


@overload
def redis_task(func: Callable[P, R], /) -> RedisTask[P, R]: ...


@overload
def redis_task(
    *, takes_context: Literal[True], **options: Unpack[TaskOptions]
) -> ContextTaskDecorator: ...


@overload
def redis_task(
    *, takes_context: Literal[False] = False, **options: Unpack[TaskOptions]
) -> TaskDecorator: ...


@overload
def redis_task(
    *, takes_context: bool, **options: Unpack[TaskOptions]
) -> Callable[[Callable[..., Any]], RedisTask[..., Any]]: ...  # known at run time only


def redis_task(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = DEFAULT_PRIORITY,
    max_retries: int | None = None,
    retry_backoff: float | None = None,
    max_attempts: int | None = None,
    backoff: Backoff | str | None = None,
    unique_for: float | None = None,
    time_limit: float | None = None,
    soft_time_limit: float | None = None,
    takes_context: bool = False,
    limits: Sequence[Limit] = (),
    partition_key: str | None = None,
) -> RedisTask[Any, Any] | Callable[[Callable[..., Any]], RedisTask[Any, Any]]:
    """Make a function a task that workers run; use as ``@redis_task`` or ``@redis_task(...)``.

    It is Django's ``Task`` (a :class:`RedisTask`), and needs no ``TASKS`` setting.
    ``name`` (default ``"<module>.<function>"``) travels in the queue: renaming a
    function orphans its queued tasks unless ``name`` keeps the old one. ``priority``
    (-100 to 100): higher runs first within its queue. Without ``max_attempts`` (Django's
    proposed name) or ``max_retries``, a failing task is retried 3 times. The other
    options mean what they mean for Django's ``@task`` on :class:`RedisTaskBackend` (see
    the Task queues page). Past its ``time_limit`` a run's thread is left behind, its
    concurrency permits held until its code ends. Bad values raise
    :class:`~redis_components.exceptions.InvalidInput`.
    """

    def register(function: Callable[..., Any]) -> RedisTask[Any, Any]:
        task_name = keys.validate_name(
            name or f"{function.__module__}.{function.__qualname__}", "name", MAX_TASK_NAME
        )
        options = checked_options(
            function,
            task_name,
            # (3 retries when neither is given: a task of ours retries unless told not to)
            max_retries=3 if max_retries is None and max_attempts is None else max_retries,
            retry_backoff=retry_backoff,
            max_attempts=max_attempts,
            backoff=backoff,
            unique_for=unique_for,
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
            limits=limits,
            partition_key=partition_key,
        )
        try:
            new: RedisTask[Any, Any] = RedisTask(
                func=function,
                priority=validate_priority(priority),
                queue_name=validate_queue(queue),
                backend=OWN_BACKEND,
                run_after=None,  # Django 6.0's Task has no default for it
                takes_context=takes_context,
                registered_name=task_name,
                **options,
            )
        except InvalidTask as error:  # Django's own checks (a nested function, ...)
            raise InvalidInput("task", str(error)) from None
        existing = task_registry.find(task_name)
        if existing is not None and _origin(existing.func) != _origin(function):
            raise TaskError(
                f"two tasks are named {task_name!r}: {_origin(existing.func)} and "
                f"{_origin(function)}; give one of them another name= ."
            )
        task_registry.add(task_name, new)
        # A worker imports only each app's tasks module: it may never know a task
        # registered after start-up elsewhere.
        module = function.__module__
        if apps.ready and module.rpartition(".")[2] != "tasks":
            logger.warning(
                "Task %r was registered after start-up, when its module %s was imported: "
                "workers import each installed app's tasks module at start-up, so they will "
                "not know this task unless that module is imported from there",
                task_name,
                module,
            )
        return new

    if func is not None:
        return register(func)
    return register


def _origin(func: Callable[..., Any]) -> str:
    return f"{func.__module__}.{getattr(func, '__qualname__', func)}"


# Django's @task's tasks on a backend of ours, by module path, as validate_task sees them.
_declared: dict[str, RedisTask[..., Any]] = {}


def declared_tasks() -> dict[str, RedisTask[..., Any]]:
    """The tasks this process knows, by the name their limits are keyed by: ours by
    name, and Django's ``@task`` s of our backend declared so far by module path."""
    return {**_declared, **task_registry.all()}


def queues_in_use() -> set[str]:
    """The queues of every registered task and of every Django Tasks backend of ours (one
    whose ``QUEUES`` is empty adds only ``default``); invalid names are left out."""
    names = {registered.queue_name for registered in task_registry.all().values()}
    for queues in django_backends().values():
        for name in queues or [DEFAULT_QUEUE]:
            with contextlib.suppress(ValueError):
                names.add(validate_queue(name))
    return names


def django_backends() -> dict[str, list[Any]]:
    """The ``QUEUES`` of each of our backends in ``settings.TASKS`` (``[]``: any), by alias."""
    backends = getattr(settings, "TASKS", {})
    found = {}
    for alias, params in backends.items() if isinstance(backends, dict) else ():
        if isinstance(params, dict) and _is_ours(params.get("BACKEND")):
            queues = params.get("QUEUES") or []
            found[str(alias)] = list(queues) if isinstance(queues, (list, tuple)) else []
    return found


def _is_ours(path: object) -> bool:
    if not isinstance(path, str):
        return False
    try:
        found = import_string(path)
    except ImportError:
        return False
    return isinstance(found, type) and issubclass(found, RedisTaskBackend)


def _unique_for(prepared: Prepared) -> float | None:
    task = prepared.result.task
    return task.unique_for if isinstance(task, RedisTask) else None


def _priority(task: Task[..., Any]) -> int:
    """The task's priority as the int it equals: Django allows any whole number (``5.0``,
    ``Decimal("5")``), our payload and workers take an int; a bool is refused."""
    priority = task.priority
    return validate_priority(priority if isinstance(priority, bool) else int(priority))


def _aware(when: object) -> object:
    """``run_after`` as an aware datetime (Django allows naive ones when ``USE_TZ`` is
    False); anything else as it is, for :func:`due_at` to refuse."""
    if isinstance(when, datetime.datetime) and timezone.is_naive(when):
        return timezone.make_aware(when)
    return when
