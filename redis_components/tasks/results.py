r"""Task result records: what Redis keeps of a task, whichever decorator made it, read
as :class:`TaskRecord`\ s and as Django's ``TaskResult`` (:func:`to_django`). A result
is kept ``TASK_RESULT_TTL`` seconds after its last change, then Redis expires it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from .. import keys
from ..exceptions import TaskResultDoesNotExist
from ..keys import django_datetime
from .framework import Task, TaskContext, TaskResult, TaskResultStatus
from .framework import TaskError as DjangoTaskError
from .store import Progress as Progress
from .store import TaskRecord as TaskRecord
from .store import TaskStatus as TaskStatus
from .store import TaskStore

# How a cancelled task reads in Django's results, which have no CANCELLED status.
CANCELLED = "redis_components.exceptions.TaskCancelled"

# (Django's are frozen, as ours must be; django-stubs types them as if they were not.)
if TYPE_CHECKING:
    _Result = TaskResult[Any, Any]
    _Context = TaskContext[Any, Any]
else:
    _Result, _Context = TaskResult, TaskContext


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RedisTaskResult(_Result):  # type: ignore[misc]
    """Django's ``TaskResult`` with ``metadata``, as Django's proposal has it
    (django/new-features#141): a dict, never ``None``: what the task saved last, else
    what it was enqueued with (``{}`` for none). Every result of ours is one. ``progress``:
    what the task said last of how far it is (``None``: nothing yet; docs/progress.md)."""

    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    progress: Progress | None = None

    def refresh(self) -> None:
        """Read the result again, its metadata too."""
        self._update(self.task.get_backend().get_result(self.id))

    async def arefresh(self) -> None:
        """:meth:`refresh`, awaited."""
        self._update(await self.task.get_backend().aget_result(self.id))

    def refresh_progress(self) -> None:
        """Read its progress again, and nothing else, in one command."""
        object.__setattr__(self, "progress", get_progress(self.id))

    def _update(self, found: TaskResult[Any, Any]) -> None:
        for field in dataclasses.fields(self):
            if field.name != "task":  # (its task stays as given: using() may change it)
                object.__setattr__(self, field.name, getattr(found, field.name))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RedisTaskContext(_Context):  # type: ignore[misc]
    """Django's ``TaskContext``, with the metadata of Django's proposal
    (django/new-features#141), which a worker gives a task of ``takes_context=True``.
    ``metadata`` is its result's (a dict, never ``None``): change it in place; it is saved
    as the run ends, whatever its end, if it changed, or at once by :meth:`save_metadata`."""

    _save: Callable[[], bool] = dataclasses.field(repr=False, compare=False)
    # (keeps the progress said: gives the save to make now, if one is due)
    _progress: Callable[[float, float | None, str], Callable[[], bool] | None] = dataclasses.field(
        repr=False, compare=False
    )

    @property
    def metadata(self) -> dict[str, Any]:
        return cast("RedisTaskResult", self.task_result).metadata

    def save_metadata(self) -> bool:
        """Save ``metadata`` now, in one command. :class:`InvalidInput` if it is not a JSON
        object or over ``TASK_METADATA_MAX_BYTES``; False when this run no longer holds its
        task (it was given up for dead, and taken again): nothing is saved then."""
        return self._save()

    async def asave_metadata(self) -> bool:
        """:meth:`save_metadata`, in a thread."""
        return await asyncio.to_thread(self._save)

    def set_progress(self, done: float, total: float | None = None, note: str = "") -> bool:
        """Say how far the task is: ``done`` (a finite number >= 0) of ``total`` (``None``
        or a finite number > 0), with a ``note`` of at most 200 characters; any process
        reads it as ``result.progress``. Saved at most every ``TASK_PROGRESS_INTERVAL``
        seconds (one command); what a call does not save is kept, and saved by a later
        call or with the run's end, so calling it often costs little. :class:`InvalidInput`
        naming the bad argument (nothing changes); False when this run no longer holds
        its task (it was given up for dead, and taken again): nothing is saved then."""
        save = self._progress(done, total, note)
        return True if save is None else save()

    async def aset_progress(self, done: float, total: float | None = None, note: str = "") -> bool:
        """:meth:`set_progress`, its save (if one is due) in a thread."""
        save = self._progress(done, total, note)
        return True if save is None else await asyncio.to_thread(save)


MAX_TASK_ID = 100
# The end of a traceback is kept in a result and a dead letter; the start is in the log.
MAX_TRACEBACK = 20_000


def describe(error: BaseException) -> tuple[str, str]:
    """An attempt's error as results keep it: the exception's class path, its traceback."""
    kind = type(error)
    trace = "".join(traceback.format_exception(kind, error, error.__traceback__))
    return f"{kind.__module__}.{kind.__qualname__}", trace[-MAX_TRACEBACK:]


def error_json(class_path: str, trace: str) -> str:
    """An attempt's error as a result stores it (the fields of Django's ``TaskError``)."""
    return json.dumps({"exception_class_path": class_path, "traceback": trace}, ensure_ascii=False)


def get_record(task_id: str) -> TaskRecord:
    """The record of task ``task_id``; :class:`TaskResultDoesNotExist` if none is kept."""
    found = read_records([task_id])[0]
    if found is None:
        raise TaskResultDoesNotExist(f"no result is kept for task {task_id!r}")
    return found


def read_records(task_ids: list[str]) -> list[TaskRecord | None]:
    """The records of several tasks in one round trip (``None`` where none is kept, or
    where one cannot be read: reading never fails on bad data)."""
    for task_id in task_ids:
        keys.validate_name(task_id, "task_id", MAX_TASK_ID)
    return TaskStore().task_records(task_ids)


def get_progress(task_id: str) -> Progress | None:
    """What task ``task_id`` said last of how far it is, read in one command, whatever
    its state; ``None`` when it said nothing, or its result is not kept."""
    keys.validate_name(task_id, "task_id", MAX_TASK_ID)
    return TaskStore().task_progress([task_id])[0]


async def aget_progress(task_id: str) -> Progress | None:
    """:func:`get_progress`, in a thread."""
    return await asyncio.to_thread(get_progress, task_id)


def to_django(task: Task[..., Any], record: TaskRecord) -> RedisTaskResult:
    """A result record as Django's ``TaskResult`` of ``task`` (Django has no CANCELLED:
    a cancelled task is FAILED, its last error a ``TaskCancelled``)."""
    errors = [
        DjangoTaskError(exception_class_path=error.exception_class_path, traceback=error.traceback)
        for error in record.errors
    ]
    status = record.status.value
    if record.status is TaskStatus.CANCELLED:
        status = "FAILED"
        errors.append(DjangoTaskError(exception_class_path=CANCELLED, traceback="it was cancelled"))
    result = RedisTaskResult(
        task=task,
        id=record.id,
        status=TaskResultStatus(status),
        enqueued_at=django_datetime(record.enqueued_at),
        started_at=django_datetime(record.started_at),
        finished_at=django_datetime(record.finished_at),
        last_attempted_at=django_datetime(record.last_attempted_at),
        args=record.args,
        kwargs=record.kwargs,
        backend=task.backend,
        errors=errors,
        worker_ids=record.worker_ids,
        metadata=record.metadata,
        progress=record.progress,
    )
    if record.status is TaskStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", record.return_value)
    return result
