r"""What a task is: :class:`RedisTask` (Django's ``Task`` with our options), and the
workflow steps it makes (``task.s(...)``, :func:`chain`, :func:`group`) and their plan.

None of it needs the backend's module, the store or the workflow codec (a test says so):
a task reaches its backend through its alias, as Django's tasks do.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime
import functools
import inspect
import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, ParamSpec, TypeAlias, TypeVar, cast

from django.db import transaction
from django.utils.module_loading import import_string

from .. import keys
from ..deprecation import deprecated
from ..exceptions import InvalidInput, InvalidTaskArguments, TaskNotRegistered
from .framework import BaseTaskBackend, InvalidTask, Task, TaskResult
from .limits import Limit, fill_key, validate_limits, validate_partition_key
from .messages import Barrier, Due, PlannedStep, TaskMessage, due_at, metadata_json
from .registry import Registry

# The alias of the backend of our @redis_task's tasks: not in settings.TASKS, needs nothing.
OWN_BACKEND = "redis_components"
# Its class, found by path as Django finds settings.TASKS' backends (see own_backend).
OWN_BACKEND_CLASS = "redis_components.tasks.backend.RedisTaskBackend"
P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("redis_components.tasks")

if TYPE_CHECKING:
    from .workflow_records import Workflow

    # Django's Task as django-stubs types it: generic in its function's parameters and
    # return type, so RedisTask[P, R] is a Task[P, R] to a type checker.
    _DjangoTask = Task
else:

    class _DjangoTask:
        """Django 6's ``Task`` is not generic at run time: ``_DjangoTask[P, R]`` is it."""

        def __class_getitem__(cls, parameters: object) -> type[Task]:
            return Task


class Prepared(NamedTuple):
    """A task about to be enqueued: its READY result, its message and payload, and its
    ``send`` span when tracing is on (``tracing.Sending``)."""

    result: TaskResult[..., Any]
    message: TaskMessage
    payload: str
    sending: Any = None


class QueueBackend(BaseTaskBackend):
    """A backend that puts tasks on our queues (``backend.RedisTaskBackend``): the steps of
    ``enqueue``, and the defaults of the options a task leaves at ``None``."""

    @property
    def max_retries(self) -> int:
        return int(self.options.get("MAX_RETRIES") or 0)

    @property
    def max_attempts(self) -> int | None:
        """``MAX_ATTEMPTS`` (Django's proposal, django/new-features#142), if set."""
        value = self.options.get("MAX_ATTEMPTS")
        return None if value is None else int(value)

    @property
    def backoff(self) -> Backoff | str | None:
        """``BACKOFF``: a function of (exception, task result), or its dotted path."""
        return cast("Backoff | str | None", self.options.get("BACKOFF"))

    @property
    def retry_backoff(self) -> float | None:
        value = self.options.get("RETRY_BACKOFF")
        return None if value is None else float(value)

    @property
    def time_limits(self) -> tuple[float | None, float | None]:
        return time_limits(self.options.get("TIME_LIMIT"), self.options.get("SOFT_TIME_LIMIT"))

    @abc.abstractmethod
    def prepare(
        self,
        task: Task[..., Any],
        args: Iterable[Any],
        kwargs: dict[str, Any],
        *,
        piped: bool = False,
        step: bool = False,
    ) -> Prepared: ...

    @abc.abstractmethod
    def due(self, task: Task[..., Any]) -> Due: ...

    @abc.abstractmethod
    def send(self, prepared: Prepared, due: Due) -> TaskResult[..., Any]: ...

    @abc.abstractmethod
    def send_many(self, batch: Sequence[tuple[Prepared, Due]]) -> list[TaskResult[..., Any]]: ...

    @abc.abstractmethod
    def write_workflow(
        self, steps: list[PlannedStep], barriers: list[Barrier], result: str
    ) -> Workflow: ...


@functools.cache
def own_backend() -> QueueBackend:
    """The backend of our ``@redis_task``'s tasks: any queue, no options, no settings."""
    backend = import_string(OWN_BACKEND_CLASS)(OWN_BACKEND, {"QUEUES": [], "OPTIONS": {}})
    return cast("QueueBackend", backend)


def optional_seconds(value: object, field: str) -> float | None:
    return None if value is None else keys.seconds(value, field, positive=True)


def time_limits(hard: object, soft: object) -> tuple[float | None, float | None]:
    """A task's ``time_limit`` and ``soft_time_limit`` (seconds, or None), checked."""
    hard_s, soft_s = optional_seconds(hard, "time_limit"), optional_seconds(soft, "soft_time_limit")
    if hard_s is not None and soft_s is not None and soft_s >= hard_s:
        raise InvalidInput(
            "soft_time_limit", f"must be shorter than time_limit ({soft_s:g} >= {hard_s:g} s)"
        )
    return hard_s, soft_s


# What decides the delay before a failed task's next attempt (django/new-features#142):
# called with the exception and the task's result (already FAILED, with this attempt's
# error); seconds (or a timedelta) until the next attempt, or None for no more.
Backoff: TypeAlias = Callable[[BaseException, Any], "float | datetime.timedelta | None"]

# The options a RedisTask adds to Django's Task.
TASK_OPTIONS = (
    "max_retries",
    "retry_backoff",
    "max_attempts",
    "backoff",
    "unique_for",
    "time_limit",
    "soft_time_limit",
    "limits",
    "partition_key",
)


def checked_options(func: Callable[..., Any], name: str, **options: Any) -> dict[str, Any]:
    """A task's options (:data:`TASK_OPTIONS`, ``None`` or absent: the default) as a
    :class:`RedisTask` keeps them, or :class:`InvalidInput` naming the bad one."""
    retries, attempts = options.get("max_retries"), options.get("max_attempts")
    hard, soft = time_limits(options.get("time_limit"), options.get("soft_time_limit"))
    check_retries(options)
    return {
        "max_retries": None if retries is None else keys.integer(retries, "max_retries", minimum=0),
        "retry_backoff": optional_seconds(options.get("retry_backoff"), "retry_backoff"),
        "max_attempts": None
        if attempts is None
        else keys.integer(attempts, "max_attempts", minimum=1),
        "backoff": options.get("backoff"),
        "unique_for": optional_seconds(options.get("unique_for"), "unique_for"),
        "time_limit": hard,
        "soft_time_limit": soft,
        "limits": validate_limits(options.get("limits"), func, name),
        "partition_key": validate_partition_key(options.get("partition_key"), func, name),
    }


def check_retries(given: dict[str, Any], *, upper: bool = False) -> None:
    """:class:`InvalidInput` for two options that say the same (``max_retries`` and
    ``max_attempts``, ``retry_backoff`` and ``backoff``; ``upper``: as a backend's
    ``OPTIONS`` name them) or a ``backoff`` that is neither callable nor a dotted path."""

    def name(option: str) -> str:
        return option.upper() if upper else option

    for old, new in (("max_retries", "max_attempts"), ("retry_backoff", "backoff")):
        if given.get(name(old)) is not None and given.get(name(new)) is not None:
            raise InvalidInput(name(new), f"give {name(new)} or {name(old)}, not both")
    backoff = given.get(name("backoff"))
    if backoff is None or callable(backoff):
        return
    if not isinstance(backoff, str) or "." not in backoff.strip("."):
        raise InvalidInput(
            name("backoff"),
            "must be a function of (exception, task_result) or its dotted path, "
            f"not {keys.shorten(backoff)}",
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RedisTask(_DjangoTask[P, R], Generic[P, R]):
    r"""Django's ``Task`` with our options; made by our :func:`redis_task`, or by Django's
    ``@task`` with :class:`RedisTaskBackend` (its ``task_class``)::

        @task(queue_name="email", max_attempts=4, backoff=my_backoff, unique_for=60)

    The options mean what :func:`redis_task`'s do; ``None`` takes the backend's
    ``OPTIONS`` (``unique_for``, ``limits`` and ``partition_key`` have none). Bad values
    raise ``InvalidTask`` when the task is made. A worker looks the task up by its name
    or module path, so ``using()`` keeps the options. ``registered_name``: the name our
    :func:`redis_task` registered it under (``None`` for a Django ``@task``). To a type
    checker it is generic as django-stubs' ``Task``: ``P``, the function's parameters
    (past its ``TaskContext``), ``R``, its (awaited) return type.
    """

    max_retries: int | None = None
    retry_backoff: float | None = None
    max_attempts: int | None = None
    backoff: Backoff | str | None = None
    unique_for: float | None = None
    time_limit: float | None = None
    soft_time_limit: float | None = None
    registered_name: str | None = None
    limits: tuple[Limit, ...] = ()
    partition_key: str | None = None
    # What an enqueue of it carries (given by using(metadata=...)); no part of its hash.
    metadata: dict[str, Any] | None = dataclasses.field(default=None, hash=False)

    @property
    def name(self) -> str:
        """The registered name of our ``@redis_task``; the function's name for Django's."""
        return self.registered_name or self.func.__name__

    if TYPE_CHECKING:
        # Django's methods, typed here as django-stubs types them on Task[P, R], so that
        # they keep P and R where the checker knows no typed django.tasks (Django 5.2
        # and its backport).
        def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult[P, R]: ...
        async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult[P, R]: ...
        def get_result(self, result_id: str) -> TaskResult[P, R]: ...
        async def aget_result(self, result_id: str) -> TaskResult[P, R]: ...
        def call(self, *args: P.args, **kwargs: P.kwargs) -> R: ...
        async def acall(self, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime.datetime | None = None,
        backend: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> RedisTask[P, R]:
        """Django's ``using()`` (a copy of the task, of this class), and ``metadata`` (Django's
        proposal, django/new-features#141): a dict that its enqueues carry, which the task
        reads as ``context.metadata`` and its result keeps as ``result.metadata``.
        :class:`InvalidInput` for metadata that is not a JSON object, naming the key, or
        over ``TASK_METADATA_MAX_BYTES``."""
        task = Task.using(
            self, priority=priority, queue_name=queue_name, run_after=run_after, backend=backend
        )
        found = cast("RedisTask[P, R]", task)
        if metadata is None:
            return found
        # (A copy, as JSON reads it back: the caller's dict may change after.)
        return dataclasses.replace(found, metadata=json.loads(metadata_json(metadata)))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Deprecated: run the task here with :meth:`call` (Django's tasks are not
        callable); a plain call of our ``@redis_task`` works, with a warning, until 0.3."""
        if self.registered_name is None:
            raise TypeError(f"a task is not callable: use {self.name}.call(...)")
        deprecated(
            f"calling task {self.name!r}", "use .call(...), as for Django's tasks", stacklevel=2
        )
        return self.call(*args, **kwargs)

    def partition_by(
        self, limits: list[list[Any]] | None, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> str | None:
        """What picks the partition of this call (``None``: its random id): its
        ``partition_key``, else its first filled limit's key, so that a limit is exact."""
        if self.partition_key is not None:
            return fill_key(self.partition_key, self.func, args, kwargs, self.takes_context)
        return str(limits[0][1]) if limits else None

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This task's call as a workflow's step (see :mod:`~redis_components.tasks.workflows`):
        after another step, it gets that step's result as its first argument."""
        return signature(self, *args, **kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """:meth:`s`, immutable: it takes no result from the steps before it."""
        return self.s(*args, **kwargs).set(immutable=True)

    @property
    def queue(self) -> str:
        """Deprecated: :attr:`queue_name` (Django's name), until 0.3."""
        deprecated("a task's .queue", "use .queue_name", stacklevel=2)
        return self.queue_name

    def get_backend(self) -> BaseTaskBackend:
        if self.backend == OWN_BACKEND:
            return own_backend()
        return Task.get_backend(self)

    def enqueue_in(self, delay: float, /, *args: P.args, **kwargs: P.kwargs) -> TaskResult[P, R]:
        """Send the task to run ``delay`` seconds from now (by the Redis server's clock)."""
        milliseconds = math.ceil(keys.seconds(delay, "seconds") * 1000)
        backend = self._validated_backend()
        result = backend.send(backend.prepare(self, args, kwargs), Due(after_ms=milliseconds))
        return cast("TaskResult[P, R]", result)

    def enqueue_at(
        self, when: datetime.datetime, /, *args: P.args, **kwargs: P.kwargs
    ) -> TaskResult[P, R]:
        """Send the task to run at ``when`` (aware): ``using(run_after=when).enqueue(...)``."""
        due_at(when)  # InvalidInput for a naive or too distant time, as enqueue_in's
        return self.using(run_after=when).enqueue(*args, **kwargs)

    def enqueue_many(self, calls: Iterable[Sequence[Any]]) -> list[TaskResult[P, R]]:
        """Enqueue a task per item of ``calls``, the tuple (or list) of its positional
        arguments, in one round trip per 1,000 tasks: as
        :func:`redis_components.enqueue_many` does."""
        self._validated_backend()
        return cast("list[TaskResult[P, R]]", _send_many(_calls_of(self, calls)))

    def enqueue_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult[P, R]:
        """Enqueue when the current database transaction commits; never if it rolls back.

        The arguments are encoded now (a bad one raises here); the result is returned at
        once. Outside a transaction it enqueues at once. Inside one, an enqueue that fails
        at commit (``QueueFull``, Redis down, ...) is logged with the task id, not raised.
        """
        backend = self._validated_backend()
        prepared = backend.prepare(self, args, kwargs)
        due = backend.due(self)
        if not transaction.get_connection().in_atomic_block:
            return cast("TaskResult[P, R]", backend.send(prepared, due))

        def send() -> None:
            try:
                backend.send(prepared, due)
            except Exception:
                logger.exception(
                    "Task %s (%s) was not enqueued after its transaction committed",
                    prepared.result.id,
                    self.name,
                )

        transaction.on_commit(send)
        return cast("TaskResult[P, R]", prepared.result)

    def _validated_backend(self) -> QueueBackend:
        backend = self.get_backend()
        if not isinstance(backend, QueueBackend):
            raise InvalidTask(f"the backend {self.backend!r} is not a RedisTaskBackend")
        backend.validate_task(self)
        return backend


# Our @redis_task's tasks by name (registered as their modules are imported): how a worker
# finds the task of a message.
task_registry: Registry[RedisTask[..., Any]] = Registry()


def get_task(name: str) -> RedisTask[..., Any]:
    """The task registered under ``name``, or :class:`TaskNotRegistered`."""
    found = task_registry.find(name)
    if found is None:
        raise TaskNotRegistered(f"no task is registered as {name!r}")
    return found


def registered_tasks() -> dict[str, RedisTask[..., Any]]:
    """Every registered task by name (a copy)."""
    return task_registry.all()


def as_enqueued(
    found: RedisTask[..., Any], priority: int, queue: str, run_after: datetime.datetime | None
) -> RedisTask[..., Any]:
    """A registered task with the priority and queue of one enqueue (itself if equal)."""
    if (found.priority, found.queue_name, run_after) == (priority, queue, None):
        return found
    return dataclasses.replace(found, priority=priority, queue_name=queue, run_after=run_after)


def find_django_task(path: str) -> Task[..., Any]:
    """The Django task at the dotted ``path``, or ``ImportError``/``TypeError``."""
    found = import_string(path)
    if not isinstance(found, Task):
        raise TypeError(f"{path!r} is not a Django task")
    return found


def bind_arguments(
    task: Task[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    piped: bool = False,
    error: type[InvalidTaskArguments] = InvalidTaskArguments,
) -> None:
    """``error`` naming the task and what is wrong, unless its function can take ``args``
    and ``kwargs`` (after its context, and ``piped``: after a workflow step's input)."""
    parameters, positional = _signature(task.func) or (None, -1)
    if parameters is None:
        return
    leading = task.takes_context + piped
    if not kwargs and len(args) + leading == positional:
        return  # (the usual call: each parameter given by position, no binding needed)
    try:
        parameters.bind(*(None,) * leading, *args, **kwargs)
    except TypeError as problem:
        name = task.registered_name if isinstance(task, RedisTask) else None
        raise error(name or task.module_path, str(problem)) from None


@functools.lru_cache(maxsize=1024)
def _signature(func: Callable[..., Any]) -> tuple[inspect.Signature, int] | None:
    """``func``'s signature, and its parameter count if all are positional (else -1)."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    given = signature.parameters.values()
    return signature, len(given) if all(one.kind in kinds for one in given) else -1


# The most steps one workflow may have: its creation is one script, which must stay short.
MAX_STEPS = 10_000


class _Step:
    def enqueue(self) -> Workflow:
        """Enqueue this as a workflow of its own: all of it, or nothing."""
        return enqueue_workflow(cast("Node", self))


@dataclass(frozen=True)
class Signature(_Step):
    """A call of a task to make as a workflow's step: ``task.s(*args, **kwargs)``.

    A step after another gets that step's result as its first argument (before
    ``args``), unless it is ``immutable`` (``task.si(...)``). With ``allow_failure``
    it runs even when a step it waits for failed for good (or was cancelled), and gets
    that step's failure record in place of its result: a dict ``{"step": <task id>,
    "status": "FAILED" or "CANCELLED", "error": {...}}`` (see :func:`is_failure`).
    """

    task: Task[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    immutable: bool = False
    allow_failure: bool = False

    def set(self, *, immutable: bool | None = None, allow_failure: bool | None = None) -> Signature:
        """This signature with ``immutable`` or ``allow_failure`` changed."""
        changes: dict[str, Any] = {"immutable": immutable, "allow_failure": allow_failure}
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def then(self, step: Node, *, allow_failure: bool = False) -> Chain:
        """``chain(self, step)``."""
        return chain(self, _after(step, allow_failure))


@dataclass(frozen=True)
class Chain(_Step):
    """Steps run one after the other, each given the previous one's result
    (:func:`chain`). Its result is its last step's."""

    steps: tuple[Node, ...]

    def then(self, step: Node, *, allow_failure: bool = False) -> Chain:
        """This chain with ``step`` after it."""
        return Chain((*self.steps, _after(step, allow_failure)))


@dataclass(frozen=True)
class Group(_Step):
    """Steps run in parallel (:func:`group`). Its result is the list of its members'
    results, in the group's order."""

    members: tuple[Node, ...]

    def then(self, step: Node, *, allow_failure: bool = False) -> Chain:
        """A fan-in: ``step`` runs once every member succeeded, given their results (with
        ``allow_failure``: once every member ended, failure records in the failed places)."""
        return Chain((self, _after(step, allow_failure)))


Node: TypeAlias = Signature | Chain | Group


def signature(task: Task[..., Any], *args: Any, **kwargs: Any) -> Signature:
    """A call of ``task`` (any task whose backend is a :class:`RedisTaskBackend`, ours or
    Django's ``@task``) as a workflow's step; ``task.s(...)`` for ours."""
    if not isinstance(task, Task):
        raise InvalidInput("task", f"must be a task (made by @task), not {type(task).__name__}")
    backend = task.get_backend()
    if not isinstance(backend, QueueBackend):
        raise InvalidInput(
            "task", f"{task.name!r} runs on {type(backend).__name__}: steps need a RedisTaskBackend"
        )
    if task.run_after is not None:
        raise InvalidInput("task", "a step runs when the steps before it end: no run_after")
    backend.validate_task(task)
    return Signature(task, args, kwargs)


def chain(*steps: Node) -> Chain:
    """Run ``steps`` one after the other, each given the previous one's result as its
    first argument; a step that fails for good stops the chain."""
    if not steps:
        raise InvalidInput("steps", "a chain needs at least one step")
    return Chain(tuple(_node(step, "steps") for step in steps))


def group(steps: Iterable[Node]) -> Group:
    """Run ``steps`` (a list, or any iterable: a generator too) in parallel. An empty
    group's result is ``[]``, at once."""
    if isinstance(steps, (Signature, Chain, Group)) or not isinstance(steps, Iterable):
        raise InvalidInput("steps", "must be an iterable of steps (task.s(...)), as a list")
    return Group(tuple(_node(step, "steps") for step in steps))


def is_failure(value: object) -> bool:
    """Whether a step's argument is the failure record of a step before it (which only
    a step with ``allow_failure`` can get)."""
    return (
        isinstance(value, dict)
        and set(value) <= {"step", "status", "error", "failed"}
        and value.get("status") in ("FAILED", "CANCELLED", "NOT_RUN")
    )


def _node(step: object, name: str) -> Node:
    if isinstance(step, (Signature, Chain, Group)):
        return step
    if isinstance(step, Task):
        raise InvalidInput(name, f"{step.name!r} is a task, not a step: use {step.name}.s(...)")
    raise InvalidInput(name, f"must hold steps (task.s(...)), not {type(step).__name__}")


def _after(step: Node, allow_failure: bool) -> Node:
    step = _node(step, "step")
    if not allow_failure:
        return step
    if not isinstance(step, Signature):
        raise InvalidInput("allow_failure", "applies to one step: set it on a signature")
    return step.set(allow_failure=True)


class _Plan:
    """The graph of steps that a workflow writes."""

    def __init__(self) -> None:
        self.steps: list[PlannedStep] = []
        self.barriers: list[Barrier] = []

    def link(self) -> None:
        """Put a barrier between each set of several parents and its several children."""
        children: dict[tuple[int, ...], list[PlannedStep]] = {}
        for step in self.steps:
            if len(step.parents) > 1:
                children.setdefault(step.parents, []).append(step)
        for parents, kids in children.items():
            if len(kids) < 2:
                continue
            number = len(self.steps) + len(self.barriers) + 1
            templates = {kid.template for kid in kids} - {None}
            template = templates.pop() if len(templates) == 1 else None
            self.barriers.append(
                Barrier(
                    number=number, parents=parents, kids=[k.number for k in kids], template=template
                )
            )
            moved = {kid.number for kid in kids}  # a set: a parent may have thousands of kids
            for parent in parents:
                step = self.steps[parent - 1]
                step.kids = [*(k for k in step.kids if k not in moved), number]
            for kid in kids:
                kid.parents = (number,)
                if template is not None and kid.template == template:
                    kid.template, kid.input = None, number

    def add(
        self, node: Node, parents: tuple[int, ...], template: str | None
    ) -> tuple[str, tuple[int, ...]]:
        """Add ``node`` after ``parents``, given ``template`` as its input; its result's
        template, and the steps whose ends make that result."""
        if isinstance(node, Signature):
            number = len(self.steps) + 1
            if number > MAX_STEPS:
                raise InvalidInput("steps", f"a workflow has at most {MAX_STEPS:,} steps")
            backend = node.task.get_backend()
            assert isinstance(backend, QueueBackend)  # signature() checked it
            given = None if node.immutable else template
            # (Its id names its queue's home, where it runs; see lib/flow.lua.)
            piped = given is not None  # its input comes before its arguments
            prepared = backend.prepare(node.task, node.args, node.kwargs, piped=piped, step=True)
            message = prepared.message
            self.steps.append(
                PlannedStep(
                    number=number,
                    message=message,
                    parents=parents,
                    template=given,
                    allow_failure=node.allow_failure,
                )
            )
            for parent in parents:
                self.steps[parent - 1].kids.append(number)
            return f"@{number}", (number,)
        if isinstance(node, Chain):
            for step in node.steps:
                template, parents = self.add(step, parents, template)
            assert template is not None  # a chain has a step
            return template, parents
        results: list[str] = []
        ends: list[int] = []
        for member in node.members:
            result, last = self.add(member, parents, template)
            results.append(result)
            ends += last
        # An empty group has ended when the steps before it have.
        return "[" + ",".join(results) + "]", tuple(dict.fromkeys(ends)) if results else parents


def enqueue_many(calls: Iterable[Signature]) -> list[TaskResult[Any, Any]]:
    """Enqueue a task for each of ``calls``, made by ``task.s(*args, **kwargs)`` (or
    :func:`signature` for Django's ``@task``; a signature's ``immutable`` and
    ``allow_failure`` mean nothing here): their results, in the same order, as
    ``enqueue`` would return each (a unique task's duplicate gives the first one's).

    Every call is prepared first (a bad argument raises before anything is written);
    then the tasks of each queue home are written by one script call per 1,000, one
    round trip each. A call is all or nothing: where a queue's limit
    (``TASK_QUEUE_LIMITS``) would be passed, none of its tasks is enqueued, and
    :class:`~redis_components.exceptions.QueueFull` gives the results of the tasks that
    earlier calls enqueued (``results``). For delayed tasks (a signature has no
    ``run_after``), ``task.using(run_after=...).enqueue_many(...)``.
    """

    def unpacked() -> Iterator[tuple[Task[..., Any], Sequence[Any], dict[str, Any]]]:
        for call in calls:
            if not isinstance(call, Signature):
                kind = type(call).__name__
                raise InvalidInput("calls", f"each must be a task.s(...), not {kind}")
            yield call.task, call.args, call.kwargs

    return _send_many(unpacked())


def _send_many(
    calls: Iterable[tuple[Task[..., Any], Sequence[Any], dict[str, Any]]],
) -> list[TaskResult[Any, Any]]:
    """Prepare each call (of a task whose backend is ours, checked), then write them."""
    batch: list[tuple[Prepared, Due]] = []
    backends: dict[int, QueueBackend] = {}  # (each task's, looked up once)
    try:
        for task, args, kwargs in calls:
            backend = backends.get(id(task))
            if backend is None:
                backend = backends[id(task)] = cast("QueueBackend", task.get_backend())
            batch.append((backend.prepare(task, args, kwargs), backend.due(task)))
    except BaseException as error:  # (the send spans of those prepared end, unsent)
        for prepared, _ in batch:
            if prepared.sending:
                prepared.sending.ended(error)
        raise
    # (Our backends share one store: any of them writes every task, and signals it.)
    return next(iter(backends.values())).send_many(batch) if batch else []


def _calls_of(
    task: RedisTask[..., Any], calls: Iterable[Sequence[Any]]
) -> Iterator[tuple[Task[..., Any], Sequence[Any], dict[str, Any]]]:
    """``task``'s calls of these positional arguments (its ``run_after`` kept)."""
    for args in calls:
        if not isinstance(args, (tuple, list)):
            raise InvalidInput(
                "calls", f"each must be the tuple of a call's arguments, not {type(args).__name__}"
            )
        yield task, args, {}


def enqueue_workflow(node: Node) -> Workflow:
    """Write the workflow of ``node`` (planned here, written by our backend) and enqueue its
    first steps, all or nothing."""
    plan = _Plan()
    result, _ = plan.add(_node(node, "workflow"), (), None)
    plan.link()
    return own_backend().write_workflow(plan.steps, plan.barriers, result)
