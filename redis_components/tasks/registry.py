"""``@task``: functions registered under a name that workers run, and what runs them.

::

    @task(queue="email", max_retries=3)
    def send_sold_email(seller_id, item_id, price, buyer_id): ...

    result = send_sold_email.enqueue(7, "ItemA", 35, 4)  # runs in a worker (rc_worker)
    send_sold_email.enqueue_in(30, 7, "ItemA", 35, 4)    # not before 30 s from now
    result.refresh(); result.status                      # READY, RUNNING, SUCCESSFUL, FAILED

A worker finds the function by its name in the registry that ``@task`` fills when the
task's module is imported (every installed app's ``tasks`` module is, at start-up).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime
import logging
import math
import random
from collections.abc import Callable, Iterator
from typing import Any, Generic, ParamSpec, TypeVar, overload

from django.db import transaction
from django.utils.module_loading import import_string

from .. import keys
from ..conf import conf
from ..exceptions import (
    InvalidInput,
    LockNotAcquired,
    TaskError,
    TaskNotRegistered,
    TaskResultDoesNotExist,
)
from ..guard import Busy
from .messages import (
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    MAX_TASK_NAME,
    TaskMessage,
    new_message,
    validate_priority,
    validate_queue,
)
from .results import TaskResult, TaskStatus, get_result
from .store import NOW, Due, TaskStore

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("redis_components.tasks")


class Retry(Exception):
    """Raise from a task to run it again after ``delay`` seconds (default: the backoff).

    A retry counts against the task's ``max_retries``; past it, the task is
    dead-lettered with ``reason`` as its error.
    """

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        self.delay = None if delay is None else keys.seconds(delay, "delay")
        self.reason = reason
        super().__init__(reason or "retry requested")


T = TypeVar("T")


class Registry(Generic[T]):
    """Things registered by name as their modules are imported (tasks, schedules).

    One object per kind; :meth:`isolated` empties it for a while (in a test).
    """

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


task_registry: Registry[Task[Any, Any]] = Registry()


class Task(Generic[P, R]):
    """A function registered under a name that workers can run; made by :func:`task`.

    Calling it runs the function inline. :meth:`enqueue` and its variants send it to
    a worker instead; they return its :class:`~redis_components.tasks.results.TaskResult`
    (READY), whose ``id`` names the task and whose ``refresh()`` follows it.
    """

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str,
        queue: str,
        priority: int,
        max_retries: int,
        retry_backoff: float | None,
        unique_for: float | None = None,
        time_limit: float | None = None,
        soft_time_limit: float | None = None,
    ) -> None:
        self.func = func
        self.name = keys.validate_name(name, "name", MAX_TASK_NAME)
        self.queue = validate_queue(queue)
        self.priority = validate_priority(priority)
        self.unique_for = _optional_seconds(unique_for, "unique_for")
        self.time_limit, self.soft_time_limit = time_limits(time_limit, soft_time_limit)
        self.max_retries = validate_retries(max_retries)
        self.retry_backoff = (
            None if retry_backoff is None else keys.seconds(retry_backoff, "retry_backoff")
        )
        self.__doc__ = func.__doc__
        self.__name__ = getattr(func, "__name__", name)
        self.__module__ = func.__module__
        self.__wrapped__ = func

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult:
        """Send the task to its queue; a worker runs it as soon as one is free."""
        return self._send(self._message(args, kwargs), NOW)

    def enqueue_in(self, delay: float, /, *args: P.args, **kwargs: P.kwargs) -> TaskResult:
        """Send the task to run ``delay`` seconds from now (by the Redis server's clock)."""
        milliseconds = math.ceil(keys.seconds(delay, "seconds") * 1000)
        return self._send(self._message(args, kwargs), Due(after_ms=milliseconds))

    def enqueue_at(
        self, when: datetime.datetime, /, *args: P.args, **kwargs: P.kwargs
    ) -> TaskResult:
        """Send the task to run at ``when``, an aware datetime (compared to the server's clock)."""
        return self._send(self._message(args, kwargs), due_at(when))

    def enqueue_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult:
        """Enqueue when the current database transaction commits; never if it rolls back.

        The arguments are encoded now (so a bad argument raises here), and the result
        is returned at once (it can be read once the transaction has committed).
        Outside a transaction the task is enqueued immediately, and its errors raise as
        ``enqueue``'s do. Inside one, an enqueue that fails when its turn comes
        (``QueueFull``, Redis down, ``TaskNotDurable``) is logged as an error with the
        task id, not raised: the transaction has committed by then.
        """
        message, payload = self._message(args, kwargs)
        if not transaction.get_connection().in_atomic_block:
            return self._send((message, payload), NOW)

        def send() -> None:
            try:
                self._send((message, payload), NOW)
            except Exception:
                logger.exception(
                    "Task %s (%s) was not enqueued after its transaction committed",
                    message.id,
                    self.name,
                )

        transaction.on_commit(send)
        return new_result(message, None, None)

    def _message(self, args: Any, kwargs: Any) -> tuple[TaskMessage, str]:
        return new_message(self.name, self.queue, args, kwargs, priority=self.priority)

    def _send(self, message: tuple[TaskMessage, str], due: Due) -> TaskResult:
        enqueued = TaskStore().enqueue(*message, due, unique_for=self.unique_for)
        if enqueued.duplicate_of is not None:
            return _existing(enqueued.duplicate_of, message[0])
        return new_result(message[0], enqueued.at_ms, due.run_after_ms(enqueued.at_ms))


EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
MAX_DELAY = datetime.timedelta(seconds=keys.MAX_SECONDS)


def _existing(task_id: str, message: TaskMessage) -> TaskResult:
    """The result of the equal task that made an enqueue of ``message`` a duplicate."""
    try:
        return get_result(task_id)
    except TaskResultDoesNotExist:  # its result expired before its unique window ended
        return dataclasses.replace(new_result(message, None, None), id=task_id)


def _optional_seconds(value: float | None, field: str) -> float | None:
    return None if value is None else keys.seconds(value, field, positive=True)


def validate_retries(max_retries: object) -> int:
    """``max_retries`` if it is a non-negative integer (not a bool), else :class:`InvalidInput`."""
    return keys.integer(max_retries, "max_retries", minimum=0)


def time_limits(hard: object, soft: object) -> tuple[float | None, float | None]:
    """A task's ``time_limit`` and ``soft_time_limit`` (seconds, or None), checked."""
    hard_s = _optional_seconds(hard, "time_limit")  # type: ignore[arg-type]
    soft_s = _optional_seconds(soft, "soft_time_limit")  # type: ignore[arg-type]
    if hard_s is not None and soft_s is not None and soft_s >= hard_s:
        raise InvalidInput(
            "soft_time_limit", f"must be shorter than time_limit ({soft_s:g} >= {hard_s:g} s)"
        )
    return hard_s, soft_s


def due_at(when: object, field: str = "when") -> Due:
    """When a task is due at ``when`` (an aware datetime at most ten years from now, the
    bound of every duration), or :class:`InvalidInput` naming ``field``."""
    if not isinstance(when, datetime.datetime):
        raise InvalidInput(field, f"must be a datetime, not {type(when).__name__}")
    if when.utcoffset() is None:
        raise InvalidInput(field, "must be an aware datetime (with a time zone)")
    # By this machine's clock: the server's is read only by the script that writes, and
    # a bound of ten years does not need it. Beyond it, times may not fit a datetime.
    if when - datetime.datetime.now(datetime.timezone.utc) > MAX_DELAY:
        raise InvalidInput(
            field,
            f"must be at most {keys.MAX_SECONDS:,} seconds (ten years) from now, "
            f"not {when.isoformat()}",
        )
    # Whole milliseconds, rounded up (in integers: floats can round), so that a task
    # never runs before its time.
    micros = (when - EPOCH) // datetime.timedelta(microseconds=1)
    return Due(at_ms=-(-micros // 1000))


def new_result(
    message: TaskMessage, enqueued_ms: int | None, run_after_ms: int | None
) -> TaskResult:
    """The READY result of a task just enqueued (what Redis holds for it now)."""
    return TaskResult(
        id=message.id,
        task=message.task,
        queue=message.queue,
        priority=message.priority,
        args=message.args,
        kwargs=message.kwargs,
        backend=message.backend,
        status=TaskStatus.READY,
        enqueued_at=keys.utc_from_ms(enqueued_ms),
        run_after=keys.utc_from_ms(run_after_ms),
        started_at=None,
        last_attempted_at=None,
        finished_at=None,
        worker_ids=[],
        errors=[],
    )


@overload
def task(func: Callable[P, R], /) -> Task[P, R]: ...


@overload
def task(
    *,
    name: str | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = DEFAULT_PRIORITY,
    max_retries: int = 3,
    retry_backoff: float | None = None,
    unique_for: float | None = None,
    time_limit: float | None = None,
    soft_time_limit: float | None = None,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...


def task(
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = DEFAULT_PRIORITY,
    max_retries: int = 3,
    retry_backoff: float | None = None,
    unique_for: float | None = None,
    time_limit: float | None = None,
    soft_time_limit: float | None = None,
) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
    """Register a function as a task that workers run; use as ``@task`` or ``@task(...)``.

    ``name`` defaults to ``"<module>.<function>"`` and is what travels in the queue, so
    renaming a function orphans its queued tasks unless ``name`` keeps the old one.
    ``queue``: where :meth:`Task.enqueue` sends it; ``priority`` (-100 to 100): within
    its queue, a task of higher priority runs first, equal ones in the order enqueued.
    An exception in the task retries it up to ``max_retries`` times, after
    ``retry_backoff`` (default the ``TASK_RETRY_BACKOFF`` setting) x 2**retry seconds,
    jittered; then it is dead-lettered with its traceback. ``async def`` functions run
    on an event loop in the worker.

    ``unique_for`` (seconds): an enqueue equal to one made within that time (same
    task, same arguments) enqueues nothing and returns the first one's result.
    ``soft_time_limit`` (seconds): the task gets :class:`SoftTimeLimitExceeded`, which
    it may catch. ``time_limit``: its worker process is stopped and replaced (by
    ``rc_worker``'s supervisor), and the run counts as a failed attempt.
    """

    def register(function: Callable[P, R]) -> Task[P, R]:
        task_name = name or f"{function.__module__}.{function.__qualname__}"
        new = Task(
            function,
            name=task_name,
            queue=queue,
            priority=priority,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            unique_for=unique_for,
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
        )
        existing = task_registry.find(new.name)
        if existing is not None and _origin(existing.func) != _origin(function):
            raise TaskError(
                f"two tasks are named {new.name!r}: {_origin(existing.func)} and "
                f"{_origin(function)}; give one of them another name= ."
            )
        task_registry.add(new.name, new)
        _warn_if_late(new)
        return new

    if func is not None:
        return register(func)
    return register


def _warn_if_late(registered: Task[Any, Any]) -> None:
    """Log a warning for a task registered after start-up outside a ``tasks`` module: a
    worker imports each installed app's ``tasks`` module at start-up and nothing else, so
    it may never know this task (a task in ``views.py`` is enqueued by the web process,
    then dead-lettered by the worker as unknown)."""
    from django.apps import apps

    module = registered.func.__module__
    if apps.ready and module.rpartition(".")[2] != "tasks":
        logger.warning(
            "Task %r was registered after start-up, when its module %s was imported: "
            "workers import each installed app's tasks module at start-up, so they will "
            "not know this task unless that module is imported from there",
            registered.name,
            module,
        )


def _origin(func: Callable[..., Any]) -> str:
    return f"{func.__module__}.{getattr(func, '__qualname__', func)}"


def get_task(name: str) -> Task[Any, Any]:
    """The task registered under ``name``, or :class:`TaskNotRegistered`."""
    found = task_registry.find(name)
    if found is None:
        raise TaskNotRegistered(f"no task is registered as {name!r}")
    return found


def find_task(name: str) -> Task[Any, Any] | None:
    """The task registered under ``name``, or ``None`` (the worker's lookup)."""
    return task_registry.find(name)


def registered_tasks() -> dict[str, Task[Any, Any]]:
    """Every registered task by name (a copy)."""
    return task_registry.all()


def backoff(retries: int, base: float | None = None) -> float:
    """Seconds to wait before retry number ``retries + 1``: exponential, capped, jittered.

    The jitter (x 0.5 to 1.5) spreads the retries of tasks that failed together.
    """
    base = conf.TASK_RETRY_BACKOFF if base is None else base
    delay = min(conf.TASK_RETRY_BACKOFF_MAX, base * 2.0**retries)
    return min(conf.TASK_RETRY_BACKOFF_MAX, delay * random.uniform(0.5, 1.5))


# -- the task a worker is running, and deferring it ---------------------------------


class RunningTask:
    """The task a worker is running now; :func:`current_task` returns it inside a task."""

    def __init__(self, message: TaskMessage) -> None:
        self.message = message
        self.deferred_for: float | None = None

    @property
    def id(self) -> str:
        return self.message.id

    def defer(self, seconds: float) -> None:
        """Ask the worker to run this task again in ``seconds`` instead of finishing it.

        The worker moves it to the delayed queue atomically when the task returns; a
        deferral does not count as a retry.
        """
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

        @task()
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
        names = ", ".join(busy.names)
        if running_task is None:
            raise LockNotAcquired(
                f"{names} is busy and no worker task is running to defer",
                name=busy.names[0] if busy.names else None,
            )
        running_task.defer(busy.retry_after if seconds is None else seconds)

    return on_busy


BACKEND_PATH = "redis_components.tasks.backend.RedisTaskBackend"


def queues_in_use() -> set[str]:
    """The queues of every registered task and of every Django Tasks backend of ours
    (a ``RedisTaskBackend``, or a subclass of it).

    A backend whose ``QUEUES`` is empty accepts any queue, so it adds only ``default``.
    Names that are not valid queue names are left out (the system checks report them).
    """
    names = {registered.queue for registered in task_registry.all().values()}
    for queues in django_backends().values():
        for name in queues or [DEFAULT_QUEUE]:
            try:
                names.add(validate_queue(name))
            except ValueError:
                continue
    return names


def django_backends() -> dict[str, list[Any]]:
    """The ``QUEUES`` of each Django Tasks backend of ours in ``settings.TASKS``, by alias
    (an empty list: any queue)."""
    from django.conf import settings

    backends = getattr(settings, "TASKS", {})
    found = {}
    for alias, params in backends.items() if isinstance(backends, dict) else ():
        if isinstance(params, dict) and _is_ours(params.get("BACKEND")):
            queues = params.get("QUEUES") or []
            found[str(alias)] = list(queues) if isinstance(queues, (list, tuple)) else []
    return found


def _is_ours(path: object) -> bool:
    """Whether the backend class at ``path`` is ``RedisTaskBackend`` or a subclass of it
    (told by name, so that this module need not import the backend, which imports it)."""
    if not isinstance(path, str):
        return False
    try:
        found = import_string(path)
    except ImportError:
        return False
    classes = getattr(found, "__mro__", ())
    return any(f"{kind.__module__}.{kind.__qualname__}" == BACKEND_PATH for kind in classes)
